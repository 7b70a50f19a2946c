"""``mother inspect``: a run (state, termination, budget, artifacts, activity) or any key, as JSON."""

from __future__ import annotations

from itertools import islice
from typing import Annotated, Any

import orjson
import redis
import typer

from mother import keys
from mother.activity import recent
from mother.cli._common import console, handle_errors, redis_client, settings
from mother.client import MotherClient
from mother.connection import connect
from mother.errors import NotFound
from mother.records.artifacts import read_artifact_meta
from mother.records.budgets import budget_view
from mother.records.conflicts import read_conflicts
from mother.records.results import read_termination
from schemas import iso_from_ms

__all__ = ["inspect_key", "inspect_run", "read_key", "resolve_inspect"]


@handle_errors
def inspect_key(
    target: Annotated[
        str, typer.Argument(help="a run id, or a Redis key such as termination:run-abc123")
    ],
) -> None:
    """Pretty JSON of a run (state, termination, budget, artifacts, activity) or of any key."""
    cfg = settings()
    client = MotherClient(settings=cfg, client=redis_client(cfg))
    console.print_json(orjson.dumps(resolve_inspect(client, target)).decode())


def read_key(client: redis.Redis, url: str, key: str) -> Any:
    """A key's value as plain JSON-ready data, whatever its type (the first 1000 items of a collection,
    the newest 100 entries of a stream). Read as bytes: what is not UTF-8 is shown as \\xNN escapes."""
    kind = client.type(key)
    if kind == "none":
        raise NotFound(
            f"key {key!r} does not exist; list keys with `redis-cli --scan --pattern 'run:*'`"
        )
    if kind == "ReJSON-RL":
        return orjson.loads(client.execute_command("JSON.GET", key))
    with connect(url, check=False, decode_responses=False) as raw:
        if kind == "string":
            value = raw.get(key)
            try:
                return orjson.loads(value)
            except orjson.JSONDecodeError:
                return _readable(value)
        if kind == "hash":
            return _readable(dict(islice(raw.hscan_iter(key), 1000)))
        if kind == "list":
            return _readable(raw.lrange(key, 0, 999))
        if kind == "set":
            return sorted(_readable(list(islice(raw.sscan_iter(key), 1000))))
        if kind == "zset":
            return [
                {"member": _readable(m), "score": s}
                for m, s in raw.zrange(key, 0, 999, withscores=True)
            ]
        if kind == "stream":
            return [{"id": _readable(i), **_readable(f)} for i, f in raw.xrevrange(key, count=100)]
    return {"type": kind, "note": "not rendered"}


def _readable(value: Any) -> Any:
    """Bytes as text, with what is not UTF-8 as \\xNN escapes, through dicts and lists."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "backslashreplace")
    if isinstance(value, dict):
        return {_readable(k): _readable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_readable(v) for v in value]
    return value


def inspect_run(client: MotherClient, run_id: str) -> dict[str, Any]:
    """Everything about a run: state, termination, result, budget, artifacts, conflicts, recent activity, and since when
    its end has waited to be applied (``end_pending_since``: its Mother died between its record and the rest)."""
    state = client.status(run_id)
    r = client.redis
    out: dict[str, Any] = {"run": state.to_dict()}
    record = read_termination(r, run_id)
    out["termination"] = record.to_dict() if record is not None else None
    out["budget"] = budget_view(r, run_id)
    out["artifacts"] = read_artifact_meta(r, state.artifacts)
    out["conflicts"] = [c.to_dict() for c in read_conflicts(r, state.conflicts)]
    out["activity"] = [e.to_dict() for e in recent(r, 50, run_id=run_id)]
    # its record is written, the rest of its end not yet applied
    pending = r.zscore(keys.RUNS_ENDING, run_id)
    out["end_pending_since"] = iso_from_ms(int(pending)) if pending is not None else None
    return out


def resolve_inspect(client: MotherClient, target: str) -> Any:
    """``inspect`` takes a key, or a run id (then shows the whole run)."""
    try:
        return read_key(client.redis, client.settings.redis_url, target)
    except NotFound:
        if not keys.is_id(target):
            raise
        if client.redis.exists(keys.run_key(target)):
            return inspect_run(client, target)
        raise NotFound(
            f"no run and no key {target!r}; list runs with `mother runs`, "
            "keys with `redis-cli --scan --pattern 'run:*'`"
        ) from None
