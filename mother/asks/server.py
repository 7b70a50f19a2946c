"""Mother's ask server: a thread in every Mother process, leader and standbys alike, that reads every
enrolled host's ask stream (one consumer group, so each ask goes to one Mother) and applies what is asked.

Each pass reads at most ``service.ask_batch`` asks from each host's stream and handles them in turn, one
host's after another's: a host that floods its stream waits behind its own asks. An ask is acknowledged
with what applies it (:mod:`mother.asks.answer`); one a Mother died while handling stays pending and is
reclaimed by another after ``service.claim_idle_seconds``. An ask Mother fails to apply (not Redis going
away) is answered ``mother_failed`` at once, so its host does not wait out its timeout.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import redis

from mother import keys
from mother.asks.answer import Answer, finish, holds, not_held
from mother.asks.attempts import foreign
from mother.asks.handlers import HANDLERS
from mother.asks.wire import AskInvalid, parse_ask, refused
from mother.config import Settings
from mother.connection import Outage, redis_down
from mother.errors import MotherError
from mother.identities import hosts
from mother.logs import get_logger
from mother.runtime import Runtime
from mother.streams import ensure_group

__all__ = ["AskServer"]

log = get_logger("mother.asks")
# how long a read waits for an ask (the thread's stop is noticed within it)
BLOCK_MS = 500
# an attempt's first asks: refused not_held, they may be a job that moved off the host as it began
FIRST_ASKS = ("begin", "alive")


class AskServer:
    """The ask server of one Mother process (``instance``: its consumer name)."""

    def __init__(self, settings: Settings, instance: str) -> None:
        self.settings, self.instance = settings, instance
        self.group = settings.service.consumer_group
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._streams: list[str] = []
        self._grouped: set[str] = set()
        self._hosts_at = float("-inf")
        self._claimed_at = time.monotonic()
        self.rt: Runtime | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="mother-asks", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _run(self) -> None:
        outage = Outage(log, "asks", stop=self._stop.is_set)
        while not self._stop.is_set():
            try:
                if self.rt is None:
                    self.rt = Runtime.create(self.settings)
                self.serve_once(self.rt)
                outage.recovered()
            # never ends the thread: Redis away is waited out, anything else logged and retried
            except Exception as exc:
                if redis_down(exc):
                    self._grouped.clear()
                    outage.failed(exc)
                else:
                    log.exception("asks_failed", error=str(exc), retry_in_seconds=1)
                    self._stop.wait(1.0)

    def _refresh(self, rt: Runtime) -> None:
        now = time.monotonic()
        if now - self._hosts_at < self.settings.service.principals_refresh_seconds:
            return
        self._hosts_at = now
        streams = [keys.host_asks_key(name) for name in hosts.names(rt.redis)]
        for stream in streams:
            if stream not in self._grouped:
                ensure_group(rt.redis, stream, self.group)
                self._grouped.add(stream)
        self._streams = streams

    def serve_once(self, rt: Runtime) -> int:
        """Read one batch from every host's stream and handle it; reclaim asks pending too long."""
        self._refresh(rt)
        if not self._streams:
            self._stop.wait(BLOCK_MS / 1000)
            return 0
        try:
            batches = rt.rq_redis.xreadgroup(
                self.group,
                self.instance,
                {s: ">" for s in self._streams},
                count=self.settings.service.ask_batch,
                block=BLOCK_MS,
            )
        except redis.ResponseError as exc:
            if "NOGROUP" not in str(exc):
                raise
            self._grouped.clear()
            self._hosts_at = float("-inf")
            return 0
        handled = 0
        for stream, raw_id, fields in _in_turn(batches or []):
            self.handle(rt, stream, raw_id, fields)
            handled += 1
        if time.monotonic() - self._claimed_at >= min(
            self.settings.service.claim_idle_seconds / 2, 10
        ):
            self._claimed_at = time.monotonic()
            handled += self.reclaim(rt)
        return handled

    def reclaim(self, rt: Runtime) -> int:
        """Asks pending longer than ``claim_idle_seconds`` (their Mother died while handling them)."""
        idle = int(self.settings.service.claim_idle_seconds * 1000)
        handled = 0
        for stream in self._streams:
            reply = rt.rq_redis.xautoclaim(
                stream, self.group, self.instance, min_idle_time=idle, start_id="0-0", count=100
            )
            for raw_id, fields in reply[1]:
                if fields is not None:
                    self.handle(rt, stream, raw_id, fields)
                    handled += 1
        return handled

    def handle(self, rt: Runtime, stream: str, raw_id: Any, fields: dict[Any, Any]) -> None:
        entry_id = raw_id.decode() if isinstance(raw_id, bytes) else str(raw_id)
        host = keys.host_of_asks(stream)
        assert host is not None
        try:
            ask = parse_ask(host, entry_id, fields)
        except AskInvalid as exc:
            log.warning("ask_refused", host=host, entry_id=entry_id, why=exc.why)
            pipe = rt.redis.pipeline(transaction=True)
            if exc.ask_id is not None:
                import orjson

                from mother.asks.wire import REPLY_TTL_MS

                reply_key = keys.host_reply_key(host, exc.ask_id)
                pipe.lpush(reply_key, orjson.dumps(refused("invalid_ask", exc.why)))
                pipe.pexpire(reply_key, REPLY_TTL_MS)
            pipe.xack(stream, self.group, entry_id)
            pipe.xdel(stream, entry_id)
            pipe.execute()
            return
        try:
            # a charge is checked inside its one server call; any other ask about an attempt the host
            # does not hold is refused before it is looked at
            if ask.attempt is not None and ask.kind != "charge" and not holds(rt.redis, ask):
                answer = Answer(not_held(ask))
            else:
                answer = HANDLERS[ask.kind](rt, ask)
        except MotherError as exc:
            answer = Answer(refused(exc.code, exc.message))
        except Exception as exc:
            if redis_down(exc):
                raise
            log.exception("ask_failed", host=host, kind=ask.kind, entry_id=entry_id)
            answer = Answer(
                refused("mother_failed", f"Mother failed to apply it: {type(exc).__name__}: {exc}")
            )
        applied = finish(rt.redis, ask, answer, stream=stream, group=self.group)
        reply = answer.reply or {}
        if (
            ask.attempt is not None
            and ask.kind not in FIRST_ASKS
            and (not applied or reply.get("code") == "not_held")
        ):
            foreign(rt, ask)


def _in_turn(batches: Any) -> list[tuple[str, Any, Any]]:
    """The entries read from each stream, one stream's next after another's (round robin)."""
    queues = [
        (stream.decode() if isinstance(stream, bytes) else stream, list(entries))
        for stream, entries in batches
    ]
    out: list[tuple[str, Any, Any]] = []
    depth = max((len(entries) for _s, entries in queues), default=0)
    for n in range(depth):
        for stream, entries in queues:
            if n < len(entries):
                out.append((stream, *entries[n]))
    return out
