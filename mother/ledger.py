"""The hierarchical spend ledger (the spec's BudgetLedger), in Redis.

Each thread (a run) has ``ledger:{thread_id}``. A root registers its ceiling; a child
reserves part of its parent's remaining budget atomically::

    remaining(parent) = max_spend - actual_spend - Σ active children's reserved

Spend reported by a thread is its own; ``cascade_spend`` adds a finished child's
spend to every ancestor, so a node's ``actual`` covers its whole subtree.
``release`` sets reserved := actual and stops counting the child's reservation in
its parent, freeing the rest. Every operation is one server function call
(``mother/lua/ledger.lua``). USD goes in and out as ``Decimal`` (floats and strings
accepted); inside it is integer micro-USD.
"""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from typing import Any, cast

import orjson
import redis

from mother import keys
from mother.activity import emit
from mother.clock import ServerClock
from mother.errors import InsufficientBudget, InvalidSpec, LedgerError
from mother.functions import call
from mother.logs import get_logger

__all__ = ["BudgetLedger", "to_micro", "to_usd"]

log = get_logger("ledger")
MICRO = Decimal(1_000_000)
MAX_USD = Decimal(1_000_000)


def to_micro(amount: Decimal | float | str | int, what: str = "amount") -> int:
    """USD → integer micro-USD (half-up); negative, non-finite or absurd amounts are refused."""
    try:
        value = Decimal(repr(amount)) if isinstance(amount, float) else Decimal(amount)
    except (InvalidOperation, TypeError, ValueError):
        raise InvalidSpec(f"{what} {amount!r} is not a number of USD") from None
    if isinstance(amount, bool) or not value.is_finite():
        raise InvalidSpec(f"{what} must be a finite number of USD, got {amount!r}")
    if value < 0 or value > MAX_USD:
        raise InvalidSpec(f"{what} must be between 0 and {MAX_USD} USD, got {amount!r}")
    return int((value * MICRO).quantize(Decimal(1), rounding=ROUND_HALF_UP))


def to_usd(micro: int | float) -> Decimal:
    return (
        (Decimal(int(micro)) / MICRO).quantize(Decimal("0.000001")).normalize()
        if micro
        else Decimal(0)
    )


def queue_node_read(pipe: Any, thread_id: str) -> None:
    """Queue the read of a thread's ledger node on ``pipe`` (a run's end needs it: its lineage and reservation)."""
    pipe.execute_command("JSON.GET", keys.ledger_key(thread_id))


def checked(raw: str) -> dict[str, Any]:
    """A ledger function's reply, decoded; ``LedgerError`` when it reports an error."""
    reply = orjson.loads(raw)
    if reply.get("error"):
        raise LedgerError(reply["error"])
    return reply


class BudgetLedger:
    """``BudgetLedger(redis_client)`` with the spec's method names and arguments."""

    def __init__(
        self,
        redis_client: redis.Redis,
        activity_maxlen: int = 100_000,
        clock: ServerClock | None = None,
    ) -> None:
        # the functions library is (re)loaded on first use if the server lacks it
        self.redis = redis_client
        self.clock = clock or ServerClock(redis_client)
        self.maxlen = activity_maxlen

    def _call(self, name: str, keys_: list[str], args: list[Any]) -> dict[str, Any]:
        return checked(call(self.redis, name, keys_, args))

    def _children(self, thread_id: str) -> list[str]:
        # the connection decodes replies
        return sorted(cast("set[str]", self.redis.smembers(keys.ledger_children_key(thread_id))))

    def _node(self, thread_id: str) -> dict[str, Any]:
        raw = self.redis.execute_command("JSON.GET", keys.ledger_key(thread_id))
        if raw is None:
            raise LedgerError(
                f"thread {thread_id} is not in the ledger; register it or reserve for it first"
            )
        return orjson.loads(raw)

    def register(
        self,
        thread_id: str,
        max_spend: Decimal | float | str,
        pipe: redis.client.Pipeline | None = None,
    ) -> Decimal | None:
        """A root thread's ceiling. Registering again with the same ceiling is a no-op.
        With ``pipe`` the call is queued (returns None); pass its reply to :func:`checked`."""
        raw = call(
            pipe if pipe is not None else self.redis,
            "ledger_register",
            [keys.ledger_key(thread_id)],
            [thread_id, to_micro(max_spend, "max_spend"), self.clock.now_iso()],
        )
        return None if pipe is not None else to_usd(checked(raw)["remaining"])

    def reserve(
        self, child_id: str, amount: Decimal | float | str, parent_thread_id: str
    ) -> Decimal:
        """Atomically reserve ``amount`` of the parent's remaining budget for a child; returns what the parent has left."""
        micro = to_micro(amount)
        reply = self._call(
            "ledger_reserve",
            [
                keys.ledger_key(parent_thread_id),
                keys.ledger_key(child_id),
                keys.ledger_children_key(parent_thread_id),
            ],
            [child_id, micro, self.clock.now_iso()],
        )
        if not reply["ok"]:
            raise InsufficientBudget(
                f"cannot reserve ${to_usd(micro)} for {child_id}: parent {parent_thread_id} has ${to_usd(reply['remaining'])} left",
                remaining=str(to_usd(reply["remaining"])),
                requested=str(to_usd(micro)),
            )
        return to_usd(reply["remaining"])

    def report_actual(self, thread_id: str, actual_spend: Decimal | float | str) -> Decimal:
        """Set the thread's own spend; an overspend of its reservation is logged (``BudgetOverspend``), not raised."""
        reply = self._call(
            "ledger_report", [keys.ledger_key(thread_id)], [to_micro(actual_spend, "actual_spend")]
        )
        self._report_overspend(thread_id, reply)
        return to_usd(reply["actual"])

    def _report_overspend(self, thread_id: str, report: dict[str, Any]) -> None:
        if report["overspend"] > 0:
            log.warning(
                "BudgetOverspend",
                thread_id=thread_id,
                overspend_usd=str(to_usd(report["overspend"])),
            )
            emit(
                self.redis,
                "budget_overspend",
                at=self.clock.now_iso(),
                run_id=thread_id,
                maxlen=self.maxlen,
                overspend_usd=str(to_usd(report["overspend"])),
            )

    def cascade_spend(
        self, child_thread_id: str, parent_thread_id: str, actual_spend: Decimal | float | str
    ) -> int:
        """Add the child's spend to its parent and every ancestor above it; returns how many were updated."""
        chain = _ancestors(self._node(child_thread_id))
        if not chain or chain[0] != parent_thread_id:
            raise LedgerError(f"{parent_thread_id} is not the parent of {child_thread_id}")
        reply = self._call(
            "ledger_cascade",
            [keys.ledger_key(child_thread_id), *map(keys.ledger_key, chain)],
            [to_micro(actual_spend, "actual_spend")],
        )
        return int(reply["ancestors"])

    def release(self, thread_id: str, final_status: str) -> Decimal:
        """On completion: reserved := actual; the parent's remaining grows by what was not used. Returns that."""
        parent = self._node(thread_id).get("parent_id") or thread_id
        reply = self._call(
            "ledger_release",
            [keys.ledger_key(thread_id), keys.ledger_key(parent)],
            [final_status[:32]],
        )
        return to_usd(reply.get("freed", 0))

    def close(
        self,
        thread_id: str,
        actual_spend: Decimal | float | str,
        final_status: str,
        node: dict[str, Any],
        pipe: redis.client.Pipeline | None = None,
    ) -> Decimal | None:
        """A thread's end in one server call (``ledger_close``), applied once: report its spend, cascade it to
        its ancestors (if it has a parent), release its reservation; a thread closed already is left as it
        is. ``node`` is its ledger entry as read by the caller.

        Returns what the release freed; with ``pipe`` the call is queued on it (returns None): pass its
        reply to :meth:`closed`."""
        micro = to_micro(actual_spend, "actual_spend")
        parent = node.get("parent_id") or thread_id
        target = pipe if pipe is not None else self.redis
        reply = call(
            target,
            "ledger_close",
            [
                keys.ledger_key(thread_id),
                keys.ledger_key(parent),
                *map(keys.ledger_key, _ancestors(node)),
            ],
            [micro, final_status[:32]],
        )
        return None if pipe is not None else self.closed(thread_id, reply)

    def closed(self, thread_id: str, raw_reply: str) -> Decimal:
        """Check :meth:`close`'s reply (LedgerError on an error), log an overspend; what was freed."""
        reply = checked(raw_reply)
        self._report_overspend(thread_id, reply)
        return to_usd(reply.get("freed", 0))

    def get_remaining(self, thread_id: str) -> Decimal:
        node = self._node(thread_id)
        return to_usd(node["max_spend"] - node["actual"] - node["active_reserved"])

    def can_spawn(self, parent_id: str, requested_budget: Decimal | float | str) -> dict[str, Any]:
        remaining = self.get_remaining(parent_id)
        requested = to_usd(to_micro(requested_budget, "requested_budget"))
        return {
            "affordable": requested <= remaining,
            "remaining": remaining,
            "requested": requested,
        }

    def get_tree_spend(self, thread_id: str) -> dict[str, Any]:
        """The subtree's spend: total_actual (this node's actual, which includes cascaded children),
        total_reserved (this node's reservation), thread_count and active_count (descendants still active)."""
        root = self._node(thread_id)
        count, active = 1, 0
        frontier = self._children(thread_id)
        while frontier:
            pipe = self.redis.pipeline(transaction=False)
            for child in frontier:
                pipe.execute_command("JSON.GET", keys.ledger_key(child), "$.status")
                pipe.smembers(keys.ledger_children_key(child))
            replies = pipe.execute()
            nxt: list[str] = []
            for raw, children in zip(replies[::2], replies[1::2], strict=False):
                if raw is None:
                    continue
                count += 1
                active += orjson.loads(raw)[0] == "active"
                nxt += sorted(children)
            frontier = nxt
        return {
            "total_actual": to_usd(root["actual"]),
            "total_reserved": to_usd(root["reserved"]),
            "thread_count": count,
            "active_count": active,
        }


def _ancestors(node: dict[str, Any]) -> list[str]:
    """A ledger node's ancestors, parent first, root last."""
    return list(reversed(node.get("ancestors") or []))
