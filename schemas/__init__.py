"""Mother-Harness records: pydantic models for every record of the spec. No I/O."""

from schemas._base import (
    Id,
    Record,
    Timestamp,
    describe_validation_error,
    iso_from_ms,
    ms_from_iso,
    within_depth,
)
from schemas.activity import ACTIVITY_TYPES, ActivityEvent
from schemas.conflict import (
    CONFLICT_STRATEGIES,
    CONFLICT_TYPES,
    ConflictResolution,
    ConflictStrategy,
    ConflictType,
    Detour,
    Verdict,
)
from schemas.context import (
    SECTION_ORDER,
    ComposedContext,
    ComposedSection,
    ContextInput,
    ContextManifest,
    ContextSummary,
    ManifestSection,
)
from schemas.export import MODELS, export_json_schemas
from schemas.gate import ApprovalRequest, Gate, GateDecision
from schemas.results import MAX_OUTPUT_CHARS, PhaseResult, ResultEnvelope, Usage
from schemas.run import (
    ACTIVE_STATUSES,
    BUDGET_PROFILES,
    MAX_SPEC_BYTES,
    HistoryEntry,
    LimitOverrides,
    PhaseSpec,
    RunSpec,
    RunState,
    RunStatus,
)
from schemas.script import ScriptedReply, ScriptedToolCall, ScriptedUsage
from schemas.termination import (
    SUGGESTED_ACTIONS,
    TERMINATION_REASONS,
    SuggestedAction,
    TerminationReason,
    TerminationRecord,
)

__all__ = [
    "ACTIVE_STATUSES",
    "ACTIVITY_TYPES",
    "BUDGET_PROFILES",
    "CONFLICT_STRATEGIES",
    "CONFLICT_TYPES",
    "MAX_OUTPUT_CHARS",
    "MAX_SPEC_BYTES",
    "MODELS",
    "SECTION_ORDER",
    "SUGGESTED_ACTIONS",
    "TERMINATION_REASONS",
    "ActivityEvent",
    "ApprovalRequest",
    "ComposedContext",
    "ComposedSection",
    "ConflictResolution",
    "ConflictStrategy",
    "ConflictType",
    "ContextInput",
    "ContextManifest",
    "ContextSummary",
    "Detour",
    "Gate",
    "GateDecision",
    "HistoryEntry",
    "Id",
    "LimitOverrides",
    "ManifestSection",
    "PhaseResult",
    "PhaseSpec",
    "Record",
    "ResultEnvelope",
    "RunSpec",
    "RunState",
    "RunStatus",
    "ScriptedReply",
    "ScriptedToolCall",
    "ScriptedUsage",
    "SuggestedAction",
    "TerminationReason",
    "TerminationRecord",
    "Timestamp",
    "Usage",
    "Verdict",
    "describe_validation_error",
    "export_json_schemas",
    "iso_from_ms",
    "ms_from_iso",
    "within_depth",
]
