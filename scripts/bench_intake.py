"""Benchmark: Mother's and Redis's CPU per submission taken in, before and after identity from
authentication (principals), in the same run.

    .venv/bin/python scripts/bench_intake.py [--submissions 500] [--before REV] [--rounds 3]

Each measurement: a fresh embedded server, one Mother (no workers: a run is taken in and its first
phase dispatched, then left), ``--submissions`` raw XADDs of one-phase specs for 50 users, the budget's
limits out of the way. Mother's CPU (user + system, /proc) and Redis's (INFO cpu) are read before the
entries are appended and once every one is taken in (a run or a rejection for each).

- ``before``: the tree at ``--before`` (a git worktree, its packages first on PYTHONPATH) taking
  submissions from ``mother:submissions``;
- ``after, mother:submissions``: this tree, the same stream (Mother's own credentials);
- ``after, a principal's stream``: this tree, ``mother:submissions:bench`` (identity, the rate window
  counted at intake).

Medians of ``--rounds`` are printed, per submission, with the ratio to ``before``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

from mother import keys
from mother.connection import connect
from mother.identities import principals
from mother.server import EmbeddedRedis
from mother.stack import LocalStack

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from scripts.bench import UNLIMITED, baseline_tree, proc_cpu, redis_cpu

ROOT = Path(__file__).resolve().parents[1]


def spec(i: int) -> bytes:
    return orjson.dumps(
        {
            "run_id": f"bench-{i}",
            "user_id": f"user-{i % 50}",
            "task": "say ok",
            "pipeline": [{"name": "only", "role": "coder", "model": "scripted"}],
            "scripts": {"coder": [{"text": "ok"}]},
        }
    )


def measure(n: int, *, tree: Path | None, principal: bool) -> tuple[float, float]:
    """(Mother's, Redis's) CPU ms per submission."""
    with tempfile.TemporaryDirectory(prefix="bench-intake-") as tmp:
        server = EmbeddedRedis(dir=Path(tmp) / "redis", appendfsync="no").start()
        env = {**UNLIMITED, "MOTHER_LOG_LEVEL": "WARNING"}
        if tree is not None:
            env["PYTHONPATH"] = str(tree)
        stack = LocalStack(server.url, workers=0, log_dir=Path(tmp) / "logs", env=env).start()
        try:
            admin = connect(server.url)
            deadline = time.monotonic() + 60
            while not admin.get(keys.LEADER_LEASE):
                if time.monotonic() > deadline:
                    raise SystemExit("Mother did not start: see its log")
                time.sleep(0.05)
            stream = keys.SUBMISSIONS_STREAM
            client = admin
            if principal:
                _, password = principals.add(
                    admin, "bench", ["submit"], ["*"], "2026-11-27T00:00:00.000Z"
                )
                stream = keys.principal_submissions_key("bench")
                client = connect(server.url.replace("redis://", f"redis://bench:{password}@"))
                # Mother reads the new principal's stream once it has read the registry again
                while not _grouped(admin, stream):
                    time.sleep(0.05)
            pid = stack.procs["mother-0"].pid
            mother0, redis0 = proc_cpu(pid), redis_cpu(admin)
            pipe = client.pipeline(transaction=False)
            for i in range(n):
                pipe.xadd(stream, {"spec": spec(i)})
            pipe.execute()
            while admin.zcard(keys.RUNS_INDEX) + admin.zcard(keys.REJECTIONS_INDEX) < n:
                time.sleep(0.02)
            return (proc_cpu(pid) - mother0) * 1000 / n, (redis_cpu(admin) - redis0) * 1000 / n
        finally:
            stack.stop()
            server.stop()


def _grouped(client: Any, stream: str) -> bool:
    try:
        return any(
            g["name"] == b"mother" or g["name"] == "mother" for g in client.xinfo_groups(stream)
        )
    except Exception:  # noqa: BLE001
        return False


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--submissions", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--before", default=None, help="a git revision to compare with")
    args = parser.parse_args()
    ways: list[tuple[str, Path | None, bool]] = [
        ("after, mother:submissions", None, False),
        ("after, a principal's stream", None, True),
    ]
    results: dict[str, list[tuple[float, float]]] = {}
    with baseline_tree(args.before, "intake") as worktree:
        if worktree is not None:
            ways.insert(0, ("before", worktree, False))
        results = {name: [] for name, _, _ in ways}
        for _ in range(args.rounds):
            for name, tree, principal in ways:
                results[name].append(measure(args.submissions, tree=tree, principal=principal))
    print(
        f"{args.submissions} submissions per measurement, median of {args.rounds}; CPU ms per "
        "submission taken in"
    )
    first = ways[0][0]
    base = [statistics.median(x[i] for x in results[first]) for i in (0, 1)]
    print(f"  {'way':<30} {'Mother':>8} {'Redis':>8}   vs {first}")
    for name, _, _ in ways:
        mother = statistics.median(x[0] for x in results[name])
        server = statistics.median(x[1] for x in results[name])
        print(
            f"  {name:<30} {mother:8.3f} {server:8.3f}   "
            f"{mother / base[0]:.2f}x, {server / base[1]:.2f}x"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
