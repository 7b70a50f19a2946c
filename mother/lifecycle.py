"""A run's life inside Mother: queued → running (phase by phase) → terminated.

Every change of a run's phase goes through the ``mh_transition`` server function,
fenced by the (phase_index, attempt) the caller saw: a late, duplicate or
re-delivered PhaseResult for an attempt that is no longer current changes nothing.
Every end goes through :func:`end_run`, which calls the single termination writer.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal, cast

import orjson
from rq.job import Job

from mother import calls, keys, telemetry
from mother.activity import flat_fields, make_event
from mother.artifacts import retain
from mother.budget import Guard, open_run_budget, release_reservations
from mother.capabilities import denial
from mother.codes import SEQ_SPAN
from mother.config import AGENTS_QUEUE, TOOLS_QUEUE
from mother.connection import check_durable, queue_durable
from mother.context import Composition, LLMSummarizer, compose, llm_summarizer
from mother.context import store as store_context
from mother.errors import (
    ConfigError,
    ContextBudgetExceeded,
    InsufficientEvidence,
    MotherError,
    PolicyViolation,
)
from mother.functions import execute, follow_ups
from mother.gates.build import open_op, phase_gate
from mother.hosts.liveness import queue_alive
from mother.ledger import queue_node_read, to_usd
from mother.libraries.context import library_approvals, library_hits
from mother.limits import resolve_for_spec
from mother.logs import get_logger
from mother.records import budgets, runs
from mother.records import conflicts as conflict_records
from mother.roles import phase_needs_approval
from mother.runtime import Runtime
from mother.streams import Delivery
from mother.termination import build_record, terminate, terminated
from schemas import (
    ACTIVE_STATUSES,
    SPAWNED_BY,
    Gate,
    HistoryEntry,
    PhaseResult,
    ResultEnvelope,
    RunSpec,
    RunState,
    TerminationReason,
    TerminationRecord,
)

__all__ = [
    "Move",
    "Moved",
    "admit_waiting",
    "completed_event",
    "dispatch",
    "end_run",
    "finish_end",
    "is_current",
    "make",
    "outputs_of",
    "phase_timeout_seconds",
    "queue_end_reads",
    "run_duration_seconds",
    "start_run",
]

log = get_logger("lifecycle")
JOB_FUNCTION = "workers.phase.execute"
# the phase job's meta field holding the server's time (ms) of its dispatch
DISPATCHED_MS = "dispatched_ms"
# the phase job's kind of queue (agents, tools): where it goes on the host Mother moves it to
QUEUE_META = "queue"
# what keeps a phase from being dispatched, and ends its run (_end_undispatchable says how)
UNDISPATCHABLE = (ContextBudgetExceeded, ConfigError, InsufficientEvidence, PolicyViolation)


def run_duration_seconds(rt: Runtime, spec: RunSpec) -> float:
    """The run's wall clock: the smaller of its budget profile's and its resolved
    duration_seconds (limit resolution: defaults → role → limit_overrides; parent caps not applied here)."""
    profile = rt.settings.budget.profiles[spec.budget_profile].wall_clock_seconds
    resolved = resolve_for_spec(rt.settings, spec).get("duration_seconds")
    return min(profile, resolved) if resolved is not None else profile


def phase_timeout_seconds(rt: Runtime, spec: RunSpec, index: int) -> float:
    return spec.pipeline[index].timeout_seconds or rt.settings.runs.phase_timeout_seconds


@dataclass(frozen=True)
class Move:
    """One move of a run: from attempt ``frm`` to ``to`` (phase index, attempt), made by :func:`make` only
    if ``frm`` is still current (the check is server-side, ``mh_transition``: the caller needs no fresh
    read of the run). Whoever decides a move builds one (review, a conflict's strategy, a person's
    decision, intake); what happens at ``to`` is ``then``:

    - ``dispatch`` (the default): the phase's job is queued (composed, on a live host) with the move; a
      first attempt that needs a person's approval (:func:`mother.roles.phase_needs_approval`, a library's
      cloud escalation) is not dispatched: the run moves to the phase's attempt 0 and waits on its gate;
    - ``wait``: the run waits for a person on ``gate`` (no job, no phase deadline);
    - ``stay``: nothing more (the accepted result was the last: the caller ends the run with the state
      :func:`make` gives back).

    ``result``: the accepted result the move records (its history entry names its phase); ``start``: the
    run's first move (its deadline set); ``host``: the result's host, checked against the attempt's;
    ``activity``: entries logged with the move; ``also``: more writes queued on its pipeline;
    ``delivery``: the stream entry being handled, acknowledged with the move; ``close``: the close op of
    the gate the run waits on (a person's decision; a refused one raises GateRefused); ``outputs``: the
    earlier phases' (name, output) for the next context (read from the run when None)."""

    run_id: str
    spec: RunSpec
    frm: tuple[int, int]
    to: tuple[int, int]
    event: str
    detail: str = ""
    result: PhaseResult | None = None
    start: bool = False
    host: str = ""
    activity: Sequence[tuple[str, dict[str, Any]]] = ()
    also: Callable[[Any], None] | None = None
    delivery: Delivery | None = None
    close: str = ""
    then: Literal["dispatch", "wait", "stay"] = "dispatch"
    gate: Gate | None = None
    outputs: Sequence[tuple[str, str]] | None = None


@dataclass
class Moved:
    """What :func:`make` did: whether the move applied, and (``then="stay"``) the run after it."""

    applied: bool
    state: RunState | None = None

    def __bool__(self) -> bool:
        return self.applied


def make(rt: Runtime, move: Move) -> Moved:
    """Make ``move`` (:class:`Move`): the one way a run moves from one attempt to another."""
    if move.then == "wait":
        assert move.gate is not None, "a move that waits names its gate"
        return Moved(_open_gate(rt, move, move.gate))
    if move.then == "stay":
        return _stay(rt, move)
    return Moved(_dispatching(rt, move))


def _transition_args(rt: Runtime, move: Move) -> dict[str, Any]:
    """:func:`mother.calls.transition`'s arguments for ``move`` (its gate op and follow-ups aside)."""
    phase = move.spec.pipeline[move.to[0]].name
    at = rt.clock.now_iso()
    result = move.result
    about, attempt = (result.phase, result.attempt) if result is not None else (phase, move.to[1])
    entry = HistoryEntry(
        at=at, event=move.event, phase=about, attempt=attempt, detail=move.detail[:4000]
    )
    return {
        "run_id": move.run_id,
        "expected": move.frm,
        "to": move.to,
        "phase": phase,
        "phase_timeout_ms": int(phase_timeout_seconds(rt, move.spec, move.to[0]) * 1000),
        "run_duration_ms": int(run_duration_seconds(rt, move.spec) * 1000) if move.start else 0,
        "at": at,
        "history": entry.to_json(),
        "result": result.to_json() if result is not None else "",
        "artifacts": list(result.artifacts) if result is not None else [],
        "host": move.host,
        "observed": _observed(result),
    }


def _refused_gate(reply: int, run_id: str, gate: str) -> None:
    """Raise the one-line GateRefused for a refused gate op (a reply of -2..-5)."""
    if not gate or reply >= -1:
        return
    op = orjson.loads(gate)
    refusal = calls.gate_refusal(
        int(reply), run_id=run_id, gate_id=op.get("close", ""), actor=op.get("actor", "")
    )
    if refusal is not None:
        raise refusal


def _observed(result: PhaseResult | None) -> dict[str, int]:
    """What an accepted result adds to the histograms: its duration and how long it waited for a worker."""
    if result is None:
        return {}
    found = {"phase_duration": result.usage.duration_ms}
    if result.queued_ms is not None:
        found["queue_wait"] = result.queued_ms
    return found


def _queued_with(rt: Runtime, move: Move, pipe: Any) -> None:
    """What rides with any move: ``also``'s writes and the handled entry's acknowledgement."""
    if move.also is not None:
        move.also(pipe)
    if move.delivery is not None:
        move.delivery.ack_with(pipe)


def _made(rt: Runtime, move: Move, pipe: Any, gate: str) -> int:
    """``mh_transition`` with what ``pipe`` queued as its follow-ups; the entry is the caller's to
    acknowledge when the move did not apply (its XACK rode with it)."""
    writes = follow_ups(pipe)
    pipe.reset()
    reply = int(
        calls.transition(rt.redis, **_transition_args(rt, move), gate=gate, follow_ups=writes)
    )
    if reply != 1 and move.delivery is not None:
        move.delivery.unack()
    _refused_gate(reply, move.run_id, move.close)
    return reply


def _stay(rt: Runtime, move: Move) -> Moved:
    """The move, its writes and the run as it is after it, in one round trip."""
    writes_pipe = rt.redis.pipeline(transaction=True)
    for event_type, fields in move.activity:
        rt.emit(writes_pipe, event_type, **fields)
    _queued_with(rt, move, writes_pipe)
    writes = follow_ups(writes_pipe)
    writes_pipe.reset()
    pipe = rt.redis.pipeline(transaction=False)
    calls.transition(pipe, **_transition_args(rt, move), gate=move.close, follow_ups=writes)
    runs.queue_read(pipe, move.run_id)
    applied, raw = execute(pipe)
    if applied != 1:
        if move.delivery is not None:
            move.delivery.unack()
        _refused_gate(applied, move.run_id, move.close)
        return Moved(False)
    return Moved(True, rt.parse_run(move.run_id, raw))


def dispatch(
    rt: Runtime,
    run_id: str,
    spec: RunSpec,
    index: int,
    attempt: int,
    activity: Sequence[tuple[str, dict[str, Any]]] = (),
    outputs: Sequence[tuple[str, str]] | None = None,
    *,
    delivery: Delivery | None = None,
) -> str | None:
    """Compose the phase's context, then enqueue one RQ job for the attempt (the payload carries ids only):
    a move's dispatch made after it, or the current attempt's again (its job was lost).

    The composed context, its summaries, the job and the ``activity`` entries (type, fields)
    go out in one transaction (:func:`_queue_dispatch`), so a worker never sees the job without
    its context. ``outputs`` are the earlier phases' (name, output); read from the run when not given.
    A context that fits no model ends the run ``context_budget_exceeded`` (returns None). ``delivery``:
    the entry being handled, acknowledged with the dispatch.
    """
    try:
        comp = _compose(rt, run_id, spec, index, attempt, outputs)
    except UNDISPATCHABLE as exc:
        _end_undispatchable(rt, run_id, spec, index, exc, delivery=delivery)
        return None
    pipe = rt.rq_redis.pipeline()
    job_id = _queue_dispatch(rt, pipe, run_id, spec, index, attempt, comp, activity)
    if delivery is not None:
        delivery.ack_with(pipe)
    pipe.execute()
    return job_id


def _dispatching(rt: Runtime, move: Move) -> bool:
    """A move whose phase is dispatched: the dispatch's writes (RQ's own enqueue, the context, the
    activity entries, the handled entry's XACK, and ``also``'s) are queued on a pipeline that is never
    executed and ride with ``mh_transition`` as its follow-ups, made only if ``frm`` is still current.

    A context that fits no model still moves the run (so its end names the phase and keeps the
    accepted result), then ends it. An LLM summarizer composes only after the move: it may call a model.
    """
    index, attempt = move.to
    # a phase's first attempt waits for its approval, unless this move is that approval (a decision on
    # the gate the run waits on at the phase's attempt 0; a first phase's start also moves from (0, 0))
    first = attempt == 1 and not (move.frm == (index, 0) and move.close)
    reasons = library_approvals(rt, move.spec, index) if first else []
    if first and (reasons or phase_needs_approval(rt.settings, move.spec, index)):
        earlier = (
            list(move.outputs)
            if move.outputs is not None
            else _earlier_outputs(rt, move.run_id, index)
        )
        gate = phase_gate(rt.settings, move.spec, index, earlier, reasons)
        return _open_gate(rt, replace(move, to=(index, 0), then="wait", gate=gate), gate)
    comp, unfit = None, None
    # an LLM summarizer may call a model, and a library's retrieval charges the run's budget (opened by
    # the move for a first phase): those compose after the move
    if rt.settings.context.summarizer != "llm_generated" and not move.spec.libraries:
        try:
            comp = _compose(rt, move.run_id, move.spec, index, attempt, move.outputs)
        except UNDISPATCHABLE as exc:
            unfit = exc
    if comp is not None:
        pipe = rt.rq_redis.pipeline()
        _queue_dispatch(rt, pipe, move.run_id, move.spec, index, attempt, comp, move.activity)
        _queued_with(rt, move, pipe)
        return _made(rt, move, pipe, move.close) == 1
    # the move on its own first; then the dispatch (composing after it), or the end
    moved = calls.transition(rt.redis, **_transition_args(rt, move), gate=move.close)
    if moved != 1:
        _refused_gate(moved, move.run_id, move.close)
        return False
    if move.also is not None:
        pipe = rt.redis.pipeline(transaction=True)
        move.also(pipe)
        pipe.execute()
    if unfit is not None:
        _end_undispatchable(rt, move.run_id, move.spec, index, unfit, delivery=move.delivery)
    else:
        dispatch(
            rt,
            move.run_id,
            move.spec,
            index,
            attempt,
            activity=move.activity,
            outputs=move.outputs,
            delivery=move.delivery,
        )
    return True


def _open_gate(rt: Runtime, move: Move, gate: Gate) -> bool:
    """A move after which the run waits for a person on ``gate``, opened in the same server call (no
    job, no phase deadline, its wall clock paused); ``close``: the gate it waited on (a decision that
    leads to the next gate). The activity entries and ``gate_opened`` ride along."""
    pipe = rt.rq_redis.pipeline()
    for event_type, fields in move.activity:
        rt.emit(pipe, event_type, **fields)
    rt.emit(
        pipe,
        "gate_opened",
        run_id=move.run_id,
        phase=gate.phase,
        gate_id=gate.gate_id,
        kind=gate.kind,
        subject=gate.subject,
        approvers=gate.approvers,
    )
    _queued_with(rt, move, pipe)
    op = open_op(rt.settings, gate)
    if move.close:
        op = orjson.dumps({**orjson.loads(move.close), **orjson.loads(op)}).decode()
    applied = _made(rt, move, pipe, op) == 1
    if applied:
        log.info("run_waiting", run_id=move.run_id, gate_id=gate.gate_id, subject=gate.subject)
    return applied


def _compose(
    rt: Runtime,
    run_id: str,
    spec: RunSpec,
    index: int,
    attempt: int,
    outputs: Sequence[tuple[str, str]] | None,
) -> Composition:
    """The phase's context; ``outputs`` (the earlier phases' (name, output)) found when not given."""
    if outputs is None:
        outputs = _earlier_outputs(rt, run_id, index)
    # the run's libraries: their redacted hits join the retrieval_hits section
    hits = library_hits(rt, run_id, spec, index)
    if hits.texts:
        spec = spec.model_copy(
            update={
                "context": spec.context.model_copy(
                    update={"retrieval_hits": [*spec.context.retrieval_hits, *hits.texts]}
                )
            }
        )
    comp = compose(
        rt.settings,
        run_id,
        spec,
        index,
        outputs[:index],
        notes=rt.notes(run_id),
        now_iso=rt.clock.now_iso(),
        calibration=rt.calibration,
        llm=_llm(rt, run_id, spec, attempt),
        may_use=lambda model: _may_use(rt, run_id, model),
    )
    # tools first: a phase whose task a registry tool handles carries its candidates (a tool_only plan)
    routed = rt.tools.plan(spec, index)
    if routed.candidates:
        comp.context = comp.context.model_copy(update={"tool_plan": routed.candidates})
    if hits.ambiguity:
        comp.context = comp.context.model_copy(update={"retrieval_ambiguity": hits.ambiguity})
    return comp


def _earlier_outputs(rt: Runtime, run_id: str, index: int) -> list[tuple[str, str]]:
    """The first ``index`` phases' (name, output): from Mother's cache, else read from the run."""
    outputs = rt.outputs(run_id, index)
    if outputs is None:
        state = rt.load_run(run_id)
        outputs = outputs_of(state)[:index] if state is not None else []
    return outputs


def _queue_dispatch(
    rt: Runtime,
    pipe: Any,
    run_id: str,
    spec: RunSpec,
    index: int,
    attempt: int,
    comp: Composition,
    activity: Sequence[tuple[str, dict[str, Any]]],
) -> str | None:
    """Queue the attempt's RQ job on a live host's own queue, its context and the activity entries on
    ``pipe``, the job first (RQ may WATCH inside its pipeline, which must come before any queued command).
    With no live host taking its kind of job, the attempt waits in ``hosts:awaited`` and Mother queues it
    on a host as soon as one is live (:mod:`mother.hosts.moves`). Returns the job id (None: waiting)."""
    plan = comp.context.tool_plan
    kind = TOOLS_QUEUE if plan else AGENTS_QUEUE
    host = rt.hosts.choose(kind)
    now_ms = rt.clock.now_ms()
    job_id = queue_job(rt, pipe, host, kind, run_id, spec, index, attempt, now_ms) if host else None
    if host is None:
        pipe.zadd(keys.HOSTS_AWAITED, {keys.heartbeat_member(run_id, index, attempt): now_ms})
    runs.set_host(pipe, run_id, host)
    # alive while its job waits for a worker (or for a host); its host's beats take over
    claim_ttl = job_timeout(rt, spec, index) + int(rt.settings.service.claim_idle_seconds)
    queue_alive(pipe, run_id, index, attempt, ttl_ms=claim_ttl * 1000, now_ms=now_ms, host=host)
    store_context(pipe, rt.emit, comp, rt.settings.context.keep_seconds)
    for event_type, fields in activity:
        rt.emit(pipe, event_type, **fields)
    rt.emit(
        pipe,
        "phase_dispatched",
        run_id=run_id,
        phase=spec.pipeline[index].name,
        attempt=attempt,
        job_id=job_id,
        plan="tool_only" if plan else "agent",
        host=host,
        **({"tools": [c.tool_id for c in plan]} if plan else {}),
    )
    return job_id


def job_timeout(rt: Runtime, spec: RunSpec, index: int) -> int:
    """A phase job's RQ timeout: the phase's, and a margin for the job's own start and end."""
    return (
        int(phase_timeout_seconds(rt, spec, index)) + rt.settings.worker.job_timeout_margin_seconds
    )


def queue_job(
    rt: Runtime,
    pipe: Any,
    host: str,
    kind: str,
    run_id: str,
    spec: RunSpec,
    index: int,
    attempt: int,
    dispatched_ms: int,
) -> str:
    """Queue the RQ job of the attempt on ``host``'s own ``kind`` queue on ``pipe`` (its writes: RQ's own
    enqueue); returns its id, which names the host (so the host's ACL patterns cover its keys)."""
    job_id = keys.phase_job_id(host, run_id, index, attempt)
    rt.queue(keys.host_queue(host, kind)).enqueue_call(
        JOB_FUNCTION,
        args=(run_id, index, attempt),
        job_id=job_id,
        timeout=job_timeout(rt, spec, index),
        result_ttl=3600,
        failure_ttl=86400,
        description=f"{run_id} phase {spec.pipeline[index].name} attempt {attempt}",
        # the server's time of the dispatch: the worker reports its queue wait against it
        meta={DISPATCHED_MS: dispatched_ms, QUEUE_META: kind},
        pipeline=pipe,
    )
    return job_id


def outputs_of(state: RunState) -> list[tuple[str, str]]:
    return [(r.phase, r.output) for r in state.results]


def _may_use(rt: Runtime, run_id: str, model: str) -> bool:
    """Whether the run's capability token allows ``model`` (read only when an escalation is considered)."""
    return denial(runs.read_capabilities(rt.redis, run_id), [f"model.{model}"]) is None


def _llm(rt: Runtime, run_id: str, spec: RunSpec, attempt: int) -> LLMSummarizer | None:
    if rt.settings.context.summarizer != "llm_generated":
        return None
    if rt.make_provider is None:
        raise ConfigError(
            "context.summarizer llm_generated needs model providers in the process that composes "
            "contexts: run Mother with `mother run`"
        )
    return llm_summarizer(
        rt.settings,
        lambda: Guard(rt.redis, rt.settings, run_id, spec.user_id, rt.clock.today()),
        spec,
        attempt,
        make_provider=rt.make_provider,
    )


def _end_undispatchable(
    rt: Runtime,
    run_id: str,
    spec: RunSpec,
    index: int,
    exc: MotherError,
    *,
    delivery: Delivery | None = None,
) -> None:
    state = rt.load_run(run_id)
    if state is None:
        return
    phase = spec.pipeline[index].name
    log.warning("context_not_composed", run_id=run_id, phase=phase, error=exc.message)
    if isinstance(exc, ContextBudgetExceeded):
        end_run(
            rt,
            state,
            "context_budget_exceeded",
            exc.message,
            phase=phase,
            contributing_factors=exc.factors,
            delivery=delivery,
        )
    elif isinstance(exc, (InsufficientEvidence, PolicyViolation)):
        end_run(
            rt,
            state,
            "insufficient_evidence" if isinstance(exc, InsufficientEvidence) else "policyViolation",
            exc.message,
            phase=phase,
            delivery=delivery,
        )
    else:
        end_run(
            rt,
            state,
            "catastrophic_error",
            exc.message,
            phase=phase,
            contributing_factors=["invalid configuration while composing the context"],
            delivery=delivery,
        )


def start_run(
    rt: Runtime, state: RunState, *, waited: float | None = None, delivery: Delivery | None = None
) -> bool:
    """Dispatch the first phase of a queued run (no-op if it already started). Its budget documents are
    opened with the move (its wall clock starts now, not while it waited for a slot). A run that waited
    in the admission queue (``waited``: its fair-queue score) leaves it in the same step."""
    if state.status != "queued":
        return False
    # what its phases' contexts are given beside the outputs: nothing yet (no read needed)
    rt.remember_notes(state.run_id, state.notes)

    def also(pipe: Any) -> None:
        now = rt.clock.now_ms()
        opened = open_run_budget(pipe, rt.settings, state.spec, now, state.limits)
        warn_after = opened["warning_ratio"] * run_duration_seconds(rt, state.spec) * 1000
        pipe.zadd(keys.RUN_WARNINGS, {state.run_id: now + int(warn_after)}, nx=True)
        if waited is not None:
            pipe.zrem(keys.ADMISSION_WAITING, state.run_id)
            pipe.hset(keys.ADMISSION_STATE, "vtime", int(waited) // SEQ_SPAN)
            runs.set_admission(pipe, state.run_id, "admitted")

    return make(
        rt,
        Move(
            state.run_id,
            state.spec,
            frm=(0, 0),
            to=(0, 1),
            event="phase_started",
            start=True,
            outputs=[],
            also=also,
            delivery=delivery,
        ),
    ).applied


def admit_waiting(rt: Runtime) -> int:
    """Start runs waiting in the admission queue, in its fair order, while ``max_concurrent_runs`` leaves
    slots free; returns how many started. Called when a run's end frees a slot and at every watchdog tick."""
    pipe = rt.redis.pipeline(transaction=False)
    pipe.zcard(keys.RUN_DEADLINES)
    pipe.zcard(keys.ADMISSION_WAITING)
    running, waiting = pipe.execute()
    free = rt.settings.budget.global_.max_concurrent_runs - running
    if waiting == 0 or free <= 0:
        return 0
    started = 0
    # the connection decodes replies
    waiting_runs = cast(
        "list[tuple[str, float]]",
        rt.redis.zrange(keys.ADMISSION_WAITING, 0, free - 1, withscores=True),
    )
    for run_id, score in waiting_runs:
        state = rt.load_run(run_id) if keys.is_id(run_id) else None
        # ended while it waited (its end took it out), or gone
        if state is None or state.status != "queued":
            rt.redis.zrem(keys.ADMISSION_WAITING, run_id)
            continue
        if start_run(rt, state, waited=score):
            started += 1
            log.info("run_admitted", run_id=run_id, waited_since=state.created_at)
    return started


def completed_event(result: PhaseResult) -> tuple[str, dict[str, Any]]:
    """The ``phase_completed`` activity entry of an accepted result (logged with the next dispatch, or the end)."""
    return (
        "phase_completed",
        {
            "run_id": result.run_id,
            "phase": result.phase,
            "attempt": result.attempt,
            "confidence": result.confidence,
            "artifacts": result.artifacts,
            **attempt_facts(result),
        },
    )


def attempt_facts(result: PhaseResult | None) -> dict[str, Any]:
    """What an attempt's end entry (``phase_completed``, ``phase_failed``) says of its time and cost, from
    its result: when a worker took it, which worker, and its usage (tokens, spend, model and tool time).
    A lost attempt has no result: the entry says ``lost``. The run's timeline is made of these."""
    if result is None:
        return {"lost": True}
    return {
        "started_at": result.started_at,
        "worker": result.worker,
        "usage": result.usage.to_dict(),
        # which steps it replayed from the phase's journal and which it made live
        **({"steps": result.resumed.label()} if result.resumed is not None else {}),
    }


def is_current(state: RunState, index: int, attempt: int) -> bool:
    """Whether the run is running this attempt (Mother's check of a result; a worker's of its job)."""
    return (
        state.status in ACTIVE_STATUSES and state.phase_index == index and state.attempt == attempt
    )


def end_run(
    rt: Runtime,
    state: RunState,
    reason: TerminationReason,
    details: str,
    *,
    phase: str | None = None,
    contributing_factors: list[str] | None = None,
    activity: Sequence[tuple[str, dict[str, Any]]] = (),
    delivery: Delivery | None = None,
    gate: str = "",
) -> TerminationRecord:
    """Write the run's one TerminationRecord and final ResultEnvelope; log ``terminated``
    (after the ``activity`` entries given, in the same round trip); ``delivery``: the entry being
    handled, acknowledged with the end. The run's conflicts are among the contributing factors.
    ``gate``: the close op of the gate the run waits on (a denial, an expiry): the run ends only while
    it still waits on it (GateRefused otherwise)."""
    at_ms = rt.clock.now_ms()
    at_iso = rt.clock.iso(at_ms)
    phase_name = (
        phase
        or state.phase
        or (state.spec.pipeline[0].name if state.status == "queued" else "intake")
    )
    record = build_record(
        run_id=state.run_id,
        reason=reason,
        phase=phase_name,
        details=details,
        at_ms=at_ms,
        at_iso=at_iso,
        contributing_factors=_with_conflicts(contributing_factors or [], state),
        final_artifacts=state.artifacts,
    )
    envelope = ResultEnvelope(
        run_id=state.run_id,
        user_id=state.user_id,
        output=state.results[-1].output if state.results else "",
        phases=state.results,
        artifacts=state.artifacts,
        created_at=at_iso,
    )
    pipe = rt.redis.pipeline(transaction=False)
    terminate(pipe, record, envelope, gate=gate)
    # its reservations are read after the record closed the budget: none is made after it (a
    # call in flight settles)
    queue_end_reads(pipe, state.run_id)
    waited = queue_durable(pipe, rt.settings.service)
    term_reply, node_raw, budget_raw, *durable = execute(pipe, raise_on_error=not waited)
    for reply in (term_reply, node_raw, budget_raw):
        if isinstance(reply, Exception):
            raise reply
    if waited:
        check_durable(durable[0], rt.settings.service, f"termination of {state.run_id}", log)
    won, stored = terminated(term_reply, lambda code: _gate_refusal_error(code, state.run_id, gate))
    if won:
        finish_end(rt, state, stored, node_raw, budget_raw, activity, delivery=delivery)
        # the run's root span (its trace's ids were chosen at intake)
        telemetry.run_ended(rt.settings, state, reason, details, at_ms)
    return stored


def _gate_refusal_error(code: int, run_id: str, gate: str) -> Exception:
    try:
        _refused_gate(code, run_id, gate)
    except MotherError as exc:
        return exc
    return RuntimeError(f"mh_terminate refused a gate op with {code}")


def _with_conflicts(factors: list[str], state: RunState) -> list[str]:
    """The factors given, then the run's conflict notes (how each conflict was settled) not among them."""
    return [*factors, *(n for n in state.notes if n.startswith("conflict ") and n not in factors)]


def queue_end_reads(pipe: Any, run_id: str) -> None:
    """What a run's end needs read, queued on ``pipe``: its ledger entry (the lineage's end needs it and the
    run's spend) and its spend and reservations."""
    queue_node_read(pipe, run_id)
    budgets.queue_end_read(pipe, run_id)


def finish_end(
    rt: Runtime,
    state: RunState,
    record: TerminationRecord,
    node_raw: str | None,
    budget_raw: str | None,
    activity: Sequence[tuple[str, dict[str, Any]]] = (),
    *,
    late: bool = False,
    delivery: Delivery | None = None,
) -> bool:
    """Apply the end of a run whose record is written, in one MULTI: give back the reservations its calls
    still hold, close its ledger entry (report its spend, cascade it, release its reservation), drop its
    queued job, acknowledge the entry being handled, then ``mh_ended``: take it out of ``mother:ending`` and,
    only if it was there, log the ``activity`` entries and ``terminated``, and give a spawned child's
    parent its slot back. Each write is idempotent or applied once, so :meth:`Watchdog.finish_ends` can apply
    an end a Mother died before applying (``late``) without a risk of applying it twice. Returns whether
    this call applied it."""
    run_id = state.run_id
    spend, held = budgets.parse_end_read(budget_raw)
    # a conflict the end cut short (an arbiter refused by the budget, a cancel while a person was
    # asked) is closed with the end, unresolved
    unsettled = [
        c for c in conflict_records.read_conflicts(rt.redis, state.conflicts) if c.status == "open"
    ]
    pipe = rt.redis.pipeline(transaction=True)
    for conflict in unsettled:
        conflict_records.queue_write(
            pipe,
            conflict_records.closed_by_end(
                conflict, record.reason, record.details, rt.clock.now_ms(), rt.clock.now_iso()
            ),
        )
    release_reservations(
        pipe, rt.settings, run_id, state.user_id, held, f"the run ended {record.reason}"
    )
    # its artifacts to their retention class, its records on retention:runs (idempotent)
    retain(pipe, rt.settings, state, record)
    ledger_at = None
    # report the run's spend (a child's cascades up), release its reservation
    if node_raw is not None:
        ledger_at = len(pipe)
        rt.ledger.close(
            run_id,
            to_usd(spend),
            "completed" if record.reason == "success" else record.reason,
            orjson.loads(node_raw),
            pipe=pipe,
        )
    # a successful run's last job has finished; another's may wait on its host's queue
    if record.reason != "success" and state.attempt > 0 and state.host:
        job_id = keys.phase_job_id(state.host, run_id, state.phase_index, state.attempt)
        origin = rt.rq_redis.hget(Job.key_for(job_id), "origin")
        if origin is not None:
            rt.queue(origin.decode() if isinstance(origin, bytes) else origin).remove(
                job_id, pipeline=pipe
            )
    pipe.zrem(keys.HOSTS_AWAITED, keys.heartbeat_member(run_id, state.phase_index, state.attempt))
    if delivery is not None:
        delivery.ack_with(pipe)
    # whether the slot it frees can start a run waiting in the admission queue
    pipe.zcard(keys.RUN_DEADLINES)
    pipe.zcard(keys.ADMISSION_WAITING)
    calls.ended(
        pipe,
        run_id=run_id,
        activity_maxlen=rt.settings.service.activity_maxlen,
        entries=_end_entries(rt.clock.now_iso(), record, activity, late),
        parent=_parent_holding_slot(state),
    )
    replies = execute(pipe)
    if ledger_at is not None:
        rt.ledger.closed(run_id, replies[ledger_at])
    applied = bool(replies[-1])
    if applied:
        log.info(
            "run_terminated",
            run_id=run_id,
            reason=record.reason,
            phase=record.phase_at_termination,
            **({"late": True} if late else {}),
        )
    running, waiting = replies[-3], replies[-2]
    if waiting and running < rt.settings.budget.global_.max_concurrent_runs:
        admit_waiting(rt)
    return applied


def _end_entries(
    at: str, record: TerminationRecord, activity: Sequence[tuple[str, dict[str, Any]]], late: bool
) -> list[list[str]]:
    """The activity entries a run's end logs (once, by ``mh_ended``): the caller's, then
    ``terminated``."""
    entries = [make_event(kind, at=at, **fields) for kind, fields in activity]
    entries.append(
        make_event(
            "terminated",
            at=at,
            run_id=record.run_id,
            phase=record.phase_at_termination,
            reason=record.reason,
            details=record.details[:1000],
            suggested_action=record.suggested_action,
            **({"late": True} if late else {}),
        )
    )
    return [flat_fields(e) for e in entries]


def _parent_holding_slot(state: RunState) -> str | None:
    """The parent whose parallel_agents slot a spawned child holds (given back at its end)."""
    parent = state.spec.parent_run_id
    return (
        parent
        if parent is not None and state.spec.metadata.get(SPAWNED_BY) == "spawn_run"
        else None
    )
