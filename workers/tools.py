"""Tools the agent loop can call, and the one interface the tool registry will plug into.

Each run has a workspace directory (``worker.workspace_root/{run_id}``); the file
tools resolve every path inside it and refuse anything that escapes (``..``,
absolute paths, symlinks pointing out). A tool's refusal is a ``ToolError``: the
model sees its message and can correct itself; the phase goes on.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Protocol

import orjson

from mother.capabilities import denial
from mother.errors import ToolError
from schemas import within_depth

__all__ = ["FILE_TOOLS", "Tool", "ToolBox", "ToolResult", "approval_request", "call_digest"]

MAX_WRITE_BYTES = 5 * 1024 * 1024
# read_file reads no more than this (a file in the workspace may be huge; the model sees at most
# worker.max_tool_output_chars, at most 1,000,000 characters, of it anyway)
MAX_READ_BYTES = 8 * 1024 * 1024


class Tool(Protocol):
    name: str
    description: str
    # JSON Schema of the arguments
    parameters: ClassVar[dict[str, Any]]
    read_only: bool

    def run(self, workspace: Path, arguments: dict[str, Any]) -> str: ...


@dataclass(frozen=True)
class ToolResult:
    name: str
    ok: bool
    output: str


def _inside(workspace: Path, raw: Any) -> Path:
    if not isinstance(raw, str) or not raw or "\x00" in raw:
        raise ToolError("path must be a non-empty string")
    root = workspace.resolve()
    target = (root / raw).resolve()
    if target != root and root not in target.parents:
        raise ToolError(f"path {raw!r} is outside the run's workspace; use a path relative to it")
    return target


class ReadFile:
    name = "read_file"
    description = "Read a UTF-8 text file from the run's workspace."
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {"path": {"type": "string"}},
        "required": ["path"],
    }
    read_only = True

    def run(self, workspace: Path, arguments: dict[str, Any]) -> str:
        path = _inside(workspace, arguments.get("path"))
        if not path.is_file():
            raise ToolError(f"no file {arguments.get('path')!r} in the workspace")
        with path.open("rb") as f:
            data = f.read(MAX_READ_BYTES + 1)
        if len(data) <= MAX_READ_BYTES:
            return data.decode("utf-8", errors="replace")
        # said first: the tool box cuts the end off what is longer than max_tool_output_chars
        return (
            f"[the file is {path.stat().st_size} bytes; read_file read the first {MAX_READ_BYTES}]\n"
            + data[:MAX_READ_BYTES].decode("utf-8", errors="replace")
        )


class ListDir:
    name = "list_dir"
    description = "List the entries of a directory in the run's workspace (default: its root)."
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {"path": {"type": "string"}},
    }
    read_only = True

    def run(self, workspace: Path, arguments: dict[str, Any]) -> str:
        path = _inside(workspace, arguments.get("path", "."))
        if not path.is_dir():
            raise ToolError(f"no directory {arguments.get('path', '.')!r} in the workspace")
        return "\n".join(sorted(p.name + ("/" if p.is_dir() else "") for p in path.iterdir()))


class WriteFile:
    name = "write_file"
    description = "Write a UTF-8 text file in the run's workspace (directories are created)."
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
        "required": ["path", "content"],
    }
    read_only = False

    def run(self, workspace: Path, arguments: dict[str, Any]) -> str:
        path = _inside(workspace, arguments.get("path"))
        content = arguments.get("content")
        if not isinstance(content, str):
            raise ToolError("content must be a string")
        data = content.encode("utf-8")
        if len(data) > MAX_WRITE_BYTES:
            raise ToolError(f"content is {len(data)} bytes; the limit is {MAX_WRITE_BYTES}")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        return f"wrote {len(data)} bytes to {path.relative_to(workspace.resolve())}"


FILE_TOOLS: tuple[Tool, ...] = (ReadFile(), ListDir(), WriteFile())


def call_digest(phase: str, tool: str, arguments: Any) -> str:
    """What an approval of a tool call is bound to: the phase, the tool and its exact arguments."""
    canonical = orjson.dumps(arguments, option=orjson.OPT_SORT_KEYS)
    return hashlib.sha256(f"{phase}\0{tool}\0".encode() + canonical).hexdigest()


def approval_request(
    phase: str, tool: str, arguments: Any, needing: Collection[str], grants: Collection[str]
) -> dict[str, Any] | None:
    """The request for a call of a tool in ``needing`` whose digest is not among the run's ``grants``."""
    if tool not in needing:
        return None
    digest = call_digest(phase, tool, arguments)
    if digest in grants:
        return None
    return {
        "tool": tool,
        "digest": digest,
        "arguments": arguments if isinstance(arguments, dict) else {},
    }


class ToolBox:
    """The tools one phase may call, bound to its workspace."""

    def __init__(
        self,
        workspace: Path,
        tools: tuple[Tool, ...] = FILE_TOOLS,
        max_output_chars: int = 100_000,
        granted: list[str] | None = None,
        manifest_check: Any = None,
        approval: Callable[[str, Any], dict[str, Any] | None] | None = None,
    ):
        self.workspace = workspace
        # (tool name, arguments) -> the approval request for a call that needs one not yet given, or None
        self.approval = approval
        # tool name -> why it may not run (signed manifests), or None
        self.manifest_check = manifest_check
        # the run's capability token; None: no check (library use, tests)
        self.granted = granted
        # the directory is made when a tool first needs it (most phases call none)
        self._made = False
        self.tools = {tool.name: tool for tool in tools}
        self.max_output_chars = max_output_chars

    def ensure_workspace(self) -> Path:
        """The workspace directory, created on first use."""
        if not self._made:
            self.workspace.mkdir(parents=True, exist_ok=True)
            self._made = True
        return self.workspace

    def check_permission(self, name: str) -> dict[str, Any] | None:
        """The permission_denied event for calling tool ``name``, or None if the token allows it."""
        if self.granted is None:
            return None
        return denial(self.granted, [f"tool.{name}"])

    def needs_approval(self, name: str, arguments: Any) -> dict[str, Any] | None:
        """The approval request for this call when a person must approve it first (and has not)."""
        return self.approval(name, arguments) if self.approval is not None else None

    def specs(self) -> list[dict[str, Any]]:
        """The tools in the chat-completions ``tools`` format."""
        return [
            {
                "type": "function",
                "function": {
                    "name": t.name,
                    "description": t.description,
                    "parameters": t.parameters,
                },
            }
            for t in self.tools.values()
        ]

    def run(self, name: str, arguments: Any) -> ToolResult:
        tool = self.tools.get(name)
        if tool is None:
            return ToolResult(
                name,
                False,
                f"error: unknown tool {name!r}; available: {', '.join(sorted(self.tools))}",
            )
        if not isinstance(arguments, dict):
            got = (
                f"not JSON: {arguments[:200]!r}"
                if isinstance(arguments, str)
                else f"a JSON {type(arguments).__name__}"
            )
            return ToolResult(name, False, f"error: the arguments must be a JSON object, got {got}")
        try:
            within_depth(arguments)
        # parsed, but past what JSON tools and RedisJSON documents take
        except ValueError as exc:
            return ToolResult(name, False, f"error: the arguments are {exc}")
        blocked = self.manifest_check(name) if self.manifest_check is not None else None
        if blocked:
            return ToolResult(name, False, f"error: tool blocked before execution: {blocked}")
        try:
            output = tool.run(self.ensure_workspace(), arguments)
        except ToolError as exc:
            return ToolResult(name, False, f"error: {exc.message}")
        except OSError as exc:
            return ToolResult(name, False, f"error: {exc.strerror or exc}")
        if len(output) > self.max_output_chars:
            output = (
                output[: self.max_output_chars] + f"\n[truncated: {len(output)} characters in all]"
            )
        return ToolResult(name, True, output)
