"""Heartbeats of phase attempts: Mother's watchdog fails an attempt whose heartbeat key
(``heartbeat:{run}:{index}:{attempt}``, a string with a time to live of ``service.heartbeat_timeout_seconds``)
is gone. Only the attempt's own ACL user may write that key: its password is the attempt's one-time result
token, which only the worker that claimed it holds (:mod:`mother.attempt_users`). So no other worker's
credentials can age an attempt into "lost".

A work-horse's own heartbeat thread costs each phase measurable time (starting it, and waking it at the
end, hands the GIL between threads while the horse waits on Redis: docs/benchmarks.md). So the worker that
forked the horse beats for the attempt it runs (from RQ's monitor loop, or its pool's parent does), and the
horse starts a thread of its own only when that worker dies first: Linux sends it ``ORPHAN_SIGNAL`` then
(PR_SET_PDEATHSIG). Where that signal cannot be armed, or no worker beats for the attempt (a phase run
in-process, or by a plain ``rq worker``), the phase beats for itself.
"""

from __future__ import annotations

import _thread
import os
import signal
import threading
from dataclasses import dataclass
from typing import Any

import redis

from mother import keys
from mother.attempt_users import REPORTED_MARK, REPORTED_MS, attempt_client
from mother.logs import get_logger
from mother.server import parent_death_signal

__all__ = ["ORPHAN_SIGNAL", "REPORTED", "REPORTED_MS", "AttemptBeat", "AttemptLine", "Heartbeat"]

log = get_logger("heartbeat")
ORPHAN_SIGNAL = signal.SIGUSR2
# how long a reported attempt's heartbeat key says so (Mother deletes it once it has read the result)
REPORTED = REPORTED_MARK


class AttemptLine:
    """One attempt's own connection (authenticated as its ACL user), made at first use: its beats, and the
    marks its holder leaves on its heartbeat key."""

    def __init__(self, url: str, member: str, token: str, ttl_ms: int, who: str = "") -> None:
        self.url, self.member, self.token, self.ttl_ms = url, member, token, ttl_ms
        self.who = who or f"{os.uname().nodename}:{os.getpid()}"
        self.key = keys.attempt_heartbeat_key(*keys.parse_heartbeat_member(member))
        self._client: redis.Redis | None = None

    def client(self) -> redis.Redis:
        if self._client is None:
            self._client = attempt_client(self.url, self.member, self.token)
        return self._client

    def beat(self) -> None:
        """The attempt is alive for another ``ttl_ms``. Raises what Redis raises (a refused password: the
        attempt is over, its user deleted)."""
        self.client().set(self.key, self.who, px=self.ttl_ms)

    def mark(self, text: str, ttl_ms: int) -> None:
        """Leave ``text`` on the heartbeat key for ``ttl_ms`` (``reported``: its result is on its way)."""
        self.client().set(self.key, text, px=ttl_ms)

    def drop(self) -> None:
        """The attempt died here (its horse did): the key goes, so Mother acts on it at once."""
        self.client().delete(self.key)

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None


class Heartbeat:
    """Beats for an attempt every interval from a daemon thread, on the attempt's own line. Started with
    ``_thread`` rather than ``threading.Thread.start``, which waits until the new thread has been
    scheduled."""

    def __init__(self, line: AttemptLine, interval_seconds: float) -> None:
        self.line, self.member, self.interval = line, line.member, interval_seconds
        # made by start(): most phases never need one
        self.stopped: threading.Event | None = None

    def start(self) -> None:
        # idempotent: the orphan signal and the phase may both start it
        if self.stopped is None:
            self.stopped = threading.Event()
            _thread.start_new_thread(self._run, (self.stopped,))

    def stop(self) -> None:
        if self.stopped is not None:
            self.stopped.set()

    def _run(self, stopped: threading.Event) -> None:
        while not stopped.wait(self.interval):
            if stopped.is_set():
                return
            try:
                self.line.beat()
            # a missed beat is retried next interval, on a new connection; Mother tolerates a few
            except Exception as exc:  # noqa: BLE001
                self.line.close()
                log.warning("heartbeat_failed", error=str(exc))


@dataclass
class AttemptBeat:
    """Who beats for the attempt a work-horse runs. ``member``: the attempt its worker beats for (None:
    no worker does). Made by the worker for each phase job; the horse finds it on its job."""

    member: str | None = None
    # the worker died (or it cannot be told that it would): the horse beats for itself
    orphaned: bool = False
    running: Heartbeat | None = None

    def watch_worker(self, worker_pid: int) -> None:
        """In the work-horse: take the beating over if the worker that forked it dies (at once when no
        parent-death signal can be armed here, or the worker is gone already)."""
        signal.signal(ORPHAN_SIGNAL, self._orphan)
        if not parent_death_signal(ORPHAN_SIGNAL) or os.getppid() != worker_pid:
            self._orphan()

    def _orphan(self, _signum: int = 0, _frame: Any = None) -> None:
        self.orphaned = True
        if self.running is not None:
            self.running.start()

    def begin(self, heartbeat: Heartbeat) -> None:
        """The phase is under way: it beats from a thread of its own unless its worker beats for it."""
        self.running = heartbeat
        if self.orphaned or self.member != heartbeat.member:
            heartbeat.start()

    def end(self) -> None:
        heartbeat, self.running = self.running, None
        if heartbeat is not None:
            heartbeat.stop()

    def own(self) -> bool:
        """Whether the phase beats for itself (no worker does, or its worker died): then it marks its
        key ``reported`` itself; else the worker's pool does, when the worker says the job is over."""
        return self.orphaned or self.member is None
