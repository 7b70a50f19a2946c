"""Benchmark: dashboard page times against a store of many terminated runs.

    .venv/bin/python scripts/bench_dashboard.py [--runs 100000] [--requests 30]

One embedded server (no AOF). ``--runs`` terminated runs are stored as Mother stores them where the
dashboard reads (``termination:{id}`` indexed by ``idx:termination``, ``runs:all``, the per-reason
and per-user sets; a run's record itself is left out, as after it was deleted by hand, which the
listing tolerates), their ends spread over the last 30 days. Then each page is requested
``--requests`` times in-process (Starlette's TestClient: routing, the Redis reads, the template),
and printed with its p50 and p95 beside the bare ``FT.AGGREGATE`` its chart or totals send (the
baseline: what the search costs without us).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import orjson
import redis
from starlette.testclient import TestClient

from mother import keys
from mother.clock import ServerClock
from mother.config import load_settings
from mother.functions import load_functions
from mother.server import EmbeddedRedis
from mother.termination import ensure_index
from mother.web import create_app
from schemas import TERMINATION_REASONS, iso_from_ms

DAY_MS = 86_400_000


def fill(client: redis.Redis, runs: int, now_ms: int) -> None:
    step = 5_000
    for start in range(0, runs, step):
        pipe = client.pipeline(transaction=False)
        for i in range(start, min(runs, start + step)):
            run_id = f"run-{i:08d}"
            reason = TERMINATION_REASONS[i % len(TERMINATION_REASONS)]
            ended = now_ms - (i * 7919) % (30 * DAY_MS)
            record = {
                "run_id": run_id,
                "reason": reason,
                "phase_at_termination": "execute",
                "timestamp": iso_from_ms(ended),
                "timestamp_ms": ended,
                "details": f"synthetic end {i}",
                "contributing_factors": [],
                "can_retry": False,
                "suggested_action": "abandon",
                "logged_by": "mother",
                "final_artifacts": [],
            }
            pipe.execute_command(
                "JSON.SET", keys.termination_key(run_id), "$", orjson.dumps(record)
            )
            pipe.zadd(keys.RUNS_INDEX, {run_id: ended - 60_000})
            pipe.zadd(keys.termination_reason_index_key(reason), {run_id: ended})
            pipe.zadd(keys.user_runs_key(f"user{i % 50}"), {run_id: ended - 60_000})
        pipe.execute()
    while True:
        info = client.execute_command("FT.INFO", keys.TERMINATION_INDEX)
        fields = info if isinstance(info, dict) else dict(zip(info[::2], info[1::2], strict=False))
        if int(fields.get("num_docs", 0)) >= runs and float(fields.get("indexing") or 0) == 0:
            return
        time.sleep(0.5)


def timed(fn: Callable[[], object], n: int) -> tuple[float, float]:
    fn()
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000)
    times.sort()
    return statistics.median(times), times[max(0, int(len(times) * 0.95) - 1)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--requests", type=int, default=30)
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory() as tmp,
        EmbeddedRedis(dir=Path(tmp), appendfsync="no") as server,
    ):
        client = redis.Redis.from_url(server.url, decode_responses=True)
        load_functions(client)
        ensure_index(client)
        now = ServerClock(client).now_ms()
        t0 = time.perf_counter()
        fill(client, args.runs, now)
        print(f"stored {args.runs:,} terminated runs in {time.perf_counter() - t0:.1f} s (indexed)")
        web = TestClient(create_app(load_settings(redis_url=server.url)))
        hour = 3_600_000

        def bare_chart(width: int = hour, count: int = 48) -> object:
            start = now - now % width - (count - 1) * width
            return client.execute_command(
                "FT.AGGREGATE", keys.TERMINATION_INDEX, f"@timestamp:[{start} +inf]",
                "LOAD", "1", "@timestamp", "APPLY", f"floor(@timestamp/{width})*{width}", "AS",
                "bucket", "GROUPBY", "2", "@bucket", "@reason", "REDUCE", "COUNT", "0", "AS", "n",
                "LIMIT", "0", str(count * 12),
            )  # fmt: skip

        def bare_totals() -> object:
            return client.execute_command(
                "FT.AGGREGATE", keys.TERMINATION_INDEX, "*",
                "GROUPBY", "1", "@reason", "REDUCE", "COUNT", "0", "AS", "n",
            )  # fmt: skip

        day = 24 * hour
        base_hour = timed(bare_chart, args.requests)
        base_day = timed(lambda: bare_chart(day, 30), args.requests)
        base_totals = timed(bare_totals, args.requests)
        print(f"\n{'request':<36}{'p50 ms':>10}{'p95 ms':>10}{'vs its FT.AGGREGATE':>22}")
        for name, (p50, p95) in (
            ("bare FT.AGGREGATE, chart by hour", base_hour),
            ("bare FT.AGGREGATE, chart by day", base_day),
            ("bare FT.AGGREGATE, totals by reason", base_totals),
        ):
            print(f"{name:<36}{p50:>10.1f}{p95:>10.1f}")
        # the chart's aggregation is the page's floor; the other pages send none
        floors = {"/": base_hour[0], "/?bucket=day": base_day[0], "/api/chart": base_hour[0]}
        paths = (
            "/",
            "/?bucket=day",
            "/api/chart",
            "/runs",
            "/runs?reason=timeout",
            "/runs?status=terminated&hours=24",
            "/metrics",
        )
        for path in paths:
            p50, p95 = timed(lambda path=path: web.get(path).raise_for_status(), args.requests)
            ratio = f"{p50 / floors[path]:>21.2f}x" if path in floors else f"{'-':>22}"
            print(f"{path:<36}{p50:>10.1f}{p95:>10.1f}{ratio}")


if __name__ == "__main__":
    main()
