"""The SafetyHarness around a phase: hooks at run_started, limit, error, after_step and context_limit_reached.

A control hook's decision becomes a ``HookDecision`` exception that the phase turns
into its outcome: ``retry`` and ``fail`` fail the attempt (Mother retries it while
it has retries), ``skip`` completes the phase now, ``abort`` ends the run
(``budget_exhausted`` for a limit event, ``context_budget_exceeded`` for
``context_limit_reached``, ``catastrophic_error`` otherwise),
``continue`` carries on. Notices become ``hook_notice`` activity entries; ``spawn``
starts a child run through the ``spawn_run`` tool without waiting.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mother.errors import HookDecision
from mother.hooks import Decision, HarnessAction, HookSet
from schemas import RunState

__all__ = ["Harness"]


@dataclass
class Harness:
    # the attempt's asks (workers.asking.AttemptAsks): its activity entries
    asks: Any
    state: RunState
    phase_index: int
    hooks: HookSet
    spawn: Callable[[dict[str, Any]], str] | None = None

    def activation(self, name: str, **extra: Any) -> dict[str, Any]:
        """What a hook condition sees: event (name + details), run, and the caller's extras (cost, limit, error)."""
        phase = self.state.spec.pipeline[self.phase_index]
        return {
            "event": {"name": name, **extra.pop("event", {})},
            "run": {
                "run_id": self.state.run_id,
                "user_id": self.state.user_id,
                "phase": phase.name,
                "role": phase.role,
            },
            **extra,
        }

    def context(self) -> str:
        return self.hooks.run_context("run_started", self.activation("run_started"))

    def control(self, name: str, **extra: Any) -> HarnessAction | None:
        """Run the control hooks of event ``name``; raise HookDecision unless they say continue (or nothing)."""
        decision = self.hooks.run_control(name, self.activation(name, **extra))
        self._side_effects(name, decision)
        if decision.action in (None, HarnessAction.CONTINUE):
            return decision.action
        raise HookDecision(
            f"hook {decision.hook} decided {decision.action.value} on {name}"
            + (f": {decision.message}" if decision.message else ""),
            action=decision.action.value,
            event=name,
            hook=decision.hook,
        )

    def record(self, event_type: str, **data: Any) -> None:
        """An activity entry for this run and phase."""
        self.asks.emit(event_type, phase=self.state.spec.pipeline[self.phase_index].name, **data)

    def permission_denied(self, event: dict[str, Any]) -> None:
        """Record the SafetyHarness's permission_denied event and give the error hooks their say."""
        self.record("permission_denied", **event["detail"])
        self.control(
            "error",
            error={"type": "permission_denied", "message": "permission denied", **event["detail"]},
        )

    def _side_effects(self, event: str, decision: Decision) -> None:
        for hook, action in decision.side_effects:
            if action.type == "notice":
                self.record(
                    "hook_notice",
                    hook=hook.spec.id,
                    layer=hook.layer,
                    hook_event=event,
                    message=action.message,
                )
            elif action.type == "spawn" and self.spawn is not None:
                self.spawn(
                    {
                        "role": action.role,
                        "task": action.task or action.message,
                        "budget": action.budget or "0",
                        "wait": False,
                    }
                )
