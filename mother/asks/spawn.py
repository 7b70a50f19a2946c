"""``spawn`` and ``child``: a phase's ``spawn_run``, done by Mother. The child's spec is made here from
the parent's record (its user, profile and scripts; the arguments the agent gave), its depth checked
against the parent's limits, the parent's ``spawns`` and ``parallel_agents`` charged (only while the
host holds the attempt), the child's budget reserved in the spend ledger, and the child appended to
``mother:spawns``: a parent never hands out more than it has left. ``child`` tells the parent's host how
its child stands, only for a child of the attempt's own run."""

from __future__ import annotations

import uuid
from decimal import Decimal, InvalidOperation
from typing import Any

from pydantic import ValidationError

from mother import keys
from mother.asks.answer import Answer
from mother.asks.attempts import guard_of
from mother.asks.wire import Ask, refused
from mother.budget import ask_for_child
from mother.errors import (
    BudgetExhausted,
    DepthExhausted,
    InsufficientBudget,
    InvalidSpec,
    QueueFull,
)
from mother.limits import resolve_limits
from mother.logs import get_logger
from mother.records import runs
from mother.records.budgets import read_own_spend
from mother.records.rejections import read_rejection_for
from mother.records.results import read_result
from mother.runtime import Runtime
from schemas import SPAWNED_BY, RunSpec, RunState, describe_validation_error

__all__ = ["child", "spawn"]

log = get_logger(__name__)


def _child_spec(state: RunState, index: int, arguments: dict[str, Any]) -> RunSpec:
    role, task = arguments.get("role"), arguments.get("task")
    overrides = arguments.get("limit_overrides", {})
    if not isinstance(role, str) or not isinstance(task, str) or "budget" not in arguments:
        raise InvalidSpec("spawn_run needs role (string), task (string) and budget (USD)")
    if not isinstance(overrides, dict):
        raise InvalidSpec('spawn_run\'s limit_overrides must be an object, e.g. {"turns": 10}')
    phase = state.spec.pipeline[index]
    try:
        return RunSpec.model_validate(
            {
                "run_id": f"{keys.child_prefix(state.run_id)}.c{uuid.uuid4().hex[:8]}",
                "user_id": state.user_id,
                "task": task,
                "pipeline": [
                    {
                        "name": "execute",
                        "role": role,
                        "model": arguments.get("model") or phase.model,
                    }
                ],
                "budget_profile": state.spec.budget_profile,
                "limit_overrides": {**overrides, "spend": str(arguments["budget"])},
                "parent_run_id": state.run_id,
                "scripts": state.spec.model_dump(mode="json")["scripts"],
                "metadata": {SPAWNED_BY: "spawn_run"},
            }
        )
    except ValidationError as exc:
        raise InvalidSpec(
            f"spawn_run arguments are invalid: {describe_validation_error(exc)}"
        ) from None


def spawn(rt: Runtime, ask: Ask) -> Answer:
    """Start a child of the attempt's run (``arguments``: role, task, budget, limit_overrides, model);
    replies its run id, or why it was refused (``spawn_refused``, said in the run's activity too)."""
    run_id, index, _attempt = ask.attempt  # type: ignore[misc]
    state = rt.load_run(run_id)
    if state is None:
        return Answer(refused("not_held", f"run {run_id} has no record"))
    state = runs.attempt_view(state)
    arguments = ask.body.get("arguments")
    spec = _child_spec(state, index, arguments if isinstance(arguments, dict) else {})
    assert spec.run_id is not None
    phase = state.spec.pipeline[index]

    def say(kind: str, **data: Any) -> None:
        rt.emit(
            rt.redis,
            kind,
            run_id=run_id,
            phase=phase.name,
            child_run_id=spec.run_id,
            role=spec.pipeline[0].role,
            **data,
        )

    def refuse(why: str, code: str) -> Answer:
        say("spawn_refused", code=code, message=why)
        log.warning("spawn_refused", run_id=run_id, child_run_id=spec.run_id, code=code, why=why)
        return Answer(refused("spawn_refused", why))

    try:
        budget = Decimal(str(arguments["budget"]))  # type: ignore[index]
    except (InvalidOperation, KeyError, TypeError):
        raise InvalidSpec('spawn_run\'s budget must be an amount in USD, e.g. "0.50"') from None
    try:
        # the depth first: nothing is charged for a child that may not be
        resolve_limits({}, None, None, state.limits)
    except DepthExhausted as exc:
        return refuse(exc.message, exc.code)
    guard = guard_of(rt, ask, state.user_id)
    try:
        guard.charge("spawns")
        guard.charge("parallel_agents")
    except BudgetExhausted as exc:
        return refuse(f"cannot spawn: {exc.message}", exc.code)
    reserved = False
    try:
        # so "remaining" counts what the parent spent
        rt.ledger.report_actual(run_id, read_own_spend(rt.redis, run_id))
        rt.ledger.reserve(spec.run_id, budget, run_id)
        reserved = True
        ask_for_child(
            rt.redis, rt.settings, payload=spec.to_json(), run_id=spec.run_id, user_id=spec.user_id
        )
    # give back what a child that will not run took (one Mother refuses later, Mother gives back)
    except (InsufficientBudget, InvalidSpec, QueueFull) as exc:
        guard.release("parallel_agents")
        if reserved:
            rt.ledger.release(spec.run_id, "not_submitted")
        return refuse(f"cannot spawn: {exc.message}", exc.code)
    say("run_spawned", budget=str(budget))
    return Answer({"ok": True, "child": spec.run_id})


def child(rt: Runtime, ask: Ask) -> Answer:
    """How a child of the attempt's run stands: ``ended`` (its reason, details and output), ``refused``
    (not taken in: why), or ``pending``."""
    child_id = ask.body.get("child")
    if not isinstance(child_id, str) or keys.parent_prefix(child_id) != keys.child_prefix(
        ask.run_id
    ):
        raise InvalidSpec("child must name a child run of the attempt's own run")
    envelope = read_result(rt.redis, child_id)
    if envelope is not None and envelope.termination is not None:
        term = envelope.termination
        text = f"child {child_id} ended {term.reason}: {term.details}\n{envelope.output}".rstrip()
        return Answer({"ok": True, "state": "ended", "text": text}, held=True)
    if envelope is None and not rt.redis.exists(keys.run_key(child_id)):
        rejected = read_rejection_for(rt.redis, child_id)
        if rejected is not None:
            return Answer({"ok": True, "state": "refused", "error": rejected.error}, held=True)
    return Answer({"ok": True, "state": "pending"}, held=True)
