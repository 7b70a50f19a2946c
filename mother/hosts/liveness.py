"""Phase attempts' liveness, Mother's alone: each attempt's heartbeat key
(``heartbeat:{run}:{index}:{attempt}``, a string with a time to live) and Mother's index of the attempts
to check (``mother:heartbeats``). Mother marks the key at the dispatch (its life covers the wait for a
worker), when the attempt begins, at each beat its host asks for while it holds the attempt, and when
its result comes (``reported``); the watchdog takes an attempt whose key is gone for lost."""

from __future__ import annotations

from typing import Any

from mother import keys

__all__ = [
    "DISPATCH_MARK",
    "REPORTED_MARK",
    "REPORTED_MS",
    "dispatch_mark",
    "dispatched_to",
    "queue_alive",
    "started_mark",
]

# what an attempt's heartbeat key holds until its worker begins it: "dispatched:{host}", or "dispatched"
# while it waits for a live host
DISPATCH_MARK = "dispatched"
# what it holds once its result is in Mother's events, and for how long: a result on its way to review is
# not a lost attempt (Mother deletes the key once the attempt is no longer current)
REPORTED_MARK = "reported"
REPORTED_MS = 24 * 3_600_000


def dispatch_mark(host: str | None) -> str:
    return f"{DISPATCH_MARK}:{host}" if host else DISPATCH_MARK


def dispatched_to(value: object) -> tuple[bool, str | None]:
    """Whether a heartbeat key's value is a dispatch mark, and the host it names (None: no host)."""
    if not isinstance(value, str) or not value.startswith(DISPATCH_MARK):
        return False, None
    rest = value[len(DISPATCH_MARK) :]
    if not rest:
        return True, None
    host = rest[1:]
    return (True, host) if rest[0] == ":" and keys.is_host(host) else (False, None)


def started_mark(host: str, worker: str = "") -> str:
    """What the key holds while the attempt runs: the host (and the worker) that began it."""
    return f"{host}:{worker}" if worker else host


def queue_alive(
    pipe: Any, run_id: str, index: int, attempt: int, *, ttl_ms: int, now_ms: int, host: str | None
) -> None:
    """With the dispatch: the attempt is alive until ``ttl_ms`` from now without a beat (its job may wait
    in the queue that long), and in Mother's index of attempts to check."""
    pipe.set(
        keys.attempt_heartbeat_key(run_id, index, attempt), dispatch_mark(host), px=max(1, ttl_ms)
    )
    pipe.zadd(keys.HEARTBEATS, {keys.heartbeat_member(run_id, index, attempt): now_ms})
