"""Our streams' consumer groups, and their entries as text: anyone with a Redis client can XADD to
our streams, so an entry is read as bytes and decoded field by field, and one that is not UTF-8 is
named, never a crash."""

from __future__ import annotations

from typing import Any

import redis

from mother.errors import not_utf8

__all__ = ["as_text", "ensure_group"]


def ensure_group(client: Any, stream: str, group: str) -> None:
    """Create consumer group ``group`` on ``stream`` (and the stream) from its start, unless it exists."""
    try:
        client.xgroup_create(stream, group, id="0", mkstream=True)
    except redis.ResponseError as exc:
        if "BUSYGROUP" not in str(exc):
            raise


def as_text(entry_id: bytes, fields: dict[bytes, bytes]) -> tuple[str, dict[str, str], str | None]:
    """A stream entry read as bytes, as text: (entry id, fields, None), or, when a field is not
    UTF-8, the fields with each bad byte as U+FFFD (for the record) and an error naming the first."""
    decoded: dict[str, str] = {}
    error = None
    for raw_name, raw_value in fields.items():
        name, bad = _text(raw_name, "a field name")
        value, bad_value = _text(raw_value, f"field {name!r}")
        decoded[name] = value
        error = error or bad or bad_value
    return entry_id.decode(), decoded, error


def _text(raw: bytes, what: str) -> tuple[str, str | None]:
    try:
        return raw.decode(), None
    except UnicodeDecodeError as exc:
        return raw.decode(errors="replace"), (
            f"{what} is {not_utf8(raw, exc)}; stream entries must be UTF-8")
