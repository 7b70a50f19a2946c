"""Reading RedisJSON replies, and indexing JSON documents with the search module."""

from __future__ import annotations

from typing import Any

import orjson
import redis

__all__ = ["ensure_json_index", "path_values"]


def path_values(raw: str | bytes) -> dict[str, Any]:
    """A reply of JSON.GET with several paths (``{"$.name": [value]}``) as ``{name: value}``; a path the
    record does not hold reads None."""
    return {
        k.removeprefix("$."): v[0] if isinstance(v, list) and v else None
        for k, v in orjson.loads(raw).items()
    }


def ensure_json_index(
    client: redis.Redis, index: str, prefix: str, fields: list[tuple[str, str, str]]
) -> bool:
    """Create a search index over the JSON documents under ``prefix`` (``fields``: path, name, type;
    the last one sortable) unless it exists: True when it does, False without the search module."""
    words: list[str] = []
    for path, name, kind in fields:
        words += [path, "AS", name, kind]
    try:
        client.execute_command(
            "FT.CREATE", index, "ON", "JSON", "PREFIX", "1", prefix, "SCHEMA", *words, "SORTABLE"
        )
    except redis.ResponseError as exc:
        text = str(exc).lower()
        if "already exists" in text:
            return True
        if "unknown command" in text:
            return False
        raise
    return True
