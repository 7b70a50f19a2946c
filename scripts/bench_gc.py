"""Benchmark: the GC's cost grows with what expired, not with what is stored.

    .venv/bin/python scripts/bench_gc.py [--stored 1000000] [--small 1000] [--large 100000]

One embedded server (no AOF). ``--stored`` artifacts are stored as a phase stores them (content,
metadata, a place in artifacts:expiry), their expiry years away; then ``--small`` of them are made
due and the GC runs, then ``--large`` more and it runs again. Printed for each GC: wall time, the
server's CPU (INFO's used_cpu_sys + used_cpu_user, before and after), items per second, and the
largest single command the server ran meanwhile (SLOWLOG with a 0 µs threshold, reset before);
then the ratio of the two GCs' times against the ratio of what expired (100x by default), and a
GC with nothing due (the floor: what it costs to look).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import orjson
import redis

from mother import keys
from mother.artifacts.collect import collect_here
from mother.config import Settings
from mother.functions import load_functions
from mother.runtime import Runtime
from mother.server import EmbeddedRedis

FAR = 4_102_444_800_000  # 2100-01-01
NOW = 1_795_000_000_000
CONTENT = "phase output " + "x" * 180


def store(client: redis.Redis, count: int) -> None:
    meta = {
        "artifact_id": "",
        "run_id": "",
        "phase": "p",
        "kind": "phase_output",
        "created_at": "2026-11-24T00:00:00.000Z",
        "size_bytes": len(CONTENT),
        "content_type": "text/plain",
        "status": "active",
        "expires_at": "2100-01-01T00:00:00.000Z",
        "retention_class": "success",
        "protected": False,
        "user_starred": False,
    }
    step = 5_000
    for start in range(0, count, step):
        pipe = client.pipeline(transaction=False)
        scores = {}
        for i in range(start, min(count, start + step)):
            artifact_id = f"art-{i:08d}"
            run_id = f"run-{i // 3:08d}"
            art = {
                "artifact_id": artifact_id,
                "run_id": run_id,
                "phase": "p",
                "attempt": 1,
                "kind": "phase_output",
                "content": CONTENT,
            }
            pipe.execute_command("JSON.SET", keys.artifact_key(artifact_id), "$", orjson.dumps(art))
            pipe.execute_command(
                "JSON.SET",
                keys.artifact_meta_key(artifact_id),
                "$",
                orjson.dumps({**meta, "artifact_id": artifact_id, "run_id": run_id}),
            )
            scores[artifact_id] = FAR
        pipe.zadd(keys.ARTIFACT_EXPIRY, scores)
        pipe.execute()
        if start and start % 200_000 == 0:
            print(f"  stored {start:,}", flush=True)


def make_due(client: redis.Redis, first: int, count: int) -> None:
    step = 10_000
    for start in range(first, first + count, step):
        client.zadd(
            keys.ARTIFACT_EXPIRY,
            {f"art-{i:08d}": NOW - 1 for i in range(start, min(first + count, start + step))},
        )


def server_cpu(client: redis.Redis) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_sys"]) + float(info["used_cpu_user"])


def measure(rt: Runtime, label: str, expect: int) -> float:
    client = rt.redis
    client.execute_command("SLOWLOG", "RESET")
    client.config_set("slowlog-log-slower-than", 0)
    client.config_set("slowlog-max-len", 1_000_000)
    cpu0, t0 = server_cpu(client), time.perf_counter()
    report = collect_here(rt, now_ms=NOW)
    wall, cpu = time.perf_counter() - t0, server_cpu(client) - cpu0
    entries = client.execute_command("SLOWLOG", "GET", 1_000_000)
    slowest = max(entries, key=lambda e: e[2]) if entries else None
    client.config_set("slowlog-log-slower-than", 10_000)
    assert report.scheduled_deletion == expect, (report.scheduled_deletion, expect)
    rate = expect / wall if expect else 0
    name = ""
    if slowest is not None:
        args = slowest[3]
        name = " ".join(str(a)[:40] for a in args[:2])
    print(
        f"{label:<28} deleted {report.scheduled_deletion:>7,}  wall {wall * 1000:>9.1f} ms  "
        f"server CPU {cpu * 1000:>9.1f} ms  {rate:>9,.0f} items/s  "
        f"slowest command {slowest[2] if slowest else 0:>6} us ({name})"
    )
    return wall


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stored", type=int, default=1_000_000)
    parser.add_argument("--small", type=int, default=1_000)
    parser.add_argument("--large", type=int, default=100_000)
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory(prefix="bench-gc-") as tmp,
        EmbeddedRedis(
            dir=Path(tmp) / "redis", appendfsync="no", extra_args=["--appendonly", "no"]
        ) as server,
    ):
        client = redis.Redis.from_url(server.url, decode_responses=True)
        load_functions(client)
        rt = Runtime(settings=Settings(redis_url=server.url), redis=client)
        t0 = time.perf_counter()
        print(f"storing {args.stored:,} artifacts...", flush=True)
        store(client, args.stored)
        used = client.info("memory")["used_memory"] / 1e6
        print(
            f"stored in {time.perf_counter() - t0:.0f} s; Redis uses {used:,.0f} MB; "
            f"{client.dbsize():,} keys; batch {rt.settings.retention.gc_batch_size}"
        )
        floor = measure(rt, "nothing due", 0)
        make_due(client, 0, args.small)
        small = measure(rt, f"{args.small:,} expired", args.small)
        make_due(client, args.small, args.large)
        large = measure(rt, f"{args.large:,} expired", args.large)
        print(
            f"time ratio {large / small:.1f}x for {args.large / args.small:.0f}x as many expired; "
            f"the GC with nothing due took {floor * 1000:.1f} ms with {args.stored:,} stored"
        )
        print(f"{client.zcard(keys.ARTIFACT_EXPIRY):,} artifacts left on the expiry index")
    return 0


if __name__ == "__main__":
    sys.exit(main())
