"""Registry tools that misbehave on purpose, for tests/test_tools.py (listed in the executor's
allowed entrypoints there: they are outside workers.tools)."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

from mother.errors import ToolError, ToolTransient


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


def connect(workspace: Path, inputs: dict[str, Any]) -> dict[str, Any]:
    """Connects to 127.0.0.1:``inputs['fail']`` (the port), and says whether it could."""
    import socket

    with socket.socket() as sock:
        sock.settimeout(3)
        try:
            sock.connect(("127.0.0.1", int(inputs["fail"])))
        except OSError as exc:
            raise ToolError(f"could not connect: {exc}") from None
    return {"count": 1}


def environment(workspace: Path, inputs: dict[str, Any]) -> dict[str, Any]:
    """Writes its environment's names and values to environment.json; counts them."""
    import json
    import os

    (workspace / "environment.json").write_text(json.dumps(dict(os.environ)))
    return {"count": len(os.environ)}


def hog_memory(workspace: Path, inputs: dict[str, Any]) -> dict[str, Any]:
    """Allocates ``inputs['fail']`` MB at once."""
    block = bytearray(int(inputs["fail"]) * 1024 * 1024)
    return {"count": len(block)}


def spin(workspace: Path, inputs: dict[str, Any]) -> dict[str, Any]:
    """Spends CPU until something stops it."""
    n = 0
    while True:
        n += 1


def deploy(workspace: Path, inputs: dict[str, Any]) -> dict[str, Any]:
    """A destructive tool: waits ``inputs['seconds']`` (0 by default), then appends its target to
    deployed.log (each call one line: a call made twice shows twice)."""
    time.sleep(float(inputs.get("seconds", 0)))
    log = workspace / "deployed.log"
    with log.open("a") as out:
        out.write(f"{inputs.get('target', 'prod')}\n")
    return {"count": len(log.read_text().splitlines())}
