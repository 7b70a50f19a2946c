"""Which disagreement a completed phase result raises, if any: deterministic, from the result, the phases'
kinds (:func:`mother.roles.phase_kind`) and the run's accepted results. No I/O beyond reading role
declarations. The rules, first match wins (docs/conflicts.md):

1. test_vs_review: a reviewing phase's verdict differs from the verdict of an earlier reviewing phase of
   the other kind (a test run's against a critic's) on the same work.
2. critic_vs_coder: a reviewing phase (a critic's or a test run's) rejects the work it reviews.
3. evidence_contradiction: a phase reports contradicting sources (finding ``contradiction``).
4. retrieval_ambiguity: a phase reports ambiguous retrieval (finding ``ambiguity``).
5. competing_proposals: the last phase of a ``group`` completes and the group's outputs differ.
6. low_confidence_output: a phase whose role produces work completes below
   ``conflicts.low_confidence_threshold``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mother.config import Settings
from mother.roles import phase_kind, reviewed_index
from schemas import PhaseResult, RunSpec, RunState
from schemas.conflict import ConflictType, PartyOutput

__all__ = ["FINDINGS", "Found", "detect", "may_conflict", "party"]

# a finding a phase reports, and the conflict it raises
FINDINGS: dict[str, ConflictType] = {
    "contradiction": "evidence_contradiction",
    "ambiguity": "retrieval_ambiguity",
}


@dataclass(frozen=True)
class Found:
    """A conflict to open: its type, the phase whose output is in question, and the sides."""

    kind: ConflictType
    work_index: int | None
    parties: list[PartyOutput] = field(default_factory=list)


def party(result: PhaseResult, role: str, stance: str | None = None) -> PartyOutput:
    """A result as one side of a conflict: a verdict's figures for a reviewer, the result's otherwise."""
    verdict = result.verdict
    decided = verdict is not None and stance in (None, "accept", "reject")
    return PartyOutput.model_validate(
        {
            "agent_id": verdict.agent_id if decided and verdict is not None else role,
            "confidence": verdict.confidence
            if decided and verdict is not None
            else result.confidence,
            "evidence_count": (
                verdict.evidence_count if decided and verdict is not None else result.evidence_count
            ),
            "artifact_ids": list(result.artifacts),
            "phase": result.phase,
            "attempt": result.attempt,
            "model": (
                verdict.model
                if decided and verdict is not None
                else result.manifest.model
                if result.manifest is not None
                else None
            ),
            "stance": stance or (verdict.decision if verdict is not None else "work"),
        }
    )


def may_conflict(settings: Settings, spec: RunSpec, result: PhaseResult) -> bool:
    """Whether the result could raise a conflict at all (the cheap check before the run is read)."""
    phase = spec.pipeline[result.phase_index]
    if result.verdict is not None or result.findings or phase.group is not None:
        return True
    return (
        result.confidence < settings.conflicts.low_confidence_threshold
        and phase_kind(settings, spec, result.phase_index) == "work"
    )


def detect(settings: Settings, state: RunState, result: PhaseResult) -> Found | None:
    """The conflict ``result`` (phase ``result.phase_index``'s, not yet accepted) raises in ``state``."""
    spec = state.spec
    index = result.phase_index
    phase = spec.pipeline[index]
    kind = phase_kind(settings, spec, index)
    accepted = state.results
    me = party(result, phase.role)
    work_index = reviewed_index(settings, spec, index) if kind != "work" else index
    work = (
        party(accepted[work_index], spec.pipeline[work_index].role, "work")
        if work_index is not None and work_index < min(index, len(accepted))
        else None
    )
    verdict = result.verdict
    if verdict is not None and kind != "work":
        for i in range(min(index, len(accepted)) - 1, -1, -1):
            other = accepted[i]
            other_kind = phase_kind(settings, spec, i)
            if (
                other.verdict is not None
                and {other_kind, kind} == {"review", "test"}
                and reviewed_index(settings, spec, i) == work_index
                and other.verdict.decision != verdict.decision
            ):
                sides = [party(other, spec.pipeline[i].role), me]
                return Found("test_vs_review", work_index, sides)
        if verdict.decision == "reject":
            return Found("critic_vs_coder", work_index, [*([work] if work else []), me])
    for finding, conflict in FINDINGS.items():
        if finding in result.findings:
            sides = [*([work] if work and kind != "work" else []), me]
            return Found(conflict, work_index, sides)
    if phase.group is not None:
        members = [i for i, p in enumerate(spec.pipeline) if p.group == phase.group]
        if index == members[-1] and all(i < len(accepted) for i in members[:-1]):
            proposals = [(i, accepted[i]) for i in members[:-1]] + [(index, result)]
            if len({r.output.strip() for _, r in proposals}) > 1:
                sides = [party(r, spec.pipeline[i].role, "proposal") for i, r in proposals]
                return Found("competing_proposals", None, sides)
    if kind == "work" and result.confidence < settings.conflicts.low_confidence_threshold:
        return Found("low_confidence_output", index, [party(result, phase.role, "work")])
    return None
