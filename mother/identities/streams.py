"""The streams Mother reads, and who wrote each entry: its own three (submissions, commands, events),
the workers' ``mother:spawns``, and two per principal. The identity of an entry is its stream's: a
principal's streams are writable by its ACL user alone, so Mother never asks the entry who it is."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Literal

from mother import keys
from mother.identities.principals import load_all
from mother.streams import ensure_group
from schemas.principal import Principal

__all__ = ["ConsumedStreams", "Source"]


@dataclass(frozen=True)
class Source:
    """A stream Mother reads: what its entries are (``role``) and who may write it (``origin``: Mother's
    own credentials, a principal, or workers submitting spawn_run children)."""

    stream: str
    role: Literal["submissions", "commands", "events"]
    origin: Literal["service", "principal", "spawn"] = "service"
    principal: Principal | None = None

    def ref(self, entry_id: str) -> str:
        """The entry's name across streams (entry ids are only unique within one stream): the id
        itself on Mother's own streams, ``{principal}:{id}`` or ``spawn:{id}`` on the others."""
        if self.principal is not None:
            return f"{self.principal.name}:{entry_id}"
        if self.origin == "spawn":
            return f"spawn:{entry_id}"
        return entry_id

    def reply_key(self, entry_id: str) -> str:
        if self.principal is not None:
            return keys.principal_reply_key(self.principal.name, entry_id)
        return keys.command_reply_key(entry_id)


# Mother's own streams: written with service credentials (Mother's user, an administrator's), the
# events by workers
OWN = (
    Source(keys.EVENTS_STREAM, "events"),
    Source(keys.COMMANDS_STREAM, "commands"),
    Source(keys.SUBMISSIONS_STREAM, "submissions"),
    Source(keys.SPAWNS_STREAM, "submissions", "spawn"),
)


class ConsumedStreams:
    """The streams Mother reads now: its own, and each principal's (the registry is read again every
    ``refresh_seconds``; a new principal's streams get Mother's consumer group from their start)."""

    def __init__(self, client: Any, group: str, refresh_seconds: float = 2.0) -> None:
        self.client, self.group, self.refresh_seconds = client, group, refresh_seconds
        self.sources: dict[str, Source] = {s.stream: s for s in OWN}
        self._grouped: set[str] = set()
        self._read_at = float("-inf")

    def refresh(self, *, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._read_at < self.refresh_seconds:
            return
        self._read_at = now
        sources = {s.stream: s for s in OWN}
        for name, principal in load_all(self.client).items():
            for role, stream in (
                ("submissions", keys.principal_submissions_key(name)),
                ("commands", keys.principal_commands_key(name)),
            ):
                sources[stream] = Source(stream, role, "principal", principal)  # type: ignore[arg-type]
        for stream in sources:
            if stream not in self._grouped:
                ensure_group(self.client, stream, self.group)
                self._grouped.add(stream)
        self.sources = sources

    def forget_groups(self) -> None:
        """The groups must be made again (the server lost them: NOGROUP)."""
        self._grouped.clear()
        self._read_at = float("-inf")

    @property
    def streams(self) -> list[str]:
        return list(self.sources)

    def source(self, stream: str) -> Source:
        found = self.sources.get(stream)
        if found is not None:
            return found
        # a principal removed since its entries were read: its entries are no longer its
        role = "commands" if stream.startswith(keys.COMMANDS_STREAM) else "submissions"
        return Source(stream, role, "principal", None)  # type: ignore[arg-type]
