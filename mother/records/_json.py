"""Reading RedisJSON replies."""

from __future__ import annotations

from typing import Any

import orjson

__all__ = ["path_values"]


def path_values(raw: str | bytes) -> dict[str, Any]:
    """A reply of JSON.GET with several paths (``{"$.name": [value]}``) as ``{name: value}``; a path the
    record does not hold reads None."""
    return {
        k.removeprefix("$."): v[0] if isinstance(v, list) and v else None
        for k, v in orjson.loads(raw).items()
    }
