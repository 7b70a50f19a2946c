"""Mother's review of a phase's outcome: one table from what the outcome is to what Mother does.

    outcome                                    state     what Mother does
    a completed result, phases left            ADVANCE   accept it and dispatch the next phase, in one call
    a completed result, the last phase         SUCCEED   accept it; the run ends success
    a failed result whose code ends the run    END       budget_exhausted, policyViolation, catastrophic_error, ...
    a failed or lost attempt, retries left     RETRY     give back what it held, fence it, dispatch the next attempt
    a failed or lost attempt, none left        EXHAUST   the run ends retries_exhausted
    a result for an attempt no longer current  STALE     logged, nothing written
    a result for the current attempt, without
      the attempt's token                      REFUSED   nothing moved; a security violation recorded
    a result a review hook acted on itself     HANDLED   nothing more (a conflict's strategy, a gate)

ADVANCE and SUCCEED are decided from the result alone and checked on the server in the call that makes
them (the attempt still current, the token the attempt's): when that check fails the result is STALE
or REFUSED. Before a result moves the run, every review hook of the runtime sees it (an
:class:`Outcome`) and may decide otherwise: a hook returns another :class:`Review` (say, an END with its
reason, or HANDLED when it acted itself) or None to agree. Mother installs two
(:func:`mother.conflicts.install`): conflict resolution (a reviewing phase's verdict, low confidence,
competing proposals, findings; a strategy's extra attempt) and human gates (a tool call that needs
approval).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from mother import keys
from mother.budget import release_reservations
from mother.codes import RESOURCES
from mother.errors import HookDecision
from mother.lifecycle import (
    Move,
    attempt_facts,
    completed_event,
    end_run,
    is_current,
    make,
    outputs_of,
)
from mother.logs import get_logger
from mother.records import budgets, runs
from mother.records.budgets import held_reservations
from mother.records.runs import attempt_view
from mother.runtime import Runtime
from mother.streams import Delivery
from schemas import PhaseResult, RunSpec, RunState, TerminationReason, TerminationRecord
from schemas.budget import BudgetExhaustedRecord

__all__ = [
    "BUDGET_CODES",
    "FAILURE_ENDINGS",
    "HOOK_ABORTS",
    "Outcome",
    "Review",
    "ReviewHook",
    "State",
    "end_for_budget",
    "end_success",
    "limit_figures",
    "on_attempt_lost",
    "on_phase_result",
    "release_attempt",
]

log = get_logger("review")


class State(StrEnum):
    ADVANCE = "advance"
    SUCCEED = "succeed"
    END = "end"
    RETRY = "retry"
    EXHAUST = "exhaust"
    STALE = "stale"
    REFUSED = "refused"
    HANDLED = "handled"


@dataclass(frozen=True)
class Review:
    """What Mother does with an outcome: the state, and for END the reason and the contributing factor."""

    state: State
    reason: TerminationReason | None = None
    factor: str = ""


@dataclass
class Outcome:
    """One phase result under review, and what acting on it needs: the spec (Mother's cache), the worker
    host it came from, the entry it came in (acknowledged with the write that acts on it), and
    for a failed result the run as read."""

    result: PhaseResult
    spec: RunSpec
    host: str
    delivery: Delivery | None = None
    state: RunState | None = None

    @property
    def entry_id(self) -> str:
        return self.delivery.entry_id if self.delivery is not None else ""


# a hook: (the runtime, the result under review, the review decided so far) -> another review, or None
ReviewHook = Callable[[Runtime, Outcome, Review], Review | None]

# a failed phase's error_code (its error's code: mother.errors) that ends the run instead of a retry
BUDGET_CODES = frozenset(
    {"budget_exhausted", "limit_exceeded", "budget_stopped", "depth_exhausted"}
)
FAILURE_ENDINGS: dict[str, tuple[TerminationReason, str]] = {
    "signature_invalid": ("policyViolation", "signature check failed"),
    "policy_violation": ("policyViolation", "policy violation"),
    "config_invalid": ("catastrophic_error", "invalid configuration"),
    # the model's endpoint is not there: a person fixes the deployment (suggested action user_input)
    "model_unreachable": ("blocked", "model endpoint unreachable"),
    # the server refused the prompt as longer than its window: the same prompt is refused again
    "context_length_exceeded": (
        "context_budget_exceeded",
        "the model's server refused the prompt as longer than its context window",
    ),
}
# what a hook's abort on an event ends the run with (other events: catastrophic_error)
HOOK_ABORTS: dict[str, TerminationReason] = {
    "limit": "budget_exhausted",
    "context_limit_reached": "context_budget_exceeded",
}


def completed_review(spec: RunSpec, result: PhaseResult) -> Review:
    """ADVANCE, or SUCCEED after the last phase."""
    last = result.phase_index + 1 >= len(spec.pipeline)
    return Review(State.SUCCEED if last else State.ADVANCE)


def failure_review(state: RunState, code: str | None) -> Review:
    """END (by the failure's code), else RETRY while the phase has retries left, else EXHAUST."""
    if code in BUDGET_CODES:
        return Review(State.END, "budget_exhausted", code or "")
    if code in FAILURE_ENDINGS:
        reason, factor = FAILURE_ENDINGS[code]
        return Review(State.END, reason, factor)
    decision = HookDecision.parse(code)
    if decision is not None and decision[0] == "abort":
        return Review(State.END, HOOK_ABORTS.get(decision[1], "catastrophic_error"))
    retries = state.spec.pipeline[state.phase_index].max_retries
    # a phase's retries count from its first attempt, or from where a person let it go on
    used = state.attempt - state.retry_base
    return Review(State.RETRY if used <= retries else State.EXHAUST)


# -- the way in -------------------------------------------------------------------------------------


def on_phase_result(
    rt: Runtime, result: PhaseResult, host: str | None = None, *, delivery: Delivery | None = None
) -> State:
    """Review a worker's PhaseResult and act on it (the table above). ``host``: the worker host it came
    from (its ask's stream; only the host the attempt was queued on moves the run); ``delivery``: the entry it came in, acknowledged with the write that acts on it. Returns the
    state the result ended in. The hot path makes one round trip (ADVANCE: the fenced transition with
    the next job, its context and the activity entries); the spec and earlier outputs come from
    Mother's cache."""
    spec = rt.spec(result.run_id)
    if spec is None:
        return State.STALE
    outcome = Outcome(result, spec, host or "-", delivery)
    if result.status == "failed":
        state = rt.load_run(result.run_id)
        if state is None or not is_current(state, result.phase_index, result.attempt):
            return _act(State.STALE, rt, result=result)
        if state.host != outcome.host:
            return _act(State.REFUSED, rt, result=result, entry_id=outcome.entry_id)
        outcome.state = state
        review = _hooked(rt, outcome, failure_review(state, result.error_code))
        return _act(
            review.state,
            rt,
            state=state,
            result=result,
            review=review,
            delivery=delivery,
            error=result.error or "phase failed",
            entry_id=outcome.entry_id,
        )
    review = _hooked(rt, outcome, completed_review(spec, result))
    return _act(
        review.state,
        rt,
        result=result,
        review=review,
        delivery=delivery,
        spec=spec,
        host=outcome.host,
        entry_id=outcome.entry_id,
    )


def _hooked(rt: Runtime, outcome: Outcome, review: Review) -> Review:
    """The review after every hook had its say (a hook that acted itself makes it HANDLED: the rest
    are not asked)."""
    for hook in rt.review_hooks:
        review = hook(rt, outcome, review) or review
        if review.state == State.HANDLED:
            break
    return review


def on_attempt_lost(rt: Runtime, state: RunState, error: str) -> State:
    """An attempt whose worker was lost (no heartbeat) or whose job failed outside the phase: RETRY or EXHAUST."""
    review = failure_review(state, None)
    return _act(review.state, rt, state=state, review=review, error=error)


# -- the actions --------------------------------------------------------------------------------------


def _act(which: State, rt: Runtime, **ctx: Any) -> State:
    """Do what ``which`` says; an ADVANCE or SUCCEED whose server-side check fails becomes STALE or REFUSED."""
    done = ACTIONS[which](rt, **ctx)
    return done if isinstance(done, State) else which


def _advance(
    rt: Runtime,
    *,
    result: PhaseResult,
    spec: RunSpec,
    host: str,
    entry_id: str,
    delivery: Delivery | None,
    **_: Any,
) -> State | None:
    earlier = _earlier_outputs(rt, result)
    moved = make(
        rt,
        Move(
            result.run_id,
            spec,
            frm=(result.phase_index, result.attempt),
            to=(result.phase_index + 1, 1),
            event="phase_completed",
            detail=f"confidence {result.confidence:.2f}",
            result=result,
            outputs=[*earlier, (result.phase, result.output)],
            activity=[completed_event(result)],
            host=host,
            delivery=delivery,
        ),
    )
    if not moved:
        return _not_taken(rt, result, host, entry_id)
    rt.remember_output(result.run_id, result.phase_index, result.phase, result.output)
    return None


def _succeed(
    rt: Runtime,
    *,
    result: PhaseResult,
    spec: RunSpec,
    host: str,
    entry_id: str,
    delivery: Delivery | None,
    **_: Any,
) -> State | None:
    done = make(
        rt,
        Move(
            result.run_id,
            spec,
            frm=(result.phase_index, result.attempt),
            to=(result.phase_index, result.attempt),
            event="phase_completed",
            detail=f"confidence {result.confidence:.2f}",
            result=result,
            host=host,
            then="stay",
        ),
    ).state
    if done is None:
        return _not_taken(rt, result, host, entry_id)
    rt.forget(result.run_id)
    end_success(rt, done, result.phase, [completed_event(result)], delivery)
    return None


def end_success(
    rt: Runtime,
    done: RunState,
    phase: str,
    activity: list[tuple[str, dict[str, Any]]],
    delivery: Delivery | None,
) -> None:
    """End a run whose last phase's result is accepted: ``success``, each phase's figures a factor."""
    n = len(done.spec.pipeline)
    factors = [
        f"{r.phase}: attempt {r.attempt}, confidence {r.confidence:.2f}, {r.evidence_count} evidence"
        for r in done.results
    ]
    factors += [f"{r.phase}: {notice}" for r in done.results for notice in r.notices]
    settled = [
        f"{found[1]} by {found[2]} ({found[3]})"
        for note in done.notes
        if (found := _SETTLED.match(note)) is not None
    ]
    end_run(
        rt,
        done,
        "success",
        f"All {n} phase{'s' if n != 1 else ''} completed"
        + (f"; conflicts settled: {'; '.join(settled)}"[:1000] if settled else ""),
        phase=phase,
        activity=activity,
        contributing_factors=factors,
        delivery=delivery,
    )


def _end(
    rt: Runtime,
    *,
    review: Review,
    delivery: Delivery | None,
    error: str = "",
    state: RunState | None = None,
    result: PhaseResult | None = None,
    **_: Any,
) -> None:
    if state is None and result is not None:  # a hook ended a completed result's run
        state = rt.load_run(result.run_id)
    if state is None or review.reason is None:
        return
    if review.reason == "budget_exhausted" and review.factor in BUDGET_CODES:
        end_for_budget(
            rt, state, error, fail_safe=review.factor == "limit_exceeded", delivery=delivery
        )
        return
    code = result.error_code if result is not None else None
    phase = state.spec.pipeline[state.phase_index].name
    end_run(
        rt,
        state,
        review.reason,
        error or review.factor,
        phase=phase,
        contributing_factors=[review.factor or f"{code}: {error[:300]}"],
        delivery=delivery,
    )


def _retry(
    rt: Runtime,
    *,
    state: RunState,
    error: str,
    delivery: Delivery | None = None,
    result: PhaseResult | None = None,
    **_: Any,
) -> None:
    phase = state.spec.pipeline[state.phase_index]
    rt.emit(
        rt.redis,
        "phase_failed",
        run_id=state.run_id,
        phase=phase.name,
        attempt=state.attempt,
        error=error[:1000],
        **attempt_facts(result),
    )
    lost = "was lost" if result is None else "failed"
    release_attempt(rt, state, f"phase {phase.name} attempt {state.attempt} {lost}: {error}")
    # a conflict strategy's attempt (an arbiter, ...) is retried as itself
    make(
        rt,
        Move(
            state.run_id,
            attempt_view(state).spec,
            frm=(state.phase_index, state.attempt),
            to=(state.phase_index, state.attempt + 1),
            event="phase_retried",
            detail=error,
            outputs=outputs_of(state),
            delivery=delivery,
            activity=[
                (
                    "phase_retried",
                    {"run_id": state.run_id, "phase": phase.name, "attempt": state.attempt + 1},
                )
            ],
        ),
    )


def release_attempt(rt: Runtime, state: RunState, why: str) -> None:
    """Give back what the run's current attempt still holds, and fence the attempt: what it holds will
    not be settled (a lost one's call in flight, or a failed one's call whose settle did not reach the
    server), and its horse may still be alive (lost is not dead), so the same call makes the guard
    refuse its reservations and charges from now on."""
    release_reservations(
        rt.redis,
        rt.settings,
        state.run_id,
        state.user_id,
        held_reservations(rt.redis, state.run_id),
        why,
        fence=(state.phase_index, state.attempt),
    )


def _exhaust(
    rt: Runtime,
    *,
    state: RunState,
    error: str,
    delivery: Delivery | None = None,
    result: PhaseResult | None = None,
    **_: Any,
) -> None:
    phase = state.spec.pipeline[state.phase_index]
    rt.emit(
        rt.redis,
        "phase_failed",
        run_id=state.run_id,
        phase=phase.name,
        attempt=state.attempt,
        error=error[:1000],
        **attempt_facts(result),
    )
    failures = [*_failures(state), f"attempt {state.attempt}: {error[:300]}"]
    end_run(
        rt,
        state,
        "retries_exhausted",
        f"Phase {phase.name} ({phase.role} on {phase.model}) failed on all {state.attempt} attempts; "
        f"last error: {error[:500]}",
        phase=phase.name,
        contributing_factors=failures,
        delivery=delivery,
    )


def _stale(rt: Runtime, *, result: PhaseResult, **_: Any) -> None:
    log.info("stale_phase_result", run_id=result.run_id, phase=result.phase, attempt=result.attempt)


def _refused(rt: Runtime, *, result: PhaseResult, entry_id: str = "", **_: Any) -> None:
    log.error(
        "phase_result_refused",
        run_id=result.run_id,
        phase=result.phase,
        attempt=result.attempt,
        why="it came from no host, or from another host than the one its attempt was queued on",
        entry_id=entry_id,
    )
    rt.violation(
        "phase_result_not_held",
        run_id=result.run_id,
        phase=result.phase,
        attempt=result.attempt,
        entry_id=entry_id,
        status=result.status,
        why="a result for the current attempt from another host than the attempt's: refused",
    )


def _handled(rt: Runtime, **_: Any) -> None:
    """A hook acted on the result itself."""


ACTIONS: dict[State, Callable[..., State | None]] = {
    State.ADVANCE: _advance,
    State.SUCCEED: _succeed,
    State.END: _end,
    State.RETRY: _retry,
    State.EXHAUST: _exhaust,
    State.STALE: _stale,
    State.REFUSED: _refused,
    State.HANDLED: _handled,
}


def _not_taken(rt: Runtime, result: PhaseResult, host: str, entry_id: str) -> State:
    """Why a completed result did not move its run: its attempt is no longer current (a late or duplicate
    result: STALE), or it is but it came from another host than the attempt's (REFUSED)."""
    position, current_host = runs.read_position_and_host(rt.redis, result.run_id)
    if runs.is_active_at(position, result.phase_index, result.attempt) and current_host != host:
        return _act(State.REFUSED, rt, result=result, entry_id=entry_id)
    return _act(State.STALE, rt, result=result)


def _earlier_outputs(rt: Runtime, result: PhaseResult) -> list[tuple[str, str]]:
    """The phases before this one's (name, output): from Mother's cache, else read from the run."""
    outputs = rt.outputs(result.run_id, result.phase_index)
    if outputs is None:
        state = rt.load_run(result.run_id)
        outputs = outputs_of(state)[: result.phase_index] if state is not None else []
    return outputs


def _failures(state: RunState) -> list[str]:
    """Earlier attempts' errors of the current phase (each retry's history entry holds the error)."""
    return [
        f"attempt {h.attempt - 1}: {h.detail[:300]}"
        for h in state.history
        if h.event == "phase_retried" and h.phase == state.phase and h.attempt
    ][:20]


# -- a budget's end ------------------------------------------------------------------------------------


def end_for_budget(
    rt: Runtime,
    state: RunState,
    error: str,
    *,
    fail_safe: bool = False,
    delivery: Delivery | None = None,
) -> TerminationRecord:
    """End the run ``budget_exhausted``: the first crossed limit is primary, every crossing a factor.

    With ``fail_safe`` (a run limit hit at a turn's start, no hook handling it) the worker's message
    ("Limit exceeded: turns_exceeded (10/10)") is the details and names the primary limit. Also stores
    the spec's BudgetExhausted record in the run's counters, with the spec's resource name and the
    limit's real figures."""
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
        rt,
        state,
        "budget_exhausted",
        details,
        contributing_factors=factors or [error[:500]],
        delivery=delivery,
    )


# a conflict's note (mother.conflicts.engine): its type, the strategy that settled it, the decision
_SETTLED = re.compile(r"conflict \S+ \((\w+)\): (\S+) -> (\w+)")
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
