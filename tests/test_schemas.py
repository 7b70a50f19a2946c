"""Records round-trip through orjson and reject bad input with readable, one-line messages."""

from __future__ import annotations

import math

import orjson
import pytest
from pydantic import ValidationError

from schemas import (
    TERMINATION_REASONS,
    ActivityEvent,
    PhaseResult,
    ResultEnvelope,
    RunSpec,
    RunState,
    TerminationRecord,
    describe_validation_error,
    iso_from_ms,
    ms_from_iso,
)

SPEC = {
    "user_id": "alice",
    "task": "Refactor the parser",
    "pipeline": [
        {"name": "plan", "role": "planner", "model": "qwen2.5:14b"},
        {"name": "execute", "role": "coder", "model": "ollama/llama3", "max_retries": 1},
    ],
    "limit_overrides": {"turns": 10, "spend": "0.10"},
    "metadata": {"ticket": "PROJ-1", "priority": 2},
}

RECORD = {
    "run_id": "run-abc123",
    "reason": "retries_exhausted",
    "phase_at_termination": "repair",
    "timestamp": "2025-12-19T22:30:45.123Z",
    "details": "Coder agent failed to produce valid CodePatch after 3 repair loops",
    "contributing_factors": ["Test suite failed with 5 errors", "Critic rejected patch twice"],
    "can_retry": True,
    "suggested_action": "escalate_model",
    "logged_by": "mother",
    "final_artifacts": ["critic-report-1", "test-results-2"],
}


def _error(model: type, data: object) -> str:
    with pytest.raises(ValidationError) as info:
        model.model_validate(data)
    return describe_validation_error(info.value)


def test_runspec_round_trips_through_orjson() -> None:
    """A RunSpec serialised with orjson parses back to an equal model."""
    spec = RunSpec.model_validate(SPEC)
    again = RunSpec.from_json(spec.to_json())
    assert again == spec
    assert str(again.limit_overrides.spend) == "0.10"
    assert again.pipeline[0].max_retries == 2


def test_termination_record_matches_the_spec_example() -> None:
    """The termination records' storage example validates field for field and round-trips unchanged."""
    record = TerminationRecord.model_validate(RECORD)
    assert orjson.loads(record.to_json()) == RECORD


def test_termination_reasons_are_the_spec_literals() -> None:
    """The eleven termination reasons of the spec, policyViolation spelled as in the spec, plus context_budget_exceeded."""
    assert TERMINATION_REASONS == (
        "success",
        "approval_denied",
        "policyViolation",
        "retries_exhausted",
        "timeout",
        "insufficient_evidence",
        "conflicting_agents",
        "user_cancelled",
        "budget_exhausted",
        "blocked",
        "catastrophic_error",
        "context_budget_exceeded",
    )
    assert "reason" in _error(TerminationRecord, {**RECORD, "reason": "policy_violation"})
    assert "suggested_action" in _error(TerminationRecord, {**RECORD, "suggested_action": "pray"})


def test_other_records_round_trip() -> None:
    """RunState, PhaseResult, ResultEnvelope and ActivityEvent survive orjson both ways."""
    spec = RunSpec.model_validate(SPEC)
    state = RunState(
        run_id="r1",
        user_id="alice",
        spec=spec,
        created_at=RECORD["timestamp"],
        updated_at=RECORD["timestamp"],
    )
    result = PhaseResult(
        run_id="r1",
        phase="plan",
        phase_index=0,
        attempt=1,
        status="completed",
        output="ok",
        confidence=0.9,
        evidence_count=2,
        artifacts=["a1"],
        finished_at=RECORD["timestamp"],
    )
    envelope = ResultEnvelope(
        run_id="r1",
        user_id="alice",
        output="ok",
        phases=[result],
        created_at=RECORD["timestamp"],
        termination=TerminationRecord.model_validate(RECORD),
    )
    event = ActivityEvent(
        type="run_submitted", at=RECORD["timestamp"], run_id="r1", data={"user_id": "alice"}
    )
    for model in (state, result, envelope, event):
        assert type(model).from_json(model.to_json()) == model
    assert ActivityEvent.from_fields(event.to_fields()) == event


@pytest.mark.parametrize(
    ("patch", "expected"),
    [
        ({"user_id": "bad id!"}, "user_id: must be 1-128 characters from A-Z a-z 0-9 _ . : -"),
        ({"user_id": "x" * 129}, "user_id: must be 1-128 characters"),
        ({"surprise": 1}, "surprise: unknown field; remove it"),
        ({"task": "x" * 10_000_000}, "task: String should have at most 200000 characters"),
        ({"task": ""}, "task: String should have at least 1 character"),
        ({"pipeline": []}, "pipeline: List should have at least 1 item"),
        (
            {"budget_profile": "lavish"},
            "budget_profile: Input should be 'conservative', 'balanced' or 'extended'",
        ),
        (
            {"limit_overrides": {"spend": -1}},
            "limit_overrides.spend: Input should be greater than or equal to 0",
        ),
        (
            {"limit_overrides": {"spend": math.inf}},
            "limit_overrides.spend: must be a finite number of USD",
        ),
        ({"limit_overrides": {"duration_seconds": math.nan}}, "limit_overrides.duration_seconds"),
        (
            {"limit_overrides": {"turns": 1.5}},
            "limit_overrides.turns: Input should be a valid integer",
        ),
        (
            {"limit_overrides": {"turns": "many"}},
            "limit_overrides.turns: Input should be a valid integer",
        ),
        (
            {"limit_overrides": {"turns": True}},
            "limit_overrides.turns: Input should be a valid integer",
        ),
        (
            {"limit_overrides": {"spawns": "3"}},
            "limit_overrides.spawns: Input should be a valid integer",
        ),
        (
            {"limit_overrides": {"duration_seconds": math.inf}},
            "limit_overrides.duration_seconds: Input should be a finite number",
        ),
        (
            # was taken as 1 second
            {"limit_overrides": {"duration_seconds": True}},
            "limit_overrides.duration_seconds: must be a number of seconds, not bool True",
        ),
        (
            {"limit_overrides": {"duration_seconds": "60"}},
            "limit_overrides.duration_seconds: must be a number of seconds, not str '60'",
        ),
        (
            {"pipeline": [{"name": "a", "role": "r", "model": "m", "timeout_seconds": False}]},
            "pipeline.0.timeout_seconds: must be a number of seconds, not bool False",
        ),
        (
            {"pipeline": [{"name": "a", "role": "r", "model": "m", "timeout_seconds": math.nan}]},
            "pipeline.0.timeout_seconds: Input should be a finite number",
        ),
        (
            {"pipeline": [{"name": "a", "role": "r", "model": "m", "max_retries": False}]},
            "pipeline.0.max_retries: Input should be a valid integer",
        ),
        (
            {"metadata": {"score": math.nan}},
            "metadata.score.float: Input should be a finite number",
        ),
        (
            {
                "pipeline": [
                    {"name": "a", "role": "r", "model": "m"},
                    {"name": "a", "role": "r", "model": "m"},
                ]
            },
            "phase names must be distinct; repeated: a",
        ),
    ],
)
def test_runspec_rejects_bad_input_readably(patch: dict, expected: str) -> None:
    """Each kind of bad spec gets a single-line message naming the field and the fix."""
    message = _error(RunSpec, {**SPEC, **patch})
    assert expected in message
    assert "\n" not in message


def test_missing_field_and_bad_json() -> None:
    """A missing user_id is named; text that is not JSON is refused with one line."""
    spec = {k: v for k, v in SPEC.items() if k != "user_id"}
    assert _error(RunSpec, spec) == "user_id: required field is missing"
    with pytest.raises(ValueError, match=r"^not valid JSON"):
        RunSpec.from_json(b"{not json")


def test_timestamps_are_iso_utc_with_millis() -> None:
    """Server milliseconds format as ISO-8601 UTC with three decimals and Z; other forms are refused."""
    assert iso_from_ms(1766183445123) == "2025-12-19T22:30:45.123Z"
    assert iso_from_ms(5) == "1970-01-01T00:00:00.005Z"
    # the way back, to the millisecond
    assert ms_from_iso("2025-12-19T22:30:45.123Z") == 1766183445123
    assert all(ms_from_iso(iso_from_ms(ms)) == ms for ms in range(1766183445000, 1766183446000))
    assert "timestamp" in _error(TerminationRecord, {**RECORD, "timestamp": "2025-12-19 22:30:45"})
