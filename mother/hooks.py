"""Hooks: event-driven behaviour around every turn, with CEL conditions.

Sources, in layer order:

    0 user      the file named by ``hooks.user_file`` (default ~/.mother/hooks.yaml)
    1 role      ``harness.roles.{role}.hooks`` in config (the role is the directive)
    2 builtin   shipped with Mother (``mother/hooks_builtin.yaml``)
    3 project   the file named by ``hooks.project_file`` (default .mother/hooks.yaml)
    4 infra     shipped with Mother (``mother/hooks_infra.yaml``): always run

Events: ``run_started`` (context hooks: every match's ``context`` text is joined into
the first message), ``limit``, ``error``, ``after_step`` (control hooks: the first
hook of layers 0-3 whose condition holds decides; infra hooks always run, for their
notices, and never decide), ``context_limit_reached`` (control: fired once per attempt
when the conversation fills ``harness.context_limit_ratio`` of the model's window; an
``abort`` ends the run ``context_budget_exceeded``). Conditions are CEL expressions (cel-python), e.g.
``cost.current > cost.limit * 0.9``; numbers are doubles. Actions: ``continue``,
``retry``, ``skip``, ``fail``, ``abort`` (the SafetyHarness's HarnessAction), ``notice`` (an
activity entry, no decision) and ``spawn`` (start a child run, no decision).
A bad hook file is refused at load with the file, the line and the reason.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from enum import StrEnum
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import celpy
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from mother.errors import ConfigError
from mother.logs import get_logger
from mother.roles import role_settings
from mother.yamlfile import YamlProblem, file_text, parse_yaml
from schemas import describe_validation_error

__all__ = [
    "EVENTS",
    "HarnessAction",
    "Hook",
    "HookSet",
    "load_hook_file",
    "load_hooks",
    "parse_hooks",
]

log = get_logger("hooks")
EVENTS = ("run_started", "limit", "error", "after_step", "context_limit_reached")
LAYERS = {"user": 0, "role": 1, "builtin": 2, "project": 3, "infra": 4}


class HarnessAction(StrEnum):
    CONTINUE = "continue"
    RETRY = "retry"
    SKIP = "skip"
    FAIL = "fail"
    ABORT = "abort"


class HookAction(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: Literal["continue", "retry", "skip", "fail", "abort", "notice", "spawn"]
    message: str = Field("", max_length=2000)
    # spawn: the child's role
    role: str | None = None
    # spawn: the child's task
    task: str | None = None
    # spawn: USD for the child
    budget: str | None = None


class HookSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=1, max_length=128)
    event: Literal["run_started", "limit", "error", "after_step", "context_limit_reached"]
    condition: str | None = Field(None, max_length=2000)
    action: HookAction | None = None
    context: str | None = Field(
        None, max_length=20_000, description="run_started: text for the first message"
    )


@dataclass
class Hook:
    spec: HookSpec
    layer: int
    source: str
    # compiled CEL, or None for "always"
    program: Any = None

    def matches(self, activation: dict[str, Any]) -> bool:
        if self.program is None:
            return True
        try:
            return bool(self.program.evaluate(celpy.json_to_cel(_doubles(activation))))
        # a condition that cannot be evaluated on this event does not match
        except Exception as exc:  # noqa: BLE001
            log.warning(
                "hook_condition_failed", hook=self.spec.id, source=self.source, error=str(exc)[:300]
            )
            return False


def _doubles(value: Any) -> Any:
    """CEL does not mix int and double; every number becomes a double."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, dict):
        return {k: _doubles(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_doubles(v) for v in value]
    return float(value) if hasattr(value, "__float__") else str(value)


_CEL = celpy.Environment()


def _compile(condition: str, where: str) -> Any:
    try:
        return _CEL.program(_CEL.compile(condition))
    except Exception as exc:  # noqa: BLE001
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(f"{where}: bad condition {condition!r}: {reason}") from None


def parse_hooks(items: Any, layer: str, source: str, lines: list[int] | None = None) -> list[Hook]:
    """Validate and compile a list of hook mappings; errors name the source and line."""
    if items is None:
        return []
    if not isinstance(items, list):
        raise ConfigError(
            f"{source}: hooks must be a list of mappings (id, event, condition, action)"
        )
    hooks = []
    for i, item in enumerate(items):
        where = f"{source}:{lines[i]}" if lines and i < len(lines) else f"{source}[{i}]"
        try:
            spec = HookSpec.model_validate(item)
        except ValidationError as exc:
            raise ConfigError(f"{where}: {describe_validation_error(exc, limit=1)}") from None
        if spec.action is None and spec.context is None:
            raise ConfigError(f"{where}: hook {spec.id} needs an action or a context")
        program = _compile(spec.condition, where) if spec.condition else None
        hooks.append(Hook(spec, LAYERS[layer], source, program))
    return hooks


def load_hook_file(path: Path, layer: str) -> list[Hook]:
    """A YAML file holding a list of hooks (or ``{hooks: [...]}``); absent files give no hooks.
    Parsed and compiled once per file version (path, mtime)."""
    try:
        stamp = path.stat().st_mtime_ns
    except OSError:
        return []
    if not path.is_file():
        return []
    return list(_load_hook_file(path, layer, stamp))


@functools.lru_cache(maxsize=64)
def _load_hook_file(path: Path, layer: str, _stamp: int) -> tuple[Hook, ...]:
    try:
        text = file_text(path)
        data = parse_yaml(text, str(path))
    except YamlProblem as exc:
        raise ConfigError(str(exc)) from None
    # the same text parsed above: only for the hooks' line numbers
    node = yaml.compose(text)
    if isinstance(data, dict) and "hooks" in data:
        data = data["hooks"]
        node = (
            next((v for k, v in node.value if k.value == "hooks"), None)
            if node is not None
            else None
        )
    lines = (
        [item.start_mark.line + 1 for item in node.value]
        if node is not None and hasattr(node, "value") and isinstance(node.value, list)
        else None
    )
    return tuple(parse_hooks(data, layer, str(path), lines))


def _shipped(name: str, layer: str) -> list[Hook]:
    return load_hook_file(_shipped_path(name), layer)


@functools.cache
def _shipped_path(name: str) -> Path:
    """Where a hook file shipped in the package is (looked up once: every phase loads them)."""
    return Path(str(resources.files("mother").joinpath(name)))


@dataclass
class Decision:
    action: HarnessAction | None
    hook: str | None = None
    message: str = ""
    side_effects: list[tuple[Hook, HookAction]] = field(default_factory=list)


class HookSet:
    """All hooks for one run's role, sorted by layer."""

    def __init__(self, hooks: list[Hook]) -> None:
        self.hooks = sorted(hooks, key=lambda h: h.layer)

    def run_control(self, event: str, activation: dict[str, Any]) -> Decision:
        """Control hooks: the first deciding hook of layers 0-3 wins; infra hooks always run."""
        decision = Decision(action=None)
        for hook in self.hooks:
            if hook.spec.event != event or hook.spec.action is None:
                continue
            infra = hook.layer == LAYERS["infra"]
            if decision.action is not None and not infra:
                continue
            if not hook.matches(activation):
                continue
            kind = hook.spec.action.type
            if kind in ("notice", "spawn"):
                decision.side_effects.append((hook, hook.spec.action))
            elif not infra and decision.action is None:
                decision.action = HarnessAction(kind)
                decision.hook = hook.spec.id
                decision.message = hook.spec.action.message
        return decision

    def run_context(self, event: str, activation: dict[str, Any]) -> str:
        """Context hooks: every matching hook's text, joined in layer order."""
        texts = [
            h.spec.context
            for h in self.hooks
            if h.spec.event == event and h.spec.context and h.matches(activation)
        ]
        return "\n\n".join(t for t in texts if t)


def load_hooks(settings: Any, role: str) -> HookSet:
    """Every source for ``role`` ('' for none: the hooks every role shares); raises ConfigError naming the
    bad file and line."""
    hooks: list[Hook] = []
    cfg = settings.hooks
    if cfg.user_file is not None:
        hooks += load_hook_file(Path(cfg.user_file).expanduser(), "user")
    declared = role_settings(settings, role) if role else None
    if declared is not None and declared.hooks:
        hooks += parse_hooks(declared.hooks, "role", f"config harness.roles.{role}.hooks")
    hooks += _shipped("hooks_builtin.yaml", "builtin")
    if cfg.project_file is not None:
        hooks += load_hook_file(Path(cfg.project_file), "project")
    hooks += _shipped("hooks_infra.yaml", "infra")
    return HookSet(hooks)
