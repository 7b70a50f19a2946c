"""Child runs through the spawn_run tool: Mother runs them, the ledger and counters follow, depth runs out."""

from __future__ import annotations

from decimal import Decimal

import orjson
import pytest
import redis

from mother import keys
from mother.client import MotherClient
from mother.config import load_settings
from mother.errors import InvalidSpec
from mother.intake import handle_submission
from mother.ledger import BudgetLedger
from mother.runtime import Runtime
from schemas import RunState
from tests.conftest import Pipeline, live_host
from tests.test_pipeline import example


def _spawn(role: str, budget: str = "0.10") -> dict:
    return {
        "tool_calls": [
            {
                "name": "spawn_run",
                "arguments": {"role": role, "task": f"sub-task for {role}", "budget": budget},
            }
        ]
    }


def test_parent_spawns_child_and_grandchild_is_refused_by_depth(pipeline: Pipeline) -> None:
    """depth 2: the child runs (depth 1) and succeeds; its own spawn is refused 'Depth limit exhausted'."""
    spec = example(
        "three-phase",
        limit_overrides={"depth": 2, "spend": "1.00"},
        scripts={
            "planner": [_spawn("helper"), {"text": "parent planned"}],
            "helper": [_spawn("helper2"), {"text": "child done"}],
            "coder": [{"text": "coded"}],
            "critic": [{"text": "ok"}],
        },
    )
    run_id = pipeline.client.submit(spec)
    envelope = pipeline.wait(run_id, timeout=60)
    assert envelope.termination.reason == "success"
    children = [k.split(":", 1)[1] for k in pipeline.redis.scan_iter(match=f"run:{run_id}.c*")]
    assert len(children) == 1
    child = pipeline.client.status(children[0])
    assert (child.spec.parent_run_id, child.limits["depth"], child.reason) == (run_id, 1, "success")
    child_result = pipeline.client.result(children[0])
    assert child_result.output == "child done"
    plan_messages = envelope.phases[0].output
    assert plan_messages == "parent planned"
    # the child's refused spawn reached its model as a tool error; no grandchild exists
    assert list(pipeline.redis.scan_iter(match=f"run:{children[0]}.c*")) == []
    budget = orjson.loads(pipeline.redis.execute_command("JSON.GET", keys.run_budget_key(run_id)))
    assert (budget["spawns"], budget["parallel_agents"]) == (1, 0)
    tree = BudgetLedger(pipeline.redis).get_tree_spend(run_id)
    # both released at their ends: reserved := actual (the scripted model is free)
    assert (
        tree["thread_count"],
        tree["active_count"],
        tree["total_actual"],
        tree["total_reserved"],
    ) == (2, 0, 0, 0)
    spawned = [
        f
        for _, f in pipeline.redis.xrange("activity")
        if f["type"] == "run_spawned" and f.get("run_id") == run_id
    ]
    assert len(spawned) == 1
    # the grandchild's refusal is said in the child's activity (the global stream and its own)
    refused = [
        f
        for _, f in pipeline.redis.xrange(keys.run_activity_key(children[0]))
        if f["type"] == "spawn_refused"
    ]
    assert len(refused) == 1
    data = orjson.loads(refused[0]["data"])
    assert (data["code"], data["message"], data["role"]) == (
        "depth_exhausted",
        "Depth limit exhausted",
        "helper2",
    )


def test_spawn_beyond_the_parents_budget_is_refused(pipeline: Pipeline) -> None:
    """A child asking for more than the parent has left is refused to the model; the parent goes on."""
    spec = example(
        "three-phase",
        limit_overrides={"spend": "0.05"},
        scripts={
            "planner": [_spawn("helper", budget="0.50"), {"text": "went on without a child"}],
            "coder": [{"text": "coded"}],
            "critic": [{"text": "ok"}],
        },
    )
    run_id = pipeline.client.submit(spec)
    envelope = pipeline.wait(run_id, timeout=60)
    assert envelope.termination.reason == "success"
    assert list(pipeline.redis.scan_iter(match=f"run:{run_id}.c*")) == []
    budget = orjson.loads(pipeline.redis.execute_command("JSON.GET", keys.run_budget_key(run_id)))
    assert (budget["spawns"], budget["parallel_agents"]) == (1, 0)


def _parent(r: redis.Redis, redis_url: str, max_queue_depth: int = 100) -> tuple[Runtime, RunState]:
    """A parent run taken in by Mother's own intake (no Mother process: nothing reconciles the gauges)."""
    settings = load_settings(
        redis_url=redis_url, budget={"global": {"max_queue_depth": max_queue_depth}}
    )
    rt = Runtime.create(settings)
    client = MotherClient(settings=settings)
    live_host(r)
    run_id = client.submit(example("three-phase", limit_overrides={"spend": "1.00"}))
    [(entry_id, fields)] = r.xrange(keys.SUBMISSIONS_STREAM)
    state = handle_submission(rt, entry_id, fields)
    assert state is not None and state.run_id == run_id
    return rt, rt.load_run(run_id)


def _spawn_asked(rt: Runtime, state: RunState, arguments: dict) -> dict:
    """Mother's answer to the spawn ask of the attempt its host holds (phase 0, attempt 1)."""
    from mother.asks.spawn import spawn
    from mother.asks.wire import Ask

    ask = Ask("t-host", "1-1", "spawn", "0" * 16, (state.run_id, 0, 1), {"arguments": arguments})
    reply = spawn(rt, ask).reply
    assert reply is not None
    return reply


def test_spawn_refused_by_a_full_queue_gives_back_what_it_took(
    r: redis.Redis, redis_url: str
) -> None:
    """QueueFull at the child's submission (Mother's, on the host's spawn ask): the host is told why (its
    tool error), the parallel_agents slot and the ledger reservation are given back."""
    rt, state = _parent(r, redis_url, max_queue_depth=1)
    # a run waiting for a slot: the queue is full
    r.zadd(keys.ADMISSION_WAITING, {"someone-elses": 1})
    reply = _spawn_asked(rt, state, {"role": "helper", "task": "sub-task", "budget": "0.40"})
    assert reply == {
        "ok": False,
        "code": "spawn_refused",
        "error": "cannot spawn: the submission queue is full (1/1 runs waiting to start); try again "
        "later",
    }
    budget = orjson.loads(r.execute_command("JSON.GET", keys.run_budget_key(state.run_id)))
    assert (budget["spawns"], budget["parallel_agents"]) == (1, 0)
    ledger = BudgetLedger(r)
    assert ledger.get_remaining(state.run_id) == Decimal("1.00")
    assert ledger.get_tree_spend(state.run_id)["active_count"] == 0
    assert list(r.scan_iter(match=f"run:{state.run_id}.c*")) == []


@pytest.mark.parametrize(
    ("arguments", "error"),
    [
        (
            {"role": "helper", "task": "t", "budget": "0.1", "limit_overrides": [1]},
            "spawn_run's limit_overrides must be an object",
        ),
        (
            {"role": "helper", "task": "t", "budget": "-1"},
            "spawn_run arguments are invalid: limit_overrides.spend: Input should be greater than or equal to 0",
        ),
        (
            {"role": "helper", "task": "t"},
            "spawn_run needs role (string), task (string) and budget (USD)",
        ),
    ],
)
def test_spawn_with_bad_arguments_is_a_tool_error_naming_the_field(
    r: redis.Redis, redis_url: str, arguments: dict, error: str
) -> None:
    """Bad arguments are refused to the model with what to fix, before anything is charged."""
    rt, state = _parent(r, redis_url)
    with pytest.raises(InvalidSpec) as info:
        _spawn_asked(rt, state, arguments)
    assert info.value.message.startswith(error)
    budget = orjson.loads(r.execute_command("JSON.GET", keys.run_budget_key(state.run_id)))
    assert (budget["spawns"], budget["parallel_agents"]) == (0, 0)
