"""Live pages: ``/events`` streams server-sent events off the activity stream, one per entry Mother appends
(its type and run), and a page fetches what it shows again when one comes (``static/dashboard.js``). It
polls every ``dashboard.refresh_seconds`` only while the stream is not there.

Each stream is a blocking ``XREAD`` on the activity stream in a thread of the server's pool, so at most
``MAX_STREAMS`` are served at once; past that ``/events`` answers 503 and the page polls."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator

import orjson
import redis
from starlette.concurrency import iterate_in_threadpool
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response, StreamingResponse

from mother.activity import last_id, newer

__all__ = ["BLOCK_MS", "MAX_STREAMS", "Live"]

# one blocking read's wait: under redis-py's default read timeout (5 s); a comment keeps the stream open
BLOCK_MS = 3000
MAX_STREAMS = 16
STREAM_ID = re.compile(r"\d{1,20}-\d{1,20}")


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
            last = last_id(self.client) if after == "$" else after
            while True:
                last, events = newer(self.client, last, block_ms=BLOCK_MS)
                if not events:
                    yield ": quiet\n\n"
                    continue
                for n, event in enumerate(events, 1):
                    data = orjson.dumps({"type": event.type, "run_id": event.run_id or ""}).decode()
                    # the batch's last entry carries the id a reconnect reads after
                    said = f"id: {last}\n" if n == len(events) else ""
                    yield f"{said}event: activity\ndata: {data}\n\n"
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
