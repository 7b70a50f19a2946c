"""The gates a run may wait on, built (no I/O): before a phase that needs approval, before a tool call that
needs approval, and a conflict's question to a person; and the ops that open and close them in the server
call that moves the run (``mh_transition``, ``mh_terminate``: see ``mother/lua/mother.lua``)."""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Sequence
from typing import Any, Literal, cast, get_args

import orjson

from mother import keys
from mother.config import Settings
from mother.errors import GateRefused, InvalidSpec
from schemas import RunSpec, RunState
from schemas.conflict import ConflictResolution
from schemas.gate import MAX_ANSWER_CHARS, ApprovalRequest, Gate, GateDecision, GateKind

__all__ = [
    "DECISIONS",
    "Decision",
    "approvers_for",
    "check_decision",
    "close_op",
    "conflict_gate",
    "gate_waited_on",
    "new_gate_id",
    "open_op",
    "phase_digest",
    "phase_gate",
    "timeout_ms",
    "tool_gate",
]


Decision = Literal["approve", "deny", "answer"]
DECISIONS: tuple[str, ...] = get_args(Decision)


def check_decision(
    decision: str, actor: Any, reason: Any, answer: Any
) -> tuple[Decision, str, str, str | None]:
    """A decision's fields, checked: one-line errors that say what to fix."""
    if decision not in ("approve", "deny", "answer"):
        raise InvalidSpec(f"unknown decision {decision!r}; use approve, deny or answer")
    if actor is None:
        raise InvalidSpec(
            "--actor: who decides (with Mother's own credentials it must be said; a principal's "
            "connection is its own actor)",
            field="actor",
        )
    if not isinstance(actor, str) or not keys.is_id(actor):
        raise InvalidSpec(
            f"actor must be a name of 1-128 characters from A-Z a-z 0-9 _ . : -, got {actor!r}"[
                :300
            ],
            field="actor",
        )
    if not isinstance(reason, str) or len(reason) > 4000:
        raise InvalidSpec("reason must be text of at most 4000 characters", field="reason")
    if decision == "answer":
        if not isinstance(answer, str) or not answer.strip():
            raise InvalidSpec("an answer needs its text (--text or --file)", field="answer")
        if len(answer) > MAX_ANSWER_CHARS:
            raise InvalidSpec(
                f"the answer is {len(answer)} characters; the limit is {MAX_ANSWER_CHARS}",
                field="answer",
            )
    elif answer is not None:
        raise InvalidSpec(f"only an answer carries text, not a {decision}", field="answer")
    return cast(Decision, decision), actor, reason, answer


def gate_waited_on(state: RunState, gate_id: str | None = None, actor: str | None = None) -> Gate:
    """The gate the run waits on; GateRefused when it waits on none, on another than ``gate_id``, or
    ``actor`` is not among its approvers."""
    gate = state.gate
    if state.status != "waiting" or gate is None:
        raise GateRefused(
            f"run {state.run_id} is not waiting for a person (status {state.status}); "
            "`mother runs --waiting` lists the runs that are",
            why="not_waiting",
        )
    if gate_id is not None and gate_id != gate.gate_id:
        raise GateRefused(
            f"run {state.run_id} waits on gate {gate.gate_id}, not {gate_id}", why="wrong_gate"
        )
    if actor is not None and gate.approvers and actor not in gate.approvers:
        raise GateRefused(
            f"{actor} may not decide gate {gate.gate_id}; its approvers: {', '.join(gate.approvers)}",
            why="not_allowed",
        )
    return gate


def new_gate_id(index: int, attempt: int, kind: GateKind) -> str:
    """A gate's id: where the run waits, and a random part (an old approval never names a new gate)."""
    return f"g{index}.{attempt}.{kind}.{secrets.token_hex(4)}"


def timeout_ms(settings: Settings, spec: RunSpec) -> int:
    seconds = spec.gate_timeout_seconds or settings.gates.timeout_seconds
    return max(1, int(seconds * 1000))


def approvers_for(settings: Settings, spec: RunSpec) -> list[str]:
    """Who may decide the run's gates: the run's approvers, else the configured ones; empty: anyone."""
    return list(spec.approvers or settings.gates.approvers)


def phase_digest(spec: RunSpec, index: int, outputs: Sequence[tuple[str, str]]) -> str:
    """What approving a phase approves: the phase as specified and the outputs it will be given."""
    hashed = hashlib.sha256(spec.pipeline[index].to_json())
    for name, output in outputs[:index]:
        hashed.update(b"\0" + name.encode() + b"\0" + output.encode(errors="surrogatepass"))
    return hashed.hexdigest()


def _gate(
    settings: Settings,
    spec: RunSpec,
    *,
    kind: GateKind,
    index: int,
    attempt: int,
    subject: str,
    question: str,
    digest: str,
    **more: object,
) -> Gate:
    return Gate.model_validate(
        {
            "gate_id": new_gate_id(index, attempt, kind),
            "kind": kind,
            "subject": subject[:4000],
            "question": question[:20_000],
            "digest": digest,
            "approvers": approvers_for(settings, spec),
            "phase": spec.pipeline[index].name,
            "phase_index": index,
            "attempt": attempt,
            "timeout_ms": timeout_ms(settings, spec),
            **more,
        }
    )


def phase_gate(
    settings: Settings,
    spec: RunSpec,
    index: int,
    outputs: Sequence[tuple[str, str]],
    reasons: Sequence[str] = (),
) -> Gate:
    """An approval of phase ``index`` before it starts (the run waits at attempt 0); ``reasons``: why,
    beside the phase's or role's require_approval (a library policy's, say)."""
    phase = spec.pipeline[index]
    return _gate(
        settings,
        spec,
        kind="approval",
        index=index,
        attempt=0,
        subject=f"start phase {phase.name} ({phase.role} on {phase.model})"
        + (f": {'; '.join(reasons)}"[:400] if reasons else ""),
        question=f"Phase {phase.name} needs approval before it starts."
        + (f" {' '.join(reasons)}" if reasons else "")
        + (f" Exit criteria: {phase.exit_criteria}" if phase.exit_criteria else ""),
        digest=phase_digest(spec, index, outputs),
    )


def tool_gate(
    settings: Settings, spec: RunSpec, index: int, attempt: int, request: ApprovalRequest
) -> Gate:
    """An approval of one action a phase stopped before (approved, the phase runs again, allowed exactly
    that action): a tool call, or what the request words itself (a cloud escalation)."""
    shown = orjson.dumps(request.arguments).decode()
    return _gate(
        settings,
        spec,
        kind="approval",
        index=index,
        attempt=attempt,
        subject=(
            request.subject or f"tool call {request.tool} in phase {spec.pipeline[index].name}"
        )[:400],
        question=request.question or f"The phase wants to call {request.tool} with {shown[:2000]}",
        digest=request.digest,
        tool=request,
    )


def conflict_gate(
    settings: Settings, spec: RunSpec, index: int, attempt: int, conflict: ConflictResolution
) -> Gate:
    """A conflict's question to a person (request_user_input): approve the work, answer, or deny."""
    sides = "; ".join(
        f"{p.agent_id} ({p.stance}, confidence {p.confidence:.2f}, {p.evidence_count} evidence)"
        for p in conflict.their_outputs
    )
    tried = ", ".join(f"{s.strategy} {s.outcome}" for s in conflict.steps) or "nothing"
    return _gate(
        settings,
        spec,
        kind="input",
        index=index,
        attempt=attempt,
        subject=f"conflict {conflict.conflict_id} ({conflict.conflict_type}) in phase "
        f"{spec.pipeline[index].name}",
        question=f"The agents disagree: {sides}. Tried: {tried}. Approve to accept the work, answer "
        "to accept it and guide the next phases, or deny to end the run.",
        digest=hashlib.sha256(conflict.conflict_id.encode()).hexdigest(),
        conflict_id=conflict.conflict_id,
    )


def open_op(settings: Settings, gate: Gate) -> str:
    """The op that opens ``gate`` with the move (the run then waits; a deadline warning at
    ``gates.warning_ratio`` of its wait)."""
    return orjson.dumps(
        {
            "open": gate.to_json().decode(),
            "timeout_ms": gate.timeout_ms,
            "warn_ms": int(gate.timeout_ms * settings.gates.warning_ratio),
        }
    ).decode()


def close_op(
    gate_id: str, decision: GateDecision, *, digest: str | None = None, expire: bool = False
) -> str:
    """The op that closes the run's open gate ``gate_id`` with ``decision`` (checked on the server: the
    run still waits on it, the deadline has not passed, the actor may decide, the digest matches)."""
    return orjson.dumps(
        {
            "close": gate_id,
            "actor": decision.actor,
            "digest": digest or "",
            "expire": expire,
            "decision": decision.to_json().decode(),
        }
    ).decode()
