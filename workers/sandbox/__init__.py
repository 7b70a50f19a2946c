"""The sandbox every tool call runs in (bubblewrap): :mod:`workers.sandbox.bwrap` builds it (what it
allows), :mod:`workers.sandbox.started` runs one call in it, :mod:`workers.sandbox.entry` is the process
inside it, :mod:`workers.sandbox.rules` the deployment's rules for a call (limits, network,
environment), and :mod:`workers.sandbox.state` how a worker decides to use it. This package imports nothing on import (the process inside a sandbox
imports :mod:`workers.sandbox.entry` through it)."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from workers.sandbox.bwrap import Sandbox, SandboxUnavailable, hand_over
    from workers.sandbox.rules import CallPolicy, Limits, ToolRules, tool_environment
    from workers.sandbox.state import SandboxState, sandbox_state

__all__ = [
    "CallPolicy",
    "Limits",
    "Sandbox",
    "SandboxState",
    "SandboxUnavailable",
    "ToolRules",
    "hand_over",
    "sandbox_state",
    "tool_environment",
]

_HOME = {
    "CallPolicy": "workers.sandbox.rules",
    "Limits": "workers.sandbox.rules",
    "ToolRules": "workers.sandbox.rules",
    "tool_environment": "workers.sandbox.rules",
    "SandboxState": "workers.sandbox.state",
    "sandbox_state": "workers.sandbox.state",
}


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module 'workers.sandbox' has no attribute {name!r}")
    return getattr(importlib.import_module(_HOME.get(name, "workers.sandbox.bwrap")), name)
