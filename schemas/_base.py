"""Shared building blocks of every record: strict base model, id and time types.

No I/O here. Records serialise with orjson (``to_json`` / ``from_json``) and
reject unknown fields, so a typo in a spec is an error, not a silent default.
"""

from __future__ import annotations

import datetime as _dt
from typing import Annotated, Any, Self

import orjson
from pydantic import BaseModel, ConfigDict, StringConstraints, ValidationError

__all__ = [
    "ID_ALPHABET",
    "Id",
    "ModelName",
    "Record",
    "ShortText",
    "Timestamp",
    "describe_validation_error",
    "iso_from_ms",
]

ID_ALPHABET = "1-128 characters from A-Z a-z 0-9 _ . : -"
Id = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.:-]{1,128}$")]
ModelName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.:/@-]{1,128}$")]
ShortText = Annotated[str, StringConstraints(max_length=4000)]
Timestamp = Annotated[str, StringConstraints(pattern=r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$")]


def iso_from_ms(ms: int) -> str:
    """Milliseconds since the epoch (e.g. from Redis ``TIME``) as ISO-8601 UTC with ``Z``."""
    moment = _dt.datetime.fromtimestamp(ms / 1000, tz=_dt.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


class Record(BaseModel):
    """Base of every stored or exchanged record: strict, orjson in and out."""

    # allow_inf_nan=False: NaN and infinities are refused everywhere (JSON has no such numbers, and
    # a NaN limit or amount would compare false with everything)
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=False, validate_default=True, allow_inf_nan=False)

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    def to_json(self) -> bytes:
        return orjson.dumps(self.model_dump(mode="json"))

    @classmethod
    def from_json(cls, data: bytes | str) -> Self:
        """Parse with orjson, then validate; bad JSON raises ``ValueError`` with one line."""
        try:
            raw = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise ValueError(f"not valid JSON: {exc}") from None
        return cls.model_validate(raw)


_FRIENDLY = {
    "string_pattern_mismatch": None,  # filled per pattern below
    "missing": "required field is missing",
}


def describe_validation_error(exc: ValidationError, limit: int = 5, unknown: str = "unknown field; remove it") -> str:
    """A pydantic error as one readable line: ``field.path: what is wrong; ...`` (``unknown``: what an
    unknown key is called)."""
    parts: list[str] = []
    errors = exc.errors(include_url=False)
    for err in errors[:limit]:
        loc = ".".join(str(p) for p in err["loc"]) or "(whole record)"
        kind = err["type"]
        if kind == "string_pattern_mismatch":
            pattern = str(err.get("ctx", {}).get("pattern", ""))
            msg = f"must be {ID_ALPHABET}" if "{1,128}" in pattern else f"must match {pattern}"
        else:
            msg = unknown if kind == "extra_forbidden" else _FRIENDLY.get(kind) or err["msg"].removeprefix("Value error, ")
        parts.append(f"{loc}: {msg}")
    if len(errors) > limit:
        parts.append(f"and {len(errors) - limit} more")
    return "; ".join(parts)
