"""Benchmark: what waiting for a replica costs an acknowledgement (issue 54, ``service.wait_replicas``).

    .venv/bin/python scripts/bench_durability.py [--count 2000] [--appendfsync everysec|always]

Two embedded servers on this host, a primary and its replica (appendonly, ``--appendfsync``).
Measured per acknowledged write (an XADD of a 1 KB spec, what a submission is), p50 / p99 ms: the write
alone (what ``wait_replicas: 0`` acknowledges: a failover may lose it), the write and ``WAIT 1``
(``wait_replicas: 1``: the replica has it in memory) and the write and ``WAITAOF 1 1``
(``wait_fsync: true``: the primary and the replica have it on disk), one pipeline each.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from mother.server import EmbeddedRedis
from scripts.bench import pct
from tests.test_pipeline import wait_until


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=2000)
    parser.add_argument("--appendfsync", default="everysec", choices=["everysec", "always"])
    args = parser.parse_args()
    payload = b"x" * 1024
    with tempfile.TemporaryDirectory(dir=Path.cwd()) as tmp:
        primary = EmbeddedRedis(dir=Path(tmp) / "p", appendfsync=args.appendfsync).start()
        replica = EmbeddedRedis(
            dir=Path(tmp) / "r",
            appendfsync=args.appendfsync,
            extra_args=["--replicaof", "127.0.0.1", str(primary.port)],
        ).start()
        try:
            client = primary.client()
            wait_until(
                lambda: replica.client().info("replication").get("master_link_status") == "up",
                timeout=20,
            )
            ways = {
                "write alone": (),
                "write + WAIT 1": ("WAIT", 1, 1000),
                "write + WAITAOF 1 1": ("WAITAOF", 1, 1, 1000),
            }
            print(
                f"{args.count} acknowledged writes each, appendfsync {args.appendfsync}; ms p50 / p99;"
                " replicas that had it"
            )
            for name, wait in ways.items():
                samples, acked = [], []
                for _ in range(args.count):
                    t = time.perf_counter()
                    pipe = client.pipeline(transaction=False)
                    pipe.xadd("bench:submissions", {"spec": payload})
                    if wait:
                        pipe.execute_command(*wait)
                    replies = pipe.execute()
                    samples.append((time.perf_counter() - t) * 1000)
                    if wait:
                        got = replies[1]
                        acked.append(int(got[1] if isinstance(got, list) else got))
                print(
                    f"  {name:<22} {statistics.median(samples):7.3f} / {pct(samples, 0.99):7.3f}"
                    + (f"   {min(acked)}-{max(acked)}" if acked else "")
                )
        finally:
            replica.stop()
            primary.stop()


if __name__ == "__main__":
    main()
