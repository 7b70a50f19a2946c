"""Human gates: a run that waits for a person (``Gate``, on ``run:{id}.gate`` while it waits, then kept in
``run:{id}.gates`` with its decision), what a person decided (``GateDecision``), and a tool call a phase may
make only once approved (``ApprovalRequest``)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, JsonValue, StringConstraints

from schemas._base import Id, Record, Shallow, ShortText, Timestamp

__all__ = [
    "CLOUD_ESCALATION",
    "MAX_ANSWER_CHARS",
    "ApprovalRequest",
    "Gate",
    "GateDecision",
    "GateKind",
]

MAX_ANSWER_CHARS = 100_000
GateKind = Literal["approval", "input"]


# ApprovalRequest.tool of a phase escalated to a cloud model that a library's policy wants approved
CLOUD_ESCALATION = "cloud_escalation"


class ApprovalRequest(Record):
    """A tool call a phase stopped before, because it needs a person's approval: approved, the phase runs
    again and may make exactly this call (same tool, same arguments: ``digest``). ``tool`` is
    ``cloud_escalation`` for a phase Mother escalated to a cloud model that a library's policy wants
    approved (its arguments: the model and the libraries; its ``subject`` and ``question`` say so)."""

    tool: Id
    digest: Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]
    arguments: Annotated[dict[str, JsonValue], Shallow] = Field(
        default_factory=dict, description="the call's arguments (as the model gave them)"
    )
    subject: Annotated[str, StringConstraints(max_length=400)] | None = Field(
        None, description="how the gate names what is approved (default: the tool call)"
    )
    question: Annotated[str, StringConstraints(max_length=20_000)] | None = Field(
        None, description="what the gate asks (default: the call and its arguments)"
    )


class GateDecision(Record):
    """What a person (or Mother, at the deadline) decided on a gate: the audit entry."""

    decision: Literal["approve", "deny", "answer", "expire"]
    actor: Id
    reason: ShortText = ""
    answer: Annotated[str, StringConstraints(max_length=MAX_ANSWER_CHARS)] | None = None
    at: Timestamp | None = Field(None, description="server time of the decision")


class Gate(Record):
    """A run waiting for a person: an approval (of a phase about to start, or of a tool call) or an
    input (a question, as a conflict's request_user_input asks)."""

    gate_id: Id
    kind: GateKind
    subject: ShortText = Field(description="what is to be approved or answered, in a line")
    question: Annotated[str, StringConstraints(max_length=20_000)] = ""
    digest: Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")] = Field(
        description="SHA-256 of exactly what is approved: an approval naming another digest is refused"
    )
    approvers: list[Id] = Field(default_factory=list, description="who may decide; empty: anyone")
    phase: Id
    phase_index: int = Field(ge=0)
    attempt: int = Field(
        ge=0, description="the run's attempt while it waits (0: the phase has not started)"
    )
    conflict_id: Id | None = None
    tool: ApprovalRequest | None = None
    timeout_ms: int = Field(ge=1)
    opened_at: Timestamp | None = None
    deadline: Timestamp | None = None
    deadline_ms: int | None = Field(None, ge=0)
    paused_run_ms: int | None = Field(
        None, description="what was left of the run's wall clock when it began to wait"
    )
    paused_warn_ms: int | None = None
    decision: GateDecision | None = None
