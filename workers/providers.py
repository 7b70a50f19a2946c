"""Model providers behind one small interface: ``complete(messages, tools) -> ModelReply``.

- ``OpenAIProvider``: chat completions through the official ``openai`` SDK, with a
  per-model ``base_url`` and API key from config; serves OpenAI, Ollama (``/v1``),
  vLLM and llama.cpp servers alike.
- ``ScriptedProvider``: replays a role's scripted replies in order (text or tool
  calls, usage, confidence, evidence, delay, failure) — for tests, the offline
  demo, and reproducing incidents.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson

from mother import secrets
from mother.budget import check_amount
from mother.config import ModelConfig
from mother.errors import (
    ContextTooLong,
    InvalidSpec,
    ModelUnreachable,
    ProviderError,
    ScriptExhausted,
)
from mother.logs import get_logger
from schemas import ScriptedReply
from workers.structured import structured_fields

__all__ = [
    "ModelReply",
    "OpenAIProvider",
    "Provider",
    "ScriptedProvider",
    "ToolCall",
    "make_provider",
    "sdk_client",
]


log = get_logger("providers")


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    # a JSON object when the model got it right; ToolBox.run refuses anything else
    arguments: Any
    # the arguments as the model wrote them, when it wrote text: echoed back as they came
    text: str | None = None


@dataclass
class ModelReply:
    text: str | None
    tool_calls: list[ToolCall] = field(default_factory=list)
    input_tokens: int = 0
    output_tokens: int = 0
    confidence: float | None = None
    evidence_count: int | None = None
    # what a scripted reply states outright (a real model's are read from its text: workers.verdict)
    verdict: str | None = None
    findings: list[str] = field(default_factory=list)
    winner: str | None = None
    # why the token counts are not the provider's (it reported none, or numbers that cannot be counts):
    # the meter then charges its own estimate (workers.metering.Meter.estimate_usage)
    usage_note: str | None = None


class Provider(Protocol):
    # how many times the agent loop sends a call again after a ProviderError marked ``transient``
    call_retries: int

    def complete(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        response_format: dict[str, Any] | None = None,
    ) -> ModelReply: ...


# HTTP statuses worth sending again (the SDK's own rule); its retries are off so each attempt is metered
_TRANSIENT_STATUSES = frozenset({408, 409, 429})
RETRY_AFTER_CAP_SECONDS = 30.0


class ScriptedProvider:
    """Replies from a script, in order; replies limited to other attempts are skipped."""

    # a scripted failure fails its attempt
    call_retries = 0

    def __init__(
        self,
        role: str,
        replies: list[ScriptedReply],
        attempt: int,
        interrupt: Callable[[], None] | None = None,
    ) -> None:
        self.role = role
        self.replies = [r for r in replies if r.attempts is None or attempt in r.attempts]
        self.position = 0
        self.interrupt = interrupt or (lambda: None)

    def _sleep(self, seconds: float) -> None:
        """Sleep in short steps, letting ``interrupt`` stop a run that ended meanwhile."""
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            time.sleep(min(0.25, left))
            self.interrupt()

    def complete(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        response_format: dict[str, Any] | None = None,
    ) -> ModelReply:
        """The script's next reply (a scripted reply states its verdict and the rest in fields: a
        ``response_format`` asks nothing more of it)."""
        if self.position >= len(self.replies):
            raise ScriptExhausted(
                f"role {self.role!r}'s script has no reply left after {self.position}; add replies to scripts.{self.role}"
            )
        reply = self.replies[self.position]
        self.position += 1
        if reply.delay_seconds:
            self._sleep(reply.delay_seconds)
        self._fail(reply)
        calls = [
            ToolCall(f"call-{self.position}-{i}", c.name, dict(c.arguments))
            for i, c in enumerate(reply.tool_calls)
        ]
        return ModelReply(
            text=reply.text,
            tool_calls=calls,
            input_tokens=reply.usage.input_tokens,
            output_tokens=reply.usage.output_tokens,
            confidence=reply.confidence,
            evidence_count=reply.evidence_count,
            verdict=reply.verdict,
            findings=list(reply.findings),
            winner=reply.winner,
        )

    def skip(self) -> None:
        """A call answered from the phase's journal: the next live call gets the reply after it, as it
        would have in one attempt."""
        self.position += 1

    def _fail(self, reply: ScriptedReply) -> None:
        if reply.fail == "raise":
            raise ProviderError(f"scripted failure of role {self.role!r} (reply {self.position})")
        if reply.fail == "hang":
            self._sleep(float("inf"))
        if reply.fail == "kill_worker":
            os.kill(os.getppid(), signal.SIGKILL)
        if reply.fail in ("kill", "kill_worker"):
            os.kill(os.getpid(), signal.SIGKILL)


# One SDK client per endpoint, key and timeout for the life of the process: making one loads the TLS trust
# store (its cost: docs/benchmarks.md, "What a work-horse is spared"). A worker makes it while it sets a
# phase up before forking (workers.phase.prefetch), so each work-horse inherits it ready. The worker sends no
# request on it, so its connection pool is empty at every fork: a horse's connections are its own.
_SDK_CLIENTS: dict[tuple[str | None, str, float], Any] = {}
SDK_CLIENTS_MAX = 64
# None: not tried in this process; False: the warm-up failed (logged)
sdk_warmed: bool | None = None


def sdk_client(base_url: str | None, api_key: str, timeout: float) -> Any:
    """The process's ``openai.OpenAI`` client for these settings, made on first use (the first one
    also warms the SDK up: :func:`warm_up_sdk`)."""
    import openai

    key = (base_url, api_key, timeout)
    client = _SDK_CLIENTS.get(key)
    if client is None:
        if sdk_warmed is None:
            warm_up_sdk()
        # keys rotated many times over: start again
        if len(_SDK_CLIENTS) >= SDK_CLIENTS_MAX:
            _SDK_CLIENTS.clear()
        # the SDK's retries are off: the agent loop sends a transient failure again, each attempt inside its
        # own reservation, so an attempt the provider may have billed is never hidden inside another
        client = _SDK_CLIENTS[key] = openai.OpenAI(
            base_url=base_url, api_key=api_key, timeout=timeout, max_retries=0
        )
    return client


_WARM_REPLY = {
    "id": "warm-up",
    "object": "chat.completion",
    "created": 0,
    "model": "warm-up",
    "choices": [
        {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "ok"}}
    ],
    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
}


def warm_up_sdk() -> None:
    """Send one chat completion through the SDK to an in-memory transport (no socket, no server): the first
    call in a process loads and builds what the SDK makes lazily (docs/benchmarks.md has its cost in a
    fresh work-horse). Done once in the worker, before it forks, each horse's first call starts warm."""
    global sdk_warmed
    import openai

    try:
        try:
            # the SDK's HTTP library from openai 3 on (constraints.txt pins it)
            import httpx2 as http
        except ImportError:
            # before that
            import httpx as http  # type: ignore[no-redef,import-not-found,unused-ignore]
        transport = http.MockTransport(lambda request: http.Response(200, json=_WARM_REPLY))
        with openai.OpenAI(
            base_url="http://warm-up.invalid/v1",
            api_key="warm-up",
            max_retries=0,
            http_client=http.Client(transport=transport),
        ) as client:
            client.chat.completions.create(
                model="warm-up", messages=[{"role": "user", "content": "warm up"}]
            )
        sdk_warmed = True
    # only speed is lost: each horse's first call does this work itself
    except Exception as exc:  # noqa: BLE001
        sdk_warmed = False
        log.warning("sdk_warm_up_failed", error=f"{type(exc).__name__}: {exc}"[:300])


class OpenAIProvider:
    """Chat completions over HTTP with the official SDK (tool calls and usage included)."""

    def __init__(self, name: str, config: ModelConfig) -> None:
        import openai

        api_key = secrets.get(config.api_key_env) if config.api_key_env else ""
        if config.api_key_env and not api_key:
            raise ProviderError(
                f"model {name!r}: environment variable {config.api_key_env} (its API key) is not set"
            )
        self.name, self.base_url = name, config.base_url
        self.model = config.model or name
        self.max_tokens = config.max_output_tokens
        self.call_retries = config.call_retries
        self.structured = config.structured_output == "json_schema"
        self._client = sdk_client(
            config.base_url, api_key or "not-needed", config.request_timeout_seconds
        )
        self._errors = (openai.OpenAIError,)
        self._timeout = openai.APITimeoutError
        self._no_connection = openai.APIConnectionError
        self._status = openai.APIStatusError

    def complete(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        response_format: dict[str, Any] | None = None,
    ) -> ModelReply:
        """One chat completion. A failure the server may have worked on, and billed, before it went wrong
        (a timeout: the request was sent; a 2xx reply that is not a chat completion) is a ProviderError
        with ``may_have_used``: the agent loop charges the prompt's estimate for it rather than nothing.
        ``response_format`` (a JSON schema, :mod:`workers.structured`) is sent when the catalogue says
        the model takes one; a reply in it is read as what it states, one in prose as text."""
        asked = response_format if self.structured else None
        try:
            response = self._client.chat.completions.create(
                model=self.model,
                messages=messages,
                tools=tools or None,
                max_tokens=self.max_tokens,
                **({"response_format": asked} if asked is not None else {}),
            )
        except self._errors as exc:
            if _not_connected(exc):
                # refused, unresolvable, unreachable: sent again (call_retries: a server restarting
                # comes back), then the run ends blocked naming the fix
                raise ModelUnreachable(
                    f"model {self.name!r} at {self.base_url} cannot be reached "
                    f"({_connect_problem(exc)}): start its server or fix models.{self.name}.base_url; "
                    "`mother doctor --models` checks every endpoint",
                    transient=True,
                ) from None
            too_long = _context_refusal(exc) if isinstance(exc, self._status) else None
            if too_long is not None:
                raise ContextTooLong(
                    f"model {self.model}: the server refused the prompt as longer than its context "
                    f"window ({too_long[2]})",
                    prompt_tokens=too_long[0],
                    window=too_long[1],
                ) from None
            raise ProviderError(
                f"model {self.model}: {type(exc).__name__}: {str(exc)[:300]}",
                may_have_used=isinstance(exc, self._timeout),
                **self._transient(exc),
            ) from None
        # the SDK's JSON decoding of a 2xx body that is not JSON
        except ValueError as exc:
            raise ProviderError(
                f"model {self.model}: the reply is not JSON: {str(exc)[:300]}", may_have_used=True
            ) from None
        try:
            return self._reply(response, structured=asked is not None)
        except _NotACompletion as exc:
            problem = str(exc)
        # a body of the wrong shape
        except (AttributeError, TypeError, IndexError, KeyError) as exc:
            problem = f"the reply is not a chat completion ({type(exc).__name__}: {str(exc)[:200]})"
        raise ProviderError(f"model {self.model}: {problem}", may_have_used=True) from None

    def _transient(self, exc: Exception) -> dict[str, Any]:
        """``transient=True`` (and the server's ``retry_after`` seconds, if it sent one) for a failure worth
        sending again: no connection, a timeout, HTTP 408/409/429/5xx."""
        # APITimeoutError is one too
        if isinstance(exc, self._no_connection):
            return {"transient": True}
        if isinstance(exc, self._status) and (
            exc.status_code in _TRANSIENT_STATUSES or exc.status_code >= 500
        ):
            return {"transient": True, "retry_after": _retry_after(exc.response.headers)}
        return {}

    def _reply(self, response: Any, structured: bool = False) -> ModelReply:
        """The SDK's response (built from the server's JSON without validation) as a ModelReply; with
        ``structured``, a content in the asked schema read as what it states."""
        if not response.choices:
            raise _NotACompletion("reply has no choices")
        message = response.choices[0].message
        if message is None:
            raise _NotACompletion("the reply's first choice has no message")
        calls: list[ToolCall] = []
        for call in message.tool_calls or []:
            # an object as it came (some servers send one, not its JSON text); text that is not JSON too:
            # ToolBox.run tells the model
            arguments = raw = call.function.arguments
            if raw is None or isinstance(raw, str):
                with contextlib.suppress(orjson.JSONDecodeError):
                    arguments = orjson.loads(raw or "{}")
            calls.append(
                ToolCall(
                    call.id or f"call-{len(calls)}",
                    call.function.name or "",
                    arguments,
                    raw if isinstance(raw, str) else None,
                )
            )
        input_tokens, output_tokens, note = _usage(response.usage)
        reply = ModelReply(
            text=message.content or None,
            tool_calls=calls,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            usage_note=note,
        )
        stated = structured_fields(message.content) if structured and not calls else None
        if stated is not None:
            reply.text = stated["text"]
            reply.verdict = stated.get("verdict")
            reply.confidence = stated.get("confidence")
            reply.evidence_count = stated.get("evidence_count")
            reply.findings = stated.get("findings", [])
            reply.winner = stated.get("winner")
        return reply


# how servers say a prompt is longer than the model's window (OpenAI, vLLM, llama.cpp, Ollama, others)
_CONTEXT_REFUSAL = re.compile(
    r"context.length|context_length_exceeded|maximum context|context (?:size|window)|"
    r"prompt is too long|too many tokens|input length|exceed_context_size",
    re.IGNORECASE,
)
# the counts some say: llama.cpp "request (4678 tokens) exceeds the available context size (2048
# tokens)"; OpenAI and vLLM "maximum context length is 2048 tokens ... requested 4678 tokens"
_CONTEXT_COUNTS = (
    (
        re.compile(r"request \((\d+) tokens\) exceeds the available context size \((\d+) tokens"),
        (1, 2),
    ),
    (
        re.compile(
            r"maximum context length is (\d+) tokens.*?(?:requested|resulted in|have) (\d+)", re.S
        ),
        (2, 1),
    ),
)


def _context_refusal(exc: Any) -> tuple[int | None, int | None, str] | None:
    """A 400/413 whose message says the prompt is longer than the model's window: (the server's count of
    the prompt, its window, what it said), each count None where it said none; else None."""
    if getattr(exc, "status_code", None) not in (400, 413):
        return None
    text = str(getattr(exc, "message", "") or exc)
    body = getattr(exc, "body", None)
    if body is not None:
        text += " " + str(body)
    if not _CONTEXT_REFUSAL.search(text):
        return None
    for pattern, (prompt_group, window_group) in _CONTEXT_COUNTS:
        found = pattern.search(text)
        if found:
            return int(found[prompt_group]), int(found[window_group]), text[:200]
    return None, None, text[:200]


class _NotACompletion(Exception):
    """A 2xx reply whose body is JSON but not a chat completion (OpenAIProvider makes it a ProviderError)."""


def _not_connected(exc: BaseException) -> bool:
    """An SDK connection error whose cause is the HTTP library's ConnectError (the TCP connection or the
    name lookup failed), not a timeout or a connection dropped mid-reply. The SDK's HTTP library may be
    httpx or a renamed copy of it: its ConnectError is known by name."""
    import openai

    return (
        isinstance(exc, openai.APIConnectionError)
        and not isinstance(exc, openai.APITimeoutError)
        and type(exc.__cause__).__name__ == "ConnectError"
    )


def _connect_problem(exc: BaseException) -> str:
    cause = exc.__cause__
    text = str(cause or exc).strip() or type(cause or exc).__name__
    return text[:200]


def _retry_after(headers: Any) -> float | None:
    """The wait a ``retry-after-ms`` or ``retry-after`` (seconds) header asks for, if it is a usable
    number of seconds; an HTTP date or nonsense is ignored (the loop's own backoff applies)."""
    for name, scale in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        try:
            seconds = float(headers.get(name)) / scale
        except (TypeError, ValueError):
            continue
        if 0 <= seconds < float("inf"):
            return min(seconds, RETRY_AFTER_CAP_SECONDS)
    return None


def _usage(usage: Any) -> tuple[int, int, str | None]:
    """(input, output tokens, None) as the server reported them, or (0, 0, why they cannot be used)."""
    if usage is None:
        return 0, 0, "the server reported no usage"
    counts = (getattr(usage, "prompt_tokens", None), getattr(usage, "completion_tokens", None))
    try:
        return (
            check_amount(counts[0], "prompt_tokens"),
            check_amount(counts[1], "completion_tokens"),
            None,
        )
    except InvalidSpec as exc:
        return 0, 0, f"the server reported unusable usage: {exc.message}"


def make_provider(
    name: str,
    config: ModelConfig,
    *,
    role: str,
    scripts: dict[str, list[ScriptedReply]],
    attempt: int,
    interrupt: Callable[[], None] | None = None,
) -> Provider:
    if config.provider == "scripted":
        # the role's replies on this model (an escalated re-run's), else the role's
        key = f"{role}@{name}" if f"{role}@{name}" in scripts else role
        if key not in scripts:
            raise ProviderError(
                f"model {name!r} is scripted but the spec has no scripts.{role}; add the role's replies"
            )
        return ScriptedProvider(key, scripts[key], attempt, interrupt)
    return OpenAIProvider(name, config)
