"""``mother inspect``: a run (state, termination, budget, artifacts, activity) or any key, as JSON."""

from __future__ import annotations

from itertools import islice
from typing import Annotated, Any

import orjson
import redis
import typer

from mother import keys
from mother.cli._common import console, handle_errors, redis_client, settings
from mother.client import MotherClient
from mother.connection import connect
from mother.errors import NotFound

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
    """Everything about a run (:meth:`MotherClient.inspect`)."""
    return client.inspect(run_id)


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
