"""What a settled (or cut short) conflict leaves behind, in the cases users hit: the winning proposal's
output is the run's, a person's approval of rejected work carries the work on, an escalated output's
artifacts are the run's, every conflict record is closed when its run ends, an expired question moves
to the next strategy, the winner is an agent (role@model), and a lone test phase that rejects ends
with a reason the spec has. Real Redis, Mother and workers, with a policy made for these cases."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
import redis

from mother.client import MotherClient
from mother.config import load_settings
from mother.errors import WaitTimeout
from mother.records.conflicts import read_conflict
from tests.conftest import Pipeline, start_pipeline, stop_pipeline, wait_for_person

POLICY = {
    "competing_proposals": ["prefer_higher_confidence"],
    "critic_vs_coder": ["escalate_model", "request_user_input"],
    "low_confidence_output": ["run_arbiter"],
    "retrieval_ambiguity": ["request_user_input", "terminate_blocked"],
    "test_vs_review": ["fail_safe"],
    "evidence_contradiction": ["fail_safe"],
}
CODE = {"name": "code", "role": "coder", "model": "scripted"}
REVIEW = {"name": "review", "role": "critic", "model": "scripted", "reviews": "code"}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pipeline]:
    p = start_pipeline(
        tmp_path_factory.mktemp("outcomes"),
        env={"MOTHER_CONFLICTS__POLICY": orjson.dumps(POLICY).decode()},
    )
    yield p
    stop_pipeline(p)


def _spec(pipeline: list[dict], scripts: dict[str, list[dict]], **more: Any) -> dict:
    return {
        "run_id": f"co-{uuid.uuid4().hex[:10]}",
        "user_id": "alice",
        "approvers": ["alice"],
        "task": "settle it",
        "pipeline": pipeline,
        "scripts": scripts,
        **more,
    }


def _reply(text: str, confidence: float = 0.9, **more: Any) -> dict:
    return {"text": text, "confidence": confidence, "usage": {"input_tokens": 50, "output_tokens": 5}} | more  # fmt: skip


def _conflict(p: Pipeline, run_id: str) -> Any:
    (conflict_id,) = p.client.status(run_id).conflicts
    return read_conflict(p.redis, conflict_id)


def test_the_winning_proposal_is_what_the_run_carries_on_with(stack: Pipeline) -> None:
    """A group that ends the pipeline: prefer_higher_confidence picks the first proposal; the run's
    output and its last phase's artifacts are the winner's, not the last proposal's."""
    a = {"name": "propose_a", "role": "architect", "model": "scripted", "group": "design"}
    b = {"name": "propose_b", "role": "engineer", "model": "scripted", "group": "design"}
    spec = _spec(
        [a, b],
        {
            "architect": [_reply("one queue per tenant", 0.95)],
            "engineer": [_reply("one shared queue", 0.6)],
        },
    )
    envelope = stack.wait(stack.client.submit(spec), timeout=60)
    assert envelope.termination is not None and envelope.termination.reason == "success"
    assert envelope.output == "one queue per tenant"
    first, last = envelope.phases
    assert last.phase == "propose_b" and last.artifacts == first.artifacts
    # the winner's artifacts, once each (both phases' results name them)
    assert envelope.termination.final_artifacts == first.artifacts
    conflict = _conflict(stack, spec["run_id"])
    assert (conflict.conflict_type, conflict.winner_agent) == (
        "competing_proposals",
        "architect@scripted",
    )


def test_a_persons_approval_of_rejected_work_carries_the_work_on(stack: Pipeline) -> None:
    """critic_vs_coder: the escalated coder is rejected again, a person approves: the run's output is
    the (escalated) work, not the critic's rejection; the winner is the coder on the larger model. The
    escalated output's artifacts are the run's final artifacts, not the rejected original's."""
    spec = _spec(
        [CODE, REVIEW],
        {
            "coder": [_reply("first patch")],
            "coder@scripted-large": [_reply("second patch")],
            "critic": [_reply("VERDICT: REJECT\nno"), _reply("VERDICT: REJECT\nstill no")],
        },
    )
    run_id = stack.client.submit(spec)
    wait_for_person(stack, run_id)
    stack.client.approve(run_id, actor="alice", reason="ship it")
    envelope = stack.wait(run_id, timeout=60)
    assert envelope.termination is not None and envelope.termination.reason == "success"
    assert envelope.output == "second patch"
    conflict = _conflict(stack, run_id)
    assert conflict.winner_agent == "coder@scripted-large"
    escalated = envelope.phases[0]
    assert escalated.output == "second patch" and escalated.artifacts
    assert set(escalated.artifacts) <= set(envelope.termination.final_artifacts)
    # the work the critic first rejected, as the conflict recorded it
    original = next(o for o in conflict.their_outputs if o.stance == "work")
    assert original.artifact_ids and not set(original.artifact_ids) & set(
        envelope.termination.final_artifacts
    )


def test_every_conflict_is_closed_when_its_run_ends(stack: Pipeline) -> None:
    """The arbiter refused by the run's budget, and a run cancelled while a conflict's gate waits: both
    conflicts are closed (blocked, not successful, resolved_at set) with their runs' ends."""
    spec = _spec(
        [{"name": "analyse", "role": "analyst", "model": "scripted"}],
        {
            "analyst": [_reply("perhaps", 0.2, usage={"input_tokens": 100, "output_tokens": 10})],
            "arbiter": [_reply("VERDICT: ACCEPT")],
        },
        limit_overrides={"tokens": 100},
    )
    envelope = stack.wait(stack.client.submit(spec), timeout=60)
    assert envelope.termination is not None and envelope.termination.reason == "budget_exhausted"
    refused = _conflict(stack, spec["run_id"])
    assert (refused.status, refused.final_decision, refused.resolution_successful) == (
        "closed",
        "blocked",
        False,
    )
    assert refused.resolved_at is not None and "budget_exhausted" in refused.rationale
    waiting = _spec(
        [CODE, REVIEW],
        {
            "coder": [_reply("patch")],
            "coder@scripted-large": [_reply("patch 2")],
            "critic": [_reply("VERDICT: REJECT"), _reply("VERDICT: REJECT")],
        },
    )
    run_id = stack.client.submit(waiting)
    wait_for_person(stack, run_id)
    stack.client.cancel(run_id, actor="alice", reason="not now")
    assert stack.wait(run_id, timeout=30).termination.reason == "user_cancelled"
    cancelled = _conflict(stack, run_id)
    assert (cancelled.status, cancelled.final_decision) == ("closed", "blocked")
    assert "user_cancelled" in cancelled.rationale and cancelled.winner_agent is None


def test_an_unanswered_question_moves_to_the_next_strategy(stack: Pipeline) -> None:
    """retrieval_ambiguity: nobody answers before the deadline, so terminate_blocked is tried next and
    the run ends insufficient_evidence (not blocked)."""
    spec = _spec(
        [{"name": "answer", "role": "researcher", "model": "scripted"}],
        {"researcher": [_reply("3 or 5?", 0.8, findings=["ambiguity"])]},
        gate_timeout_seconds=1,
    )
    envelope = stack.wait(stack.client.submit(spec), timeout=60)
    assert envelope.termination is not None
    assert envelope.termination.reason == "insufficient_evidence"
    conflict = _conflict(stack, spec["run_id"])
    assert [(s.strategy, s.outcome) for s in conflict.steps] == [
        ("request_user_input", "pending"),
        ("request_user_input", "failed"),
        ("terminate_blocked", "resolved"),
    ]


def test_a_lone_test_phase_that_rejects_ends_with_a_reason_of_the_spec(stack: Pipeline) -> None:
    """A one-phase pipeline whose only phase is a test that rejects: escalate_model runs the test again
    on the larger model (there is no separate work to re-run), which accepts: success, no IndexError."""
    spec = _spec(
        [{"name": "test", "role": "tester", "model": "scripted", "kind": "test"}],
        {
            "tester": [_reply("VERDICT: REJECT\n2 failed")],
            "tester@scripted-large": [_reply("VERDICT: ACCEPT\nall pass")],
        },
    )
    envelope = stack.wait(stack.client.submit(spec), timeout=60)
    assert envelope.termination is not None and envelope.termination.reason == "success"
    assert _conflict(stack, spec["run_id"]).winner_agent == "tester@scripted-large"


def test_a_decision_waits_as_long_as_it_is_told(r: redis.Redis, redis_url: str) -> None:
    """With no Mother to reply, a decision waits its whole timeout (past the connection's read timeout)
    and says it is queued, instead of a socket timeout at 5 s."""
    client = MotherClient(settings=load_settings(redis_url=redis_url))
    started = time.monotonic()
    with pytest.raises(WaitTimeout, match="queued, Mother has not confirmed yet"):
        client.command_reply("1-0", 6.5)
    assert time.monotonic() - started >= 6.5
