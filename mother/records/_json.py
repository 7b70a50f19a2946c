"""Reading RedisJSON replies, and indexing JSON documents with the search module."""

from __future__ import annotations

import re
from typing import Any

import orjson
import redis

__all__ = ["aggregate_rows", "ensure_json_index", "path_values", "search_rows", "tag"]


_TAG_SPECIAL = re.compile(r"([^\w])", re.UNICODE)


def tag(value: str) -> str:
    """``value`` as one TAG of a search query, ``{...}``: every character that is not a letter, a digit
    or an underscore escaped (ids hold ``-``, ``.`` and ``:``, which the query syntax reads)."""
    return "{" + _TAG_SPECIAL.sub(r"\\\1", value) + "}"


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
    """Create a search index over the JSON documents under ``prefix`` (``fields``: path, name, type, such
    as ``TAG`` or ``NUMERIC SORTABLE``; the last one sortable) unless it exists; an index that exists
    without some of the fields gets them (``FT.ALTER``, which indexes the stored documents). True when
    it is there, False without the search module."""
    words: dict[str, list[str]] = {}
    for i, (path, name, kind) in enumerate(fields):
        last = ["SORTABLE"] if i == len(fields) - 1 and "SORTABLE" not in kind.split() else []
        words[name] = [path, "AS", name, *kind.split(), *last]
    try:
        client.execute_command(
            "FT.CREATE",
            index,
            "ON",
            "JSON",
            "PREFIX",
            "1",
            prefix,
            "SCHEMA",
            *(w for field in words.values() for w in field),
        )
    except redis.ResponseError as exc:
        text = str(exc).lower()
        if "already exists" in text:
            has = index_fields(client, index)
            for name in [n for n in words if n not in has]:
                client.execute_command("FT.ALTER", index, "SCHEMA", "ADD", *words[name])
            return True
        if "unknown command" in text:
            return False
        raise
    return True


def index_fields(client: redis.Redis, index: str) -> set[str]:
    """The field names (attributes) search index ``index`` has."""
    info = client.execute_command("FT.INFO", index)
    if isinstance(info, list):
        info = {_text(info[i]): info[i + 1] for i in range(0, len(info) - 1, 2)}
    found = set()
    for attribute in info.get("attributes") or info.get(b"attributes") or []:
        if isinstance(attribute, dict):
            found.add(_text(attribute.get("attribute") or attribute.get(b"attribute")))
            continue
        pairs = [_text(a) for a in attribute]
        for i in range(len(pairs) - 1):
            if pairs[i] == "attribute":
                found.add(pairs[i + 1])
    return found


def _text(value: Any) -> Any:
    return value.decode() if isinstance(value, bytes) else value


def search_rows(reply: Any) -> list[tuple[str, float, dict[str, str]]]:
    """An FT.SEARCH ... WITHSCORES reply as (key, score, fields), whether it came as RESP2's flat list
    ([total, key, score, [field, value, ...], ...]) or RESP3's map."""
    if isinstance(reply, dict):
        reply = {_text(k): v for k, v in reply.items()}
        return [
            (
                _text(row.get(b"id", row.get("id"))),
                float(row.get(b"score", row.get("score", 0.0))),
                {
                    _text(k): _text(v)
                    for k, v in (
                        row.get(b"extra_attributes") or row.get("extra_attributes") or {}
                    ).items()
                },
            )
            for row in reply.get("results", [])
        ]
    rows = []
    for i in range(1, len(reply), 3):
        values = reply[i + 2]
        rows.append(
            (
                _text(reply[i]),
                float(reply[i + 1]),
                {_text(values[j]): _text(values[j + 1]) for j in range(0, len(values), 2)},
            )
        )
    return rows


def aggregate_rows(reply: Any) -> list[dict[str, str]]:
    """An FT.AGGREGATE reply's rows as {field: value}, from RESP2's list or RESP3's map."""
    if isinstance(reply, dict):
        reply = {_text(k): v for k, v in reply.items()}
        return [
            {
                _text(k): str(_text(v))
                for k, v in (
                    row.get(b"extra_attributes") or row.get("extra_attributes") or {}
                ).items()
            }
            for row in reply.get("results", [])
        ]
    out = []
    for row in reply[1:]:
        values = [str(_text(v)) for v in row]
        out.append(dict(zip(values[::2], values[1::2], strict=False)))
    return out
