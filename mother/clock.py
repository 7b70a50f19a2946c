"""The server's clock, read cheaply: an offset to the local clock, re-measured often.

Decisions that guard limits or deadlines read ``TIME`` inside a server function.
Timestamps written on records come from here, so every record in a deployment
uses one clock (the server's) whatever the hosts' clocks say.
"""

from __future__ import annotations

import time

import redis

from mother.functions import server_now_ms
from schemas import iso_from_ms

__all__ = ["ServerClock"]


class ServerClock:
    """Local monotonic time plus the measured offset to the Redis server's clock."""

    def __init__(self, client: redis.Redis) -> None:
        self._client = client
        self._base_ms = 0.0
        self._base_mono = 0.0
        self._day_number, self._day_text = -1, ""
        self._second, self._second_text = -1, ""
        self.sync()

    def sync(self) -> None:
        """Measure the server clock again (one round trip, midpoint-corrected)."""
        before = time.monotonic()
        server = server_now_ms(self._client)
        after = time.monotonic()
        self._base_mono = (before + after) / 2
        self._base_ms = float(server)

    def now_ms(self) -> int:
        return int(self._base_ms + (time.monotonic() - self._base_mono) * 1000)

    def now_iso(self) -> str:
        return self.iso(self.now_ms())

    def iso(self, ms: int) -> str:
        """ISO-8601 UTC with milliseconds of a server time; the date and time of day are formatted once per second."""
        second = ms // 1000
        if second != self._second:
            self._second, self._second_text = second, iso_from_ms(second * 1000)[:-4]
        return f"{self._second_text}{ms % 1000:03d}Z"

    def today(self) -> str:
        """The server's UTC date, YYYY-MM-DD (formatted once per day)."""
        day = self.now_ms() // 86_400_000
        if day != self._day_number:
            self._day_number, self._day_text = day, iso_from_ms(day * 86_400_000)[:10]
        return self._day_text
