"""Our streams' consumer groups, and their entries as text: anyone with a Redis client can XADD to
our streams, so an entry is read as bytes and decoded field by field, and one that is not UTF-8 is
named, never a crash."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import redis

from mother.errors import not_utf8

__all__ = ["Delivery", "as_text", "ensure_group", "group_backlog"]


@dataclass
class Delivery:
    """A stream entry being handled by a consumer group: the write that acts on it acknowledges it in the
    same transaction (:meth:`ack_with`), or, when no write does, the handler's caller does after it."""

    stream: str
    group: str
    entry_id: str
    acked: bool = False

    def ack_with(self, pipe: Any) -> None:
        """Queue the entry's XACK on ``pipe`` (once)."""
        if not self.acked:
            pipe.xack(self.stream, self.group, self.entry_id)
            self.acked = True

    def unack(self) -> None:
        """The write that carried the XACK was not applied: the entry is not acknowledged yet."""
        self.acked = False


def ensure_group(client: Any, stream: str, group: str) -> None:
    """Create consumer group ``group`` on ``stream`` (and the stream) from its start, unless it exists."""
    try:
        client.xgroup_create(stream, group, id="0", mkstream=True)
    except redis.ResponseError as exc:
        if "BUSYGROUP" not in str(exc):
            raise


def group_backlog(client: Any, stream: str, group: str) -> tuple[int, int | None] | None:
    """(pending, lag) of consumer group ``group`` on ``stream`` (``client`` decodes replies): entries delivered to it and not yet
    acknowledged, and entries not yet delivered (None when the server cannot tell: entries deleted
    ahead of the group's position). None when the stream or the group does not exist."""
    try:
        groups = client.xinfo_groups(stream)
    # no such stream
    except redis.ResponseError:
        return None
    for info in groups:
        if info["name"] == group:
            lag = info.get("lag")
            return int(info.get("pending") or 0), None if lag is None else int(lag)
    return None


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
            f"{what} is {not_utf8(raw, exc)}; stream entries must be UTF-8"
        )
