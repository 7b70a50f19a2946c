"""Moving a queued attempt to another host: one that waited for a live host, one whose job waits on a host
that is gone (stopped, its line lapsed, removed), and one waiting on a host with no worker free while
another host has one. The attempt stays the same (nothing composed or counted again): Mother takes its job
off the old host's queue and queues a new one on the new host's, and the run's ``$.host`` names the new
host, in one server call (``mh_rehost``), only while the run is at that attempt on that host and the job
was still queued (a worker of the old host that took it first runs it)."""

from __future__ import annotations

from typing import Any

import orjson
from rq.exceptions import NoSuchJobError
from rq.job import Job
from rq.serializers import JSONSerializer

from mother import keys
from mother.config import AGENTS_QUEUE, TOOLS_QUEUE
from mother.functions import call, follow_ups
from mother.hosts.liveness import dispatch_mark
from mother.lifecycle import DISPATCHED_MS, JOB_FUNCTION, QUEUE_META, job_timeout, queue_job
from mother.logs import get_logger
from mother.records import runs
from mother.runtime import Runtime

__all__ = ["phase_job", "rehost"]

log = get_logger(__name__)


def phase_job(rt: Runtime, job_id: str) -> Job | None:
    """The RQ job ``job_id`` when it is a phase job of ours naming the attempt its id says (a job its host
    queued itself, naming another run's attempt, is None)."""
    try:
        job = Job.fetch(job_id, connection=rt.rq_redis, serializer=JSONSerializer)
    except NoSuchJobError:
        return None
    host, _, _rest = job_id.partition("_")
    if (
        job.func_name != JOB_FUNCTION
        or keys.member_of_job(job.args) is None
        or not keys.is_host(host)
        or keys.phase_job_id(host, *job.args) != job_id
    ):
        return None
    return job


def _kind(rt: Runtime, run_id: str, index: int, job: Job | None) -> str:
    """Which queue the attempt goes on: its job's, else a tool_only plan's in its context."""
    if job is not None and (job.meta or {}).get(QUEUE_META) in (AGENTS_QUEUE, TOOLS_QUEUE):
        return str(job.meta[QUEUE_META])
    raw = rt.redis.execute_command("JSON.GET", keys.context_key(run_id, index), "$.tool_plan")
    plan = orjson.loads(raw) if raw else []
    return TOOLS_QUEUE if plan and plan[0] else AGENTS_QUEUE


def rehost(
    rt: Runtime, run_id: str, index: int, attempt: int, *, from_host: str | None, why: str
) -> str:
    """Queue the run's attempt on another live host (``from_host``: the host its job waits on, None when
    it waited for one). Returns 'moved'; 'wait' (no other live host takes it); 'taken' (its job was no
    longer queued there: a worker took it); 'gone' (the run moved on, or is on another host)."""
    spec = rt.spec(run_id)
    if spec is None:
        return "gone"
    old_job_id = keys.phase_job_id(from_host, run_id, index, attempt) if from_host else None
    old = phase_job(rt, old_job_id) if old_job_id else None
    kind = _kind(rt, run_id, index, old)
    host = rt.hosts.choose(kind, exclude=from_host)
    if host is None:
        return "wait"
    dispatched = (old.meta or {}).get(DISPATCHED_MS) if old is not None else None
    if not isinstance(dispatched, int):
        dispatched = rt.clock.now_ms()
    member = keys.heartbeat_member(run_id, index, attempt)
    ttl = (job_timeout(rt, spec, index) + int(rt.settings.service.claim_idle_seconds)) * 1000
    pipe: Any = rt.rq_redis.pipeline()
    job_id = queue_job(rt, pipe, host, kind, run_id, spec, index, attempt, dispatched)
    runs.set_host(pipe, run_id, host)
    pipe.set(keys.attempt_heartbeat_key(run_id, index, attempt), dispatch_mark(host), px=ttl)
    pipe.zrem(keys.HOSTS_AWAITED, member)
    if old_job_id is not None:
        pipe.delete(Job.key_for(old_job_id))
    rt.emit(
        pipe,
        "phase_moved",
        run_id=run_id,
        phase_index=index,
        attempt=attempt,
        job_id=job_id,
        host=host,
        moved_from=from_host,
        why=why,
    )
    more_keys, words = follow_ups(pipe)
    pipe.reset()
    queue_key = (
        rt.queue(keys.host_queue(from_host, kind)).key if from_host else keys.run_key(run_id)
    )
    got = int(
        call(
            rt.redis,
            "mh_rehost",
            [keys.run_key(run_id), queue_key, *more_keys],
            [index, attempt, from_host or "", old_job_id or "", *words],
        )
    )
    if got == 1:
        log.info(
            "phase_moved", run_id=run_id, job_id=job_id, host=host, moved_from=from_host, why=why
        )
        return "moved"
    return "taken" if got < 0 else "gone"
