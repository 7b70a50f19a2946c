"""A tool's input and output contracts (JSON Schema, checked with ``jsonschema``): inputs before the tool
runs, its output after. A violation is one line naming the tool, the place and what is wrong."""

from __future__ import annotations

from typing import Any, Literal

from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match

from mother.errors import ToolError
from schemas.tool import DeterministicTool

__all__ = ["check_inputs", "check_output", "contract_error", "with_defaults"]

Side = Literal["input", "output"]


def _validator_for(tool: DeterministicTool, side: Side) -> Draft202012Validator:
    """The tool's validator for one side, made once per tool object (kept on it)."""
    cache = tool.validators()
    validator = cache.get(side)
    if validator is None:
        validator = Draft202012Validator(
            tool.input_schema if side == "input" else tool.output_schema
        )
        cache[side] = validator
    return validator


def contract_error(tool: DeterministicTool, side: Side, value: Any) -> str | None:
    """Why ``value`` breaks the tool's input or output schema (one line), or None."""
    error = best_match(_validator_for(tool, side).iter_errors(value))
    if error is None:
        return None
    at = "".join(f"[{p!r}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path)
    what = "inputs" if side == "input" else "output"
    return f"{what} of {tool.tool_id} break its {side}_schema at ${at}: {error.message[:300]}"


def check_inputs(tool: DeterministicTool, inputs: Any) -> None:
    problem = contract_error(tool, "input", inputs)
    if problem:
        raise ToolError(problem)


def check_output(tool: DeterministicTool, output: Any) -> None:
    problem = contract_error(tool, "output", output)
    if problem:
        raise ToolError(problem)


def with_defaults(tool: DeterministicTool, inputs: dict[str, Any]) -> dict[str, Any]:
    """``inputs`` with the input schema's top-level ``default`` values for what they leave out."""
    out = dict(inputs)
    properties = tool.input_schema.get("properties")
    if isinstance(properties, dict):
        for name, prop in properties.items():
            if name not in out and isinstance(prop, dict) and "default" in prop:
                out[name] = prop["default"]
    return out
