"""Every error Mother-Harness raises on purpose.

Each class carries a stable ``code`` (for machines, logs, the CLI's exit paths, and a failed phase's
``error_code``: Mother decides what a failure means by it) and a one-line message that says what was
wrong and what to do; what a caller needs beyond that is a typed attribute. The CLI prints
``error[code]: message`` and never a traceback for these.

    MotherError                      code
    ├── ConfigError                  config_invalid
    ├── InvalidSpec                  invalid_spec       (field)
    ├── PolicyViolation              policy_violation   (a run asked for what policy forbids)
    │   └── SignatureInvalid         signature_invalid  (a role file or tool manifest fails its signature)
    ├── NotFound                     not_found
    │   └── NoSuchRun                not_found          (no run, and none waiting to be taken in)
    ├── WaitTimeout                  wait_timeout
    ├── ProviderError                provider_error     (transient, retry_after, may_have_used)
    │   ├── ModelUnreachable         model_unreachable  (the run ends blocked: fix the endpoint)
    │   ├── ContextTooLong           context_length_exceeded (the server refused the prompt's length)
    │   └── ScriptExhausted          script_exhausted
    ├── ToolError                    tool_error
    │   └── ToolTransient            tool_transient     (a tool failure worth trying again)
    ├── PhaseStale                   phase_stale
    ├── AskRefused                   ask_refused        (why: Mother's code, or no_answer)
    ├── WorkspaceTooLarge            workspace_too_large
    ├── WorkspaceCorrupt             workspace_corrupt
    ├── HookDecision                 hook_decision      (action, event, hook; result_code hook_<action>:<event>)
    ├── ApprovalRequired             approval_required  (request: the tool call a person must approve)
    ├── VerdictMissing               verdict_missing    (a reviewing phase stated no verdict)
    ├── GateRefused                  gate_refused       (why: not_waiting, wrong_gate, expired, not_allowed, digest_mismatch)
    ├── BudgetExhausted              budget_exhausted   (limit_code, current, max)
    │   ├── BudgetStopped            budget_stopped     (an emergency stop is in force)
    │   ├── LimitExceeded            limit_exceeded     (a run limit at a turn's start)
    │   └── DepthExhausted           depth_exhausted    (a child's parent has no depth left)
    ├── RateLimited                  rate_limited       (status 429, retry_after, user_id)
    ├── QueueFull                    queue_full         (depth, max)
    ├── OverrideRefused              override_refused
    ├── InsufficientBudget           insufficient_budget (remaining, requested)
    ├── LedgerError                  ledger_error
    ├── ContextBudgetExceeded        context_budget_exceeded (factors)
    ├── InsufficientEvidence         insufficient_evidence (retrieval found too little)
    ├── ContextInvalid               context_invalid    (an agent refused its composed context)
    ├── RecordInvalid                record_invalid     (a record in Redis that is not what its key holds)
    ├── RedisUnavailable             redis_unavailable  (url, unreachable)
    │   └── MissingJSONModule        redis_no_json
    └── ServerError                  server_error
        ├── ServerBinaryMissing      server_binary_missing
        ├── PortInUse                server_port_in_use
        ├── ModuleLoadFailed         server_module_load_failed
        ├── DataDirNotWritable       server_dir_not_writable
        └── DataDirInUse             server_dir_in_use
"""

from __future__ import annotations

from typing import Any, ClassVar

__all__ = [
    "ApprovalRequired",
    "AskRefused",
    "BudgetExhausted",
    "BudgetStopped",
    "ConfigError",
    "ContextBudgetExceeded",
    "ContextInvalid",
    "ContextTooLong",
    "DataDirInUse",
    "DataDirNotWritable",
    "DepthExhausted",
    "GateRefused",
    "HookDecision",
    "InsufficientBudget",
    "InvalidSpec",
    "LedgerError",
    "LimitExceeded",
    "MissingJSONModule",
    "ModelUnreachable",
    "ModuleLoadFailed",
    "MotherError",
    "NoSuchRun",
    "NotFound",
    "OverrideRefused",
    "PhaseStale",
    "PolicyViolation",
    "PortInUse",
    "ProviderError",
    "QueueFull",
    "RateLimited",
    "RecordInvalid",
    "RedisUnavailable",
    "ScriptExhausted",
    "ServerBinaryMissing",
    "ServerError",
    "SignatureInvalid",
    "ToolError",
    "VerdictMissing",
    "WaitTimeout",
    "WorkspaceCorrupt",
    "WorkspaceTooLarge",
    "not_utf8",
]


class MotherError(Exception):
    """Base of every deliberate Mother-Harness error."""

    code: ClassVar[str] = "mother_error"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message

    @property
    def result_code(self) -> str:
        """The ``error_code`` a failed phase reports for this error (its code)."""
        return self.code

    def details(self) -> dict[str, Any]:
        """What the error carries beyond its message (its typed attributes)."""
        return {}

    def to_dict(self) -> dict[str, Any]:
        """The error as a JSON-ready mapping: code, message and its details."""
        return {"code": self.code, "message": self.message, **self.details()}


class ConfigError(MotherError):
    code = "config_invalid"


class InvalidSpec(MotherError):
    code = "invalid_spec"

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field

    def details(self) -> dict[str, Any]:
        return {"field": self.field} if self.field else {}


class PolicyViolation(MotherError):
    """A run asked for what the deployment's policy forbids (it ends ``policyViolation``)."""

    code = "policy_violation"


class SignatureInvalid(PolicyViolation):
    """A role file or tool manifest is unsigned, altered after signing, or signed by an untrusted key."""

    code = "signature_invalid"


class NotFound(MotherError):
    code = "not_found"


class NoSuchRun(NotFound):
    """No run has this id and no submission is waiting to be taken in: waiting for it is pointless."""


class WaitTimeout(MotherError):
    """A wait for a run's end ran out of time; the run goes on."""

    code = "wait_timeout"


class ProviderError(MotherError):
    """A model provider failed (connection, HTTP error, malformed reply). ``transient``: worth sending
    again (no connection, a timeout, HTTP 408/409/429/5xx), after ``retry_after`` seconds when the server
    said; ``may_have_used``: the server may have worked on (and billed) the call."""

    code = "provider_error"

    def __init__(
        self,
        message: str,
        *,
        transient: bool = False,
        retry_after: float | None = None,
        may_have_used: bool = False,
    ) -> None:
        super().__init__(message)
        self.transient, self.retry_after, self.may_have_used = transient, retry_after, may_have_used

    def details(self) -> dict[str, Any]:
        return {
            "transient": self.transient,
            "retry_after": self.retry_after,
            "may_have_used": self.may_have_used,
        }


class ModelUnreachable(ProviderError):
    """A model's endpoint refused the connection or does not resolve: a configuration or deployment
    problem, not worth a retry (the run ends ``blocked``, suggested action ``user_input``)."""

    code = "model_unreachable"


class ContextTooLong(ProviderError):
    """The model's server refused the prompt as longer than its context window (HTTP 400): sending it
    again is refused the same way (the run ends ``context_budget_exceeded``). ``prompt_tokens`` and
    ``window``: the server's own counts, where it said them."""

    code = "context_length_exceeded"

    def __init__(
        self, message: str, *, prompt_tokens: int | None = None, window: int | None = None
    ) -> None:
        super().__init__(message)
        self.prompt_tokens, self.window = prompt_tokens, window

    def details(self) -> dict[str, Any]:
        return {**super().details(), "prompt_tokens": self.prompt_tokens, "window": self.window}


class ScriptExhausted(ProviderError):
    """The scripted provider was asked for more replies than its script has."""

    code = "script_exhausted"


class ToolError(MotherError):
    """A tool refused its arguments; the model sees this message."""

    code = "tool_error"


class ToolTransient(ToolError):
    """A tool failed for a reason that may pass (a lock held, a resource busy): the executor tries it again,
    up to its manifest's ``max_retries``."""

    code = "tool_transient"


class PhaseStale(MotherError):
    """The phase attempt a worker runs is no longer current (run ended or re-dispatched)."""

    code = "phase_stale"


class AskRefused(MotherError):
    """Mother refused what a worker host asked (``why``: its code), or did not answer it in time
    (``no_answer``)."""

    code = "ask_refused"

    def __init__(self, message: str, *, why: str = "refused") -> None:
        super().__init__(message)
        self.why = why

    def details(self) -> dict[str, Any]:
        return {"why": self.why}


class WorkspaceTooLarge(MotherError):
    """A phase left more in its run's workspace than ``worker.workspace_max_mb``."""

    code = "workspace_too_large"


class WorkspaceCorrupt(MotherError):
    """A run's stored workspace cannot be restored as it is (a path outside it, content changed or gone)."""

    code = "workspace_corrupt"


class HookDecision(MotherError):
    """A control hook decided the phase's fate (``action`` on ``event``). The failed phase reports it as
    ``hook_<action>:<event>`` (:attr:`result_code`), which Mother reads back with :meth:`parse`."""

    code = "hook_decision"

    def __init__(self, message: str, *, action: str, event: str, hook: str | None) -> None:
        super().__init__(message)
        self.action, self.event, self.hook = action, event, hook

    @property
    def result_code(self) -> str:
        return f"hook_{self.action}:{self.event}"

    @staticmethod
    def parse(result_code: str | None) -> tuple[str, str] | None:
        """(action, event) of a result code made by :attr:`result_code`; None for any other code."""
        if not result_code or not result_code.startswith("hook_") or ":" not in result_code:
            return None
        action, event = result_code.removeprefix("hook_").split(":", 1)
        return action, event

    def details(self) -> dict[str, Any]:
        return {"action": self.action, "event": self.event, "hook": self.hook}


class BudgetExhausted(MotherError):
    """An action was refused because a budget dimension is at its hard limit (``limit_code``, with
    ``current`` and ``max`` where they are known)."""

    code = "budget_exhausted"

    def __init__(
        self, message: str, *, limit_code: str = "", current: Any = None, max: Any = None
    ) -> None:
        super().__init__(message)
        self.limit_code, self.current, self.max = limit_code, current, max

    def details(self) -> dict[str, Any]:
        return {"limit_code": self.limit_code, "current": self.current, "max": self.max}


class BudgetStopped(BudgetExhausted):
    """The run is emergency-stopped: mutating actions are refused until a reset."""

    code = "budget_stopped"


class LimitExceeded(BudgetExhausted):
    """A run limit (turns, tokens, spend, duration_seconds) was reached at the start of a turn."""

    code = "limit_exceeded"


class DepthExhausted(BudgetExhausted):
    """A child run would have no depth left under its parent."""

    code = "depth_exhausted"


class RateLimited(MotherError):
    """Too many messages from one user in the window (HTTP-style 429)."""

    code = "rate_limited"
    status: ClassVar[int] = 429

    def __init__(self, message: str, *, retry_after: float, user_id: str) -> None:
        super().__init__(message)
        self.retry_after, self.user_id = retry_after, user_id

    def details(self) -> dict[str, Any]:
        return {"status": self.status, "retry_after": self.retry_after, "user_id": self.user_id}


class ApprovalRequired(MotherError):
    """A phase called a tool that needs a person's approval first: the phase stops before the call, and
    Mother opens an approval gate for exactly that call (``request``: tool, digest, arguments)."""

    code = "approval_required"

    def __init__(self, message: str, *, request: dict[str, Any]) -> None:
        super().__init__(message)
        self.request = request

    def details(self) -> dict[str, Any]:
        return {"request": self.request}


class VerdictMissing(MotherError):
    """A reviewing phase (a critic's, a test run's, an arbiter's) ended without stating its verdict."""

    code = "verdict_missing"


class GateRefused(MotherError):
    """An approve, deny or answer that cannot be taken: the run does not wait (or not on that gate), the
    gate's deadline passed, the actor may not decide it, or the approval names other content."""

    code = "gate_refused"

    def __init__(self, message: str, *, why: str) -> None:
        super().__init__(message)
        self.why = why

    def details(self) -> dict[str, Any]:
        return {"why": self.why}


class QueueFull(MotherError):
    """The submission queue is at its maximum depth; nothing was enqueued."""

    code = "queue_full"

    def __init__(self, message: str, *, depth: int, max: int) -> None:
        super().__init__(message)
        self.depth, self.max = depth, max

    def details(self) -> dict[str, Any]:
        return {"depth": self.depth, "max": self.max}


class OverrideRefused(MotherError):
    code = "override_refused"


class InsufficientBudget(MotherError):
    """A child's reservation exceeds what its parent has left (USD, as text)."""

    code = "insufficient_budget"

    def __init__(self, message: str, *, remaining: str, requested: str) -> None:
        super().__init__(message)
        self.remaining, self.requested = remaining, requested

    def details(self) -> dict[str, Any]:
        return {"remaining": self.remaining, "requested": self.requested}


class LedgerError(MotherError):
    """A ledger call named a thread that is not registered, or is in the wrong state."""

    code = "ledger_error"


class ContextBudgetExceeded(MotherError):
    """The required sections of a phase's context fit no model the catalogue can escalate to
    (``factors``: what was tried)."""

    code = "context_budget_exceeded"

    def __init__(self, message: str, *, factors: list[str] | None = None) -> None:
        super().__init__(message)
        self.factors = list(factors or [])

    def details(self) -> dict[str, Any]:
        return {"factors": self.factors}


class InsufficientEvidence(MotherError):
    """Retrieval found too little for the phase to go on (``libraries.min_hits``)."""

    code = "insufficient_evidence"


class ContextInvalid(MotherError):
    """A worker found its composed context missing, incomplete or altered; it does not run on it."""

    code = "context_invalid"


class RecordInvalid(MotherError):
    """A record read from Redis does not parse as what its key holds: edited by hand, or written by
    an incompatible version."""

    code = "record_invalid"


class RedisUnavailable(MotherError):
    """Redis cannot be reached or refused us (``unreachable``: it did not answer, so waiting may help;
    ``refused``: it refused the URL's user or password)."""

    code = "redis_unavailable"

    def __init__(
        self,
        message: str,
        *,
        url: str | None = None,
        unreachable: bool = False,
        refused: bool = False,
    ) -> None:
        super().__init__(message)
        self.url, self.unreachable, self.refused = url, unreachable, refused

    def details(self) -> dict[str, Any]:
        return {"url": self.url, "unreachable": self.unreachable, "refused": self.refused}


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
