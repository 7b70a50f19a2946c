"""Benchmark: what tracing costs a phase.

    .venv/bin/python scripts/bench_telemetry.py [--runs 40]

Two stacks in turn, each an embedded server, Mother and one worker: traces off (the baseline), then
on (telemetry.otlp_endpoint set to a local OTLP/HTTP receiver: tests/otlp_receiver.py, which decodes
every span). ``--runs`` three-phase runs each (the tool-calling example: 5 model calls and 2 tool calls
a run), one after another; the CPU seconds Mother and the worker (its work-horses included) used,
per phase, and the spans the receiver got.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.conftest import start_pipeline, stop_pipeline
from tests.otlp_receiver import Receiver
from tests.test_pipeline import example, wait_until


def _cpu(pid: int) -> float:
    """CPU seconds of process ``pid`` and of its reaped children (a worker's work-horses)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return sum(int(fields[i]) for i in (11, 12, 13, 14)) / tick


def _measure(runs: int, env: dict[str, str]) -> tuple[float, float]:
    with tempfile.TemporaryDirectory(prefix="mother-bench-telemetry-") as tmp:
        p = start_pipeline(Path(tmp), workers=1, env=env)
        try:
            warm = p.client.submit(example("three-phase"))
            p.wait(warm, 60)
            pids = [proc.pid for proc in p.stack.procs.values()]
            before = sum(_cpu(pid) for pid in pids)
            started = time.monotonic()
            for _ in range(runs):
                p.wait(p.client.submit(example("three-phase")), 60)
            took = time.monotonic() - started
            # the last horse is reaped
            time.sleep(0.5)
            used = sum(_cpu(pid) for pid in pids) - before
        finally:
            stop_pipeline(p)
    phases = 3 * runs
    return used / phases * 1000, took / phases * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=40)
    args = parser.parse_args()
    off = _measure(args.runs, {})
    receiver = Receiver()
    try:
        on = _measure(args.runs, {"MOTHER_TELEMETRY__OTLP_ENDPOINT": receiver.url})
        wait_until(lambda: len({s.trace_id for s in receiver.spans}) >= args.runs, timeout=30)
    finally:
        receiver.close()
    print(
        f"{args.runs} three-phase runs each ({3 * args.runs} phases); CPU of Mother and the worker"
    )
    print(
        f"  traces off (baseline)  {off[0]:7.2f} ms CPU per phase   {off[1]:7.2f} ms wall per phase"
    )
    print(
        f"  traces on              {on[0]:7.2f} ms CPU per phase   {on[1]:7.2f} ms wall per phase"
        f"   (+{on[0] - off[0]:.2f} ms CPU, {on[0] / off[0]:.2f}x)"
    )
    print(f"  the receiver got {len(receiver.spans)} spans in {receiver.requests} exports")


if __name__ == "__main__":
    main()
