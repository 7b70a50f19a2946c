"""``mother worker``: RQ's forking worker, made for phase jobs and guarded.

- It runs only the project's job functions and ``worker.allowed_jobs`` (:func:`job_refusal`).
- For a phase job it makes the first read and the phase's setup just before it forks the work-horse,
  and hands them to the horse on the job (:func:`workers.phase.prefetch`); it connects the horse's
  connections too (:class:`mother.connection.ForkHandoffPool`).
- It beats for the attempt its horse runs (a ``beat`` ask, :mod:`workers.heartbeat`), or, in a pool
  (:mod:`workers.pool`), tells the pool which attempt it runs and the pool beats for it.
- It freezes the garbage collector before it forks a horse: the horse's collections never write to
  the objects it inherits, so their pages stay shared.
- It outlives a Redis outage.
"""

from __future__ import annotations

import gc
import importlib
import math
import os
import time
from typing import Any

import redis
from rq import Queue, Worker
from rq.exceptions import DeserializationError
from rq.job import Job, JobStatus
from rq.registry import FailedJobRegistry
from rq.worker import WorkerStatus

from mother import keys
from mother.config import Settings
from mother.connection import ForkHandoffPool, Outage, credentials_refused, redis_down
from mother.errors import ConfigError, MotherError
from mother.hooks import load_hooks
from mother.lifecycle import JOB_FUNCTION
from mother.logs import get_logger
from workers import phase
from workers.heartbeat import AttemptBeat, beat
from workers.host import current as current_host
from workers.pool import PoolLink
from workers.sandbox.state import SandboxState

__all__ = ["PROJECT_JOBS", "PhaseWorker", "job_refusal", "log_sandbox", "preload_module", "warm_up"]

log = get_logger("worker")


def warm_up(settings: Settings) -> None:
    """Parse and compile what every phase needs once, in the worker before it forks work-horses
    (each horse inherits the caches): the shipped and configured hook files, the risk policy, and
    this module's logger (structlog builds a lazy logger on its first use, which every horse would
    repeat; docs/benchmarks.md has the figures)."""
    log.bind()
    try:
        load_hooks(settings, "")
    # a bad hook file is reported by the phase that loads it
    except ConfigError as exc:
        log.warning("hooks_not_preloaded", error=exc.message)


def log_sandbox(state: SandboxState) -> None:
    """Say at start how this worker runs tools: sandboxed, unsandboxed by configuration, or (a
    warning) unsandboxed because the sandbox cannot be made here."""
    if state.state == "missing":
        log.warning("tools_unsandboxed", why=state.detail)
    else:
        log.info("tool_sandbox", state=state.state, detail=state.detail)


# the job functions of this project a worker runs (and worker.allowed_jobs)
PROJECT_JOBS = frozenset({JOB_FUNCTION, "workers.gc.run", "workers.gc.scheduled"})


def job_refusal(job: Job, allowed: frozenset[str]) -> str | None:
    """Why a worker must not run ``job``, or None: only the project's jobs and configured ones run, as plain
    functions with JSON data and no callbacks (RQ would import and call whatever the job names)."""
    try:
        func, instance = job.func_name, job.instance
    except DeserializationError:
        return "its data is not JSON (workers read jobs with RQ's JSON serializer)"
    if func not in allowed:
        return f"job function {func!r} is not one workers run (the project's jobs, and worker.allowed_jobs)"[
            :300
        ]
    if instance is not None:
        return "it calls a method of an object; workers run plain functions"
    for kind in ("success", "failure", "stopped"):
        callback = getattr(job, f"_{kind}_callback_name", None)
        if callback:
            return f"it names an on_{kind} callback ({callback!r}); workers run none"[:300]
    return None


def preload_module(func_name: str | None, allowed: frozenset[str]) -> None:
    """Import the module of an allowed job function (the project's own, and ``worker.allowed_jobs``: the
    deployment trusts them) in the worker, before it forks the work-horse: each horse then finds it
    loaded, where RQ would import it again in every horse (and, without cached bytecode, compile it).
    A job that is not allowed is refused before this (nothing it names is imported). An import that
    fails here is left to the horse, which reports it as the job's failure."""
    if not func_name or func_name not in allowed:
        return
    module = func_name.rpartition(".")[0]
    # a module already loaded is only looked up
    try:
        importlib.import_module(module)
    except Exception as exc:  # noqa: BLE001
        log.warning("job_module_not_preloaded", module=module, error=str(exc))


class PhaseWorker(Worker):
    """RQ's forking worker (one work-horse per job, heartbeats and all) that makes a phase job's
    first read just before it forks (:func:`prefetch`), and forgets it once the horse is done.
    It also connects the horse's connections before the fork (:class:`ForkHandoffPool`): RQ's for
    every job, and for a phase job the one the phase itself uses. While a horse runs a phase, the
    worker beats for the attempt (RQ's monitor loop wakes every ``worker.heartbeat_interval_seconds``,
    rounded up to whole seconds: RQ's timer counts seconds); a horse whose worker dies beats for itself."""

    def __init__(self, *args: Any, pool: PoolLink | None = None, **kwargs: Any) -> None:
        settings = phase.runtime().settings
        # the pool this worker was forked by (it beats for our attempts), or None
        self.pool = pool
        every = max(1, math.ceil(settings.worker.heartbeat_interval_seconds))
        kwargs["job_monitoring_interval"] = min(
            kwargs.get("job_monitoring_interval") or every, every
        )
        super().__init__(*args, **kwargs)
        # the worker; a horse is a fork of it
        self._parent_pid = os.getpid()
        self.allowed_jobs = PROJECT_JOBS | frozenset(settings.worker.allowed_jobs)
        # the attempt whose horse runs now, which this worker beats for (None: no phase job runs), and
        # whether its horse died
        self._beating: str | None = None
        self._horse_failed = False
        # in a horse: the job it ran returned a failed phase attempt (RQ's "Job OK" says otherwise)
        self._failed_jobs: set[str] = set()

    def subscribe(self) -> None:
        """RQ listens on ``rq:pubsub:{worker}`` for commands (kill the horse, stop the job, shut down) from
        anyone who may PUBLISH there. Mother sends none (a run is ended through its state, which the
        phase checks), and a host's ACL user has no channel at all: none is listened to."""
        log.info(
            "rq_commands_not_listened",
            worker=self.name,
            why="Mother sends no RQ pub/sub commands, and a host's user may use no channel",
        )

    def clean_group_registries(self) -> None:
        """RQ's job groups are shared by every queue (``rq:groups``), and Mother makes none: a host
        cleans no registry but its own queues' (its ACL user may touch no other)."""

    def attempt_failed(self, job_id: str) -> bool:
        """Whether the job ``job_id`` this process ran returned a failed phase attempt."""
        return job_id in self._failed_jobs

    def handle_job_success(self, job: Job, queue: Queue, *args: Any, **kwargs: Any) -> None:
        returned = getattr(job, "_result", None)
        if isinstance(returned, dict) and returned.get("status") == "failed":
            self._failed_jobs.add(job.id)
        super().handle_job_success(job, queue, *args, **kwargs)

    def execute_job(self, job: Job, queue: Queue) -> None:
        refusal = job_refusal(job, self.allowed_jobs)
        if refusal is not None:
            self._refuse(job, queue, refusal)
            return
        pools = [self.connection.connection_pool]
        preload_module(job.func_name, self.allowed_jobs)
        rt = phase.runtime()
        # busy from here: a stop asked for while the attempt begins waits for its job, as for one
        # that runs (RQ counts the worker busy only once the horse is forked)
        self.set_state(WorkerStatus.BUSY)
        if job.func_name == JOB_FUNCTION:
            args = job.args
            # a malformed job fails in the horse, with RQ's own error
            if len(args) == 3:
                self._beating = keys.member_of_job(args)
                # what the horse finds on its job: Mother's reply to its begin ask and the setup, and
                # who beats for it
                setattr(job, phase.HANDED, phase.prefetch(*args))
                setattr(job, phase.BEATS, AttemptBeat(self._beating))
                # the pool beats for the attempt from now on (at once); with no pool to tell, the
                # first beat is ours, now
                if self._beating is not None and (
                    self.pool is None or not self.pool.begin(self._beating)
                ):
                    self._beat_for_horse()
            pools.append(rt.redis.connection_pool)
        # the horses inherit a clock measured within RESYNC_AFTER_MS
        rt.clock.refresh()
        handoffs = [pool for pool in pools if isinstance(pool, ForkHandoffPool)]
        for pool in handoffs:
            try:
                pool.open_for_child()
            # the horse connects for itself, and reports what is wrong
            except redis.RedisError as exc:
                log.warning("horse_connection_not_opened", job_id=job.id, error=str(exc))
        try:
            super().execute_job(job, queue)
        except Exception as exc:
            if not redis_down(exc):
                raise
            self._lost_redis_during(job, exc)
        finally:
            self._ended()
            for pool in handoffs:
                pool.close_handoff()

    def _refuse(self, job: Job, queue: Queue, why: str) -> None:
        """Fail ``job`` without running or importing anything it names (no horse, no callbacks, no retry, no
        webhook), and record it as a security violation: someone able to enqueue RQ jobs tried to run code."""
        log.error("job_refused", job_id=job.id, queue=queue.name, why=why)
        with self.connection.pipeline() as pipe:
            job.set_status(JobStatus.FAILED, pipeline=pipe)
            FailedJobRegistry(
                job.origin, connection=self.connection, serializer=self.serializer
            ).add(
                job,
                ttl=job.failure_ttl,
                exc_string=f"refused by worker {self.name}: {why}",
                pipeline=pipe,
            )
            pipe.lrem(queue.intermediate_queue_key, 1, job.id)
            pipe.execute()
        # Mother records it as this host's (a job on its own queue: its user's, or Mother's)
        host = current_host()
        if host is not None:
            rt = phase.runtime()
            try:
                host.asker(rt.redis, rt.settings.worker.ask_timeout_seconds).ask(
                    "violation",
                    {
                        "kind": "job_refused",
                        "fields": {
                            "job_id": job.id,
                            "queue": queue.name,
                            "worker": self.name,
                            "why": why,
                        },
                    },
                )
            except (redis.RedisError, MotherError) as exc:
                log.warning("job_refusal_not_recorded", job_id=job.id, error=str(exc))

    def fork_work_horse(self, job: Job, queue: Queue) -> None:
        # what this worker made since its last fork joins what the horse shares: collected first, so
        # no garbage stays frozen
        gc.collect()
        gc.freeze()
        super().fork_work_horse(job, queue)

    def main_work_horse(self, job: Job, queue: Queue) -> None:
        # in the horse: if the worker dies first, beat for the attempt
        beats = getattr(job, phase.BEATS, None)
        if beats is not None and beats.member is not None:
            beats.watch_worker(self._parent_pid)
        super().main_work_horse(job, queue)

    def maintain_heartbeats(self, job: Job, execution: Any) -> None:
        super().maintain_heartbeats(job, execution)
        self._beat_for_horse()

    def _beat_for_horse(self, *, outage: bool = False, died: bool = False) -> None:
        """Beat for the attempt the horse runs (``died``: say its horse died), unless the pool does. A
        failed beat is logged (at debug level during an outage the worker is already reporting); Mother
        tolerates a few missed ones."""
        member = self._beating
        host = current_host()
        if member is None or host is None or (self.pool is not None and self.pool.alive()):
            return
        rt = phase.runtime()
        try:
            asker = host.asker(rt.redis, rt.settings.worker.ask_timeout_seconds)
            beat(asker, [] if died else [member], died=[member] if died else [])
        except redis.RedisError as exc:
            (log.debug if outage else log.warning)("heartbeat_failed", error=str(exc))

    def handle_job_failure(self, job: Job, queue: Queue, *args: Any, **kwargs: Any) -> None:
        # in the worker: its horse died (killed, timed out): said at once, so Mother acts on it now
        if os.getpid() == self._parent_pid:
            self._horse_failed = True
        super().handle_job_failure(job, queue, *args, **kwargs)

    def _ended(self) -> None:
        """The job is over: the pool is told (a horse that died, at once), or, with no pool, this
        worker says a horse that died so itself."""
        member, failed = self._beating, self._horse_failed
        self._horse_failed = False
        if member is None:
            return
        told = self.pool is not None and self.pool.end(member, died=failed)
        if failed and not told:
            self._beat_for_horse(died=True)
        self._beating = None

    # -- outliving a Redis outage ---------------------------------------------------------------
    # RQ retries its blocking dequeue while Redis is away, but quits on a connection error anywhere
    # else in its loop (watching the horse, heartbeats, the suspension check, maintenance). A worker
    # outlives the outage instead (REDIS_DOWN: a restart, a failover, maxmemory): it retries with
    # backoff and carries on. A phase caught by the outage ends as a lost phase: its heartbeat stops,
    # and Mother retries it once Redis serves again.

    def _lost_redis_during(self, job: Job, exc: Exception) -> None:
        """Redis failed while the horse ran: let the horse finish (it keeps its own timeout; past it
        and a margin it is killed), then wait until Redis takes the worker's state again. RQ's record
        of the job is left for the started-job cleanup, which Mother's watchdog runs."""
        log.warning("redis_lost_during_job", job_id=job.id, error=str(exc))
        pid = self.horse_pid
        deadline = time.monotonic() + (job.timeout if job.timeout and job.timeout > 0 else 600) + 60
        next_beat = time.monotonic() + self.job_monitoring_interval
        while pid:
            # the horse's phase stays alive once Redis is back
            if time.monotonic() >= next_beat:
                next_beat = time.monotonic() + self.job_monitoring_interval
                self._beat_for_horse(outage=True)
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                break
            if done:
                break
            if time.monotonic() > deadline:
                self.kill_horse()
                self.wait_for_horse()
                break
            time.sleep(0.2)
        self._horse_pid = 0
        # what RQ's monitor would have dropped once the horse ended
        self.executions.clear()
        self._outliving("job", self.set_state, WorkerStatus.IDLE)

    def _outliving(self, during: str, func: Any, *args: Any, **kwargs: Any) -> Any:
        """``func(*args, **kwargs)``, retried while Redis cannot serve; only the worker waits: a horse that loses
        Redis fails its job as it would anyway."""
        outage = Outage(log, during)
        while True:
            try:
                result = func(*args, **kwargs)
            except Exception as exc:
                if not redis_down(exc) or os.getpid() != self._parent_pid:
                    raise
                # a worker asked to stop whose user Mother deleted (its host forgotten while it was
                # held up) would wait for a user no one makes again: it stops
                if self._stop_requested and credentials_refused(exc):
                    raise
                outage.failed(exc)
                continue
            outage.recovered()
            return result

    def dequeue_job_and_maintain_ttl(self, *args: Any) -> Any:
        # RQ retries its own connection errors here; a read cut short by a failover is retried too
        return self._outliving("dequeue", super().dequeue_job_and_maintain_ttl, *args)

    def heartbeat(self, *args: Any, **kwargs: Any) -> None:
        self._outliving("heartbeat", super().heartbeat, *args, **kwargs)

    def check_for_suspension(self, burst: bool) -> None:
        self._outliving("suspension check", super().check_for_suspension, burst)

    def run_maintenance_tasks(self) -> None:
        self._outliving("maintenance", super().run_maintenance_tasks)
