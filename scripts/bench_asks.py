"""Benchmark: a host's ask round trip (a charge) with 8 phases charging at once, and ACL commands per phase.

    .venv/bin/python scripts/bench_asks.py [--charges N] [--phases 8] [--runs 20]

One embedded server and one Mother process (`mother run`, serving the hosts' asks). An enrolled host
(this script, as the host's ACL user) is given 8 runs' first attempts (it beats with 8 free workers, so
Mother queues them on its queue; it takes them and asks `begin` for each). Then 8 processes, one per
attempt, each make N `charge` asks (a tool call's check and charge, Mother's `mh_guard`) one after
another, timing each round trip (XADD + BLPOP of the reply). In the same run, from 8 processes as well:

  PING        a bare round trip (the physical limit)
  guard       the same charge as one direct FCALL mh_guard (what the ask costs Mother's side, plus a hop)
  ask         the charge as a host asks it: XADD on its stream, Mother reads it (XREADGROUP), checks the
              host holds the attempt, calls mh_guard with its reply and the ask's XACK/XDEL as
              follow-ups, and the host pops the reply

Prints p50/p99 (ms) and ops/s of each, and the ask's over PING and guard.

Then `--runs` three-phase runs through Mother and two real worker hosts (`mother up`'s shape), counting
the ACL commands the server ran (INFO commandstats: acl|setuser, acl|deluser, acl|getuser, acl|users,
auth) per phase: Mother's periodic reapply of enrolled users aside, none is made per phase.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import redis

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mother.client import MotherClient
from mother.clock import ServerClock
from mother.config import load_settings
from mother.server import EmbeddedRedis
from mother.stack import LocalStack
from scripts.bench import UNLIMITED, pct
from scripts.bench.held import hold
from workers.asking import Asker

HOST = "bench-host"
CHARGE = {"add": {"tool_calls": 1}}
ACL_COMMANDS = ("acl|setuser", "acl|deluser", "acl|getuser", "auth", "acl|users")


def _spec(i: int) -> dict[str, Any]:
    return {
        "run_id": f"asks-{i}",
        "user_id": f"bench-{i}",
        "task": "charge",
        "pipeline": [{"name": "a", "role": "r", "model": "scripted", "timeout_seconds": 3600}],
        "limit_overrides": {"duration_seconds": 3600},
        "scripts": {"r": [{"text": "x"}]},
    }


def _one(args: tuple[str, str, str, tuple[str, int, int] | None, int]) -> list[float]:
    """N timed round trips of one kind (``ping``, ``guard`` or ``ask``) from this process."""
    kind, url, host_url, ids, n = args
    out: list[float] = []
    if kind == "ask":
        assert ids is not None
        asker = Asker(redis.Redis.from_url(host_url, decode_responses=True), HOST, 30)
        for _ in range(n):
            started = time.perf_counter()
            reply = asker.ask("charge", {"action": CHARGE}, ids)
            out.append((time.perf_counter() - started) * 1000)
            assert reply["ok"], reply
        return out
    client = redis.Redis.from_url(url, decode_responses=True)
    if kind == "ping":
        for _ in range(n):
            started = time.perf_counter()
            client.ping()
            out.append((time.perf_counter() - started) * 1000)
        return out
    from mother.budget import Guard

    assert ids is not None
    settings = load_settings(redis_url=url)
    run_id, index, attempt = ids
    user = f"bench-{run_id.split('-')[1]}"
    # the very call Mother makes for the ask (the holding check and the charge in one FCALL)
    guard = Guard(client, settings, run_id, user, ServerClock(client).today, (index, attempt), HOST)
    for _ in range(n):
        started = time.perf_counter()
        reply = guard.asked(CHARGE)
        out.append((time.perf_counter() - started) * 1000)
        assert reply.get("ok"), reply
    return out


def _row(name: str, samples: list[float], seconds: float) -> str:
    return (
        f"{name:<8} p50 {pct(samples, 0.5):7.3f} ms   p99 {pct(samples, 0.99):7.3f} ms   "
        f"{len(samples) / seconds:9.0f} ops/s"
    )


def _acl_calls(client: redis.Redis) -> dict[str, int]:
    stats = client.info("commandstats")
    return {name: int(stats.get(f"cmdstat_{name}", {}).get("calls", 0)) for name in ACL_COMMANDS}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--charges", type=int, default=2000, help="charges per phase (per kind)")
    parser.add_argument("--phases", type=int, default=8)
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    env = {"MOTHER_LOG_LEVEL": "WARNING", **UNLIMITED}
    with (
        tempfile.TemporaryDirectory(prefix="mother-bench-asks-") as tmp,
        EmbeddedRedis(dir=Path(tmp) / "r", appendfsync="no") as server,
    ):
        admin = redis.Redis.from_url(server.url, decode_responses=True)
        stack = LocalStack(
            server.url, workers=0, mothers=1, log_dir=Path(tmp) / "logs", env=env
        ).start()
        try:
            client = MotherClient(settings=load_settings(redis_url=server.url))
            attempts = hold(server.url, HOST, [_spec(i) for i in range(args.phases)], client)
            host_url, held = attempts.url, attempts.ids
            print(
                f"{args.phases} phases held by host {HOST}; {args.charges} round trips each, "
                f"{args.phases} processes at once, per kind"
            )
            with ProcessPoolExecutor(args.phases) as pool:
                results: dict[str, tuple[list[float], float]] = {}
                for kind in ("ping", "guard", "ask", "ping", "guard", "ask"):
                    started = time.perf_counter()
                    got = list(
                        pool.map(
                            _one,
                            [(kind, server.url, host_url, ids, args.charges // 2) for ids in held],
                        )
                    )
                    took = time.perf_counter() - started
                    samples = [x for part in got for x in part]
                    before = results.get(kind, ([], 0.0))
                    results[kind] = (before[0] + samples, before[1] + took)
            for kind, (samples, took) in results.items():
                print(_row(kind, samples, took))
            ask, guard, ping = (results[k][0] for k in ("ask", "guard", "ping"))
            print(
                f"ask over PING: p50 x{pct(ask, 0.5) / pct(ping, 0.5):.1f}, "
                f"p99 x{pct(ask, 0.99) / pct(ping, 0.99):.1f}; ask over guard: "
                f"p50 +{pct(ask, 0.5) - pct(guard, 0.5):.3f} ms, "
                f"p99 +{pct(ask, 0.99) - pct(guard, 0.99):.3f} ms"
            )
            attempts.release()
        finally:
            stack.stop()

    # ACL commands per phase, through Mother and two real worker hosts
    with (
        tempfile.TemporaryDirectory(prefix="mother-bench-acl-") as tmp,
        EmbeddedRedis(dir=Path(tmp) / "r", appendfsync="no") as server,
    ):
        admin = redis.Redis.from_url(server.url, decode_responses=True)
        stack = LocalStack(
            server.url,
            workers=2,
            mothers=1,
            log_dir=Path(tmp) / "logs",
            env={**env, "MOTHER_SERVICE__HEARTBEAT_TIMEOUT_SECONDS": "10"},
            wait_hosts=True,
        ).start()
        try:
            client = MotherClient(settings=load_settings(redis_url=server.url))
            # the first runs' reapply of the enrolled users at Mother's start is not per phase
            client.wait(client.submit(_three(0)), 60)
            before = _acl_calls(admin)
            started = time.perf_counter()
            ids = [client.submit(_three(i)) for i in range(1, args.runs + 1)]
            for run_id in ids:
                assert client.wait(run_id, 120).termination.reason == "success"
            took = time.perf_counter() - started
            after = _acl_calls(admin)
            made = {name: after[name] - before[name] for name in ACL_COMMANDS}
            phases = 3 * args.runs
            per_phase = sum(v for k, v in made.items() if k != "acl|users") / phases
            print(
                f"{args.runs} three-phase runs on 2 worker hosts in {took:.1f} s ({phases} phases): "
                + ", ".join(f"{name} {n}" for name, n in made.items())
                + f"; {per_phase:.2f} ACL writes or AUTHs per phase (ACL USERS is Mother's check "
                "of the enrolled users every few ticks, not per phase)"
            )
        finally:
            stack.stop()


def _three(i: int) -> dict[str, Any]:
    return {
        "run_id": f"acl-{i}",
        "user_id": f"bench-{i % 5}",
        "task": "t",
        "pipeline": [
            {"name": n, "role": r, "model": "scripted"}
            for n, r in (("plan", "planner"), ("execute", "coder"), ("review", "critic"))
        ],
        "scripts": {
            "planner": [{"text": "p"}],
            "coder": [{"text": "c"}],
            "critic": [{"text": "ok"}],
        },
    }


if __name__ == "__main__":
    main()
