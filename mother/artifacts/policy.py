"""The retention policy (seed 003 §6, ArtifactRetention): which class a run's end puts its artifacts
in, when they are archived and deleted, and how long the run's own records stay.

Every termination reason maps to one of the policy's run statuses:

| reason | class |
|---|---|
| success | success |
| user_cancelled | cancelled |
| approval_denied, blocked | blocked |
| retries_exhausted, timeout, budget_exhausted, policyViolation, context_budget_exceeded, conflicting_agents, insufficient_evidence, catastrophic_error | failed |

An artifact is stored with the ``default`` class (``default_ttl_days`` from its creation), so one whose
run never ends, or whose attempt Mother did not accept (an orphan), still expires; the run's end moves
each accepted artifact to its class, counted from the end.
"""

from __future__ import annotations

from dataclasses import dataclass

from mother.config import Settings
from schemas.termination import TERMINATION_REASONS

__all__ = ["DAY_MS", "REASON_CLASS", "Retention", "artifact_default", "retention_for"]

DAY_MS = 86_400_000

REASON_CLASS: dict[str, str] = {
    "success": "success",
    "user_cancelled": "cancelled",
    "approval_denied": "blocked",
    "blocked": "blocked",
    **{
        reason: "failed"
        for reason in (
            "retries_exhausted",
            "timeout",
            "budget_exhausted",
            "policyViolation",
            "context_budget_exceeded",
            "conflicting_agents",
            "insufficient_evidence",
            "catastrophic_error",
        )
    },
}
missing = set(TERMINATION_REASONS) - set(REASON_CLASS)
if missing:
    raise RuntimeError(f"termination reasons without a retention class: {sorted(missing)}")


@dataclass(frozen=True)
class Retention:
    """What a run's end sets: its artifacts' class, deletion and archive times, its records' time (ms)."""

    retention_class: str
    expires_ms: int
    archive_ms: int | None
    records_ms: int


def retention_for(settings: Settings, reason: str, end_ms: int) -> Retention:
    policy = settings.retention
    cls = REASON_CLASS.get(reason, "default")
    rule = policy.by_status.get(cls)  # type: ignore[call-overload]
    keep_days = rule.keep_days if rule is not None else policy.default_ttl_days
    archive_days = rule.archive_after_days if rule is not None else None
    archive_ms = (
        end_ms + int(archive_days * DAY_MS)
        if policy.archive.enabled and archive_days is not None and archive_days < keep_days
        else None
    )
    expires_ms = end_ms + int(keep_days * DAY_MS)
    # never shorter than the artifacts they explain
    records_ms = max(end_ms + int(policy.records_keep_days * DAY_MS), expires_ms)
    return Retention(cls, expires_ms, archive_ms, records_ms)


def artifact_default(settings: Settings, created_ms: int) -> int:
    """When an artifact expires if its run's end never moves it to a class."""
    return created_ms + int(settings.retention.default_ttl_days * DAY_MS)
