"""The four-layer limit resolution and the turn-start check."""

from __future__ import annotations

from decimal import Decimal

import pytest

from mother.errors import DepthExhausted
from mother.limits import check_limits, fail_safe_message, resolve_limits


def test_resolution_example() -> None:
    """resilience turns=15 spend=0.50 depth=5; directive turns=30; overrides turns=10 spend=0.10; parent turns=30 spend=1.00 depth=4."""
    resolved = resolve_limits(
        {"turns": 15, "spend": 0.50, "depth": 5},
        {"turns": 30},
        {"turns": 10, "spend": "0.10"},
        {"turns": 30, "spend": 1.00, "depth": 4},
    )
    assert resolved == {"turns": 10, "spend": Decimal("0.10"), "depth": 3}


def test_parent_caps_and_depth_runs_out() -> None:
    """A child never exceeds its parent; depth 3 → 2 → 1 → grandchildren's children refused."""
    assert resolve_limits({"spend": 5}, None, None, {"spend": 1})["spend"] == Decimal("1")
    child = resolve_limits({"depth": 5}, None, None, {"depth": 3})
    grandchild = resolve_limits({"depth": 5}, None, None, child)
    assert (child["depth"], grandchild["depth"]) == (2, 1)
    with pytest.raises(DepthExhausted, match=r"^Depth limit exhausted$"):
        resolve_limits({"depth": 5}, None, None, grandchild)


def test_turn_start_check_and_fail_safe_message() -> None:
    """The first exceeded limit is reported as the spec's fail-safe message."""
    limits = {"turns": 10, "tokens": 1000, "spend": Decimal("0.10")}
    assert check_limits(limits, {"turns": 9, "input_tokens": 10}) is None
    event = check_limits(limits, {"turns": 10, "input_tokens": 2000})
    assert fail_safe_message(event) == "Limit exceeded: turns_exceeded (10/10)"
    spend = check_limits(limits, {"turns": 1, "spend": Decimal("0.12")})
    assert fail_safe_message(spend) == "Limit exceeded: spend_exceeded (0.12/0.1)"
