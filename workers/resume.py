"""A phase attempt's steps: numbered as they are made, recorded by Mother with their charges, and replayed
by a later attempt of the phase instead of being paid for again.

``begin`` brings the phase's journal (:mod:`schemas.journal`). While the chain of recorded steps goes on,
the attempt's model calls are answered from it (no model call, no reservation, no charge) as long as
what it would send is what was sent (the digest of the messages and tools, and the model), and its tool
calls are handed their recorded results (an ``idempotent_write`` tool runs again, uncharged, with its
recorded arguments, so the workspace is as they left it on any host). A step that was in flight when its
attempt died is made again, but for a destructive tool's call, which waits for a person. From the first
step that is not replayed on, every step is live, and recorded: ``sent`` with its charge, ``done`` with
its settle (a model call) or after it (a tool call).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from mother.errors import ApprovalRequired
from mother.logs import get_logger
from schemas import Resumed
from schemas.journal import MAX_STEP_BYTES, Chain, Step, chain
from workers.providers import ModelReply, ToolCall

__all__ = ["Resume", "ToolStep", "request_digest"]

log = get_logger("resume")


def request_digest(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> str:
    """The SHA-256 of what a model call sends: its messages and its tools, keys sorted."""
    body = orjson.dumps([messages, tools], option=orjson.OPT_SORT_KEYS)
    return hashlib.sha256(body).hexdigest()


@dataclass
class ToolStep:
    """What a tool call is to the attempt: handed its recorded result (``output``, ``ok``; and
    ``reapply``: run again uncharged, for the workspace), or made live with ``sent`` as its step."""

    number: int
    output: str | None = None
    ok: bool = False
    reapply: bool = False
    sent: dict[str, Any] | None = None

    @property
    def replayed(self) -> bool:
        return self.output is not None


@dataclass
class Resume:
    """One attempt's steps over its phase's ``journal`` (the lane ``lane``'s chain). ``say`` puts an entry
    in the run's activity (an ``emit`` ask); ``granted``: the run's approved tool-call digests; ``digest_of``
    gives a tool call's approval digest (phase, tool, arguments)."""

    chain: Chain
    lane: str
    say: Callable[..., None]
    granted: frozenset[str] = frozenset()
    digest_of: Callable[[str, Any], str] = lambda tool, arguments: ""
    number: int = 0
    replaying: bool = True
    done: Resumed = field(default_factory=Resumed)
    # said once, at the first step: elements of the journal that were not steps
    _checked: bool = False

    @classmethod
    def over(
        cls, journal: list[Any] | None, lane: str, say: Callable[..., None], **kwargs: Any
    ) -> Resume:
        found = chain([j for j in journal or [] if isinstance(j, (str, bytes))], lane)
        return cls(found, lane, say, replaying=len(found) > 0, **kwargs)

    # -- model calls -------------------------------------------------------------------------------------

    def model(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], model: str
    ) -> tuple[ModelReply | None, dict[str, Any] | None]:
        """The next step, a model call sending ``messages`` and ``tools`` to ``model``: its recorded reply
        (replayed), or None and the ``sent`` step its reservation records."""
        number = self._next()
        digest = request_digest(messages, tools)
        if self.replaying:
            sent, done = self.chain.sent.get(number), self.chain.done(number)
            if (
                done is not None
                and sent is not None
                and sent.kind == "model"
                and sent.digest == digest
                and sent.model == model
                and done.reply is not None
            ):
                reply = done.reply
                self.done.model_calls_saved += 1
                self.done.tokens_saved += reply.input_tokens + reply.output_tokens
                self.done.spend_saved_micro_usd += reply.spend_micro_usd
                self._replayed(number)
                return _reply(done), None
            self._stop(number, _why_not(sent, done, "model", model=model, digest=digest))
        return None, self._step(number, kind="model", state="sent", digest=digest, model=model)

    def model_ended(
        self, number: int, reply: ModelReply | None, spend_micro_usd: int
    ) -> dict[str, Any] | None:
        """The ``done`` step of live model call ``number`` (its reply as the loop took it), or ``failed``
        when it raised; None when it is too large to record (said as ``step_not_recorded``)."""
        if reply is None:
            return self._step(number, kind="model", state="failed")
        recorded = {
            "text": reply.text,
            "tool_calls": [
                {"id": c.id, "name": c.name, "arguments": c.arguments, "text": c.text}
                for c in reply.tool_calls
            ],
            "input_tokens": reply.input_tokens,
            "output_tokens": reply.output_tokens,
            "spend_micro_usd": spend_micro_usd,
            "confidence": reply.confidence,
            "evidence_count": reply.evidence_count,
            "verdict": reply.verdict,
            "findings": list(reply.findings),
            "winner": reply.winner,
        }
        return self._sized(self._step(number, kind="model", state="done", reply=recorded))

    # -- tool calls --------------------------------------------------------------------------------------

    def tool(self, call: ToolCall, side_effects: str) -> ToolStep:
        """The next step, tool call ``call`` of a tool of class ``side_effects``: its recorded result, or
        the ``sent`` step of a live call. A destructive call in flight when its attempt died, not approved
        since, raises ApprovalRequired: a person decides whether it runs again."""
        number = self._next()
        arguments = call.arguments
        if self.replaying:
            sent, ended = self.chain.sent.get(number), self.chain.ended.get(number)
            same = (
                sent is not None
                and sent.kind == "tool"
                and sent.tool == call.name
                and sent.arguments == arguments
            )
            if same and ended is not None and ended.state == "done":
                self.done.tool_calls_saved += 1
                self._replayed(number)
                return ToolStep(
                    number,
                    output=ended.output,
                    ok=bool(ended.ok),
                    reapply=side_effects == "idempotent_write",
                )
            if same and ended is None and side_effects == "destructive":
                self._in_flight(number, call)
            self._stop(number, _why_not(sent, ended, "tool", tool=call.name, arguments=arguments))
        step = self._step(
            number,
            kind="tool",
            state="sent",
            tool=call.name,
            call_id=call.id,
            arguments=arguments,
            side_effects=side_effects,
        )
        return ToolStep(number, sent=self._sized(step))

    def tool_ended(self, number: int, output: str, ok: bool) -> dict[str, Any] | None:
        """The ``done`` step of live tool call ``number``: its output as the model saw it."""
        return self._sized(self._step(number, kind="tool", state="done", output=output, ok=ok))

    def _in_flight(self, number: int, call: ToolCall) -> None:
        """A destructive call that was in flight: approved since (its digest granted), it runs again;
        otherwise a person is asked."""
        digest = self.digest_of(call.name, call.arguments)
        if digest in self.granted:
            return
        self._finish_replay()
        arguments = call.arguments if isinstance(call.arguments, dict) else {}
        raise ApprovalRequired(
            f"tool {call.name} was in flight (step {number}) when the phase's last attempt died and may "
            "have run; it is destructive, so it runs again only once a person approves",
            request={
                "tool": call.name,
                "digest": digest,
                "arguments": arguments,
                "subject": f"{call.name} in flight (step {number})",
                "question": (
                    f"The phase's last attempt died while destructive tool {call.name} was running "
                    f"(step {number}, arguments {orjson.dumps(arguments).decode()[:2000]}); it may have "
                    "run. Approve to run it again, or deny to end the run."
                ),
            },
        )

    # -- the steps ---------------------------------------------------------------------------------------

    def summary(self) -> Resumed | None:
        """What the attempt replayed and made live (None: it replayed nothing)."""
        self.done.steps = self.number
        return self.done if self.done.replayed else None

    def _next(self) -> int:
        if not self._checked:
            self._checked = True
            if self.chain.malformed:
                self.say(
                    "journal_malformed",
                    elements=self.chain.malformed[:20],
                    note="elements of the phase's journal that are not steps were skipped",
                )
        self.number += 1
        return self.number

    def _replayed(self, number: int) -> None:
        self.done.replayed = number

    def _stop(self, number: int, why: str | None) -> None:
        """Replay ends at step ``number``: it goes on live from there; ``why`` a divergence (the
        recorded step differs from what the attempt makes now), None when the chain just ended there."""
        if why is not None:
            self.done.diverged = f"step {number}: {why}"
            self.say("resume_diverged", step=number, why=why)
        self._finish_replay()

    def _finish_replay(self) -> None:
        if not self.replaying:
            return
        self.replaying = False
        if self.done.replayed:
            self.say(
                "phase_resumed",
                replayed=self.done.replayed,
                live_from=self.done.replayed + 1,
                model_calls_saved=self.done.model_calls_saved,
                tool_calls_saved=self.done.tool_calls_saved,
                tokens_saved=self.done.tokens_saved,
                spend_saved_micro_usd=self.done.spend_saved_micro_usd,
            )

    def _step(self, number: int, **fields: Any) -> dict[str, Any]:
        return {"step": number, "lane": self.lane, **fields}

    def _sized(self, step: dict[str, Any]) -> dict[str, Any] | None:
        """``step``, or None when it is larger than a recorded step may be (said once per step)."""
        size = len(orjson.dumps(step))
        if size <= MAX_STEP_BYTES - 512:
            return step
        self.say("step_not_recorded", step=step["step"], bytes=size, most=MAX_STEP_BYTES)
        return None


def _reply(done: Step) -> ModelReply:
    recorded = done.reply
    assert recorded is not None
    return ModelReply(
        text=recorded.text,
        tool_calls=[ToolCall(c.id, c.name, c.arguments, c.text) for c in recorded.tool_calls],
        input_tokens=recorded.input_tokens,
        output_tokens=recorded.output_tokens,
        confidence=recorded.confidence,
        evidence_count=recorded.evidence_count,
        verdict=recorded.verdict,
        findings=list(recorded.findings),
        winner=recorded.winner,
    )


def _why_not(sent: Step | None, ended: Step | None, kind: str, **now: Any) -> str | None:
    """Why a recorded step is not replayed: None when the chain has no such step (it ended there) or the
    step was in flight or failed (made again: no divergence); else what differs."""
    if sent is None:
        return None
    if sent.kind != kind:
        return f"the journal has a {sent.kind} call there, the attempt makes a {kind} call"
    if kind == "model":
        if sent.model != now["model"]:
            return f"the model is {now['model']}, the journal's was {sent.model}"
        if sent.digest != now["digest"]:
            return "the conversation differs from the one recorded (context, role or tools changed)"
    elif sent.tool != now["tool"] or sent.arguments != now["arguments"]:
        return f"the call is {now['tool']} with other arguments than the journal's {sent.tool}"
    return None
