"""A run's life inside Mother: queued → running (phase by phase) → terminated.

Every change of a run's phase goes through the ``mh_transition`` server function,
fenced by the (phase_index, attempt) the caller saw: a late, duplicate or
re-delivered PhaseResult for an attempt that is no longer current changes nothing.
Every end goes through :func:`end_run`, which calls the single termination writer.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import orjson

from mother import keys
from mother.activity import flat_fields, make_event
from mother.budget import Guard, open_run_budget, release_reservations
from mother.capabilities import denial
from mother.codes import RESOURCES, SEQ_SPAN
from mother.context import Composition, LLMSummarizer, compose, llm_summarizer
from mother.context import store as store_context
from mother.errors import ConfigError, ContextBudgetExceeded, HookDecision, MotherError
from mother.functions import call, follow_ups
from mother.ledger import queue_node_read, to_usd
from mother.limits import resolve_for_spec
from mother.logs import get_logger
from mother.records import budgets, runs
from mother.records.budgets import held_reservations
from mother.runtime import Runtime
from mother.security import digest, mint_token, queue_token, record_violation
from mother.termination import build_record, terminate, terminated
from schemas import (
    ACTIVE_STATUSES,
    HistoryEntry,
    PhaseResult,
    ResultEnvelope,
    RunSpec,
    RunState,
    TerminationReason,
    TerminationRecord,
)
from schemas.budget import BudgetExhaustedRecord

__all__ = [
    "admit_waiting",
    "advance",
    "completed_event",
    "dispatch",
    "end_run",
    "finish_end",
    "is_current",
    "on_phase_failure",
    "on_phase_result",
    "outputs_of",
    "phase_timeout_seconds",
    "queue_end_reads",
    "run_duration_seconds",
    "start_run",
    "transition",
]

log = get_logger("lifecycle")
JOB_FUNCTION = "workers.phase.execute"


def run_duration_seconds(rt: Runtime, spec: RunSpec) -> float:
    """The run's wall clock: the smaller of its budget profile's (seed 002) and its resolved
    duration_seconds (seed 000: defaults → role → limit_overrides; parent caps not applied here)."""
    profile = rt.settings.budget.profiles[spec.budget_profile].wall_clock_seconds
    resolved = resolve_for_spec(rt.settings, spec).get("duration_seconds")
    return min(profile, resolved) if resolved is not None else profile


def phase_timeout_seconds(rt: Runtime, spec: RunSpec, index: int) -> float:
    return spec.pipeline[index].timeout_seconds or rt.settings.runs.phase_timeout_seconds


def transition(
    rt: Runtime,
    run_id: str,
    spec: RunSpec,
    *,
    frm: tuple[int, int],
    to: tuple[int, int],
    event: str,
    detail: str = "",
    result: PhaseResult | None = None,
    start: bool = False,
) -> bool:
    """Move the run from attempt ``frm`` to ``to`` (phase_index, attempt) if ``frm`` is still current.

    The check is server-side (``mh_transition``), so the caller needs no fresh read of
    the run. The history entry names the phase the event is about: the finished one
    for ``phase_completed``, the one being (re)started otherwise. ``start`` also sets
    the run's deadline.
    """
    return (
        call(
            rt.redis,
            "mh_transition",
            *_transition_call(rt, run_id, spec, frm, to, event, detail, result, start),
        )
        == 1
    )


def transition_and_load(
    rt: Runtime,
    run_id: str,
    spec: RunSpec,
    *,
    frm: tuple[int, int],
    to: tuple[int, int],
    event: str,
    detail: str = "",
    result: PhaseResult | None = None,
    token_digest: str = "",
) -> RunState | None:
    """:func:`transition`, and the run as it is after it, in one round trip; None if ``frm`` was not current
    (or ``token_digest`` is not the attempt's)."""
    pipe = rt.redis.pipeline(transaction=False)
    call(
        pipe,
        "mh_transition",
        *_transition_call(rt, run_id, spec, frm, to, event, detail, result, False, token_digest),
    )
    runs.queue_read(pipe, run_id)
    applied, raw = pipe.execute()
    return rt.parse_run(run_id, raw) if applied == 1 else None


def _transition_call(
    rt: Runtime,
    run_id: str,
    spec: RunSpec,
    frm: tuple[int, int],
    to: tuple[int, int],
    event: str,
    detail: str,
    result: PhaseResult | None,
    start: bool,
    token_digest: str = "",
) -> tuple[list[str], list[Any]]:
    """mh_transition's keys and arguments (``token_digest``: a result's, checked against the attempt's)."""
    phase = spec.pipeline[to[0]].name
    at = rt.clock.now_iso()
    about, attempt = (result.phase, result.attempt) if result is not None else (phase, to[1])
    entry = HistoryEntry(at=at, event=event, phase=about, attempt=attempt, detail=detail[:4000])
    return [keys.run_key(run_id), keys.PHASE_DEADLINES, keys.RUN_DEADLINES], [
        run_id,
        frm[0],
        frm[1],
        to[0],
        to[1],
        phase,
        int(phase_timeout_seconds(rt, spec, to[0]) * 1000),
        int(run_duration_seconds(rt, spec) * 1000) if start else 0,
        at,
        entry.to_json(),
        result.to_json() if result is not None else "",
        _json_list(result.artifacts if result is not None else []),
        token_digest,
    ]


def _json_list(items: Iterable[str]) -> str:
    return orjson.dumps(list(items)).decode()


def dispatch(
    rt: Runtime,
    run_id: str,
    spec: RunSpec,
    index: int,
    attempt: int,
    activity: Sequence[tuple[str, dict[str, Any]]] = (),
    outputs: Sequence[tuple[str, str]] | None = None,
) -> str | None:
    """Compose the phase's context, then enqueue one RQ job for the attempt (the payload carries ids only).

    The composed context, its summaries, the job and the ``activity`` entries (type, fields)
    go out in one transaction (:func:`_queue_dispatch`), so a worker never sees the job without
    its context. ``outputs`` are the earlier phases' (name, output); read from the run when not given.
    A context that fits no model ends the run ``context_budget_exceeded`` (returns None).
    """
    try:
        comp = _compose(rt, run_id, spec, index, attempt, outputs)
    except (ContextBudgetExceeded, ConfigError) as exc:
        _end_undispatchable(rt, run_id, spec, index, exc)
        return None
    pipe = rt.rq_redis.pipeline()
    job_id = _queue_dispatch(rt, pipe, run_id, spec, index, attempt, comp, activity)
    rt.take_ack(pipe)
    pipe.execute()
    return job_id


def advance(
    rt: Runtime,
    run_id: str,
    spec: RunSpec,
    *,
    frm: tuple[int, int],
    to: tuple[int, int],
    event: str,
    outputs: Sequence[tuple[str, str]] | None,
    detail: str = "",
    result: PhaseResult | None = None,
    start: bool = False,
    activity: Sequence[tuple[str, dict[str, Any]]] = (),
    also: Callable[[Any], None] | None = None,
    token_digest: str = "",
) -> bool:
    """:func:`transition` to ``to`` and :func:`dispatch` it in one server call: the dispatch's writes
    (RQ's own enqueue, the context, the activity entries, the handled entry's XACK, and what ``also``
    queues on the pipeline) are queued on a pipeline that is never executed and ride with
    ``mh_transition`` as its follow-ups, made only if ``frm`` is still current. Returns whether it was.

    A context that fits no model still moves the run (so its end names the phase and keeps the
    accepted result), then ends it. An LLM summarizer composes only after the move: it may call a model.
    """
    index, attempt = to
    comp, unfit = None, None
    if rt.settings.context.summarizer != "llm_generated":
        try:
            comp = _compose(rt, run_id, spec, index, attempt, outputs)
        except (ContextBudgetExceeded, ConfigError) as exc:
            unfit = exc
    # the move on its own first; then the dispatch (composing after it), or the end
    if comp is None:
        moved = call(
            rt.redis,
            "mh_transition",
            *_transition_call(
                rt, run_id, spec, frm, to, event, detail, result, start, token_digest
            ),
        )
        if moved != 1:
            return False
        if also is not None:
            pipe = rt.redis.pipeline(transaction=True)
            also(pipe)
            pipe.execute()
        if unfit is not None:
            _end_undispatchable(rt, run_id, spec, index, unfit)
        else:
            dispatch(rt, run_id, spec, index, attempt, activity=activity, outputs=outputs)
        return True
    pipe = rt.rq_redis.pipeline()
    _queue_dispatch(rt, pipe, run_id, spec, index, attempt, comp, activity)
    if also is not None:
        also(pipe)
    ack = rt.pending_ack
    rt.take_ack(pipe)
    keys_, args = _transition_call(
        rt, run_id, spec, frm, to, event, detail, result, start, token_digest
    )
    more_keys, words = follow_ups(pipe)
    pipe.reset()
    applied = call(rt.redis, "mh_transition", keys_ + more_keys, args + words) == 1
    if not applied:
        # the XACK rode with the dispatch: the caller acknowledges the entry
        rt.pending_ack = ack
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
    return compose(
        rt.settings,
        run_id,
        spec,
        index,
        outputs[:index],
        now_iso=rt.clock.now_iso(),
        calibration=rt.calibration,
        llm=_llm(rt, run_id, spec, attempt),
        may_use=lambda model: _may_use(rt, run_id, model),
    )


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
) -> str:
    """Queue the attempt's RQ job, its context and the activity entries on ``pipe``, the job first (RQ may
    WATCH inside its pipeline, which must come before any queued command). Returns the job id."""
    job_id = keys.phase_job_id(run_id, index, attempt)
    timeout = (
        int(phase_timeout_seconds(rt, spec, index)) + rt.settings.worker.job_timeout_margin_seconds
    )
    # the attempt's result must carry it; only the worker that claims the attempt gets it
    token = mint_token()
    rt.agents_queue.enqueue_call(
        JOB_FUNCTION,
        args=(run_id, index, attempt),
        job_id=job_id,
        timeout=timeout,
        result_ttl=3600,
        failure_ttl=86400,
        description=f"{run_id} phase {spec.pipeline[index].name} attempt {attempt}",
        pipeline=pipe,
    )
    queue_token(
        pipe, run_id, index, attempt, token, timeout + int(rt.settings.service.claim_idle_seconds)
    )
    runs.set_token_digest(pipe, run_id, digest(token))
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
        lambda: Guard(rt.redis, rt.settings, run_id, spec.user_id, rt.clock.today),
        spec,
        attempt,
        make_provider=rt.make_provider,
    )


def _end_undispatchable(
    rt: Runtime, run_id: str, spec: RunSpec, index: int, exc: MotherError
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
        )
    else:
        end_run(
            rt,
            state,
            "catastrophic_error",
            exc.message,
            phase=phase,
            contributing_factors=["invalid configuration while composing the context"],
        )


def start_run(rt: Runtime, state: RunState, *, waited: float | None = None) -> bool:
    """Dispatch the first phase of a queued run (no-op if it already started). Its budget documents are
    opened with the move (its wall clock starts now, not while it waited for a slot). A run that waited
    in the admission queue (``waited``: its fair-queue score) leaves it in the same step."""
    if state.status != "queued":
        return False

    def also(pipe: Any) -> None:
        now = rt.clock.now_ms()
        opened = open_run_budget(pipe, rt.settings, state.spec, now, state.limits)
        warn_after = opened["warning_ratio"] * run_duration_seconds(rt, state.spec) * 1000
        pipe.zadd(keys.RUN_WARNINGS, {state.run_id: now + int(warn_after)}, nx=True)
        if waited is not None:
            pipe.zrem(keys.ADMISSION_WAITING, state.run_id)
            pipe.hset(keys.ADMISSION_STATE, "vtime", int(waited) // SEQ_SPAN)
            runs.set_admission(pipe, state.run_id, "admitted")

    return advance(
        rt,
        state.run_id,
        state.spec,
        frm=(0, 0),
        to=(0, 1),
        event="phase_started",
        start=True,
        outputs=[],
        also=also,
    )


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
    for run_id, score in rt.redis.zrange(keys.ADMISSION_WAITING, 0, free - 1, withscores=True):
        state = rt.load_run(run_id) if keys.is_id(run_id) else None
        # ended while it waited (its end took it out), or gone
        if state is None or state.status != "queued":
            rt.redis.zrem(keys.ADMISSION_WAITING, run_id)
            continue
        if start_run(rt, state, waited=score):
            started += 1
            log.info("run_admitted", run_id=run_id, waited_since=state.created_at)
    return started


def on_phase_result(
    rt: Runtime, result: PhaseResult, token: str | None = None, *, entry_id: str = ""
) -> None:
    """Accept a worker's PhaseResult if it is for the current attempt and carries the attempt's ``token``;
    advance or retry.

    The hot path makes one round trip (:func:`advance`: the fenced transition with the next
    job, its context and the activity entries; the token's digest is compared in the same call).
    The spec and the earlier outputs come from Mother's cache. A result for the current attempt
    whose token is missing or wrong (a report forged with a worker's credentials) is refused and
    recorded in ``security:violations``.
    """
    spec = rt.spec(result.run_id)
    if spec is None:
        return
    token_digest = digest(token)
    if result.status == "failed":
        state = rt.load_run(result.run_id)
        if state is not None and is_current(state, result.phase_index, result.attempt):
            if state.token_digest != token_digest:
                _refuse_result(rt, result, entry_id)
                return
            on_phase_failure(rt, state, result.error or "phase failed", result=result)
        return
    last = result.phase_index + 1 >= len(spec.pipeline)
    to = (result.phase_index, result.attempt) if last else (result.phase_index + 1, 1)
    frm, detail = (result.phase_index, result.attempt), f"confidence {result.confidence:.2f}"
    completed = completed_event(result)
    if not last:
        earlier = _earlier_outputs(rt, result.run_id, result.phase_index)
        if not advance(
            rt,
            result.run_id,
            spec,
            frm=frm,
            to=to,
            event="phase_completed",
            detail=detail,
            result=result,
            outputs=[*earlier, (result.phase, result.output)],
            activity=[completed],
            token_digest=token_digest,
        ):
            _not_taken(rt, result, token_digest, entry_id)
            return
        rt.remember_output(result.run_id, result.phase_index, result.phase, result.output)
        return
    done = transition_and_load(
        rt,
        result.run_id,
        spec,
        frm=frm,
        to=to,
        event="phase_completed",
        detail=detail,
        result=result,
        token_digest=token_digest,
    )
    if done is None:
        _not_taken(rt, result, token_digest, entry_id)
        return
    rt.forget(result.run_id)
    n = len(spec.pipeline)
    end_run(
        rt,
        done,
        "success",
        f"All {n} phase{'s' if n != 1 else ''} completed",
        phase=result.phase,
        activity=[completed],
        contributing_factors=[
            f"{r.phase}: attempt {r.attempt}, confidence {r.confidence:.2f}, "
            f"{r.evidence_count} evidence"
            for r in done.results
        ]
        + [f"{r.phase}: {notice}" for r in done.results for notice in r.notices],
    )


def _not_taken(rt: Runtime, result: PhaseResult, token_digest: str, entry_id: str) -> None:
    """Why a result did not move its run: its attempt is no longer current (a late or duplicate result), or
    it is but the token is not the attempt's (refused and recorded)."""
    position, current_digest = runs.read_position_and_digest(rt.redis, result.run_id)
    current = runs.is_active_at(position, result.phase_index, result.attempt)
    if current and current_digest != token_digest:
        _refuse_result(rt, result, entry_id)
        return
    log.info("stale_phase_result", run_id=result.run_id, phase=result.phase, attempt=result.attempt)


def _refuse_result(rt: Runtime, result: PhaseResult, entry_id: str) -> None:
    log.error(
        "phase_result_refused",
        run_id=result.run_id,
        phase=result.phase,
        attempt=result.attempt,
        why="its attempt token is missing or wrong",
        entry_id=entry_id,
    )
    record_violation(
        rt.redis,
        "phase_result_without_token",
        at=rt.clock.now_iso(),
        maxlen=rt.settings.service.activity_maxlen,
        run_id=result.run_id,
        phase=result.phase,
        attempt=result.attempt,
        entry_id=entry_id,
        status=result.status,
        why="a result for the current attempt whose token is missing or not the attempt's: refused",
    )


# a failed phase's error_code (its error's code: mother.errors) that ends the run instead of a retry
BUDGET_CODES = frozenset(
    {"budget_exhausted", "limit_exceeded", "budget_stopped", "depth_exhausted"}
)
FAILURE_ENDINGS: dict[str, tuple[TerminationReason, str]] = {
    "signature_invalid": ("policyViolation", "signature check failed"),
    "policy_violation": ("policyViolation", "policy violation"),
    "config_invalid": ("catastrophic_error", "invalid configuration"),
}
# what a hook's abort on an event ends the run with (other events: catastrophic_error)
HOOK_ABORTS: dict[str, TerminationReason] = {
    "limit": "budget_exhausted",
    "context_limit_reached": "context_budget_exceeded",
}


def _failure_ending(code: str | None) -> tuple[TerminationReason, str] | None:
    """How a failure with ``code`` ends the run (reason, contributing factor; '' to name the code and the
    error), or None: it is retried."""
    if code in FAILURE_ENDINGS:
        return FAILURE_ENDINGS[code]
    decision = HookDecision.parse(code)
    if decision is not None and decision[0] == "abort":
        return HOOK_ABORTS.get(decision[1], "catastrophic_error"), ""
    return None


def on_phase_failure(
    rt: Runtime, state: RunState, error: str, *, result: PhaseResult | None = None
) -> None:
    """Retry the current phase while it has retries left; then end ``retries_exhausted``.

    A refusal by the budget guard is not retried: the run ends ``budget_exhausted``.
    """
    phase = state.spec.pipeline[state.phase_index]
    code = result.error_code if result is not None else None
    if code in BUDGET_CODES:
        end_for_budget(rt, state, error, fail_safe=code == "limit_exceeded")
        return
    ending = _failure_ending(code)
    if ending is not None:
        reason, factor = ending
        end_run(
            rt,
            state,
            reason,
            error,
            phase=phase.name,
            contributing_factors=[factor or f"{code}: {error[:300]}"],
        )
        return
    rt.emit(
        rt.redis,
        "phase_failed",
        run_id=state.run_id,
        phase=phase.name,
        attempt=state.attempt,
        error=error[:1000],
    )
    failures = [*_failures(state), f"attempt {state.attempt}: {error[:300]}"]
    if state.attempt <= phase.max_retries:
        # what the attempt still holds will not be settled (a lost one's call in flight, or a failed one's call
        # whose settle did not reach the server); and its horse may still be alive (lost is not dead), so the
        # same call fences the attempt: the guard refuses its reservations and charges from now on
        release_reservations(
            rt.redis,
            rt.settings,
            state.run_id,
            state.user_id,
            held_reservations(rt.redis, state.run_id),
            f"phase {phase.name} attempt {state.attempt} {'was lost' if result is None else 'failed'}: {error}",
            fence=(state.phase_index, state.attempt),
        )
        advance(
            rt,
            state.run_id,
            state.spec,
            frm=(state.phase_index, state.attempt),
            to=(state.phase_index, state.attempt + 1),
            event="phase_retried",
            detail=error,
            outputs=outputs_of(state),
            activity=[
                (
                    "phase_retried",
                    {"run_id": state.run_id, "phase": phase.name, "attempt": state.attempt + 1},
                )
            ],
        )
        return
    end_run(
        rt,
        state,
        "retries_exhausted",
        f"Phase {phase.name} ({phase.role} on {phase.model}) failed on all {state.attempt} attempts; last error: {error[:500]}",
        phase=phase.name,
        contributing_factors=failures,
    )


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
        },
    )


def _failures(state: RunState) -> list[str]:
    """Earlier attempts' errors of the current phase (each retry's history entry holds the error)."""
    return [
        f"attempt {h.attempt - 1}: {h.detail[:300]}"
        for h in state.history
        if h.event == "phase_retried" and h.phase == state.phase and h.attempt
    ][:20]


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
) -> TerminationRecord:
    """Write the run's one TerminationRecord and final ResultEnvelope; log ``terminated``
    (after the ``activity`` entries given, in the same round trip)."""
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
        contributing_factors=contributing_factors,
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
    terminate(pipe, record, envelope)
    # its reservations are read after the record closed the budget: none
    queue_end_reads(pipe, state.run_id)
    # is made after it (a call in flight settles)
    term_reply, node_raw, budget_raw = pipe.execute()
    won, stored = terminated(term_reply)
    if won:
        finish_end(rt, state, stored, node_raw, budget_raw, activity)
    return stored


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
    pipe = rt.redis.pipeline(transaction=True)
    release_reservations(
        pipe, rt.settings, run_id, state.user_id, held, f"the run ended {record.reason}"
    )
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
    # a successful run's last job has finished
    if record.reason != "success" and state.attempt > 0:
        rt.agents_queue.remove(
            keys.phase_job_id(run_id, state.phase_index, state.attempt), pipeline=pipe
        )
    rt.take_ack(pipe)
    at = rt.clock.now_iso()
    entries = [make_event(kind, at=at, **fields) for kind, fields in activity]
    entries.append(
        make_event(
            "terminated",
            at=at,
            run_id=run_id,
            phase=record.phase_at_termination,
            reason=record.reason,
            details=record.details[:1000],
            suggested_action=record.suggested_action,
            **({"late": True} if late else {}),
        )
    )
    parent = _parent_holding_slot(state)
    # whether the slot it frees can start a run waiting in the admission queue
    pipe.zcard(keys.RUN_DEADLINES)
    pipe.zcard(keys.ADMISSION_WAITING)
    call(
        pipe,
        "mh_ended",
        [
            keys.RUNS_ENDING,
            keys.ACTIVITY_STREAM,
            *([keys.run_budget_key(parent)] if parent else []),
        ],
        [
            run_id,
            rt.settings.service.activity_maxlen,
            orjson.dumps([flat_fields(e) for e in entries]),
        ],
    )
    replies = pipe.execute()
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


def _parent_holding_slot(state: RunState) -> str | None:
    """The parent whose parallel_agents slot a spawned child holds (given back at its end)."""
    parent = state.spec.parent_run_id
    return (
        parent
        if parent is not None and state.spec.metadata.get("spawned_by") == "spawn_run"
        else None
    )


def end_for_budget(
    rt: Runtime, state: RunState, error: str, *, fail_safe: bool = False
) -> TerminationRecord:
    """End the run ``budget_exhausted``: the first crossed limit is primary, every crossing a factor.

    With ``fail_safe`` (a run limit hit at a turn's start, no hook handling it) the worker's
    message ("Limit exceeded: turns_exceeded (10/10)") is the details and names the primary limit.
    Also stores the spec's BudgetExhausted record in ``budget:run:{run_id}`` at ``$.exhausted``,
    with the spec's resource name and the limit's real figures.
    """
    doc = budgets.budget_doc(rt.redis, keys.run_budget_key(state.run_id)) or {}
    # limits_exceeded has the codes alone
    crossed = doc.get("limit_crossings") or []
    factors = [f"{c['code']} ({c['current']}/{c['max']})" for c in crossed]
    stated = limit_figures(error)
    if crossed and not fail_safe:
        first = crossed[0]
        details = f"Limit exceeded: {first['code']} ({first['current']}/{first['max']})"
    else:
        first = stated or {"code": "unknown", "current": 0, "max": 0}
        details = error
        factors = [error, *factors]
    if doc:
        budgets.set_exhausted(
            rt.redis,
            BudgetExhaustedRecord(
                run_id=state.run_id,
                resource=RESOURCES.get(first["code"], first["code"]),
                limit=first["max"],
                consumed=first["current"],
                timestamp=rt.clock.now_iso(),
                termination_details=details[:4000],
            ),
        )
    return end_run(
        rt, state, "budget_exhausted", details, contributing_factors=factors or [error[:500]]
    )


_FIGURES = re.compile(r"(?P<code>[a-z_]+_exceeded) \((?P<current>-?[\d.]+)/(?P<max>-?[\d.]+)\)")


def limit_figures(message: str) -> dict[str, Any] | None:
    """The limit a refusal's message names, with its figures: ``turns_exceeded (10/10)`` or
    ``budget_tool_call_exceeded (5/5)`` → code, current, max (numbers); None when it names none."""
    found = _FIGURES.search(message)
    if found is None:
        return None
    return {
        "code": found["code"],
        "current": _number(found["current"]),
        "max": _number(found["max"]),
    }


def _number(text: str) -> int | float:
    value = float(text)
    return int(value) if value.is_integer() else value
