"""Benchmark: the budget guard's check-and-charge against a bare round trip and two other ways.

    .venv/bin/python scripts/bench_guard.py [--seconds S] [--rounds R] [--procs 1,8]

All on one embedded server in one run, with 1 and 8 client processes. The methods take turns
(R rounds of S/R seconds each, switching at the same instants in every process), so a noisy
machine slows them alike and the ratios compare like with like:

  (a) PING                 a bare round trip on the same connection (the physical limit)
  (b) guard                Guard.charge_tool: one FCALL that checks and charges run counters
  (c) naive WATCH/MULTI    read the budget doc, check in Python, write back in MULTI (retry on conflict)
  (d) limits library       moving-window hit (a peer rate limiter over Redis)

With one client, PING and the guard are also measured alternating call by call (each guard call
paired with a round trip made just before it), which cancels drift at the finest grain.

Also prints the server's own time per PING and per guard call (INFO commandstats), which the
network and the VM's scheduling do not blur. Prints ops/s, p50/p99 latency (µs) and ratios: guard vs
PING with 1 client (pooled over all turns; round by round, each round's two p50s taken a quarter round
apart, whose median a drifting machine does not sway; and alternating call by call) and guard vs naive.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import orjson
import redis

from mother import keys
from mother.budget import Guard, open_run_budget
from mother.clock import ServerClock
from mother.config import load_settings
from mother.errors import BudgetExhausted
from mother.functions import load_functions
from mother.server import EmbeddedRedis
from schemas import RunSpec

BIG = 10**11


def _setup(url: str, run_id: str) -> None:
    client = redis.Redis.from_url(url, decode_responses=True)
    load_functions(client)
    settings = load_settings()
    settings.budget.profiles["balanced"].tool_calls = BIG
    spec = RunSpec(
        run_id=run_id,
        user_id="bench",
        task="t",
        pipeline=[{"name": "a", "role": "r", "model": "scripted"}],
    )
    open_run_budget(client, settings, spec, ServerClock(client).now_ms())


def _worker(url: str, run_id: str, peers: list[str]) -> dict[str, Any]:
    """The four methods as callables on one connection of this process."""
    client = redis.Redis.from_url(url, decode_responses=True)
    settings = load_settings()
    settings.budget.profiles["balanced"].tool_calls = BIG
    clock = ServerClock(client)
    guard = Guard(client, settings, run_id, "bench", clock.today)
    key, limits_key = keys.run_budget_key(run_id), keys.run_limits_key(run_id)
    if peers:
        from limits import parse
        from limits.storage import RedisStorage
        from limits.strategies import MovingWindowRateLimiter

        limiter = MovingWindowRateLimiter(RedisStorage(url))
        item = parse(f"{BIG}/hour")
    else:
        limiter = item = None

    def naive() -> None:
        with client.pipeline(transaction=True) as pipe:
            while True:
                try:
                    pipe.watch(key, limits_key)
                    used = orjson.loads(pipe.execute_command("JSON.GET", key, "$.tool_calls"))[0]
                    if (
                        used
                        >= orjson.loads(
                            pipe.execute_command("JSON.GET", limits_key, "$.limits.tool_calls")
                        )[0]
                    ):
                        raise BudgetExhausted("limit")
                    pipe.multi()
                    pipe.execute_command("JSON.NUMINCRBY", key, "$.tool_calls", 1)
                    pipe.execute()
                    return
                except redis.WatchError:
                    continue

    ops = {
        "ping": client.ping,
        "guard": lambda: guard.charge_tool(read_only=False),
        "naive": naive,
        "limits": lambda: limiter.hit(item, "bench"),
    }
    return ops


def _interleaved(
    url: str, kinds: list[str], start: float, block: float, rounds: int, run_id: str
) -> dict[str, list[list[float]]]:
    """Run the methods in turns of ``block`` seconds, ``rounds`` times each, switching at the same
    wall-clock instants in every process: all methods see the same machine noise, and under
    contention all processes run the same method at once. Latencies per method, per round."""
    ops = _worker(url, run_id, [k for k in kinds if k == "limits"])
    latencies: dict[str, list[list[float]]] = {k: [] for k in kinds}
    while time.time() < start:
        time.sleep(0.001)
    for turn in range(rounds * len(kinds)):
        kind = kinds[turn % len(kinds)]
        op, out = ops[kind], []
        latencies[kind].append(out)
        end = start + (turn + 1) * block
        while time.time() < end:
            _timed(op, out)
    return latencies


def _timed(op: Any, out: list[float]) -> None:
    """Call ``op`` once and append how long it took."""
    t0 = time.perf_counter()
    op()
    out.append(time.perf_counter() - t0)


def _alternating(url: str, seconds: float, run_id: str) -> dict[str, list[float]]:
    """PING and the guard alternated call by call on one connection for ``seconds``: every guard
    call is paired with a round trip made a moment before it, under the same machine state."""
    ops = _worker(url, run_id, [])
    pairs = [("ping", ops["ping"]), ("guard", ops["guard"])]
    latencies: dict[str, list[float]] = {"ping": [], "guard": []}
    end = time.time() + seconds
    while time.time() < end:
        for kind, op in pairs:
            _timed(op, latencies[kind])
    return latencies


def measure(
    url: str, kinds: list[str], procs: int, seconds: float, rounds: int
) -> tuple[dict[str, tuple[float, float, float]], dict[str, list[float]]]:
    """ops/s, p50 µs, p99 µs per method, each method given ``seconds`` in ``rounds`` turns; and each
    method's p50 per round (all processes pooled), to compare methods round by round."""
    block = seconds / rounds
    # time for the processes to start and connect
    start = time.time() + 1.5
    with ProcessPoolExecutor(procs) as pool:
        results = list(
            pool.map(
                _interleaved,
                [url] * procs,
                [kinds] * procs,
                [start] * procs,
                [block] * procs,
                [rounds] * procs,
                ["bench-run"] * procs,
            )
        )
    table, per_round = {}, {}
    for kind in kinds:
        lat = sorted(x for r in results for turn in r[kind] for x in turn)
        table[kind] = (
            len(lat) / seconds,
            statistics.median(lat) * 1e6,
            lat[int(0.99 * (len(lat) - 1))] * 1e6,
        )
        per_round[kind] = [
            statistics.median([x for r in results for x in r[kind][i]] or [math.nan])
            for i in range(rounds)
        ]
    return table, per_round


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--seconds", type=float, default=3.0, help="time per method and process count"
    )
    parser.add_argument(
        "--rounds", type=int, default=12, help="turns each method's time is split into"
    )
    parser.add_argument("--procs", default="1,8")
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory(prefix="mother-bench-") as tmp,
        EmbeddedRedis(dir=Path(tmp), appendfsync="no") as server,
    ):
        _setup(server.url, "bench-run")
        table: dict[tuple[str, int], tuple[float, float, float]] = {}
        stats = redis.Redis.from_url(server.url)
        for procs in (int(p) for p in args.procs.split(",")):
            kinds = ["ping", "guard", "naive", "limits"]
            stats.config_resetstat()
            measured, per_round = measure(server.url, kinds, procs, args.seconds, args.rounds)
            # the guard's p50 over PING's in each round: the two turns are 1/4 round apart
            if procs == 1:
                round_ratios = [
                    g / p
                    for g, p in zip(per_round["guard"], per_round["ping"], strict=False)
                    if not (math.isnan(g) or math.isnan(p))
                ]
            for kind, (ops, p50, p99) in measured.items():
                table[(kind, procs)] = (ops, p50, p99)
                print(
                    f"{kind:<7} procs={procs:<2} {ops:>10.0f} ops/s   p50 {p50:>8.1f} µs   p99 {p99:>8.1f} µs",
                    flush=True,
                )
            # the server's own time per call (INFO commandstats; the guard is the only FCALL here), free
            # of the network and the VM's scheduling noise that the client-side figures carry
            used = stats.info("commandstats")
            print(
                f"server time per call (procs={procs}): PING {used['cmdstat_ping']['usec_per_call']:.1f} µs, "
                f"guard (FCALL) {used['cmdstat_fcall']['usec_per_call']:.1f} µs",
                flush=True,
            )
        if 1 in {int(p) for p in args.procs.split(",")}:
            with ProcessPoolExecutor(1) as pool:
                alt = pool.submit(_alternating, server.url, args.seconds, "bench-run").result()
            for kind, lat in alt.items():
                lat.sort()
                print(
                    f"{kind:<7} procs=1  alternating call by call: p50 {statistics.median(lat) * 1e6:>8.1f} µs"
                    f"   p99 {lat[int(0.99 * (len(lat) - 1))] * 1e6:>8.1f} µs",
                    flush=True,
                )
            alt_ratio = statistics.median(alt["guard"]) / statistics.median(alt["ping"])
    if ("guard", 1) in table:
        print(
            f"guard p50 / PING p50 (1 client): {table[('guard', 1)][1] / table[('ping', 1)][1]:.2f}x in "
            f"{args.seconds / args.rounds:.2f} s turns (median of the {len(round_ratios)} rounds' ratios "
            f"{statistics.median(round_ratios):.2f}x), {alt_ratio:.2f}x alternating call by call  (target ≤ 1.5x)"
        )
    for procs in sorted({p for _, p in table}):
        print(
            f"guard / naive throughput ({procs} clients): {table[('guard', procs)][0] / table[('naive', procs)][0]:.2f}x"
            f"   guard / limits: {table[('guard', procs)][0] / table[('limits', procs)][0]:.2f}x"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
