"""Mother's relay: what a phase attempt reports, appended to Mother's own streams by Mother.

A phase attempt may not append to Mother's streams: an ACL cannot allow ``XADD`` without its ``MAXLEN``,
which would trim what every other run appended (docs/security.md). It writes its result
(``attempt_result:{run}:{i}:{a}``) or the spec of a child it asks for (``spawn_request:{child}``) to a
key only it may write, and publishes that key's name on ``mother:relay``. The leading Mother's relay, a
thread of its own, appends it with ``mh_relay`` to ``mother:events`` or ``mother:spawns``, whence the
serving loop takes it as before (a consumer group: at-least-once).

A word on a channel reaches only who listens then. What the relay does not hear (no leader, Redis away,
its connection made again) is not lost: a result stays in its attempt's key, and Mother takes every
result waiting there when it becomes leader and each time the relay listens again
(:meth:`mother.watchdog.Watchdog.take_results`; one still there long after is taken at any time); a
child not taken in is asked for again by its waiting parent (:mod:`workers.spawn`). Anyone may publish
there who may write those keys: a word that names no such key, or a key that holds nothing, appends
nothing; a result taken twice is fenced like any stale one.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import redis

from mother import keys
from mother.client import EVENT_PHASE_RESULT
from mother.connection import Outage, redis_down
from mother.functions import call
from mother.logs import get_logger

__all__ = ["Relay"]

log = get_logger("mother.relay")

# the key prefixes an attempt may name, and where Mother appends what they hold
_ROUTES = {
    keys.ATTEMPT_RESULT_PREFIX: ("result", keys.EVENTS_STREAM),
    keys.SPAWN_REQUEST_PREFIX: ("spawn", keys.SPAWNS_STREAM),
}
# a word longer than any key an attempt may write is not one
_MOST = 512
# words that append nothing are logged at most once this often (with how many came): anyone who may
# publish there could otherwise fill Mother's log
QUIET_SECONDS = 10.0


class Relay:
    """The relay thread of one Mother. It appends only while ``leading()``; each time it listens
    (again) it sets :attr:`listening_again`, for the serving loop to take the results it may have
    missed."""

    def __init__(self, client: redis.Redis, leading: Callable[[], bool]) -> None:
        self.client = client
        self.leading = leading
        self.listening_again = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._unheeded = 0
        self._said_at = -QUIET_SECONDS

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="mother-relay", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _run(self) -> None:
        outage = Outage(log, "relay", stop=self._stop.is_set)
        while not self._stop.is_set():
            pubsub = self.client.pubsub()
            try:
                pubsub.subscribe(keys.RELAY_CHANNEL)
                while not self._stop.is_set():
                    message = pubsub.get_message(timeout=0.5)
                    if message is None:
                        continue
                    if message["type"] == "subscribe":
                        # redis-py subscribes again on a connection it makes again: this comes each time
                        outage.recovered()
                        self.listening_again.set()
                    elif message["type"] == "message":
                        self.relay(message["data"])
            # never ends the thread: logged, and listening starts again after a pause
            except Exception as exc:
                if redis_down(exc):
                    outage.failed(exc)
                else:
                    log.exception("relay_failed", error=str(exc), retry_in_seconds=1)
                    self._stop.wait(1.0)
            finally:
                pubsub.close()

    def relay(self, word: bytes | str) -> int | None:
        """Append what the key ``word`` names holds to its stream; returns ``mh_relay``'s reply (1:
        appended, 0: nothing there, -1: not a result), None for a word that names no key an attempt
        writes or while this Mother does not lead. Nothing it is sent raises but Redis going away."""
        if not self.leading():
            return None
        key = word.decode("utf-8", "replace") if isinstance(word, bytes) else str(word)
        route = next((r for p, r in _ROUTES.items() if key.startswith(p)), None)
        if route is None or len(key) > _MOST:
            self._unheeded_word(word=key[:200], why="names no result or spawn request")
            return None
        kind, stream = route
        try:
            done = int(call(self.client, "mh_relay", [key, stream], [kind, EVENT_PHASE_RESULT]))
        except redis.ResponseError as exc:
            # a key of the attempt's own that it made something else (a hash): nothing to append
            self._unheeded_word(word=key, why=str(exc)[:200])
            return None
        if done < 0:
            self._unheeded_word(word=key, why="it holds no result (payload)")
        return done

    def _unheeded_word(self, **fields: Any) -> None:
        """Log a word that appended nothing: the first, then at most one line per ``QUIET_SECONDS``
        with how many came since the last (the newest's word and why)."""
        self._unheeded += 1
        now = time.monotonic()
        if now - self._said_at >= QUIET_SECONDS:
            log.warning("relay_word_unheeded", words=self._unheeded, **fields)
            self._unheeded, self._said_at = 0, now
