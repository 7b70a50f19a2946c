"""Benchmark: how long CLI commands take to start and answer.

    .venv/bin/python scripts/bench_cli_start.py [--repeat 15] [--runs 200] [--before REV]

Starts its own embedded Redis with ``--runs`` finished-looking runs listed (a Mother indexes them),
then runs each command ``--repeat`` times as a fresh process (hyperfine-style: one warm-up, then
timed runs) and prints the median and the 90th percentile wall time, against baselines measured in
the same run: the interpreter alone (``python -c pass``) and the imports every command needs
(``import typer, redis, pydantic_settings``), and with ``--before REV`` the same commands from that
revision's tree (a git worktree on ``PYTHONPATH``, same interpreter and packages; an older tree may
refuse the newer records it reads, which ends it after the same start). ``--importtime CMD`` prints the slowest imports of one
command's module (``python -X importtime``).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from scripts.bench import baseline_tree

ROOT = Path(__file__).resolve().parents[1]
PYTHON = sys.executable


def timed(
    argv: list[str], env: dict[str, str], repeat: int, cwd: Path = ROOT, strict: bool = True
) -> tuple[float, float]:
    """(median, p90) wall ms of ``argv`` run ``repeat`` times after one warm-up, in ``cwd`` (``python -m``
    puts it first on the path: the tree whose code runs)."""
    subprocess.run(argv, env=env, capture_output=True, check=False, cwd=cwd)
    took = []
    for _ in range(repeat):
        t = time.perf_counter()
        done = subprocess.run(argv, env=env, capture_output=True, check=False, cwd=cwd)
        took.append((time.perf_counter() - t) * 1000)
        if strict and done.returncode not in (0, 1):
            raise SystemExit(f"{' '.join(argv)} failed: {done.stderr.decode()[-500:]}")
    ordered = sorted(took)
    return statistics.median(ordered), ordered[min(len(ordered) - 1, int(len(ordered) * 0.9))]


def slowest_imports(module: str, env: dict[str, str], top: int = 15) -> list[str]:
    done = subprocess.run(
        [PYTHON, "-X", "importtime", "-c", f"import {module}"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    rows = []
    for line in done.stderr.splitlines():
        m = re.match(r"import time:\s+(\d+) \|\s+(\d+) \|(\s*)(\S+)", line)
        if m:
            rows.append((int(m.group(1)), m.group(4)))
    return [f"{us / 1000:6.1f} ms  {name}" for us, name in sorted(rows, reverse=True)[:top]]


def seed(url: str, runs: int, logs: Path) -> str:
    """``runs`` one-phase scripted runs, ended by a Mother and a worker (so the index lists them);
    returns one run id."""
    from mother.client import MotherClient
    from mother.config import load_settings
    from mother.stack import LocalStack

    env = {"MOTHER_SERVICE__LEASE_SECONDS": "2", "MOTHER_TOOLS__SANDBOX_REQUIRED": "false"}
    stack = LocalStack(url, workers=1, concurrency=4, mothers=1, env=env, log_dir=logs).start()
    try:
        client = MotherClient(settings=load_settings(redis_url=url))
        spec = {
            "user_id": "bench",
            "task": "t",
            "pipeline": [{"name": "a", "role": "r", "model": "scripted"}],
            "scripts": {"r": [{"text": "done"}]},
        }
        ids: list[str] = []
        while len(ids) < runs:  # in batches: the submission queue holds 100
            batch = [
                client.submit({**spec, "user_id": f"bench{(len(ids) + i) % 20}"})
                for i in range(min(50, runs - len(ids)))
            ]
            for run_id in batch:
                client.wait(run_id, timeout=120)
            ids += batch
        return ids[-1]
    finally:
        stack.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--importtime", default="", help="a module, e.g. mother.cli.runs")
    parser.add_argument("--before", default=None, help="the git revision of the baseline")
    args = parser.parse_args()
    with baseline_tree(args.before, "cli") as worktree:
        run(args, worktree)


def run(args: argparse.Namespace, worktree: Path | None) -> None:
    from mother.server import EmbeddedRedis

    with tempfile.TemporaryDirectory() as tmp:
        server = EmbeddedRedis(dir=Path(tmp) / "redis", appendfsync="no").start()
        try:
            run_id = seed(server.url, args.runs, Path(tmp) / "logs")
            env = {**os.environ, "MOTHER_REDIS_URL": server.url, "COLUMNS": "200"}
            cli = [PYTHON, "-m", "mother.cli"]
            cases = [
                ("baseline: python -c pass", [PYTHON, "-c", "pass"]),
                (
                    "baseline: import typer, redis, pydantic_settings",
                    [PYTHON, "-c", "import typer, redis, pydantic_settings"],
                ),
            ]
            commands = [
                ("mother --help", ["--help"]),
                ("mother status RUN", ["status", run_id]),
                ("mother runs", ["runs"]),
                ("mother inspect RUN", ["inspect", run_id]),
            ]
            cases += [(name, [*cli, *rest]) for name, rest in commands]
            print(f"{args.repeat} runs each, {args.runs} runs stored; wall ms (fresh process)")
            print(f"  {'command':<52} {'median':>8} {'p90':>8}")
            for name, argv in cases:
                median, p90 = timed(argv, env, args.repeat)
                print(f"  {name:<52} {median:8.0f} {p90:8.0f}")
            if worktree is not None:
                old = {**env, "PYTHONPATH": str(worktree)}
                for name, rest in commands:
                    # the old code may refuse records of the new (strict records): its start is timed
                    median, p90 = timed([*cli, *rest], old, args.repeat, cwd=worktree, strict=False)
                    print(f"  {'before: ' + name:<52} {median:8.0f} {p90:8.0f}")
            if args.importtime:
                print(f"slowest imports of {args.importtime} (self time):")
                for line in slowest_imports(args.importtime, env):
                    print("  " + line)
        finally:
            server.stop()


if __name__ == "__main__":
    main()
