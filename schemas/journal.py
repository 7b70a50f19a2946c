"""``journal:{run_id}:{phase_index}``: a phase's steps, one list element each, appended by Mother.

Every model call and every tool call of a phase attempt is a numbered step. Mother appends its ``sent``
record in the guard call that charges it (a model call's reservation, a tool call's charge) and its
``done`` (or ``failed``) record in the call that settles it (a model call's settle; for a tool, a record
that charges nothing), so a charged step is a recorded step and the other way round. A later attempt of
the phase replays the chain of done steps (:func:`chain`) and goes on live from the first step that is
not done. No I/O here.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import orjson
from pydantic import Field, JsonValue, StringConstraints, model_validator

from schemas._base import Id, ModelName, Record, Shallow, Timestamp
from schemas.tool import SideEffects

__all__ = ["MAX_STEP_BYTES", "Chain", "RecordedCall", "RecordedReply", "Step", "chain"]

# a step larger than this is not recorded (the worker says step_not_recorded; a resume stops there)
MAX_STEP_BYTES = 256 * 1024


class RecordedCall(Record):
    """A tool call as the model made it (its id, the tool's name, its arguments, their text)."""

    id: Annotated[str, StringConstraints(max_length=256)]
    name: Annotated[str, StringConstraints(max_length=256)]
    arguments: Annotated[JsonValue, Shallow] = None
    text: str | None = None


class RecordedReply(Record):
    """A model's reply as the agent loop took it: its text and tool calls, the tokens it was charged,
    and what a scripted model states outright."""

    text: str | None = None
    tool_calls: list[RecordedCall] = Field(default_factory=list, max_length=1000)
    input_tokens: int = Field(0, ge=0)
    output_tokens: int = Field(0, ge=0)
    spend_micro_usd: int = Field(0, ge=0)
    confidence: float | None = Field(None, ge=0.0, le=1.0)
    evidence_count: int | None = Field(None, ge=0)
    verdict: Annotated[str, StringConstraints(max_length=64)] | None = None
    findings: list[Annotated[str, StringConstraints(max_length=64)]] = Field(
        default_factory=list, max_length=100
    )
    winner: Annotated[str, StringConstraints(max_length=128)] | None = None


class Step(Record):
    """One step of a phase attempt, as recorded: ``sent`` (charged, not yet answered), ``done`` (its
    reply or result) or ``failed`` (a model call that failed after its charge: made again on resume)."""

    step: int = Field(ge=1, le=100_000, description="its number in the phase's chain of steps")
    attempt: int = Field(ge=1, description="the attempt that made it (set by Mother from the ask)")
    lane: Annotated[str, StringConstraints(max_length=200)] = Field(
        "",
        description="'' for the phase's own work; a conflict's attempt (an arbiter, an "
        "escalation) keeps its own steps under '{kind}:{conflict_id}'",
    )
    kind: Literal["model", "tool"]
    state: Literal["sent", "done", "failed"]
    at: Timestamp | None = Field(None, description="server time Mother recorded it (set by Mother)")
    # a model call: the SHA-256 of the messages and tools it sends, and the model
    digest: Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")] | None = None
    model: ModelName | None = None
    reply: RecordedReply | None = None
    # a tool call: the tool, its arguments, its side-effect class; done: its output as the model saw it
    tool: Id | None = None
    call_id: Annotated[str, StringConstraints(max_length=256)] | None = None
    arguments: Annotated[JsonValue, Shallow] = None
    side_effects: SideEffects | None = None
    output: str | None = None
    ok: bool | None = None

    @model_validator(mode="after")
    def _shaped(self) -> Step:
        if self.kind == "model" and self.state == "sent" and (not self.digest or not self.model):
            raise ValueError("a model call's sent step names its request's digest and its model")
        if self.kind == "model" and self.state == "done" and self.reply is None:
            raise ValueError("a model call's done step carries its reply")
        if self.kind == "tool" and self.state == "sent" and not self.tool:
            raise ValueError("a tool call's sent step names its tool")
        if (
            self.kind == "tool"
            and self.state == "done"
            and (self.output is None or self.ok is None)
        ):
            raise ValueError("a tool call's done step carries its output and whether it was ok")
        return self

    def to_text(self) -> bytes:
        """The step as Mother appends it: JSON without the fields it leaves unset."""
        return orjson.dumps(self.model_dump(mode="json", exclude_none=True))


class Chain:
    """The steps a new attempt of a phase may replay, by number: each a ``sent`` step and, once its
    reply or result came, that (``done`` or ``failed``)."""

    def __init__(self) -> None:
        self.sent: dict[int, Step] = {}
        self.ended: dict[int, Step] = {}
        # elements that were not steps (their position in the list): skipped, said once
        self.malformed: list[int] = []

    def __len__(self) -> int:
        return len(self.sent)

    def done(self, number: int) -> Step | None:
        """Step ``number``'s done record, when it is done."""
        ended = self.ended.get(number)
        return ended if ended is not None and ended.state == "done" else None

    def complete(self) -> bool:
        """Whether the chain ends with a model's final reply (text, no tool call): its attempt finished
        its work, and a new attempt starts afresh rather than replay it."""
        if not self.sent:
            return False
        last = self.done(max(self.sent))
        return (
            last is not None
            and last.kind == "model"
            and last.reply is not None
            and not last.reply.tool_calls
        )


def chain(elements: list[Any], lane: str, *, keep_complete: bool = False) -> Chain:
    """The chain of ``lane``'s steps in a journal's ``elements`` (in the order Mother appended them):
    a step ``sent`` as number n by an attempt replaces what earlier attempts recorded from n on (a
    resumed attempt re-makes a step in flight, or a diverged one goes on with its own); a ``done`` or
    ``failed`` record completes the ``sent`` step of its number and attempt. An element that is not a
    step is skipped (its position noted). A chain that ends with a final reply starts afresh, unless
    ``keep_complete`` (a replay bundle's replies are the finished chain's)."""
    found = Chain()
    for position, raw in enumerate(elements):
        try:
            step = Step.model_validate_json(raw)
        except ValueError:
            found.malformed.append(position)
            continue
        if step.lane != lane:
            continue
        if step.state == "sent":
            for number in [n for n in found.sent if n >= step.step]:
                found.sent.pop(number)
                found.ended.pop(number, None)
            found.sent[step.step] = step
            continue
        sent = found.sent.get(step.step)
        if sent is not None and sent.attempt == step.attempt and sent.kind == step.kind:
            found.ended[step.step] = step
    if found.complete() and not keep_complete:
        return Chain()
    return found
