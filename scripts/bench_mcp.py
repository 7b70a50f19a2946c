"""Benchmark: an MCP server's tool call against a built-in tool's, through the same executor.

    .venv/bin/python scripts/bench_mcp.py [--calls 20]

Both run as a worker runs every tool call: the one executor, in the tool sandbox (bubblewrap) when this
machine has it (the script says which). The built-in tool is ``git_status`` (the baseline: a Python
function in a fresh sandboxed process); the MCP tool is ``mcp-server-time``'s ``get_current_time``,
registered as ``mother tools mcp add`` does, whose call starts the server over stdio inside the
sandbox, initializes the MCP session, calls the tool and stops the server. Prints p50 / p90 ms of each
and the difference.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mother.config import load_settings
from mother.tools import mcp
from scripts.bench import pct
from workers.sandbox import state as sandbox_state
from workers.tools import shipped_tools
from workers.tools.executor import ToolExecutor


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=20)
    args = parser.parse_args()
    settings = load_settings()
    box = sandbox_state.current(settings)
    executor = ToolExecutor(sandbox=box.sandbox, rules=box.rules)
    server = mcp.server_of(
        "time", f"{sys.executable} -m mcp_server_time --local-timezone UTC", None, ["*"]
    )
    server = server.model_copy(update={"tools": mcp.list_tools(server)})
    timed = {t.tool_id: t for t in mcp.tools_of(server)}["time__get_current_time"]
    builtin = shipped_tools()["git_status"]
    with tempfile.TemporaryDirectory(prefix="mother-bench-mcp-") as tmp:
        workspace = Path(tmp) / "ws"
        workspace.mkdir()
        subprocess.run(["git", "init", "-q", str(workspace)], check=True)
        rows = {}
        for name, tool, inputs in (
            ("built-in git_status (baseline)", builtin, {"repo_path": "."}),
            ("MCP time__get_current_time", timed, {"timezone": "UTC"}),
        ):
            samples = []
            for _ in range(args.calls):
                started = time.perf_counter()
                outcome = executor.run(tool, workspace, inputs)
                samples.append((time.perf_counter() - started) * 1000)
                assert outcome.ok, outcome.error
            rows[name] = samples
    print(f"{args.calls} calls each, sandbox: {'bubblewrap' if box.sandbox else 'none'}")
    for name, samples in rows.items():
        print(
            f"  {name:<34} p50 {statistics.median(samples):8.1f} ms   p90 {pct(samples, 0.9):8.1f} ms"
        )
    base, served = (statistics.median(s) for s in rows.values())
    print(f"  an MCP stdio call costs +{served - base:.1f} ms p50 ({served / base:.1f}x)")


if __name__ == "__main__":
    main()
