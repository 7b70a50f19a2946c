"""Benchmark: what the step journal costs, and what it saves.

    .venv/bin/python scripts/bench_journal.py [--calls 1000]

1. **Recording cost per model call.** One Mother (`mother run`) serves a host that is this process and
   holds one phase attempt. A model call's charges are two asks, its reservation and its settle
   (``AskedGuard.reserve_call`` and ``settle_call``, each a round trip to Mother, who calls ``mh_guard``);
   with the journal each carries its step (the ``sent`` step with the reservation, the ``done`` step, a
   reply of 200 characters, with the settle). ``--calls`` of each, in turns of 100, timed per call:
   p50 / p99 without steps (the baseline) and with; and the bytes Redis keeps per step (``MEMORY
   USAGE`` of the journal over its length).
2. **The drill** (tests/test_journal.py's spec: 5 model calls, 4 tool calls), on Mother and two worker
   hosts: uninterrupted (the baseline); its work-horse killed during its 4th model call and resumed
   from the journal; and killed the same way with its journal deleted first (what a retry paid before
   the journal). Model calls, tokens and tool calls of each; and the time from the kill to the retry's
   first live step (its ``sent`` record, server time).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import redis

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mother import keys
from mother.client import MotherClient
from mother.config import load_settings
from mother.server import EmbeddedRedis
from mother.stack import LocalStack
from schemas import ms_from_iso
from scripts.bench import UNLIMITED, pct
from scripts.bench.held import hold
from tests.conftest import start_pipeline, stop_pipeline
from tests.test_journal import ENV, _kill_horse, _sent, _sync, counters, drill, steps
from tests.test_pipeline import wait_until
from workers.asking import AskedGuard, AttemptAsks

HOST = "bench-journal"
REPLY = {"text": "x" * 200, "tool_calls": [], "input_tokens": 500, "output_tokens": 50}


def _spec() -> dict[str, Any]:
    return {
        "run_id": f"bench-journal-{time.time_ns()}",
        "user_id": "bench",
        "task": "charge",
        "pipeline": [{"name": "a", "role": "r", "model": "scripted", "timeout_seconds": 3600}],
        "limit_overrides": {"duration_seconds": 3600, "turns": 100_000},
        "scripts": {"r": [{"text": "x"}]},
    }


def recording(calls: int) -> None:
    with (
        tempfile.TemporaryDirectory(prefix="mother-bench-journal-") as tmp,
        EmbeddedRedis(dir=Path(tmp) / "r", appendfsync="no") as server,
    ):
        env = {
            "MOTHER_LOG_LEVEL": "WARNING",
            "MOTHER_BUDGET__PER_RUN__MAX_MODEL_CALLS": "1000000",
            **UNLIMITED,
        }
        stack = LocalStack(server.url, workers=0, log_dir=Path(tmp) / "logs", env=env).start()
        try:
            client = MotherClient(settings=load_settings(redis_url=server.url))
            held = hold(server.url, HOST, [_spec()], client)
            (ids,) = held.ids
            settings = load_settings(redis_url=server.url)
            guard = AskedGuard(AttemptAsks(held.asker(), ids), settings, "bench")
            model = settings.models["scripted"]
            timed: dict[bool, list[float]] = {False: [], True: []}
            number = 0
            for turn in range(2 * calls // 100):
                journaled = bool(turn % 2)
                for _ in range(100):
                    number += 1
                    sent = {"step": number, "kind": "model", "state": "sent", "digest": "a" * 64,
                            "model": "scripted"}  # fmt: skip
                    done = {"step": number, "kind": "model", "state": "done", "reply": REPLY}
                    started = time.perf_counter()
                    op = guard.reserve_call(model, 10, sent if journaled else None)
                    guard.settle_call(op, model, 10, 5, step=done if journaled else None)
                    timed[journaled].append((time.perf_counter() - started) * 1000)
            admin = redis.Redis.from_url(server.url)
            journal = keys.journal_key(ids[0], 0)
            per_step = admin.memory_usage(journal, samples=0) / admin.llen(journal)
            print(f"per model call (a reservation and a settle, {calls} each way, in turns of 100)")
            base = timed[False]
            for journaled, samples in timed.items():
                label = "with steps" if journaled else "without steps (baseline)"
                print(
                    f"  {label:<26} p50 {pct(samples, 0.5):7.3f} ms   p99 {pct(samples, 0.99):7.3f} ms"
                    + (
                        f"   (+{pct(samples, 0.5) - pct(base, 0.5):.3f} ms p50, "
                        f"{pct(samples, 0.99) - pct(base, 0.99):+.3f} ms p99)"
                        if journaled
                        else ""
                    )
                )
            print(f"  Redis keeps {per_step:.0f} bytes per step (MEMORY USAGE / LLEN)")
            held.release()
        finally:
            stack.stop()


def _figures(p: Any, run_id: str) -> str:
    got = counters(p, run_id)
    return (
        f"{got['model_calls']} model calls, {got['input_tokens']:,} / {got['output_tokens']:,} "
        f"tokens, {got['tool_calls']} tool calls"
    )


def drills(tmp: Path) -> None:
    p = start_pipeline(tmp, mothers=1, workers=2, env=ENV)
    try:
        _sync(p, tmp / "manifests")
        baseline = p.client.submit(drill())
        assert p.wait(baseline, 60).termination.reason == "success"
        print("the drill (5 model calls, 4 tool calls; the horse killed during the 4th model call)")
        print(f"  uninterrupted (baseline)         {_figures(p, baseline)}")
        for forgetting in (False, True):
            run_id = p.client.submit(drill(delay=30))
            wait_until(lambda r=run_id: _sent(p, r, 7, "model"), timeout=60)
            if forgetting:
                p.redis.delete(keys.journal_key(run_id, 0))
            killed_ms = int(p.redis.execute_command("FCALL", "mh_now", 0))
            _kill_horse(p)
            assert p.wait(run_id, 120).termination.reason == "success"
            label = (
                "killed, without a journal" if forgetting else "killed, resumed from the journal"
            )
            print(f"  {label:<32} {_figures(p, run_id)}")
            if not forgetting:
                live = next(s for s in steps(p, run_id) if s.attempt == 2 and s.state == "sent")
                assert live.at is not None
                print(
                    f"  from the kill to the retry's first live step (step {live.step}): "
                    f"{(ms_from_iso(live.at) - killed_ms) / 1000:.2f} s"
                )
    finally:
        stop_pipeline(p)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=1000)
    args = parser.parse_args()
    recording(args.calls)
    drills(Path(tempfile.mkdtemp(prefix="mother-bench-drill-")))


if __name__ == "__main__":
    main()
