"""Redis stays bounded: Mother's streams are trimmed below what is still to be handled, rejections expire."""

from __future__ import annotations

import orjson
import redis

from mother import keys
from mother.config import load_settings
from mother.intake import reject
from mother.runtime import Runtime
from mother.streams import ensure_group
from mother.watchdog import Watchdog

GROUP = "mother"


def _watchdog(redis_url: str, **service: object) -> Watchdog:
    return Watchdog(Runtime.create(load_settings(redis_url=redis_url, service=service)))


def test_streams_are_trimmed_below_the_oldest_entry_still_to_be_handled(
    r: redis.Redis, redis_url: str
) -> None:
    """Past their retention, acknowledged entries of mother:events are trimmed, but never one that is pending
    (delivered, not acknowledged) or not yet delivered: XTRIM MINID at the oldest of those. A stream no
    consumer group reads is left whole (nothing is known to be handled)."""
    watchdog = _watchdog(redis_url, stream_retention_seconds=0)
    ensure_group(r, keys.EVENTS_STREAM, GROUP)
    # entries a minute old: past a retention of 0 s (added now, they would share the server's millisecond)
    old = watchdog.rt.clock.now_ms() - 60_000
    ids = [r.xadd(keys.EVENTS_STREAM, {"n": str(i)}, id=f"{old}-{i}") for i in range(10)]
    # 0-5 delivered, 6-9 not yet
    r.xreadgroup(GROUP, "c", {keys.EVENTS_STREAM: ">"}, count=6)
    # 2 still pending
    r.xack(keys.EVENTS_STREAM, GROUP, ids[0], ids[1], ids[3], ids[4], ids[5])
    watchdog.trim()
    assert [i for i, _ in r.xrange(keys.EVENTS_STREAM)] == ids[2:]
    r.xack(keys.EVENTS_STREAM, GROUP, ids[2])
    watchdog.trim()
    # the undelivered stay
    assert [i for i, _ in r.xrange(keys.EVENTS_STREAM)] == ids[6:]
    # no group reads it yet
    r.xadd(keys.SUBMISSIONS_STREAM, {"spec": "{}"})
    watchdog.trim()
    assert r.xlen(keys.SUBMISSIONS_STREAM) == 1
    kept = _watchdog(redis_url, stream_retention_seconds=3600)
    r.xreadgroup(GROUP, "c", {keys.EVENTS_STREAM: ">"})
    r.xack(keys.EVENTS_STREAM, GROUP, *ids[6:])
    # handled, but younger than the retention: kept for inspection
    kept.trim()
    assert r.xlen(keys.EVENTS_STREAM) == 4


def test_rejections_are_forgotten_after_their_retention(r: redis.Redis, redis_url: str) -> None:
    """A rejection past rejection_retention_seconds loses its record, its place in the index and its run's
    entry in rejections:by_run, unless a newer rejection of that run replaced it; younger ones stay."""
    watchdog = _watchdog(redis_url, rejection_retention_seconds=3600)
    rt = watchdog.rt
    spec = orjson.dumps({"run_id": "twice", "user_id": "u"}).decode()
    reject(rt, "1000-0", {"spec": spec}, "first refusal")
    reject(rt, "2000-0", {"spec": spec}, "second refusal")
    reject(
        rt,
        "3000-0",
        {"spec": orjson.dumps({"run_id": "old", "user_id": "u"}).decode()},
        "old refusal",
    )
    reject(rt, "4000-0", {"spec": "not json"}, "young refusal")
    old = rt.clock.now_ms() - 7200 * 1000
    r.zadd(keys.REJECTIONS_INDEX, {"1000-0": old, "3000-0": old, "not an id!": old})
    watchdog.trim()
    assert r.zrange(keys.REJECTIONS_INDEX, 0, -1) == ["2000-0", "4000-0"]
    assert not r.exists(keys.rejection_key("1000-0")) and not r.exists(keys.rejection_key("3000-0"))
    assert r.exists(keys.rejection_key("2000-0")) and r.exists(keys.rejection_key("4000-0"))
    assert r.hgetall(keys.REJECTIONS_BY_RUN) == {"twice": "2000-0"}
