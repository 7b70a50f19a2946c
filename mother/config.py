"""Mother-Harness configuration: one model, every default in one place.

Sources, highest precedence first:

1. keyword arguments to :func:`load_settings` (the CLI's flags),
2. ``MOTHER_*`` environment variables (nested fields with ``__``, e.g.
   ``MOTHER_SERVER__PORT=6390``),
3. a YAML file: ``MOTHER_CONFIG`` names it; otherwise ``./mother.yaml`` if present,
4. the defaults below.

Unknown keys are errors in every source, including a ``MOTHER_`` variable that
names no setting, so a typo never silently falls back to a default.
"""

from __future__ import annotations

import os
import re
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
    YamlConfigSettingsSource,
)

from mother.errors import ConfigError
from mother.yamlfile import YamlProblem, read_yaml
from schemas import describe_validation_error
from schemas.conflict import ConflictStrategy, ConflictType, RoleKind

__all__ = [
    "BudgetSettings",
    "ContextSettings",
    "ModelConfig",
    "RunDefaults",
    "ServerSettings",
    "ServiceSettings",
    "Settings",
    "WorkerSettings",
    "config_path",
    "load_settings",
]

ENV_PREFIX = "MOTHER_"
CONFIG_ENV = "MOTHER_CONFIG"
DEFAULT_CONFIG_FILE = "mother.yaml"


def default_data_dir() -> Path:
    """$XDG_DATA_HOME/mother, else ~/.local/share/mother."""
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base).expanduser() / "mother"


class _Section(BaseModel):
    # a NaN or infinite setting (a ratio, a timeout, a factor) would pass every bound check unnoticed
    model_config = ConfigDict(
        extra="forbid",
        validate_assignment=True,
        populate_by_name=True,
        allow_inf_nan=False,
        defer_build=True,
    )


class ServerSettings(_Section):
    """The embedded development server started by ``mother server`` / ``mother up``."""

    port: int = Field(6379, ge=1, le=65535, description="TCP port on 127.0.0.1")
    unix_socket: Path | None = Field(None, description="listen on this socket instead of TCP")
    dir: Path = Field(
        Path(".mother/redis"), description="data directory (AOF, logs); default: {data_dir}/redis"
    )
    appendfsync: Literal["always", "everysec", "no"] = "everysec"
    modules: bool = Field(True, description="load RedisJSON and RediSearch")
    start_timeout_seconds: float = Field(15.0, gt=0, le=300)


class ServiceSettings(_Section):
    """The Mother service: leadership, stream consumption, watchdog."""

    lease_seconds: float = Field(
        5.0, gt=0.5, le=300, description="leader lease; a standby takes over within it"
    )
    block_ms: int = Field(200, ge=1, le=5000, description="XREADGROUP block time")
    batch: int = Field(100, ge=1, le=10_000, description="entries read per stream per loop")
    watchdog_interval_seconds: float = Field(1.0, gt=0, le=60)
    heartbeat_timeout_seconds: float = Field(
        10.0, gt=0, le=600, description="a started phase silent this long is lost"
    )
    claim_idle_seconds: float = Field(
        30.0, gt=0, le=86400, description="reclaim stream entries pending this long"
    )
    wait_replicas: int = Field(
        0,
        ge=0,
        le=16,
        description="replicas that must have a submission and a termination record before it is "
        "acknowledged (WAIT; 0: acknowledged when the primary has it, which a failover may lose)",
    )
    wait_fsync: bool = Field(
        False,
        description="with wait_replicas: the primary and those replicas must also have it on disk "
        "(WAITAOF, appendonly on every one)",
    )
    wait_replicas_ms: int = Field(
        1000, ge=1, le=60_000, description="how long an acknowledgement waits for them at most"
    )
    finish_end_after_seconds: float = Field(
        30.0,
        gt=0,
        le=3600,
        description="a run's end whose record is written but not applied this long (its Mother "
        "died in between) is applied by the watchdog",
    )
    max_deliveries: int = Field(
        5, ge=1, le=100, description="after this many failed handlings an entry is dead-lettered"
    )
    activity_maxlen: int = Field(
        100_000, ge=100, description="approximate cap of the activity stream"
    )
    stream_retention_seconds: float = Field(
        3600.0,
        ge=0,
        le=30 * 86400,
        description="acknowledged entries of mother:submissions, mother:events and "
        "mother:commands are kept this long for inspection, then trimmed (never an entry still to be handled)",
    )
    rejection_retention_seconds: float = Field(
        30 * 86400.0,
        ge=0,
        le=3650 * 86400,
        description="a refused submission's record (rejection:{entry}) is kept this long",
    )
    max_rejections_per_party: int = Field(
        1000,
        ge=10,
        le=1_000_000,
        description="a principal's refused submissions kept as records within the retention; past "
        "it (a flood of junk) they are counted, not stored, so a party's junk costs only itself",
    )
    dead_letter_maxlen: int = Field(
        10_000, ge=100, description="approximate cap of mother:dead_letter"
    )
    consumer_group: str = "mother"
    make_acl_users: bool = Field(
        True,
        description="the leading Mother makes every enrolled principal's and host's ACL user the server "
        "lacks (a restart, a failover); false on a managed Redis that refuses ACL SETUSER: it only "
        "says which are missing (their lines: `mother acl export`)",
    )
    ask_batch: int = Field(
        16,
        ge=1,
        le=10_000,
        description="asks read from each host's stream per pass: a host that floods its stream waits "
        "behind its own asks, not others'",
    )
    principals_refresh_seconds: float = Field(
        2.0,
        gt=0,
        le=3600,
        description="how often Mother reads the principals again (a new principal's streams are "
        "read from then on)",
    )


# the RQ queues Mother-Harness enqueues on
# the queue of phase jobs
AGENTS_QUEUE = "agents"
# the queue of phases a registry tool handles (tool_only plans)
TOOLS_QUEUE = "tools"
QUEUES = (AGENTS_QUEUE, TOOLS_QUEUE, "maintenance")


def check_queues(names: list[str]) -> list[str]:
    """Queue names a worker listens on: at least one, each one Mother-Harness enqueues on (a typo
    would leave the worker idle while the runs it should serve time out)."""
    if not names:
        raise ValueError(f"name at least one queue of {', '.join(QUEUES)}")
    unknown = [n for n in names if n not in QUEUES]
    if unknown:
        raise ValueError(
            f"unknown queue {unknown[0]!r}; Mother-Harness enqueues on {', '.join(QUEUES)}"
        )
    return names


class WorkerSettings(_Section):
    """RQ workers and what they run."""

    queues: Annotated[list[str], AfterValidator(check_queues)] = Field(
        default_factory=lambda: list(QUEUES)
    )
    heartbeat_interval_seconds: float = Field(2.0, gt=0, le=60)
    ask_timeout_seconds: float = Field(
        60.0,
        gt=0,
        le=3600,
        description="how long a worker waits for Mother's reply to an ask (a charge, a result, ...): "
        "past it the phase fails, and Mother retries it",
    )
    concurrency: int = Field(
        1,
        ge=1,
        le=4096,
        description="RQ workers `mother worker` runs: 1, a single worker; more, one parent that warms "
        "up once and forks them (workers/pool.py)",
    )
    phase_memory_mb: float = Field(
        24.0,
        gt=0,
        le=65_536,
        description="memory (PSS) one in-flight phase costs a pooled host, to refuse a concurrency the "
        "host cannot hold (measured: docs/benchmarks.md)",
    )
    base_memory_mb: float = Field(
        150.0,
        ge=0,
        le=65_536,
        description="memory (PSS) a pool's parent and what its workers share cost, whatever the concurrency",
    )
    workspace_root: Path = Field(
        Path(".mother/workspaces"),
        description="per-run tool workspaces; default: {data_dir}/workspaces",
    )
    workspace_store: Literal["redis", "shared", "s3"] = Field(
        "redis",
        description="where a run's workspace travels between hosts: redis (its changed files, "
        "content-addressed and compressed, restored by the next phase's host); s3 (the same, the contents "
        "in an S3-compatible object store: workspace_s3_*; the manifest stays in Redis); shared "
        "(workspace_root is a filesystem every worker host mounts: nothing is copied)",
    )
    workspace_s3_endpoint: str | None = Field(
        None,
        description="with workspace_store s3: the object store's URL (http(s)://host:port of MinIO, Ceph's "
        "gateway, ...); none: AWS S3 in workspace_s3_region. Credentials: AWS_ACCESS_KEY_ID and "
        "AWS_SECRET_ACCESS_KEY (or a profile, an instance role), never this file",
    )
    workspace_s3_bucket: str = Field(
        "mother-workspaces",
        min_length=3,
        max_length=63,
        pattern=r"^[a-z0-9][a-z0-9.-]+[a-z0-9]$",
        description="with workspace_store s3: the bucket (it must exist)",
    )
    workspace_s3_prefix: str = Field(
        "workspaces/",
        max_length=200,
        pattern=r"^[A-Za-z0-9_./-]*$",
        description="with workspace_store s3: what every object's key starts with ({prefix}{run}/{sha256})",
    )
    workspace_s3_region: str = Field(
        "us-east-1", max_length=64, description="with workspace_store s3: the region it signs for"
    )
    workspace_max_mb: float = Field(
        256.0,
        gt=0,
        le=65_536,
        description="a run's workspace may hold this much (uncompressed) when it travels through Redis; "
        "a phase that leaves more fails (workspace_too_large)",
    )

    @field_validator("workspace_s3_endpoint")
    @classmethod
    def _endpoint_is_a_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError(
                f"workspace_s3_endpoint {value[:80]!r} is not an http(s):// URL (e.g. "
                "http://objects.internal:9000)"
            )
        return value

    max_model_calls_per_phase: int = Field(50, ge=1, le=10_000)
    job_timeout_margin_seconds: int = Field(30, ge=0, le=3600)
    max_tool_output_chars: int = Field(100_000, ge=100, le=1_000_000)
    allowed_jobs: list[Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_.]*$")]] = (
        Field(
            default_factory=list,
            description="job functions ('package.module.function') workers run besides the project's "
            "own; any other job is refused unrun (anyone who can enqueue an RQ job "
            "could otherwise run any function on every worker host)",
        )
    )


class ProfileLimits(_Section):
    """A budget profile (conservative / balanced / extended): the dimensions it sets and its soft-warning ratio."""

    wall_clock_seconds: int = Field(gt=0)
    tool_calls: int = Field(gt=0)
    token_estimate: int = Field(gt=0)
    warning_ratio: float = Field(gt=0, le=1)


class PerRunBudget(_Section):
    """The spec's DefaultBudget.per_run, plus what a run also needs (turns, spend, spawns)."""

    max_cloud_calls: int = Field(50, ge=0)
    max_total_tokens: int = Field(
        500_000, ge=0, description="replaced by the profile's token_estimate"
    )
    max_duration_sec: int = Field(
        1_800, ge=0, description="replaced by the profile's wall_clock_seconds"
    )
    max_tool_calls: int = Field(100, ge=0, description="replaced by the profile's tool_calls")
    max_retrieval_queries: int = Field(20, ge=0)
    max_parallel_agents: int = Field(5, ge=0)
    max_model_calls: int = Field(200, ge=0, description="turns: model calls in the whole run")
    max_spend_usd: Decimal = Field(Decimal("5"), ge=0, le=1_000_000)
    max_spawns: int = Field(10, ge=0)


class PerUserDailyBudget(_Section):
    max_runs: int = Field(50, ge=0)
    max_cloud_calls: int = Field(200, ge=0)
    max_total_tokens: int = Field(2_000_000, ge=0)
    warning_ratio: float = Field(0.8, gt=0, le=1)
    keep_days: int = Field(
        3, ge=1, le=366, description="a daily document expires this long after its day"
    )


class GlobalBudget(_Section):
    max_concurrent_runs: int = Field(10, ge=1)
    max_queue_depth: int = Field(100, ge=1)
    max_redis_memory_mb: int = Field(16_000, ge=1)
    max_docling_jobs: int = Field(5, ge=0)
    warning_ratio: float = Field(0.8, gt=0, le=1)


class RateLimit(_Section):
    """The per-user message rate limit: messages per user in a sliding window (server time)."""

    messages: int = Field(100, ge=1)
    window_seconds: int = Field(3600, ge=1)


def _profiles() -> dict[str, ProfileLimits]:
    return {
        "conservative": ProfileLimits(
            wall_clock_seconds=900, tool_calls=80, token_estimate=80_000, warning_ratio=0.75
        ),
        "balanced": ProfileLimits(
            wall_clock_seconds=1800, tool_calls=180, token_estimate=180_000, warning_ratio=0.80
        ),
        "extended": ProfileLimits(
            wall_clock_seconds=3600, tool_calls=360, token_estimate=360_000, warning_ratio=0.85
        ),
    }


class BudgetSettings(_Section):
    """Resource budget guards: per-run, per-user-daily and global limits, budget profiles, the message rate limit."""

    profiles: dict[str, ProfileLimits] = Field(
        default_factory=_profiles,
        description="per profile, the settings "
        "given replace the shipped ones; the rest keep theirs",
    )
    per_run: PerRunBudget = Field(default_factory=PerRunBudget)
    per_user_daily: PerUserDailyBudget = Field(default_factory=PerUserDailyBudget)
    global_: GlobalBudget = Field(default_factory=GlobalBudget, alias="global")
    rate_limit: RateLimit = Field(default_factory=RateLimit)
    max_override_factor: float = Field(
        2.0,
        ge=1,
        le=100,
        description="an override never takes a limit past this x the profile default",
    )

    @field_validator("profiles", mode="before")
    @classmethod
    def _over_shipped_profiles(cls, value: Any) -> Any:
        """A profile given in part (``MOTHER_BUDGET__PROFILES__BALANCED__TOOL_CALLS=3``) keeps its
        other shipped settings, and the profiles not named stay: a RunSpec may choose any of the three."""
        if not isinstance(value, dict):
            return value
        shipped = {name: limits.model_dump() for name, limits in _profiles().items()}
        unknown = sorted(set(value) - set(shipped))
        if unknown:
            raise ValueError(
                f"unknown profile {', '.join(map(repr, unknown))}; the profiles are {', '.join(shipped)}"
            )
        for name, given in value.items():
            shipped[name] = {**shipped[name], **given} if isinstance(given, dict) else given
        return shipped


class LimitValues(_Section):
    """The spec's limit types; unset means "not declared at this layer"."""

    turns: int | None = Field(None, ge=0, le=100_000)
    tokens: int | None = Field(None, ge=0, le=10**12)
    spend: Decimal | None = Field(None, ge=0, le=1_000_000)
    duration_seconds: float | None = Field(None, ge=0, le=30 * 86400)
    spawns: int | None = Field(None, ge=0, le=10_000)
    depth: int | None = Field(None, ge=0, le=100)


def _resilience_defaults() -> LimitValues:
    return LimitValues(
        turns=15, tokens=200_000, spend=Decimal("0.50"), spawns=10, depth=5, duration_seconds=600
    )


class TurnLimits(_Section):
    """A role's declarations: its per-turn tool limits and its run limits."""

    max_tool_calls: int | None = Field(None, ge=1, le=10_000)
    max_consecutive_tools: int | None = Field(None, ge=1, le=10_000)
    limits: LimitValues = Field(
        default_factory=LimitValues, description="the role's (directive's) declared limits"
    )
    hooks: list[dict[str, Any]] = Field(
        default_factory=list, description="the role's (directive's) hooks"
    )
    permissions: list[str] | None = Field(
        None, description="capability patterns (tool.*, model.*, library.*)"
    )
    acknowledge: list[str] = Field(
        default_factory=list, description="risk tiers the role acknowledges"
    )
    kind: RoleKind | None = Field(
        None,
        description="work (produces output), review (decides on another phase's output: a "
        "critic, a reviewer) or test (a test run's verdict); default: conflicts.role_kinds",
    )
    require_approval: bool = Field(
        False, description="a person approves each phase of this role before it starts"
    )
    approval_tools: list[str] = Field(
        default_factory=list, description="tools this role may call only once a person approved"
    )


class HarnessSettings(_Section):
    max_tool_calls: int = Field(
        20, ge=1, le=10_000, description="tool calls per turn (one message's handling)"
    )
    max_consecutive_tools: int = Field(
        10, ge=1, le=10_000, description="tool calls without a text reply"
    )
    context_limit_ratio: float = Field(
        0.9,
        gt=0,
        le=1,
        description=(
            "a phase's conversation this full (its prompt estimate over the model's window less reserved_for_output) "
            "fires context_limit_reached, once per attempt"
        ),
    )
    roles: dict[str, TurnLimits] = Field(default_factory=dict, description="per-role declarations")
    limits: LimitValues = Field(
        default_factory=_resilience_defaults, description="layer 1: resilience defaults"
    )
    default_permissions: list[str] = Field(
        default_factory=lambda: [
            "tool.read_file",
            "tool.list_dir",
            "tool.write_file",
            "tool.spawn_run",
            "tool.git_status",
            "tool.run_tests",
            "tool.resize_image",
            "tool.ocr_extract",
            "tool.render_text",
            "tool.search_library",
            "model.*",
            "library.*",
        ],
        description="capabilities of a role that declares none",
    )
    capability_risk_file: Path | None = Field(
        None, description="capability_risk.yaml (default: the shipped one)"
    )
    roles_dir: Path | None = Field(
        None, description="role (directive) files: {roles_dir}/{role}.yaml"
    )
    tool_manifests_dir: Path | None = Field(
        None, description="tool manifests: {dir}/{tool}.yaml, verified before each call"
    )
    require_signatures: bool = Field(
        False, description="role files must carry a valid Ed25519 signature"
    )
    trusted_keys: list[Path] = Field(
        default_factory=list, description="public keys (signing.pub) that may sign"
    )


class HookSettings(_Section):
    """Where the user (layer 0) and project (layer 3) hook files are."""

    user_file: Path | None = Path("~/.mother/hooks.yaml")
    project_file: Path | None = Path(".mother/hooks.yaml")


class RunDefaults(_Section):
    """Defaults for runs whose spec does not say."""

    phase_timeout_seconds: float = Field(300.0, gt=0, le=86400, description="phase deadline")


class ModelConfig(_Section):
    """One model of the catalogue: how to reach it, its context window, its price, where to escalate.

    ``max_tokens`` is the context window; ``available_for_context`` (derived) is what Mother
    may fill with composed sections after the system prompt and the output are reserved.
    """

    provider: Literal["openai", "scripted"]
    base_url: str | None = Field(
        None, description="OpenAI-compatible endpoint, e.g. http://127.0.0.1:11434/v1"
    )
    api_key_env: str | None = Field(None, description="environment variable holding the API key")
    model: str | None = Field(
        None, description="model name sent to the provider (default: the catalogue name)"
    )
    max_output_tokens: int = Field(
        1024, ge=1, le=1_000_000, description="max_tokens sent with each call"
    )
    cloud: bool = Field(False, description="calls count as cloud_calls")
    input_price_per_1k_usd: Decimal = Field(Decimal(0), ge=0, le=1000)
    output_price_per_1k_usd: Decimal = Field(Decimal(0), ge=0, le=1000)
    request_timeout_seconds: float = Field(120.0, gt=0)
    call_retries: int = Field(
        1,
        ge=0,
        le=10,
        description=(
            "times a call that failed transiently (no connection, a timeout, HTTP 408/409/429/5xx) is sent again; "
            "each attempt is reserved and charged on its own"
        ),
    )
    max_tokens: int = Field(
        32_768, ge=256, le=100_000_000, description="the context window in tokens"
    )
    reserved_for_system: int = Field(1_000, ge=0, description="tokens kept for the system prompt")
    reserved_for_output: int = Field(4_000, ge=0, description="tokens kept for the model's reply")
    escalate_to: str | None = Field(
        None, description="catalogue name of the larger-context model to escalate to"
    )
    tokenizer: Path | None = Field(
        None, description="the model's tokenizer.json (HF tokenizers); else the estimate"
    )
    structured_output: Literal["json_schema", "none"] = Field(
        "none",
        description="json_schema: the server takes response_format with a JSON schema (OpenAI, vLLM, "
        "llama.cpp, Ollama): a phase asks for its verdict, winner, confidence and evidence in it",
    )
    allow_faults: bool = Field(
        False,
        description="a scripted model's replies may inject faults (fail: raise, hang, "
        "kill, kill_worker); for tests and demos only: anyone who may submit could otherwise "
        "kill workers at will",
    )

    @property
    def available_for_context(self) -> int:
        return self.max_tokens - self.reserved_for_system - self.reserved_for_output

    @model_validator(mode="after")
    def _room_left(self) -> ModelConfig:
        if self.available_for_context <= 0:
            raise ValueError(
                f"max_tokens {self.max_tokens} leaves no room after reserved_for_system "
                f"{self.reserved_for_system} + reserved_for_output {self.reserved_for_output}"
            )
        if self.max_output_tokens > self.reserved_for_output:
            raise ValueError(
                f"max_output_tokens {self.max_output_tokens} exceeds reserved_for_output "
                f"{self.reserved_for_output}; raise reserved_for_output or lower max_output_tokens"
            )
        return self


def _default_models() -> dict[str, ModelConfig]:
    """The shipped catalogue: the spec's LocalModelBudget and CloudModelBudget, and two scripted
    models (a small window that escalates to a large one) so the offline demo shows composition."""
    ollama = "http://127.0.0.1:11434/v1"
    return {
        "scripted": ModelConfig(
            provider="scripted",
            max_tokens=8_192,
            reserved_for_system=512,
            reserved_for_output=1_024,
            escalate_to="scripted-large",
        ),
        "scripted-large": ModelConfig(
            provider="scripted",
            max_tokens=131_072,
            reserved_for_system=3_000,
            reserved_for_output=15_000,
        ),
        # the spec's LocalModelBudget
        "ollama/qwen2.5:32b": ModelConfig(
            provider="openai",
            base_url=ollama,
            model="qwen2.5:32b",
            max_tokens=128_000,
            reserved_for_system=3_000,
            reserved_for_output=15_000,
            max_output_tokens=4_096,
            escalate_to="ollama/devstral-2:123b-cloud",
        ),
        # the spec's CloudModelBudget
        "ollama/devstral-2:123b-cloud": ModelConfig(
            provider="openai",
            base_url=ollama,
            model="devstral-2:123b-cloud",
            cloud=True,
            max_tokens=200_000,
            reserved_for_system=5_000,
            reserved_for_output=25_000,
            max_output_tokens=8_192,
        ),
    }


class ContextSettings(_Section):
    """Context budget ownership: how Mother fits sections into a model's window."""

    summary_share: float = Field(
        0.15,
        gt=0,
        le=1,
        description="a summarized section gets at most this share "
        "of available_for_context on the first pass",
    )
    recent_messages: int = Field(
        10, ge=1, le=1000, description="the last N messages make recent_messages"
    )
    summarizer: Literal["extractive", "llm_generated"] = "extractive"
    summarizer_model: str | None = Field(
        None, description="catalogue model for llm_generated summaries"
    )
    calibration_min_samples: int = Field(
        3, ge=1, description="provider reports needed before the estimate calibrates"
    )
    keep_seconds: int = Field(
        7 * 86400, ge=60, description="composed contexts and summaries expire after this"
    )


def _default_policy() -> dict[ConflictType, list[ConflictStrategy]]:
    """The spec's complete conflict resolution policy table."""
    return {
        "critic_vs_coder": ["run_arbiter", "escalate_model", "request_user_input"],
        "low_confidence_output": ["escalate_model", "prefer_higher_evidence", "request_user_input"],
        "competing_proposals": ["prefer_higher_confidence", "run_arbiter", "request_user_input"],
        "evidence_contradiction": ["prefer_higher_evidence", "run_arbiter", "terminate_blocked"],
        "test_vs_review": ["prefer_higher_evidence", "run_arbiter", "fail_safe"],
        "retrieval_ambiguity": ["escalate_model", "request_user_input", "terminate_blocked"],
    }


class ConflictSettings(_Section):
    """Conflict resolution: how Mother decides when agents disagree (docs/conflicts.md)."""

    missing_verdict: Literal["reject", "retry"] = Field(
        "reject",
        description="a reviewing phase whose reply states no verdict (not in its structured reply, "
        "not in its text): reject (a rejecting verdict of confidence 0: the conflict policy decides "
        "what follows) or retry (the attempt fails verdict_missing and is retried)",
    )

    policy: dict[ConflictType, list[ConflictStrategy]] = Field(
        default_factory=_default_policy,
        description="per conflict type, the strategies to try in order (the spec's table)",
    )
    low_confidence_threshold: float = Field(
        0.5, ge=0, le=1, description="a work phase below this confidence is low_confidence_output"
    )
    arbiter_role: str = Field("arbiter", description="the role run_arbiter runs")
    arbiter_model: str | None = Field(
        None,
        description="the arbiter's model (default: the reviewing phase's model's escalate_to, "
        "else its model)",
    )
    role_kinds: dict[str, RoleKind] = Field(
        default_factory=dict,
        description="the kind of a role that declares none in its role file (e.g. tester: test)",
    )
    max_conflicts_per_run: int = Field(
        10, ge=1, le=1000, description="a run that raises more ends conflicting_agents"
    )

    @field_validator("policy", mode="before")
    @classmethod
    def _over_default_policy(cls, value: Any) -> Any:
        """A policy given in part keeps the spec's entries for the types it does not name."""
        return {**_default_policy(), **value} if isinstance(value, dict) else value

    @field_validator("policy")
    @classmethod
    def _strategies_given(
        cls, value: dict[ConflictType, list[ConflictStrategy]]
    ) -> dict[ConflictType, list[ConflictStrategy]]:
        for kind, strategies in value.items():
            if not strategies:
                raise ValueError(f"conflicts.policy.{kind}: give at least one strategy")
        return value


class GateSettings(_Section):
    """Human gates: runs that wait for a person's approval or answer (docs/conflicts.md)."""

    timeout_seconds: float = Field(
        86_400,
        gt=0,
        le=30 * 86_400,
        description="how long a gate waits before the run ends blocked",
    )
    warning_ratio: float = Field(
        0.8, gt=0, lt=1, description="a gate_deadline_warning when this share of the wait is gone"
    )
    approvers: list[str] = Field(
        default_factory=list,
        description="who may decide gates (a run's approvers replace it); empty: anyone",
    )
    reply_seconds: float = Field(
        10.0, gt=0, le=600, description="how long approve/deny/answer wait for Mother's reply"
    )


class SandboxLimitSettings(_Section):
    """What one tool call may use in its sandbox, unless its manifest's ``limits`` say otherwise."""

    cpu_seconds: int = Field(300, ge=1, le=86_400, description="CPU time of each of its processes")
    memory_mb: int = Field(
        8192, ge=64, le=1_048_576, description="address space of each process (RLIMIT_AS)"
    )
    processes: int = Field(
        256, ge=8, le=65_536, description="processes and threads at once (RLIMIT_NPROC)"
    )
    open_files: int = Field(1024, ge=16, le=1_048_576, description="open files of each process")
    file_size_mb: int = Field(1024, ge=1, le=1_048_576, description="the largest file it may write")
    tmp_mb: int = Field(512, ge=1, le=1_048_576, description="its private /tmp (memory-backed)")


class ToolSettings(_Section):
    """The deterministic tool registry (``registry:tools``) and routing before the model."""

    manifests_dir: Path | None = Field(
        None,
        description="your tool manifests ({dir}/*.yaml), synced beside the shipped ones by "
        "`mother tools sync`; one with a shipped tool's tool_id replaces it",
    )
    shipped: bool = Field(True, description="sync the shipped tools (mother/tools/manifests)")
    routing: bool = Field(
        True, description="route a phase's task to the registry before the model (tool_only plans)"
    )
    default_timeout_ms: int = Field(
        30_000, ge=1, le=3_600_000, description="a tool's timeout when its manifest sets none"
    )
    allow_fallback_to_llm: bool = Field(
        True, description="when every tool of a tool_only plan fails, the phase goes to the model"
    )
    refresh_seconds: float = Field(
        5.0, ge=0, le=3600, description="how often Mother and workers re-read registry:tools"
    )
    max_output_bytes: int = Field(
        8 * 1024 * 1024, ge=1024, le=256 * 1024 * 1024, description="a tool's output, at most"
    )
    sandbox: Literal["bwrap", "none"] = Field(
        "bwrap",
        description="bwrap: every tool call runs in a bubblewrap sandbox (no network, no environment "
        "of the worker's, only the run's workspace writable, limits); none: tools run unsandboxed "
        "(only where every tool and workspace is trusted)",
    )
    sandbox_bwrap: str = Field(
        "bwrap", min_length=1, description="the bubblewrap program: a name on PATH, or a path"
    )
    sandbox_required: bool = Field(
        True,
        description="true: a worker refuses to start where the sandbox cannot be made (bubblewrap "
        "or user namespaces missing); false: tools run unsandboxed there, with a warning at every "
        "start (mother up --dev, the demo, the tests)",
    )
    sandbox_limits: SandboxLimitSettings = Field(default_factory=SandboxLimitSettings)
    sandbox_network_tools: list[Annotated[str, StringConstraints(min_length=1)]] = Field(
        default_factory=list,
        description="tool_ids allowed the network when their manifest asks (network: true)",
    )
    sandbox_paths: list[Path] = Field(
        default_factory=list,
        description="more host paths a tool sees read-only (the system directories, the Python "
        "installation and the project's packages are there already)",
    )
    sandbox_uid_base: int = Field(
        100_000,
        ge=1000,
        le=4_000_000_000,
        description="a worker running as root runs each run's tools as its own user id, "
        "sandbox_uid_base plus a number below sandbox_uid_count",
    )
    sandbox_uid_count: int = Field(50_000, ge=1, le=1_000_000)
    sandbox_prestart: bool = Field(
        True,
        description="after a tool call, start the next call's sandbox (fresh, unused) so an agent's "
        "next call does not wait for one; it waits while the model answers",
    )

    @field_validator("sandbox_paths")
    @classmethod
    def _absolute_paths(cls, value: list[Path]) -> list[Path]:
        for path in value:
            if not path.is_absolute():
                raise ValueError(f"{str(path)!r} is not an absolute path")
        return value


class RetentionClassSettings(_Section):
    keep_days: float = Field(
        gt=0, le=36_500, description="deleted this many days after the run ends"
    )
    archive_after_days: float | None = Field(
        None, gt=0, le=36_500, description="archived (compressed, active copy removed) after this"
    )


RunStatusName = Literal["success", "failed", "cancelled", "blocked"]


def _by_status() -> dict[RunStatusName, RetentionClassSettings]:
    return {
        "success": RetentionClassSettings(keep_days=180, archive_after_days=90),
        "failed": RetentionClassSettings(keep_days=30),
        "cancelled": RetentionClassSettings(keep_days=7),
        "blocked": RetentionClassSettings(keep_days=60),
    }


class RetentionExceptions(_Section):
    """Protections that keep an artifact forever (the spec's exceptions)."""

    approved_artifacts: bool = True
    golden_tasks: bool = True
    user_starred: bool = Field(
        True,
        description="a starred artifact is kept forever; off: it is deleted notify_before_delete_days "
        "after its owner is told",
    )
    compliance_required: bool = True


class ArchiveSettings(_Section):
    enabled: bool = True
    destination: Literal["compressed_redis"] = Field(
        "compressed_redis",
        description="archive:artifact:{id} in Redis (s3 and filesystem: not built)",
    )
    compress: bool = True


def _check_cron(value: str) -> str:
    from croniter import croniter

    if not croniter.is_valid(value):
        raise ValueError(f"{value!r} is not a cron expression (five fields, e.g. '0 2 * * *')")
    return value


class RetentionSettings(_Section):
    """Artifact lifecycle and retention (the spec's ArtifactRetention), and the daily GC."""

    default_ttl_days: float = Field(
        90, gt=0, le=36_500, description="an artifact whose run has not ended (or an orphan)"
    )
    by_status: dict[
        Literal["success", "failed", "cancelled", "blocked"], RetentionClassSettings
    ] = Field(default_factory=_by_status)
    exceptions: RetentionExceptions = Field(default_factory=RetentionExceptions)
    archive: ArchiveSettings = Field(default_factory=ArchiveSettings)
    notify_before_delete_days: float = Field(7, ge=0, le=365)
    records_keep_days: float = Field(
        90,
        gt=0,
        le=36_500,
        description="an ended run's own records (run, termination, result, budgets, contexts, "
        "conflicts); never shorter than its artifacts' retention",
    )
    gc_cron: Annotated[str, AfterValidator(_check_cron)] = Field(
        "0 2 * * *", description="when the GC runs (UTC), a croniter expression"
    )
    gc_batch_size: int = Field(
        500, ge=1, le=100_000, description="index entries read per step (each item its own call)"
    )
    gc_reports_keep_days: float = Field(
        90, gt=0, le=36_500, description="a GC report (gc_report:{time}) is kept this long"
    )
    gc_lease_seconds: int = Field(
        300,
        ge=1,
        le=86_400,
        description="a scheduled GC holds its day this long at a time (renewed after each step): a "
        "GC killed half way frees its day within it, and its retry collects the same day",
    )

    @field_validator("by_status", mode="after")
    @classmethod
    def _every_status(
        cls, value: dict[RunStatusName, RetentionClassSettings]
    ) -> dict[RunStatusName, RetentionClassSettings]:
        return {**_by_status(), **value}


class DashboardSettings(_Section):
    """The operators' dashboard and /metrics (``mother dashboard``, docs/dashboard.md)."""

    host: str = Field("127.0.0.1", description="the address it listens on")
    port: int = Field(8080, ge=1, le=65_535)
    token: str = Field(
        "",
        description="when set, every page and /metrics needs it (Authorization: Bearer, or ?token= "
        "once, which sets a cookie); required to listen beyond the loopback address",
    )
    refresh_seconds: float = Field(
        5.0,
        gt=0,
        le=3600,
        description="how often pages update when the live stream (server-sent events) is not there",
    )
    session_minutes: float = Field(
        30.0,
        gt=0,
        le=7 * 24 * 60,
        description="how long a principal stays signed in to the dashboard (then it signs in again)",
    )


class TelemetrySettings(_Section):
    """OpenTelemetry traces (docs/telemetry.md): off unless an endpoint is set, and then no cost."""

    otlp_endpoint: str = Field(
        "",
        description="an OTLP/HTTP receiver's base URL (http://collector:4318; /v1/traces is added), "
        "or its traces URL; empty: no traces, unless the SDK's OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT "
        "is set",
    )
    service_name: str = Field(
        "mother-harness", description="service.name of the spans (OTEL_SERVICE_NAME wins)"
    )


class LibrarySettings(_Section):
    """Libraries and retrieval (docs/libraries.md); each library's own rules are its policy."""

    hash_key: str = Field(
        "",
        description="the secret redaction_method hash derives each library's HMAC key from (set it "
        "to use hash; the same value then gives the same token within a library)",
    )
    min_hits: int = Field(
        1,
        ge=0,
        le=1000,
        description="a run that names libraries and retrieves fewer hits than this for a phase ends "
        "insufficient_evidence (0: off)",
    )
    min_score: float = Field(0.0, ge=0, description="hits scoring below this do not count")
    violations_to_end: int = Field(
        2,
        ge=0,
        le=1000,
        description="a run's library violations that end it policyViolation (0: never)",
    )
    ambiguity_margin: float = Field(
        0.05,
        ge=0,
        lt=1,
        description="two hits of one library from different documents scoring within this share of "
        "each other, stating different figures, are contradictory: the phase reports "
        "retrieval_ambiguity (0: off)",
    )


class Settings(BaseSettings):
    """Every setting of Mother-Harness. Later parts add their sections here."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_nested_delimiter="__",
        extra="forbid",
        validate_assignment=True,
        allow_inf_nan=False,
    )

    redis_url: str = Field(
        "redis://127.0.0.1:6379/0",
        description="redis:// or unix:// URL of a Redis with the JSON module",
    )
    data_dir: Path = Field(
        default_factory=default_data_dir,
        description="where this machine's files go unless set one by one: the embedded server's "
        "data (server.dir) and the runs' tool workspaces (worker.workspace_root); default "
        "$XDG_DATA_HOME/mother, else ~/.local/share/mother",
    )
    redis_wait_seconds: float = Field(
        60.0,
        ge=0,
        le=86_400,
        description="how long `mother run` and `mother worker` wait at startup for a Redis that cannot be "
        "reached yet (starting, restarting, loading its data), logging the wait; 0: stop at once",
    )
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    log_format: Literal["auto", "json", "console"] = Field(
        "auto", description="auto: console on a terminal, JSON lines otherwise"
    )
    server: ServerSettings = Field(default_factory=ServerSettings)
    service: ServiceSettings = Field(default_factory=ServiceSettings)
    worker: WorkerSettings = Field(default_factory=WorkerSettings)
    runs: RunDefaults = Field(default_factory=RunDefaults)
    models: dict[str, ModelConfig] = Field(default_factory=_default_models)
    budget: BudgetSettings = Field(default_factory=BudgetSettings)
    harness: HarnessSettings = Field(default_factory=HarnessSettings)
    hooks: HookSettings = Field(default_factory=HookSettings)
    context: ContextSettings = Field(default_factory=ContextSettings)
    conflicts: ConflictSettings = Field(default_factory=ConflictSettings)
    gates: GateSettings = Field(default_factory=GateSettings)
    tools: ToolSettings = Field(default_factory=ToolSettings)
    retention: RetentionSettings = Field(default_factory=RetentionSettings)
    libraries: LibrarySettings = Field(default_factory=LibrarySettings)
    dashboard: DashboardSettings = Field(default_factory=DashboardSettings)
    telemetry: TelemetrySettings = Field(default_factory=TelemetrySettings)

    @field_validator("models", mode="before")
    @classmethod
    def _over_shipped_models(cls, value: Any) -> Any:
        """A catalogue given in part keeps the shipped models it does not name, and a shipped model named
        with only some settings keeps its others (``MOTHER_MODELS__SCRIPTED__ALLOW_FAULTS=true``)."""
        if not isinstance(value, dict):
            return value
        shipped = {name: model.model_dump() for name, model in _default_models().items()}
        for name, given in value.items():
            if isinstance(given, dict) and name in shipped and "provider" not in given:
                shipped[name] = {**shipped[name], **given}
            else:
                shipped[name] = given
        return shipped

    @model_validator(mode="after")
    def _under_data_dir(self) -> Settings:
        """server.dir and worker.workspace_root not set one by one live under data_dir (never in the
        directory a command happens to run in)."""
        if "dir" not in self.server.model_fields_set:
            object.__setattr__(self.server, "dir", self.data_dir / "redis")
        if "workspace_root" not in self.worker.model_fields_set:
            object.__setattr__(self.worker, "workspace_root", self.data_dir / "workspaces")
        return self

    @model_validator(mode="after")
    def _catalogue_links(self) -> Settings:
        for name, model in self.models.items():
            if model.escalate_to is not None and model.escalate_to not in self.models:
                raise ValueError(
                    f"models.{name}.escalate_to: {model.escalate_to!r} is not in the catalogue"
                )
            if (
                model.escalate_to is not None
                and self.models[model.escalate_to].available_for_context
                <= model.available_for_context
            ):
                raise ValueError(
                    f"models.{name}.escalate_to: {model.escalate_to!r} has no larger context window"
                )
        summarizer = self.context.summarizer_model
        if summarizer is not None and summarizer not in self.models:
            raise ValueError(f"context.summarizer_model: {summarizer!r} is not in the catalogue")
        if self.context.summarizer == "llm_generated" and summarizer is None:
            raise ValueError("context.summarizer llm_generated needs context.summarizer_model")
        arbiter = self.conflicts.arbiter_model
        if arbiter is not None and arbiter not in self.models:
            raise ValueError(f"conflicts.arbiter_model: {arbiter!r} is not in the catalogue")
        return self

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        path = config_path()
        if path is not None:
            sources.append(YamlConfigSettingsSource(settings_cls, yaml_file=path))
        return tuple(sources)


def config_path() -> Path | None:
    """The YAML file in force: ``$MOTHER_CONFIG``, else ``./mother.yaml`` if it exists."""
    named = os.environ.get(CONFIG_ENV)
    if named:
        path = Path(named)
        if not path.is_file():
            what = "a directory, not a file" if path.is_dir() else "no such file"
            raise ConfigError(f"{CONFIG_ENV}={named}: {what}; fix the path or unset it")
        return path
    default = Path(DEFAULT_CONFIG_FILE)
    # was skipped without a word
    if default.exists() and not default.is_file():
        raise ConfigError(
            f"./{DEFAULT_CONFIG_FILE} is not a file; remove it, or name the config with {CONFIG_ENV}"
        )
    return default if default.is_file() else None


def _check_env_names() -> None:
    known = set(Settings.model_fields) | {"config"}
    for name in os.environ:
        if not name.startswith(ENV_PREFIX):
            continue
        field = name[len(ENV_PREFIX) :].lower().split("__", 1)[0]
        if field not in known:
            raise ConfigError(
                f"environment variable {name} names no setting; "
                f"known: {', '.join(sorted('MOTHER_' + k.upper() for k in known))}"
            )


def _check_yaml(path: Path) -> None:
    try:
        data = read_yaml(path)
    except YamlProblem as exc:
        raise ConfigError(f"cannot read YAML config {exc}") from None
    if data is not None and not isinstance(data, dict):
        raise ConfigError(f"{path}: the config file must be a mapping of setting: value")


def _describe(exc: ValidationError, path: Path | None) -> str:
    where = (
        f" (sources: {path}, MOTHER_* environment)" if path else " (source: MOTHER_* environment)"
    )
    return (
        "invalid configuration: "
        + describe_validation_error(exc, limit=20, unknown="unknown setting")
        + where
    )


def load_settings(**overrides: Any) -> Settings:
    """Load and validate the settings; raise ``ConfigError`` with one readable line."""
    _check_env_names()
    path = config_path()
    if path is not None:
        _check_yaml(path)
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        raise ConfigError(_describe(exc, path)) from None
    # a MOTHER_* variable holding a section or list that is not JSON
    except SettingsError as exc:
        field = re.search(r'field "([^"]+)"', str(exc))
        name = f"{ENV_PREFIX}{field.group(1).upper()}" if field else "a MOTHER_* variable"
        raise ConfigError(
            f"{name} is not valid JSON ({exc.__cause__ or exc}); give the whole value as JSON, "
            f"or set one key with {ENV_PREFIX}SECTION__KEY"
        ) from None
