"""Benchmark: ledger reserve + settle under contending processes, against a bare round trip.

    .venv/bin/python scripts/bench_ledger.py [--seconds S] [--procs 8]

One embedded server, one run. Each client process loops: reserve $0.000001 for a new
child of one shared parent (ledger_reserve), then settle it (report_actual, cascade_spend,
release): 6 round trips (4 function calls, 2 node reads). Printed: cycles/s with p50/p99
per cycle, beside PING round trips/s from the same number of processes.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import redis

from mother.ledger import BudgetLedger
from mother.server import EmbeddedRedis


def _loop(url: str, kind: str, seconds: float) -> list[float]:
    client = redis.Redis.from_url(url, decode_responses=True)
    ledger = BudgetLedger(client)
    prefix = uuid.uuid4().hex[:8]
    lat, n = [], 0
    end = time.perf_counter() + seconds
    while (start := time.perf_counter()) < end:
        if kind == "ping":
            client.ping()
        else:
            child = f"c-{prefix}-{n}"
            ledger.reserve(child, "0.000001", "parent")
            ledger.report_actual(child, "0.000001")
            ledger.cascade_spend(child, "parent", "0.000001")
            ledger.release(child, "completed")
        n += 1
        lat.append(time.perf_counter() - start)
    return lat


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--procs", type=int, default=8)
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory(prefix="mother-bench-") as tmp,
        EmbeddedRedis(dir=Path(tmp), appendfsync="no") as server,
    ):
        BudgetLedger(redis.Redis.from_url(server.url, decode_responses=True)).register(
            "parent", "1000000"
        )
        results = {}
        for kind in ("ping", "ledger"):
            with ProcessPoolExecutor(args.procs) as pool:
                runs = list(
                    pool.map(
                        _loop,
                        [server.url] * args.procs,
                        [kind] * args.procs,
                        [args.seconds] * args.procs,
                    )
                )
            lat = sorted(x for r in runs for x in r)
            results[kind] = (
                len(lat) / args.seconds,
                statistics.median(lat) * 1e6,
                lat[int(0.99 * (len(lat) - 1))] * 1e6,
            )
            ops, p50, p99 = results[kind]
            label = "PING" if kind == "ping" else "reserve+settle cycle (6 round trips)"
            print(
                f"{label:<40} procs={args.procs} {ops:>9.0f}/s   p50 {p50:>8.1f} µs   p99 {p99:>8.1f} µs"
            )
        cycles = results["ledger"][0]
        # a cycle: reserve (1), report_actual (1), cascade_spend (lineage read + 1), release (node read + 1)
        print(
            f"round trips/s in cycles: {cycles * 6:.0f} = {cycles * 6 / results['ping'][0]:.2f}x PING's; "
            f"cycles/s = {cycles / results['ping'][0]:.3f}x PING/s"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
