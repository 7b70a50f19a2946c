"""Verdicts read from replies, and conflict detection's rules: pure functions, no Redis."""

from __future__ import annotations

import pytest

from mother.config import Settings
from mother.conflicts.detect import detect
from mother.errors import VerdictMissing
from schemas import PhaseResult, RunSpec, RunState
from schemas.conflict import Verdict
from workers.verdict import findings_in, verdict_for, verdict_in, winner_in

AT = "2026-11-24T10:00:00.000Z"


@pytest.mark.parametrize(
    ("text", "verdict"),
    [
        ("Looks fine.\nVERDICT: ACCEPT", "accept"),
        ("verdict = rejected", "reject"),
        ("**Verdict**: Pass", "accept"),
        ("Decision: FAILED because the test is flaky", "reject"),
        ("Approved: the entry is accurate", "accept"),
        ("Rejected - memory cost too low", "reject"),
        ("VERDICT: REJECT\nafter a second look\nVERDICT: ACCEPT", "accept"),
        ("I think it is fine", None),
        ("The verdict is unclear", None),
        ("VERDICT: maybe", None),
    ],
)
def test_a_verdict_is_read_from_its_line_or_the_replys_first_word(
    text: str, verdict: str | None
) -> None:
    assert verdict_in(text) == verdict


def test_findings_and_winner_are_read_from_their_lines() -> None:
    text = "FINDING: contradiction\nfinding - ambiguity\nFINDING: contradiction\nWINNER: propose_b"
    assert findings_in(text) == ["contradiction", "ambiguity"]
    assert winner_in(text) == "propose_b"
    assert findings_in("no findings here") == [] and winner_in("none") is None


def test_a_reviewing_role_without_a_verdict_fails_and_a_working_one_needs_none() -> None:
    common = {
        "confidence": 0.8,
        "evidence_count": 1,
        "artifact_ids": ["art-1"],
        "role": "critic",
        "model": "scripted",
        "reviews": "code",
        "winner": None,
    }
    assert verdict_for("work", stated=None, text="done", **common) is None
    with pytest.raises(VerdictMissing, match="'VERDICT: ACCEPT' or 'VERDICT: REJECT'"):
        verdict_for("review", stated=None, text="seems fine", **common)
    stated = verdict_for("test", stated="reject", text="VERDICT: ACCEPT", **common)
    assert stated is not None and (stated.decision, stated.agent_id, stated.reviews) == (
        "reject",
        "critic",
        "code",
    )


def _state(pipeline: list[dict], results: list[PhaseResult]) -> RunState:
    spec = RunSpec.model_validate(
        {"run_id": "r1", "user_id": "alice", "task": "t", "pipeline": pipeline}
    )
    return RunState(
        run_id="r1",
        user_id="alice",
        spec=spec,
        status="running",
        created_at=AT,
        updated_at=AT,
        results=results,
        phase_index=len(results),
        attempt=1,
    )


def _result(
    phase: str, index: int, *, confidence: float = 0.9, verdict: str | None = None, **more: object
) -> PhaseResult:
    judged = (
        Verdict(decision=verdict, confidence=confidence, agent_id=phase, model="scripted")
        if verdict
        else None
    )
    return PhaseResult.model_validate(
        {
            "run_id": "r1",
            "phase": phase,
            "phase_index": index,
            "attempt": 1,
            "status": "completed",
            "output": more.pop("output", f"output of {phase}"),
            "confidence": confidence,
            "finished_at": AT,
            "verdict": judged.to_dict() if judged else None,
            **more,
        }
    )


CODE = {"name": "code", "role": "coder", "model": "scripted"}
REVIEW = {"name": "review", "role": "critic", "model": "scripted", "reviews": "code"}
TEST = {"name": "test", "role": "tester", "model": "scripted", "reviews": "code", "kind": "test"}


def test_detection_rules_in_their_order() -> None:
    settings = Settings()
    code = _result("code", 0)
    # a critic that rejects the work: critic_vs_coder, the coder's and the critic's sides
    found = detect(settings, _state([CODE, REVIEW], [code]), _result("review", 1, verdict="reject"))
    assert found is not None and found.kind == "critic_vs_coder" and found.work_index == 0
    assert [(p.agent_id, p.stance) for p in found.parties] == [
        ("coder", "work"),
        ("review", "reject"),
    ]
    # one that accepts: nothing
    assert (
        detect(settings, _state([CODE, REVIEW], [code]), _result("review", 1, verdict="accept"))
        is None
    )
    # tests pass, the critic rejects: test_vs_review comes first
    passed = _result("test", 1, verdict="accept")
    found = detect(
        settings,
        _state([CODE, TEST, REVIEW], [code, passed]),
        _result("review", 2, verdict="reject"),
    )
    assert found is not None and found.kind == "test_vs_review"
    # findings
    found = detect(settings, _state([CODE], []), _result("code", 0, findings=["ambiguity"]))
    assert found is not None and found.kind == "retrieval_ambiguity"
    found = detect(settings, _state([CODE], []), _result("code", 0, findings=["contradiction"]))
    assert found is not None and found.kind == "evidence_contradiction"
    # low confidence, only for work, under the threshold
    assert detect(settings, _state([CODE], []), _result("code", 0, confidence=0.5)) is None
    found = detect(settings, _state([CODE], []), _result("code", 0, confidence=0.49))
    assert found is not None and found.kind == "low_confidence_output"
    # proposals that differ, once the group's last has completed
    a = {"name": "a", "role": "p1", "model": "scripted", "group": "g"}
    b = {"name": "b", "role": "p2", "model": "scripted", "group": "g"}
    found = detect(settings, _state([a, b], [_result("a", 0)]), _result("b", 1))
    assert found is not None and found.kind == "competing_proposals"
    assert [p.stance for p in found.parties] == ["proposal", "proposal"]
    same = detect(
        settings, _state([a, b], [_result("a", 0, output="same")]), _result("b", 1, output=" same ")
    )
    assert same is None


def test_a_spec_whose_phase_reviews_no_earlier_phase_is_refused() -> None:
    with pytest.raises(ValueError, match="reviews 'later', which is not an earlier phase"):
        RunSpec.model_validate(
            {
                "user_id": "alice",
                "task": "t",
                "pipeline": [
                    {**REVIEW, "reviews": "later"},
                    {"name": "later", "role": "coder", "model": "scripted"},
                ],
            }
        )


def test_a_roles_declaration_makes_its_phases_review_and_need_approval() -> None:
    """A role file's (here harness.roles') kind and require_approval apply to every phase of the role;
    a phase's own kind comes first; conflicts.role_kinds covers roles that declare nothing."""
    from mother.roles import phase_kind, phase_needs_approval

    settings = Settings(
        harness={"roles": {"critic": {"kind": "review"}, "deployer": {"require_approval": True}}},
        conflicts={"role_kinds": {"tester": "test"}},
    )
    spec = RunSpec.model_validate(
        {
            "user_id": "alice",
            "task": "t",
            "pipeline": [
                CODE,
                {"name": "review", "role": "critic", "model": "scripted"},
                {"name": "test", "role": "tester", "model": "scripted"},
                {"name": "deploy", "role": "deployer", "model": "scripted"},
                {"name": "note", "role": "critic", "model": "scripted", "kind": "work"},
            ],
        }
    )
    assert [phase_kind(settings, spec, i) for i in range(5)] == [
        "work",
        "review",
        "test",
        "work",
        "work",
    ]
    assert [phase_needs_approval(settings, spec, i) for i in range(5)] == [
        False,
        False,
        False,
        True,
        False,
    ]
    # without any declaration a critic is a phase like any other
    assert phase_kind(Settings(), spec, 1) == "work"
