"""Benchmark: dashboard page times against a store of many terminated runs.

    .venv/bin/python scripts/bench_dashboard.py [--runs 100000] [--requests 30]

One embedded server (no AOF). ``--runs`` terminated runs are stored as Mother stores them where the
dashboard reads (``termination:{id}`` indexed by ``idx:termination``; a run record with what
``idx:runs`` indexes (status, user, reason, created and ended ms); ``runs:all``, the per-reason and
per-user sets), their ends spread over the last 30 days. Then each page is requested ``--requests``
times in-process (Starlette's TestClient: routing, the Redis reads, the template), and printed with
its p50 and p95 beside the bare ``FT.AGGREGATE`` its chart or totals send, or the bare ``FT.SEARCH``
its listing sends (the baseline: what the search costs without us).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import orjson
import redis
from starlette.testclient import TestClient

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mother import keys
from mother.clock import ServerClock
from mother.config import load_settings
from mother.functions import load_functions
from mother.observe.listing import ensure_index as ensure_runs_index
from mother.server import EmbeddedRedis
from mother.termination import ensure_index
from mother.web import create_app
from schemas import TERMINATION_REASONS, iso_from_ms
from scripts.bench import pct

DAY_MS = 86_400_000
TASKS = ("Summarise the quarterly ledger", "Fix the flaky login test", "Translate the release notes",
         "Reconcile the invoices", "Draft the outage report")  # fmt: skip
MODELS = ("scripted", "scripted-large")


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
            user = f"user{i % 50}"
            created = ended - 60_000 - (i % 600) * 1000
            run = {
                "run_id": run_id,
                "user_id": user,
                "spec": {
                    "user_id": user,
                    "run_id": run_id,
                    "task": f"{TASKS[i % len(TASKS)]} (item {i})",
                    "pipeline": [{"name": "execute", "role": "coder", "model": MODELS[i % 2]}],
                },
                "status": "terminated",
                "reason": reason,
                "phase": "execute",
                "host": f"host-{i % 8}",
                "history": [
                    {
                        "at": iso_from_ms(ended),
                        "event": "terminated",
                        "phase": "execute",
                        "detail": f"{reason}: synthetic end {i}",
                    }
                ],
                "created_at": iso_from_ms(created),
                "created_ms": created,
                "updated_at": iso_from_ms(ended),
                "terminated_at": iso_from_ms(ended),
                "terminated_ms": ended,
                "duration_ms": ended - created,
                "spend_micro_usd": (i * 7919) % 2_000_000,
                "total_tokens": (i * 31) % 50_000,
            }
            pipe.execute_command("JSON.SET", keys.run_key(run_id), "$", orjson.dumps(run))
            pipe.zadd(keys.RUNS_INDEX, {run_id: ended - 60_000})
            pipe.zadd(keys.termination_reason_index_key(reason), {run_id: ended})
            pipe.zadd(keys.user_runs_key(f"user{i % 50}"), {run_id: ended - 60_000})
        pipe.execute()
    for index in (keys.TERMINATION_INDEX, keys.RUN_SEARCH_INDEX):
        while True:
            info = client.execute_command("FT.INFO", index)
            fields = (
                info if isinstance(info, dict) else dict(zip(info[::2], info[1::2], strict=False))
            )
            if int(fields.get("num_docs", 0)) >= runs and float(fields.get("indexing") or 0) == 0:
                break
            time.sleep(0.5)


def timed(fn: Callable[[], object], n: int) -> tuple[float, float]:
    """p50 and p99 of ``n`` calls of ``fn`` (after one to warm up), in ms."""
    fn()
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times), pct(times, 0.99)


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
        ensure_runs_index(client)
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

        def bare_search(query: str) -> object:
            return client.execute_command(
                "FT.SEARCH", keys.RUN_SEARCH_INDEX, query, "RETURN", "1", "created",
                "SORTBY", "created", "DESC", "LIMIT", "0", "50", "DIALECT", "2",
            )  # fmt: skip

        day = 24 * hour
        base_search = timed(
            lambda: bare_search("@status:{terminated} -@reason:{success}"), args.requests
        )
        base_hour = timed(bare_chart, args.requests)
        base_day = timed(lambda: bare_chart(day, 30), args.requests)
        base_totals = timed(bare_totals, args.requests)
        print(f"\n{'request':<48}{'p50 ms':>10}{'p99 ms':>10}{'vs its bare search':>22}")
        for name, (p50, p95) in (
            ("bare FT.AGGREGATE, chart by hour", base_hour),
            ("bare FT.AGGREGATE, chart by day", base_day),
            ("bare FT.AGGREGATE, totals by reason", base_totals),
            ("bare FT.SEARCH, not success, 50", base_search),
        ):
            print(f"{name:<48}{p50:>10.1f}{p95:>10.1f}")
        # the chart's aggregation is the page's floor; the other pages send none
        base_text = timed(lambda: bare_search("@task|detail:(ledger)"), args.requests)
        print(f"{'bare FT.SEARCH, text ledger, 50':<48}{base_text[0]:>10.1f}{base_text[1]:>10.1f}")
        floors = {
            "/": base_hour[0],
            "/?bucket=day": base_day[0],
            "/api/chart": base_hour[0],
            "/runs?outcome=not_success": base_search[0],
            "/runs?search=ledger": base_text[0],
        }
        deep = web.get("/api/runs?outcome=not_success&limit=500").json()["next"]
        for _ in range(3):  # four pages of 500 in: offset 2,000
            deep = web.get(f"/api/runs?outcome=not_success&limit=500&cursor={deep}").json()["next"]
        paths = (
            "/",
            "/?bucket=day",
            "/api/chart",
            "/runs",
            "/runs?user=user7",
            "/runs?reason=timeout",
            "/runs?outcome=not_success",
            "/runs?status=terminated&hours=24",
            f"/runs?outcome=not_success&cursor={deep}",
            "/runs?search=ledger",
            "/runs?search=ledger&model=scripted-large&cost_min=1",
            "/runs?sort=cost",
            "/runs?sort=duration&host=host-3",
            "/runs/run-00004242",
            "/waiting",
            "/hosts",
            "/costs?since=1d",
            "/metrics",
        )
        for path in paths:
            p50, p95 = timed(lambda path=path: web.get(path).raise_for_status(), args.requests)
            ratio = f"{p50 / floors[path]:>21.2f}x" if path in floors else f"{'-':>22}"
            shown = path if "cursor" not in path else "/runs?outcome=not_success, offset 2,000"
            print(f"{shown:<48}{p50:>10.1f}{p95:>10.1f}{ratio}")


if __name__ == "__main__":
    main()
