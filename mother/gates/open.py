"""The gate a failed phase asks for: a tool call that needs a person's approval (error_code
``approval_required``). Mother's review hook (:func:`mother.conflicts.install`) opens it where the run
is; approved, the phase runs again and may make exactly that call (:mod:`mother.gates.decide`)."""

from __future__ import annotations

from mother.gates.build import tool_gate
from mother.lifecycle import Move, make
from mother.logs import get_logger
from mother.records.runs import attempt_view
from mother.review import Outcome, Review, State, release_attempt
from mother.runtime import Runtime

__all__ = ["review_hook"]

log = get_logger("gates")


def review_hook(rt: Runtime, outcome: Outcome, review: Review) -> Review | None:
    """A failed attempt that stopped before a tool call needing approval: the run waits on a gate for
    that call (what the attempt still holds given back, as for a retry)."""
    result, state = outcome.result, outcome.state
    if (
        result.status != "failed"
        or result.error_code != "approval_required"
        or result.approval_request is None
        or state is None
        or review.state not in (State.RETRY, State.EXHAUST)
    ):
        return None
    view = attempt_view(state)
    index, attempt = state.phase_index, state.attempt
    gate = tool_gate(rt.settings, view.spec, index, attempt, result.approval_request)
    release_attempt(
        rt, state, f"phase {result.phase} attempt {attempt} waits for approval of {gate.subject}"
    )
    waiting = make(
        rt,
        Move(
            state.run_id,
            view.spec,
            frm=(index, attempt),
            to=(index, attempt),
            event="gate_opened",
            detail=gate.subject,
            host=outcome.host,
            delivery=outcome.delivery,
            then="wait",
            gate=gate,
        ),
    )
    if not waiting:
        log.info("gate_not_opened", run_id=state.run_id, gate_id=gate.gate_id)
    return Review(State.HANDLED)
