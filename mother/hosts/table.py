"""Which registered worker host gets the next phase job (Mother's side, read every half second)."""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from typing import Any, TypeGuard

import orjson
from rq.queue import Queue

from mother import keys
from mother.config import AGENTS_QUEUE, TOOLS_QUEUE

__all__ = [
    "AWAITING_QUEUE",
    "HOST_QUEUES",
    "REFRESH_SECONDS",
    "HostTable",
    "LiveHost",
    "is_phase_queue",
]

# how long a read of the hosts serves the dispatches that follow it (each dispatch counts on its host)
REFRESH_SECONDS = 0.5
# how long a job Mother sent a host counts in its load on top of what the host's line and queue say
SENT_COUNTS_SECONDS = 1.0
# with no host live at the last read, how old a read a dispatch reads again (a host just registered
# writes its line a moment after)
NONE_LIVE_SECONDS = 0.05
# what a host's line says when its pool stopped: it is forgotten at once
STOPPED = "stopped"
# the queues Mother addresses to a host; the maintenance queue (the GC) stays shared
HOST_QUEUES = (AGENTS_QUEUE, TOOLS_QUEUE)
# where a phase job waits while no host is live: no worker listens there, and it has no token anywhere
AWAITING_QUEUE = "awaiting_host"


@dataclass
class LiveHost:
    host_id: str
    concurrency: int
    # its workers running a job (its line), jobs waiting on its queues, and when Mother sent it the
    # jobs of the last SENT_COUNTS_SECONDS (a job a worker dequeued shows in its host's line a moment
    # later: until then it would count nowhere)
    busy: int = 0
    queued: int = 0
    sent: list[float] = field(default_factory=list)

    def load(self, now: float) -> float:
        self.sent = [t for t in self.sent if now - t < SENT_COUNTS_SECONDS]
        return (self.busy + self.queued + len(self.sent)) / max(1, self.concurrency)


def _int(value: Any, default: int = 0) -> int:
    return (
        value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else default
    )


@dataclass
class HostTable:
    """The registered hosts as last read: live (their line is there), stopped (their pool said so) and
    missing (no line: dead, or held up). :meth:`choose` picks the live host with the least load per slot."""

    client: Any
    # the server's clock (mother.clock.ServerClock); without one, no host is avoided
    clock: Any = None
    registered: dict[str, dict[str, Any]] = field(default_factory=dict)
    live: dict[str, LiveHost] = field(default_factory=dict)
    stopped: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    # live hosts Mother sends nothing to for now (hosts:avoided), unless no other host is live
    avoided: set[str] = field(default_factory=set)
    _at: float | None = None

    def refresh(self) -> None:
        raw = self.client.hgetall(keys.HOSTS_REGISTERED)
        registered: dict[str, dict[str, Any]] = {}
        for host_id, value in raw.items():
            host_id = host_id.decode() if isinstance(host_id, bytes) else host_id
            try:
                record = orjson.loads(value)
            except orjson.JSONDecodeError:
                continue
            if keys.is_host_id(host_id) and isinstance(record, dict):
                registered[host_id] = record
        ids = sorted(registered)
        pipe = self.client.pipeline(transaction=False)
        pipe.zrange(keys.HOSTS_AVOIDED, 0, -1, withscores=True)
        for host_id in ids:
            pipe.get(keys.host_alive_key(host_id))
            for base in HOST_QUEUES:
                pipe.llen(Queue.redis_queue_namespace_prefix + keys.host_queue(base, host_id))
        found = iter(pipe.execute())
        now_ms = self.clock.now_ms() if self.clock is not None else None
        avoided = {
            h.decode() if isinstance(h, bytes) else h
            for h, until in next(found)
            if now_ms is not None and until > now_ms
        }
        live: dict[str, LiveHost] = {}
        stopped, missing = [], []
        for host_id in ids:
            line = next(found)
            queued = sum(int(next(found)) for _ in HOST_QUEUES)
            if line is None:
                missing.append(host_id)
                continue
            text = line.decode() if isinstance(line, bytes) else line
            if text == STOPPED:
                stopped.append(host_id)
                continue
            try:
                got = orjson.loads(text)
            except orjson.JSONDecodeError:
                got = {}
            got = got if isinstance(got, dict) else {}
            # at most what it registered with: its line is its own word, rewritten at will
            most = max(1, _int(registered[host_id].get("concurrency"), 1))
            concurrency = min(most, _int(got.get("concurrency"), most))
            sent = self.live[host_id].sent if host_id in self.live else []
            live[host_id] = LiveHost(
                host_id, max(1, concurrency), _int(got.get("busy")), queued, sent
            )
        self.registered, self.live, self.stopped, self.missing = registered, live, stopped, missing
        self.avoided = avoided & set(live)
        self._at = time.monotonic()

    def choose(self, exclude: str | None = None) -> str | None:
        """The live host with the least load per slot (ties at random), counted as sent one more job;
        None when no host is live (but ``exclude``)."""
        if self._older_than(NONE_LIVE_SECONDS if not self.live else REFRESH_SECONDS):
            self.refresh()
        if not self.live:
            return None
        candidates = [h for h in self.live.values() if h.host_id != exclude]
        if not candidates:
            return None
        # a host avoided for now only when there is no other
        choices = [h for h in candidates if h.host_id not in self.avoided] or candidates
        now = time.monotonic()
        best = min(choices, key=lambda h: (h.load(now), random.random()))
        best.sent.append(now)
        return best.host_id

    def _older_than(self, seconds: float) -> bool:
        return self._at is None or time.monotonic() - self._at >= seconds

    def any_live(self) -> bool:
        if self._older_than(REFRESH_SECONDS):
            self.refresh()
        return bool(self.live)


def is_phase_queue(name: object) -> TypeGuard[str]:
    """Whether ``name`` is a queue Mother queues phase jobs on: a host's own, the one where jobs await a
    host, or a shared one."""
    if not isinstance(name, str):
        return False
    base, _, host = name.partition(".")
    return name == AWAITING_QUEUE or (base in HOST_QUEUES and (not host or keys.is_host_id(host)))
