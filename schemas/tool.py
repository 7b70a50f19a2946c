"""The deterministic tool registry (seed 003 §4): a tool's manifest (``DeterministicTool``), the registry
document ``registry:tools`` (``ToolRegistry``), a tool's measured statistics ``tool_stats:{tool_id}``
(``ToolStats``), and the tools Mother's router picked for a phase (``ToolCandidate``). No I/O."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, JsonValue, PrivateAttr, StringConstraints, field_validator

from schemas._base import Id, Record, Shallow, Timestamp

__all__ = [
    "REGISTRY_VERSION",
    "SIDE_EFFECT_HINTS",
    "DeterministicTool",
    "McpCall",
    "McpServer",
    "SandboxLimits",
    "SideEffects",
    "ToolCandidate",
    "ToolCategory",
    "ToolRegistry",
    "ToolStats",
]

REGISTRY_VERSION: Literal["tools:v1"] = "tools:v1"

ToolCategory = Literal["file_ops", "git", "compute", "ocr", "format", "validation", "db", "network"]
SideEffects = Literal["read_only", "idempotent_write", "destructive"]

# side_effects as the Model Context Protocol's tool annotations
SIDE_EFFECT_HINTS: dict[str, dict[str, bool]] = {
    "read_only": {"readOnlyHint": True, "destructiveHint": False, "idempotentHint": True},
    "idempotent_write": {"readOnlyHint": False, "destructiveHint": False, "idempotentHint": True},
    "destructive": {"readOnlyHint": False, "destructiveHint": True, "idempotentHint": False},
}

Pattern = Annotated[str, StringConstraints(min_length=1, max_length=1000)]
Keyword = Annotated[str, StringConstraints(min_length=1, max_length=100)]
RoleOrAll = Annotated[str, StringConstraints(pattern=r"^(\*|[A-Za-z0-9_.:-]{1,128})$")]
Entrypoint = Annotated[
    str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_.]*:[A-Za-z_][A-Za-z0-9_]*$")
]

# an environment variable a manifest passes into its tool's sandbox
EnvName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")]


class SandboxLimits(Record):
    """What one call of a tool may use in its sandbox; a field left out takes the deployment's
    ``tools.sandbox_limits``."""

    cpu_seconds: int | None = Field(
        None, ge=1, le=86_400, description="CPU time of each of its processes"
    )
    memory_mb: int | None = Field(
        None, ge=64, le=1_048_576, description="address space per process"
    )
    processes: int | None = Field(None, ge=8, le=65_536, description="processes and threads")
    open_files: int | None = Field(None, ge=16, le=1_048_576, description="per process")
    file_size_mb: int | None = Field(None, ge=1, le=1_048_576, description="largest file written")
    tmp_mb: int | None = Field(None, ge=1, le=1_048_576, description="its private /tmp")


class McpCall(Record):
    """What a registry tool that is an MCP server's tool calls: the server (its name in ``registry:mcp``),
    the tool's name there, and how to reach the server: a command started inside the tool sandbox
    (stdio), or a streamable HTTP URL."""

    server: Id
    tool: Annotated[str, StringConstraints(min_length=1, max_length=128)]
    command: list[Annotated[str, StringConstraints(min_length=1, max_length=4096)]] | None = Field(
        None, max_length=100
    )
    url: Annotated[str, StringConstraints(pattern=r"^https?://\S{1,2000}$")] | None = None


class DeterministicTool(Record):
    """A tool's manifest (``tools/*.yaml``): every field of the spec's DeterministicTool."""

    tool_id: Id
    tool_name: Annotated[str, StringConstraints(min_length=1, max_length=200)]
    version: Annotated[str, StringConstraints(pattern=r"^\d+\.\d+\.\d+([-+][A-Za-z0-9.-]+)?$")]
    description: Annotated[str, StringConstraints(max_length=2000)] = Field(
        "", description="what the model is told the tool does (its OpenAI function description)"
    )
    category: ToolCategory
    input_schema: Annotated[dict[str, JsonValue], Shallow] = Field(
        description="JSON Schema of the inputs (an object)"
    )
    output_schema: Annotated[dict[str, JsonValue], Shallow] = Field(
        description="JSON Schema of the output (an object)"
    )
    side_effects: SideEffects
    handles_patterns: list[Pattern] = Field(
        default_factory=list,
        max_length=50,
        description="RE2 regexes over the task; '/pattern/i' or a plain pattern; named groups "
        "(?P<input>...) fill inputs",
    )
    keywords: list[Keyword] = Field(
        default_factory=list, max_length=50, description="two of them in the task route it here"
    )
    priority: int = Field(ge=1, le=100, description="higher: tried first")
    timeout_ms: int | None = Field(
        None, ge=1, le=3_600_000, description="default: the registry's default_timeout_ms"
    )
    max_retries: Literal[0, 1, 2] = 0
    approval_required: bool = False
    allowed_roles: list[RoleOrAll] = Field(
        min_length=1, max_length=100, description="roles that may use it; '*': every role"
    )
    cost_tier: Literal["free"] = "free"
    entrypoint: Entrypoint = Field(description="'package.module:function' a worker calls")
    # the sandbox a call runs in (tools.sandbox): what this tool asks of it beyond the defaults
    network: bool = Field(
        False,
        description="the tool needs the network; refused unless tools.sandbox_network_tools lists it",
    )
    env: list[EnvName] = Field(
        default_factory=list,
        max_length=50,
        description="environment variables passed from the worker into the sandbox (never MOTHER_* "
        "or a model's API key)",
    )
    limits: SandboxLimits | None = Field(
        None, description="its own limits (else tools.sandbox_limits)"
    )
    allow_git_dir: bool = Field(
        False, description="its file paths may be under .git/ (refused otherwise)"
    )
    mcp: McpCall | None = Field(
        None, description="an MCP server's tool (mother tools mcp add): called through that server"
    )
    # what checks the contracts, made once per manifest object (mother.tools.contracts)
    _validators: dict[str, Any] = PrivateAttr(default_factory=dict)

    def validators(self) -> dict[str, Any]:
        return self._validators

    @field_validator("input_schema", "output_schema")
    @classmethod
    def _object_schema(cls, value: dict[str, Any]) -> dict[str, Any]:
        if value.get("type") != "object":
            raise ValueError('must be a JSON Schema of an object (type: "object")')
        return value

    def timeout_or(self, default_ms: int) -> int:
        """Its timeout: the manifest's, else ``default_ms`` (the registry's default_timeout_ms)."""
        return self.timeout_ms if self.timeout_ms is not None else default_ms

    def allows(self, role: str) -> bool:
        return "*" in self.allowed_roles or role in self.allowed_roles

    @property
    def read_only(self) -> bool:
        return self.side_effects == "read_only"

    def annotations(self) -> dict[str, Any]:
        """The Model Context Protocol's annotations of the tool (title and hints)."""
        return {"title": self.tool_name, **SIDE_EFFECT_HINTS[self.side_effects]}

    def openai_function(self) -> dict[str, Any]:
        """The tool as an OpenAI (chat-completions) function definition."""
        return {
            "type": "function",
            "function": {
                "name": self.tool_id,
                "description": self.description or self.tool_name,
                "parameters": self.input_schema,
            },
        }


class ToolRegistry(Record):
    """``registry:tools``: the synced tools and the routing settings."""

    registry_version: Literal["tools:v1"] = REGISTRY_VERSION
    updated_at: Timestamp
    tools: list[DeterministicTool]
    routing_order: list[Id] = Field(description="tool_ids in priority order (ties by tool_id)")
    default_timeout_ms: int = Field(30_000, ge=1, le=3_600_000)
    allow_fallback_to_llm: bool = True
    tool_success_rates: dict[str, float] = Field(
        default_factory=dict, description="tool_id -> success rate (from tool_stats:{tool_id})"
    )

    def tool(self, tool_id: str) -> DeterministicTool | None:
        return next((t for t in self.tools if t.tool_id == tool_id), None)

    def timeout_ms(self, tool: DeterministicTool) -> int:
        return tool.timeout_or(self.default_timeout_ms)


class ToolStats(Record):
    """``tool_stats:{tool_id}``, updated by the server (``mh_tool_stat``) after every call."""

    success_count: int = Field(0, ge=0)
    failure_count: int = Field(0, ge=0)
    success_rate: float = Field(0.0, ge=0.0, le=1.0)
    avg_execution_ms: float = Field(0.0, ge=0.0)
    total_execution_ms: float = Field(0.0, ge=0.0, description="the sum the average is kept from")
    last_used: Timestamp | None = None


class ToolCandidate(Record):
    """A tool Mother's router found for a phase's task, with the inputs it extracted; a phase whose
    context carries candidates runs them in order (a ``tool_only`` plan) before any model call."""

    tool_id: Id
    inputs: Annotated[dict[str, JsonValue], Shallow] = Field(default_factory=dict)
    matched: Annotated[str, StringConstraints(max_length=1000)] = Field(
        description="what matched: 'pattern: ...' or 'keywords: a, b'"
    )


class McpServer(Record):
    """An MCP server registered as a source of tools (``registry:mcp``, ``mother tools mcp add``): how to
    reach it, the roles its tools are offered to, and its tools as it listed them."""

    name: Id
    command: list[Annotated[str, StringConstraints(min_length=1, max_length=4096)]] | None = Field(
        None, max_length=100, description="started inside the tool sandbox, talked to over stdio"
    )
    url: Annotated[str, StringConstraints(pattern=r"^https?://\S{1,2000}$")] | None = Field(
        None, description="a streamable HTTP endpoint (its tools get the network)"
    )
    allowed_roles: list[RoleOrAll] = Field(default_factory=lambda: ["*"], min_length=1)
    tools: list[dict[str, JsonValue]] = Field(
        default_factory=list,
        max_length=500,
        description="its tools as listed: name, description, inputSchema, annotations",
    )
    added_at: Timestamp | None = None
