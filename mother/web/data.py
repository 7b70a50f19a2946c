"""What the dashboard shows, read from Redis: terminations by reason over time (``FT.AGGREGATE`` on
``idx:termination``, never by loading every record), recent runs, a run, the runs waiting for a person,
the global gauges and the circuit breaker. Read-only: nothing here writes."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson
import redis

from mother import keys
from mother.config import QUEUES
from mother.records._json import aggregate_rows
from schemas import TERMINATION_REASONS

# the depth of what waits for a live host (hosts:awaited), as the queue gauge names it
AWAITING_QUEUE = "awaiting_host"

__all__ = ["BUCKETS", "Chart", "chart", "gauges", "reason_totals"]

HOUR_MS = 3_600_000
DAY_MS = 24 * HOUR_MS
# a bucket's width and how many of them a chart shows
BUCKETS: dict[str, tuple[int, int]] = {"hour": (HOUR_MS, 48), "day": (DAY_MS, 30)}


@dataclass
class Chart:
    """Runs terminated per reason in each bucket, oldest bucket first."""

    bucket: Literal["hour", "day"]
    starts: list[int]
    counts: dict[str, list[int]] = field(default_factory=dict)

    @property
    def totals(self) -> dict[str, int]:
        return {reason: sum(n) for reason, n in self.counts.items() if sum(n)}

    def to_dict(self) -> dict[str, Any]:
        return {
            "bucket": self.bucket,
            "starts": self.starts,
            "counts": self.counts,
            "totals": self.totals,
        }


def _aggregate(client: redis.Redis, query: str, *args: Any) -> list[dict[str, str]]:
    try:
        reply = client.execute_command("FT.AGGREGATE", keys.TERMINATION_INDEX, query, *args)
    except redis.ResponseError as exc:
        # a store without the search module, or before Mother made the index: nothing to chart
        if "unknown" in str(exc).lower() or "no such index" in str(exc).lower():
            return []
        raise
    return aggregate_rows(reply)


def chart(client: redis.Redis, bucket: Literal["hour", "day"], now_ms: int) -> Chart:
    """Terminations by reason in the last 48 hours (``hour``) or 30 days (``day``), on the server's
    clock: one FT.AGGREGATE that buckets and counts on the server."""
    width, count = BUCKETS[bucket]
    last = now_ms - now_ms % width
    first = last - (count - 1) * width
    rows = _aggregate(
        client,
        f"@timestamp:[{first} +inf]",
        "LOAD",
        "1",
        "@timestamp",
        "APPLY",
        f"floor(@timestamp/{width})*{width}",
        "AS",
        "bucket",
        "GROUPBY",
        "2",
        "@bucket",
        "@reason",
        "REDUCE",
        "COUNT",
        "0",
        "AS",
        "n",
        "LIMIT",
        "0",
        str(count * len(TERMINATION_REASONS)),
    )
    starts = [first + i * width for i in range(count)]
    out = Chart(bucket, starts)
    for row in rows:
        reason, start = row.get("reason", ""), int(float(row.get("bucket", "0")))
        slot = (start - first) // width
        if 0 <= slot < count:
            out.counts.setdefault(reason, [0] * count)[slot] += int(row.get("n", "0"))
    out.counts = dict(sorted(out.counts.items()))
    return out


def reason_totals(client: redis.Redis) -> dict[str, int]:
    """Every stored termination by reason: the size of each reason's index (``terminations:reason:*``,
    what ``mother runs --reason`` reads and the GC prunes), one round trip. (An FT.AGGREGATE
    ``GROUPBY @reason`` over the index counts the same, 190 ms at 100,000 runs against 0.3 ms:
    docs/benchmarks.md.)"""
    pipe = client.pipeline(transaction=False)
    for reason in TERMINATION_REASONS:
        pipe.zcard(keys.termination_reason_index_key(reason))
    counts = zip(TERMINATION_REASONS, pipe.execute(), strict=True)
    return {reason: int(n) for reason, n in sorted(counts) if n}


def queue_depths(client: redis.Redis) -> dict[str, int]:
    """Jobs waiting per kind of queue over every host's own queues (``{host}.agents``, ...), and the
    attempts waiting for a live host (``awaiting_host``). Two round trips: RQ's set of queues, then each
    one's length."""
    names = sorted(
        name.decode() if isinstance(name, bytes) else str(name)
        for name in client.smembers(keys.RQ_QUEUES)
    )
    depths = {queue: 0 for queue in (*QUEUES, AWAITING_QUEUE)}
    pipe = client.pipeline(transaction=False)
    pipe.zcard(keys.HOSTS_AWAITED)
    for name in names:
        pipe.llen(name)
    awaited, *lengths = pipe.execute()
    depths[AWAITING_QUEUE] = int(awaited)
    for name, length in zip(names, lengths, strict=True):
        place = keys.host_of_queue(name.removeprefix(keys.RQ_QUEUE_PREFIX))
        if place is not None and place[1] in depths:
            depths[place[1]] += int(length)
    return depths


def gauges(client: redis.Redis) -> dict[str, Any]:
    """The global gauges against the limits the leading Mother published, the circuit breaker (open
    when a gauge that refuses new runs is at its limit), queue depths and workers."""
    depths = queue_depths(client)
    pipe = client.pipeline(transaction=False)
    pipe.zcard(keys.RUN_DEADLINES)
    pipe.zcard(keys.ADMISSION_WAITING)
    pipe.zcard(keys.RUNS_WAITING)
    pipe.scard("rq:workers")
    pipe.xlen(keys.SUBMISSIONS_STREAM)
    pipe.execute_command("JSON.GET", keys.GLOBAL_BUDGET)
    pipe.execute_command("JSON.GET", keys.MOTHER_CONFIG)
    # one round trip for every gauge
    *replies, raw_doc, raw_limits = pipe.execute()
    concurrent, admission, waiting, workers = (int(v) for v in replies[:4])
    doc = orjson.loads(raw_doc) if raw_doc else {}
    limits = orjson.loads(raw_limits) if raw_limits else {}
    breakers = []
    for gauge in ("redis_memory_mb", "docling_jobs"):
        current, limit = doc.get(gauge) or 0, limits.get(f"max_{gauge}")
        breakers.append(
            {
                "gauge": gauge,
                "current": current,
                "limit": limit,
                "open": limit is not None and current >= limit,
            }
        )
    return {
        "concurrent_runs": concurrent,
        "max_concurrent_runs": limits.get("max_concurrent_runs"),
        "admission_waiting": admission,
        "max_queue_depth": limits.get("max_queue_depth"),
        "waiting_for_person": waiting,
        "workers": workers,
        "queues": depths,
        "submissions_stream": int(replies[-1]),
        "breakers": breakers,
        "circuit": "open" if any(b["open"] for b in breakers) else "closed",
        "published_by": limits.get("published_by"),
    }


def bar_layout(data: Chart, width: int = 960, height: int = 220) -> dict[str, Any]:
    """Stacked bars for the chart, laid out for an inline SVG (no script, no front-end build)."""
    slots = len(data.starts)
    stacks = [sum(n[i] for n in data.counts.values()) for i in range(slots)]
    top = max(stacks or [0]) or 1
    # a round maximum for the axis
    scale = 10 ** max(0, int(math.log10(top)))
    ceiling = math.ceil(top / scale) * scale
    bar = width / slots
    rects = []
    for i in range(slots):
        y = float(height)
        for reason, counts in data.counts.items():
            n = counts[i]
            if not n:
                continue
            h = height * n / ceiling
            y -= h
            rects.append(
                {
                    "x": round(i * bar + 1, 2),
                    "y": round(y, 2),
                    "w": round(max(bar - 2, 1), 2),
                    "h": round(h, 2),
                    "reason": reason,
                    "n": n,
                    "start": data.starts[i],
                    # the runs it counts: those that ended in its bucket with its reason
                    "end": data.starts[i] + BUCKETS[data.bucket][0] - 1,
                }
            )
    return {
        "width": width,
        "height": height,
        "ceiling": ceiling,
        "ticks": {"top": count_label(ceiling), "middle": count_label(ceiling / 2)},
        "rects": rects,
    }


def count_label(n: float) -> str:
    """A count for an axis, short enough for its margin: 7, 7.5, 950, 5k, 12.5k, 2M."""
    for size, suffix in ((1_000_000, "M"), (1_000, "k")):
        if n >= size:
            return f"{n / size:g}{suffix}"
    return f"{n:g}"
