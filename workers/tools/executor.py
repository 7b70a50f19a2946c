"""The one executor of registry tools: the agent loop's tool calls and a phase's ``tool_only`` plan both
run a tool here.

A call: the inputs are checked against the tool's input schema; the tool runs in a sandbox of its own
(:mod:`workers.sandbox`: no network, no environment or files of the worker's, the run's workspace
only, limits), and at its ``timeout_ms`` the sandbox is killed with everything the tool started (git,
pytest, what they forked). Without a sandbox (``tools.sandbox: none``, or a development host that has
none) the tool runs in a forked child in a session of its own, with the same allowlisted environment,
and its process group is killed at the timeout. A run-bound tool (``search_library``: Mother's own
code reading the run's libraries under their policy, through the worker's connection) runs in a forked
child too: it executes nothing from the workspace. Its output is checked against the output schema;
a transient failure (``ToolTransient``) is tried again up to the manifest's ``max_retries``; every call
is counted in ``tool_stats:{tool_id}`` by the server. Charging ``tool_calls`` is the caller's (the agent
loop's meter, or the tool plan's), before it calls :meth:`ToolExecutor.run`.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import inspect
import os
import select
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mother.errors import ToolError
from mother.logs import get_logger
from mother.tools.contracts import check_inputs, check_output, with_defaults
from schemas.tool import DeterministicTool
from workers.sandbox.bwrap import Sandbox
from workers.sandbox.entry import call, encode, write_all
from workers.sandbox.outcome import decoded, timed_out, too_large
from workers.sandbox.rules import CallPolicy, ToolRules, module_paths, tool_environment
from workers.tools.files import allow_git_dir

__all__ = [
    "ToolContext",
    "ToolExecutor",
    "ToolOutcome",
    "bind_context",
    "entrypoint_refusal",
    "load_entrypoint",
]

log = get_logger("tools")

# the modules whose functions a manifest may name as its entrypoint (others: worker.allowed_jobs)
ENTRYPOINT_PACKAGE = "workers.tools."


@dataclass(frozen=True)
class ToolContext:
    """The calling phase, for a run-bound tool (an entrypoint with a keyword ``context``): the attempt's
    asks (what the tool asks Mother for), the run, the phase's index and model."""

    asks: Any
    state: Any
    phase_index: int
    model: str


@dataclass
class ToolOutcome:
    tool_id: str
    ok: bool
    output: dict[str, Any] | None
    error: str | None
    duration_ms: float
    tries: int
    timed_out: bool = False
    # the tool raised a PolicyViolation: the phase ends (not a tool error the model may correct)
    violation: bool = False


def entrypoint_refusal(entrypoint: str, allowed: frozenset[str] = frozenset()) -> str | None:
    """Why a worker will not import ``entrypoint`` ('package.module:function'), or None."""
    module, _, func = entrypoint.partition(":")
    if module.startswith(ENTRYPOINT_PACKAGE) or f"{module}.{func}" in allowed:
        return None
    return (
        f"entrypoint {entrypoint!r} is outside {ENTRYPOINT_PACKAGE}*; list '{module}.{func}' in "
        "worker.allowed_jobs to let workers run it"
    )


def load_entrypoint(
    entrypoint: str, allowed: frozenset[str] = frozenset()
) -> Callable[[Path, dict[str, Any]], Any]:
    refusal = entrypoint_refusal(entrypoint, allowed)
    if refusal:
        raise ToolError(refusal)
    module, _, func = entrypoint.partition(":")
    try:
        fn = getattr(importlib.import_module(module), func)
    except (ImportError, AttributeError) as exc:
        raise ToolError(f"entrypoint {entrypoint!r} cannot be loaded: {exc}") from None
    if not callable(fn):
        raise ToolError(f"entrypoint {entrypoint!r} is not a function")
    return fn


def bind_context(
    tool_id: str, fn: Callable[..., Any], context: Any
) -> Callable[[Path, dict[str, Any]], Any]:
    """``fn`` with the phase's ``context`` bound when it takes one (a run-bound tool); such a tool with
    no phase to run for (a ``tool_only`` plan, a test) is refused in one line."""
    try:
        takes = "context" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        takes = False
    if not takes:
        return fn
    if context is None:
        raise ToolError(
            f"{tool_id} works for an agent of a run (it needs the run's guard and policy); "
            "call it from a phase's agent loop"
        )
    return functools.partial(fn, context=context)


def _child(
    fn: Callable[[Path, dict[str, Any]], Any],
    workspace: Path,
    inputs: Any,
    out: int,
    policy: CallPolicy,
) -> None:
    """In the forked child: the allowlisted environment only (what the tool starts inherits it), the
    tool run, its outcome written as JSON to ``out``; exit without cleanup (the parent's connections
    and threads are not this process's to close)."""
    code = 0
    try:
        os.setsid()
        os.environ.clear()
        os.environ.update(tool_environment(policy.env, sandboxed=False))
        allow_git_dir(policy.allow_git_dir)
        write_all(out, encode(call(fn, workspace, inputs)))
    except BaseException:  # noqa: BLE001
        code = 1
    finally:
        os._exit(code)


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)


def run_isolated(
    fn: Callable[[Path, dict[str, Any]], Any],
    workspace: Path,
    inputs: dict[str, Any],
    timeout_s: float,
    max_bytes: int,
    policy: CallPolicy,
) -> dict[str, Any]:
    """``fn(workspace, inputs)`` in a forked child (unsandboxed): {"output": ...} or {"error": ...,
    "transient"?, "timed_out"?}. At ``timeout_s`` the child's process group is killed."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        _child(fn, workspace, inputs, write_end, policy)
    os.close(write_end)
    deadline = time.monotonic() + timeout_s
    chunks: list[bytes] = []
    size = 0
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                _kill_group(pid)
                return timed_out(timeout_s)
            ready, _, _ = select.select([read_end], [], [], left)
            if not ready:
                continue
            chunk = os.read(read_end, 1 << 20)
            if not chunk:
                break
            size += len(chunk)
            if size > max_bytes:
                _kill_group(pid)
                return too_large(max_bytes)
            chunks.append(chunk)
    finally:
        os.close(read_end)
    # the child has written everything; what it started in its session goes with it
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    ended = f"the tool's process ended without a result (exit status {status})"
    return decoded(b"".join(chunks), ended)


class ToolExecutor:
    """Runs registry tools for one process: ``stats(tool_id, ok, ms)`` counts each call in
    ``tool_stats`` (an ask of Mother's; None: not counted), ``default_timeout_ms`` a tool's timeout when its manifest sets none,
    ``sandbox`` what calls run in (None: unsandboxed), ``rules`` the deployment's limits, network
    and environment rules (default: the sandbox's, else the defaults)."""

    def __init__(
        self,
        stats: Any = None,
        *,
        default_timeout_ms: int = 30_000,
        max_output_bytes: int = 8 * 1024 * 1024,
        allowed_entrypoints: frozenset[str] = frozenset(),
        sandbox: Sandbox | None = None,
        rules: ToolRules | None = None,
    ) -> None:
        self.stats = stats
        self.default_timeout_ms = default_timeout_ms
        self.max_output_bytes = max_output_bytes
        self.allowed_entrypoints = allowed_entrypoints
        self.sandbox = sandbox
        self.rules = rules or (sandbox.rules if sandbox is not None else ToolRules.defaults())

    def run(
        self, tool: DeterministicTool, workspace: Path, inputs: dict[str, Any], context: Any = None
    ) -> ToolOutcome:
        """Run ``tool`` on ``inputs`` (its schema's defaults filled in); never raises for the tool's own
        failure: the outcome says what went wrong, in one line. ``context`` is the calling phase's
        (:class:`workers.tools.context.ToolContext`), handed to an entrypoint that takes a keyword
        ``context`` (a run-bound tool such as ``search_library``)."""
        started = time.monotonic()
        tries = 0
        error: str | None = None
        timed_out = violation = False
        try:
            inputs = with_defaults(tool, inputs)
            check_inputs(tool, inputs)
            if tool.mcp is not None:
                # an MCP server's tool: its call goes to the server, from inside the sandbox
                inputs = {"server": tool.mcp.model_dump(mode="json"), "arguments": inputs}
            loaded = load_entrypoint(tool.entrypoint, self.allowed_entrypoints)
            fn = bind_context(tool.tool_id, loaded, context)
            policy = self.rules.policy(tool, module_paths(tool.entrypoint))
            # a run-bound tool is Mother's own code that needs the worker's connection
            sandbox = self.sandbox if fn is loaded else None
            workspace.mkdir(parents=True, exist_ok=True, mode=0o700)
            timeout_s = tool.timeout_or(self.default_timeout_ms) / 1000
            while True:
                tries += 1
                if sandbox is not None:
                    got = sandbox.run(
                        tool.entrypoint, workspace, inputs, policy, timeout_s, self.max_output_bytes
                    )
                else:
                    got = run_isolated(
                        fn, workspace, inputs, timeout_s, self.max_output_bytes, policy
                    )
                if "output" in got:
                    check_output(tool, got["output"])
                    return self._done(tool, started, tries, got["output"], None)
                error, timed_out = str(got.get("error")), bool(got.get("timed_out"))
                violation = bool(got.get("violation"))
                if not got.get("transient") or tries > tool.max_retries:
                    break
                log.info("tool_retried", tool=tool.tool_id, try_=tries, error=error)
        except ToolError as exc:
            error = exc.message
        outcome = self._done(tool, started, tries, None, error, timed_out)
        outcome.violation = violation
        return outcome

    def _done(
        self,
        tool: DeterministicTool,
        started: float,
        tries: int,
        output: dict[str, Any] | None,
        error: str | None,
        timed_out: bool = False,
    ) -> ToolOutcome:
        ms = (time.monotonic() - started) * 1000
        outcome = ToolOutcome(tool.tool_id, error is None, output, error, ms, tries, timed_out)
        if self.stats is not None:
            try:
                self.stats(tool.tool_id, outcome.ok, round(ms, 3))
            # the call's outcome stands; its count is lost, and said so
            except Exception as exc:  # noqa: BLE001
                log.warning("tool_stats_not_recorded", tool=tool.tool_id, error=str(exc))
        return outcome
