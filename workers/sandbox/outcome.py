"""What the host makes of a tool process, sandboxed or not: the outcomes every caller reads the same
(``{"output": ...}`` or ``{"error": ...}``), in one place."""

from __future__ import annotations

from typing import Any

import orjson

__all__ = ["decoded", "timed_out", "too_large"]


def timed_out(timeout_s: float) -> dict[str, Any]:
    return {
        "error": f"timed out after {timeout_s * 1000:.0f} ms; its processes were killed",
        "timed_out": True,
    }


def too_large(max_bytes: int) -> dict[str, Any]:
    return {"error": f"its output passed tools.max_output_bytes ({max_bytes} bytes)"}


def decoded(data: bytes, ended: str) -> dict[str, Any]:
    """The outcome the tool process wrote, or an error: ``ended`` says how it ended when it wrote
    nothing."""
    if not data:
        return {"error": ended}
    try:
        result: dict[str, Any] = orjson.loads(data)
    except orjson.JSONDecodeError:
        return {"error": "the tool's process wrote a result that is not JSON"}
    return result
