"""Live pages: ``/events`` streams server-sent events off the activity stream, one per entry Mother appends
(its type and run), and a page fetches what it shows again when one comes (``static/dashboard.js``). It
polls every ``dashboard.refresh_seconds`` only while the stream is not there.

Each stream is a blocking ``XREAD`` on the activity stream in a thread of the server's pool, so at most
``MAX_STREAMS`` are served at once; past that ``/events`` answers 503 and the page polls."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from typing import Any

import orjson
import redis
from starlette.concurrency import iterate_in_threadpool
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response, StreamingResponse

from mother import keys

__all__ = ["BLOCK_MS", "MAX_STREAMS", "Live"]

# one blocking read's wait: under redis-py's default read timeout (5 s); a comment keeps the stream open
BLOCK_MS = 3000
MAX_STREAMS = 16
STREAM_ID = re.compile(r"\d{1,20}-\d{1,20}")


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class Live:
    """The ``/events`` endpoint over ``client``'s server (its pool lends each stream a connection)."""

    def __init__(self, client: redis.Redis, max_streams: int = MAX_STREAMS) -> None:
        self.client = client
        self.max_streams = max_streams
        self._open = 0
        self._lock = threading.Lock()

    def _events(self, after: str) -> Iterator[str]:
        """Each activity entry after ``after`` as an event, and a comment at every quiet wait (counted
        among the open streams from its first step to its end)."""
        with self._lock:
            self._open += 1
        try:
            yield "retry: 3000\n\n"
            last = after
            if last == "$":
                newest: Any = self.client.xrevrange(keys.ACTIVITY_STREAM, count=1)
                last = _text(newest[0][0]) if newest else "0-0"
            while True:
                found: Any = self.client.xread(
                    {keys.ACTIVITY_STREAM: last}, count=200, block=BLOCK_MS
                )
                if not found:
                    yield ": quiet\n\n"
                    continue
                for entry_id, fields in found[0][1]:
                    last = _text(entry_id)
                    data = {
                        "type": _text(fields.get("type") or fields.get(b"type") or ""),
                        "run_id": _text(fields.get("run_id") or fields.get(b"run_id") or ""),
                    }
                    yield f"id: {last}\nevent: activity\ndata: {orjson.dumps(data).decode()}\n\n"
        finally:
            with self._lock:
                self._open -= 1

    async def endpoint(self, request: Request) -> Response:
        if self._open >= self.max_streams:
            return PlainTextResponse(
                f"{self.max_streams} live streams are open: this page polls instead\n",
                status_code=503,
            )
        after = request.headers.get("last-event-id") or "$"
        if not STREAM_ID.fullmatch(after):
            after = "$"
        return StreamingResponse(
            iterate_in_threadpool(self._events(after)),
            media_type="text/event-stream",
            headers={"cache-control": "no-cache", "x-accel-buffering": "no"},
        )
