"""The RQ job that runs one phase attempt: ``workers.phase.execute(run_id, phase_index, attempt)``.

The job carries ids only. It loads the run, does nothing if the attempt is no
longer current (the run ended, or Mother moved on), claims the attempt's result
token, heartbeats while it works, runs the agent loop, stores the output as an
artifact and reports a PhaseResult (its own key, and a word on Mother's relay channel, which appends it
to ``mother:events``). Errors of the phase become
a ``failed`` PhaseResult; only the death of the process leaves it to Mother's watchdog.

Under ``mother worker`` (:mod:`workers.worker`) the first read and the phase's setup are made by the
worker just before it forks, and found by the work-horse on its job (:data:`HANDED`), with who beats
for the attempt (:data:`BEATS`).
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import redis
from rq import get_current_job

from mother import attempt_users, keys
from mother.artifacts import artifact_default
from mother.budget import Guard
from mother.config import Settings, load_settings
from mother.context import load as load_context
from mother.context import queue_load as queue_context_load
from mother.errors import (
    ApprovalRequired,
    AttemptRefused,
    ContextInvalid,
    HookDecision,
    MotherError,
    PhaseStale,
)
from mother.hooks import HarnessAction, load_hooks
from mother.libraries.context import cloud_escalation
from mother.lifecycle import DISPATCHED_MS, is_current
from mother.logs import configure_logging, get_logger
from mother.records import parse_run_record, runs
from mother.records.artifacts import store_artifact
from mother.records.budgets import parse_counters, queue_counters_read
from mother.records.runs import attempt_view
from mother.roles import (
    approval_tools,
    phase_kind,
    reviewed_index,
    role_settings,
    tool_manifest_error,
)
from mother.runtime import Runtime
from mother.security import digest, queue_token_claim
from schemas import MAX_OUTPUT_CHARS, ComposedContext, PhaseResult, RunSpec, RunState, Usage
from schemas.artifact import Artifact
from schemas.conflict import Finding, Verdict
from schemas.gate import CLOUD_ESCALATION, ApprovalRequest
from workers import workspaces
from workers.agent import LoopOutcome, TurnLimits, run_loop
from workers.harness import Harness
from workers.heartbeat import REPORTED, REPORTED_MS, AttemptBeat, AttemptLine, Heartbeat
from workers.host import current as current_host
from workers.metering import Meter
from workers.providers import Provider, make_provider
from workers.sandbox import state as sandbox_state
from workers.spawn import SpawnRun
from workers.tools import ToolBox, approval_request, output_text, shipped_tools
from workers.tools.executor import ToolContext, ToolExecutor
from workers.tools.plan import PlanOutcome, run_plan, verdict_of
from workers.verdict import findings_in, verdict_for

__all__ = [
    "BEATS",
    "HANDED",
    "Prefetched",
    "execute",
    "prefetch",
    "runtime",
    "summary_note",
    "turn_limits",
]

log = get_logger("phase")
# what the worker sets on a phase job before forking its horse: a Prefetched, and an AttemptBeat
HANDED = "mother_prefetched"
BEATS = "mother_beats"


@functools.cache
def runtime() -> Runtime:
    """This process's runtime (made once; the worker makes it before forking, and its horses inherit it)."""
    settings = load_settings()
    configure_logging(settings.log_level, settings.log_format)
    return Runtime.create(settings)


def _current(rt: Runtime, run_id: str, index: int, attempt: int) -> bool:
    return runs.is_active_at(runs.read_position(rt.redis, run_id), index, attempt)


# the run, its counters (raw), the phase's context (raw, or checked), and the attempt's result token (claimed
# by this read: None when it was not there to claim)
FirstRead = tuple[RunState | None, Any, Any, str | None]


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
    # the tools whose calls wait for a person's approval; whether a failed tool_only plan goes to the model
    needing: frozenset[str] = frozenset()
    allow_fallback: bool = True


@dataclass
class Prefetched:
    """What the worker read for an attempt just before forking, as read (``raw``: the horse parses it again
    when the worker could not; the token it claimed is there), parsed (``first``), and the phase set up
    from it (``setup``: None when the horse must set it up, and report what is wrong)."""

    ids: tuple[str, int, int]
    raw: tuple[Any, Any, Any, str | None]
    first: FirstRead | None = None
    setup: PhaseSetup | None = None


def _read_first(
    rt: Runtime, run_id: str, phase_index: int, attempt: int
) -> tuple[Any, Any, Any, str | None]:
    """The run, its counters and context, and the claim of its result token (GETDEL: the token goes to one
    worker only; it is also the password of the attempt's own ACL user, which its beats go through), as
    read: one round trip. The token waits for the host Mother queued the job for, where only that host's
    user may take it (a process that is no registered host claims none). The attempt is alive
    meanwhile: Mother gave its heartbeat key a time to live that covers the wait for a worker."""
    host = current_host()
    pipe = rt.redis.pipeline(transaction=False)
    runs.queue_read(pipe, run_id)
    queue_counters_read(pipe, run_id)
    queue_context_load(pipe, run_id, phase_index)
    if host is not None:
        queue_token_claim(pipe, host.host_id, run_id, phase_index, attempt)
    raw_run, raw_counters, raw_context, *token = pipe.execute()
    return raw_run, raw_counters, raw_context, (token[0] if token else None)


def _parsed(run_id: str, raw: tuple[Any, Any, Any, str | None]) -> FirstRead:
    """The first read, parsed; the run as its current attempt runs it (a conflict's arbiter, ...)."""
    raw_run, raw_counters, raw_context, token = raw
    return (
        (attempt_view(parse_run_record(run_id, raw_run)) if raw_run else None),
        raw_counters,
        raw_context,
        token,
    )


def prefetch(run_id: str, phase_index: int, attempt: int) -> Prefetched | None:
    """Make the first read in the worker, just before it forks the work-horse for this attempt, and set
    the phase up (:func:`_prepare`): the horse inherits the run already parsed and its agent loop ready,
    on warm memory and a live connection (in a fresh fork each object made costs copy-on-write page
    faults, and the read its own round trip). If anything fails, the horse does it for itself."""
    try:
        rt = runtime()
        got = Prefetched(
            (run_id, phase_index, attempt), _read_first(rt, run_id, phase_index, attempt)
        )
    # the horse makes the same read and reports what is wrong
    except Exception as exc:  # noqa: BLE001
        log.warning(
            "prefetch_failed",
            run_id=run_id,
            phase_index=phase_index,
            attempt=attempt,
            error=str(exc),
        )
        return None
    try:
        state, raw_counters, context, token = _parsed(run_id, got.raw)
        # the context is checked here too; when it is not valid the horse checks it again and reports why
        with contextlib.suppress(ContextInvalid):
            context = load_context(context, run_id, phase_index)
        got.first = state, raw_counters, context, token
        if state is not None and is_current(state, phase_index, attempt):
            got.setup = _prepare(
                rt, state, phase_index, attempt, parse_counters(raw_counters), context
            )
    # the horse sets it up again, and its result says what is wrong
    except Exception as exc:  # noqa: BLE001
        log.debug(
            "phase_setup_left_to_horse", run_id=run_id, phase_index=phase_index, error=str(exc)
        )
    return got


def _handed(job: Any, ids: tuple[str, int, int]) -> tuple[Prefetched | None, AttemptBeat]:
    """What the worker left on this job for its horse: its prefetch (when it is for these ids) and who beats."""
    got = getattr(job, HANDED, None) if job is not None else None
    beats = getattr(job, BEATS, None) if job is not None else None
    return (got if got is not None and got.ids == ids else None), beats or AttemptBeat()


def execute(run_id: str, phase_index: int, attempt: int) -> dict[str, Any]:
    rt = runtime()
    member = keys.heartbeat_member(run_id, phase_index, attempt)
    job = get_current_job()
    got, beats = _handed(job, (run_id, phase_index, attempt))
    prepared = got.setup if got is not None else None
    if got is not None and got.first is not None:
        state, raw_counters, raw_context, token = got.first
    else:
        raw = got.raw if got is not None else _read_first(rt, run_id, phase_index, attempt)
        state, raw_counters, raw_context, token = _parsed(run_id, raw)
    if state is None or not is_current(state, phase_index, attempt):
        return {"status": "stale"}
    # claimed before us: this job runs twice, or someone took it to report in its place
    if token is None:
        _report_missing_token(rt, run_id, phase_index, attempt)
        # its heartbeat lapses unless another worker really runs the attempt
        return {"status": "no_token"}
    line = attempt_line(rt, member, token)
    beats.begin(Heartbeat(line, rt.settings.worker.heartbeat_interval_seconds))
    started = time.monotonic()
    started_ms = rt.clock.now_ms()
    started_at = rt.clock.iso(started_ms)
    dispatched = (job.meta or {}).get(DISPATCHED_MS) if job is not None else None
    if not isinstance(dispatched, int) or isinstance(dispatched, bool):
        dispatched = None
    queued_ms = max(0, started_ms - dispatched) if dispatched is not None else None
    meters: list[Meter] = []
    # what the attempt writes, it writes as its own ACL user: its run's keys and nothing of anyone else's
    try:
        undo = attempt_users.act_as(
            rt.redis,
            run_id,
            phase_index,
            attempt,
            token,
            rt.settings.service.heartbeat_timeout_seconds,
        )
    except AttemptRefused as exc:
        beats.end()
        log.error("attempt_refused", run_id=run_id, phase_index=phase_index, error=exc.message)
        raise
    try:
        # prefetch()'s, else made here
        def setup() -> PhaseSetup:
            return prepared or _prepare(
                rt, state, phase_index, attempt, parse_counters(raw_counters), raw_context
            )

        artifact_id = attempt_users.phase_artifact_id(digest(token))
        try:
            result = _run(
                rt, state, (phase_index, attempt), (started, started_at), setup, meters, artifact_id
            )
            result.queued_ms = queued_ms
        except PhaseStale:
            for meter in meters:
                meter.settle_pending()
            return {"status": "stale"}
        finally:
            beats.end()
        _report(rt, result, token, line if beats.own() else None, meters, dispatched)
    finally:
        undo()
    return {"status": result.status, "artifacts": result.artifacts}


def attempt_line(rt: Runtime, member: str, token: str) -> AttemptLine:
    """The attempt's own line (its ACL user), whose beats Mother reads as its liveness."""
    ttl = int(rt.settings.service.heartbeat_timeout_seconds * 1000)
    return AttemptLine(rt.settings.redis_url, member, token, ttl, who=_worker_name() or "")


def _report(
    rt: Runtime,
    result: PhaseResult,
    token: str,
    line: AttemptLine | None,
    meters: list[Meter],
    dispatched_ms: int | None = None,
) -> None:
    """The phase's last write, one transaction: the final model call's settle, the output artifact and the
    result (with the attempt's token). A phase that beats for itself (``line``) first marks its heartbeat
    key ``reported`` for a long while: a result on its way is not a lost attempt (Mother deletes the key
    with the attempt's user once the attempt is no longer current); otherwise its worker's pool, which
    beats for it until the job is over, makes that mark then."""
    if line is not None:
        try:
            line.mark(REPORTED, REPORTED_MS)
        # the result still goes; at worst the attempt is taken for lost before it is read, and that
        # result is then stale (the retry's stands)
        except redis.RedisError as exc:
            log.warning("heartbeat_mark_failed", member=line.member, error=str(exc))
        finally:
            line.close()
    pipe = rt.redis.pipeline(transaction=True)
    settling = meters[0].settle_pending(pipe) if meters else False
    if result.status == "completed":
        artifact = Artifact(
            artifact_id=result.artifacts[0],
            run_id=result.run_id,
            phase=result.phase,
            attempt=result.attempt,
            kind="phase_output",
            content=result.output,
        )
        now_ms = rt.clock.now_ms()
        # Mother indexed its expiry at the dispatch, from the dispatch's time
        expires_ms = artifact_default(rt.settings, dispatched_ms or now_ms)
        store_artifact(pipe, artifact, rt.clock.iso(now_ms), expires_at=rt.clock.iso(expires_ms))
    payload = result.to_json()
    # the result where only this attempt writes and only Mother reads; Mother's relay, told on its
    # channel, appends it to mother:events (a word it misses, it takes from the key: mother.relay)
    result_key = keys.attempt_result_key(result.run_id, result.phase_index, result.attempt)
    pipe.set(
        result_key, orjson.dumps({"payload": payload.decode(), "token": token}), px=REPORTED_MS
    )
    pipe.publish(keys.RELAY_CHANNEL, result_key)
    replies = pipe.execute()
    if settling:
        try:
            meters[0].settled(replies[0])
        # the result is delivered; the run's counters say what was charged
        except MotherError as exc:
            log.warning("final_settle_refused", run_id=result.run_id, error=exc.message)


def _report_missing_token(rt: Runtime, run_id: str, phase_index: int, attempt: int) -> None:
    log.error("attempt_token_missing", run_id=run_id, phase_index=phase_index, attempt=attempt)
    host = current_host()
    rt.violation(
        "attempt_token_missing",
        run_id=run_id,
        phase_index=phase_index,
        attempt=attempt,
        worker=_worker_name(),
        host=host.host_id if host is not None else None,
        why="the attempt's result token was claimed before this job started; it cannot report",
        # without the attempt's credentials a worker appends to the violations list alone
        activity=False,
    )


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
    registry = rt.tools.registry if rt.tools.current() is not None else None
    listed = registry.tools if registry is not None else list(shipped_tools().values())
    # search_library reads the run's libraries: offered only to runs that name some
    eligible = [
        t
        for t in listed
        if t.allows(phase.role) and (state.spec.libraries or t.tool_id != "search_library")
    ]
    tool_sandbox = sandbox_state.current(rt.settings)
    needing = approval_tools(rt.settings, state.spec, phase.role) | {
        t.tool_id for t in eligible if t.approval_required
    }
    travels = workspaces.travels(rt.settings)
    toolbox = ToolBox(
        rt.settings.worker.workspace_root / state.run_id,
        registry=eligible,
        local=(spawner,),
        context=ToolContext(rt, state, index, model, guard),
        executor=ToolExecutor(
            rt.redis,
            default_timeout_ms=(
                registry.default_timeout_ms
                if registry is not None
                else rt.settings.tools.default_timeout_ms
            ),
            max_output_bytes=rt.settings.tools.max_output_bytes,
            allowed_entrypoints=frozenset(rt.settings.worker.allowed_jobs),
            sandbox=tool_sandbox.sandbox,
            rules=tool_sandbox.rules,
        ),
        max_output_chars=rt.settings.worker.max_tool_output_chars,
        granted=list(state.capabilities),
        manifest_check=lambda tool: _blocked_tool(rt, state, phase.name, tool),
        approval=lambda tool, arguments: approval_request(
            phase.name, tool, arguments, needing, state.grants
        ),
        # through Redis; on a shared filesystem it is already there
        on_first_use=(lambda root: _restore_workspace(rt, state.run_id, root)) if travels else None,
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
        needing=frozenset(needing),
        allow_fallback=(
            registry.allow_fallback_to_llm
            if registry is not None
            else rt.settings.tools.allow_fallback_to_llm
        ),
    )


def _run(
    rt: Runtime,
    state: RunState,
    ids: tuple[int, int],
    began: tuple[float, str],
    setup: Callable[[], PhaseSetup],
    meters: list[Meter],
    artifact_id: str,
) -> PhaseResult:
    """The phase's agent loop on ``setup()`` (what it raises fails the phase like the loop's errors);
    its Meter is appended to ``meters`` (its final settle is deferred to the caller's last write).
    ``ids``: (phase index, attempt); ``began``: when the worker took the job (monotonic, and the server's
    time as text); ``artifact_id``: its output's (stored by :func:`execute` with the result)."""
    index, attempt = ids
    started, started_at = began
    phase = state.spec.pipeline[index]
    bound = log.bind(run_id=state.run_id, phase=phase.name, attempt=attempt)
    manifest = None

    def result(**outcome: Any) -> PhaseResult:
        return PhaseResult(
            run_id=state.run_id,
            phase=phase.name,
            phase_index=index,
            attempt=attempt,
            manifest=manifest,
            started_at=started_at,
            finished_at=rt.clock.now_iso(),
            worker=_worker_name(),
            **outcome,
        )

    try:
        ready = setup()
        manifest = ready.context.manifest()
        meters.append(ready.meter)
        planned = time.monotonic()
        handled = _tool_plan(rt, state, index, ready)
        if handled is not None:  # a registry tool did the phase: its time is tool time
            ready.meter.spent.tool_ms += int((time.monotonic() - planned) * 1000)
        if handled is None:
            _check_cloud_escalation(rt, state, index, ready.context.model)
        outcome = _tool_outcome(handled) if handled is not None else _agent_loop(rt, ready)
        verdict = _verdict(rt, state, index, outcome, ready.context.model, artifact_id)
        if ready.toolbox.used and workspaces.travels(rt.settings):
            _store_workspace(rt, state.run_id, ready.toolbox.workspace)
    except PhaseStale:
        raise
    except Exception as exc:  # noqa: BLE001
        # Mother decides what the failure means by its code (mother.review)
        if isinstance(exc, MotherError):
            error, code = exc.message, exc.result_code
        else:
            error, code = f"{type(exc).__name__}: {exc}", None
        bound.warning("phase_failed", error=error, error_code=code)
        # what it used before it failed (its calls were charged), and how long it ran
        usage = meters[0].spent.model_copy() if meters else Usage()
        usage.duration_ms = int((time.monotonic() - started) * 1000)
        request = (
            ApprovalRequest.model_validate(exc.request)
            if isinstance(exc, ApprovalRequired)
            else None
        )
        return result(
            status="failed",
            error=error[:4000],
            error_code=code,
            usage=usage,
            approval_request=request,
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
    text = _output(outcome, ready.context, bound)
    outcome.usage.duration_ms = int((time.monotonic() - started) * 1000)
    spent = ready.meter.spent
    outcome.usage.spend_micro_usd = spent.spend_micro_usd
    outcome.usage.model_ms, outcome.usage.tool_ms = spent.model_ms, spent.tool_ms
    return result(
        status="completed",
        output=text,
        confidence=outcome.confidence,
        evidence_count=outcome.evidence_count,
        artifacts=[artifact_id],
        usage=outcome.usage,
        notices=outcome.notices,
        verdict=verdict,
        findings=_findings(outcome, ready.context),
        handled_by=handled.outcome.tool_id if handled is not None else None,
    )


def _restore_workspace(rt: Runtime, run_id: str, root: Path) -> None:
    """Before the phase's first tool: the run's workspace as its last phase left it, whichever host that
    ran on."""
    moved = workspaces.restore(rt.redis, run_id, root, workspaces.blobs_for(rt.settings, rt.redis))
    if moved.sent_files or moved.removed:
        log.info("workspace_restored", run_id=run_id, **moved.fields())


def _store_workspace(rt: Runtime, run_id: str, root: Path) -> None:
    """After a phase that used its workspace: it is stored for the next phase's host (a phase that leaves
    more than worker.workspace_max_mb fails, workspace_too_large)."""
    cap = int(rt.settings.worker.workspace_max_mb * 2**20)
    moved = workspaces.store(
        rt.redis, run_id, root, cap_bytes=cap, blobs=workspaces.blobs_for(rt.settings, rt.redis)
    )
    if moved.sent_files:
        log.info("workspace_stored", run_id=run_id, **moved.fields())


def _findings(outcome: LoopOutcome, context: ComposedContext) -> list[Finding]:
    """What the phase reports beside its output: its own findings (stated, or in its text), and
    ``ambiguity`` where Mother found its retrieval hits contradicting each other."""
    found: list[Finding] = [
        "contradiction" if f == "contradiction" else "ambiguity" for f in outcome.findings
    ] or findings_in(outcome.text)
    if context.retrieval_ambiguity and "ambiguity" not in found:
        found.append("ambiguity")
    return found


def _check_cloud_escalation(rt: Runtime, state: RunState, index: int, model: str) -> None:
    """Stop before the first model call when Mother escalated the phase to a cloud model and a library
    of the run requires a person's approval for that (``require_approval_for.cloud_escalation``) and
    none was given: Mother opens an approval gate; approved, the phase runs again, allowed exactly
    that escalation. A library that refuses the model outright ends the phase (PolicyViolation)."""
    if not state.spec.libraries:
        return
    needing = cloud_escalation(rt, state, index, model)
    if not needing:
        return
    phase = state.spec.pipeline[index]
    request = approval_request(
        phase.name,
        CLOUD_ESCALATION,
        {"model": model, "libraries": needing},
        {CLOUD_ESCALATION},
        state.grants,
    )
    if request is not None:
        libraries = ", ".join(needing)
        request["subject"] = f"cloud escalation of phase {phase.name} to {model} ({libraries})"
        request["question"] = (
            f"Phase {phase.name} was escalated to the cloud model {model}; library {libraries} "
            "require(s) approval before its chunks go to a cloud model. Approve to run the phase "
            "there, or deny to end the run."
        )
        raise ApprovalRequired(
            f"phase {phase.name} was escalated to cloud model {model}, and "
            f"{', '.join(needing)} require(s) approval for cloud_escalation; the phase stopped "
            "before its first model call and runs again once it is approved",
            request=request,
        )


def _tool_plan(rt: Runtime, state: RunState, index: int, ready: PhaseSetup) -> PlanOutcome | None:
    """Run the phase's tool_only plan, if Mother routed it to tools: the tool that did it, or None."""
    plan = ready.context.tool_plan
    if not plan:
        return None

    def charge(read_only: bool) -> None:
        ready.meter.check_alive()
        ready.meter.tool(read_only=read_only)

    return run_plan(
        rt,
        state,
        index,
        plan,
        tools=ready.toolbox.registry,
        executor=ready.toolbox.executor,
        workspace=ready.toolbox.ensure_workspace(),
        charge=charge,
        needing=ready.needing,
        allow_fallback=ready.allow_fallback,
    )


def _tool_outcome(handled: PlanOutcome) -> LoopOutcome:
    """A phase a tool did, as the agent loop's outcome: its output as text, certain, no model call."""
    output = handled.outcome.output or {}
    evidence = output.get("tests_run") if isinstance(output.get("tests_run"), int) else 1
    return LoopOutcome(
        text=f"[{handled.outcome.tool_id}] {output_text(output)}",
        confidence=1.0,
        evidence_count=max(1, int(evidence or 1)),
        usage=Usage(tool_calls=handled.calls),
        verdict=verdict_of(output),
    )


def _verdict(
    rt: Runtime, state: RunState, index: int, outcome: LoopOutcome, model: str, artifact_id: str
) -> Verdict | None:
    """A reviewing role's verdict on the work it reviews (VerdictMissing when it states none)."""
    phase = state.spec.pipeline[index]
    kind = phase_kind(rt.settings, state.spec, index)
    if kind == "work":
        return None
    reviewed = reviewed_index(rt.settings, state.spec, index)
    return verdict_for(
        kind,
        stated=outcome.verdict,
        text=outcome.text,
        confidence=outcome.confidence,
        evidence_count=outcome.evidence_count,
        artifact_ids=[artifact_id],
        role=phase.role,
        model=model,
        reviews=state.spec.pipeline[reviewed].name if reviewed is not None else None,
        winner=outcome.winner,
    )


def _agent_loop(rt: Runtime, ready: PhaseSetup) -> LoopOutcome:
    """The agent loop on a phase's setup; a control hook's skip ends it with a skipped outcome."""
    try:
        return run_loop(
            ready.provider,
            ready.toolbox,
            ready.messages,
            check_alive=ready.meter.check_alive,
            max_calls=rt.settings.worker.max_model_calls_per_phase,
            meter=ready.meter,
            limits=ready.limits,
            harness=ready.harness,
        )
    except HookDecision as decision:
        if decision.action != HarnessAction.SKIP:
            raise
        return LoopOutcome(
            text=f"Skipped: {decision.message}",
            confidence=0.0,
            evidence_count=0,
            notices=[decision.message],
        )


def _output(outcome: LoopOutcome, context: ComposedContext, bound: Any) -> str:
    """The phase's output: the final text and the context's summary note, cut to what a
    PhaseResult holds (a longer one failed the attempt, every time), with a notice when cut."""
    text = outcome.text + summary_note(context)
    if len(text) > MAX_OUTPUT_CHARS:
        notice = f"output cut to its first {MAX_OUTPUT_CHARS} characters; the reply had {len(text)}"
        bound.warning("output_cut", notice=notice)
        outcome.notices.append(notice)
        text = text[:MAX_OUTPUT_CHARS]
    return text


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


def _worker_name() -> str | None:
    from rq import get_current_job

    job = get_current_job()
    return job.worker_name if job is not None else None
