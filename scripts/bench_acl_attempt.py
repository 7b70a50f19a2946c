"""Benchmark: what a per-attempt ACL user costs (issue 53: worker capabilities).

    .venv/bin/python scripts/bench_acl_attempt.py [--attempts 2000] [--live 0,1000]

One embedded server. Per attempt, Mother makes an ACL user scoped to that run's keys
(``ACL SETUSER`` with the rules of :func:`mother.attempt_users.rules`, the shipped ones), the horse
re-authenticates the connection it already has as it (``AUTH``), and Mother removes it when the attempt
is over (``ACL DELUSER``, which also closes the user's connections). Measured, with ``--live`` other such
users standing (the users of the attempts in flight elsewhere): the SETUSER + DELUSER pair, the horse's
AUTH, and the Redis CPU (``INFO cpu``) per attempt, against a bare round trip (``PING``) in the same run.
"""

from __future__ import annotations

import argparse
import hashlib
import secrets
import statistics
import sys
import tempfile
import time
from pathlib import Path

import redis

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from mother import keys
from mother.attempt_users import rules
from mother.server import EmbeddedRedis
from scripts.bench import pct, redis_cpu

# the day the attempts' users charge (any day: the rules name it)
DAY = "2026-11-27"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--attempts", type=int, default=2000)
    parser.add_argument("--live", default="0,1000", help="other attempt users standing, per round")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        server = EmbeddedRedis(dir=Path(tmp) / "r", appendfsync="no").start()
        try:
            admin = redis.Redis.from_url(server.url, decode_responses=True)
            # the horse's connection, open already (a worker hands it over at the fork)
            horse = redis.Redis.from_url(server.url, single_connection_client=True)
            horse.ping()
            print(f"{args.attempts} attempts per round; ms per attempt (p50 / p99)")
            print(
                f"  {'live users':>10} {'PING':>14} {'SETUSER+DELUSER':>18} {'AUTH':>16} {'Redis CPU':>11}"
            )
            for live in (int(x) for x in args.live.split(",")):
                for i in range(live):
                    admin.execute_command(
                        "ACL",
                        "SETUSER",
                        f"standing-{i}",
                        *rules(f"run-s{i}", 0, 1, "a" * 64, "u", DAY),
                    )
                pings, pairs, auths = [], [], []
                cpu0 = redis_cpu(admin)
                for i in range(args.attempts):
                    t = time.perf_counter()
                    admin.ping()
                    pings.append((time.perf_counter() - t) * 1000)
                    run_id, password = f"run-{i}", secrets.token_hex(16)
                    name = keys.attempt_user(run_id, 0, 1)
                    digest = hashlib.sha256(password.encode()).hexdigest()
                    t = time.perf_counter()
                    admin.execute_command(
                        "ACL", "SETUSER", name, *rules(run_id, 0, 1, digest, f"user-{i % 50}", DAY)
                    )
                    made = time.perf_counter()
                    horse.execute_command("AUTH", name, password)
                    authed = time.perf_counter()
                    horse.execute_command("AUTH", "default", "")
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
                "Redis CPU per attempt includes the PING, the AUTH and a second AUTH back (server side)"
            )
        finally:
            server.stop()


if __name__ == "__main__":
    main()
