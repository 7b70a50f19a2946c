"""``rejection:{entry_id}``: why a submission entry was refused."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from schemas._base import Id, Record, Timestamp

__all__ = ["Rejection"]


class Rejection(Record):
    """A refused submission: the error, when, and enough of the entry to find it again."""

    entry_id: str
    error: str
    code: Literal["invalid_spec", "identity_refused", "rate_limited", "queue_full"] = "invalid_spec"
    retry_after: float | None = Field(
        None, description="seconds until the user may submit again (rate_limited)"
    )
    # the principal it came from (None: Mother's own submissions stream or the workers' spawns)
    principal: str | None = None
    at: Timestamp
    size_bytes: int
    preview: str = Field(description="the spec's first characters as submitted")
    run_id: Id | None = None
    user_id: Id | None = None
