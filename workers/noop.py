"""A job that does nothing but chain: the plain-RQ baseline of ``scripts/bench_pipeline.py``.

``chain`` mirrors a run's phases without Mother: each job enqueues the next one
itself (RQ's own ``depends_on`` is not used: under load RQ 3 left dependents
stuck in READY_TO_ENQUEUE until a registry cleanup, which would measure that
instead of the queue).
"""

from __future__ import annotations

from rq import Queue, get_current_job

__all__ = ["chain", "chain_job_id"]


def chain_job_id(index: int, step: int) -> str:
    return f"bench-{index}-{step}"


def chain(index: int, step: int, steps: int) -> int:
    """Finish step ``step`` of chain ``index`` and enqueue the next step, if any."""
    if step + 1 < steps:
        job = get_current_job()
        assert job is not None
        queue = Queue(job.origin, connection=job.connection, serializer=job.serializer)
        queue.enqueue_call("workers.noop.chain", args=(index, step + 1, steps), job_id=chain_job_id(index, step + 1),
                           result_ttl=600)
    return step
