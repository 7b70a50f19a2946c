"""Mother's review of a phase's outcome: the states of mother.review, and the hook conflicts and gates plug into."""

from __future__ import annotations

import redis

from mother.review import Outcome, Review, State, on_phase_result
from schemas import PhaseResult
from tests.test_lifecycle import _delivered, _started, _token


def _result(run_id: str, **changes: object) -> PhaseResult:
    fields = {
        "run_id": run_id,
        "phase": "plan",
        "phase_index": 0,
        "attempt": 1,
        "status": "completed",
        "output": "the plan",
        "confidence": 0.9,
        "finished_at": "2026-11-22T00:00:00.000Z",
        **changes,
    }
    return PhaseResult.model_validate(fields)


def test_each_outcome_lands_in_its_state(r: redis.Redis, redis_url: str) -> None:
    """A completed result with phases left ADVANCEs; the same result again is STALE; a failure with retries
    left RETRYs; one for the current attempt without its token is REFUSED."""
    rt, run_id = _started(r, redis_url)
    first = _result(run_id)
    assert (
        on_phase_result(rt, first, _token(r, first), delivery=_delivered(r, rt, first))
        == State.ADVANCE
    )
    assert on_phase_result(rt, first, _token(r, first)) == State.STALE
    failed = _result(
        run_id, phase="execute", phase_index=1, status="failed", error="boom", output=""
    )
    assert on_phase_result(rt, failed, None) == State.REFUSED
    assert on_phase_result(rt, failed, _token(r, failed)) == State.RETRY
    assert (rt.load_run(run_id).phase_index, rt.load_run(run_id).attempt) == (1, 2)


def test_a_review_hook_sees_a_completed_result_before_it_moves_the_run(
    r: redis.Redis, redis_url: str
) -> None:
    """The hook conflicts and gates plug into: it sees each completed result with the review decided so far and
    may replace it; here it ends the run conflicting_agents, and the run never moves to its next phase."""
    rt, run_id = _started(r, redis_url)
    seen = []

    def hook(_rt: object, outcome: Outcome, review: Review) -> Review | None:
        result = outcome.result
        seen.append((result.phase, review.state))
        if "disagree" in result.output:
            return Review(State.END, "conflicting_agents", "the critic and the coder disagree")
        return None

    rt.review_hooks.append(hook)
    result = _result(run_id, output="we disagree")
    assert (
        on_phase_result(rt, result, _token(r, result), delivery=_delivered(r, rt, result))
        == State.END
    )
    record = rt.load_run(run_id)
    assert seen == [("plan", State.ADVANCE)]
    assert (record.status, record.reason, record.phase_index) == (
        "terminated",
        "conflicting_agents",
        0,
    )
