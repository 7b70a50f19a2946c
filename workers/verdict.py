"""What a phase's final reply states beyond its output: a reviewing role's verdict, an arbiter's chosen
proposal, and findings (contradicting sources, ambiguous retrieval).

A scripted reply states them in fields (``verdict``, ``winner``, ``findings``); a real model states
them in its text, one per line, anywhere in the reply (case does not matter):

    VERDICT: ACCEPT        (also ACCEPTED, APPROVE(D), PASS(ED); REJECT(ED), FAIL(ED))
    WINNER: <phase name>   (an arbiter of competing proposals)
    FINDING: contradiction (or ambiguity)

A reply that starts with "Approved", "Accepted", "Passed", "Rejected" or "Failed" states its verdict
too. The last VERDICT line wins.
"""

from __future__ import annotations

import re

from mother.errors import VerdictMissing
from schemas.conflict import Finding, RoleKind, Verdict

__all__ = ["findings_in", "verdict_for", "verdict_in", "winner_in"]

_ACCEPT = {"accept", "accepted", "approve", "approved", "pass", "passed"}
_VERDICT_LINE = re.compile(
    r"^[ \t*_#>-]*(?:verdict|decision)[ \t*_]*[:=-][ \t*_]*([a-z]+)", re.IGNORECASE | re.MULTILINE
)
_LEADING = re.compile(r"^\W*(approved|accepted|passed|rejected|failed)\b", re.IGNORECASE)
_WINNER_LINE = re.compile(
    r"^[ \t*_#>-]*winner[ \t*_]*[:=-][ \t*_]*([A-Za-z0-9_.:-]{1,128})", re.IGNORECASE | re.MULTILINE
)
_FINDING_LINE = re.compile(
    r"^[ \t*_#>-]*finding[ \t*_]*[:=-][ \t*_]*(contradiction|ambiguity)\b",
    re.IGNORECASE | re.MULTILINE,
)
_WORDS = {
    **dict.fromkeys(_ACCEPT, "accept"),
    **dict.fromkeys(("reject", "rejected", "fail", "failed", "deny", "denied"), "reject"),
}


def verdict_in(text: str) -> str | None:
    """``accept`` or ``reject`` as the text states it; None when it states neither."""
    stated = [_WORDS.get(word.lower()) for word in _VERDICT_LINE.findall(text)]
    stated = [s for s in stated if s is not None]
    if stated:
        return stated[-1]
    leading = _LEADING.match(text)
    return _WORDS.get(leading.group(1).lower()) if leading else None


def winner_in(text: str) -> str | None:
    found = _WINNER_LINE.findall(text)
    return found[-1] if found else None


def findings_in(text: str) -> list[Finding]:
    seen: list[Finding] = []
    for word in _FINDING_LINE.findall(text):
        finding: Finding = "contradiction" if word.lower() == "contradiction" else "ambiguity"
        if finding not in seen:
            seen.append(finding)
    return seen


def verdict_for(
    kind: RoleKind,
    *,
    stated: str | None,
    text: str,
    confidence: float,
    evidence_count: int,
    artifact_ids: list[str],
    role: str,
    model: str,
    reviews: str | None,
    winner: str | None,
    on_missing: str = "retry",
) -> Verdict | None:
    """A reviewing role's verdict (``stated`` by a scripted or structured reply, else read from
    ``text``); None for a role that produces work. A reviewing role that states none: with
    ``on_missing`` ``retry`` VerdictMissing (its phase fails and is retried); with ``reject`` a rejecting
    verdict of confidence 0, so the conflict policy decides what follows."""
    if kind == "work":
        return None
    decision = stated or verdict_in(text)
    if decision not in ("accept", "reject") and on_missing == "reject":
        decision, confidence, evidence_count = "reject", 0.0, 0
    if decision not in ("accept", "reject"):
        raise VerdictMissing(
            f"role {role} reviews work but its reply states no verdict: end it with a line "
            "'VERDICT: ACCEPT' or 'VERDICT: REJECT'"
        )
    return Verdict(
        decision="accept" if decision == "accept" else "reject",
        confidence=confidence,
        evidence_count=evidence_count,
        artifact_ids=artifact_ids,
        agent_id=role,
        model=model,
        reviews=reviews,
        winner=winner or winner_in(text),
    )
