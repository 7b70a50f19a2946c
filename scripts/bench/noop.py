"""Jobs that do nothing but chain: the plain-RQ baselines of ``scripts/bench_pipeline.py``.

``chain`` mirrors a run's phases without Mother: each job enqueues the next one
itself (RQ's own ``depends_on`` is not used: under load RQ 3 left dependents
stuck in READY_TO_ENQUEUE until a registry cleanup, which would measure that
instead of the queue).

``hop`` and ``relay`` are the least a central dispatcher can do, Mother's shape with
none of its work: each job appends its step to a stream (as a phase appends its
PhaseResult to ``mother:events``), and the relay, one process reading the stream with
a consumer group, enqueues the next step and acknowledges the entry in one
transaction (as Mother's dispatch does). No run state, budget, context or record.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

import redis
from rq import Queue, get_current_job

from mother import keys
from mother.streams import ensure_group
from scripts.bench import HOPS_STREAM, bench_queue, bench_redis, host_of_job

__all__ = [
    "chain",
    "chain_job_id",
    "hop",
    "hop_job_id",
    "imported_in",
    "relay",
    "relay_command",
    "serve",
]

RELAY_GROUP = "relay"

# the process that imported this module: the worker, when it preloads it
IMPORTED_IN = os.getpid()


def chain_job_id(host: str, index: int, step: int) -> str:
    return keys.host_job_id(host, f"bench-{index}-{step}")


def hop_job_id(host: str, index: int, step: int) -> str:
    return keys.host_job_id(host, f"hop-{index}-{step}")


def chain(index: int, step: int, steps: int) -> int:
    """Finish step ``step`` of chain ``index`` and enqueue the next step, if any, on the same host's queue."""
    if step + 1 < steps:
        job = get_current_job()
        assert job is not None
        host = host_of_job(job)
        queue = Queue(job.origin, connection=bench_redis(), serializer=job.serializer)
        queue.enqueue_call(
            "scripts.bench.noop.chain",
            args=(index, step + 1, steps),
            job_id=chain_job_id(host, index, step + 1),
            result_ttl=600,
        )
    return step


def imported_in() -> list[int]:
    """[the pid of the process that imported this module, the pid running the job]: a worker that
    preloads its own package's job modules shows its own pid first, the work-horse's second."""
    return [IMPORTED_IN, os.getpid()]


def hop(index: int, step: int, steps: int) -> int:
    """Finish step ``step`` of relayed chain ``index``: report it to the relay, which enqueues the next."""
    job = get_current_job()
    assert job is not None
    bench_redis().xadd(
        HOPS_STREAM,
        {"chain": index, "step": step, "steps": steps, "host": host_of_job(job)},
        maxlen=100_000,
        approximate=True,
    )
    return step


def serve(
    conn: redis.Redis, stream: str, group: str, handle: Callable[[Any, dict[bytes, bytes]], None]
) -> None:
    """Read ``stream`` with consumer group ``group`` until killed; per entry, one transaction: the writes
    ``handle(pipe, fields)`` queues on it, and the ack (a benchmark dispatcher's loop, as Mother's)."""
    ensure_group(conn, stream, group)
    while True:
        for _stream, entries in (
            conn.xreadgroup(group, group, {stream: ">"}, count=16, block=1000) or []
        ):
            for entry_id, fields in entries:
                pipe = conn.pipeline()
                handle(pipe, fields)
                pipe.xack(stream, group, entry_id)
                pipe.execute()


def relay(url: str) -> None:
    """Serve ``hop`` chains until killed: read each reported step, enqueue the next one with the ack."""
    conn = redis.Redis.from_url(url)

    def next_step(pipe: Any, fields: dict[bytes, bytes]) -> None:
        index, step, steps = (int(fields[name]) for name in (b"chain", b"step", b"steps"))
        host = fields[b"host"].decode()
        if step + 1 < steps:
            bench_queue(conn, host).enqueue_call(
                "scripts.bench.noop.hop",
                args=(index, step + 1, steps),
                job_id=hop_job_id(host, index, step + 1),
                result_ttl=600,
                pipeline=pipe,
            )

    serve(conn, HOPS_STREAM, RELAY_GROUP, next_step)


def relay_command(url: str) -> list[str]:
    """The command that runs :func:`relay` on ``url`` in a process of its own."""
    return [sys.executable, "-m", "scripts.bench.noop", url]


if __name__ == "__main__":
    relay(sys.argv[1])
