"""Benchmark: what the tool sandbox adds to one tool call.

    .venv/bin/python scripts/bench_sandbox.py [--calls 200] [--gap-ms 50]

One process, no server. The same registry tool calls through the one executor, in the same run:

- in-process (the function called directly: what the tool itself costs);
- unsandboxed (``tools.sandbox: none``): a forked child with its allowlisted environment, killed at
  its timeout (the baseline);
- sandboxed, cold: a bubblewrap sandbox started for the call (``tools.sandbox_prestart: false``, or
  the first call of a phase);
- sandboxed, warm: the sandbox started ahead when the previous call ended (the default), with
  ``--gap-ms`` between calls standing in for the model's turn between an agent's tool calls.

Printed per tool and way: p50 and p99 in ms, and what the sandbox adds at p50 over the baseline.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mother.config import Settings
from workers.sandbox.state import sandbox_state
from workers.tools import shipped_tools
from workers.tools.executor import ToolExecutor
from workers.tools.files import list_dir, read_file


def percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


def timed(call: Callable[[], Any], calls: int, gap_s: float = 0.0) -> list[float]:
    got = []
    for _ in range(calls):
        if gap_s:
            time.sleep(gap_s)
        t = time.perf_counter()
        call()
        got.append((time.perf_counter() - t) * 1000)
    return got


def workspace(root: Path) -> Path:
    ws = root / "ws"
    ws.mkdir()
    for i in range(20):
        (ws / f"file{i}.txt").write_text("x" * 1000)
    git = ["git", "-C", str(ws), "-c", "user.email=a@b", "-c", "user.name=bench"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "bench"], check=True)
    return ws


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--gap-ms", type=float, default=50.0)
    args = parser.parse_args()
    state = sandbox_state(Settings())
    if state.sandbox is None:
        print(f"no sandbox on this host: {state.detail}")
        return 1
    sandbox = state.sandbox
    print(f"sandbox: {state.detail}")
    tools = shipped_tools()
    cases: list[tuple[str, dict[str, Any], Callable[[Path], Any] | None]] = [
        ("list_dir", {"path": "."}, lambda ws: list_dir(ws, {"path": "."})),
        ("read_file", {"path": "file1.txt"}, lambda ws: read_file(ws, {"path": "file1.txt"})),
        ("git_status", {"repo_path": "."}, None),
    ]
    plain = ToolExecutor()
    boxed = ToolExecutor(sandbox=sandbox)
    with tempfile.TemporaryDirectory(prefix="bench-sandbox-") as tmp:
        ws = workspace(Path(tmp))
        print(
            f"{args.calls} calls each; warm calls {args.gap_ms:g} ms apart; p50 / p99 ms; "
            "added: over the unsandboxed call at p50"
        )
        print(f"  {'tool':<11} {'way':<26} {'p50':>8} {'p99':>8} {'added':>8}")
        for tool_id, inputs, direct in cases:
            tool = tools[tool_id]

            def through(ex: ToolExecutor, tool: Any = tool, inputs: Any = inputs) -> None:
                outcome = ex.run(tool, ws, inputs)
                assert outcome.ok, outcome.error

            rows: list[tuple[str, list[float]]] = []
            if direct is not None:
                rows.append(("in-process", timed(lambda d=direct: d(ws), args.calls)))
            rows.append(("unsandboxed (baseline)", timed(lambda: through(plain), args.calls)))
            sandbox.prestart = False
            sandbox.close()
            rows.append(("sandboxed, cold", timed(lambda: through(boxed), args.calls)))
            sandbox.prestart = True
            through(boxed)
            gap = args.gap_ms / 1000
            rows.append(("sandboxed, warm", timed(lambda: through(boxed), args.calls, gap)))
            sandbox.close()
            base = statistics.median(dict(rows)["unsandboxed (baseline)"])
            for way, samples in rows:
                p50, p99 = percentiles(samples)
                added = f"{p50 - base:+8.2f}" if way.startswith("sandboxed") else ""
                print(f"  {tool_id:<11} {way:<26} {p50:8.2f} {p99:8.2f} {added:>8}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
