"""What a user submits (``RunSpec``) and what Mother keeps about a run (``RunState``)."""

from __future__ import annotations

import math
from decimal import Decimal
from typing import Annotated, Any, Literal

from pydantic import (
    Field,
    JsonValue,
    SerializerFunctionWrapHandler,
    StrictInt,
    StringConstraints,
    field_validator,
    model_serializer,
    model_validator,
)

from schemas._base import Id, ModelName, Record, Seconds, Shallow, ShortText, Timestamp
from schemas.conflict import Detour, RoleKind
from schemas.context import ContextInput
from schemas.gate import Gate
from schemas.results import PhaseResult
from schemas.script import ScriptedReply

__all__ = [
    "ACTIVE_STATUSES",
    "BUDGET_PROFILES",
    "MAX_PHASES",
    "MAX_SPEC_BYTES",
    "MAX_TASK_CHARS",
    "SPAWNED_BY",
    "HistoryEntry",
    "LimitOverrides",
    "PhaseSpec",
    "RunSpec",
    "RunState",
    "RunStatus",
    "Trace",
]

# the metadata key a spawn_run child carries: its parent holds a parallel_agents slot for it
SPAWNED_BY = "spawned_by"
# a submitted spec, serialised, is at most 1 MiB
MAX_SPEC_BYTES = 1024 * 1024
MAX_TASK_CHARS = 200_000
MAX_PHASES = 32
BUDGET_PROFILES = ("conservative", "balanced", "extended")

RunStatus = Literal["queued", "running", "budget_stopped", "waiting", "terminated"]
# a run whose current phase attempt may work (stopped: it waits)
ACTIVE_STATUSES = ("running", "budget_stopped")
MetadataKey = Annotated[str, StringConstraints(min_length=1, max_length=128)]
# a scripts key: a role, or role@model for the replies of that role on that model only
ScriptKey = Annotated[
    str, StringConstraints(pattern=r"^[A-Za-z0-9_.:-]{1,128}(@[A-Za-z0-9_.:/@-]{1,128})?$")
]


class LimitOverrides(Record):
    """Per-run limits a submitter (or a spawning parent) asks for; the spec's limit types.

    ``spend`` is USD as a decimal (never a float inside the system); every value
    must be finite and non-negative; counts are integers, never booleans or numeric strings.
    """

    turns: StrictInt | None = Field(None, ge=0, le=100_000)
    tokens: StrictInt | None = Field(None, ge=0, le=10**12)
    spend: Decimal | None = Field(None, ge=0, le=1_000_000, decimal_places=6)
    duration_seconds: Seconds | None = Field(None, ge=0, le=30 * 86400)
    spawns: StrictInt | None = Field(None, ge=0, le=10_000)
    depth: StrictInt | None = Field(None, ge=0, le=100)

    @field_validator("spend", mode="before")
    @classmethod
    def _spend_as_decimal(cls, value: object) -> object:
        if isinstance(value, float):
            if not math.isfinite(value):
                raise ValueError("must be a finite number of USD")
            return Decimal(repr(value))
        return value


class PhaseSpec(Record):
    """One phase of a run's pipeline: which role does it, on which model."""

    name: Id
    role: Id
    model: ModelName
    max_retries: StrictInt = Field(2, ge=0, le=10)
    timeout_seconds: Seconds | None = Field(None, gt=0, le=86400)
    max_tool_calls: StrictInt | None = Field(
        None, ge=1, le=10_000, description="tool calls per turn (per-turn tool limits)"
    )
    max_consecutive_tools: StrictInt | None = Field(
        None, ge=1, le=10_000, description="tool calls without text"
    )
    exit_criteria: Annotated[str, StringConstraints(max_length=20_000)] | None = Field(
        None, description="what the phase must deliver (part of the current_phase section)"
    )
    require_approval: bool = Field(
        False, description="a person approves the phase before it starts (mother approve)"
    )
    kind: RoleKind | None = Field(
        None,
        description="work, review or test (states a verdict on another phase's output); default: "
        "the role's declaration, else review when the phase names `reviews`, else work",
    )
    reviews: Id | None = Field(
        None,
        description="a reviewing phase: the earlier phase whose output it reviews "
        "(default: the nearest earlier phase that produces work)",
    )
    group: Id | None = Field(
        None,
        description="phases with the same group are competing proposals for one step: "
        "outputs that differ are a competing_proposals conflict",
    )
    task: Annotated[str, StringConstraints(min_length=1, max_length=2000)] | None = Field(
        None,
        description="what this phase does, routed to the tool registry before the model (default: "
        "the run's task when the pipeline has one phase)",
    )
    inputs: Annotated[dict[str, JsonValue], Shallow] = Field(
        default_factory=dict,
        description="inputs for a registry tool that handles the phase (beside what its pattern "
        "extracts from the task)",
    )
    tools: Literal["auto", "off"] = Field(
        "auto", description="off: never route this phase to a registry tool"
    )


class RunSpec(Record):
    """A run as submitted: validated by the client and again by Mother."""

    run_id: Id | None = None
    user_id: Id
    task: Annotated[str, StringConstraints(min_length=1, max_length=MAX_TASK_CHARS)]
    pipeline: list[PhaseSpec] = Field(min_length=1, max_length=MAX_PHASES)
    budget_profile: Literal["conservative", "balanced", "extended"] = "balanced"
    limit_overrides: LimitOverrides = Field(default_factory=LimitOverrides)
    parent_run_id: Id | None = None
    max_tool_calls: StrictInt | None = Field(
        None, ge=1, le=10_000, description="per turn, for every phase of the run"
    )
    max_consecutive_tools: StrictInt | None = Field(None, ge=1, le=10_000)
    libraries: list[Id] = Field(
        default_factory=list,
        max_length=64,
        description="libraries each phase retrieves from (its retrieval_hits section), under their policies",
    )
    justification: Annotated[str, StringConstraints(max_length=2000)] | None = Field(
        None,
        description="why the run reads its libraries (a policy with require_justification needs it)",
    )
    metadata: Annotated[dict[MetadataKey, JsonValue], Shallow] = Field(
        default_factory=dict, max_length=64
    )
    context: ContextInput = Field(
        default_factory=ContextInput,
        description="material beside the task (context budget ownership)",
    )
    scripts: dict[ScriptKey, list[ScriptedReply]] = Field(
        default_factory=dict,
        max_length=64,
        description="scripted model replies per role, or per role@model (an escalated re-run's)",
    )
    approvers: list[Id] = Field(
        default_factory=list,
        max_length=100,
        description="who may decide this run's gates (default: gates.approvers)",
    )
    approval_tools: list[Id] = Field(
        default_factory=list,
        max_length=100,
        description="tools a phase may call only once a person approved the call",
    )
    gate_timeout_seconds: Seconds | None = Field(
        None,
        gt=0,
        le=30 * 86400,
        description="how long a gate waits (default gates.timeout_seconds)",
    )

    @model_validator(mode="after")
    def _distinct_phase_names(self) -> RunSpec:
        names = [p.name for p in self.pipeline]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"phase names must be distinct; repeated: {', '.join(dupes)}")
        if self.parent_run_id is not None and self.parent_run_id == self.run_id:
            raise ValueError("parent_run_id must differ from run_id")
        for i, phase in enumerate(self.pipeline):
            if phase.reviews is not None and phase.reviews not in names[:i]:
                raise ValueError(
                    f"phase {phase.name} reviews {phase.reviews!r}, which is not an earlier phase"
                )
        return self


class HistoryEntry(Record):
    """One step in a run's life, appended by Mother."""

    at: Timestamp
    event: Annotated[str, StringConstraints(pattern=r"^[a-z_]{1,64}$")]
    phase: str | None = None
    attempt: int | None = Field(None, ge=0)
    detail: ShortText = ""


class Trace(Record):
    """A run's OpenTelemetry trace: the trace id and the id of its root span (hex, W3C trace context)."""

    trace_id: Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{32}$")]
    span_id: Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{16}$")]


class RunState(Record):
    """``run:{run_id}``: the spec, where the run is, and how it got there."""

    run_id: Id
    user_id: Id
    spec: RunSpec
    status: RunStatus = "queued"
    phase_index: int = Field(0, ge=0)
    phase: str | None = None
    attempt: int = Field(0, ge=0)
    history: list[HistoryEntry] = Field(default_factory=list)
    created_at: Timestamp
    updated_at: Timestamp
    terminated_at: Timestamp | None = None
    reason: str | None = None
    entry_id: str | None = Field(
        None,
        description="the submission entry the run came from ('{principal}:{id}' for a principal's "
        "stream, 'spawn:{id}' for a worker's spawn_run, the id alone for mother:submissions)",
    )
    submitted_by: str | None = Field(
        None,
        description="the principal whose stream the run arrived by (proven by its ACL user); None: "
        "Mother's own submissions stream (service credentials) or a parent run's spawn_run",
    )
    results: list[PhaseResult] = Field(
        default_factory=list, description="accepted result of each finished phase"
    )
    artifacts: list[Id] = Field(default_factory=list)
    superseded_artifacts: list[Id] = Field(
        default_factory=list,
        description="artifacts of outputs a conflict set aside (a rejecting review, the work an "
        "escalation replaced): listed and retained with the run, not among its final artifacts",
    )
    limits: dict[str, JsonValue] = Field(
        default_factory=dict, description="resolved run limits (four-layer limit resolution)"
    )
    capabilities: list[str] = Field(
        default_factory=list, description="the run's capability token (patterns)"
    )
    host: str | None = Field(
        None,
        description="the enrolled worker host Mother queued the current attempt on (None: it waits "
        "for a live host); only that host's asks about the attempt are applied, and only its result "
        "moves the run",
    )
    admission: Literal["admitted", "waiting"] | None = Field(
        None,
        description="intake's decision: admitted (a slot was free), or waiting in the admission queue",
    )
    detour: Detour | None = Field(
        None, description="the current attempt is a conflict strategy's (an arbiter, ...)"
    )
    gate: Gate | None = Field(None, description="what the run waits for (status waiting)")
    gates: list[Gate] = Field(default_factory=list, description="decided gates, with decisions")
    conflicts: list[Id] = Field(default_factory=list, description="its conflict:{id} records")
    notes: list[Annotated[str, StringConstraints(max_length=110_000)]] = Field(
        default_factory=list,
        description="people's answers and conflict decisions, in every later phase's context",
    )
    grants: list[str] = Field(
        default_factory=list, description="approved tool calls (their digests)"
    )
    retry_base: int = Field(
        0, ge=0, description="the attempt the current phase's retries count from"
    )
    pending_result: PhaseResult | None = Field(
        None, description="the result a gate holds until a person decides"
    )
    created_ms: int | None = Field(
        None,
        ge=0,
        description="created_at as epoch milliseconds (idx:runs sorts and filters on it)",
    )
    terminated_ms: int | None = Field(
        None, ge=0, description="terminated_at as epoch milliseconds (idx:runs)"
    )
    trace: Trace | None = Field(
        None,
        description="the run's OpenTelemetry trace (telemetry.otlp_endpoint set): its id and its root "
        "span's, under which every span of the run is made",
    )
    duration_ms: int | None = Field(
        None, ge=0, description="created to terminated, set at the end (idx:runs sorts on it)"
    )
    spend_micro_usd: int | None = Field(
        None,
        ge=0,
        description="what the run cost as its budget counters said at its end (idx:runs)",
    )
    total_tokens: int | None = Field(
        None, ge=0, description="the tokens it used, as its budget counters said at its end"
    )

    @model_serializer(mode="wrap")
    def _omit_missing_ms(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # a null is no number to a search index: a record without them leaves them out
        data = handler(self)
        for name in (
            "created_ms",
            "terminated_ms",
            "duration_ms",
            "spend_micro_usd",
            "total_tokens",
        ):
            if data.get(name) is None:
                data.pop(name, None)
        return data
