"""What a worker reports for a phase (``PhaseResult``) and what a run returns (``ResultEnvelope``)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, StringConstraints

from schemas._base import Id, Record, ShortText, Timestamp
from schemas.conflict import Finding, Verdict
from schemas.context import ContextManifest
from schemas.gate import ApprovalRequest
from schemas.termination import TerminationRecord

__all__ = ["MAX_OUTPUT_CHARS", "PhaseResult", "ResultEnvelope", "Resumed", "Usage"]

MAX_OUTPUT_CHARS = 1_000_000


class Usage(Record):
    """What one phase attempt consumed."""

    input_tokens: int = Field(0, ge=0)
    output_tokens: int = Field(0, ge=0)
    model_calls: int = Field(0, ge=0)
    tool_calls: int = Field(0, ge=0)
    duration_ms: int = Field(0, ge=0)
    spend_micro_usd: int = Field(0, ge=0, description="what its model calls cost (USD millionths)")
    model_ms: int = Field(0, ge=0, description="time spent waiting on the model")
    tool_ms: int = Field(0, ge=0, description="time spent in tool calls")


class Resumed(Record):
    """How an attempt resumed its phase from the journal: steps 1..``replayed`` handed back as recorded
    (no model call, no charge; tools not run again), the rest of its ``steps`` made live, and what the
    replay saved."""

    replayed: int = Field(0, ge=0, description="steps 1..replayed came from the journal")
    steps: int = Field(0, ge=0, description="its steps in all (replayed and live)")
    model_calls_saved: int = Field(0, ge=0)
    tool_calls_saved: int = Field(0, ge=0)
    tokens_saved: int = Field(0, ge=0)
    spend_saved_micro_usd: int = Field(0, ge=0)
    diverged: ShortText | None = Field(
        None, description="why the replay stopped before the journal's end (resume_diverged)"
    )

    def label(self) -> str:
        """What the attempt's steps were, as a person reads it: ``replayed 1-6, live 7-9``."""
        parts = []
        if self.replayed:
            parts.append(f"replayed {_span(1, self.replayed)}")
        if self.steps > self.replayed:
            parts.append(f"live {_span(self.replayed + 1, self.steps)}")
        return ", ".join(parts) or "-"


def _span(first: int, last: int) -> str:
    return str(first) if first == last else f"{first}-{last}"


class PhaseResult(Record):
    """Appended by a worker to ``mother:events`` when a phase attempt ends."""

    run_id: Id
    phase: Id
    phase_index: int = Field(ge=0)
    attempt: int = Field(ge=0)
    status: Literal["completed", "failed"]
    output: Annotated[str, StringConstraints(max_length=MAX_OUTPUT_CHARS)] = ""
    confidence: float = Field(0.0, ge=0.0, le=1.0)
    evidence_count: int = Field(0, ge=0)
    artifacts: list[Id] = Field(default_factory=list)
    usage: Usage = Field(default_factory=Usage)
    error: ShortText | None = None
    error_code: str | None = Field(
        None, max_length=64, description="e.g. budget_exhausted: the run ends, no retry"
    )
    worker: str | None = None
    resumed: Resumed | None = Field(
        None, description="the steps it replayed from its phase's journal (None: it replayed none)"
    )
    notices: list[ShortText] = Field(
        default_factory=list, description="limits hit and other things the user is told"
    )
    started_at: Timestamp | None = Field(
        None, description="when a worker took the attempt's job (its queue wait ends there)"
    )
    queued_ms: int | None = Field(
        None,
        ge=0,
        description="how long its job waited in the queue for a worker (dispatch to start)",
    )
    finished_at: Timestamp
    manifest: ContextManifest | None = Field(None, description="what went into the model calls")
    verdict: Verdict | None = Field(
        None, description="a reviewing role's decision on the work it reviews"
    )
    findings: list[Finding] = Field(
        default_factory=list, description="contradicting sources, ambiguous retrieval"
    )
    handled_by: Id | None = Field(
        None, description="the registry tool that did the phase (a tool_only plan: no model call)"
    )
    approval_request: ApprovalRequest | None = Field(
        None, description="the tool call the phase stopped before (error_code approval_required)"
    )


class ResultEnvelope(Record):
    """The final answer of a run; ``termination`` is present only on the final envelope."""

    run_id: Id
    user_id: Id
    status: Literal["running", "final"] = "final"
    output: Annotated[str, StringConstraints(max_length=MAX_OUTPUT_CHARS)] = ""
    phases: list[PhaseResult] = Field(default_factory=list)
    artifacts: list[Id] = Field(default_factory=list)
    created_at: Timestamp
    termination: TerminationRecord | None = None
