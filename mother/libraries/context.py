"""The ``retrieval_hits`` context section from the run's libraries (seed 003 §3 and §7): when a RunSpec
names ``libraries``, Mother retrieves for each phase (its role and model against each library's policy,
the phase's task or the run's as the query), adds the redacted hits to the section, best first, and
charges each query to the run's ``retrieval_queries``. A library that refuses the phase is skipped
(audited); when every library refuses it, or at the run's ``libraries.violations_to_end``-th refusal,
the run ends ``policyViolation``. Fewer
hits than ``libraries.min_hits`` (each scoring at least ``min_score``) end it ``insufficient_evidence``."""

from __future__ import annotations

from mother import keys
from mother.budget import Guard
from mother.errors import InsufficientEvidence, NotFound, PolicyViolation
from mother.libraries.retrieval import RetrievalRefused, retrieve
from mother.records.libraries import read_policy
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
        count = rt.redis.incrby(keys.library_run_violations_key(run_id), len(refused))
        rt.redis.expire(keys.library_run_violations_key(run_id), 7 * 86_400)
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
    """Why a person must approve the run's first phase for its libraries (empty: no one must): a run
    that joins two or more libraries, one of whose policies requires approval for cross_library_joins.
    Read only for a run that names two or more."""
    if index != 0 or len(spec.libraries) < 2:
        return []
    needing = []
    for library_id in spec.libraries:
        try:
            policy = read_policy(rt.redis, library_id)
        # an unknown library is refused when the phase retrieves
        except NotFound:
            continue
        if policy.require_approval_for.cross_library_joins:
            needing.append(library_id)
    if not needing:
        return []
    return [
        f"the run joins libraries {', '.join(spec.libraries)}, and {', '.join(needing)} "
        "require(s) approval for cross_library_joins"
    ]
