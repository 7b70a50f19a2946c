"""The hierarchical spend ledger: the spec's Budget Flow Example, contention, and bad input."""

from __future__ import annotations

from concurrent.futures import ProcessPoolExecutor
from decimal import Decimal

import pytest
import redis

from mother.errors import InsufficientBudget, InvalidSpec, LedgerError
from mother.ledger import BudgetLedger


def test_budget_flow_example(r: redis.Redis) -> None:
    """The spec's ledger example step by step, ending at remaining $2.69."""
    ledger = BudgetLedger(r)
    assert ledger.register("root", Decimal("3.00")) == Decimal("3")
    # root uses 2 turns
    assert ledger.report_actual("root", 0.15) == Decimal("0.15")
    assert ledger.get_remaining("root") == Decimal("2.85")
    assert ledger.reserve("child-a", "0.10", "root") == Decimal("2.75")
    assert ledger.reserve("child-b", 0.10, "root") == Decimal("2.65")
    assert ledger.can_spawn("root", 0.10) == {
        "affordable": True,
        "remaining": Decimal("2.65"),
        "requested": Decimal("0.1"),
    }
    ledger.report_actual("child-a", "0.07")
    ledger.cascade_spend("child-a", "root", "0.07")
    assert ledger.release("child-a", "completed") == Decimal("0.03")
    assert ledger.get_remaining("root") == Decimal("2.68")
    ledger.report_actual("child-b", "0.09")
    ledger.cascade_spend("child-b", "root", "0.09")
    assert ledger.release("child-b", "completed") == Decimal("0.01")
    assert ledger.get_remaining("root") == Decimal("2.69")
    assert ledger.get_tree_spend("root") == {
        "total_actual": Decimal("0.31"),
        "total_reserved": Decimal("3"),
        "thread_count": 3,
        "active_count": 0,
    }


def test_cascade_reaches_every_ancestor_and_overspend_is_logged(r: redis.Redis) -> None:
    """A grandchild's spend reaches parent and root; spending past a reservation is logged, not refused."""
    ledger = BudgetLedger(r)
    ledger.register("r1", 1)
    ledger.reserve("c1", "0.50", "r1")
    ledger.reserve("g1", "0.20", "c1")
    # 0.05 over its reservation
    assert ledger.report_actual("g1", "0.25") == Decimal("0.25")
    assert ledger.cascade_spend("g1", "c1", "0.25") == 2
    assert ledger.get_tree_spend("r1")["total_actual"] == Decimal("0.25")
    assert any(f["type"] == "budget_overspend" for _, f in r.xrange("activity"))
    with pytest.raises(LedgerError, match="is not the parent"):
        ledger.cascade_spend("g1", "r1", "0.01")


def test_a_close_reports_cascades_and_releases_once(r: redis.Redis) -> None:
    """A thread's close (a run's end) in one call: its spend reaches every ancestor, its reservation is freed,
    and a second close of it (an end applied again after a Mother's stall) changes nothing: no spend
    cascaded twice, no reservation freed twice."""
    ledger = BudgetLedger(r)
    ledger.register("r2", 1)
    ledger.reserve("c2", "0.50", "r2")
    ledger.reserve("g2", "0.20", "c2")
    assert ledger.get_remaining("c2") == Decimal("0.30")
    assert ledger.close("g2", "0.15", "completed", ledger._node("g2")) == Decimal("0.05")
    after = {t: ledger._node(t) for t in ("r2", "c2", "g2")}
    assert (after["r2"]["actual"], after["c2"]["actual"], after["g2"]["status"]) == (
        150_000,
        150_000,
        "completed",
    )
    assert ledger.get_remaining("c2") == Decimal("0.35")
    assert ledger.close("g2", "0.15", "completed", ledger._node("g2")) == Decimal("0")
    assert {t: ledger._node(t) for t in ("r2", "c2", "g2")} == after
    # its own 0.01 + g2's 0.15
    assert ledger.close("c2", "0.01", "timeout", ledger._node("c2")) == Decimal("0.34")
    assert ledger.get_remaining("r2") == Decimal("0.84")


def test_refusals(r: redis.Redis) -> None:
    """Over-reserving, unknown parents, duplicates and bad amounts each fail with a clear error."""
    ledger = BudgetLedger(r)
    ledger.register("p", "1.00")
    with pytest.raises(
        InsufficientBudget, match=r"cannot reserve \$1.5 for c: parent p has \$1 left"
    ):
        ledger.reserve("c", "1.50", "p")
    with pytest.raises(LedgerError, match="no parent thread"):
        ledger.reserve("c", "0.10", "nobody")
    ledger.reserve("c", "0.10", "p")
    with pytest.raises(LedgerError, match="already has a reservation"):
        ledger.reserve("c", "0.10", "p")
    for bad in (-1, float("nan"), float("inf"), "ten", True, 10**9):
        with pytest.raises(InvalidSpec):
            ledger.reserve("d", bad, "p")  # type: ignore[arg-type]


def _reserve_many(url: str, start: int, count: int) -> int:
    ledger = BudgetLedger(redis.Redis.from_url(url, decode_responses=True))
    won = 0
    for i in range(start, start + count):
        try:
            ledger.reserve(f"kid-{i}", "0.10", "parent")
            won += 1
        except InsufficientBudget:
            pass
    return won


def test_1000_concurrent_reservations_from_8_processes(r: redis.Redis, redis_url: str) -> None:
    """1000 reservations of $0.10 from 8 processes against $5.00: exactly 50 succeed; tree spend exact after settle."""
    ledger = BudgetLedger(r)
    ledger.register("parent", "5.00")
    with ProcessPoolExecutor(8) as pool:
        won = sum(pool.map(_reserve_many, [redis_url] * 8, range(0, 1000, 125), [125] * 8))
    assert won == 50
    assert ledger.get_remaining("parent") == Decimal("0")
    kids = [f"kid-{i}" for i in range(1000) if r.exists(f"ledger:kid-{i}")]
    assert len(kids) == 50
    for kid in kids:
        ledger.report_actual(kid, "0.07")
        ledger.cascade_spend(kid, "parent", "0.07")
        ledger.release(kid, "completed")
    assert ledger.get_tree_spend("parent") == {
        "total_actual": Decimal("3.5"),
        "total_reserved": Decimal("5"),
        "thread_count": 51,
        "active_count": 0,
    }
    assert ledger.get_remaining("parent") == Decimal("1.5")
