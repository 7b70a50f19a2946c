"""Conflict resolution end to end: real Redis, Mother and forking RQ workers. One stack runs each strategy
alone (a policy that gives every conflict type a single strategy); the shared stack runs the spec's table."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import orjson
import pytest

from mother import keys
from mother.activity import recent
from mother.cli.inspect import inspect_run
from mother.records.budgets import budget_view
from mother.records.conflicts import read_conflict
from tests.conftest import Pipeline, cli, start_pipeline, stop_pipeline
from tests.test_pipeline import example

ALONE = {
    "critic_vs_coder": ["prefer_higher_confidence"],
    "test_vs_review": ["prefer_higher_evidence"],
    "competing_proposals": ["run_arbiter"],
    "low_confidence_output": ["escalate_model"],
    "evidence_contradiction": ["fail_safe"],
    "retrieval_ambiguity": ["terminate_blocked"],
}
# every field of the spec's ConflictResolution
SPEC_FIELDS = {
    "conflict_id",
    "run_id",
    "conflict_type",
    "agents_involved",
    "their_outputs",
    "strategy_applied",
    "winner_agent",
    "rationale",
    "resolution_successful",
    "final_decision",
    "detected_at",
    "resolved_at",
    "resolution_duration_ms",
}
CODE = {"name": "code", "role": "coder", "model": "scripted"}
REVIEW = {"name": "review", "role": "critic", "model": "scripted", "reviews": "code"}


@pytest.fixture(scope="module")
def alone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pipeline]:
    p = start_pipeline(
        tmp_path_factory.mktemp("strategies"),
        env={"MOTHER_CONFLICTS__POLICY": orjson.dumps(ALONE).decode()},
    )
    yield p
    stop_pipeline(p)


def _spec(pipeline: list[dict], scripts: dict[str, list[dict]], **more: Any) -> dict:
    return {
        "run_id": f"cf-{uuid.uuid4().hex[:10]}",
        "user_id": "alice",
        "task": "settle a disagreement",
        "pipeline": pipeline,
        "scripts": scripts,
        **more,
    }


def _reply(text: str, confidence: float, evidence: int = 0, **more: Any) -> dict:
    return {
        "text": text,
        "confidence": confidence,
        "evidence_count": evidence,
        "usage": {"input_tokens": 100, "output_tokens": 10},
        **more,
    }


def _ran(p: Pipeline, spec: dict) -> tuple[Any, list[Any]]:
    """The run's termination record and its conflicts' records."""
    termination = p.wait(p.client.submit(spec), timeout=60).termination
    state = p.client.status(spec["run_id"])
    return termination, [read_conflict(p.redis, cid) for cid in state.conflicts]


def test_prefer_higher_confidence_accepts_the_confident_coder_over_a_doubtful_critic(
    alone: Pipeline,
) -> None:
    """The issue's case: a critic says REJECTED at confidence 0.2 beside a coder at 0.95. The conflict is
    recorded with every field of the spec, the coder wins, and the run succeeds naming the conflict."""
    spec = _spec(
        [CODE, REVIEW],
        {"coder": [_reply("patched", 0.95, 2)], "critic": [_reply("REJECTED: I have doubts", 0.2)]},
    )
    termination, (conflict,) = _ran(alone, spec)
    assert termination.reason == "success"
    raw = orjson.loads(
        alone.redis.execute_command("JSON.GET", keys.conflict_key(conflict.conflict_id))
    )
    assert set(raw) >= SPEC_FIELDS
    assert (
        conflict.conflict_type,
        conflict.strategy_applied,
        conflict.winner_agent,
        conflict.final_decision,
        conflict.resolution_successful,
        conflict.status,
    ) == (
        "critic_vs_coder",
        "prefer_higher_confidence",
        "coder@scripted",
        "accepted",
        True,
        "closed",
    )
    assert conflict.agents_involved == ["coder", "critic"]
    assert [(o.agent_id, o.stance, o.confidence) for o in conflict.their_outputs] == [
        ("coder", "work", 0.95),
        ("critic", "reject", 0.2),
    ]
    assert all(o.artifact_ids for o in conflict.their_outputs)
    assert [(s.strategy, s.outcome) for s in conflict.steps] == [
        ("prefer_higher_confidence", "resolved")
    ]
    assert conflict.resolved_at >= conflict.detected_at and conflict.resolution_duration_ms >= 0
    assert conflict.policy == ["prefer_higher_confidence"] and conflict.work_phase == "code"
    assert any(conflict.conflict_id in f for f in termination.contributing_factors)
    inspected = inspect_run(alone.client, spec["run_id"])["conflicts"]
    assert [c["conflict_id"] for c in inspected] == [conflict.conflict_id]
    events = [e.type for e in recent(alone.redis, 200, run_id=spec["run_id"])]
    for kind in ("conflict_detected", "conflict_strategy_applied", "conflict_resolved"):
        assert kind in events


def test_prefer_higher_confidence_on_the_critics_side_rejects_and_a_tie_resolves_nothing(
    alone: Pipeline,
) -> None:
    """The more confident critic wins: the work is rejected, the run ends conflicting_agents; equal
    confidences: the strategy fails, and with no other strategy left the conflict stays unresolved."""
    rejected, (conflict,) = _ran(
        alone,
        _spec(
            [CODE, REVIEW],
            {"coder": [_reply("patched", 0.6)], "critic": [_reply("VERDICT: REJECT", 0.9)]},
        ),
    )
    assert (rejected.reason, rejected.suggested_action) == ("conflicting_agents", "escalate_model")
    assert (conflict.winner_agent, conflict.final_decision, conflict.resolution_successful) == (
        "critic@scripted",
        "rejected",
        True,
    )
    tied, (conflict,) = _ran(
        alone,
        _spec(
            [CODE, REVIEW],
            {"coder": [_reply("patched", 0.7)], "critic": [_reply("VERDICT: REJECT", 0.7)]},
        ),
    )
    assert tied.reason == "conflicting_agents" and "no strategy resolved it" in tied.details
    assert (conflict.final_decision, conflict.resolution_successful) == ("blocked", False)
    assert [(s.strategy, s.outcome) for s in conflict.steps] == [
        ("prefer_higher_confidence", "failed")
    ]


def test_prefer_higher_evidence_sides_with_the_tests(alone: Pipeline) -> None:
    """test_vs_review: the tests cite more evidence than the critic, so the work is accepted."""
    tests = {
        "name": "test",
        "role": "tester",
        "model": "scripted",
        "reviews": "code",
        "kind": "test",
    }
    termination, (conflict,) = _ran(
        alone,
        _spec(
            [CODE, tests, REVIEW],
            {
                "coder": [_reply("patched", 0.9, 1)],
                "tester": [_reply("VERDICT: PASS", 0.9, 5)],
                "critic": [_reply("VERDICT: REJECT", 0.9, 1)],
            },
        ),
    )
    assert termination.reason == "success"
    assert (conflict.conflict_type, conflict.strategy_applied, conflict.winner_agent) == (
        "test_vs_review",
        "prefer_higher_evidence",
        "tester@scripted",
    )


def test_run_arbiter_picks_a_proposal_and_later_phases_are_told(alone: Pipeline) -> None:
    """competing_proposals: the arbiter (on the phase model's escalate_to) names the winner; the decision
    joins the next phase's context (a required section) and the arbiter's call is charged to the run."""
    a = {"name": "propose_a", "role": "architect", "model": "scripted", "group": "design"}
    b = {"name": "propose_b", "role": "engineer", "model": "scripted", "group": "design"}
    build = {"name": "build", "role": "builder", "model": "scripted"}
    spec = _spec(
        [a, b, build],
        {
            "architect": [_reply("one queue per tenant", 0.8)],
            "engineer": [_reply("one shared queue with fair scheduling", 0.8)],
            "arbiter": [_reply("WINNER: propose_b\nVERDICT: ACCEPT", 0.9, 1)],
            "builder": [_reply("built the shared queue", 0.9)],
        },
    )
    termination, (conflict,) = _ran(alone, spec)
    assert termination.reason == "success"
    assert (conflict.conflict_type, conflict.strategy_applied, conflict.winner_agent) == (
        "competing_proposals",
        "run_arbiter",
        "engineer@scripted",
    )
    assert [o.model for o in conflict.their_outputs if o.agent_id == "arbiter"] == [
        "scripted-large"
    ]
    context = orjson.loads(
        alone.redis.execute_command("JSON.GET", keys.context_key(spec["run_id"], 2))
    )
    current = next(s for s in context["sections"] if s["section"] == "current_phase")
    assert "Decisions so far" in current["content"] and "propose_b" in current["content"]
    # the two proposals, the arbiter and the builder
    assert budget_view(alone.redis, spec["run_id"])["model_calls"] == 4


def test_escalate_model_reruns_the_work_on_the_larger_model_charged_to_the_run(
    alone: Pipeline,
) -> None:
    """low_confidence_output: the phase runs again on its model's escalate_to (its replies under
    role@model); the confident re-run is accepted as the phase's result, and both calls are charged."""
    spec = _spec(
        [{"name": "analyse", "role": "analyst", "model": "scripted"}],
        {
            "analyst": [_reply("perhaps", 0.2)],
            "analyst@scripted-large": [_reply("certainly", 0.85, 2)],
        },
    )
    termination, (conflict,) = _ran(alone, spec)
    assert termination.reason == "success"
    assert (conflict.strategy_applied, conflict.final_decision) == ("escalate_model", "accepted")
    envelope = alone.client.result(spec["run_id"])
    (accepted,) = envelope.phases
    assert (accepted.phase, accepted.output, accepted.attempt) == ("analyse", "certainly", 2)
    assert accepted.manifest is not None and accepted.manifest.model == "scripted-large"
    budget = budget_view(alone.redis, spec["run_id"])
    assert (budget["model_calls"], budget["total_tokens"]) == (2, 220)


def test_an_escalation_past_the_runs_budget_is_refused(alone: Pipeline) -> None:
    """The escalated re-run is a phase like any other: with the run's tokens spent it is refused at its
    turn's start and the run ends budget_exhausted, not retried and not resolved."""
    spec = _spec(
        [{"name": "analyse", "role": "analyst", "model": "scripted"}],
        {
            "analyst": [_reply("perhaps", 0.2)],
            "analyst@scripted-large": [_reply("certainly", 0.85, 2)],
        },
        limit_overrides={"tokens": 100},
    )
    termination, (conflict,) = _ran(alone, spec)
    assert termination.reason == "budget_exhausted" and "tokens_exceeded" in termination.details
    assert budget_view(alone.redis, spec["run_id"])["model_calls"] == 1
    # closed with the run's end, unresolved
    assert conflict.steps[-1].outcome == "pending"
    assert (conflict.status, conflict.final_decision, conflict.resolution_successful) == (
        "closed",
        "blocked",
        False,
    )


def test_an_arbiter_past_the_runs_budget_is_refused(alone: Pipeline) -> None:
    """The arbiter is charged like any phase: with the run's tokens spent by the proposals, its turn is
    refused at the start and the run ends budget_exhausted."""
    a = {"name": "propose_a", "role": "architect", "model": "scripted", "group": "design"}
    b = {"name": "propose_b", "role": "engineer", "model": "scripted", "group": "design"}
    spec = _spec(
        [a, b],
        {
            "architect": [_reply("one queue per tenant", 0.8)],
            "engineer": [_reply("one shared queue", 0.8)],
            "arbiter": [_reply("WINNER: propose_b\nVERDICT: ACCEPT", 0.9)],
        },
        limit_overrides={"tokens": 150},
    )
    termination, (conflict,) = _ran(alone, spec)
    assert termination.reason == "budget_exhausted" and "tokens_exceeded" in termination.details
    assert budget_view(alone.redis, spec["run_id"])["model_calls"] == 2
    assert [(s.strategy, s.outcome) for s in conflict.steps] == [("run_arbiter", "pending")]


def test_fail_safe_and_terminate_blocked_stop_the_run(alone: Pipeline) -> None:
    """fail_safe rejects the work (conflicting_agents); terminate_blocked stops an ambiguous retrieval as
    insufficient_evidence, unresolved."""
    researcher = [{"name": "research", "role": "researcher", "model": "scripted"}]
    unsafe, (conflict,) = _ran(
        alone,
        _spec(
            researcher,
            {"researcher": [_reply("two sources disagree", 0.9, findings=["contradiction"])]},
        ),
    )
    assert unsafe.reason == "conflicting_agents" and "fail_safe" in unsafe.details
    assert (conflict.conflict_type, conflict.final_decision) == (
        "evidence_contradiction",
        "rejected",
    )
    stopped, (conflict,) = _ran(
        alone,
        _spec(researcher, {"researcher": [_reply("FINDING: ambiguity\nno clear answer", 0.9)]}),
    )
    assert (stopped.reason, stopped.suggested_action) == ("insufficient_evidence", "broaden_scope")
    assert (conflict.final_decision, conflict.resolution_successful) == ("blocked", False)


def test_a_reviewing_phase_that_states_no_verdict_is_a_rejection_the_policy_decides(
    alone: Pipeline,
) -> None:
    """A critic whose reply states no verdict (conflicts.missing_verdict: reject, the default) rejects
    with confidence 0: the run reaches the conflict policy (critic_vs_coder) rather than failing each
    attempt verdict_missing until its retries run out (conflicts.missing_verdict: retry does that)."""
    spec = _spec(
        [CODE, {**REVIEW, "max_retries": 1}],
        {"coder": [_reply("patched", 0.9)], "critic": [_reply("hmm", 0.9)]},
    )
    termination, conflicts = _ran(alone, spec)
    assert termination.reason != "retries_exhausted" and "verdict" not in termination.details
    (conflict,) = conflicts
    assert conflict.conflict_type == "critic_vs_coder"
    critic = next(o for o in conflict.their_outputs if o.agent_id == "critic")
    assert (critic.stance, critic.confidence) == ("reject", 0.0)


# -- the spec's table, in order (the shared stack runs the default policy) ----------------------------


def test_the_table_in_order_arbiter_then_escalation(pipeline: Pipeline) -> None:
    """critic_vs_coder: run_arbiter (the arbiter rejects too), then escalate_model: the coder runs again on
    scripted-large and the critic's second review accepts. Every extra attempt is charged to the run."""
    spec = example("conflict-escalation")
    termination, (conflict,) = _ran(pipeline, spec)
    assert termination.reason == "success"
    assert [(s.strategy, s.outcome) for s in conflict.steps] == [
        ("run_arbiter", "pending"),
        ("run_arbiter", "failed"),
        ("escalate_model", "pending"),
        ("escalate_model", "pending"),
        ("escalate_model", "resolved"),
    ]
    assert (conflict.strategy_applied, conflict.final_decision) == ("escalate_model", "accepted")
    phases = pipeline.client.result(spec["run_id"]).phases
    assert [(r.phase, r.attempt) for r in phases] == [("code", 3), ("review", 4)]
    assert phases[0].output.startswith("Rewrote the export as a generator")
    # coder, critic, arbiter, escalated coder, second review
    assert budget_view(pipeline.redis, spec["run_id"])["model_calls"] == 5


def test_the_table_in_order_arbiter_accepts(pipeline: Pipeline) -> None:
    """The arbiter accepts the coder's work. The critic's rejecting review and the arbiter's answer are
    there to see: the arbiter's attempt has its start, its run time and its worker in the timeline (one
    row, not a dispatched row never ended beside a completed one), the critic's artifact is the run's
    (set aside, retained with the run's class), every side is printed by `mother inspect`, and the final
    artifacts name each artifact once."""
    spec = example("conflict-arbiter")
    termination, (conflict,) = _ran(pipeline, spec)
    assert termination.reason == "success"
    assert (conflict.strategy_applied, conflict.winner_agent) == ("run_arbiter", "coder@scripted")
    run_id = spec["run_id"]
    view = pipeline.client.inspect(run_id)
    rows = [(a["phase"], a["attempt"], a["status"]) for a in view["timeline"]["attempts"]]
    assert rows == [
        ("code", 1, "completed"),
        ("review", 1, "completed"),
        ("review.arbiter", 2, "completed"),
    ]
    arbiter = view["timeline"]["attempts"][2]
    assert arbiter["started_at"] and arbiter["worker"] and arbiter["run_ms"] is not None
    critic = next(o for o in conflict.their_outputs if o.agent_id == "critic")
    state = pipeline.client.status(run_id)
    assert critic.artifact_ids and set(critic.artifact_ids) <= set(state.superseded_artifacts)
    listed = {m["artifact_id"]: m for m in view["artifacts"]}
    for artifact_id in critic.artifact_ids:
        assert listed[artifact_id]["retention_class"] == "success"
    final = termination.final_artifacts
    assert len(final) == len(set(final)) and not set(critic.artifact_ids) & set(final)
    shown = cli("inspect", run_id, url=pipeline.url)
    assert shown.exit_code == 0, shown.output
    assert "critic@scripted (review #1): reject, confidence 0.55" in shown.stdout
    assert "arbiter@scripted-large (review.arbiter #2): accept" in shown.stdout


def test_a_conflict_past_max_conflicts_per_run_names_what_ended_it(tmp_path: Any) -> None:
    """With conflicts.max_conflicts_per_run 1, the run's second conflict is not resolved: it is closed
    blocked with terminate_blocked as its strategy (not null), and the run ends conflicting_agents."""
    p = start_pipeline(
        tmp_path,
        env={
            "MOTHER_CONFLICTS__POLICY": orjson.dumps(ALONE).decode(),
            "MOTHER_CONFLICTS__MAX_CONFLICTS_PER_RUN": "1",
        },
    )
    try:
        spec = _spec(
            [CODE, REVIEW, {**REVIEW, "name": "review2"}],
            {
                "coder": [_reply("patch", 0.95)],
                "critic": [
                    _reply("VERDICT: REJECT\nrisky", 0.5),
                    _reply("VERDICT: REJECT\nno", 0.5),
                ],
            },
        )
        termination, conflicts = _ran(p, spec)
        assert termination.reason == "conflicting_agents"
        second = conflicts[-1]
        assert (second.status, second.strategy_applied, second.final_decision) == (
            "closed",
            "terminate_blocked",
            "blocked",
        )
        assert "max_conflicts_per_run" in second.rationale
    finally:
        stop_pipeline(p)


def test_the_table_in_order_ends_conflicting_agents(pipeline: Pipeline) -> None:
    """test_vs_review: a tie on evidence, an arbiter that rejects, then fail_safe."""
    termination, (conflict,) = _ran(pipeline, example("conflicting-agents"))
    assert (termination.reason, termination.suggested_action) == (
        "conflicting_agents",
        "escalate_model",
    )
    assert [(s.strategy, s.outcome) for s in conflict.steps] == [
        ("prefer_higher_evidence", "failed"),
        ("run_arbiter", "pending"),
        ("run_arbiter", "failed"),
        ("fail_safe", "resolved"),
    ]


def test_conflicts_are_indexed_for_search(pipeline: Pipeline) -> None:
    """idx:conflict answers by type, strategy and decision (the embedded server has the search module)."""
    spec = example("conflict-arbiter")
    _ran(pipeline, spec)
    run = spec["run_id"].replace("-", "\\-")
    found = pipeline.redis.execute_command(
        "FT.SEARCH",
        keys.CONFLICT_INDEX,
        f"@type:{{critic_vs_coder}} @strategy:{{run_arbiter}} @decision:{{accepted}} @run:{{{run}}}",
        "NOCONTENT",
    )
    assert found[0] == 1 and str(found[1]).startswith(keys.CONFLICT_PREFIX)
