"""Child runs through the spawn_run tool: Mother runs them, the ledger and counters follow, depth runs out."""

from __future__ import annotations


import orjson

from mother import keys
from mother.ledger import BudgetLedger
from tests.conftest import Pipeline
from tests.test_pipeline import example


def _spawn(role: str, budget: str = "0.10") -> dict:
    return {"tool_calls": [{"name": "spawn_run", "arguments": {"role": role, "task": f"sub-task for {role}", "budget": budget}}]}


def test_parent_spawns_child_and_grandchild_is_refused_by_depth(pipeline: Pipeline) -> None:
    """depth 2: the child runs (depth 1) and succeeds; its own spawn is refused 'Depth limit exhausted'."""
    spec = example("three-phase", limit_overrides={"depth": 2, "spend": "1.00"}, scripts={
        "planner": [_spawn("helper"), {"text": "parent planned"}],
        "helper": [_spawn("helper2"), {"text": "child done"}],
        "coder": [{"text": "coded"}], "critic": [{"text": "ok"}],
    })
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
    assert (tree["thread_count"], tree["active_count"], tree["total_actual"], tree["total_reserved"]) == (2, 0, 0, 0)
    spawned = [f for _, f in pipeline.redis.xrange("activity") if f["type"] == "run_spawned" and f.get("run_id") == run_id]
    assert len(spawned) == 1


def test_spawn_beyond_the_parents_budget_is_refused(pipeline: Pipeline) -> None:
    """A child asking for more than the parent has left is refused to the model; the parent goes on."""
    spec = example("three-phase", limit_overrides={"spend": "0.05"}, scripts={
        "planner": [_spawn("helper", budget="0.50"), {"text": "went on without a child"}],
        "coder": [{"text": "coded"}], "critic": [{"text": "ok"}],
    })
    run_id = pipeline.client.submit(spec)
    envelope = pipeline.wait(run_id, timeout=60)
    assert envelope.termination.reason == "success"
    assert list(pipeline.redis.scan_iter(match=f"run:{run_id}.c*")) == []
    budget = orjson.loads(pipeline.redis.execute_command("JSON.GET", keys.run_budget_key(run_id)))
    assert (budget["spawns"], budget["parallel_agents"]) == (1, 0)
