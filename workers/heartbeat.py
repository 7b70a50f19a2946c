"""Beats for the phase attempts a host runs: a ``beat`` ask naming them (:mod:`mother.asks.host`), which
Mother applies to each attempt the host holds. Mother's watchdog takes an attempt whose heartbeat key is
gone for lost.

A work-horse's own heartbeat thread costs each phase measurable time (starting it, and waking it at the
end, hands the GIL between threads while the horse waits on Redis: docs/benchmarks.md). So the worker that
forked the horse beats for the attempt it runs (from RQ's monitor loop, or its pool's parent does), and the
horse starts a thread of its own only when that worker dies first: Linux sends it ``ORPHAN_SIGNAL`` then
(PR_SET_PDEATHSIG). Where that signal cannot be armed, or no worker beats for the attempt (a phase run
in-process), the phase beats for itself.
"""

from __future__ import annotations

import _thread
import os
import signal
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from mother import keys
from mother.logs import get_logger
from mother.server import parent_death_signal
from workers.asking import Asker

__all__ = ["ORPHAN_SIGNAL", "AttemptBeat", "Heartbeat", "beat"]

log = get_logger("heartbeat")
ORPHAN_SIGNAL = signal.SIGUSR2


def beat(
    asker: Asker,
    members: Iterable[str],
    *,
    died: Iterable[str] = (),
    line: dict[str, Any] | str | None = None,
) -> None:
    """One ``beat`` ask (no reply waited for): the attempts ``members`` are alive, those in ``died`` lost
    now (their horse died), and the host's ``line``; the beat names this process (its pid: Mother's mark
    on the attempts says who beat last). Raises what Redis raises."""
    body: dict[str, Any] = {
        "by": str(os.getpid()),
        "attempts": [list(ids) for m in members if (ids := keys.heartbeat_member_ids(m))],
        "died": [list(ids) for m in died if (ids := keys.heartbeat_member_ids(m))],
    }
    if line is not None:
        body["line"] = line
    asker.ask("beat", body, wait=False)


class Heartbeat:
    """Beats for one attempt every interval from a daemon thread (``send``: one beat). Started with
    ``_thread`` rather than ``threading.Thread.start``, which waits until the new thread has been
    scheduled."""

    def __init__(self, member: str, send: Callable[[], None], interval_seconds: float) -> None:
        self.member, self.send, self.interval = member, send, interval_seconds
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
                self.send()
            # a missed beat is retried next interval; Mother tolerates a few
            except Exception as exc:  # noqa: BLE001
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
