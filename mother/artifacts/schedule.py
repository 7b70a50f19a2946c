"""The daily GC's schedule: RQ's own ``CronScheduler`` (rq >= 2.4) with ``retention.gc_cron`` (a croniter
expression, UTC), enqueueing ``workers.gc.scheduled`` on the ``maintenance`` queue. ``mother cron`` runs
it (``mother up`` starts one). Any number may run: the job takes its day with a SET NX
(``gc:day:{YYYY-MM-DD}``), so one GC runs a day. At start a scheduler looks at the last time the
expression names; if that day had no GC (the machine was down at 02:00), it enqueues one now."""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime
from typing import Any

from redis import Redis
from rq import Queue
from rq import cron_job_registry as rq_cron_jobs
from rq.cron import CronJob, CronScheduler
from rq.defaults import DEFAULT_CRON_JOB_HISTORY_LIMIT, DEFAULT_CRON_JOB_HISTORY_TTL
from rq.job import Job, Retry
from rq.serializers import JSONSerializer

from mother import keys
from mother.config import Settings
from mother.logs import get_logger
from mother.runtime import Runtime

__all__ = ["GC_JOB", "MAINTENANCE_QUEUE", "catch_up", "scheduler", "start_cron"]

log = get_logger("cron")

GC_JOB = "workers.gc.scheduled"
MAINTENANCE_QUEUE = "maintenance"
# a GC of a large store may take long; RQ kills a job past its timeout
GC_TIMEOUT_SECONDS = 6 * 3600


def gc_retry() -> Retry:
    """A GC killed half way (its work-horse killed, its machine gone) is tried again the same day: its
    day's lease has lapsed by then (``retention.gc_lease_seconds``), and it finishes the first's work."""
    return Retry(max=3, interval=[360, 900, 3600])


class JsonCronJob(CronJob):
    """RQ's CronJob, enqueueing with the JSON serializer our workers read (RQ's own uses pickle, which
    they refuse) and by function name (workers import the job; the scheduler need not)."""

    def enqueue(self, connection: Redis) -> Job:
        queue = Queue(self.queue_name, connection=connection, serializer=JSONSerializer)
        with connection.pipeline() as pipeline:
            job = queue.enqueue_call(
                self.func_name,
                args=self.args,
                kwargs=self.kwargs,
                timeout=self.job_options.get("job_timeout"),
                result_ttl=self.job_options.get("result_ttl"),
                failure_ttl=self.job_options.get("failure_ttl"),
                retry=gc_retry(),
                pipeline=pipeline,
            )
            stamp = (job.enqueued_at or datetime.now(UTC)).timestamp()
            pipeline.zadd(self.job_history_key, {job.id: stamp})
            pipeline.zremrangebyrank(self.job_history_key, 0, -(DEFAULT_CRON_JOB_HISTORY_LIMIT + 1))
            pipeline.expire(self.job_history_key, DEFAULT_CRON_JOB_HISTORY_TTL)
            rq_cron_jobs.add(self.name, pipeline, enqueue_timestamp=stamp)
            pipeline.execute()
        log.info("gc_enqueued", job_id=job.id, queue=self.queue_name)
        return job


def scheduler(connection: Redis, settings: Settings) -> CronScheduler:
    """A CronScheduler with the GC's job on ``retention.gc_cron``."""
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


def catch_up(rt: Runtime, cron: str, queue: Any) -> bool:
    """If the last time ``cron`` names (UTC, before the server's now) passed with no GC that day,
    enqueue one now. Returns whether it did."""
    from croniter import croniter

    now = datetime.fromtimestamp(rt.clock.now_ms() / 1000, UTC).replace(tzinfo=None)
    previous = croniter(cron, now).get_prev(datetime)
    day = previous.strftime("%Y-%m-%d")
    if rt.redis.exists(keys.gc_day_key(day)):
        return False
    queue.enqueue_call(
        GC_JOB,
        timeout=GC_TIMEOUT_SECONDS,
        result_ttl=7 * 86_400,
        failure_ttl=30 * 86_400,
        retry=gc_retry(),
    )
    log.info("gc_caught_up", missed=previous.isoformat() + "Z", day=day)
    return True


def start_cron(settings: Settings) -> None:
    """``mother cron``: catch a missed day up, then run the scheduler until stopped."""
    # RQ's cron fields follow the process's local time: the schedule is UTC
    os.environ["TZ"] = "UTC"
    time.tzset()
    rt = Runtime.create(settings)
    queue = Queue(MAINTENANCE_QUEUE, connection=rt.rq_redis, serializer=JSONSerializer)
    catch_up(rt, settings.retention.gc_cron, queue)
    log.info("cron_started", gc_cron=settings.retention.gc_cron, queue=MAINTENANCE_QUEUE)
    scheduler(rt.rq_redis, settings).start()
