"""The daily GC's schedule: RQ's own ``CronScheduler`` (rq >= 2.4) with ``retention.gc_cron`` (a croniter
expression, UTC), enqueueing ``workers.gc.scheduled`` on the ``maintenance`` queue of an enrolled host
that takes maintenance jobs (a live one first). ``mother cron`` runs it with Mother's URL (``mother
up`` starts one). Any number may run: the job takes its day with a SET NX
(``gc:day:{YYYY-MM-DD}``), so one GC runs a day.

At start and at every tick (at least once a minute) the scheduler looks at the last time the expression
names: when that day has no GC done or running (the machine was down at 02:00, or the day's GC was
killed half way: its job failed, or its lease lapsed), and no job for it waits on the queue, it enqueues
one now. That is the GC's retry: RQ's own retries with an interval need an RQ scheduler, which no worker
runs.
"""

from __future__ import annotations

import os
import time
import uuid
from datetime import UTC, datetime
from typing import Any

from redis import Redis
from redis.exceptions import RedisError, WatchError
from rq import Queue
from rq import cron_job_registry as rq_cron_jobs
from rq.cron import CronJob, CronScheduler
from rq.defaults import DEFAULT_CRON_JOB_HISTORY_LIMIT, DEFAULT_CRON_JOB_HISTORY_TTL
from rq.exceptions import NoSuchJobError
from rq.job import Job, JobStatus
from rq.serializers import JSONSerializer

from mother import keys
from mother.config import Settings
from mother.logs import get_logger
from mother.runtime import Runtime

__all__ = ["GC_JOB", "MAINTENANCE_QUEUE", "GcCronScheduler", "catch_up", "scheduler", "start_cron"]

log = get_logger("cron")

GC_JOB = "workers.gc.scheduled"
MAINTENANCE_QUEUE = "maintenance"
# a GC of a large store may take long; RQ kills a job past its timeout
GC_TIMEOUT_SECONDS = 6 * 3600


# a job in one of these will still run: the day's GC is not enqueued again meanwhile
_WAITING = (JobStatus.QUEUED, JobStatus.SCHEDULED, JobStatus.DEFERRED)
# how long the id of the day's last enqueued job is kept
_PENDING_TTL = 3 * 86_400


class JsonCronJob(CronJob):
    """RQ's CronJob, enqueueing with the JSON serializer our workers read (RQ's own uses pickle, which
    they refuse) and by function name (workers import the job; the scheduler need not)."""

    def enqueue(self, connection: Redis) -> Job:
        queue = maintenance_queue(connection)
        if queue is None:
            raise RedisError(
                "no enrolled host takes maintenance jobs: `mother hosts add NAME --queues "
                "maintenance`, then `mother worker` with its URL (the day's GC is caught up then)"
            )
        with connection.pipeline() as pipeline:
            job = queue.enqueue_call(
                self.func_name,
                args=self.args,
                kwargs=self.kwargs,
                timeout=self.job_options.get("job_timeout"),
                result_ttl=self.job_options.get("result_ttl"),
                failure_ttl=self.job_options.get("failure_ttl"),
                job_id=keys.host_job_id(queue.name.partition(".")[0], f"gc-{uuid.uuid4().hex}"),
                pipeline=pipeline,
            )
            stamp = (job.enqueued_at or datetime.now(UTC)).timestamp()
            day = datetime.fromtimestamp(stamp, UTC).strftime("%Y-%m-%d")
            pipeline.set(keys.gc_pending_key(day), job.id, ex=_PENDING_TTL)
            pipeline.zadd(self.job_history_key, {job.id: stamp})
            pipeline.zremrangebyrank(self.job_history_key, 0, -(DEFAULT_CRON_JOB_HISTORY_LIMIT + 1))
            pipeline.expire(self.job_history_key, DEFAULT_CRON_JOB_HISTORY_TTL)
            rq_cron_jobs.add(self.name, pipeline, enqueue_timestamp=stamp)
            pipeline.execute()
        log.info("gc_enqueued", job_id=job.id, queue=self.queue_name)
        return job


class GcCronScheduler(CronScheduler):
    """RQ's CronScheduler that also catches the day's GC up at every tick (see the module)."""

    def __init__(self, *args: Any, rt: Runtime, gc_cron: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.rt, self.gc_cron = rt, gc_cron

    def enqueue_jobs(self) -> list[CronJob]:
        try:
            enqueued = super().enqueue_jobs()
        except RedisError as exc:
            log.warning("gc_not_enqueued", error=str(exc))
            enqueued = []
        try:
            queue = maintenance_queue(self.connection)
            if queue is not None:
                catch_up(self.rt, self.gc_cron, queue)
        # Redis away for a moment: the next tick looks again
        except RedisError as exc:
            log.warning("gc_catch_up_failed", error=str(exc))
        return enqueued


def scheduler(connection: Redis, settings: Settings, rt: Runtime | None = None) -> CronScheduler:
    """A CronScheduler with the GC's job on ``retention.gc_cron`` (and, given ``rt``, the catch-up at
    every tick)."""
    if rt is not None:
        cron: CronScheduler = GcCronScheduler(
            connection=connection,
            logging_level=settings.log_level,
            rt=rt,
            gc_cron=settings.retention.gc_cron,
        )
    else:
        cron = CronScheduler(connection=connection, logging_level=settings.log_level)
    job = JsonCronJob(
        queue_name=MAINTENANCE_QUEUE,
        func_name=GC_JOB,
        cron=settings.retention.gc_cron,
        job_timeout=GC_TIMEOUT_SECONDS,
        result_ttl=7 * 86_400,
        failure_ttl=30 * 86_400,
        name="artifact_gc",
    )
    cron._cron_jobs.append(job)
    return cron


def maintenance_queue(connection: Redis) -> Queue | None:
    """The maintenance queue of an enrolled host that takes maintenance jobs: a live one, else any
    (its job waits there until it starts); None when no host takes them."""
    from mother.hosts.table import HostTable

    table = HostTable(connection)
    host = table.choose(MAINTENANCE_QUEUE) or next(
        (name for name, h in sorted(table.enrolled.items()) if h.takes(MAINTENANCE_QUEUE)), None
    )
    if host is None:
        return None
    return Queue(
        keys.host_queue(host, MAINTENANCE_QUEUE), connection=connection, serializer=JSONSerializer
    )


def _job_status(connection: Redis, job_id: str) -> JobStatus | None:
    """An RQ job's status, None when it is gone."""
    try:
        return Job.fetch(job_id, connection=connection, serializer=JSONSerializer).get_status()
    except NoSuchJobError:
        return None


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def catch_up(rt: Runtime, cron: str, queue: Any) -> bool:
    """If the last time ``cron`` names (UTC, before the server's now) has no GC done or running that
    day, and no job for it waits, enqueue one now. A day held by a job that failed or is gone (its
    work-horse killed) is freed first. Returns whether it enqueued."""
    from croniter import croniter

    now = datetime.fromtimestamp(rt.clock.now_ms() / 1000, UTC).replace(tzinfo=None)
    previous = croniter(cron, now).get_prev(datetime)
    day = previous.strftime("%Y-%m-%d")
    day_key = keys.gc_day_key(day)
    held = rt.redis.get(day_key)
    if held is not None:
        words = _text(held).split()
        if words[0] != "running" or len(words) < 3:
            return False
        status = _job_status(queue.connection, words[1])
        if status not in (None, JobStatus.FAILED, JobStatus.STOPPED, JobStatus.CANCELED):
            return False
        # its job ended without marking the day done: free the day, unless it changed meanwhile
        freed = _delete_if_unchanged(rt.redis, day_key, held)
        if not freed:
            return False
        log.warning("gc_day_freed", day=day, job_id=words[1], job_status=str(status))
    pending = rt.redis.get(keys.gc_pending_key(day))
    if pending is not None and _job_status(queue.connection, _text(pending)) in _WAITING:
        return False
    job = queue.enqueue_call(
        GC_JOB,
        timeout=GC_TIMEOUT_SECONDS,
        result_ttl=7 * 86_400,
        failure_ttl=30 * 86_400,
        job_id=keys.host_job_id(queue.name.partition(".")[0], f"gc-{uuid.uuid4().hex}"),
    )
    rt.redis.set(keys.gc_pending_key(day), job.id, ex=_PENDING_TTL)
    log.info("gc_caught_up", missed=previous.isoformat() + "Z", day=day, job_id=job.id)
    return True


def _delete_if_unchanged(client: Any, key: str, value: Any) -> bool:
    """Delete ``key`` if it still holds ``value`` (WATCH, then a transaction)."""
    with client.pipeline() as pipe:
        try:
            pipe.watch(key)
            if pipe.get(key) != value:
                pipe.unwatch()
                return False
            pipe.multi()
            pipe.delete(key)
            return bool(pipe.execute()[0])
        except WatchError:
            return False


def start_cron(settings: Settings) -> None:
    """``mother cron``: catch a missed day up, then run the scheduler (which catches up at every tick)
    until stopped."""
    # RQ's cron fields follow the process's local time: the schedule is UTC
    os.environ["TZ"] = "UTC"
    time.tzset()
    rt = Runtime.create(settings)
    queue = maintenance_queue(rt.rq_redis)
    if queue is not None:
        catch_up(rt, settings.retention.gc_cron, queue)
    else:
        log.warning(
            "gc_no_maintenance_host",
            why="no enrolled host takes maintenance jobs: the daily GC waits for one",
        )
    log.info("cron_started", gc_cron=settings.retention.gc_cron)
    scheduler(rt.rq_redis, settings, rt).start()
