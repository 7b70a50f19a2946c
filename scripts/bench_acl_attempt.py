"""Benchmark: what a per-attempt ACL user would cost (issue 53's design for worker capabilities).

    .venv/bin/python scripts/bench_acl_attempt.py [--attempts 2000] [--live 0,1000]

One embedded server. Per attempt, Mother would make an ACL user scoped to that run's keys
(``ACL SETUSER``: about a dozen key patterns and the commands a phase needs), the horse would connect
and authenticate as it, and Mother would remove it when the attempt ends (``ACL DELUSER``, which also
closes the user's connections). Measured, with ``--live`` other such users standing (the users of the
attempts in flight elsewhere): the SETUSER + DELUSER pair, the horse's new connection + AUTH, and the
Redis CPU (``INFO cpu``) per attempt, against a bare round trip (``PING``) in the same run.
"""

from __future__ import annotations

import argparse
import secrets
import statistics
import sys
import tempfile
import time
from pathlib import Path

import redis

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from mother import keys
from mother.server import EmbeddedRedis
from scripts.bench import redis_cpu


def rules(run_id: str, password: str) -> list[str]:
    """The rules a phase attempt's user would get: its run's own keys, the commands a phase uses."""
    return [
        "on",
        f">{password}",
        "resetkeys",
        "resetchannels",
        f"~{keys.run_key(run_id)}",
        f"~{keys.run_budget_key(run_id)}",
        f"~{keys.run_limits_key(run_id)}",
        f"~{keys.run_activity_key(run_id)}",
        f"~{keys.context_key(run_id, 0)}",
        f"~{keys.ledger_key(run_id)}",
        f"~artifact:{run_id}:*",
        f"~artifact_meta:{run_id}:*",
        f"~heartbeat:{run_id}:*",
        f"~events:{run_id}:*",
        "-@all",
        "+json.get",
        "+json.set",
        "+json.mget",
        "+fcall",
        "+xadd",
        "+set",
        "+get",
        "+ping",
    ]


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--attempts", type=int, default=2000)
    parser.add_argument("--live", default="0,1000", help="other attempt users standing, per round")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        server = EmbeddedRedis(dir=Path(tmp) / "r", appendfsync="no").start()
        try:
            admin = redis.Redis.from_url(server.url, decode_responses=True)
            host, port = admin.connection_pool.connection_kwargs["host"], server.port
            print(f"{args.attempts} attempts per round; ms per attempt (p50 / p99)")
            print(
                f"  {'live users':>10} {'PING':>14} {'SETUSER+DELUSER':>18} {'connect+AUTH':>16} {'Redis CPU':>11}"
            )
            for live in (int(x) for x in args.live.split(",")):
                for i in range(live):
                    admin.execute_command(
                        "ACL", "SETUSER", f"standing-{i}", *rules(f"run-s{i}", "x" * 32)
                    )
                pings, pairs, auths = [], [], []
                cpu0 = redis_cpu(admin)
                for i in range(args.attempts):
                    t = time.perf_counter()
                    admin.ping()
                    pings.append((time.perf_counter() - t) * 1000)
                    run_id, password = f"run-{i}", secrets.token_hex(16)
                    name = f"attempt-{run_id}-0-1"
                    t = time.perf_counter()
                    admin.execute_command("ACL", "SETUSER", name, *rules(run_id, password))
                    made = time.perf_counter()
                    horse = redis.Redis(host=host, port=port, username=name, password=password)
                    horse.ping()
                    authed = time.perf_counter()
                    horse.close()
                    t2 = time.perf_counter()
                    admin.execute_command("ACL", "DELUSER", name)
                    done = time.perf_counter()
                    pairs.append(((made - t) + (done - t2)) * 1000)
                    auths.append((authed - made) * 1000)
                cpu = (redis_cpu(admin) - cpu0) * 1000 / args.attempts
                print(
                    f"  {live:>10} {statistics.median(pings):>6.3f} / {pct(pings, 0.99):<5.3f}"
                    f" {statistics.median(pairs):>8.3f} / {pct(pairs, 0.99):<7.3f}"
                    f" {statistics.median(auths):>7.3f} / {pct(auths, 0.99):<6.3f} {cpu:>9.3f}"
                )
                for i in range(live):
                    admin.execute_command("ACL", "DELUSER", f"standing-{i}")
            print(
                "Redis CPU per attempt includes the PING, the connection and its AUTH (server side)"
            )
        finally:
            server.stop()


if __name__ == "__main__":
    main()
