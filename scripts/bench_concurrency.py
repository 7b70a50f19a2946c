"""Benchmark: many concurrent LLM-bound phases on one host, cold and warm.

    .venv/bin/python scripts/bench_concurrency.py [--delay 20] [--runs 40] [--slots 40]
        [--ways before,processes,pool] [--before REV]

A local chat-completions server (tests/chat_server.py) answers every request after ``--delay``
seconds. For each way, an embedded Redis and Mother start with ``--slots`` worker slots, and ``--runs``
one-phase runs on that model are submitted at once twice:

- cold: the moment the workers are started (fresh slots: their set-up races the burst);
- warm: once the cold round is over, on the same workers.

Ways (the same machine, one after another):

- ``before``: the tree at ``--before`` (a git worktree), ``--slots`` separate ``mother worker``
  processes: the baseline;
- ``processes``: this tree, ``--slots`` separate ``mother worker`` processes;
- ``pool``: this tree, one ``mother worker --concurrency SLOTS`` (workers/pool.py).

Printed per way and round: PSS of every worker process (parents, workers, work-horses) per in-flight
phase, sampled while the most phases were in flight (``/proc/PID/smaps_rollup``: shared pages counted
once, where RSS would count them per process); wall time against the ideal (``delay`` times the waves
the slots need); attempts lost (a run that needed more than one attempt); Mother's and Redis's CPU per
phase.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mother import keys
from mother.client import MotherClient
from mother.config import load_settings
from mother.connection import connect
from mother.server import EmbeddedRedis
from mother.stack import LocalStack
from scripts.bench import UNLIMITED, baseline_tree, proc_cpu, redis_cpu
from tests.chat_server import ChatServer
from workers.pool import pss_mb, tree

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Round:
    way: str
    kind: str
    runs: int
    wall: float
    ideal: float
    lost: int
    failed: int
    pss_total: float
    in_flight: int
    processes: int
    mother_ms: float
    redis_ms: float

    def line(self) -> str:
        per = self.pss_total / self.in_flight if self.in_flight else float("nan")
        return (
            f"  {self.way:<10} {self.kind:<5} {per:8.1f} MB ({self.in_flight:>4} in flight) "
            f"{self.wall:7.1f} s {self.ideal / self.wall * 100:6.1f}% {self.lost:>5} {self.failed:>6} "
            f"{self.mother_ms:8.2f} {self.redis_ms:8.2f} {self.processes:>9}"
        )


class Sampler(threading.Thread):
    """Samples the worker processes' PSS every second; keeps the sample with the most phases in flight."""

    def __init__(self, stack: LocalStack, client: Any) -> None:
        super().__init__(daemon=True)
        self.stack, self.client = stack, client
        self.best = (0, 0.0)
        # the processes of the best sample: parents, workers, work-horses, the sandboxes they started
        self.processes = 0
        self.stopped = threading.Event()

    def run(self) -> None:
        measured = 0.0
        while not self.stopped.wait(0.5):
            in_flight = self.client.zcard(keys.HEARTBEATS)
            # reading hundreds of smaps_rollup files costs the kernel a page-table walk each: at most
            # every 5 s, and only when at least as many phases are in flight as at the best sample
            if in_flight < self.best[0] or time.monotonic() - measured < 5.0:
                continue
            measured = time.monotonic()
            pids = [
                pid
                for name, proc in self.stack.procs.items()
                if name.startswith("worker-")
                for pid, _ in tree(proc.pid)
            ]
            self.best = (in_flight, sum(pss_mb(pid) for pid in pids))
            self.processes = len(pids)


def one_round(
    way: str, kind: str, stack: LocalStack, admin: Any, client: MotherClient, runs: int, args: Any
) -> Round:
    mother = stack.procs["mother-0"].pid
    mother0, redis0 = proc_cpu(mother), redis_cpu(admin)
    sampler = Sampler(stack, admin)
    sampler.start()
    started = time.monotonic()
    ids = [
        client.submit(
            {
                "user_id": f"bench-{i % 50}",
                "task": "say ok",
                "pipeline": [{"name": "only", "role": "coder", "model": "local-llm"}],
            }
        )
        for i in range(runs)
    ]
    reasons = [
        client.wait(run_id, timeout=args.delay * 20 + 300).termination.reason for run_id in ids
    ]
    wall = time.monotonic() - started
    sampler.stopped.set()
    sampler.join()
    attempts = [client.status(run_id) for run_id in ids]
    why: dict[str, int] = {}
    for state in attempts:
        for entry in state.history:
            if entry.event == "phase_retried":
                why[entry.detail[:60]] = why.get(entry.detail[:60], 0) + 1
    if why:
        print(f"  {way} {kind}: attempts retried because: {why}", flush=True)
    waves = math.ceil(runs / args.slots)
    return Round(
        way,
        kind,
        runs,
        wall,
        waves * args.delay,
        sum(state.attempt - 1 for state in attempts),
        sum(1 for r in reasons if r != "success"),
        sampler.best[1],
        sampler.best[0],
        sampler.processes,
        (proc_cpu(mother) - mother0) * 1000 / runs,
        (redis_cpu(admin) - redis0) * 1000 / runs,
    )


def measure(way: str, tree: Path | None, args: Any, chat: ChatServer) -> list[Round]:
    models = {"local-llm": {"provider": "openai", "base_url": chat.url}}
    with tempfile.TemporaryDirectory(prefix="bench-concurrency-") as tmp:
        server = EmbeddedRedis(dir=Path(tmp) / "redis", appendfsync="no").start()
        env = {
            **UNLIMITED,
            "MOTHER_LOG_LEVEL": args.log_level,
            "MOTHER_MODELS": json.dumps(models),
            "MOTHER_TOOLS__SANDBOX_REQUIRED": "false",
            "MOTHER_WORKER__WORKSPACE_ROOT": str(Path(tmp) / "workspaces"),
        }
        if tree is not None:
            env["PYTHONPATH"] = str(tree)
        pool = way == "pool"
        stack = LocalStack(
            server.url,
            workers=0,
            log_dir=Path(tmp) / "logs",
            env=env,
            concurrency=args.slots if pool else 1,
        ).start()
        try:
            admin = connect(server.url)
            deadline = time.monotonic() + 60
            while not admin.get(keys.LEADER_LEASE):
                if time.monotonic() > deadline:
                    raise SystemExit(f"{way}: Mother did not start: see {tmp}/logs")
                time.sleep(0.05)
            client = MotherClient(settings=load_settings(redis_url=server.url, models=models))
            # the cold round: the workers start as the burst arrives
            for i in range(1 if pool else args.slots):
                stack.add_worker(i)
            rounds = [one_round(way, "cold", stack, admin, client, args.runs, args)]
            rounds.append(one_round(way, "warm", stack, admin, client, args.runs, args))
            return rounds
        finally:
            stack.stop()
            server.stop()
            if args.logs:
                shutil.copytree(Path(tmp) / "logs", Path(args.logs) / way, dirs_exist_ok=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--delay", type=float, default=20.0, help="the model's answer time, s")
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument(
        "--slots", type=int, default=40, help="worker slots (processes or a pool's)"
    )
    parser.add_argument("--ways", default="before,processes,pool")
    parser.add_argument("--before", default=None, help="the git revision of the baseline")
    parser.add_argument(
        "--logs", default=None, help="copy the processes' logs under this directory"
    )
    parser.add_argument("--log-level", default="WARNING", help="the processes' log level")
    args = parser.parse_args()
    ways = [w.strip() for w in args.ways.split(",") if w.strip()]
    if "before" in ways and not args.before:
        parser.error("--ways before needs --before REV")
    reply = {
        "text": "ok",
        "delay": args.delay,
        "usage": {"prompt_tokens": 10, "completion_tokens": 1},
    }
    results: list[Round] = []
    with baseline_tree(args.before if "before" in ways else None, "concurrency") as worktree:
        for way in ways:
            with ChatServer([reply] * (4 * args.runs)) as chat:
                results += measure(way, worktree if way == "before" else None, args, chat)
    print(
        f"{args.runs} one-phase runs on a model answering after {args.delay:g} s, {args.slots} worker "
        f"slots; {os.cpu_count()} cores"
    )
    print(
        f"  {'way':<10} {'round':<5} {'PSS/phase':>11} {'':>16} {'wall':>9} {'ideal%':>7} {'lost':>5} "
        f"{'failed':>6} {'Mother ms':>9} {'Redis ms':>8} {'processes':>9}"
    )
    for r in results:
        print(r.line())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
