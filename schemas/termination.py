"""Termination records: every run ends with exactly one ``TerminationRecord``."""

from __future__ import annotations

from typing import Annotated, Any, Literal, get_args

from pydantic import Field, SerializerFunctionWrapHandler, StringConstraints, model_serializer

from schemas._base import Id, Record, ShortText, Timestamp

__all__ = [
    "SUGGESTED_ACTIONS",
    "TERMINATION_REASONS",
    "SuggestedAction",
    "TerminationReason",
    "TerminationRecord",
]

TerminationReason = Literal[
    "success",
    "approval_denied",
    "policyViolation",
    "retries_exhausted",
    "timeout",
    "insufficient_evidence",
    "conflicting_agents",
    "user_cancelled",
    "budget_exhausted",
    "blocked",
    "catastrophic_error",
    "context_budget_exceeded",
]
TERMINATION_REASONS: tuple[str, ...] = get_args(TerminationReason)

SuggestedAction = Literal["retry", "escalate_model", "broaden_scope", "user_input", "abandon"]
SUGGESTED_ACTIONS: tuple[str, ...] = get_args(SuggestedAction)

Factor = Annotated[str, StringConstraints(max_length=1000)]


class TerminationRecord(Record):
    """``termination:{run_id}``: written once by Mother, never modified."""

    run_id: Id
    reason: TerminationReason
    phase_at_termination: Annotated[str, StringConstraints(max_length=128)]
    timestamp: Timestamp
    details: ShortText
    contributing_factors: list[Factor] = Field(default_factory=list, max_length=50)
    can_retry: bool
    suggested_action: SuggestedAction
    logged_by: Id = "mother"
    final_artifacts: list[Id] = Field(default_factory=list, max_length=10_000)
    timestamp_ms: int | None = Field(
        None,
        ge=0,
        description="timestamp as epoch milliseconds, for numeric range queries (idx:termination)",
    )

    @model_serializer(mode="wrap")
    def _omit_missing_ms(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data = handler(self)
        if data.get("timestamp_ms") is None:
            data.pop("timestamp_ms", None)
        return data
