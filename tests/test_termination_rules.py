"""can_retry and suggested_action for each of the twelve termination reasons: the record Mother builds,
the rule table in mother/termination.py's docstring and the one in docs/architecture.md all say the same,
and what they say is the table below (written out here, not read from the code)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from mother import termination
from mother.termination import RULES, build_record
from schemas import TERMINATION_REASONS

ROOT = Path(__file__).resolve().parents[1]

EXPECTED = {
    "success": (False, "abandon"),
    "approval_denied": (False, "user_input"),
    "policyViolation": (False, "abandon"),
    "retries_exhausted": (True, "escalate_model"),
    "timeout": (True, "retry"),
    "insufficient_evidence": (True, "broaden_scope"),
    "conflicting_agents": (True, "escalate_model"),
    "user_cancelled": (True, "user_input"),
    "budget_exhausted": (False, "user_input"),
    "blocked": (True, "user_input"),
    "catastrophic_error": (False, "abandon"),
    "context_budget_exceeded": (True, "escalate_model"),
}


def test_every_reason_has_a_rule() -> None:
    assert len(TERMINATION_REASONS) == 12
    assert set(RULES) == set(TERMINATION_REASONS) == set(EXPECTED)


@pytest.mark.parametrize("reason", sorted(EXPECTED))
def test_the_record_of_each_reason_carries_its_recommendation(reason: str) -> None:
    record = build_record(
        run_id="r-1",
        reason=reason,  # type: ignore[arg-type]
        phase="plan",
        details="",
        at_ms=0,
        at_iso="2026-11-27T00:00:00.000Z",
    )
    assert (record.can_retry, record.suggested_action) == EXPECTED[reason]
    # no details: the reason's own summary says what happened
    assert record.details == RULES[reason].summary and record.details


def _table(text: str) -> dict[str, tuple[bool, str]]:
    """reason -> (can_retry, suggested_action) from a markdown table whose rows start with the reason."""
    out = {}
    for line in text.splitlines():
        cells = [c.strip().strip("`") for c in line.strip().strip("|").split("|")]
        if len(cells) >= 4 and cells[0] in EXPECTED:
            retry = [c for c in cells[1:] if c in ("yes", "no")]
            action = [
                m.group(0)
                for c in cells[1:]
                if (m := re.match(r"retry|escalate_model|broaden_scope|user_input|abandon", c))
            ]
            out[cells[0]] = (retry[-1] == "yes", action[-1])
    return out


@pytest.mark.parametrize("where", ["mother/termination.py docstring", "docs/architecture.md"])
def test_the_documented_tables_match_the_rules(where: str) -> None:
    text = (
        termination.__doc__ or ""
        if where.startswith("mother")
        else (ROOT / "docs" / "architecture.md").read_text()
    )
    assert _table(text) == EXPECTED
