"""The ``activity`` stream: every decision the system makes, capped with ``MAXLEN ~``."""

from __future__ import annotations

from typing import Any

import redis

from mother import keys
from schemas import ActivityEvent, Id

__all__ = ["DEFAULT_MAXLEN", "emit", "recent"]

DEFAULT_MAXLEN = 100_000


def emit(
    client: redis.Redis | redis.client.Pipeline,
    event_type: str,
    *,
    at: str,
    run_id: Id | None = None,
    phase: str | None = None,
    maxlen: int = DEFAULT_MAXLEN,
    **data: Any,
) -> ActivityEvent:
    """Append one entry (accepts a pipeline, so callers batch it with their writes)."""
    event = ActivityEvent(type=event_type, at=at, run_id=run_id, phase=phase, data=data)
    client.xadd(keys.ACTIVITY_STREAM, event.to_fields(), maxlen=maxlen, approximate=True)
    return event


def recent(client: redis.Redis, count: int = 100, run_id: str | None = None) -> list[ActivityEvent]:
    """The newest entries, oldest first; with ``run_id`` only that run's (from the last ``count``*10)."""
    rows = client.xrevrange(keys.ACTIVITY_STREAM, count=count * 10 if run_id else count)
    events = [ActivityEvent.from_fields(fields) for _id, fields in rows]
    if run_id is not None:
        events = [e for e in events if e.run_id == run_id][:count]
    return list(reversed(events))
