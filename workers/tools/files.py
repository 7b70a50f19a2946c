"""The file tools (registry tools ``read_file``, ``list_dir``, ``write_file``): every path is resolved
inside the run's workspace, and anything that escapes it (``..``, absolute paths, symlinks pointing
out) is refused with a ToolError the model can correct."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mother.errors import ToolError

__all__ = ["MAX_READ_BYTES", "MAX_WRITE_BYTES", "inside", "list_dir", "read_file", "write_file"]

MAX_WRITE_BYTES = 5 * 1024 * 1024
# read_file reads no more than this (a file in the workspace may be huge; the model sees at most
# worker.max_tool_output_chars, at most 1,000,000 characters, of it anyway); its output says when it cut
MAX_READ_BYTES = 1024 * 1024


def inside(workspace: Path, raw: Any, what: str = "path") -> Path:
    """``raw`` resolved inside ``workspace``, or a ToolError saying why not."""
    if not isinstance(raw, str) or not raw or "\x00" in raw:
        raise ToolError(f"{what} must be a non-empty string")
    root = workspace.resolve()
    target = (root / raw).resolve()
    if target != root and root not in target.parents:
        raise ToolError(f"{what} {raw!r} is outside the run's workspace; use a path relative to it")
    return target


def read_file(workspace: Path, inputs: dict[str, Any]) -> dict[str, Any]:
    path = inside(workspace, inputs.get("path"))
    if not path.is_file():
        raise ToolError(f"no file {inputs.get('path')!r} in the workspace")
    with path.open("rb") as f:
        data = f.read(MAX_READ_BYTES + 1)
    size = path.stat().st_size
    truncated = len(data) > MAX_READ_BYTES
    return {
        "content": data[:MAX_READ_BYTES].decode("utf-8", errors="replace"),
        "bytes": size,
        "truncated": truncated,
    }


def list_dir(workspace: Path, inputs: dict[str, Any]) -> dict[str, Any]:
    raw = inputs.get("path", ".")
    path = inside(workspace, raw)
    if not path.is_dir():
        raise ToolError(f"no directory {raw!r} in the workspace")
    return {"entries": sorted(p.name + ("/" if p.is_dir() else "") for p in path.iterdir())}


def write_file(workspace: Path, inputs: dict[str, Any]) -> dict[str, Any]:
    path = inside(workspace, inputs.get("path"))
    content = inputs.get("content")
    if not isinstance(content, str):
        raise ToolError("content must be a string")
    data = content.encode("utf-8")
    if len(data) > MAX_WRITE_BYTES:
        raise ToolError(f"content is {len(data)} bytes; the limit is {MAX_WRITE_BYTES}")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return {"path": str(path.relative_to(workspace.resolve())), "bytes": len(data)}
