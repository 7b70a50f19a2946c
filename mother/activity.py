"""The ``activity`` stream: every decision the system makes, capped with ``MAXLEN ~``."""

from __future__ import annotations

from typing import Any

import orjson
import redis
from pydantic import ValidationError
from redis.client import NEVER_DECODE
from redis.typing import EncodableT, FieldT

from mother import keys
from mother.streams import as_text
from schemas import ActivityEvent, Id, describe_validation_error, iso_from_ms

__all__ = ["DEFAULT_MAXLEN", "emit", "flat_fields", "make_event", "newer", "recent"]

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
    event = make_event(event_type, at=at, run_id=run_id, phase=phase, **data)
    fields: dict[FieldT, EncodableT] = dict(event.to_fields().items())
    client.xadd(keys.ACTIVITY_STREAM, fields, maxlen=maxlen, approximate=True)
    return event


def make_event(
    event_type: str, *, at: str, run_id: Id | None = None, phase: str | None = None, **data: Any
) -> ActivityEvent:
    """One entry, not appended (:func:`emit` appends one)."""
    return ActivityEvent(type=event_type, at=at, run_id=run_id, phase=phase, data=data)


def flat_fields(event: ActivityEvent) -> list[str]:
    """An entry's XADD fields as one flat list [field, value, ...]: for a server function that appends it
    (``mh_ended``, whose entries are appended only when it applies a run's end)."""
    return [word for pair in event.to_fields().items() for word in pair]


def recent(client: redis.Redis, count: int = 100, run_id: str | None = None) -> list[ActivityEvent]:
    """The newest entries, oldest first; with ``run_id`` only that run's (from the last ``count``*10).

    Anyone can XADD to the stream, so an entry that is not one of ours (not UTF-8, data that is not
    JSON, a field out of shape) is shown as an ``unreadable_entry`` holding its id, what is wrong and
    its fields, instead of failing the whole listing."""
    rows = client.execute_command(
        "XREVRANGE",
        keys.ACTIVITY_STREAM,
        "+",
        "-",
        "COUNT",
        count * 10 if run_id else count,
        **{NEVER_DECODE: True},
    )
    events = [_event(*as_text(raw_id, raw_fields)) for raw_id, raw_fields in rows]
    if run_id is not None:
        events = [e for e in events if e.run_id == run_id][:count]
    return list(reversed(events))


def newer(
    client: redis.Redis, after: str, run_id: str | None = None, block_ms: int = 1000
) -> tuple[str, list[ActivityEvent]]:
    """The entries after entry id ``after`` (``$``: from now), waiting up to ``block_ms`` for one; with
    ``run_id`` only that run's. Returns the id to read after next time, and the entries, oldest first."""
    reply = client.execute_command(
        "XREAD", "COUNT", 1000, "BLOCK", block_ms, "STREAMS", keys.ACTIVITY_STREAM, after,
        **{NEVER_DECODE: True},
    )  # fmt: skip
    if not reply:
        return after, []
    rows = reply[0][1] if isinstance(reply, list) else next(iter(reply.values()))[0]
    events = [_event(*as_text(raw_id, raw_fields)) for raw_id, raw_fields in rows]
    last = rows[-1][0].decode() if rows else after
    return last, [e for e in events if run_id is None or e.run_id == run_id]


def _event(entry_id: str, fields: dict[str, str], not_text: str | None) -> ActivityEvent:
    error = not_text
    if error is None:
        try:
            return ActivityEvent.from_fields(fields)
        except ValidationError as exc:
            error = describe_validation_error(exc)
        except orjson.JSONDecodeError as exc:
            error = f"field 'data' is not JSON: {exc}"
    run_id = fields.get("run_id")
    return ActivityEvent(
        type="unreadable_entry",
        at=iso_from_ms(int(entry_id.split("-")[0])),
        run_id=run_id if keys.is_id(run_id) else None,
        data={"entry_id": entry_id, "error": error, "fields": {**fields}},
    )
