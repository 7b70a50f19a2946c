"""The ``retrieval_hits`` context section from the run's libraries (seed 003 §3 and §7): when a RunSpec
names ``libraries``, Mother retrieves for each phase (its role and model against each library's policy,
the phase's task or the run's as the query), adds the redacted hits to the section, best first, and
charges each query to the run's ``retrieval_queries``. A library that refuses the phase is skipped
(audited); when every library refuses it, or at the run's ``libraries.violations_to_end``-th refusal,
the run ends ``policyViolation``. Fewer
hits than ``libraries.min_hits`` (each scoring at least ``min_score``) end it ``insufficient_evidence``."""

from __future__ import annotations

from mother.budget import Guard
from mother.errors import InsufficientEvidence, NotFound, PolicyViolation
from mother.libraries.access import decide
from mother.libraries.retrieval import RetrievalRefused, retrieve
from mother.records.libraries import count_violations, read_policy
from mother.runtime import Runtime
from schemas import RunSpec

__all__ = ["library_approvals", "library_hits"]


def library_hits(rt: Runtime, run_id: str, spec: RunSpec, index: int) -> list[str]:
    """The phase's retrieval hits (text, best first); raises PolicyViolation or InsufficientEvidence."""
    if not spec.libraries:
        return []
    phase = spec.pipeline[index]
    query = phase.task or spec.task
    guard = Guard(rt.redis, rt.settings, run_id, spec.user_id, rt.clock.today)
    found: list[tuple[float, str]] = []
    refused: list[str] = []
    for library_id in spec.libraries:
        try:
            got = retrieve(
                rt,
                run_id=run_id,
                user_id=spec.user_id,
                role=phase.role,
                model=phase.model,
                library_id=library_id,
                query=query,
                justification=spec.justification,
                charge=lambda: guard.charge("retrieval_queries"),
            )
        except RetrievalRefused as exc:
            refused.append(f"{library_id}: {exc.message}")
            continue
        found += [(h.score, f"[{library_id}/{h.chunk_id}] {h.text}") for h in got.hits]
    if refused:
        count = count_violations(rt.redis, run_id, len(refused))
        limit = rt.settings.libraries.violations_to_end
        # no library the run names would serve the phase: it cannot do what was asked
        if len(refused) == len(spec.libraries) or (limit and count >= limit):
            raise PolicyViolation(
                f"library access refused ({count} in this run; libraries.violations_to_end is "
                f"{limit}): " + "; ".join(refused)
            )
    counted = [text for score, text in found if score >= rt.settings.libraries.min_score]
    if len(counted) < rt.settings.libraries.min_hits:
        raise InsufficientEvidence(
            f"retrieval from {', '.join(spec.libraries)} found {len(counted)} hit(s) for "
            f"{query[:100]!r}; libraries.min_hits is {rt.settings.libraries.min_hits}"
            + (f" (refused: {'; '.join(refused)})" if refused else "")
        )
    found.sort(key=lambda item: -item[0])
    return [text for _score, text in found]


def library_approvals(rt: Runtime, spec: RunSpec, index: int) -> list[str]:
    """Why a person must approve the run's first phase for its libraries (empty: no one must), from the
    policies of the libraries that would serve the phase (the controller's decision for its role, model
    and justification; one that would refuse it refuses at retrieval instead, with no one asked):
    - ``export_to_artifact``: the run's outputs, made from the library, are stored as artifacts;
    - ``cross_library_joins``: the run joins two or more libraries."""
    if index != 0 or not spec.libraries:
        return []
    phase = spec.pipeline[index]
    model = rt.settings.models.get(phase.model)
    cloud = bool(model is not None and model.cloud)
    serving = []
    for library_id in spec.libraries:
        try:
            policy = read_policy(rt.redis, library_id)
        # an unknown library is refused when the phase retrieves
        except NotFound:
            continue
        if decide(
            policy,
            role=phase.role,
            model=phase.model,
            cloud=cloud,
            justification=spec.justification,
        ).allowed:
            serving.append(policy)
    reasons = []
    export = [p.library_id for p in serving if p.require_approval_for.export_to_artifact]
    if export:
        reasons.append(
            f"its outputs are stored as artifacts, and {', '.join(export)} require(s) approval for "
            "export_to_artifact"
        )
    joins = [p.library_id for p in serving if p.require_approval_for.cross_library_joins]
    if len(spec.libraries) > 1 and joins:
        reasons.append(
            f"the run joins libraries {', '.join(spec.libraries)}, and {', '.join(joins)} "
            "require(s) approval for cross_library_joins"
        )
    return reasons
