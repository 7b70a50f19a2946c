"""The file tools (registry tools ``read_file``, ``list_dir``, ``write_file``): every path is resolved
inside the run's workspace, and anything that escapes it (``..``, absolute paths, symlinks pointing
out) is refused with a ToolError the model can correct. So is a path in a ``.git`` directory (or the
``.git`` file itself), before or after its symlinks are followed: a repository's config and hooks
name commands git runs. A tool whose manifest says ``allow_git_dir`` lifts that for its process
(:func:`allow_git_dir`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mother.errors import ToolError

__all__ = [
    "MAX_READ_BYTES",
    "MAX_WRITE_BYTES",
    "allow_git_dir",
    "inside",
    "list_dir",
    "read_file",
    "write_file",
]

MAX_WRITE_BYTES = 5 * 1024 * 1024
# read_file reads no more than this (a file in the workspace may be huge; the model sees at most
# worker.max_tool_output_chars, at most 1,000,000 characters, of it anyway); its output says when it cut
MAX_READ_BYTES = 1024 * 1024

# a tool process runs one tool: its manifest's allow_git_dir, set once before the call
_git_dir_allowed = False


def allow_git_dir(allowed: bool) -> None:
    """Let (or stop) this process's file paths be under ``.git/`` (a manifest's ``allow_git_dir``)."""
    global _git_dir_allowed
    _git_dir_allowed = allowed


def _in_git_dir(parts: tuple[str, ...]) -> bool:
    # git on case-insensitive filesystems treats .GIT as .git; refuse every spelling
    return any(part.casefold() == ".git" for part in parts)


def inside(workspace: Path, raw: Any, what: str = "path") -> Path:
    """``raw`` resolved inside ``workspace``, or a ToolError saying why not."""
    if not isinstance(raw, str) or not raw or "\x00" in raw:
        raise ToolError(f"{what} must be a non-empty string")
    root = workspace.resolve()
    target = (root / raw).resolve()
    if target != root and root not in target.parents:
        raise ToolError(f"{what} {raw!r} is outside the run's workspace; use a path relative to it")
    if not _git_dir_allowed and (
        _in_git_dir(Path(raw).parts) or _in_git_dir(target.relative_to(root).parts)
    ):
        raise ToolError(
            f"{what} {raw!r} is in a .git directory, which tools may not touch (a repository's "
            "config and hooks run commands); use git's own commands through git tools"
        )
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
