"""The ``spawn_run`` tool: an agent starts a child run through Mother.

The tool asks its host's Mother to spawn (:mod:`mother.asks.spawn`): Mother makes the child's spec from
the parent's record, checks its depth, charges the parent's ``spawns`` and ``parallel_agents``, reserves
the child's budget in the spend ledger (a parent never hands out more than it has left) and submits the
child as the parent's user. With ``wait`` (default) the tool returns the child's outcome, asking Mother
how it stands every ``WAIT_POLL_SECONDS``; Mother settles the ledger when the child ends.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, ClassVar

from mother.errors import AskRefused, InvalidSpec, ToolError
from mother.logs import get_logger
from schemas import RunState

__all__ = ["SpawnRun"]

WAIT_POLL_SECONDS = 0.2

log = get_logger(__name__)


class SpawnRun:
    name = "spawn_run"
    description = (
        "Start a child run for another role and (by default) wait for its result. "
        "Arguments: role, task, budget (USD), limit_overrides, model, wait."
    )
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "role": {"type": "string"},
            "task": {"type": "string"},
            "budget": {"type": "string"},
            "limit_overrides": {"type": "object"},
            "model": {"type": "string"},
            "wait": {"type": "boolean"},
        },
        "required": ["role", "task", "budget"],
    }
    read_only = False

    def __init__(
        self, asks: Any, state: RunState, phase_index: int, _claim_idle: float = 0
    ) -> None:
        self.asks, self.state = asks, state
        self.phase = state.spec.pipeline[phase_index]

    def run(self, workspace: Path, arguments: dict[str, Any]) -> str:
        given = {k: v for k, v in arguments.items() if k != "wait"}
        try:
            reply = self.asks.ask("spawn", {"arguments": given})
        except AskRefused as exc:
            raise ToolError(exc.message) from None
        except InvalidSpec as exc:
            raise ToolError(exc.message) from None
        child_id = str(reply["child"])
        if arguments.get("wait", True) is False:
            return f"spawned {child_id}"
        return self._wait(child_id)

    def _wait(self, child_id: str) -> str:
        while True:
            got = self.asks.ask("child", {"child": child_id})
            if got.get("state") == "ended":
                return str(got.get("text", ""))
            if got.get("state") == "refused":
                raise ToolError(f"cannot spawn: {got.get('error')}")
            # the parent ending (deadline, cancel) stops the wait: Mother refuses the ask (PhaseStale)
            time.sleep(WAIT_POLL_SECONDS)
