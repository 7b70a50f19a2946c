"""Conflict resolution records: what a reviewing agent decided (``Verdict``), a disagreement Mother
found and how it was settled (``ConflictResolution``, stored at ``conflict:{conflict_id}``), and the
extra attempt a strategy runs (``Detour``: an arbiter, an escalated re-run, a second review)."""

from __future__ import annotations

from typing import Annotated, Literal, get_args

from pydantic import Field, StringConstraints

from schemas._base import Id, ModelName, Record, ShortText, Timestamp

__all__ = [
    "CONFLICT_STRATEGIES",
    "CONFLICT_TYPES",
    "ConflictResolution",
    "ConflictStrategy",
    "ConflictType",
    "Detour",
    "DetourKind",
    "FinalDecision",
    "Finding",
    "PartyOutput",
    "RoleKind",
    "StrategyStep",
    "Verdict",
]

ConflictType = Literal[
    "critic_vs_coder",
    "low_confidence_output",
    "competing_proposals",
    "evidence_contradiction",
    "test_vs_review",
    "retrieval_ambiguity",
]
CONFLICT_TYPES: tuple[str, ...] = get_args(ConflictType)

ConflictStrategy = Literal[
    "prefer_higher_confidence",
    "prefer_higher_evidence",
    "run_arbiter",
    "escalate_model",
    "request_user_input",
    "fail_safe",
    "terminate_blocked",
]
CONFLICT_STRATEGIES: tuple[str, ...] = get_args(ConflictStrategy)

FinalDecision = Literal["accepted", "rejected", "escalated", "blocked"]
# an agent: its role, and the model it ran on (role@model)
AgentName = Annotated[
    str, StringConstraints(pattern=r"^[A-Za-z0-9_.:-]{1,128}(@[A-Za-z0-9_.:/@-]{1,128})?$")
]
# what a role does: produce work, review it, or test it (role files declare it)
RoleKind = Literal["work", "review", "test"]
# what a phase may report beside its output (the spec's evidence_contradiction, retrieval_ambiguity)
Finding = Literal["contradiction", "ambiguity"]
DetourKind = Literal["arbiter", "escalation", "review_again"]


class Verdict(Record):
    """A reviewing phase's decision on the work it reviews (a critic's, a test run's, an arbiter's)."""

    decision: Literal["accept", "reject"]
    confidence: float = Field(ge=0.0, le=1.0)
    evidence_count: int = Field(0, ge=0)
    artifact_ids: list[Id] = Field(default_factory=list)
    agent_id: Id = Field(description="the role that decided")
    model: ModelName
    reviews: Id | None = Field(None, description="the phase whose output it decided on")
    winner: Id | None = Field(
        None, description="an arbiter of competing proposals: the phase whose proposal it chose"
    )


class PartyOutput(Record):
    """One side of a conflict: the spec's their_outputs entry, with where it came from."""

    agent_id: Id
    confidence: float = Field(ge=0.0, le=1.0)
    evidence_count: int = Field(ge=0)
    artifact_ids: list[Id] = Field(default_factory=list)
    phase: Id
    attempt: int = Field(ge=0)
    model: ModelName | None = None
    stance: Literal["work", "accept", "reject", "proposal"] = Field(
        description="work: the output under review; accept/reject: a reviewer's verdict"
    )


class StrategyStep(Record):
    """One strategy tried on a conflict, in the policy's order, and what came of it."""

    strategy: ConflictStrategy
    outcome: Literal["resolved", "failed", "pending"]
    detail: ShortText = ""
    at: Timestamp


class ConflictResolution(Record):
    """``conflict:{conflict_id}``: one disagreement Mother found in a run, and how it was settled.

    Every field of the spec's ConflictResolution, plus where the conflict is (``status``, ``phase``),
    the policy it follows and each strategy tried. While a strategy is under way (an arbiter or an
    escalated re-run working, a person asked) the record is ``open`` and its outcome fields are null.
    """

    conflict_id: Id
    run_id: Id
    conflict_type: ConflictType
    agents_involved: list[Id]
    their_outputs: list[PartyOutput]
    strategy_applied: ConflictStrategy | None = None
    winner_agent: AgentName | None = Field(
        None, description="the winning output's agent, role@model (null: no agent won)"
    )
    rationale: ShortText = ""
    resolution_successful: bool = False
    final_decision: FinalDecision | None = None
    detected_at: Timestamp
    resolved_at: Timestamp | None = None
    resolution_duration_ms: int | None = Field(None, ge=0)
    # beyond the spec
    status: Literal["open", "closed"] = "open"
    phase: Id = Field(description="the phase whose result raised it")
    phase_index: int = Field(ge=0)
    work_phase: Id | None = Field(None, description="the phase whose output is in question")
    policy: list[ConflictStrategy] = Field(description="the strategies, in order")
    next_strategy: int = Field(0, ge=0, description="index into policy of the next one to try")
    steps: list[StrategyStep] = Field(default_factory=list)
    detected_ms: int = Field(
        ge=0, description="detected_at in epoch ms (idx:conflict range queries)"
    )


class Detour(Record):
    """An attempt a strategy adds at the run's current position (the reviewing phase's next attempt):
    the arbiter, the work re-run on a larger model, or the review made again. The worker runs it with
    ``role`` and ``model`` in place of the phase's; its result goes back to the conflict."""

    conflict_id: Id
    kind: DetourKind
    name: Id = Field(
        description="the phase name the attempt reports (the work's, for an escalation)"
    )
    role: Id
    model: ModelName
    for_phase: int = Field(ge=0, description="the pipeline index of the phase it stands in for")
    reviews: Id | None = Field(
        None, description="an arbiter's: the phase whose output is in question"
    )
    instructions: Annotated[str, StringConstraints(max_length=200_000)] = ""
