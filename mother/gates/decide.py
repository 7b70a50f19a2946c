"""People's decisions on gates, and the deadline's: Mother takes ``approve``, ``deny`` and ``answer`` from
``mother:commands`` (the CLI, the Python client or a raw XADD) and ends a gate nobody decided in time.

Each decision is one server call that checks, on the server, that the run still waits on that gate, the
deadline has not passed, the actor may decide it and (when given) the digest is the gate's, then closes
the gate (the decision kept in ``run:{id}.gates`` with actor, reason and the server's time) and moves the
run on in the same step: the approved phase is dispatched, the approved tool call's phase runs again, a
conflict is settled; a denial ends the run ``approval_denied``, a deadline ``blocked``.
"""

from __future__ import annotations

from typing import Any

from mother import conflicts, keys
from mother.errors import GateRefused, NotFound
from mother.gates.build import check_decision, close_op, gate_waited_on
from mother.lifecycle import Move, end_run, make
from mother.logs import get_logger
from mother.records import runs
from mother.records.metrics import queue_observe
from mother.records.runs import attempt_view
from mother.runtime import Runtime
from mother.streams import Delivery
from schemas import RunState, ms_from_iso
from schemas.gate import Gate, GateDecision

__all__ = ["decide", "expire", "waiting_on"]

log = get_logger("gates")


def waiting_on(rt: Runtime, run_id: str, gate_id: str | None = None) -> tuple[RunState, Gate]:
    """The run and the gate it waits on; a one-line error when it waits on none (or not on ``gate_id``)."""
    keys.check_id(run_id, "run_id")
    state = rt.load_run(run_id)
    if state is None:
        raise NotFound(f"no run {run_id!r}; list runs that wait with `mother runs --waiting`")
    return state, gate_waited_on(state, gate_id)


def decide(
    rt: Runtime,
    run_id: str,
    decision: str,
    *,
    actor: Any,
    reason: Any = "",
    gate_id: str | None = None,
    digest: str | None = None,
    answer: Any = None,
    delivery: Delivery | None = None,
) -> dict[str, Any]:
    """Take a person's decision on the gate ``run_id`` waits on; GateRefused (changing nothing) when it
    cannot be taken. Returns what was decided."""
    kind, actor, reason, text = check_decision(decision, actor, reason, answer)
    state, gate = waiting_on(rt, run_id, gate_id)
    if kind == "answer" and gate.kind != "input":
        raise GateRefused(
            f"gate {gate.gate_id} asks for approval ({gate.subject}), not an answer: use "
            f"`mother approve {run_id}` or `mother deny {run_id}`",
            why="wrong_kind",
        )
    made = GateDecision(decision=kind, actor=actor, reason=reason, answer=text)
    close = close_op(gate.gate_id, made, digest=digest)
    if gate.conflict_id is not None:
        conflicts.on_gate_decision(rt, state, gate, made, close, delivery)
    elif kind == "deny":
        end_run(
            rt,
            state,
            "approval_denied",
            f"{actor} denied {gate.subject}: {reason or 'no reason given'}",
            phase=gate.phase,
            contributing_factors=[f"gate {gate.gate_id} denied by {actor}: {reason}"[:1000]],
            delivery=delivery,
            gate=close,
        )
    else:
        _approve(rt, state, gate, made, close, delivery)
    pipe = rt.redis.pipeline()
    _observe_wait(rt, pipe, gate)
    rt.emit(
        pipe,
        "gate_decided",
        run_id=run_id,
        phase=gate.phase,
        gate_id=gate.gate_id,
        kind=gate.kind,
        decision=kind,
        actor=actor,
        reason=reason[:1000],
    )
    pipe.execute()
    log.info("gate_decided", run_id=run_id, gate_id=gate.gate_id, decision=kind, actor=actor)
    return {"run_id": run_id, "gate_id": gate.gate_id, "decision": kind, "actor": actor}


def _approve(
    rt: Runtime,
    state: RunState,
    gate: Gate,
    made: GateDecision,
    close: str,
    delivery: Delivery | None,
) -> None:
    """An approved phase is dispatched; an approved tool call's phase runs again, allowed that call."""
    index, attempt = state.phase_index, state.attempt
    request = gate.tool

    def also(pipe: Any) -> None:
        # the phase's retries count from here: waiting for approval was no failure
        if request is not None:
            runs.queue_grant(pipe, state.run_id, request.digest, retry_base=attempt)

    moved = make(
        rt,
        Move(
            state.run_id,
            attempt_view(state).spec if request is not None else state.spec,
            frm=(index, attempt),
            to=(index, attempt + 1),
            event="tool_approved" if request is not None else "phase_approved",
            detail=f"{made.actor}: {made.reason}"[:4000],
            also=also,
            delivery=delivery,
            close=close,
        ),
    )
    if not moved:
        raise GateRefused(
            f"run {state.run_id} no longer waits on gate {gate.gate_id} (it ended or moved on)",
            why="not_waiting",
        )


def expire(rt: Runtime, run_id: str) -> bool:
    """End the run whose gate's deadline passed (the watchdog's call): ``blocked``, suggested_action
    user_input; a conflict's gate leaves its conflict unresolved. False when it no longer waits."""
    try:
        state, gate = waiting_on(rt, run_id)
    except (GateRefused, NotFound):
        rt.redis.zrem(keys.GATE_DEADLINES, run_id)
        return False
    made = GateDecision(decision="expire", actor="mother", reason="the gate's deadline passed")
    close = close_op(gate.gate_id, made, expire=True)
    if gate.conflict_id is not None:
        conflicts.on_gate_decision(rt, state, gate, made, close)
        return True
    end_run(
        rt,
        state,
        "blocked",
        f"Nobody decided {gate.subject} before its deadline ({gate.deadline})",
        phase=gate.phase,
        contributing_factors=[
            f"gate {gate.gate_id} ({gate.kind}) opened {gate.opened_at}, deadline {gate.deadline}"
        ],
        # in the end's own round trip, before `terminated`: whoever sees the end sees why
        activity=[
            ("gate_expired", {"run_id": run_id, "phase": gate.phase, "gate_id": gate.gate_id})
        ],
        gate=close,
    )
    pipe = rt.redis.pipeline()
    _observe_wait(rt, pipe, gate)
    pipe.execute()
    return True


def _observe_wait(rt: Runtime, pipe: Any, gate: Gate) -> None:
    """How long the run waited at ``gate`` (opened to now), in the gate-wait histogram."""
    if gate.opened_at is not None:
        queue_observe(pipe, "gate_wait", max(0, rt.clock.now_ms() - ms_from_iso(gate.opened_at)))
