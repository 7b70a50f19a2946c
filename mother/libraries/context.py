"""The ``retrieval_hits`` context section from the run's libraries (seed 003 §3 and §7): when a RunSpec
names ``libraries``, Mother retrieves for each phase (its role and model against each library's policy,
the phase's task or the run's as the query), adds the redacted hits to the section, best first, and
charges each query to the run's ``retrieval_queries``. A library that refuses the phase is skipped
(audited); when every library refuses it, or at the run's ``libraries.violations_to_end``-th refusal,
the run ends ``policyViolation``. Fewer
hits than ``libraries.min_hits`` (each scoring at least ``min_score``) end it ``insufficient_evidence``.
Hits that contradict each other (:func:`contradiction`) make the phase report the finding
``ambiguity``: Mother raises the ``retrieval_ambiguity`` conflict after it. A phase Mother escalated to
a cloud model stops for a person's approval where a library requires it (:func:`cloud_escalation`)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from mother.budget import Guard
from mother.errors import InsufficientEvidence, NotFound, PolicyViolation
from mother.libraries.access import agent_allowed, decide, model_allowed
from mother.libraries.retrieval import Hit, RetrievalRefused, retrieve
from mother.records.libraries import count_violations, read_policy
from mother.runtime import Runtime
from schemas import RunSpec, RunState

__all__ = ["LibraryHits", "cloud_escalation", "contradiction", "library_approvals", "library_hits"]


@dataclass(frozen=True)
class LibraryHits:
    """A phase's retrieval: the hits' texts (best first) and, when two of them contradict each other,
    why (:func:`contradiction`)."""

    texts: list[str]
    ambiguity: str | None = None


# a figure a chunk states: 12, 3.5, 1,200, 18%
FIGURE = re.compile(r"\d+(?:[.,]\d+)*%?")


def contradiction(library_id: str, hits: Sequence[Hit], margin: float) -> str | None:
    """Why ``hits`` (one library's, best first) contradict each other, or None: the best hit and another
    from a different document score within ``margin`` of each other (equally relevant to the query)
    and state different figures. Deterministic, and conservative: prose that disagrees without a
    figure is not caught (a phase can still report ``FINDING: ambiguity``)."""
    if margin <= 0 or len(hits) < 2:
        return None
    best = hits[0]
    figures = set(FIGURE.findall(best.text))
    if not figures:
        return None
    for other in hits[1:]:
        if other.score < best.score * (1 - margin):
            break
        if other.document_id == best.document_id:
            continue
        theirs = set(FIGURE.findall(other.text))
        if theirs and theirs != figures:
            return (
                f"{library_id}: {best.chunk_id} and {other.chunk_id} are equally relevant (scores "
                f"{best.score:.3f}, {other.score:.3f}) and state different figures "
                f"({', '.join(sorted(figures)[:5])} / {', '.join(sorted(theirs)[:5])})"
            )
    return None


def library_hits(rt: Runtime, run_id: str, spec: RunSpec, index: int) -> LibraryHits:
    """The phase's retrieval hits (text, best first) and whether they contradict each other; raises
    PolicyViolation or InsufficientEvidence."""
    if not spec.libraries:
        return LibraryHits([])
    phase = spec.pipeline[index]
    query = phase.task or spec.task
    guard = Guard(rt.redis, rt.settings, run_id, spec.user_id, rt.clock.today)
    found: list[tuple[float, str]] = []
    refused: list[str] = []
    ambiguity: str | None = None
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
        ambiguity = ambiguity or contradiction(
            library_id, got.hits, rt.settings.libraries.ambiguity_margin
        )
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
    return LibraryHits([text for _score, text in found], ambiguity)


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


def cloud_escalation(rt: Runtime, state: RunState, index: int, model: str) -> list[str]:
    """The libraries whose policy requires approval before the phase's chunks go to ``model``, a cloud
    model (the catalogue's flag) that Mother chose and the RunSpec did not name for the phase: the
    context's escalation to a larger window, a conflict's escalated re-run or its arbiter. Empty when
    nothing needs approving. Raises PolicyViolation when a library's policy refuses ``model`` outright
    (its chunks were retrieved for the phase's own model and must not reach this one)."""
    config = rt.settings.models.get(model)
    if not state.spec.libraries or config is None or not config.cloud:
        return []
    phase = state.spec.pipeline[index]
    detour = state.detour
    # the model the RunSpec names for this attempt: an arbiter is always Mother's choice
    if detour is None:
        named: str | None = phase.model
    elif detour.kind == "arbiter":
        named = None
    else:
        named = state.spec.pipeline[detour.for_phase].model if detour.for_phase != index else model
    if model == named:
        return []
    needing = []
    for library_id in state.spec.libraries:
        try:
            policy = read_policy(rt.redis, library_id)
        # an unknown library was refused when the phase retrieved
        except NotFound:
            continue
        # a library that refuses the agent, or wants a justification it lacks, gave the phase nothing
        unjustified = (
            policy.audit.require_justification and not (state.spec.justification or "").strip()
        )
        if not agent_allowed(policy, phase.role) or unjustified:
            continue
        if not model_allowed(policy, model, cloud=True):
            # a detour's context was retrieved for its own model: that library gave it nothing
            if model == phase.model:
                continue
            raise PolicyViolation(
                f"phase {phase.name} was escalated to cloud model {model}, which library "
                f"{library_id}'s policy refuses; its chunks cannot go to that model (allow it in the "
                "policy, or give the phase a model whose window fits its context)"
            )
        if policy.require_approval_for.cloud_escalation:
            needing.append(library_id)
    return needing
