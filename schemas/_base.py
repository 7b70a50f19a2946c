"""Shared building blocks of every record: strict base model, id and time types.

No I/O here. Records serialise with orjson (``to_json`` / ``from_json``) and
reject unknown fields, so a typo in a spec is an error, not a silent default.
"""

from __future__ import annotations

import datetime as _dt
from typing import Annotated, Any, Self

import orjson
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    StringConstraints,
    ValidationError,
)

__all__ = [
    "ID_ALPHABET",
    "MAX_JSON_DEPTH",
    "Id",
    "ModelName",
    "Record",
    "Seconds",
    "Shallow",
    "ShortText",
    "Timestamp",
    "build_models",
    "describe_validation_error",
    "iso_from_ms",
    "ms_from_iso",
    "within_depth",
]

ID_ALPHABET = "1-128 characters from A-Z a-z 0-9 _ . : -"
Id = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.:-]{1,128}$")]
ModelName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.:/@-]{1,128}$")]
ShortText = Annotated[str, StringConstraints(max_length=4000)]
Timestamp = Annotated[
    str, StringConstraints(pattern=r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$")
]

# Free-form JSON (metadata, tool arguments) nests at most this deep: the records that carry it sit a few
# levels down in RedisJSON documents, and RedisJSON refuses a document nested past 128 levels, which
# Mother only learnt when it stored the run.
MAX_JSON_DEPTH = 32


def within_depth(value: Any, depth: int = 0) -> Any:
    """``value`` itself, or ValueError when a list or mapping in it nests past MAX_JSON_DEPTH."""
    if depth > MAX_JSON_DEPTH:
        raise ValueError(f"nested more than {MAX_JSON_DEPTH} levels deep; flatten it")
    for child in (
        value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
    ):
        within_depth(child, depth + 1)
    return value


# Annotated[dict[...], Shallow]: free-form JSON of bounded depth
Shallow = AfterValidator(within_depth)


def _a_number(value: Any) -> Any:
    """A number as written: a boolean (``true`` would read as 1 second) or a numeric string is refused."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"must be a number of seconds, not {type(value).__name__} {value!r}"[:200])
    return value


# a duration: a real number, never true/false or "60"
Seconds = Annotated[float, BeforeValidator(_a_number)]


def iso_from_ms(ms: int) -> str:
    """Milliseconds since the epoch (e.g. from Redis ``TIME``) as ISO-8601 UTC with ``Z``."""
    moment = _dt.datetime.fromtimestamp(ms / 1000, tz=_dt.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def ms_from_iso(timestamp: str) -> int:
    """The inverse of :func:`iso_from_ms`: a record's ``Timestamp`` as milliseconds since the epoch."""
    return round(_dt.datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp() * 1000)


class Record(BaseModel):
    """Base of every stored or exchanged record: strict, orjson in and out."""

    # allow_inf_nan=False: NaN and infinities are refused everywhere (JSON has no such numbers, and
    # a NaN limit or amount would compare false with everything)
    model_config = ConfigDict(
        extra="forbid",
        str_strip_whitespace=False,
        validate_default=True,
        allow_inf_nan=False,
        defer_build=True,
    )

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
    # filled per pattern below
    "string_pattern_mismatch": None,
    "missing": "required field is missing",
    "recursion_depth_exceeded": "nested too deeply; flatten it",
}


def describe_validation_error(
    exc: ValidationError, limit: int = 5, unknown: str = "unknown field; remove it"
) -> str:
    """A pydantic error as one readable line: ``field.path: what is wrong; ...`` (``unknown``: what an
    unknown key is called)."""
    parts: list[str] = []
    errors = exc.errors(include_url=False)
    for err in errors[:limit]:
        path = [str(p) for p in err["loc"]]
        loc = (
            ".".join(path)
            if len(path) <= 12
            else ".".join(path[:6]) + f"… ({len(path)} levels down)"
        )
        loc = loc or "(whole record)"
        kind = err["type"]
        if kind == "string_pattern_mismatch":
            pattern = str(err.get("ctx", {}).get("pattern", ""))
            msg = f"must be {ID_ALPHABET}" if "{1,128}" in pattern else f"must match {pattern}"
        else:
            msg = (
                unknown
                if kind == "extra_forbidden"
                else _FRIENDLY.get(kind) or err["msg"].removeprefix("Value error, ")
            )
        parts.append(f"{loc}: {msg}")
    if len(errors) > limit:
        parts.append(f"and {len(errors) - limit} more")
    return "; ".join(parts)


def build_models(base: type[BaseModel] = Record) -> int:
    """Build the validator and serializer of every subclass of ``base`` now. Records are built at first use
    (``defer_build``: a CLI command pays only for the records it reads); a process that forks workers
    builds them before it forks, so the children share them instead of each building its own. Returns
    how many were built."""
    built, todo = 0, list(base.__subclasses__())
    while todo:
        model = todo.pop()
        todo += model.__subclasses__()
        if type(model.__pydantic_validator__).__name__ == "MockValSer":
            model.model_rebuild(force=True)
            built += 1
    return built
