"""Benchmark-only jobs and dispatchers for ``scripts/bench_pipeline.py``; never in the product packages.

Their jobs run on workers only when allowed (``MOTHER_WORKER__ALLOWED_JOBS``, set by the benchmark) and
with the project's root on ``PYTHONPATH``.
"""

from __future__ import annotations

import json
from pathlib import Path

__all__ = ["BENCH_JOBS", "FLOOR_ENDING", "FLOOR_STREAM", "HOPS_STREAM", "ROOT", "worker_env"]

ROOT = Path(__file__).resolve().parents[2]
# the bare-hop jobs report here to their relay
HOPS_STREAM = "mother:bench:hops"
# the floor's phases report here to its dispatcher
FLOOR_STREAM = "mother:bench:floor"
# the floor's ended runs (Mother's own mother:ending stays clear)
FLOOR_ENDING = "mother:bench:floor:ending"
BENCH_JOBS = (
    "scripts.bench.noop.chain",
    "scripts.bench.noop.hop",
    "scripts.bench.noop.imported_in",
    "scripts.bench.floor.phase",
)


# A benchmark measures throughput, not policy: the budget's defaults lifted far out of the way.
UNLIMITED = {
    "MOTHER_BUDGET__RATE_LIMIT__MESSAGES": "100000000",
    "MOTHER_BUDGET__PER_USER_DAILY__MAX_RUNS": "100000000",
    "MOTHER_BUDGET__GLOBAL__MAX_CONCURRENT_RUNS": "100000000",
    "MOTHER_BUDGET__GLOBAL__MAX_QUEUE_DEPTH": "100000000",
}


def worker_env() -> dict[str, str]:
    """What a stack's processes need to run the benchmark's jobs: the project's root importable, the jobs allowed."""
    return {"PYTHONPATH": str(ROOT), "MOTHER_WORKER__ALLOWED_JOBS": json.dumps(list(BENCH_JOBS))}
