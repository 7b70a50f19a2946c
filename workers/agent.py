"""The agent loop: call the model → run the tools it asks for → feed results back → until text."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

import orjson

from mother.budget import spend_micro_usd
from mother.errors import ApprovalRequired, ContextTooLong, ProviderError
from mother.logs import get_logger
from schemas import Usage
from workers.harness import Harness
from workers.metering import Meter
from workers.providers import ModelReply, Provider, ToolCall
from workers.resume import Resume
from workers.tools import ToolBox

log = get_logger("agent")

# the wait before sending a transiently failed model call again, when the server asked for none
RETRY_BACKOFF_SECONDS = 0.5
RETRY_BACKOFF_CAP_SECONDS = 8.0

__all__ = ["LoopOutcome", "Spans", "TurnLimits", "no_span", "run_loop"]

# a span of the run's trace for the block (mother.telemetry.span bound to the run): name, attributes
Spans = Callable[..., AbstractContextManager[Any]]


@contextlib.contextmanager
def no_span(name: str, attributes: dict[str, Any] | None = None) -> Iterator[None]:
    """No span (traces off)."""
    yield None


# providers that report none (real chat models) get this
DEFAULT_CONFIDENCE = 0.5


@dataclass(frozen=True)
class TurnLimits:
    """Per-turn tool limits: tool calls per turn, and tool calls in a row without a text reply."""

    max_tool_calls: int = 20
    max_consecutive_tools: int = 10


@dataclass
class LoopOutcome:
    text: str
    confidence: float
    evidence_count: int
    usage: Usage = field(default_factory=Usage)
    notices: list[str] = field(default_factory=list)
    # the final reply's, as a scripted model stated them (else None / empty: read from the text)
    verdict: str | None = None
    findings: list[str] = field(default_factory=list)
    winner: str | None = None


def run_loop(
    provider: Provider,
    toolbox: ToolBox,
    messages: list[dict[str, Any]],
    *,
    max_calls: int,
    check_alive: Callable[[], None],
    meter: Meter | None = None,
    limits: TurnLimits = TurnLimits(),
    harness: Harness | None = None,
    resume: Resume | None = None,
    response_format: dict[str, Any] | None = None,
    span: Spans = no_span,
) -> LoopOutcome:
    """Run until the model answers with text; ``check_alive`` raises to stop between actions.

    It is called before every model call but the first (the caller has just checked)
    and before every tool call. With a ``meter``, each model and tool call is a step of the phase's
    journal (``resume``): replayed when an earlier attempt recorded it, else made live and recorded.
    """
    usage = Usage()
    evidence = 0
    consecutive = 0
    last_text = ""
    for call_number in range(max_calls):
        # the caller checked before the first call
        if call_number:
            check_alive()
        reply = _model_call(
            provider, toolbox, messages, meter, harness, check_alive, resume, response_format, span
        )
        usage.model_calls += 1
        usage.input_tokens += reply.input_tokens
        usage.output_tokens += reply.output_tokens
        if harness is not None:
            harness.control("after_step", cost=_step_cost(usage, meter))
        if reply.text:
            # a text reply resets the consecutive count
            consecutive, last_text = 0, reply.text
        confidence = reply.confidence if reply.confidence is not None else DEFAULT_CONFIDENCE
        if not reply.tool_calls:
            if reply.text is None:
                raise ProviderError("the model replied with neither text nor tool calls")
            if reply.evidence_count is not None:
                evidence = reply.evidence_count
            return LoopOutcome(
                text=reply.text,
                confidence=confidence,
                evidence_count=evidence,
                usage=usage,
                verdict=reply.verdict,
                findings=list(reply.findings),
                winner=reply.winner,
            )
        messages.append(_assistant_message(reply))
        for call in reply.tool_calls:
            check_alive()
            content, ran, evidential = _tool_call(toolbox, call, meter, harness, resume, span)
            usage.tool_calls += 1
            consecutive += 1
            evidence += evidential
            messages.append({"role": "tool", "tool_call_id": call.id, "content": content})
            # the tool that reached the limit has completed; the loop stops here (a refused
            # call ran nothing and does not stop it)
            hit = _turn_limit_hit(limits, usage.tool_calls, consecutive) if ran else None
            if hit:
                return LoopOutcome(
                    text=f"{hit}; stopped.\n{last_text}".rstrip(),
                    confidence=confidence,
                    evidence_count=evidence,
                    usage=usage,
                    notices=[hit],
                )
    raise ProviderError(
        f"the model made {max_calls} calls without a final text reply (worker.max_model_calls_per_phase)"
    )


def _step_cost(usage: Usage, meter: Meter | None) -> dict[str, Any]:
    """What the after_step hooks see of the phase's cost so far."""
    return {
        "turns": usage.model_calls,
        "tokens": usage.input_tokens + usage.output_tokens,
        "current": meter.spend_usd() if meter else 0.0,
        "limit": meter.spend_limit_usd() if meter else 0.0,
    }


def _assistant_message(reply: ModelReply) -> dict[str, Any]:
    """The model's turn as the conversation keeps it: what it said beside its calls, and the calls."""
    return {
        "role": "assistant",
        "content": reply.text,
        "tool_calls": [
            {
                "id": c.id,
                "type": "function",
                "function": {"name": c.name, "arguments": _arguments_text(c)},
            }
            for c in reply.tool_calls
        ],
    }


def _tool_call(
    toolbox: ToolBox,
    call: ToolCall,
    meter: Meter | None,
    harness: Harness | None,
    resume: Resume | None = None,
    span: Spans = no_span,
) -> tuple[str, bool, bool]:
    """Run one call the model made, or refuse it: what the model is told, whether the tool ran, and
    whether its result is evidence (a read-only tool that succeeded). A call the journal recorded is
    handed its recorded result (an idempotent write runs again, uncharged, for the workspace)."""
    refused = toolbox.check_permission(call.name)
    if refused is not None:
        if harness is not None:
            harness.permission_denied(refused)
        return refused_text(refused), False, False
    # a call that cannot run is never put to a person
    problem = toolbox.input_problem(call.name, call.arguments)
    if problem is not None:
        return f"error: {problem}", False, False
    request = toolbox.needs_approval(call.name, call.arguments)
    if request is not None:
        raise ApprovalRequired(
            f"tool {call.name} needs a person's approval before it runs; the phase stopped before "
            "the call and runs again once it is approved",
            request=request,
        )
    read_only = toolbox.is_read_only(call.name)
    step = (
        resume.tool(call, toolbox.side_effects(call.name))
        if resume is not None and meter is not None
        else None
    )
    if step is not None and step.replayed:
        if step.reapply:
            toolbox.run(call.name, call.arguments)
        assert meter is not None and step.output is not None
        meter.spent.tool_calls += 1
        return step.output, True, step.ok and read_only
    if meter is not None:
        meter.tool(read_only=read_only, step=step.sent if step is not None else None)
    began = time.monotonic()
    attributes = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": call.name,
        "gen_ai.tool.call.id": call.id,
    }
    try:
        with span(f"execute_tool {call.name}", attributes) as traced:
            result = toolbox.run(call.name, call.arguments)
            if traced is not None and not result.ok:
                traced.set_attribute("error.type", "tool_error")
    finally:
        if meter is not None:
            meter.spent.tool_ms += int((time.monotonic() - began) * 1000)
            meter.spent.tool_calls += 1
    if step is not None and step.sent is not None and resume is not None and meter is not None:
        done = resume.tool_ended(step.number, result.output, result.ok)
        if done is not None:
            meter.record(done)
    return result.output, True, result.ok and read_only


def _arguments_text(call: ToolCall) -> str:
    """A call's arguments as the model sent them: its own text (JSON or not), else the object as JSON
    (arguments that are a string always came as text)."""
    return call.text if call.text is not None else orjson.dumps(call.arguments).decode()


def refused_text(event: dict[str, Any]) -> str:
    detail = event["detail"]
    return f"error: permission_denied: missing {', '.join(detail['missing'])}; granted {', '.join(detail['granted'])}"


def _turn_limit_hit(limits: TurnLimits, tool_calls: int, consecutive: int) -> str | None:
    if tool_calls >= limits.max_tool_calls:
        return f"Limit reached: max_tool_calls per turn ({tool_calls}/{limits.max_tool_calls})"
    if consecutive >= limits.max_consecutive_tools:
        return f"Limit reached: max_consecutive_tools without a text reply ({consecutive}/{limits.max_consecutive_tools})"
    return None


def _model_call(
    provider: Provider,
    toolbox: ToolBox,
    messages: list[dict[str, Any]],
    meter: Meter | None,
    harness: Harness | None = None,
    check_alive: Callable[[], None] | None = None,
    resume: Resume | None = None,
    response_format: dict[str, Any] | None = None,
    span: Spans = no_span,
) -> ModelReply:
    """One model call inside a reservation. A transient failure (no connection, a timeout, HTTP
    408/409/429/5xx) is sent again up to ``provider.call_retries`` times, after the server's
    ``retry_after`` or a doubling backoff, each attempt reserved and charged on its own; any other
    failure (or the last) is an error event that lets hooks retry it."""
    retries = 0
    while True:
        try:
            return _metered_call(provider, toolbox, messages, meter, resume, response_format, span)
        except ProviderError as exc:
            if exc.transient and retries < provider.call_retries:
                retries += 1
                wait = exc.retry_after
                if wait is None:
                    wait = min(
                        RETRY_BACKOFF_CAP_SECONDS, RETRY_BACKOFF_SECONDS * 2 ** (retries - 1)
                    )
                log.warning(
                    "model_call_retried", retry=retries, wait_seconds=wait, error=exc.message
                )
                if harness is not None:
                    harness.record(
                        "model_call_retried", retry=retries, wait_seconds=wait, error=exc.message
                    )
                time.sleep(wait)
                if check_alive is not None:
                    # a run that ended during the wait stops here
                    check_alive()
                continue
            if (
                harness is None
                or harness.control("error", error={"type": exc.code, "message": exc.message})
                is None
            ):
                raise
            # a hook said continue: call the model again (bounded by the hooks' conditions)


def _metered_call(
    provider: Provider,
    toolbox: ToolBox,
    messages: list[dict[str, Any]],
    meter: Meter | None,
    resume: Resume | None = None,
    response_format: dict[str, Any] | None = None,
    span: Spans = no_span,
) -> ModelReply:
    """One model call inside a reservation; what it used is settled even if it failed. A call the
    journal recorded is answered from it: no model call, no reservation, no charge. A live call is a
    ``chat {model}`` span (the GenAI semantic conventions' attributes) when traces are on."""
    if meter is None:
        return provider.complete(messages, toolbox.specs(), response_format)
    specs = toolbox.specs()
    recorded, sent = (
        resume.model(messages, specs, meter.model_name or "")
        if resume is not None
        else (None, None)
    )
    if recorded is not None:
        meter.replayed(recorded)
        # the scripted model answers the live calls after it by their step
        skip = getattr(provider, "skip", None)
        if skip is not None:
            skip()
        return recorded
    op = meter.reserve(messages, specs, step=sent)
    reply, used = None, (0, 0)
    began = time.monotonic()
    sent_model = meter.model.model or meter.model_name or ""
    attributes = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": meter.model.provider,
        "gen_ai.request.model": sent_model,
        "gen_ai.request.max_tokens": meter.model.max_output_tokens,
    }
    try:
        with span(f"chat {sent_model}", attributes) as traced:
            reply = provider.complete(messages, specs, response_format)
            if traced is not None:
                traced.set_attributes(
                    {
                        "gen_ai.usage.input_tokens": reply.input_tokens,
                        "gen_ai.usage.output_tokens": reply.output_tokens,
                        "gen_ai.response.finish_reasons": [
                            "tool_calls" if reply.tool_calls else "stop"
                        ],
                    }
                )
        meter.spent.model_ms += int((time.monotonic() - began) * 1000)
        if reply.usage_note is not None:
            meter.estimate_usage(reply)
        used = (reply.input_tokens, reply.output_tokens)
        return reply
    except ProviderError as exc:
        meter.spent.model_ms += int((time.monotonic() - began) * 1000)
        # the server may have billed it: the prompt's estimate, not nothing
        if exc.may_have_used:
            used = (meter.estimate_failed(exc.message), 0)
        if isinstance(exc, ContextTooLong):
            meter.refused_as_too_long(exc.prompt_tokens)
        raise
    finally:
        done = (
            resume.model_ended(sent["step"], reply, spend_micro_usd(meter.model, *used))
            if resume is not None and sent is not None
            else None
        )
        meter.settle(
            op,
            *used,
            final=reply is not None and not reply.tool_calls and reply.text is not None,
            step=done,
        )
