"""Tools the agent loop can call, and the interface both kinds plug into (:mod:`workers.tools.box`).

The tool modules themselves (``workers.tools.files``, ``run_tests``, ...) are what a sandboxed tool
process imports, so this package loads nothing on import: the names below come from
:mod:`workers.tools.box` on first use."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from workers.tools.box import (
        FILE_TOOL_IDS,
        MAX_READ_BYTES,
        MAX_WRITE_BYTES,
        Tool,
        ToolBox,
        ToolResult,
        approval_request,
        call_digest,
        output_text,
        shipped_tools,
    )

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


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module 'workers.tools' has no attribute {name!r}")
    return getattr(importlib.import_module("workers.tools.box"), name)
