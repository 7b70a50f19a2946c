"""The scripted model provider's replies: for tests, the offline demo and replaying incidents."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, JsonValue, StringConstraints, model_validator

from schemas._base import Id, Record, Shallow

__all__ = ["ScriptedReply", "ScriptedToolCall", "ScriptedUsage"]


class ScriptedToolCall(Record):
    """A tool the scripted model asks for."""

    name: Id
    arguments: Annotated[dict[str, JsonValue], Shallow] = Field(default_factory=dict)


class ScriptedUsage(Record):
    input_tokens: int = Field(0, ge=0, le=10_000_000)
    output_tokens: int = Field(0, ge=0, le=10_000_000)


class ScriptedReply(Record):
    """One reply: text (final answer) or tool calls, with usage and an optional failure.

    ``fail``: ``raise`` raises inside the model call (the phase fails), ``hang``
    never returns (the phase times out), ``kill`` SIGKILLs the work-horse process,
    ``kill_worker`` SIGKILLs the whole worker (parent and horse). ``attempts``
    limits the reply to those phase attempts (1-based); other attempts skip it.
    """

    text: Annotated[str, StringConstraints(max_length=1_000_000)] | None = None
    tool_calls: list[ScriptedToolCall] = Field(default_factory=list, max_length=100)
    usage: ScriptedUsage = Field(default_factory=ScriptedUsage)
    confidence: float = Field(0.9, ge=0.0, le=1.0)
    evidence_count: int = Field(0, ge=0)
    delay_seconds: float = Field(0.0, ge=0.0, le=3600.0)
    fail: Literal["raise", "hang", "kill", "kill_worker"] | None = None
    verdict: Literal["accept", "reject"] | None = Field(
        None, description="a reviewing role's decision (else read from the text: VERDICT: ...)"
    )
    findings: list[Literal["contradiction", "ambiguity"]] = Field(
        default_factory=list, max_length=2
    )
    winner: Id | None = Field(None, description="an arbiter's chosen proposal (a phase name)")
    attempts: list[Annotated[int, Field(ge=1)]] | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> ScriptedReply:
        if self.fail is None and self.text is None and not self.tool_calls:
            raise ValueError("a scripted reply needs text, tool_calls or fail")
        return self
