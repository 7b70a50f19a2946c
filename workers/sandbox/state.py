"""Whether this process runs tools sandboxed, decided once (a worker decides at start, before it forks
work-horses, which inherit the decision).

- ``tools.sandbox: none``: unsandboxed, as the deployment said.
- ``tools.sandbox: bwrap`` and the sandbox works here (bubblewrap installed, a trivial call proven):
  sandboxed.
- ``tools.sandbox: bwrap`` and it cannot be made: a worker refuses to start, unless
  ``tools.sandbox_required`` is false (``mother up --dev``, the demo, the tests), where tools run
  unsandboxed and every start says so in one yellow line.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from mother.errors import ConfigError
from workers.sandbox.bwrap import NOT_INSTALLED, Sandbox, SandboxUnavailable
from workers.sandbox.rules import ToolRules

__all__ = ["SandboxState", "current", "prepare", "sandbox_state"]


@dataclass(frozen=True)
class SandboxState:
    """``state``: on (``sandbox`` runs the calls), off (``tools.sandbox: none``), or missing (wanted
    but not possible here); ``detail`` says how or why in one line."""

    state: Literal["on", "off", "missing"]
    detail: str
    sandbox: Sandbox | None
    rules: ToolRules

    @property
    def remedy(self) -> str:
        """What to do about a missing sandbox: install bubblewrap where it is not installed; where it is,
        the detail names what refused (a path, the kernel, user namespaces), and that is what to fix."""
        if self.detail.startswith(NOT_INSTALLED):
            return "Install bubblewrap"
        return "bubblewrap is installed but refused: fix what it names"

    @property
    def warning(self) -> str | None:
        """The line every start prints when tools run unsandboxed because the sandbox is missing."""
        if self.state != "missing":
            return None
        return (
            f"warning: tools run UNSANDBOXED (model-written code runs with this user's rights): "
            f"{self.detail}"
        )


def sandbox_state(settings: Any) -> SandboxState:
    """Decide, proving the sandbox with one trivial call when it is wanted."""
    rules = ToolRules.from_settings(settings)
    if settings.tools.sandbox == "none":
        return SandboxState(
            "off", "tools.sandbox is none: tools run unsandboxed, by configuration", None, rules
        )
    try:
        sandbox = Sandbox.from_settings(settings)
        sandbox.check()
    except SandboxUnavailable as exc:
        return SandboxState("missing", str(exc), None, rules)
    return SandboxState("on", sandbox.describe(), sandbox, rules)


_decided: SandboxState | None = None


def prepare(settings: Any) -> SandboxState:
    """Decide for this process (a worker, at start); ConfigError when the sandbox is required and
    cannot be made."""
    global _decided
    state = sandbox_state(settings)
    if state.state == "missing" and settings.tools.sandbox_required:
        raise ConfigError(
            f"the tool sandbox cannot be made on this host: {state.detail}. {state.remedy}, or "
            "set tools.sandbox: none to run tools unsandboxed (only where every tool and workspace "
            "is trusted)"
        )
    _decided = state
    return state


def current(settings: Any) -> SandboxState:
    """This process's decision (made by :func:`prepare` at start, or now)."""
    return _decided if _decided is not None else prepare(settings)
