"""The server clock every record's timestamp comes from: stalls, moves of the server's clock, re-measuring."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis
from structlog.testing import capture_logs

import mother.clock
from mother.clock import ServerClock
from mother.functions import server_now_ms
from mother.server import EmbeddedRedis

# Syncs the clock in a loop and, after each sync, checks it against the server with a quick
# read (the server's time must lie between the clock's readings just before and after).
SYNCING_CHILD = r"""
import sys, time, redis
from mother.clock import ServerClock
from mother.functions import server_now_ms
client = redis.Redis.from_url(sys.argv[1])
clock = ServerClock(client)
print("ready", flush=True)
end, worst = time.monotonic() + float(sys.argv[2]), 0
while time.monotonic() < end:
    clock.sync()
    for _ in range(3):
        before, server, after = clock.now_ms(), server_now_ms(client), clock.now_ms()
        if after - before < 20:  # a read not itself stalled
            worst = max(worst, before - server - 1, server - after)
            break
print(worst, flush=True)
"""


def test_a_stall_during_a_sync_does_not_move_the_clock(redis_url: str) -> None:
    """A process stopped for 300 ms in the middle of measuring used to take the midpoint of that
    measurement: its clock ran 150 ms off until the next sync, and every record it stamped with it."""
    child = subprocess.Popen(
        [sys.executable, "-c", SYNCING_CHILD, redis_url, "4"], stdout=subprocess.PIPE, text=True
    )
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "ready"
    try:
        # most of the child's time is spent syncing: stops land inside a sync
        for _ in range(8):
            os.kill(child.pid, signal.SIGSTOP)
            time.sleep(0.3)
            os.kill(child.pid, signal.SIGCONT)
            time.sleep(0.1)
        out, _ = child.communicate(timeout=30)
    finally:
        if child.poll() is None:
            os.kill(child.pid, signal.SIGCONT)
            child.kill()
    assert child.returncode == 0 and out.strip().lstrip("-").isdigit(), (
        f"the syncing process failed: {out!r}"
    )
    worst = int(out.strip())
    assert worst <= 50, f"the clock ran {worst} ms off the server's after a stalled sync"


def test_a_wide_measurement_narrows_the_estimate_and_a_disjoint_one_replaces_it(
    redis_url: str,
) -> None:
    clock = ServerClock(redis.Redis.from_url(redis_url))
    offset, width = clock._offset, clock._half_width
    # a stalled sample: its interval holds the estimate; nothing moves
    clock._narrow(offset + 100, 150)
    assert abs(clock._offset - offset) <= width + 1 and clock._half_width <= width + 1
    # the server's clock stepped 10 s (or another server took over)
    clock._narrow(offset + 10_000, 0.5)
    assert clock._offset == offset + 10_000 and clock._half_width == 0.5
    server = server_now_ms(clock._client)
    assert abs(clock.now_ms() - (server + 10_000)) < 1_000


def test_a_clock_measures_again_once_its_measurement_is_old(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker never syncs on its own: its clock measures again when read after RESYNC_AFTER_MS."""
    monkeypatch.setattr(mother.clock, "RESYNC_AFTER_MS", 50.0)
    clock = ServerClock(redis.Redis.from_url(redis_url))
    first = clock._measured_at
    clock.now_ms()
    # fresh: no round trip
    assert clock._measured_at == first
    time.sleep(0.1)
    clock.now_ms()
    assert clock._measured_at > first


def test_a_clock_that_cannot_measure_again_keeps_its_estimate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(mother.clock, "RESYNC_AFTER_MS", 50.0)
    with EmbeddedRedis(dir=tmp_path, modules=False, appendfsync="no") as server:
        clock = ServerClock(redis.Redis.from_url(server.url, socket_connect_timeout=0.5))
        before = clock.now_ms()
    time.sleep(0.1)
    with capture_logs() as logs:
        now = clock.now_ms()
        # the retry waits RESYNC_RETRY_MS: no second attempt, no second warning
        clock.now_ms()
    assert before <= now < before + 5_000
    assert [e["event"] for e in logs] == ["clock_resync_failed"]
    assert (
        "uncertainty_ms" in logs[0]
        and logs[0]["retry_in_seconds"] == mother.clock.RESYNC_RETRY_MS / 1000
    )
