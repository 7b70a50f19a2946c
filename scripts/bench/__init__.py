"""Benchmark-only jobs and dispatchers for ``scripts/bench_pipeline.py``; never in the product packages.

Their jobs run on workers only when allowed (``MOTHER_WORKER__ALLOWED_JOBS``, set by the benchmark) and
with the project's root on ``PYTHONPATH``. A worker host's own user may write nothing but its RQ keys and
its asks, so these jobs (which stand for dispatchers that are not Mother) write with the benchmark's
own connection (``BENCH_REDIS_URL``: the embedded server's administrator), and their ids carry the host
their queue is on.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

__all__ = [
    "BENCH_JOBS",
    "FLOOR_ENDING",
    "FLOOR_STREAM",
    "HOPS_STREAM",
    "ROOT",
    "baseline_tree",
    "bench_queue",
    "bench_redis",
    "host_of_job",
    "pct",
    "proc_cpu",
    "redis_cpu",
    "worker_env",
]

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


def worker_env(admin_url: str | None = None) -> dict[str, str]:
    """What a stack's processes need to run the benchmark's jobs: the project's root importable, the jobs
    allowed, and (``admin_url``) the connection the jobs write with."""
    env = {"PYTHONPATH": str(ROOT), "MOTHER_WORKER__ALLOWED_JOBS": json.dumps(list(BENCH_JOBS))}
    if admin_url is not None:
        env["BENCH_REDIS_URL"] = admin_url
    return env


_bench: Any = None


def bench_redis() -> Any:
    """The benchmark jobs' own connection (``BENCH_REDIS_URL``), made once per process."""
    global _bench
    if _bench is None:
        import redis

        url = os.environ.get("BENCH_REDIS_URL")
        if not url:
            raise RuntimeError("the benchmark's jobs need BENCH_REDIS_URL (worker_env(admin_url))")
        _bench = redis.Redis.from_url(url)
    return _bench


def bench_queue(conn: Any, host: str) -> Any:
    """Host ``host``'s agents queue (the benchmark's chains and runs go to each host's own)."""
    from rq import Queue
    from rq.serializers import JSONSerializer

    from mother import keys

    return Queue(keys.host_queue(host, "agents"), connection=conn, serializer=JSONSerializer)


def host_of_job(job: Any) -> str:
    """The host whose queue ``job`` came from."""
    from mother import keys

    place = keys.host_of_queue(job.origin)
    if place is None:
        raise RuntimeError(f"job {job.id} is on {job.origin!r}, no host's queue")
    return place[0]


TICK = os.sysconf("SC_CLK_TCK")


def proc_cpu(pid: int) -> float:
    """CPU seconds (user + system) process ``pid`` has used (``/proc/PID/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def redis_cpu(client: Any) -> float:
    """CPU seconds the Redis server has used (``INFO cpu``)."""
    info = client.info("cpu")
    return float(info["used_cpu_sys"]) + float(info["used_cpu_user"])


@contextmanager
def baseline_tree(revision: str | None, name: str) -> Iterator[Path | None]:
    """The tree at ``revision`` as a git worktree (None without a revision), removed afterwards: a
    benchmark's baseline, run from the same interpreter and packages in the same run."""
    if not revision:
        yield None
        return
    tree = Path(tempfile.mkdtemp(prefix=f"bench-{name}-before-")) / "tree"
    subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), revision],
        check=True,
        capture_output=True,
    )
    try:
        yield tree
    finally:
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)],
            check=False,
            capture_output=True,
        )


def pct(samples: list[float], q: float) -> float:
    """The ``q`` quantile of ``samples`` (nearest rank)."""
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]
