"""Benchmark: Mother's CPU per review decision against its CPU per plain phase, in the same run.

    .venv/bin/python scripts/bench_review.py [--runs 100] [--rounds 3] [--workers 2]

One embedded server, one Mother, ``--workers`` workers, the scripted model, and the policy
``critic_vs_coder: [prefer_higher_confidence]`` (a conflict settled without an extra attempt). Four
kinds of run take turns in ``--rounds`` rounds of ``--runs`` each; Mother's CPU (user + system, from
/proc) is read around each batch:

- one:       one work phase (intake, a dispatch, the end)
- two:       two work phases: ``two - one`` is Mother's CPU for one plain phase (its result accepted,
             the next phase composed and dispatched)
- accepted:  a work phase, then a review that accepts (a verdict: the run is read, nothing detected)
- conflict:  a work phase, then a review that rejects a more confident coder: detection,
             prefer_higher_confidence, the conflict record and the move

``conflict - one`` is Mother's CPU for one review decision (a conflict detected, resolved and recorded,
the run moved on), printed beside the plain phase's and as a ratio to it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import orjson

from mother.client import MotherClient
from mother.config import load_settings
from mother.server import EmbeddedRedis
from mother.stack import LocalStack

# run as a file: the project's root is importable
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from scripts.bench import UNLIMITED

TICK = os.sysconf("SC_CLK_TCK")
POLICY = {"critic_vs_coder": ["prefer_higher_confidence"]}


def cpu(pid: int) -> float:
    """The process's user + system CPU seconds so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def reply(text: str, confidence: float) -> dict[str, Any]:
    return {"text": text, "confidence": confidence}


CODE = {"name": "code", "role": "coder", "model": "scripted"}
KINDS: dict[str, tuple[list[dict[str, Any]], dict[str, list[dict[str, Any]]]]] = {
    "one": ([CODE], {"coder": [reply("done", 0.9)]}),
    "two": (
        [CODE, {"name": "check", "role": "checker", "model": "scripted"}],
        {"coder": [reply("done", 0.9)], "checker": [reply("checked", 0.9)]},
    ),
    "accepted": (
        [CODE, {"name": "review", "role": "critic", "model": "scripted", "reviews": "code"}],
        {"coder": [reply("done", 0.9)], "critic": [reply("VERDICT: ACCEPT", 0.9)]},
    ),
    "conflict": (
        [CODE, {"name": "review", "role": "critic", "model": "scripted", "reviews": "code"}],
        {"coder": [reply("done", 0.9)], "critic": [reply("VERDICT: REJECT", 0.3)]},
    ),
}


def batch(client: MotherClient, kind: str, runs: int) -> list[str]:
    """Submit ``runs`` runs of ``kind`` and wait until every one has ended; their end reasons."""
    pipeline, scripts = KINDS[kind]
    ids = [
        client.submit(
            {
                "run_id": f"{kind}-{uuid.uuid4().hex[:12]}",
                "user_id": f"bench-{kind}",
                "task": "bench",
                "pipeline": pipeline,
                "scripts": scripts,
            }
        )
        for _ in range(runs)
    ]
    reasons = []
    for run_id in ids:
        envelope = client.wait(run_id, timeout=300)
        assert envelope.termination is not None
        reasons.append(envelope.termination.reason)
    return reasons


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    env = {
        "MOTHER_CONFLICTS__POLICY": orjson.dumps(POLICY).decode(),
        "MOTHER_LOG_LEVEL": "WARNING",
        **UNLIMITED,
    }
    os.environ.update(env)
    per_run: dict[str, list[float]] = {kind: [] for kind in KINDS}
    with (
        tempfile.TemporaryDirectory(prefix="bench-review-") as tmp,
        EmbeddedRedis(dir=Path(tmp) / "redis", appendfsync="no") as server,
        LocalStack(
            server.url,
            workers=args.workers,
            log_dir=Path(tmp) / "logs",
            env={**env, "MOTHER_WORKER__WORKSPACE_ROOT": str(Path(tmp) / "ws")},
        ) as stack,
    ):
        client = MotherClient(settings=load_settings(redis_url=server.url))
        mother = stack.procs["mother-0"].pid
        # warm up: imports, caches, the first conflict's index
        for kind in KINDS:
            batch(client, kind, 5)
        for round_no in range(args.rounds):
            order = list(KINDS) if round_no % 2 == 0 else list(reversed(KINDS))
            for kind in order:
                before = cpu(mother)
                reasons = batch(client, kind, args.runs)
                spent = cpu(mother) - before
                if set(reasons) != {"success"}:
                    print(f"{kind}: runs ended {sorted(set(reasons))}", file=sys.stderr)
                    return 1
                per_run[kind].append(spent / args.runs * 1000)
                print(
                    f"round {round_no + 1}/{args.rounds}: {kind:<9} {per_run[kind][-1]:.3f} ms/run"
                )
    med = {kind: statistics.median(values) for kind, values in per_run.items()}
    plain = med["two"] - med["one"]
    decision = med["conflict"] - med["one"]
    accepted = med["accepted"] - med["one"]
    print(f"\nMother CPU per run, median of {args.rounds} rounds of {args.runs} runs (ms):")
    for kind, value in med.items():
        print(
            f"  {kind:<9} {value:7.3f}   (rounds: {', '.join(f'{v:.3f}' for v in per_run[kind])})"
        )
    rows = (
        ("plain phase (two - one)", plain),
        ("review that accepts (accepted - one)", accepted),
        ("review decision, conflict settled (conflict - one)", decision),
    )
    for label, value in rows:
        print(f"{label:<52} {value:7.3f} ms  = {value / plain:.2f}x a plain phase")
    return 0


if __name__ == "__main__":
    start = time.monotonic()
    code = main()
    print(f"({time.monotonic() - start:.0f}s)")
    sys.exit(code)
