"""``ledger:{thread_id}``: one run's node in the hierarchical spend ledger (micro-USD)."""

from __future__ import annotations

from pydantic import Field

from schemas._base import Id, Record

__all__ = ["LedgerNode"]


class LedgerNode(Record):
    """A thread (run) in the spend ledger; its children are the set ``ledger_children:{thread_id}``."""

    thread_id: Id
    parent_id: Id | None = None
    ancestors: list[Id] = Field(default_factory=list)
    max_spend: int
    reserved: int
    own_spend: int = 0
    actual: int = 0
    active_reserved: int = 0
    status: str = "active"
    created_at: str
