"""The server's clock, read cheaply: an offset to the local clock, re-measured often.

Decisions that guard limits or deadlines read ``TIME`` inside a server function.
Timestamps written on records come from here, so every record in a deployment
uses one clock (the server's) whatever the hosts' clocks say.

A measurement only bounds the offset: the server read its clock somewhere between
sending and receiving, so the offset lies in an interval as wide as the round trip.
A process stalled mid-measurement (a pause, a busy machine, a stopped process) gets a
wide interval whose midpoint is off by half the stall; taking that midpoint put record
timestamps up to half a stall early. So each measurement is intersected with what is
already known (widened by the most the two clocks may drift apart since), as NTP
filters its samples: a wide sample can only narrow the estimate, never drag it off.
Intervals that do not meet mean the server's clock moved (stepped, or another server
after a failover): the new measurement is taken as it is.

A process that never syncs on its own (a worker) would drift from the server for as long
as it lives, so ``now_ms()`` measures again once the last measurement is older than
``RESYNC_AFTER_MS``. A failed re-measurement keeps the last estimate, logs why and is
retried ``RESYNC_RETRY_MS`` later.
"""

from __future__ import annotations

import time

import redis

from mother.connection import redis_down
from mother.functions import server_now_ms
from mother.logs import get_logger
from schemas import iso_from_ms

__all__ = ["ServerClock"]

# measurements per sync while each is wider than GOOD_HALF_WIDTH_MS
SYNC_TRIES = 3
GOOD_HALF_WIDTH_MS = 5.0
# how fast the two clocks may part (NTP slews by at most 0.5 ms/s)
DRIFT_MS_PER_SECOND = 1.0
RESYNC_AFTER_MS = 60_000.0
RESYNC_RETRY_MS = 5_000.0

log = get_logger("clock")


def _mono_ms() -> float:
    return time.monotonic() * 1000


class ServerClock:
    """Local monotonic time plus the measured offset to the Redis server's clock."""

    def __init__(self, client: redis.Redis) -> None:
        self._client = client
        # server ms - local monotonic ms, the middle of what is known
        self._offset = 0.0
        # how far the true offset may be from it, when measured
        self._half_width = float("inf")
        # local monotonic ms
        self._measured_at = 0.0
        # local monotonic ms: measure again from then on
        self._due = 0.0
        self._day_number, self._day_text = -1, ""
        self._second, self._second_text = -1, ""
        self.sync()

    @property
    def uncertainty_ms(self) -> float:
        """How far ``now_ms()`` may be from the server's clock right now (half the narrowest round trip known, plus drift)."""
        return self._half_width + (_mono_ms() - self._measured_at) * DRIFT_MS_PER_SECOND / 1000

    def sync(self) -> None:
        """Measure the server clock again (one round trip, up to SYNC_TRIES while they are slow) and
        narrow the offset with it."""
        best = self._sample()
        for _ in range(SYNC_TRIES - 1):
            if best[1] <= GOOD_HALF_WIDTH_MS:
                break
            best = min(best, self._sample(), key=lambda sample: sample[1])
        self._narrow(*best)

    def _sample(self) -> tuple[float, float]:
        """One measurement: the offset's midpoint and half-width."""
        before = _mono_ms()
        # truncated to the ms: the true time is in [server, server + 1)
        server = server_now_ms(self._client)
        after = _mono_ms()
        return server + 0.5 - (before + after) / 2, (after - before + 1) / 2

    def _narrow(self, offset: float, half_width: float) -> None:
        known = self.uncertainty_ms
        low = max(self._offset - known, offset - half_width)
        high = min(self._offset + known, offset + half_width)
        # the intervals do not meet: the server's clock moved
        if low > high:
            low, high = offset - half_width, offset + half_width
        self._offset, self._half_width, self._measured_at = (
            (low + high) / 2,
            (high - low) / 2,
            _mono_ms(),
        )
        self._due = self._measured_at + RESYNC_AFTER_MS

    def refresh(self) -> None:
        """Measure again when the last measurement is RESYNC_AFTER_MS old; if Redis cannot answer, keep
        the estimate and try again RESYNC_RETRY_MS later."""
        now = _mono_ms()
        if now < self._due:
            return
        try:
            self.sync()
        except Exception as exc:
            if not redis_down(exc):
                raise
            self._due = now + RESYNC_RETRY_MS
            log.warning(
                "clock_resync_failed",
                error=str(exc),
                uncertainty_ms=round(self.uncertainty_ms, 1),
                retry_in_seconds=RESYNC_RETRY_MS / 1000,
            )

    def now_ms(self) -> int:
        self.refresh()
        return int(self._offset + _mono_ms())

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
