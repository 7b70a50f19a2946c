"""The tool box a phase calls tools through, and the interface both kinds of tool plug into.

Registry tools (``registry:tools``: the file tools, git_status, run_tests, resize_image, ocr_extract,
render_text, search_library and whatever a deployment adds) run through the one executor
(:mod:`workers.tools.executor`), each in a process of its own with its timeout; a run-bound one
(search_library) is handed the phase's :class:`ToolContext`. The one local tool (``spawn_run``: it
waits on Mother and checks the phase is current) runs in the phase's process. Each run has a workspace directory
(``worker.workspace_root/{run_id}``); the tools resolve every path inside it. A tool's refusal is
an error text the model sees and can correct; the phase goes on.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Protocol

import orjson

from mother.capabilities import denial
from mother.errors import PolicyViolation, ToolError
from mother.tools.contracts import contract_error, with_defaults
from mother.tools.registry import load_manifest, shipped_dir
from schemas import within_depth
from schemas.tool import DeterministicTool
from workers.tools.executor import ToolContext, ToolExecutor
from workers.tools.files import MAX_READ_BYTES, MAX_WRITE_BYTES

__all__ = [
    "FILE_TOOL_IDS",
    "MAX_READ_BYTES",
    "MAX_WRITE_BYTES",
    "Tool",
    "ToolBox",
    "ToolResult",
    "approval_request",
    "call_digest",
    "output_text",
    "shipped_tools",
]

FILE_TOOL_IDS = ("read_file", "list_dir", "write_file")


class Tool(Protocol):
    """A local tool (run in the phase's own process)."""

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


@functools.cache
def shipped_tools() -> dict[str, DeterministicTool]:
    """The shipped manifests, by tool_id (what a process uses when no registry is synced)."""
    tools = (load_manifest(path) for path in sorted(shipped_dir().glob("*.yaml")))
    return {t.tool_id: t for t in tools}


def output_text(output: dict[str, Any]) -> str:
    """What the model is told a registry tool returned: its output object as JSON."""
    return orjson.dumps(output).decode()


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
    """The tools one phase may call, bound to its workspace: ``registry`` tools (default: the shipped
    file tools) run by ``executor``, and ``local`` tools."""

    def __init__(
        self,
        workspace: Path,
        registry: Sequence[DeterministicTool] | None = None,
        local: Sequence[Tool] = (),
        executor: ToolExecutor | None = None,
        max_output_chars: int = 100_000,
        granted: list[str] | None = None,
        manifest_check: Any = None,
        approval: Callable[[str, Any], dict[str, Any] | None] | None = None,
        context: ToolContext | None = None,
        on_first_use: Callable[[Path], None] | None = None,
    ):
        self.workspace = workspace
        # what makes the directory the run's workspace before any tool sees it (workers/workspaces.py)
        self.on_first_use = on_first_use
        # the calling phase, for run-bound registry tools (search_library)
        self.context = context
        # (tool name, arguments) -> the approval request for a call that needs one not yet given, or None
        self.approval = approval
        # tool name -> why it may not run (signed manifests), or None
        self.manifest_check = manifest_check
        # the run's capability token; None: no check (library use, tests)
        self.granted = granted
        # the directory is made when a tool first needs it (most phases call none)
        self._made = False
        if registry is None:
            registry = [shipped_tools()[t] for t in FILE_TOOL_IDS]
        self.registry = {t.tool_id: t for t in registry}
        self.local = {t.name: t for t in local}
        self.tools: dict[str, DeterministicTool | Tool] = {**self.registry, **self.local}
        self.executor = executor or ToolExecutor()
        self.max_output_chars = max_output_chars

    def ensure_workspace(self) -> Path:
        """The workspace directory, created on first use."""
        if not self._made:
            # the run's files are its own: no other user of the host reads them
            self.workspace.mkdir(parents=True, exist_ok=True, mode=0o700)
            if self.on_first_use is not None:
                self.on_first_use(self.workspace)
            self._made = True
        return self.workspace

    @property
    def used(self) -> bool:
        """Whether a tool needed the workspace in this phase."""
        return self._made

    def check_permission(self, name: str) -> dict[str, Any] | None:
        """The permission_denied event for calling tool ``name``, or None if the token allows it."""
        if self.granted is None:
            return None
        return denial(self.granted, [f"tool.{name}"])

    def _shape_problem(self, name: str, arguments: Any) -> str | None:
        """Why no tool can run this call at all (an unknown tool, arguments that are not a JSON object or
        are nested too deep), in one line, or None."""
        if name not in self.tools:
            return f"unknown tool {name!r}; available: {', '.join(sorted(self.tools))}"
        if not isinstance(arguments, dict):
            got = (
                f"not JSON: {arguments[:200]!r}"
                if isinstance(arguments, str)
                else f"a JSON {type(arguments).__name__}"
            )
            return f"the arguments must be a JSON object, got {got}"
        try:
            within_depth(arguments)
        # parsed, but past what JSON tools and RedisJSON documents take
        except ValueError as exc:
            return f"the arguments are {exc}"
        return None

    def input_problem(self, name: str, arguments: Any) -> str | None:
        """Why the call cannot run with ``arguments`` (their shape, a registry tool's input schema), in
        one line, or None: checked before a person is asked to approve the call."""
        problem = self._shape_problem(name, arguments)
        tool = self.registry.get(name)
        if problem is not None or tool is None:
            return problem
        return contract_error(tool, "input", with_defaults(tool, arguments))

    def needs_approval(self, name: str, arguments: Any) -> dict[str, Any] | None:
        """The approval request for this call when a person must approve it first (and has not)."""
        return self.approval(name, arguments) if self.approval is not None else None

    def side_effects(self, name: str) -> str:
        """A tool's side-effect class (read_only, idempotent_write, destructive): a registry tool's as its
        manifest says; a local tool is read-only or destructive."""
        registered = self.registry.get(name)
        if registered is not None:
            return registered.side_effects
        return "read_only" if self.is_read_only(name) else "destructive"

    def is_read_only(self, name: str) -> bool:
        tool = self.tools.get(name)
        return bool(tool.read_only) if tool is not None else True

    def specs(self) -> list[dict[str, Any]]:
        """The tools in the chat-completions ``tools`` format."""
        return [t.openai_function() for t in self.registry.values()] + [
            {
                "type": "function",
                "function": {
                    "name": t.name,
                    "description": t.description,
                    "parameters": t.parameters,
                },
            }
            for t in self.local.values()
        ]

    def run(self, name: str, arguments: Any) -> ToolResult:
        problem = self._shape_problem(name, arguments)
        if problem is not None:
            return ToolResult(name, False, f"error: {problem}")
        blocked = self.manifest_check(name) if self.manifest_check is not None else None
        if blocked:
            return ToolResult(name, False, f"error: tool blocked before execution: {blocked}")
        registered = self.registry.get(name)
        if registered is not None:
            outcome = self.executor.run(
                registered, self.ensure_workspace(), arguments, self.context
            )
            if outcome.violation:
                # what the deployment's policy forbids ends the phase, like a local tool's
                raise PolicyViolation(outcome.error or f"{name} refused by policy")
            if not outcome.ok or outcome.output is None:
                return ToolResult(name, False, f"error: {outcome.error}")
            output = output_text(outcome.output)
        else:
            try:
                output = self.local[name].run(self.ensure_workspace(), arguments)
            except ToolError as exc:
                return ToolResult(name, False, f"error: {exc.message}")
            except OSError as exc:
                return ToolResult(name, False, f"error: {exc.strerror or exc}")
        if len(output) > self.max_output_chars:
            output = (
                output[: self.max_output_chars] + f"\n[truncated: {len(output)} characters in all]"
            )
        return ToolResult(name, True, output)
