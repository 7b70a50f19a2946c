"""Simulation: a deployment grown past one Redis as independent cells (issue 54, docs/scaling.md).

    .venv/bin/python scripts/simulate_cells.py [--cells 1,4,16] [--redis-ms 3.23] [--mother-ms 2.10]
        [--seconds 60] [--users 5000] [--zipf 1.1] [--seed 1]

A cell is one Redis, its Mothers (one leader does a run's work) and its workers; users are pinned to a
cell by a hash of their id. Each phase costs the cell's Redis ``--redis-ms`` and its Mother
``--mother-ms`` of CPU (measured: ``scripts/bench_pipeline.py``, docs/benchmarks.md), each a single
busy server, in that order; service times vary (gamma, coefficient of variation ``--cv``). Workers
and the model are not the bottleneck here (they scale by adding hosts), so what is reported is what
the orchestration adds to a phase: its waiting and service at Redis and Mother.

Users' activity is skewed (a Zipf law over ``--users`` users, exponent ``--zipf``): a cell holding a
heavy user is loaded more than the average, which is what pinning costs. For each cell count and each
offered load (a fraction of the deployment's capacity, ``cells / redis-ms``), printed: phases/s
offered and done, p50 / p99 / p99.9 ms added per phase, the busiest cell's Redis demand (its work
over the simulated time: past 100% its queue only grows); then
what losing one cell costs (its users' phases stop until it is back: the share of all phases that
stop, for the same skew).
"""

from __future__ import annotations

import argparse
import bisect
import hashlib
import heapq
import random
import statistics
from dataclasses import dataclass


@dataclass
class Row:
    cells: int
    load: float
    offered: float
    done: float
    p50: float
    p99: float
    p999: float
    hottest: float


def zipf_weights(users: int, exponent: float) -> list[float]:
    weights = [1.0 / (rank**exponent) for rank in range(1, users + 1)]
    total = sum(weights)
    return [w / total for w in weights]


def cell_of(user: int, cells: int) -> int:
    """A user's cell: a stable hash of its id (what a router or the client library would compute)."""
    digest = hashlib.sha256(f"user-{user}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % cells


def gamma(rng: random.Random, mean: float, cv: float) -> float:
    shape = 1.0 / (cv * cv)
    return rng.gammavariate(shape, mean / shape)


def simulate(cells: int, load: float, args: argparse.Namespace, weights: list[float]) -> Row:
    rng = random.Random(args.seed * 1000 + cells * 10 + int(load * 100))
    capacity = cells * 1000.0 / args.redis_ms  # phases/s the deployment's Redises can do
    rate = load * capacity
    # each user's share of the arrivals, and its cell
    cumulative, acc = [], 0.0
    for w in weights:
        acc += w
        cumulative.append(acc)
    cell_share = [0.0] * cells
    for user, w in enumerate(weights):
        cell_share[cell_of(user, cells)] += w
    # per cell: when its Redis and its Mother are next free (ms)
    redis_free = [0.0] * cells
    mother_free = [0.0] * cells
    redis_busy = [0.0] * cells
    added: list[float] = []
    end_ms = args.seconds * 1000.0
    t = 0.0
    arrivals: list[tuple[float, int]] = []
    while True:
        t += rng.expovariate(rate) * 1000.0
        if t > end_ms:
            break
        user = min(bisect.bisect_left(cumulative, rng.random()), len(weights) - 1)
        heapq.heappush(arrivals, (t, cell_of(user, cells)))
    done = 0
    while arrivals:
        at, cell = heapq.heappop(arrivals)
        service_redis = gamma(rng, args.redis_ms, args.cv)
        start = max(at, redis_free[cell])
        redis_free[cell] = start + service_redis
        redis_busy[cell] += service_redis
        service_mother = gamma(rng, args.mother_ms, args.cv)
        start_m = max(redis_free[cell], mother_free[cell])
        mother_free[cell] = start_m + service_mother
        finished = mother_free[cell]
        if finished <= end_ms:
            done += 1
        added.append(finished - at)
    added.sort()

    def q(p: float) -> float:
        return added[min(len(added) - 1, int(len(added) * p))] if added else 0.0

    return Row(
        cells=cells,
        load=load,
        offered=rate,
        done=done / args.seconds,
        p50=q(0.5),
        p99=q(0.99),
        p999=q(0.999),
        hottest=max(redis_busy) / end_ms,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cells", default="1,4,16")
    parser.add_argument("--loads", default="0.5,0.8,0.95", help="offered load, share of capacity")
    parser.add_argument("--redis-ms", type=float, default=3.23, help="Redis CPU per phase (ms)")
    parser.add_argument("--mother-ms", type=float, default=2.10, help="Mother CPU per phase (ms)")
    parser.add_argument("--cv", type=float, default=0.5, help="service time variation")
    parser.add_argument("--seconds", type=float, default=60.0, help="simulated time per point")
    parser.add_argument("--users", type=int, default=5000)
    parser.add_argument(
        "--zipf", default="0,0.8,1.1", help="user activity skews to simulate (0: every user alike)"
    )
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    for skew in (float(z) for z in args.zipf.split(",")):
        weights = zipf_weights(args.users, skew)
        print(
            f"\nRedis {args.redis_ms} ms and Mother {args.mother_ms} ms of CPU per phase; {args.users} "
            f"users, Zipf {skew:g} (the busiest user {max(weights):.1%} of all phases); "
            f"{args.seconds:g} s simulated per point"
        )
        print(
            f"{'cells':>5} {'load':>5} {'offered/s':>10} {'done/s':>9} {'p50 ms':>8} {'p99 ms':>8}"
            f" {'p99.9 ms':>9} {'busiest cell':>13}"
        )
        for cells in (int(c) for c in args.cells.split(",")):
            for load in (float(x) for x in args.loads.split(",")):
                row = simulate(cells, load, args, weights)
                print(
                    f"{row.cells:>5} {row.load:>5.2f} {row.offered:>10.0f} {row.done:>9.0f}"
                    f" {row.p50:>8.1f} {row.p99:>8.1f} {row.p999:>9.1f} {row.hottest:>12.0%}"
                )
        print("losing one cell (its users' phases stop until it is back): share of all phases")
        for cells in (int(c) for c in args.cells.split(",")):
            shares = [0.0] * cells
            for user, w in enumerate(weights):
                shares[cell_of(user, cells)] += w
            print(
                f"  {cells:>2} cells: the worst cell {max(shares):.1%}, the median cell "
                f"{statistics.median(shares):.1%}"
            )


if __name__ == "__main__":
    main()
