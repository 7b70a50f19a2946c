"""Soak: many runs through Mother and real workers; does Redis memory stay flat?

    .venv/bin/python scripts/soak.py [--runs 10000] [--workers 2] [--every 1000]

Starts an embedded Redis, Mother and K workers with short retentions (streams 5 s, rejections 5 s,
activity 2,000 entries) and submits single-phase scripted runs from 20 users, one in ten a spec that is
refused (a raw XADD of bad JSON: a rejection record). Every ``--every`` runs it prints Redis's memory
(INFO used_memory), what the bounded structures hold (the three streams Mother consumes, the activity
stream, the dead letters, the rejections and the admission queue) and what the per-run records hold
(run, termination, result, budgets, limits, context, artifacts, ledger, indexes: kept until the
artifact-GC issue gives them a retention), so the two can be told apart.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import orjson
import redis

from mother import keys
from mother.client import MotherClient
from mother.config import load_settings
from mother.errors import QueueFull
from mother.server import EmbeddedRedis
from mother.stack import LocalStack

SHORT = {
    "MOTHER_SERVICE__STREAM_RETENTION_SECONDS": "5",
    "MOTHER_SERVICE__REJECTION_RETENTION_SECONDS": "5",
    "MOTHER_SERVICE__ACTIVITY_MAXLEN": "2000",
    "MOTHER_SERVICE__WATCHDOG_INTERVAL_SECONDS": "0.5",
    "MOTHER_BUDGET__GLOBAL__MAX_CONCURRENT_RUNS": "20",
    "MOTHER_BUDGET__GLOBAL__MAX_QUEUE_DEPTH": "200",
    "MOTHER_BUDGET__PER_USER_DAILY__MAX_RUNS": "1000000",
    "MOTHER_BUDGET__RATE_LIMIT__MESSAGES": "1000000",
    "MOTHER_LOG_LEVEL": "WARNING",
}
BOUNDED = (
    keys.SUBMISSIONS_STREAM,
    keys.EVENTS_STREAM,
    keys.COMMANDS_STREAM,
    keys.ACTIVITY_STREAM,
    keys.DEAD_LETTER_STREAM,
    keys.REJECTIONS_INDEX,
    keys.REJECTIONS_BY_RUN,
    keys.ADMISSION_WAITING,
)


def _spec(i: int) -> dict:
    return {
        "run_id": f"soak-{i}",
        "user_id": f"user-{i % 20}",
        "task": "say hi",
        "pipeline": [{"name": "only", "role": "writer", "model": "scripted"}],
        "scripts": {"writer": [{"text": "hi"}]},
    }


def _usage(conn: redis.Redis, key: str) -> int:
    return int(conn.memory_usage(key, samples=0) or 0)


def _sample(conn: redis.Redis, done: int, started: float) -> tuple[float, ...]:
    used = int(conn.info("memory")["used_memory"]) / 2**20
    bounded = sum(_usage(conn, k) for k in BOUNDED) / 2**10
    rejections = (
        sum(_usage(conn, k) for k in conn.scan_iter(match="rejection:*", count=1000)) / 2**10
    )
    keys_now = conn.dbsize()
    return done, used, bounded + rejections, keys_now, time.monotonic() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--every", type=int, default=1000)
    args = parser.parse_args()
    os.environ.update(SHORT)
    rows = []
    with (
        tempfile.TemporaryDirectory(prefix="mother-soak-") as tmp,
        EmbeddedRedis(dir=Path(tmp) / "redis", appendfsync="no") as server,
        LocalStack(
            server.url,
            workers=args.workers,
            log_dir=Path(tmp) / "logs",
            env={"MOTHER_WORKER__WORKSPACE_ROOT": str(Path(tmp) / "ws")},
        ),
    ):
        client = MotherClient(settings=load_settings(redis_url=server.url))
        conn = client.redis
        started = time.monotonic()
        rows.append(_sample(conn, 0, started))
        submitted = 0
        print(
            f"{'runs':>7} {'used MB':>9} {'bounded KB':>11} {'keys':>8} {'seconds':>8}", flush=True
        )
        print("{:>7} {:>9.1f} {:>11.1f} {:>8} {:>8.1f}".format(*rows[0]), flush=True)
        while submitted < args.runs:
            try:
                # a refused submission: a rejection record to expire
                if submitted % 10 == 9:
                    conn.xadd(keys.SUBMISSIONS_STREAM, {"spec": f"not json {submitted}"})
                else:
                    client.submit(_spec(submitted))
            except QueueFull:
                time.sleep(0.05)
                continue
            submitted += 1
            if submitted % args.every == 0:
                _drain(client, submitted)
                rows.append(_sample(conn, submitted, started))
                print("{:>7} {:>9.1f} {:>11.1f} {:>8} {:>8.1f}".format(*rows[-1]), flush=True)
        # past the retentions, and a trim
        time.sleep(8)
        rows.append(_sample(conn, submitted, started))
        print(
            "{:>7} {:>9.1f} {:>11.1f} {:>8} {:>8.1f}  (after the retentions passed)".format(
                *rows[-1]
            ),
            flush=True,
        )
        per_run = _per_run(conn)
    first, last = rows[1], rows[-1]
    print(
        f"\nbounded structures: {first[2]:.0f} KB after {first[0]} runs, {last[2]:.0f} KB after {last[0]} runs"
    )
    print(f"per-run records (kept until the artifact-GC issue): {per_run:.1f} KB a run")
    print(
        f"memory after {first[0]} runs {first[1]:.1f} MB, after {last[0]} {last[1]:.1f} MB: "
        f"{(last[1] - first[1]) * 1024 / max(1, last[0] - first[0]):.2f} KB a run past the first {first[0]}"
    )
    return 0


def _drain(client: MotherClient, submitted: int) -> None:
    """Wait until every run submitted so far has ended (its result has a termination)."""
    last = max(i for i in range(submitted) if i % 10 != 9)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        envelope = client.result(f"soak-{last}")
        if (
            envelope is not None
            and envelope.termination is not None
            and not client.redis.zcard(keys.RUN_DEADLINES)
        ):
            return
        time.sleep(0.2)
    raise SystemExit(f"runs did not end within 600 s of the {submitted}th submission")


def _per_run(conn: redis.Redis) -> float:
    """The memory one run's records take (a sample of 20 runs' keys)."""
    total = 0
    for i in range(20):
        run_id = f"soak-{i}"
        run = conn.execute_command("JSON.GET", keys.run_key(run_id), "$.artifacts")
        artifacts = orjson.loads(run)[0] if run else []
        names = [
            keys.run_key(run_id),
            keys.termination_key(run_id),
            keys.result_key(run_id),
            keys.run_budget_key(run_id),
            keys.run_limits_key(run_id),
            keys.context_key(run_id, 0),
            keys.ledger_key(run_id),
            *(keys.artifact_key(a) for a in artifacts),
            *(keys.artifact_meta_key(a) for a in artifacts),
        ]
        total += sum(_usage(conn, name) for name in names)
    return total / 20 / 1024


if __name__ == "__main__":
    sys.exit(main())
