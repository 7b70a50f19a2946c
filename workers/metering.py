"""The agent loop's side of the budget guard: reserve → call → settle, tool charges, stops.

Every model call first reserves its most (a conservative prompt estimate plus the
model's max output tokens, and the matching spend) and settles the real usage
after, even if the call failed. An emergency stop makes mutating actions wait
(polling the run) until ``mother budget reset`` or the run's end; read-only
tools go on.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import orjson

from mother.budget import Guard, settle_action, spend_micro_usd
from mother.config import ModelConfig
from mother.errors import BudgetStopped, LimitExceeded
from mother.limits import check_limits, fail_safe_message
from mother.logs import get_logger
from mother.tokens import BYTES_PER_TOKEN, TokenizerCounter, request_estimate, request_texts
from schemas import Usage

__all__ = ["Meter", "estimate_prompt_tokens", "estimate_tokens"]

log = get_logger("metering")


STOP_POLL_SECONDS = 0.5


def estimate_tokens(value: Any) -> int:
    """A conservative estimate: one token per BYTES_PER_TOKEN (3) bytes of the value serialised as JSON."""
    return math.ceil(len(orjson.dumps(value)) / BYTES_PER_TOKEN)


def estimate_prompt_tokens(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> int:
    return estimate_tokens(messages) + estimate_tokens(tools)


class Meter:
    def __init__(
        self,
        guard: Guard,
        model: ModelConfig,
        check_alive: Callable[[], None],
        limits: dict[str, Any] | None = None,
        harness: Any = None,
        model_name: str | None = None,
        context_limit_ratio: float = 0.9,
        calibrate: Callable[[str, int, int], Any] | None = None,
    ) -> None:
        self.guard, self.model, self.check_alive, self.harness = guard, model, check_alive, harness
        # where a call's estimate and reported prompt tokens go (Mother's calibration, by an ask)
        self.calibrate = calibrate
        self.model_name = model_name
        # the hooks' context_limit_reached: fired once, when a prompt fills this much of the model's window
        self.context_window = model.max_tokens - model.reserved_for_output
        self.context_limit = math.ceil(context_limit_ratio * self.context_window)
        self.context_fired = False
        # real models counted by the estimate calibrate it with what the provider reports
        # (a scripted model's usage is made up, so it teaches nothing)
        self.calibrate_as = (
            model_name if model.tokenizer is None and model.provider != "scripted" else None
        )
        # the calibrated request estimate of the call in flight (0: nothing to calibrate)
        self._estimate = 0
        # the conservative prompt estimate of the call in flight (what its reservation holds)
        self._prompt = 0
        # the call in flight's messages and tools
        self._request: tuple[list[dict[str, Any]], list[dict[str, Any]]] | None = None
        self.limits = {
            k: (Decimal(str(v)) if k == "spend" else v) for k, v in (limits or {}).items()
        }
        self._spend = Decimal(0)
        # the run's counters as of the last settle (or phase start)
        self.counters: dict[str, Any] | None = None
        # settle the final call with the phase's last write (one round trip fewer)
        self.defer_final = False
        # that deferred settle: (op, input, output tokens, its journal step)
        self.pending: tuple[str, int, int, dict[str, Any] | None] | None = None
        # what this attempt used, as it goes (a failed attempt reports it too): its calls, tokens, spend,
        # and the time spent waiting on the model and in tools (the agent loop adds those)
        self.spent = Usage()

    def spend_usd(self) -> float:
        return float(self._spend)

    def spend_limit_usd(self) -> float:
        return float(self.limits.get("spend", 0))

    def check_turn(self) -> None:
        """The turn-start check: at the start of every turn, the run's limits against its counters.

        An exceeded limit is a ``limit`` event for the run's hooks; unless one says continue,
        the fail-safe applies: ``LimitExceeded("Limit exceeded: turns_exceeded (10/10)")``.
        """
        got = self.counters
        if not self.limits or got is None:
            return
        cost = {
            "turns": got["model_calls"],
            "input_tokens": got["input_tokens"],
            "output_tokens": got["output_tokens"],
            "spend": Decimal(got["spend_micro_usd"]) / 1_000_000,
            "elapsed_seconds": got["duration_sec"],
        }
        self._spend = cost["spend"]
        event = check_limits(self.limits, cost)
        if event is not None and self.harness is not None:
            decided = self.harness.control(
                "limit",
                event={
                    "code": event["limit_code"],
                    "current": event["current_value"],
                    "max": event["current_max"],
                },
                limit={
                    "code": event["limit_code"],
                    "current": event["current_value"],
                    "max": event["current_max"],
                },
                cost={
                    "current": cost["spend"],
                    "limit": self.limits.get("spend", 0),
                    "turns": cost["turns"],
                },
            )
            # a hook said continue
            if decided is not None:
                return
        if event is not None:
            raise LimitExceeded(
                fail_safe_message(event),
                limit_code=event["limit_code"],
                current=str(event["current_value"]),
                max=str(event["current_max"]),
            )

    def _waiting_out_stops(self, action: Callable[[], Any]) -> Any:
        while True:
            try:
                return action()
            except BudgetStopped:
                # a run that ended meanwhile stops here
                self.check_alive()
                time.sleep(STOP_POLL_SECONDS)

    def reserve(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        step: dict[str, Any] | None = None,
    ) -> str:
        """Reserve the call's most (``step``: its journal step, recorded with the reservation)."""
        self.check_turn()
        # what a call that fails after reaching the server is charged is counted from it
        self._request = (messages, tools)
        prompt = self._prompt = estimate_prompt_tokens(messages, tools)
        self.check_context(prompt)
        if self.calibrate_as is not None:
            # the messages alone: what Mother's context check counts (tool schemas a server's chat
            # template may drop would teach it to undercount)
            self._estimate = request_estimate(messages, [])
        return self._waiting_out_stops(lambda: self.guard.reserve_call(self.model, prompt, step))

    def replayed(self, reply: Any) -> None:
        """A model call answered from the journal: charged nothing now (its attempt paid for it), and
        counted in what this attempt reports, as an uninterrupted phase would count it."""
        self._count(reply.input_tokens, reply.output_tokens)

    def _count(self, input_tokens: int, output_tokens: int) -> None:
        """A model call in what this attempt reports it used."""
        self.spent.model_calls += 1
        self.spent.input_tokens += input_tokens
        self.spent.output_tokens += output_tokens
        self.spent.spend_micro_usd += spend_micro_usd(self.model, input_tokens, output_tokens)

    def check_context(self, prompt: int) -> None:
        """The hooks' ``context_limit_reached``, before a call whose prompt (the conservative estimate its
        reservation is made with) fills ``harness.context_limit_ratio`` of the model's window less
        ``reserved_for_output``: an activity entry, then the event for the hooks (once per attempt). No
        decision carries on; ``abort`` ends the run ``context_budget_exceeded``, ``skip``/``retry``/``fail``
        as for any event."""
        if self.context_fired or prompt < self.context_limit or self.harness is None:
            return
        self.context_fired = True
        window = self.context_window
        detail = {
            "tokens": prompt,
            "window": window,
            "ratio": round(prompt / window, 4),
            "model": self.model_name,
        }
        log.warning("context_limit_reached", run_id=self.guard.run_id, **detail)
        self.harness.record("context_limit_reached", **detail)
        self.harness.control("context_limit_reached", event=detail, context=detail)

    def estimate_usage(self, reply: Any) -> None:
        """A reply without usable token counts (``reply.usage_note`` says why) is charged an estimate instead
        of nothing: the prompt's conservative estimate its reservation was made with, and its output's by
        the same rule. Logged, and recorded in the activity stream as ``usage_estimated``."""
        reply.input_tokens = self._prompt
        reply.output_tokens = estimate_tokens(
            [reply.text, [[c.name, c.arguments] for c in reply.tool_calls]]
        )
        self._estimated(reply.usage_note, reply.input_tokens, reply.output_tokens)

    def estimate_failed(self, why: str) -> int:
        """A call that failed after the server may have worked on it (a timeout, a reply that is not a
        chat completion) reported no usage: it is charged its prompt counted with the model's tokenizer
        when the catalogue names one (what the server tokenized, to the chat template's few tokens), else
        the conservative estimate its reservation was made with. Returns those input tokens."""
        tokens, how = self._prompt, "the prompt's conservative estimate"
        if self.model.tokenizer is not None and self._request is not None:
            counter = TokenizerCounter(self.model.tokenizer)
            tokens = sum(counter.count_many(request_texts(*self._request)))
            how = "the prompt counted with the model's tokenizer"
        self._estimated(f"the call failed after reaching the server ({how}): {why}", tokens, 0)
        return tokens

    def _estimated(self, why: str | None, input_tokens: int, output_tokens: int) -> None:
        # an estimate teaches the calibration nothing
        self._estimate = 0
        log.warning(
            "usage_estimated",
            run_id=self.guard.run_id,
            model=self.model_name,
            why=why,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
        )
        if self.harness is not None:
            self.harness.record(
                "usage_estimated",
                model=self.model_name,
                why=why,
                input_tokens=input_tokens,
                output_tokens=output_tokens,
            )

    def settle(
        self,
        op: str,
        input_tokens: int,
        output_tokens: int,
        *,
        final: bool = False,
        step: dict[str, Any] | None = None,
    ) -> None:
        """Settle a call now; a ``final`` one (the text reply that ends the phase) waits, when
        ``defer_final`` is set, for :meth:`pending_action` to put it in the phase's result ask.
        ``step``: its journal step (its reply), recorded with the settle."""
        self._count(input_tokens, output_tokens)
        if final and self.defer_final:
            self.pending = (op, input_tokens, output_tokens, step)
            return
        self._settle_now(op, input_tokens, output_tokens, step)

    def _settle_now(
        self, op: str, input_tokens: int, output_tokens: int, step: dict[str, Any] | None
    ) -> None:
        self.counters = self.guard.settle_call(
            op, self.model, input_tokens, output_tokens, name=self.model_name, step=step
        )
        self._calibrate(input_tokens)

    def pending_action(self) -> dict[str, Any] | None:
        """The deferred final call's settle, as the guard's action that goes with the phase's result (then
        it is settled); None when there is none."""
        if self.pending is None:
            return None
        op, input_tokens, output_tokens, step = self.pending
        self.pending = None
        self._calibrate(input_tokens)
        return settle_action(
            op,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            spend=spend_micro_usd(self.model, input_tokens, output_tokens),
            model=self.model_name,
            step=step,
        )

    def refused_as_too_long(self, prompt_tokens: int | None) -> None:
        """The server refused the prompt as longer than its window, counting it ``prompt_tokens``: what
        it counted teaches the calibration (the next estimate of this model is closer to it)."""
        if prompt_tokens:
            self._calibrate(prompt_tokens)

    def _calibrate(self, input_tokens: int) -> None:
        if (
            self.calibrate is not None
            and self.calibrate_as is not None
            and self._estimate > 0
            and input_tokens > 0
        ):
            self.calibrate(self.calibrate_as, self._estimate, input_tokens)

    def tool(self, read_only: bool, step: dict[str, Any] | None = None) -> None:
        """Charge a tool call (``step``: its journal step, recorded with the charge)."""
        self._waiting_out_stops(lambda: self.guard.charge_tool(read_only=read_only, step=step))

    def record(self, step: dict[str, Any]) -> None:
        """Record a journal step that charges nothing (a tool call's result)."""
        self.guard.record(step)
