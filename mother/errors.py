"""Every error Mother-Harness raises on purpose.

Each class carries a stable ``code`` (for machines, logs and the CLI's exit
paths) and a one-line message that says what was wrong and what to do. The CLI
prints ``error[code]: message`` and never a traceback for these.

    MotherError                      code
    ├── ConfigError                  config_invalid
    ├── InvalidSpec                  invalid_spec
    ├── NotFound                     not_found
    ├── WaitTimeout                  wait_timeout
    ├── ProviderError                provider_error
    │   └── ScriptExhausted          script_exhausted
    ├── ToolError                    tool_error
    ├── PhaseStale                   phase_stale
    ├── BudgetExhausted              budget_exhausted   (limit_code, current, max)
    │   ├── BudgetStopped            budget_stopped     (an emergency stop is in force)
    │   └── LimitExceeded            limit_exceeded     (a seed-000 run limit at a turn's start)
    ├── RateLimited                  rate_limited       (status 429, retry_after seconds)
    ├── QueueFull                    queue_full         (depth, max)
    ├── OverrideRefused              override_refused
    ├── InsufficientBudget           insufficient_budget (remaining, requested)
    ├── LedgerError                  ledger_error
    ├── ContextBudgetExceeded        context_budget_exceeded (required, available, model)
    ├── ContextInvalid               context_invalid    (an agent refused its composed context)
    ├── RecordInvalid                record_invalid     (a record in Redis that is not what its key holds)
    ├── RedisUnavailable             redis_unavailable
    │   └── MissingJSONModule        redis_no_json
    └── ServerError                  server_error
        ├── ServerBinaryMissing      server_binary_missing
        ├── PortInUse                server_port_in_use
        ├── ModuleLoadFailed         server_module_load_failed
        ├── DataDirNotWritable       server_dir_not_writable
        └── DataDirInUse             server_dir_in_use

Later parts of the system add their own branches (budget, rate limits,
policies) under ``MotherError`` in this module and redraw the tree.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "BudgetExhausted",
    "BudgetStopped",
    "ConfigError",
    "ContextBudgetExceeded",
    "ContextInvalid",
    "DataDirInUse",
    "DataDirNotWritable",
    "InsufficientBudget",
    "InvalidSpec",
    "LedgerError",
    "LimitExceeded",
    "MissingJSONModule",
    "ModuleLoadFailed",
    "MotherError",
    "NoSuchRun",
    "NotFound",
    "OverrideRefused",
    "PhaseStale",
    "PortInUse",
    "ProviderError",
    "QueueFull",
    "RateLimited",
    "RecordInvalid",
    "RedisUnavailable",
    "ScriptExhausted",
    "ServerBinaryMissing",
    "ServerError",
    "ToolError",
    "WaitTimeout",
    "not_utf8",
]


class MotherError(Exception):
    """Base of every deliberate Mother-Harness error."""

    code: str = "mother_error"

    def __init__(self, message: str, **data: Any) -> None:
        super().__init__(message)
        self.message = message
        self.data = data

    def __str__(self) -> str:
        return self.message

    def to_dict(self) -> dict[str, Any]:
        """The error as a JSON-ready mapping: code, message and its data."""
        return {"code": self.code, "message": self.message, **self.data}


class ConfigError(MotherError):
    code = "config_invalid"


class InvalidSpec(MotherError):
    code = "invalid_spec"


class NotFound(MotherError):
    code = "not_found"


class NoSuchRun(NotFound):
    """No run has this id and no submission is waiting to be taken in: waiting for it is pointless."""


class WaitTimeout(MotherError):
    """A wait for a run's end ran out of time; the run goes on."""

    code = "wait_timeout"


class ProviderError(MotherError):
    """A model provider failed (connection, HTTP error, malformed reply)."""

    code = "provider_error"


class ScriptExhausted(ProviderError):
    """The scripted provider was asked for more replies than its script has."""

    code = "script_exhausted"


class ToolError(MotherError):
    """A tool refused its arguments; the model sees this message."""

    code = "tool_error"


class PhaseStale(MotherError):
    """The phase attempt a worker runs is no longer current (run ended or re-dispatched)."""

    code = "phase_stale"


class BudgetExhausted(MotherError):
    """An action was refused because a budget dimension is at its hard limit."""

    code = "budget_exhausted"

    @property
    def limit_code(self) -> str:
        return str(self.data.get("limit_code", ""))


class BudgetStopped(BudgetExhausted):
    """The run is emergency-stopped: mutating actions are refused until a reset."""

    code = "budget_stopped"


class LimitExceeded(BudgetExhausted):
    """A run limit (turns, tokens, spend, duration_seconds) was reached at the start of a turn."""

    code = "limit_exceeded"


class RateLimited(MotherError):
    """Too many messages from one user in the window (HTTP-style 429)."""

    code = "rate_limited"
    status = 429

    @property
    def retry_after(self) -> float:
        return float(self.data["retry_after"])


class QueueFull(MotherError):
    """The submission queue is at its maximum depth; nothing was enqueued."""

    code = "queue_full"


class OverrideRefused(MotherError):
    code = "override_refused"


class InsufficientBudget(MotherError):
    """A child's reservation exceeds what its parent has left."""

    code = "insufficient_budget"


class LedgerError(MotherError):
    """A ledger call named a thread that is not registered, or is in the wrong state."""

    code = "ledger_error"


class ContextBudgetExceeded(MotherError):
    """The required sections of a phase's context fit no model the catalogue can escalate to."""

    code = "context_budget_exceeded"


class ContextInvalid(MotherError):
    """A worker found its composed context missing, incomplete or altered; it does not run on it."""

    code = "context_invalid"


class RecordInvalid(MotherError):
    """A record read from Redis does not parse as what its key holds: edited by hand, or written by
    an incompatible version."""

    code = "record_invalid"


class RedisUnavailable(MotherError):
    code = "redis_unavailable"


class MissingJSONModule(RedisUnavailable):
    code = "redis_no_json"


class ServerError(MotherError):
    code = "server_error"


class ServerBinaryMissing(ServerError):
    code = "server_binary_missing"


class PortInUse(ServerError):
    code = "server_port_in_use"


class ModuleLoadFailed(ServerError):
    code = "server_module_load_failed"


class DataDirNotWritable(ServerError):
    code = "server_dir_not_writable"


class DataDirInUse(ServerError):
    code = "server_dir_in_use"


def not_utf8(raw: bytes, exc: UnicodeDecodeError) -> str:
    """Where bytes that should be UTF-8 are not: 'not UTF-8 text (byte 0xNN at offset N)'."""
    return f"not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start})"
