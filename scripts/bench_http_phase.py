"""Benchmark: a phase on a model served over HTTP (the openai SDK) vs the same phase on a scripted model.

    .venv/bin/python scripts/bench_http_phase.py [--runs N]

One process starts an embedded Redis, Mother and one forking worker, and a local server that speaks the
chat-completions protocol (tests/chat_server.py, the model double the test suite uses; it replies at
once). Then N three-phase runs on the HTTP model and N on the scripted one, alternating, one at a time.
Prints each kind's phase time p50/p99 (phase dispatched -> its result accepted, server time) and
what the HTTP model adds per phase: the SDK's own cost in a work-horse, since the server
answers at once. The first two runs of each kind are left out (the worker's first phase on a model
makes its SDK client).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import itertools

from mother import keys
from mother.client import MotherClient
from mother.config import load_settings
from scripts.bench_pipeline import UNLIMITED, pct, phase_marks
from tests.chat_server import ChatServer
from tests.conftest import start_pipeline, stop_pipeline

# runs of each kind left out
WARM = 2


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20, help="runs of each kind (default 20)")
    args = parser.parse_args()
    if args.runs <= WARM:
        parser.error(f"--runs must be more than {WARM}")
    os.environ.update(UNLIMITED)
    reply = {"text": "ok", "usage": {"prompt_tokens": 10, "completion_tokens": 1}}
    phases: dict[str, list[float]] = {"scripted": [], "http": []}
    with (
        tempfile.TemporaryDirectory(prefix="mother-bench-") as tmp,
        ChatServer([reply] * (3 * args.runs)) as chat,
    ):
        models = {
            "scripted": {"provider": "scripted"},
            "local-llm": {"provider": "openai", "base_url": chat.url},
        }
        p = start_pipeline(
            Path(tmp),
            workers=1,
            env={"MOTHER_MODELS": json.dumps(models), "MOTHER_LOG_LEVEL": "WARNING", **UNLIMITED},
        )
        try:
            client = MotherClient(settings=load_settings(redis_url=p.url, models=models))
            for i in range(args.runs):
                for kind, model in (("scripted", "scripted"), ("http", "local-llm")):
                    spec = {
                        "user_id": "bench",
                        "task": "no-op",
                        "scripts": {"noop": [{"text": "ok"}]},
                        "pipeline": [
                            {"name": n, "role": "noop", "model": model}
                            for n in ("plan", "execute", "review")
                        ],
                    }
                    run_id = client.submit(spec)
                    envelope = client.wait(run_id, timeout=120)
                    if envelope.termination.reason != "success":
                        raise SystemExit(
                            f"benchmark run {run_id} ended {envelope.termination.reason}: "
                            f"{envelope.termination.details}"
                        )
                    if i >= WARM:
                        history = orjson.loads(
                            p.redis.execute_command("JSON.GET", keys.run_key(run_id), "$.history")
                        )[0]
                        marks = phase_marks(history)
                        phases[kind] += [b - a for a, b in itertools.pairwise(marks)]
        finally:
            stop_pipeline(p)
    print(f"runs={args.runs} of each kind (first {WARM} left out), one at a time, 1 worker")
    print(f"{'':<16}{'phase p50 ms':>14}{'phase p99 ms':>14}")
    for kind, label in (("scripted", "scripted model"), ("http", "HTTP model")):
        print(
            f"{label:<16}{statistics.median(phases[kind]):>14.1f}{pct(phases[kind], 0.99):>14.1f}"
        )
    print(
        f"the HTTP model adds {statistics.median(phases['http']) - statistics.median(phases['scripted']):.1f} ms per phase "
        "(the server answers at once: this is the SDK's cost in a work-horse)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
