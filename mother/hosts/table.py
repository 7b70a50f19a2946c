"""Which enrolled worker host gets the next job (Mother's side, read every half second): a live host
(Mother wrote its line from its last beat, within a heartbeat timeout) that takes that kind of job, with
the least load per worker: its busy workers, the jobs waiting on its queue, and the jobs Mother sent it a
moment ago (a job a worker took shows in the host's line at its next beat)."""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from typing import Any

import orjson
from rq.queue import Queue

from mother import keys
from mother.identities import hosts
from schemas.host import HOST_QUEUE_KINDS, Host

__all__ = ["REFRESH_SECONDS", "STOPPED", "HostTable", "LiveHost"]

# how long a read of the hosts serves the dispatches that follow it (each dispatch counts on its host)
REFRESH_SECONDS = 0.5
# how long a job Mother sent a host counts in its load on top of what the host's line and queue say
SENT_COUNTS_SECONDS = 1.0
# with no host live at the last read, how old a read a dispatch reads again (a host just started beats
# a moment after)
NONE_LIVE_SECONDS = 0.05
# what a host's line says when its pool stopped
STOPPED = "stopped"


@dataclass
class LiveHost:
    name: str
    kinds: tuple[str, ...]
    concurrency: int
    busy: int = 0
    # jobs waiting on its queues, by kind
    queued: dict[str, int] = field(default_factory=dict)
    sent: list[float] = field(default_factory=list)

    def load(self, now: float) -> float:
        self.sent = [t for t in self.sent if now - t < SENT_COUNTS_SECONDS]
        waiting = sum(self.queued.values())
        return (self.busy + waiting + len(self.sent)) / max(1, self.concurrency)

    def free(self) -> int:
        return self.concurrency - self.busy - sum(self.queued.values())


def _int(value: Any, default: int = 0) -> int:
    return (
        value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else default
    )


@dataclass
class HostTable:
    """The enrolled hosts as last read: live (a line), stopped (their pool said so) and missing (no line:
    not started, dead, or held up). :meth:`choose` picks a live host for a kind of job."""

    client: Any
    enrolled: dict[str, Host] = field(default_factory=dict)
    live: dict[str, LiveHost] = field(default_factory=dict)
    stopped: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    # live hosts Mother sends nothing to for now (hosts:avoided), unless no other host is live
    avoided: set[str] = field(default_factory=set)
    _at: float | None = None

    def refresh(self) -> None:
        enrolled = hosts.load_all(self.client)
        names = sorted(enrolled)
        pipe = self.client.pipeline(transaction=False)
        pipe.time()
        pipe.zrange(keys.HOSTS_AVOIDED, 0, -1, withscores=True)
        for name in names:
            pipe.get(keys.host_alive_key(name))
            for kind in HOST_QUEUE_KINDS:
                pipe.llen(Queue.redis_queue_namespace_prefix + keys.host_queue(name, kind))
        found = iter(pipe.execute())
        seconds, micros = next(found)
        now_ms = int(seconds) * 1000 + int(micros) // 1000
        avoided = {
            h.decode() if isinstance(h, bytes) else str(h)
            for h, until in next(found)
            if until > now_ms
        }
        live: dict[str, LiveHost] = {}
        stopped, missing = [], []
        for name in names:
            line = next(found)
            queued: dict[str, int] = {kind: int(next(found)) for kind in HOST_QUEUE_KINDS}
            if line is None:
                missing.append(name)
                continue
            text = line.decode() if isinstance(line, bytes) else line
            if text == STOPPED:
                stopped.append(name)
                continue
            try:
                got = orjson.loads(text)
            except orjson.JSONDecodeError:
                got = {}
            got = got if isinstance(got, dict) else {}
            sent = self.live[name].sent if name in self.live else []
            live[name] = LiveHost(
                name,
                tuple(enrolled[name].queues),
                max(1, _int(got.get("concurrency"), 1)),
                _int(got.get("busy")),
                queued,
                sent,
            )
        self.enrolled, self.live, self.stopped, self.missing = enrolled, live, stopped, missing
        self.avoided = avoided & set(live)
        self._at = time.monotonic()

    def choose(self, kind: str, exclude: str | None = None) -> str | None:
        """The live host taking ``kind`` jobs with the least load per worker (ties at random), counted as
        sent one more job; None when no such host is live (but ``exclude``)."""
        if self._older_than(NONE_LIVE_SECONDS if not self.live else REFRESH_SECONDS):
            self.refresh()
        candidates = [h for h in self.live.values() if kind in h.kinds and h.name != exclude]
        if not candidates:
            return None
        # a host avoided for now only when there is no other
        choices = [h for h in candidates if h.name not in self.avoided] or candidates
        now = time.monotonic()
        best = min(choices, key=lambda h: (h.load(now), random.random()))
        best.sent.append(now)
        return best.name

    def _older_than(self, seconds: float) -> bool:
        return self._at is None or time.monotonic() - self._at >= seconds

    def any_live(self, kind: str | None = None) -> bool:
        if self._older_than(REFRESH_SECONDS):
            self.refresh()
        return any(kind is None or kind in h.kinds for h in self.live.values())
