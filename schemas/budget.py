"""The budget documents: a run's counters (the spec's BudgetCounter), what its guard enforces, a user's
day, the global gauges, and the spec's BudgetExhausted record. The server functions write them; these
models say what they hold (``mother.records.budgets`` reads and makes them)."""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field, JsonValue

from schemas._base import Id, Record, Timestamp

__all__ = [
    "BudgetCounter",
    "BudgetExhaustedRecord",
    "EmergencyStop",
    "GlobalGauges",
    "LimitCrossing",
    "LimitOverride",
    "PublishedLimits",
    "RunLimits",
    "UserDailyBudget",
]


class LimitCrossing(Record):
    """A hard limit crossed: its code, the figures, when."""

    code: str
    current: int | float
    max: int | float
    at: Timestamp


class BudgetExhaustedRecord(Record):
    """The spec's BudgetExhausted, stored at ``budget:run:{id}.exhausted`` when a run ends budget_exhausted."""

    run_id: Id
    resource: str = Field(
        description="cloud_calls, tokens, duration, tools, retrieval, parallel, queue; "
        "model_calls, spend, spawns where the spec names none"
    )
    limit: int | float
    consumed: int | float
    timestamp: Timestamp
    termination_reason: Literal["budget_exhausted"] = "budget_exhausted"
    termination_details: str


class BudgetCounter(Record):
    """``budget:run:{run_id}``: what a run consumed (the guard charges it; workers may write it)."""

    # the guard's own bookkeeping (reservations by id, tombstones) is free-form
    model_config = ConfigDict(extra="forbid")

    run_id: Id
    user_id: Id
    profile: str
    started_at: Timestamp
    last_updated: Timestamp
    duration_sec: int = 0
    tool_calls: int = 0
    total_tokens: int = 0
    cloud_calls: int = 0
    model_calls: int = 0
    spend_micro_usd: int = 0
    retrieval_queries: int = 0
    parallel_agents: int = 0
    spawns: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    error_burst_count: int = 0
    reserved: dict[str, int] = Field(
        default_factory=dict, description="what reservations hold, per dimension"
    )
    reservations: dict[str, dict[str, JsonValue]] = Field(default_factory=dict)
    warnings_triggered: list[str] = Field(default_factory=list)
    limits_exceeded: list[str] = Field(default_factory=list)
    limit_crossings: list[LimitCrossing] = Field(default_factory=list)
    exhausted: BudgetExhaustedRecord | None = None
    stop_refused: str | None = Field(
        None, description="the emergency stop whose refusal was logged"
    )
    last_asks: dict[str, str] = Field(
        default_factory=dict,
        description="each phase attempt's last charge ask applied (its stream entry): an ask applied "
        "again by another Mother charges nothing twice",
    )


class LimitOverride(Record):
    """A time-boxed, audited change of one limit."""

    dimension: str
    delta: int
    actor: str
    reason: str
    created_at: Timestamp
    expires_at: Timestamp
    expires_at_ms: int


class EmergencyStop(Record):
    """Who stopped a run, why, when, and its counters then."""

    actor: str
    reason: str
    at: Timestamp
    counters: dict[str, int | None] = Field(default_factory=dict)


class RunLimits(Record):
    """``limits:run:{run_id}``: what the run's guard enforces. Mother and operators write it, never workers."""

    run_id: Id
    user_id: Id
    profile: str
    warning_ratio: float
    limits: dict[str, int]
    limit_sources: dict[str, str] = Field(
        default_factory=dict,
        description="which layer set each limit: budget.profiles.<p>, budget.per_run, harness.limits, "
        "role <r>, limit_overrides, parent run <id>",
    )
    overrides: list[LimitOverride] = Field(default_factory=list)
    status: Literal["active", "budget_stopped", "closed"] = "active"
    stop: EmergencyStop | None = None
    fence: str | None = Field(None, description="the last attempt given up on, 'index:attempt'")
    started_at: Timestamp
    started_ms: int
    last_updated: Timestamp
    user_limits: dict[str, int]
    user_warning_ratio: float
    user_ttl_s: int


class UserDailyBudget(Record):
    """``budget:user:{user_id}:daily:{YYYY-MM-DD}``: a user's day (expires some days after it)."""

    user_id: Id
    day: str
    runs: int = 0
    cloud_calls: int = 0
    total_tokens: int = 0
    reserved: dict[str, int] = Field(default_factory=dict)
    limits: dict[str, int] = Field(
        default_factory=dict, description="as set when the day's document was made"
    )
    warning_ratio: float = 0.8
    last_updated: Timestamp
    warnings_triggered: list[str] = Field(default_factory=list)
    limits_exceeded: list[str] = Field(default_factory=list)
    limit_crossings: list[LimitCrossing] = Field(default_factory=list)


class GlobalGauges(Record):
    """``budget:global``: the gauges the circuit breaker and admission read."""

    concurrent_runs: int = 0
    queue_depth: int = 0
    redis_memory_mb: int = 0
    docling_jobs: int = 0


class PublishedLimits(Record):
    """``mother:config``: the leading Mother's global limits, which submitters' server calls check against."""

    max_queue_depth: int
    max_concurrent_runs: int
    max_redis_memory_mb: int
    max_docling_jobs: int
    rate_limit_messages: int | None = Field(
        None, description="budget.rate_limit.messages: the per-user message rate limit"
    )
    rate_limit_window_ms: int | None = Field(
        None, description="budget.rate_limit.window_seconds, in ms"
    )
    fault_models: list[str] = Field(
        default_factory=list,
        description="the scripted models that may inject faults here (a client refuses a spec that "
        "injects one on another before submitting)",
    )
    heartbeat_timeout_ms: int | None = Field(
        None,
        description="service.heartbeat_timeout_seconds, in ms: how long a host's line lives after a "
        "beat (what says when it beat)",
    )
    published_by: str
    published_at: Timestamp
