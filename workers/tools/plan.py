"""A ``tool_only`` plan: the phase's task was routed by Mother to registry tools (the candidates in its
context's ``tool_plan``). Each is tried in order through the one executor, charged to ``tool_calls``
through the guard first, with no model call; the first that succeeds does the phase (cost 0, an activity
entry ``tool_success``). When every one fails, the phase goes to the model if the registry allows it
(``allow_fallback_to_llm``; an entry ``tool_fallback``), else it fails with each tool's reason."""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

from mother.capabilities import denial
from mother.errors import ApprovalRequired, ToolError
from mother.logs import get_logger
from schemas import RunState
from schemas.tool import DeterministicTool, ToolCandidate
from workers.tools import approval_request
from workers.tools.executor import ToolExecutor, ToolOutcome

__all__ = ["PlanOutcome", "run_plan", "verdict_of"]

log = get_logger("tools")


@dataclass
class PlanOutcome:
    """The tool that did the phase, what it returned, and how many tool calls the plan made."""

    outcome: ToolOutcome
    calls: int


def verdict_of(output: dict[str, Any]) -> str:
    """A reviewing or testing phase done by a tool: ``accept`` unless the tool reports a non-zero exit
    code or failed tests."""
    if output.get("exit_code", 0) != 0 or output.get("tests_failed", 0):
        return "reject"
    return "accept"


def run_plan(
    asks: Any,
    state: RunState,
    index: int,
    plan: list[ToolCandidate],
    *,
    tools: dict[str, DeterministicTool],
    executor: ToolExecutor,
    workspace: Any,
    charge: Callable[[bool], None],
    needing: Collection[str],
    allow_fallback: bool,
) -> PlanOutcome | None:
    """Try the plan's tools in order; the first success, or None: the phase goes to the model. Raises
    ApprovalRequired for a tool a person must approve first, ToolError when no tool succeeded and the
    registry allows no fallback. ``charge(read_only)`` charges one tool call (raises to stop)."""
    phase = state.spec.pipeline[index]
    calls = 0
    failures: list[str] = []
    for candidate in plan:
        tool = tools.get(candidate.tool_id)
        why = _refusal(tool, candidate, phase.role, list(state.capabilities))
        if why is not None or tool is None:
            failures.append(f"{candidate.tool_id}: {why}")
            continue
        gated = set(needing) | ({tool.tool_id} if tool.approval_required else set())
        request = approval_request(phase.name, tool.tool_id, candidate.inputs, gated, state.grants)
        if request is not None:
            raise ApprovalRequired(
                f"tool {tool.tool_id} needs a person's approval before it runs; the phase runs it "
                "once approved",
                request=request,
            )
        charge(tool.read_only)
        calls += 1
        outcome = executor.run(tool, workspace, dict(candidate.inputs))
        if outcome.ok:
            asks.emit(
                "tool_success",
                phase=phase.name,
                agent="mother",
                message=f"Handled by tool: {tool.tool_id}",
                tool_id=tool.tool_id,
                cost=0,
                duration_ms=round(outcome.duration_ms, 1),
                matched=candidate.matched,
            )
            return PlanOutcome(outcome, calls)
        failures.append(f"{tool.tool_id}: {outcome.error}")
        asks.emit(
            "tool_failed",
            phase=phase.name,
            tool_id=tool.tool_id,
            error=(outcome.error or "")[:1000],
            timed_out=outcome.timed_out,
        )
    if not allow_fallback:
        raise ToolError(
            "every tool of the phase's tool_only plan failed and tools.allow_fallback_to_llm is off: "
            + "; ".join(failures)[:3000]
        )
    asks.emit(
        "tool_fallback",
        phase=phase.name,
        tools=[c.tool_id for c in plan],
        why="; ".join(failures)[:2000],
    )
    log.info("tool_fallback", run_id=state.run_id, phase=phase.name, why=failures)
    return None


def _refusal(
    tool: DeterministicTool | None, candidate: ToolCandidate, role: str, granted: list[str]
) -> str | None:
    """Why the plan may not run this candidate here, or None."""
    if tool is None:
        return "no longer in the registry"
    if not tool.allows(role):
        return f"not allowed for role {role}"
    refused = denial(granted, [f"tool.{tool.tool_id}"])
    if refused is not None:
        return f"permission_denied: the run's capabilities do not grant tool.{tool.tool_id}"
    return None
