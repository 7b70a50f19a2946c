"""The ``spawn_run`` tool: an agent starts a child run through Mother.

The child is a submission on ``mother:spawns`` with ``parent_run_id``: the attempt writes its spec to its
own key for it and says so on Mother's relay channel, and Mother appends it there
(:func:`mother.budget.queue_spawn_request`). Mother takes it only as a child of a run that has not ended, for the parent's own
user, and resolves its limits against the parent's (depth decrements). Before
submitting, the tool charges the parent's ``spawns`` and ``parallel_agents`` in the
budget guard and reserves the child's budget in the spend ledger, so a parent can
never hand out more than it has left. With ``wait`` (default) the tool returns the
child's outcome; Mother settles the ledger when the child ends.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any, ClassVar

from pydantic import ValidationError

from mother import keys
from mother.budget import Guard, ask_for_child, queue_spawn_request
from mother.errors import (
    BudgetExhausted,
    DepthExhausted,
    InsufficientBudget,
    InvalidSpec,
    QueueFull,
    ToolError,
)
from mother.limits import resolve_limits
from mother.logs import get_logger
from mother.records.budgets import read_own_spend
from mother.records.rejections import read_rejection_for
from mother.records.results import read_result
from mother.runtime import Runtime
from schemas import SPAWNED_BY, RunSpec, RunState, describe_validation_error

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
        self,
        rt: Runtime,
        state: RunState,
        phase_index: int,
        guard: Guard,
        check_alive: Callable[[], None],
    ) -> None:
        self.rt, self.state, self.guard, self.check_alive = rt, state, guard, check_alive
        self.phase = state.spec.pipeline[phase_index]

    def run(self, workspace: Path, arguments: dict[str, Any]) -> str:
        spec = self._child_spec(arguments)
        try:
            # depth check before anything is charged
            resolve_limits({}, None, None, self.state.limits)
        except DepthExhausted as exc:
            raise self._refused(spec, exc.message, exc.code) from None
        try:
            self.guard.charge("spawns")
            self.guard.charge("parallel_agents")
        except BudgetExhausted as exc:
            raise self._refused(spec, f"cannot spawn: {exc.message}", exc.code) from None
        ledger = self.rt.ledger
        assert spec.run_id is not None
        reserved = False
        try:
            # so "remaining" counts what we spent
            ledger.report_actual(self.state.run_id, self._own_spend())
            ledger.reserve(spec.run_id, Decimal(str(arguments["budget"])), self.state.run_id)
            reserved = True
            ask_for_child(
                self.rt.redis,
                self.rt.settings,
                payload=spec.to_json(),
                run_id=spec.run_id,
                user_id=spec.user_id,
            )
        # give back what a child that will not run took (one Mother refuses later, Mother gives back)
        except (InsufficientBudget, InvalidSpec, QueueFull) as exc:
            self.guard.release("parallel_agents")
            if reserved:
                ledger.release(spec.run_id, "not_submitted")
            raise self._refused(spec, f"cannot spawn: {exc.message}", exc.code) from None
        self._say("run_spawned", spec, budget=str(arguments["budget"]))
        if arguments.get("wait", True) is False:
            return f"spawned {spec.run_id}"
        return self._wait(spec.run_id, spec.to_json())

    def _say(self, kind: str, spec: RunSpec, **data: Any) -> None:
        """An activity entry of this run about the child ``spec``."""
        self.rt.emit(
            self.rt.redis,
            kind,
            run_id=self.state.run_id,
            phase=self.phase.name,
            child_run_id=spec.run_id,
            role=spec.pipeline[0].role,
            **data,
        )

    def _refused(self, spec: RunSpec, why: str, code: str) -> ToolError:
        """A child refused before it ran: said in the run's activity and the worker's log (the model
        is told with the ToolError returned)."""
        self._say("spawn_refused", spec, code=code, message=why)
        log.warning(
            "spawn_refused", run_id=self.state.run_id, child_run_id=spec.run_id, code=code, why=why
        )
        return ToolError(why)

    def _child_spec(self, arguments: dict[str, Any]) -> RunSpec:
        role, task, overrides = (
            arguments.get("role"),
            arguments.get("task"),
            arguments.get("limit_overrides", {}),
        )
        if not isinstance(role, str) or not isinstance(task, str) or "budget" not in arguments:
            raise ToolError("spawn_run needs role (string), task (string) and budget (USD)")
        if not isinstance(overrides, dict):
            raise ToolError('spawn_run\'s limit_overrides must be an object, e.g. {"turns": 10}')
        child_id = f"{keys.child_prefix(self.state.run_id)}.c{uuid.uuid4().hex[:8]}"
        try:
            return RunSpec.model_validate(
                {
                    "run_id": child_id,
                    "user_id": self.state.user_id,
                    "task": task,
                    "pipeline": [
                        {
                            "name": "execute",
                            "role": role,
                            "model": arguments.get("model") or self.phase.model,
                        }
                    ],
                    "budget_profile": self.state.spec.budget_profile,
                    "limit_overrides": {**overrides, "spend": str(arguments["budget"])},
                    "parent_run_id": self.state.run_id,
                    "scripts": self.state.spec.model_dump(mode="json")["scripts"],
                    "metadata": {SPAWNED_BY: self.name},
                }
            )
        except ValidationError as exc:
            raise ToolError(
                f"spawn_run arguments are invalid: {describe_validation_error(exc)}"
            ) from None

    def _wait(self, child_id: str, payload: bytes) -> str:
        # the word on Mother's relay channel is heard only by a leading Mother listening then: a child
        # Mother has not claimed this long after is asked for again (the run id claim makes a second copy
        # of one it did take in a no-op)
        resend_after = self.rt.settings.service.claim_idle_seconds
        asked = time.monotonic()
        while True:
            envelope = read_result(self.rt.redis, child_id)
            if envelope is not None and envelope.termination is not None:
                term = envelope.termination
                return f"child {child_id} ended {term.reason}: {term.details}\n{envelope.output}".rstrip()
            # refused at intake (Mother gave back its reservation and slot)
            if envelope is None and not self.rt.redis.exists(keys.run_key(child_id)):
                rejected = read_rejection_for(self.rt.redis, child_id)
                if rejected is not None:
                    raise ToolError(f"cannot spawn: {rejected.error}")
                overdue = time.monotonic() - asked > resend_after
                if overdue and self.rt.redis.hget(keys.RUN_CLAIMS, child_id) is None:
                    log.warning(
                        "spawn_asked_again",
                        run_id=self.state.run_id,
                        child_run_id=child_id,
                        why=f"not taken in after {resend_after:g}s: Mother did not hear it asked for",
                    )
                    pipe = self.rt.redis.pipeline()
                    queue_spawn_request(pipe, child_id, payload)
                    pipe.execute()
                    asked = time.monotonic()
            time.sleep(WAIT_POLL_SECONDS)
            # the parent ending (deadline, cancel) stops the wait
            self.check_alive()

    def _own_spend(self) -> Decimal:
        return read_own_spend(self.rt.redis, self.state.run_id)
