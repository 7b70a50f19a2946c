"""The RQ job that runs one phase attempt: ``workers.phase.execute(run_id, phase_index, attempt)``.

The job carries ids only. It loads the run, does nothing if the attempt is no
longer current (the run ended, or Mother moved on), heartbeats while it works,
runs the agent loop, stores the output as an artifact and appends a PhaseResult
to ``mother:events``. Errors of the phase become a ``failed`` PhaseResult; only
the death of the process leaves it to Mother's watchdog.
"""

from __future__ import annotations

import _thread
import contextlib
import importlib
import math
import os
import signal
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson
import redis
from rq import Queue, Worker
from rq.exceptions import DeserializationError
from rq.job import Job, JobStatus
from rq.registry import FailedJobRegistry
from rq.worker import WorkerStatus

from mother import keys
from mother.budget import Guard
from mother.client import EVENT_PHASE_RESULT
from mother.config import Settings, load_settings
from mother.connection import ForkHandoffPool, Outage, redis_down
from mother.context import load as load_context
from mother.errors import (
    BudgetExhausted,
    ConfigError,
    ContextInvalid,
    LimitExceeded,
    MotherError,
    PhaseStale,
)
from mother.functions import call
from mother.hooks import HarnessAction, load_hooks
from mother.lifecycle import JOB_FUNCTION, is_current
from mother.logs import configure_logging, get_logger
from mother.records import POSITION_PATHS, parse_position
from mother.records.budgets import COUNTER_PATHS, parse_counters
from mother.roles import role_settings, tool_manifest_error
from mother.runtime import Runtime
from mother.security import record_violation
from mother.server import parent_death_signal
from mother.signing import SignatureInvalid
from schemas import (
    ACTIVE_STATUSES,
    MAX_OUTPUT_CHARS,
    ComposedContext,
    PhaseResult,
    RunSpec,
    RunState,
    Usage,
)
from workers.agent import LoopOutcome, TurnLimits, run_loop
from workers.harness import Harness, HookDecision
from workers.metering import Meter
from workers.providers import Provider, make_provider
from workers.spawn import SpawnRun
from workers.tools import FILE_TOOLS, ToolBox

__all__ = [
    "ORPHAN_SIGNAL",
    "PROJECT_JOBS",
    "PhaseWorker",
    "beat",
    "clear_prefetch",
    "execute",
    "job_refusal",
    "prefetch",
    "preload_module",
    "runtime",
    "warm_up",
    "watch_worker",
]

log = get_logger("phase")
_runtime: Runtime | None = None


def runtime() -> Runtime:
    """This process's runtime (created once; the worker builds it before forking)."""
    global _runtime
    if _runtime is None:
        settings = load_settings()
        configure_logging(settings.log_level, settings.log_format)
        _runtime = Runtime.create(settings)
    return _runtime


def warm_up(settings: Settings) -> None:
    """Parse and compile what every phase needs once, in the worker before it forks work-horses
    (each horse inherits the caches): the shipped and configured hook files, the risk policy, and
    this module's logger (structlog builds a lazy logger on its first use: ~0.3 ms in every horse)."""
    log.bind()
    try:
        load_hooks(settings, "")
    # a bad hook file is reported by the phase that loads it
    except ConfigError as exc:
        log.warning("hooks_not_preloaded", error=exc.message)


class Heartbeat:
    """Stamps the attempt alive in ``mother:heartbeats`` every interval, at server time, from a
    daemon thread: for a phase run outside :class:`PhaseWorker` (which beats for its work-horse), or
    by a horse whose worker died. Started with ``_thread`` rather than ``threading.Thread.start``,
    which waits until the new thread has been scheduled. Its beats only stamp a member that is still
    there: one that comes after the phase's last write took the member away does not bring it back."""

    def __init__(self, rt: Runtime, member: str) -> None:
        self.rt, self.member = rt, member
        # made by start(): most phases never need one
        self.stopped: threading.Event | None = None

    def beat(self) -> None:
        beat(self.rt.redis, self.member, existing=True)

    def start(self) -> None:
        # idempotent: the orphan signal and execute() may both start it
        if self.stopped is None:
            self.stopped = threading.Event()
            _thread.start_new_thread(self.run, (self.stopped,))

    def stop(self) -> None:
        if self.stopped is not None:
            self.stopped.set()

    def run(self, stopped: threading.Event) -> None:
        while not stopped.wait(self.rt.settings.worker.heartbeat_interval_seconds):
            try:
                self.beat()
            # a missed beat is retried next interval; Mother tolerates a few
            except Exception as exc:  # noqa: BLE001
                log.warning("heartbeat_failed", error=str(exc))


def beat(client: Any, member: str, *, existing: bool = False) -> Any:
    """Stamp ``member`` alive in ``mother:heartbeats`` at server time (queued when ``client`` is a
    pipeline). ``existing``: only if it is still there (returns 0 when it is not)."""
    return call(client, "mh_heartbeat", [keys.HEARTBEATS], [member, "XX"] if existing else [member])


# -- who beats for a phase attempt ------------------------------------------------------------------
# A work-horse's own heartbeat thread cost each phase 0.7-1.3 ms of the horse's time (p50; horses with and
# without it, drawn at random in the same run): starting it, and waking it at the end, hands the GIL between
# threads while the horse waits on Redis. So the PhaseWorker beats for the attempt its horse runs (from RQ's
# monitor loop), and the horse starts its own thread only when that worker dies first: Linux sends it
# ORPHAN_SIGNAL then (PR_SET_PDEATHSIG). Where that signal cannot be armed, the horse beats for itself.
ORPHAN_SIGNAL = signal.SIGUSR2
# the attempt (its member) the worker that forked this horse beats for
_beaten_by_worker: str | None = None
# this horse's worker died (or cannot tell it would): the horse beats for itself
_orphaned = False
# the heartbeat of the attempt this process runs now
_running: Heartbeat | None = None


def _on_orphaned(_signum: int = 0, _frame: Any = None) -> None:
    global _orphaned
    _orphaned = True
    if _running is not None:
        _running.start()


def watch_worker(worker_pid: int) -> None:
    """In a work-horse: take over the attempt's heartbeat if the worker that forked it dies (at once
    when no parent-death signal can be armed here, or the worker is gone already)."""
    signal.signal(ORPHAN_SIGNAL, _on_orphaned)
    if not parent_death_signal(ORPHAN_SIGNAL) or os.getppid() != worker_pid:
        _on_orphaned()


def _current(rt: Runtime, run_id: str, index: int, attempt: int) -> bool:
    raw = rt.redis.execute_command("JSON.GET", keys.run_key(run_id), *POSITION_PATHS)
    position = parse_position(raw)
    return (
        position is not None and position[0] in ACTIVE_STATUSES and position[1:] == (index, attempt)
    )


# the run, its counters (raw), the phase's context
FirstRead = tuple[RunState | None, Any, Any, str | None]
# (raw or checked), and the attempt's result token (claimed by this read: None when it was not there to claim)


@dataclass
class PhaseSetup:
    """What a phase attempt's agent loop runs with, made before its first model call (:func:`_prepare`)."""

    # its manifest() is made by _prepare too, and kept with it
    context: ComposedContext
    provider: Provider
    toolbox: ToolBox
    harness: Harness
    meter: Meter
    messages: list[dict[str, Any]]
    limits: TurnLimits


# what prefetch() read for an attempt, and the phase set up from it (None: the horse sets it up)
_prefetched: tuple[tuple[str, int, int], FirstRead, PhaseSetup | None] | None = None
# what prefetch() read, as read: the horse parses it again when prefetch() could not (the token it claimed is there)
_prefetched_raw: tuple[tuple[str, int, int], tuple[Any, Any, Any, str | None]] | None = None


def _read_first(
    rt: Runtime, run_id: str, phase_index: int, attempt: int
) -> tuple[Any, Any, Any, str | None]:
    """The attempt's first heartbeat with the run, its counters and context, and the claim of its result token
    (GETDEL: the token goes to one worker only), as read: one round trip."""
    pipe = rt.redis.pipeline(transaction=False)
    beat(pipe, keys.heartbeat_member(run_id, phase_index, attempt))
    pipe.execute_command("JSON.GET", keys.run_key(run_id))
    pipe.execute_command("JSON.GET", keys.run_budget_key(run_id), *COUNTER_PATHS)
    pipe.execute_command("JSON.GET", keys.context_key(run_id, phase_index))
    pipe.getdel(keys.attempt_token_key(run_id, phase_index, attempt))
    _beat, raw_run, raw_counters, raw_context, token = pipe.execute()
    return raw_run, raw_counters, raw_context, token


def _parsed(raw: tuple[Any, Any, Any, str | None]) -> FirstRead:
    raw_run, raw_counters, raw_context, token = raw
    return (
        (RunState.model_validate(orjson.loads(raw_run)) if raw_run else None),
        raw_counters,
        raw_context,
        token,
    )


def prefetch(run_id: str, phase_index: int, attempt: int) -> None:
    """Make the first read in the worker, just before it forks the work-horse for this attempt, and set
    the phase up (:func:`_prepare`): the horse inherits the run already parsed and its agent loop ready,
    on warm memory and a live connection. In a fresh fork each object made costs copy-on-write page
    faults (on this project's VM ~2.5 ms to parse the run, ~2 ms for the setup) and the read its own
    round trip; here they cost a fraction of that. If anything fails, the horse does it for itself."""
    global _prefetched, _prefetched_raw
    _prefetched = _prefetched_raw = None
    try:
        rt = runtime()
        raw = _read_first(rt, run_id, phase_index, attempt)
        _prefetched_raw = ((run_id, phase_index, attempt), raw)
        state, raw_counters, context, token = _parsed(raw)
        # the context is checked here too; when it is not valid the horse checks it again and reports why
        with contextlib.suppress(ContextInvalid):
            context = load_context(context, run_id, phase_index)
        setup = None
        if state is not None and is_current(state, phase_index, attempt):
            try:
                setup = _prepare(
                    rt, state, phase_index, attempt, parse_counters(raw_counters), context
                )
            # the horse sets it up again, and its result says what is wrong
            except Exception as exc:  # noqa: BLE001
                log.debug(
                    "phase_setup_left_to_horse",
                    run_id=run_id,
                    phase_index=phase_index,
                    error=str(exc),
                )
        _prefetched = ((run_id, phase_index, attempt), (state, raw_counters, context, token), setup)
    # the horse makes the same read and reports what is wrong
    except Exception as exc:  # noqa: BLE001
        log.warning(
            "prefetch_failed",
            run_id=run_id,
            phase_index=phase_index,
            attempt=attempt,
            error=str(exc),
        )


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


def clear_prefetch() -> None:
    global _prefetched, _prefetched_raw
    _prefetched = _prefetched_raw = None


def execute(run_id: str, phase_index: int, attempt: int) -> dict[str, Any]:
    global _running
    rt = runtime()
    member = keys.heartbeat_member(run_id, phase_index, attempt)
    heartbeat = Heartbeat(rt, member)
    got, read = _prefetched, _prefetched_raw
    prepared = None
    if got is not None and got[0] == (run_id, phase_index, attempt):
        (state, raw_counters, raw_context, token), prepared = got[1], got[2]
    # read by the worker, not parsed there
    elif read is not None and read[0] == (run_id, phase_index, attempt):
        state, raw_counters, raw_context, token = _parsed(read[1])
    else:
        state, raw_counters, raw_context, token = _parsed(
            _read_first(rt, run_id, phase_index, attempt)
        )
    if state is None or not is_current(state, phase_index, attempt):
        # beaten before the run was read: take it back
        rt.redis.zrem(keys.HEARTBEATS, member)
        return {"status": "stale"}
    # claimed before us: this job runs twice, or someone took it to report in its place
    if token is None:
        log.error("attempt_token_missing", run_id=run_id, phase_index=phase_index, attempt=attempt)
        record_violation(
            rt.redis,
            "attempt_token_missing",
            at=rt.clock.now_iso(),
            maxlen=rt.settings.service.activity_maxlen,
            run_id=run_id,
            phase_index=phase_index,
            attempt=attempt,
            worker=_worker_name(),
            why="the attempt's result token was claimed before this job started; it cannot report",
        )
        # its heartbeat lapses unless another worker really runs the attempt
        return {"status": "no_token"}
    _running = heartbeat
    if _orphaned or _beaten_by_worker != member:
        heartbeat.start()
    started = time.monotonic()
    meters: list[Meter] = []

    # prefetch()'s, else made here
    def setup() -> PhaseSetup:
        return prepared or _prepare(
            rt, state, phase_index, attempt, parse_counters(raw_counters), raw_context
        )

    try:
        result = _run(rt, state, phase_index, attempt, started, setup, meters)
    except PhaseStale:
        for meter in meters:
            meter.settle_pending()
        return {"status": "stale"}
    finally:
        _running = None
        heartbeat.stop()
    # the final model call's settle, the output artifact, the result and the last beat's removal: one write
    pipe = rt.redis.pipeline(transaction=True)
    settling = meters[0].settle_pending(pipe) if meters else False
    if result.status == "completed":
        _store_artifact(pipe, rt, result)
    pipe.xadd(
        keys.EVENTS_STREAM,
        {"type": EVENT_PHASE_RESULT, "payload": result.to_json(), "token": token},
    )
    pipe.zrem(keys.HEARTBEATS, member)
    replies = pipe.execute()
    if settling:
        try:
            meters[0].settled(replies[0])
        # the result is delivered; the run's counters say what was charged
        except MotherError as exc:
            log.warning("final_settle_refused", run_id=run_id, error=exc.message)
    return {"status": result.status, "artifacts": result.artifacts}


# the job functions of this project a worker runs (and worker.allowed_jobs)
PROJECT_JOBS = frozenset({JOB_FUNCTION})


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


class PhaseWorker(Worker):
    """RQ's forking worker (one work-horse per job, heartbeats and all) that makes a phase job's
    first read just before it forks (:func:`prefetch`), and forgets it once the horse is done.
    It also connects the horse's connections before the fork (:class:`ForkHandoffPool`): RQ's for
    every job, and for a phase job the one the phase itself uses. While a horse runs a phase, the
    worker beats for the attempt (RQ's monitor loop wakes every ``worker.heartbeat_interval_seconds``,
    rounded up to whole seconds: RQ's timer counts seconds); a horse whose worker dies beats for itself."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        settings = runtime().settings
        every = max(1, math.ceil(settings.worker.heartbeat_interval_seconds))
        kwargs["job_monitoring_interval"] = min(
            kwargs.get("job_monitoring_interval") or every, every
        )
        super().__init__(*args, **kwargs)
        # the worker; a horse is a fork of it
        self._parent_pid = os.getpid()
        self.allowed_jobs = PROJECT_JOBS | frozenset(settings.worker.allowed_jobs)

    def execute_job(self, job: Job, queue: Queue) -> None:
        global _beaten_by_worker
        refusal = job_refusal(job, self.allowed_jobs)
        if refusal is not None:
            self._refuse(job, queue, refusal)
            return
        pools = [self.connection.connection_pool]
        preload_module(job.func_name, self.allowed_jobs)
        if job.func_name == JOB_FUNCTION:
            args = job.args
            # a malformed job fails in the horse, with RQ's own error
            if len(args) == 3:
                prefetch(*args)
                # None: the horse fails it with RQ's error
                _beaten_by_worker = keys.member_of_job(args)
            pools.append(runtime().redis.connection_pool)
        # the horses inherit a clock measured within RESYNC_AFTER_MS
        if _runtime is not None:
            _runtime.clock.refresh()
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
            clear_prefetch()
            _beaten_by_worker = None
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
        rt = runtime()
        record_violation(
            rt.redis,
            "job_refused",
            at=rt.clock.now_iso(),
            maxlen=rt.settings.service.activity_maxlen,
            job_id=job.id,
            queue=queue.name,
            worker=self.name,
            why=why,
        )

    def main_work_horse(self, job: Job, queue: Queue) -> None:
        # in the horse: if the worker dies first, beat for the attempt
        if _beaten_by_worker is not None:
            watch_worker(self._parent_pid)
        super().main_work_horse(job, queue)

    def maintain_heartbeats(self, job: Job, execution: Any) -> None:
        super().maintain_heartbeats(job, execution)
        self._beat_for_horse()

    def _beat_for_horse(self, *, outage: bool = False) -> None:
        """Stamp the attempt the horse runs alive (only while its member is there: the horse's last
        write takes it away). A failed beat is logged (at debug level during an outage the worker
        is already reporting); Mother tolerates a few missed ones."""
        if _beaten_by_worker is None:
            return
        try:
            beat(self.connection, _beaten_by_worker, existing=True)
        except redis.RedisError as exc:
            (log.debug if outage else log.warning)("heartbeat_failed", error=str(exc))

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


def _prepare(
    rt: Runtime,
    state: RunState,
    index: int,
    attempt: int,
    counters: dict[str, Any] | None,
    raw_context: Any,
) -> PhaseSetup:
    """Everything the phase's agent loop runs with, up to its first model call: nothing here writes to
    Redis or the workspace, so a worker makes it before forking (:func:`prefetch`) and the horse
    uses it; the horse makes it for itself when that failed. Raises what keeps the phase from running."""
    phase = state.spec.pipeline[index]

    def check_alive() -> None:
        if not _current(rt, state.run_id, index, attempt):
            raise PhaseStale(
                f"run {state.run_id} moved on; stopping phase {phase.name} attempt {attempt}"
            )

    context = (
        raw_context
        # checked by prefetch()
        if isinstance(raw_context, ComposedContext)
        else load_context(raw_context, state.run_id, index)
    )
    # made once, here: a worker makes it before forking
    context.manifest()
    # the phase's model, or the larger one Mother escalated to
    model = context.model
    provider = make_provider(
        model,
        rt.settings.models[model],
        role=phase.role,
        scripts=state.spec.scripts,
        attempt=attempt,
        interrupt=check_alive,
    )
    guard = Guard(
        rt.redis, rt.settings, state.run_id, state.user_id, rt.clock.today, attempt=(index, attempt)
    )
    spawner = SpawnRun(rt, state, index, guard, check_alive)
    toolbox = ToolBox(
        rt.settings.worker.workspace_root / state.run_id,
        tools=(*FILE_TOOLS, spawner),
        max_output_chars=rt.settings.worker.max_tool_output_chars,
        granted=list(state.capabilities),
        manifest_check=lambda tool: _blocked_tool(rt, state, phase.name, tool),
    )
    harness = Harness(
        rt,
        state,
        index,
        load_hooks(rt.settings, phase.role),
        spawn=lambda args: spawner.run(toolbox.ensure_workspace(), args),
    )
    meter = Meter(
        guard,
        rt.settings.models[model],
        check_alive,
        limits=state.limits,
        harness=harness,
        model_name=model,
        context_limit_ratio=rt.settings.harness.context_limit_ratio,
    )
    meter.counters = counters
    meter.defer_final = True
    messages = _messages(phase.role, context)
    extra = harness.context()
    if extra:
        messages[1]["content"] = f"{extra}\n\n{messages[1]['content']}"
    return PhaseSetup(
        context,
        provider,
        toolbox,
        harness,
        meter,
        messages,
        turn_limits(rt.settings, state.spec, index),
    )


def _run(
    rt: Runtime,
    state: RunState,
    index: int,
    attempt: int,
    started: float,
    setup: Callable[[], PhaseSetup],
    meters: list[Meter],
) -> PhaseResult:
    """The phase's agent loop on ``setup()`` (what it raises fails the phase like the loop's errors);
    its Meter is appended to ``meters`` (its final settle is deferred to the caller's last write)."""
    phase = state.spec.pipeline[index]
    bound = log.bind(run_id=state.run_id, phase=phase.name, attempt=attempt)
    manifest = None
    try:
        ready = setup()
        context, meter, harness = ready.context, ready.meter, ready.harness
        manifest = context.manifest()
        meters.append(meter)
        try:
            outcome = run_loop(
                ready.provider,
                ready.toolbox,
                ready.messages,
                check_alive=meter.check_alive,
                max_calls=rt.settings.worker.max_model_calls_per_phase,
                meter=meter,
                limits=ready.limits,
                harness=harness,
            )
        except HookDecision as decision:
            if decision.action != HarnessAction.SKIP:
                raise
            outcome = LoopOutcome(
                text=f"Skipped: {decision.message}",
                confidence=0.0,
                evidence_count=0,
                notices=[decision.message],
            )
    except PhaseStale:
        raise
    except Exception as exc:  # noqa: BLE001
        error = exc.message if isinstance(exc, MotherError) else f"{type(exc).__name__}: {exc}"
        code = (
            "limit_exceeded"
            if isinstance(exc, LimitExceeded)
            else "budget_exhausted"
            if isinstance(exc, BudgetExhausted)
            else exc.error_code
            if isinstance(exc, HookDecision)
            else "signature_invalid"
            if isinstance(exc, SignatureInvalid)
            else "config_invalid"
            if isinstance(exc, ConfigError)
            else "context_invalid"
            if isinstance(exc, ContextInvalid)
            else None
        )
        bound.warning("phase_failed", error=error, error_code=code)
        usage = Usage(duration_ms=int((time.monotonic() - started) * 1000))
        return PhaseResult(
            run_id=state.run_id,
            phase=phase.name,
            phase_index=index,
            attempt=attempt,
            status="failed",
            error=error[:4000],
            error_code=code,
            usage=usage,
            finished_at=rt.clock.now_iso(),
            worker=_worker_name(),
            manifest=manifest,
        )
    for notice in outcome.notices:
        bound.warning("turn_limit_hit", notice=notice)
        rt.emit(
            rt.redis,
            "turn_limit_hit",
            run_id=state.run_id,
            phase=phase.name,
            attempt=attempt,
            notice=notice,
        )
    text = outcome.text + summary_note(context)
    # a PhaseResult holds no more: the attempt failed on it, every time
    if len(text) > MAX_OUTPUT_CHARS:
        notice = f"output cut to its first {MAX_OUTPUT_CHARS} characters; the reply had {len(text)}"
        bound.warning("output_cut", notice=notice)
        outcome.notices.append(notice)
        text = text[:MAX_OUTPUT_CHARS]
    # stored by execute() with the result
    artifact_id = f"art-{uuid.uuid4().hex[:20]}"
    outcome.usage.duration_ms = int((time.monotonic() - started) * 1000)
    return PhaseResult(
        run_id=state.run_id,
        phase=phase.name,
        phase_index=index,
        attempt=attempt,
        status="completed",
        output=text,
        manifest=manifest,
        confidence=outcome.confidence,
        evidence_count=outcome.evidence_count,
        artifacts=[artifact_id],
        usage=outcome.usage,
        finished_at=rt.clock.now_iso(),
        worker=_worker_name(),
        notices=outcome.notices,
    )


def _blocked_tool(rt: Runtime, state: RunState, phase: str, tool: str) -> str | None:
    reason = tool_manifest_error(rt.settings, tool)
    if reason:
        rt.emit(
            rt.redis, "tool_blocked", run_id=state.run_id, phase=phase, tool=tool, reason=reason
        )
    return reason


def turn_limits(settings: Settings, spec: RunSpec, index: int) -> TurnLimits:
    """Per-turn tool limits: the phase's, else the run's, else the role's in config, else the defaults."""
    phase = spec.pipeline[index]
    role = role_settings(settings, phase.role)

    def pick(name: str) -> int:
        for source in (phase, spec, role):
            value = getattr(source, name, None) if source is not None else None
            if value is not None:
                return int(value)
        return int(getattr(settings.harness, name))

    return TurnLimits(
        max_tool_calls=pick("max_tool_calls"), max_consecutive_tools=pick("max_consecutive_tools")
    )


def _messages(role: str, context: ComposedContext) -> list[dict[str, Any]]:
    """The model's messages: a system prompt, then every composed section in priority order."""
    return [
        {
            "role": "system",
            "content": f"You are the {role} agent of a Mother-Harness run. Finish with a text answer.",
        },
        {"role": "user", "content": "\n\n".join(s.content for s in context.sections)},
    ]


def summary_note(context: ComposedContext) -> str:
    """The spec's reference to the summaries the agent was given, appended to its output."""
    notes = [
        f"Note: Context included summarized {s.section.replace('_', ' ')} (see {s.summary_id})"
        for s in context.sections
        if s.summary_id
    ]
    return ("\n\n" + "\n".join(notes)) if notes else ""


def _store_artifact(pipe: Any, rt: Runtime, result: PhaseResult) -> None:
    """Queue the phase's output as ``artifact:{id}`` + ``artifact_meta:{id}`` on ``pipe``."""
    artifact_id, content = result.artifacts[0], result.output
    pipe.execute_command(
        "JSON.SET",
        keys.artifact_key(artifact_id),
        "$",
        orjson.dumps(
            {
                "artifact_id": artifact_id,
                "run_id": result.run_id,
                "phase": result.phase,
                "attempt": result.attempt,
                "kind": "phase_output",
                "content": content,
            }
        ),
    )
    pipe.execute_command(
        "JSON.SET",
        keys.artifact_meta_key(artifact_id),
        "$",
        orjson.dumps(
            {
                "artifact_id": artifact_id,
                "run_id": result.run_id,
                "phase": result.phase,
                "kind": "phase_output",
                "created_at": rt.clock.now_iso(),
                "size_bytes": len(content.encode()),
                "content_type": "text/plain",
            }
        ),
    )


def _worker_name() -> str | None:
    from rq import get_current_job

    job = get_current_job()
    return job.worker_name if job is not None else None
