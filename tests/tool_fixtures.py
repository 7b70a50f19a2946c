"""Registry tools that misbehave on purpose, for tests/test_tools.py (listed in the executor's
allowed entrypoints there: they are outside workers.tools)."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

from mother.errors import ToolTransient


def sleepy(workspace: Path, inputs: dict[str, Any]) -> dict[str, Any]:
    """Starts a child that sleeps (its pid in sleeper.pid), then sleeps itself past any timeout."""
    child = subprocess.Popen(["sleep", "60"])
    (workspace / "sleeper.pid").write_text(str(child.pid))
    time.sleep(60)
    return {"slept": True}


def bad_output(workspace: Path, inputs: dict[str, Any]) -> dict[str, Any]:
    """Returns what its output schema forbids."""
    return {"count": "three"}


def flaky(workspace: Path, inputs: dict[str, Any]) -> dict[str, Any]:
    """Fails transiently until it has been called ``inputs['fail']`` times (counted in the workspace)."""
    counter = workspace / "flaky.count"
    calls = int(counter.read_text()) + 1 if counter.exists() else 1
    counter.write_text(str(calls))
    if calls <= int(inputs.get("fail", 1)):
        raise ToolTransient(f"busy (call {calls})")
    return {"count": calls}


def broken(workspace: Path, inputs: dict[str, Any]) -> dict[str, Any]:
    """Raises what a tool should not: a plain exception (not retried)."""
    raise RuntimeError("disk on fire")
