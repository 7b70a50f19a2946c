"""What a sandbox's check runs inside it (:meth:`workers.sandbox.Sandbox.check`): who the tool is there."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

__all__ = ["whoami"]


def whoami(workspace: Path, inputs: dict[str, Any]) -> dict[str, Any]:
    """The tool's user id and effective capabilities, and whether it can write its workspace."""
    status = Path("/proc/self/status").read_text().splitlines()
    caps = next((line.split()[1] for line in status if line.startswith("CapEff:")), "0")
    probe = workspace / ".sandbox-check"
    probe.write_text("ok")
    probe.unlink()
    return {"uid": os.getuid(), "capabilities": int(caps, 16)}
