"""A host's own asks: ``beat`` (the attempts its workers run are alive, those whose work-horse died are
not, and its line: concurrency, busy workers; ``stopped`` when its pool stops). A beat names attempts; each
is marked alive only if the host holds it, so no host can keep another's attempt alive or end it."""

from __future__ import annotations

from typing import Any

import orjson

from mother import keys
from mother.asks.answer import Answer
from mother.asks.wire import Ask
from mother.errors import InvalidSpec
from mother.hosts.liveness import REPORTED_MARK, started_mark
from mother.records import parse_position, runs
from mother.runtime import Runtime
from schemas import ACTIVE_STATUSES

__all__ = ["beat"]

# attempts one beat may name (a host runs at most its concurrency)
MOST_ATTEMPTS = 4096


def _attempts(value: Any) -> list[tuple[str, int, int]]:
    if value is None:
        return []
    if not isinstance(value, list) or len(value) > MOST_ATTEMPTS:
        raise InvalidSpec(
            f"attempts must be a list of at most {MOST_ATTEMPTS} [run, index, attempt]"
        )
    out = []
    for item in value:
        if not (
            isinstance(item, list)
            and len(item) == 3
            and keys.is_id(item[0])
            and all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in item[1:])
        ):
            raise InvalidSpec("each attempt is [run id, phase index, attempt]")
        out.append((item[0], item[1], item[2]))
    return out


def _line(value: Any) -> bytes | None:
    if value == "stopped":
        return b"stopped"
    if not isinstance(value, dict):
        return None
    fields: dict[str, Any] = {}
    for name in ("concurrency", "busy", "workers"):
        n = value.get(name)
        if not isinstance(n, int) or isinstance(n, bool) or not 0 <= n <= 4096:
            raise InvalidSpec(f"line.{name} must be a whole number from 0 to 4096")
        fields[name] = n
    pss = value.get("pss_mb")
    if isinstance(pss, (int, float)) and not isinstance(pss, bool) and 0 <= pss <= 10**7:
        fields["pss_mb"] = round(float(pss), 1)
    return orjson.dumps(fields)


def beat(rt: Runtime, ask: Ask) -> Answer:
    """Mark the host's running attempts alive (``attempts``), take those whose horse died for lost now
    (``died``), and write its line (``line``)."""
    alive, died = _attempts(ask.body.get("attempts")), _attempts(ask.body.get("died"))
    line = _line(ask.body.get("line"))
    by = ask.body.get("by")
    by = by if isinstance(by, str) and keys.is_id(by) and len(by) <= 64 else ""
    named = alive + died
    pipe = rt.redis.pipeline(transaction=False)
    for ids in named:
        pipe.execute_command("JSON.GET", keys.run_key(ids[0]), *runs.POSITION_PATHS, "$.host")
        pipe.get(keys.attempt_heartbeat_key(*ids))
    found = iter(pipe.execute(raise_on_error=False) if named else [])
    held = []
    for ids in named:
        raw, mark = next(found), next(found)
        # its result is in: it says so until Mother has taken it
        if mark == REPORTED_MARK:
            continue
        position = parse_position(raw) if isinstance(raw, str) else None
        on = orjson.loads(raw).get("$.host", [None]) if isinstance(raw, str) else [None]
        if (
            position is not None
            and position[0] in ACTIVE_STATUSES
            and position[1:] == ids[1:]
            and on
            and on[0] == ask.host
        ):
            held.append(ids)
    ttl = int(rt.settings.service.heartbeat_timeout_seconds * 1000)
    gone = set(died)

    def writes(pipe: Any) -> None:
        for ids in held:
            key = keys.attempt_heartbeat_key(*ids)
            if ids in gone:
                pipe.delete(key)
            else:
                pipe.set(key, started_mark(ask.host, by), px=ttl)
        if line is not None:
            pipe.set(keys.host_alive_key(ask.host), line, px=ttl)

    return Answer(None, writes)
