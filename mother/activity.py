"""The ``activity`` stream: every decision the system makes, capped with ``MAXLEN ~``; and each run's own
stream (``activity:run:{id}``), which gets every entry that names the run in the same call and is kept and
collected with the run's records: a run's story does not depend on how busy the global stream is. Only
Mother appends: what a worker host's phase says is its ask (:mod:`mother.asks`)."""

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

__all__ = [
    "DEFAULT_MAXLEN",
    "emit",
    "flat_fields",
    "global_key",
    "last_id",
    "make_event",
    "newer",
    "recent",
]

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
    if run_id is None:
        _append_global(client, fields, maxlen)
        return event
    # the global entry and the run's own, in one MULTI (or in the caller's pipeline, with its writes)
    pipe = client if isinstance(client, redis.client.Pipeline) else client.pipeline()
    _append_global(pipe, fields, maxlen)
    pipe.xadd(
        keys.run_activity_key(run_id), fields, maxlen=keys.RUN_ACTIVITY_MAXLEN, approximate=True
    )
    if pipe is not client:
        pipe.execute()
    return event


def global_key() -> str:
    """The global activity stream (a key a server function that appends to it takes in KEYS)."""
    return keys.ACTIVITY_STREAM


def _append_global(
    client: redis.Redis | redis.client.Pipeline, fields: dict[FieldT, EncodableT], maxlen: int
) -> None:
    client.xadd(keys.ACTIVITY_STREAM, fields, maxlen=maxlen, approximate=True)


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
    """The newest ``count`` entries, oldest first: the global stream's, or with ``run_id`` the run's own.

    Anyone with the right can XADD to a stream, so an entry that is not one of ours (not UTF-8, data that
    is not JSON, a field out of shape) is shown as an ``unreadable_entry`` holding its id, what is wrong
    and its fields, instead of failing the whole listing."""
    stream = keys.ACTIVITY_STREAM if run_id is None else keys.run_activity_key(run_id)
    rows = client.execute_command(
        "XREVRANGE", stream, "+", "-", "COUNT", count, **{NEVER_DECODE: True}
    )
    if not rows and run_id is not None:
        return _legacy(client, count, run_id)
    return [_event(*as_text(raw_id, raw_fields)) for raw_id, raw_fields in reversed(rows)]


def _legacy(client: redis.Redis, count: int, run_id: str) -> list[ActivityEvent]:
    """A run that ended before runs had their own stream: its entries still in the global one (the newest
    ``count`` * 10 of them, filtered)."""
    rows = client.execute_command(
        "XREVRANGE", keys.ACTIVITY_STREAM, "+", "-", "COUNT", count * 10, **{NEVER_DECODE: True}
    )
    events = [_event(*as_text(raw_id, raw_fields)) for raw_id, raw_fields in rows]
    return list(reversed([e for e in events if e.run_id == run_id][:count]))


def last_id(client: redis.Redis, run_id: str | None = None) -> str:
    """The id of the newest entry (of the run's own stream with ``run_id``): :func:`newer` reads after it;
    "0" when the stream has none yet."""
    stream = keys.ACTIVITY_STREAM if run_id is None else keys.run_activity_key(run_id)
    rows = client.execute_command("XREVRANGE", stream, "+", "-", "COUNT", 1)
    return str(rows[0][0]) if rows else "0"


def newer(
    client: redis.Redis, after: str, run_id: str | None = None, block_ms: int = 1000
) -> tuple[str, list[ActivityEvent]]:
    """The entries after entry id ``after`` (``$``: from now), waiting up to ``block_ms`` for one: of the
    global stream, or with ``run_id`` of the run's own. Returns the id to read after next time, and the
    entries, oldest first."""
    stream = keys.ACTIVITY_STREAM if run_id is None else keys.run_activity_key(run_id)
    reply = client.execute_command(
        "XREAD", "COUNT", 1000, "BLOCK", block_ms, "STREAMS", stream, after,
        **{NEVER_DECODE: True},
    )  # fmt: skip
    if not reply:
        return after, []
    rows = reply[0][1] if isinstance(reply, list) else next(iter(reply.values()))[0]
    events = [_event(*as_text(raw_id, raw_fields)) for raw_id, raw_fields in rows]
    last = rows[-1][0].decode() if rows else after
    return last, events


def since(client: redis.Redis, since_ms: int, count: int) -> list[ActivityEvent]:
    """The global stream's entries from ``since_ms`` (epoch ms, the server's clock: entry ids are its
    times) on, oldest first, at most ``count``."""
    rows = client.execute_command(
        "XRANGE", keys.ACTIVITY_STREAM, f"{since_ms}-0", "+", "COUNT", count,
        **{NEVER_DECODE: True},
    )  # fmt: skip
    return [_event(*as_text(raw_id, raw_fields)) for raw_id, raw_fields in rows]


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
