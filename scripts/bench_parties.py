"""Benchmark: identities after a Redis event, and a party's flood.

    .venv/bin/python scripts/bench_parties.py [--principals 20] [--junk 10000] [--quiet 200]

1. **After a restart and a failover**: ``--principals`` principals made while the system runs (Mother
   and one worker host). The server is then restarted without saved ACLs (same port and data), or, in a
   Sentinel cell (a primary, a replica, three sentinels), the primary is killed with -9. Baseline: the
   server back (the restart's first PING; the replica's promotion). Measured: each principal's first
   accepted submission (it retries every 50 ms while its user is missing; Mother makes it again from its
   record), p50 and max, and the last of their runs made (its record in Redis), all from the event.
2. **Mother's CPU per entry** of a principal's stream: ``--junk`` valid submissions (the baseline; one
   user each, no host, so they are taken in and wait) against as many junk entries (the same bad spec),
   Mother's process and the server's CPU divided by the entries; and what the junk left (records kept).
3. **A quiet principal's intake latency** (its run's ``created_ms`` minus its entry's id, both the
   server's clock): ``--quiet`` submissions 10 ms apart, alone (the baseline) and while another principal
   floods its stream non-stop; p50 and p99.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import redis

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mother import keys
from mother.client import MotherClient
from mother.config import load_settings
from mother.connection import connect
from mother.identities import party_url, principals
from mother.identities.enroll import replicated
from mother.server import EmbeddedRedis
from mother.stack import LocalStack
from scripts.bench import UNLIMITED, pct, proc_cpu, redis_cpu
from tests.conftest import FAST_ENV, first_accepted, quick_spec
from tests.test_failover import sentinel_cell
from tests.test_pipeline import wait_until

NOW = "2026-12-06T00:00:00.000Z"
JUNK = {"spec": "{not json"}


def _principals(admin: Any, base_url: str, count: int, grants: list[str]) -> dict[str, str]:
    """``count`` new principals acting for every user: name -> URL."""
    made = {}
    for i in range(count):
        name = f"p{i:03d}-svc"
        _p, password = principals.add(admin, name, grants, ["*"], NOW)
        made[name] = party_url(base_url, name, password)
    return made


def _returns(urls: dict[str, str], admin: Any, since: float) -> dict[str, float]:
    """Each principal submits until it is let in, all at once: the seconds from ``since`` to its first
    accepted submission, and (``made``) to the last of their runs made."""
    accepted: dict[str, float] = {}
    runs: list[str] = []

    def one(name: str, url: str) -> None:
        _client, run_id, _took = first_accepted(url, quick_spec(name.removesuffix("-svc")), 120)
        accepted[name] = time.monotonic() - since
        runs.append(run_id)

    threads = [threading.Thread(target=one, args=item) for item in urls.items()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wait_until(lambda: all(admin.exists(keys.run_key(r)) for r in runs), timeout=120, step=0.01)
    return {**accepted, "made": time.monotonic() - since}


def _said(event: str, back: float, returns: dict[str, float]) -> None:
    firsts = [v for k, v in returns.items() if k != "made"]
    print(
        f"{event:<10} server back {back:6.2f} s   first accepted p50 {pct(firsts, 0.5):5.2f} s  "
        f"max {max(firsts):5.2f} s   runs made, max {returns['made']:5.2f} s"
    )


def restart(tmp: Path, count: int) -> None:
    server = EmbeddedRedis(dir=tmp / "restart", appendfsync="everysec").start()
    stack = LocalStack(
        server.url, workers=1, log_dir=tmp / "logs-restart", env=FAST_ENV, wait_hosts=True
    ).start()
    try:
        urls = _principals(server.client(), server.url, count, ["submit"])
        port, folder = server.port, server.dir
        server.stop()
        stopped = time.monotonic()
        server = EmbeddedRedis(port=port, dir=folder, appendfsync="everysec").start()
        back = time.monotonic() - stopped
        _said("restart", back, _returns(urls, server.client(), stopped))
    finally:
        stack.stop()
        server.stop()


def failover(tmp: Path, count: int) -> None:
    with sentinel_cell(tmp) as (primary, replica, sentinels):
        url = sentinels.url()
        stack = LocalStack(url, workers=1, log_dir=tmp / "logs-failover", env=FAST_ENV).start()
        try:
            admin = connect(url)
            urls = _principals(admin, url, count, ["submit"])
            assert replicated(admin) is None
            killed = time.monotonic()
            os.kill(int(primary.pid or 0), signal.SIGKILL)
            wait_until(lambda: sentinels.master_port() == replica.port, timeout=30, step=0.05)
            promoted = time.monotonic() - killed
            _said("failover", promoted, _returns(urls, admin, killed))
        finally:
            stack.stop()


@contextlib.contextmanager
def _quiet_stack(tmp: Path, name: str) -> Iterator[tuple[Any, LocalStack, dict[str, str]]]:
    """A server and Mother (no worker host: runs are taken in and wait), with two principals acting for
    every user: (an administrator's client, the stack, name -> URL)."""
    server = EmbeddedRedis(dir=tmp / name, appendfsync="no").start()
    stack = LocalStack(
        server.url, workers=0, log_dir=tmp / f"logs-{name}", env={**FAST_ENV, **UNLIMITED}
    ).start()
    try:
        admin = connect(server.url)
        wait_until(lambda: admin.execute_command("FUNCTION", "LIST", "LIBRARYNAME", "mother"))
        yield admin, stack, _principals(admin, server.url, 2, ["submit"])
    finally:
        stack.stop()
        server.stop()


def _mother_pid(stack: LocalStack) -> int:
    return stack.procs["mother-0"].pid


def _handled(admin: Any, stream: str) -> bool:
    try:
        group = {g["name"]: g for g in admin.xinfo_groups(stream)}["mother"]
    except (redis.ResponseError, KeyError):
        return False
    return int(group["pending"]) == 0 and int(group.get("lag") or 0) == 0


def per_entry(tmp: Path, junk: int) -> None:
    with _quiet_stack(tmp, "cpu") as (admin, stack, urls):
        rows = []
        for (name, url), kind in zip(urls.items(), ("valid", "junk"), strict=True):
            party = connect(url)
            stream = keys.principal_submissions_key(name)
            entries = []
            for i in range(junk):
                if kind == "junk":
                    entries.append(JUNK)
                else:
                    spec = quick_spec(f"u{i}", run_id=f"cpu-{i:06d}")
                    entries.append({"spec": orjson.dumps(spec).decode()})
            mother0, redis0 = proc_cpu(_mother_pid(stack)), redis_cpu(admin)
            for start in range(0, junk, 500):
                pipe = party.pipeline(transaction=False)
                for fields in entries[start : start + 500]:
                    pipe.xadd(stream, fields)
                pipe.execute()
            wait_until(lambda s=stream: _handled(admin, s), timeout=1800, step=0.1)
            rows.append(
                (
                    kind,
                    (proc_cpu(_mother_pid(stack)) - mother0) / junk * 1000,
                    (redis_cpu(admin) - redis0) / junk * 1000,
                )
            )
        base = rows[0]
        for kind, mother_ms, redis_ms in rows:
            print(
                f"{kind:<6} Mother {mother_ms:7.3f} ms/entry ({mother_ms / base[1]:4.2f}x)   "
                f"Redis {redis_ms:7.3f} ms/entry ({redis_ms / base[2]:4.2f}x)"
            )
        junk_name = list(urls)[1]
        kept = admin.zcard(keys.party_rejections_key(junk_name))
        counted = sum(
            int(v)
            for k, v in admin.hgetall(keys.party_refusals_key(junk_name)).items()
            if not k.endswith("|said")
        )
        print(f"junk   {junk} entries left {kept} rejection record(s) and a count of {counted}")


def _latencies(admin: Any, client: MotherClient, count: int, name: str) -> list[float]:
    runs = []
    for i in range(count):
        runs.append(client.submit(quick_spec(name, run_id=f"{name}-{i:04d}-{time.time_ns()}")))
        time.sleep(0.01)
    wait_until(lambda: all(admin.exists(keys.run_key(r)) for r in runs), timeout=600, step=0.05)
    took = []
    for run_id in runs:
        record = orjson.loads(admin.execute_command("JSON.GET", keys.run_key(run_id)))
        entry_ms = int(record["entry_id"].rsplit(":", 1)[1].split("-")[0])
        took.append(record["created_ms"] - entry_ms)
    return took


def quiet_latency(tmp: Path, count: int) -> None:
    with _quiet_stack(tmp, "quiet") as (admin, _stack, urls):
        (_quiet, quiet_url), (flood_name, flood_url) = urls.items()
        quiet = MotherClient(settings=load_settings(redis_url=quiet_url))
        alone = _latencies(admin, quiet, count, "alone")
        stop = threading.Event()
        flooder = connect(flood_url)
        stream = keys.principal_submissions_key(flood_name)

        def flood() -> None:
            while not stop.is_set():
                pipe = flooder.pipeline(transaction=False)
                for _ in range(200):
                    pipe.xadd(stream, JUNK)
                pipe.execute()

        thread = threading.Thread(target=flood, daemon=True)
        thread.start()
        try:
            flooded = _latencies(admin, quiet, count, "flooded")
            still = not _handled(admin, stream)
        finally:
            stop.set()
            thread.join()
        for label, samples in (("alone", alone), ("flooded", flooded)):
            print(
                f"{label:<8} quiet intake p50 {pct(samples, 0.5):6.1f} ms   "
                f"p99 {pct(samples, 0.99):6.1f} ms"
            )
        print(f"the flood was still pending when the quiet party's last run was made: {still}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--principals", type=int, default=20)
    parser.add_argument("--junk", type=int, default=10_000)
    parser.add_argument("--quiet", type=int, default=200)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-parties-"))
    print(f"identities after a Redis event ({args.principals} principals)")
    restart(tmp, args.principals)
    failover(tmp, args.principals)
    print(f"\nMother's CPU per entry of a principal's stream ({args.junk} entries)")
    per_entry(tmp, args.junk)
    print(f"\na quiet principal's intake ({args.quiet} submissions, 10 ms apart)")
    quiet_latency(tmp, args.quiet)


if __name__ == "__main__":
    main()
