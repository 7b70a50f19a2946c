"""Entries of the ``activity`` stream: every decision the system makes, in order."""

from __future__ import annotations

from typing import Annotated, Any

import orjson
from pydantic import Field, JsonValue, StringConstraints

from schemas._base import Id, Record, Timestamp

__all__ = ["ACTIVITY_TYPES", "ActivityEvent"]

# The event types the system emits today; the stream accepts any lower_snake name.
ACTIVITY_TYPES = (
    "run_submitted",
    "run_rejected",
    "phase_dispatched",
    # a queued phase job moved to another worker host with its token (mother.hosts)
    "phase_moved",
    "phase_completed",
    "phase_failed",
    "phase_retried",
    "terminated",
)


class ActivityEvent(Record):
    """One activity entry. Stored in the stream as flat string fields."""

    type: Annotated[str, StringConstraints(pattern=r"^[a-z_]{1,64}$")]
    at: Timestamp
    run_id: Id | None = None
    phase: str | None = None
    data: dict[str, JsonValue] = Field(default_factory=dict)

    def to_fields(self) -> dict[str, str]:
        """The entry as XADD fields (absent values omitted, ``data`` as JSON)."""
        fields = {"type": self.type, "at": self.at}
        if self.run_id is not None:
            fields["run_id"] = self.run_id
        if self.phase is not None:
            fields["phase"] = self.phase
        if self.data:
            fields["data"] = orjson.dumps(self.data).decode()
        return fields

    @classmethod
    def from_fields(cls, fields: dict[str, Any]) -> ActivityEvent:
        """Rebuild an entry read back with XRANGE / XREAD (str or bytes fields)."""
        plain = {
            (k.decode() if isinstance(k, bytes) else k): (v.decode() if isinstance(v, bytes) else v)
            for k, v in fields.items()
        }
        data = orjson.loads(plain.pop("data")) if "data" in plain else {}
        return cls.model_validate({**plain, "data": data})
