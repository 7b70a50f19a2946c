"""The RQ job that runs one phase attempt: ``workers.phase.execute(run_id, phase_index, attempt)``.

The job carries ids only. Its first ask of Mother (``begin``) brings what the attempt runs with (the run's
record, its counters, the composed context, the tool registry): nothing the host could read itself. It
does nothing if its host no longer holds the attempt (the run ended, or Mother moved on); otherwise it
runs the agent loop, every charge, activity entry and count an ask (:mod:`workers.asking`), and ends with
its ``result`` ask (its output artifact and its final settle ride with it). Errors of the phase become a
``failed`` PhaseResult; only the death of the process leaves it to Mother's watchdog.

Under ``mother worker`` (:mod:`workers.worker`) the ``begin`` ask and the phase's setup are made by the
worker just before it forks, and found by the work-horse on its job (:data:`HANDED`), with who beats
for the attempt (:data:`BEATS`).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from rq import get_current_job
from rq.exceptions import StopRequested

from mother import keys, telemetry
from mother.config import Settings, load_settings
from mother.context import load as load_context
from mother.errors import (
    ApprovalRequired,
    ConfigError,
    HookDecision,
    MotherError,
    PhaseStale,
    PolicyViolation,
)
from mother.hooks import HarnessAction, load_hooks
from mother.journal import lane_of
from mother.lifecycle import DISPATCHED_MS, is_current
from mother.logs import configure_logging, get_logger
from mother.records import parse_run_record
from mother.records.runs import attempt_view
from mother.roles import (
    approval_tools,
    phase_kind,
    reviewed_index,
    role_settings,
    tool_manifest_error,
)
from mother.runtime import Runtime
from schemas import MAX_OUTPUT_CHARS, ComposedContext, PhaseResult, RunSpec, RunState, Usage
from schemas.conflict import Finding, Verdict
from schemas.gate import CLOUD_ESCALATION, ApprovalRequest
from schemas.tool import ToolRegistry
from workers import workspaces
from workers.agent import LoopOutcome, TurnLimits, run_loop
from workers.asking import AskedGuard, AttemptAsks
from workers.harness import Harness
from workers.heartbeat import AttemptBeat, Heartbeat, beat
from workers.host import current as current_host
from workers.metering import Meter
from workers.providers import Provider, make_provider
from workers.resume import Resume
from workers.sandbox import state as sandbox_state
from workers.spawn import SpawnRun
from workers.structured import response_format
from workers.tools import ToolBox, approval_request, output_text, shipped_tools
from workers.tools.box import call_digest
from workers.tools.executor import ToolContext, ToolExecutor
from workers.tools.plan import PlanOutcome, run_plan, verdict_of
from workers.verdict import findings_in, verdict_for

__all__ = [
    "BEATS",
    "HANDED",
    "Begun",
    "Prefetched",
    "attempt_asks",
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
    """This process's runtime (made once; the worker makes it before forking, and its horses inherit
    it): a worker host's connection, which neither loads nor calls server functions."""
    settings = load_settings()
    configure_logging(settings.log_level, settings.log_format)
    # traces on: the SDK and its exporter imported here, once, not in every work-horse
    telemetry.tracing(settings)
    return Runtime.create(settings, functions=False)


def attempt_asks(rt: Runtime, ids: tuple[str, int, int]) -> AttemptAsks:
    """The asks of attempt ``ids`` from this process's host."""
    host = current_host()
    if host is None:
        raise ConfigError(
            "this process runs as no enrolled worker host: run phases with `mother worker` and a "
            "host's URL (`mother hosts add NAME`)"
        )
    return AttemptAsks(host.asker(rt.redis, rt.settings.worker.ask_timeout_seconds), ids)


@dataclass
class Begun:
    """What Mother's reply to ``begin`` brings: the run as the attempt runs it, its counters, its composed
    context (checked), the tool registry, and the cloud-escalation check (libraries needing approval, or
    ``{"refused": why}``)."""

    state: RunState
    counters: dict[str, Any] | None
    context: ComposedContext | None
    context_error: MotherError | None
    tools: ToolRegistry | None
    cloud: Any
    # the phase's journal as recorded so far (its steps' JSON texts: workers/resume.py)
    journal: list[Any] | None = None


def _begin(asks: AttemptAsks) -> Begun | None:
    """The ``begin`` ask; None when the host no longer holds the attempt."""
    run_id, index, _attempt = asks.attempt
    try:
        reply = asks.ask("begin", {"worker": _worker_name() or ""})
    except PhaseStale:
        return None
    state = attempt_view(parse_run_record(run_id, orjson.dumps(reply["run"])))
    context: ComposedContext | None = None
    error: MotherError | None = None
    try:
        raw = reply.get("context")
        context = load_context(orjson.dumps(raw) if raw is not None else None, run_id, index)
    except MotherError as exc:
        error = exc
    counters = reply.get("counters")
    tools = reply.get("tools")
    return Begun(
        state,
        _counters(counters) if isinstance(counters, dict) else None,
        context,
        error,
        ToolRegistry.model_validate(tools) if isinstance(tools, dict) else None,
        reply.get("cloud"),
        reply.get("journal") if isinstance(reply.get("journal"), list) else None,
    )


def _counters(doc: dict[str, Any]) -> dict[str, Any]:
    return {
        name: doc.get(name)
        for name in (
            "model_calls",
            "input_tokens",
            "output_tokens",
            "spend_micro_usd",
            "duration_sec",
        )
    }


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
    asks: AttemptAsks
    # the tools whose calls wait for a person's approval; whether a failed tool_only plan goes to the model
    needing: frozenset[str] = frozenset()
    allow_fallback: bool = True
    # Mother's cloud-escalation check (begin's reply): libraries needing approval, or {"refused": why}
    cloud: Any = None
    place: Any = None
    # the attempt's steps: replayed from the phase's journal, or made live and recorded
    resume: Resume | None = None
    # what the model is asked to state in a JSON schema (a model whose catalogue entry takes one)
    response_format: dict[str, Any] | None = None
    # the run's trace (its spans' parent), when traces are on
    trace: Any = None


@dataclass
class Prefetched:
    """What the worker got for an attempt just before forking: Mother's reply to ``begin`` (None: the host
    no longer holds it, or the ask failed: the horse asks again), and the phase set up from it (``setup``:
    None when the horse must set it up, and report what is wrong)."""

    ids: tuple[str, int, int]
    begun: Begun | None = None
    setup: PhaseSetup | None = None


def prefetch(run_id: str, phase_index: int, attempt: int) -> Prefetched | None:
    """Ask ``begin`` in the worker, just before it forks the work-horse for this attempt, and set the phase
    up (:func:`_prepare`): the horse inherits the run already parsed and its agent loop ready, on warm
    memory and a live connection. If anything fails, the horse does it for itself."""
    ids = (run_id, phase_index, attempt)
    try:
        rt = runtime()
        asks = attempt_asks(rt, ids)
        got = Prefetched(ids, _begin(asks))
    # a stop asked for meanwhile (RQ's signal handler): the worker stops, as RQ would
    except StopRequested:
        raise
    # the horse asks again and reports what is wrong
    except Exception as exc:  # noqa: BLE001
        log.warning("prefetch_failed", run_id=run_id, phase_index=phase_index, error=str(exc))
        return None
    try:
        if got.begun is not None and is_current(got.begun.state, phase_index, attempt):
            got.setup = _prepare(rt, asks, got.begun, phase_index, attempt)
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
    ids = (run_id, phase_index, attempt)
    member = keys.heartbeat_member(*ids)
    job = get_current_job()
    got, beats = _handed(job, ids)
    asks = attempt_asks(rt, ids)
    begun = got.begun if got is not None and got.begun is not None else _begin(asks)
    if begun is None or not is_current(begun.state, phase_index, attempt):
        return {"status": "stale"}
    prepared = got.setup if got is not None else None
    beats.begin(
        Heartbeat(
            member,
            lambda: beat(asks.asker, [member]),
            rt.settings.worker.heartbeat_interval_seconds,
        )
    )
    started = time.monotonic()
    started_ms = rt.clock.now_ms()
    dispatched = (job.meta or {}).get(DISPATCHED_MS) if job is not None else None
    if not isinstance(dispatched, int) or isinstance(dispatched, bool):
        dispatched = None
    meters: list[Meter] = []

    # prefetch()'s, else made here
    def setup() -> PhaseSetup:
        return prepared or _prepare(rt, asks, begun, phase_index, attempt)

    phase = begun.state.spec.pipeline[phase_index]
    detour = begun.state.detour
    role = detour.role if detour is not None else phase.role
    attributes = {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": role,
        "mother.run_id": run_id,
        "mother.phase": phase.name,
        "mother.phase_index": phase_index,
        "mother.attempt": attempt,
    }
    try:
        with telemetry.span(
            rt.settings, begun.state.trace, f"invoke_agent {role}", attributes
        ) as traced:
            result = _run(
                rt,
                begun.state,
                (phase_index, attempt),
                (started, rt.clock.iso(started_ms)),
                setup,
                meters,
                keys.phase_artifact_id(*ids),
            )
            if traced is not None:
                traced.set_attribute("mother.phase.status", result.status)
        result.queued_ms = max(0, started_ms - dispatched) if dispatched is not None else None
    except PhaseStale:
        return {"status": "stale"}
    finally:
        beats.end()
        # a work-horse ends with os._exit: what it traced goes now
        telemetry.flush(rt.settings)
    _report(asks, result, meters, dispatched)
    return {"status": result.status, "artifacts": result.artifacts}


def _report(
    asks: AttemptAsks, result: PhaseResult, meters: list[Meter], dispatched_ms: int | None
) -> None:
    """The phase's last ask: its result, with the final model call's settle and (Mother makes it) its
    output artifact. A result for an attempt the host no longer holds is refused: nothing to do."""
    settle = meters[0].pending_action() if meters else None
    try:
        reply = asks.ask(
            "result",
            {
                "result": orjson.loads(result.to_json()),
                "settle": settle,
                "dispatched_ms": dispatched_ms,
            },
        )
    except PhaseStale as exc:
        log.info("result_stale", run_id=result.run_id, why=exc.message)
        return
    if meters and reply.get("settled") is not None:
        meters[0].counters = reply["settled"]


def _prepare(rt: Runtime, asks: AttemptAsks, begun: Begun, index: int, attempt: int) -> PhaseSetup:
    """Everything the phase's agent loop runs with, up to its first model call: nothing here asks Mother
    for a write or touches the workspace, so a worker makes it before forking (:func:`prefetch`) and the
    horse uses it; the horse makes it for itself when that failed. Raises what keeps the phase from
    running."""
    state = begun.state
    phase = state.spec.pipeline[index]
    if begun.context is None:
        raise begun.context_error or PhaseStale(f"run {state.run_id} phase {index} has no context")
    context = begun.context
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
        interrupt=asks.alive,
    )
    guard = AskedGuard(asks, rt.settings, state.user_id)
    spawner = SpawnRun(asks, state, index, rt.settings.service.claim_idle_seconds)
    registry = begun.tools
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
    place = workspaces.AskedPlace(asks, rt.settings)
    toolbox = ToolBox(
        rt.settings.worker.workspace_root / state.run_id,
        registry=eligible,
        local=(spawner,),
        context=ToolContext(asks, state, index, model),
        executor=ToolExecutor(
            lambda tool_id, ok, ms: asks.ask("tool_stat", {"tool_id": tool_id, "ok": ok, "ms": ms}),
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
        manifest_check=lambda tool: _blocked_tool(rt, asks, phase.name, tool),
        approval=lambda tool, arguments: approval_request(
            phase.name, tool, arguments, needing, state.grants
        ),
        # through Mother; on a shared filesystem it is already there
        on_first_use=(lambda root: _restore_workspace(place, state.run_id, root))
        if travels
        else None,
    )
    harness = Harness(
        asks,
        state,
        index,
        load_hooks(rt.settings, phase.role),
        spawn=lambda args: spawner.run(toolbox.ensure_workspace(), args),
    )
    meter = Meter(
        guard,
        rt.settings.models[model],
        asks.alive,
        limits=state.limits,
        harness=harness,
        model_name=model,
        context_limit_ratio=rt.settings.harness.context_limit_ratio,
        calibrate=lambda name, estimated, reported: asks.ask(
            "calibrate", {"model": name, "estimated": estimated, "reported": reported}
        ),
    )
    meter.counters = begun.counters
    meter.defer_final = True
    messages = _messages(phase.role, context)
    extra = harness.context()
    if extra:
        messages[1]["content"] = f"{extra}\n\n{messages[1]['content']}"
    resume = Resume.over(
        begun.journal,
        lane_of(state),
        lambda kind, **fields: asks.emit(kind, phase=phase.name, attempt=attempt, **fields),
        granted=frozenset(state.grants),
        digest_of=lambda tool, arguments: call_digest(phase.name, tool, arguments),
    )
    structured = rt.settings.models[model].structured_output == "json_schema"
    detour = state.detour
    arbiter = detour is not None and detour.kind == "arbiter"
    return PhaseSetup(
        context,
        provider,
        toolbox,
        harness,
        meter,
        messages,
        turn_limits(rt.settings, state.spec, index),
        asks,
        needing=frozenset(needing),
        cloud=begun.cloud,
        place=place,
        resume=resume,
        trace=state.trace,
        response_format=(
            response_format(phase_kind(rt.settings, state.spec, index), arbiter)
            if structured
            else None
        ),
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

    ready: PhaseSetup | None = None

    def result(**outcome: Any) -> PhaseResult:
        return PhaseResult(
            resumed=ready.resume.summary() if ready is not None and ready.resume else None,
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
            _check_cloud_escalation(state, index, ready)
        outcome = _tool_outcome(handled) if handled is not None else _agent_loop(rt, ready)
        verdict = _verdict(rt, state, index, outcome, ready.context.model, artifact_id)
        if ready.toolbox.used and workspaces.travels(rt.settings):
            _store_workspace(rt, ready.place, state.run_id, ready.toolbox.workspace)
    except PhaseStale:
        raise
    except Exception as exc:  # noqa: BLE001
        # Mother decides what the failure means by its code (mother.review)
        if isinstance(exc, MotherError):
            error, code = exc.message, exc.result_code
        else:
            error, code = f"{type(exc).__name__}: {exc}", None
        # an error of ours is its own message; anything else is a fault to trace
        bound.warning(
            "phase_failed", error=error, error_code=code, exc_info=not isinstance(exc, MotherError)
        )
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
        ready.asks.emit("turn_limit_hit", phase=phase.name, attempt=attempt, notice=notice)
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


def _restore_workspace(place: Any, run_id: str, root: Path) -> None:
    """Before the phase's first tool: the run's workspace as its last phase left it, whichever host that
    ran on."""
    moved = workspaces.restore(place, run_id, root)
    if moved.sent_files or moved.removed:
        log.info("workspace_restored", run_id=run_id, **moved.fields())


def _store_workspace(rt: Runtime, place: Any, run_id: str, root: Path) -> None:
    """After a phase that used its workspace: it is stored for the next phase's host (a phase that leaves
    more than worker.workspace_max_mb fails, workspace_too_large)."""
    cap = int(rt.settings.worker.workspace_max_mb * 2**20)
    moved = workspaces.store(place, run_id, root, cap_bytes=cap)
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


def _check_cloud_escalation(state: RunState, index: int, ready: PhaseSetup) -> None:
    """Stop before the first model call when Mother escalated the phase to a cloud model and a library
    of the run requires a person's approval for that (``require_approval_for.cloud_escalation``) and
    none was given: Mother opens an approval gate; approved, the phase runs again, allowed exactly
    that escalation. A library that refuses the model outright ends the phase (PolicyViolation). Mother
    made the check when the attempt began (``ready.cloud``)."""
    if isinstance(ready.cloud, dict) and ready.cloud.get("refused"):
        raise PolicyViolation(str(ready.cloud["refused"]))
    needing = [str(n) for n in ready.cloud] if isinstance(ready.cloud, list) else []
    if not needing:
        return
    phase = state.spec.pipeline[index]
    model = ready.context.model
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
        ready.asks,
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
        on_missing=rt.settings.conflicts.missing_verdict,
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
            resume=ready.resume,
            response_format=ready.response_format,
            span=functools.partial(telemetry.span, rt.settings, ready.trace),
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


def _blocked_tool(rt: Runtime, asks: AttemptAsks, phase: str, tool: str) -> str | None:
    reason = tool_manifest_error(rt.settings, tool)
    if reason:
        asks.emit("tool_blocked", phase=phase, tool=tool, reason=reason)
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
    job = get_current_job()
    return job.worker_name if job is not None else None
