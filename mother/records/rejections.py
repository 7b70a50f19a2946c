"""``rejection:{entry_id}``: why a submission was refused, its index by time (``rejections``) and by run
(``rejections:by_run``: run id -> the entry of its newest rejection)."""

from __future__ import annotations

from typing import Any

import orjson

from mother import calls, keys
from mother.functions import execute
from schemas.rejection import Rejection

__all__ = ["forget_rejections", "read_rejection_for", "write_rejection"]


def write_rejection(pipe: Any, rejection: Rejection, at_ms: int) -> None:
    """Queue the record and its indexes on ``pipe``: ``status`` and ``wait`` of its run find it in one read,
    however many came since."""
    pipe.execute_command(
        "JSON.SET", keys.rejection_key(rejection.entry_id), "$", rejection.to_json()
    )
    pipe.zadd(keys.REJECTIONS_INDEX, {rejection.entry_id: at_ms})
    if rejection.run_id is not None:
        pipe.hset(keys.REJECTIONS_BY_RUN, rejection.run_id, rejection.entry_id)


def read_rejection_for(client: Any, run_id: str) -> Rejection | None:
    """The newest rejection naming ``run_id``, or None."""
    entry_id = client.hget(keys.REJECTIONS_BY_RUN, run_id)
    raw = client.execute_command("JSON.GET", keys.rejection_key(entry_id)) if entry_id else None
    return Rejection.model_validate(orjson.loads(raw)) if raw else None


def forget_rejections(client: Any, entry_ids: list[str]) -> None:
    """Drop these rejections (past their retention): each record, its index entry, and its run's by-run
    entry while that still names it (``mh_forget_rejection``). Ids that are no valid ids only leave the index."""
    valid = [entry_id for entry_id in entry_ids if keys.is_id(entry_id)]
    strays = [entry_id for entry_id in entry_ids if not keys.is_id(entry_id)]
    if strays:
        client.zrem(keys.REJECTIONS_INDEX, *strays)
    if not valid:
        return
    pipe = client.pipeline(transaction=False)
    for entry_id in valid:
        pipe.execute_command("JSON.GET", keys.rejection_key(entry_id), "$.run_id")
    found = pipe.execute(raise_on_error=False)
    pipe = client.pipeline(transaction=False)
    for entry_id, raw in zip(valid, found, strict=True):
        named = orjson.loads(raw) if isinstance(raw, str) else []
        run_id = named[0] if named and keys.is_id(named[0]) else ""
        calls.forget_rejection(pipe, entry_id=entry_id, run_id=run_id)
    execute(pipe)
