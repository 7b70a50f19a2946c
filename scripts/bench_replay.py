"""Benchmark: replay bundles' size and export time.

    .venv/bin/python scripts/bench_replay.py [--repeat 20]

An embedded server, Mother and two workers; each example that needs no person runs once, then each
run is exported ``--repeat`` times. Printed per example: the bundle's size gzip'd and as JSON, the
export's p50 (reading the run, its contexts, summaries, conflicts, activity, and writing the file),
and beside it ``mother inspect``'s read of the same run (the baseline: what reading the run costs
without the bundle's extras and compression).
"""

from __future__ import annotations

import argparse
import gzip
import statistics
import tempfile
import time
from pathlib import Path

from mother.client import MotherClient, load_spec_file
from mother.config import load_settings
from mother.replay import export, write_bundle
from mother.server import EmbeddedRedis
from mother.stack import DEV_ENV, LocalStack

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
NAMES = [
    "three-phase",
    "context-summarized",
    "conflict-escalation",
    "conflicting-agents",
    "tool-run-tests",
    "tool-ocr",
    "retries-exhausted",
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, EmbeddedRedis(dir=Path(tmp) / "redis") as server:
        stack = LocalStack(server.url, workers=2, log_dir=Path(tmp) / "logs", env={
            **DEV_ENV, "MOTHER_WORKER__WORKSPACE_ROOT": str(Path(tmp) / "ws")})  # fmt: skip
        with _started(stack):
            client = MotherClient(settings=load_settings(redis_url=server.url))
            runs = {n: client.submit(load_spec_file(EXAMPLES / f"{n}.yaml")) for n in NAMES}
            for run_id in runs.values():
                client.wait(run_id, 120)
            print(
                f"{'example':<22}{'gzip KB':>9}{'JSON KB':>9}{'export p50 ms':>15}{'inspect p50 ms':>16}"
            )
            for name, run_id in runs.items():
                path = Path(tmp) / f"{name}.json.gz"
                times, reads = [], []
                for _ in range(args.repeat):
                    t0 = time.perf_counter()
                    write_bundle(export(client, run_id), path)
                    times.append((time.perf_counter() - t0) * 1000)
                    t0 = time.perf_counter()
                    client.inspect(run_id)
                    reads.append((time.perf_counter() - t0) * 1000)
                packed = path.read_bytes()
                print(
                    f"{name:<22}{len(packed) / 1024:>9.1f}{len(gzip.decompress(packed)) / 1024:>9.1f}"
                    f"{statistics.median(times):>15.2f}{statistics.median(reads):>16.2f}"
                )


class _started:
    def __init__(self, stack: LocalStack) -> None:
        self.stack = stack

    def __enter__(self) -> LocalStack:
        return self.stack.start()

    def __exit__(self, *exc: object) -> None:
        self.stack.stop()


if __name__ == "__main__":
    main()
