"""Benchmark: runs through Mother + K workers vs plain RQ running the same jobs on the same workers.

    .venv/bin/python scripts/bench_pipeline.py [--runs N] [--rounds R] [--workers K] [--serial M]

One process starts an embedded Redis and K forking RQ workers, then measures, in
one run on the same workers:

  baseline  plain RQ: N chains of 3 no-op jobs (each job enqueues the next)
  mother    N runs of a three-phase no-op scripted pipeline through Mother

in R alternating rounds of N/R each (baseline first in even rounds, Mother first in
odd ones; Mother is paused with SIGSTOP while the baseline runs), so both see the
same machine: on a small shared VM the speed drifts by more than the difference
being measured. Both are watched the same cheap way (one small read per unfinished
run or chain every 50 ms). Prints runs/s, phase latency p50/p99 (enqueue → end for RQ;
dispatch → accepted result for Mother), the CPU time per phase of every process
taking part (Redis, Mother, the workers, their work-horses, this script), and the
wall time Mother adds per phase over plain RQ, in all and per round.

Then (--serial M, default 30) M runs one at a time, each after a single plain-RQ chain,
both watched every 2 ms: the latency Mother adds to a run that waits behind no other,
per phase (a busy machine's figure above is throughput: CPU cost per phase).
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

import orjson
from rq import Queue
from rq.job import Job, JobStatus
from rq.serializers import JSONSerializer

from mother import keys
from mother.client import MotherClient
from mother.config import load_settings
from mother.server import EmbeddedRedis
from mother.stack import LocalStack
from workers.noop import chain_job_id


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def cpu_seconds(pid: int, children: bool = False) -> float:
    """CPU time (user + system) of a process, or of its reaped children (a worker's work-horses)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    first = 13 if children else 11
    return (int(fields[first]) + int(fields[first + 1])) / os.sysconf("SC_CLK_TCK")


def cpu_snapshot(server: EmbeddedRedis, stack: LocalStack, mother_pid: int) -> dict[str, float]:
    """CPU seconds so far of every process taking part, by role."""
    workers = [p.pid for n, p in stack.procs.items() if n.startswith("worker-")]
    return {"Redis server": cpu_seconds(server.pid), "Mother": cpu_seconds(mother_pid),
            "workers (own)": sum(cpu_seconds(pid) for pid in workers),
            "work-horses": sum(cpu_seconds(pid, children=True) for pid in workers),
            "this script (watching)": cpu_seconds(os.getpid())}


def _wait(what: str, deadline: float) -> None:
    if time.monotonic() > deadline:
        raise SystemExit(f"benchmark gave up: {what} did not finish in time (see the logs printed above)")


def baseline(url: str, runs: int, first: int = 0, poll: float = 0.05,
             with_latencies: bool = True) -> tuple[float, list[float]]:
    import redis

    conn = redis.Redis.from_url(url)
    queue = Queue("agents", connection=conn, serializer=JSONSerializer)
    chains = range(first, first + runs)
    started = time.perf_counter()
    for i in chains:
        queue.enqueue_call("workers.noop.chain", args=(i, 0, 3), job_id=chain_job_id(i, 0), result_ttl=600)
    ids = [chain_job_id(i, step) for i in chains for step in range(3)]
    # watched as cheaply as Mother's runs are (one small read per unfinished chain every ``poll`` s): a
    # costlier watch would slow the baseline on this shared machine and flatter Mother
    pending = {Job.key_for(chain_job_id(i, 2)) for i in chains}
    deadline = time.monotonic() + 300
    while pending:
        _wait(f"plain RQ ({len(pending)} chains left)", deadline)
        pipe = conn.pipeline(transaction=False)
        for key in pending:
            pipe.hget(key, "status")
        pending -= {key for key, status in zip(list(pending), pipe.execute()) if status == JobStatus.FINISHED.value.encode()}
        if pending:
            time.sleep(poll)
    elapsed = time.perf_counter() - started
    if not with_latencies:
        return elapsed, []
    time.sleep(0.5)  # RQ may mark a job finished a moment before it stores ended_at
    jobs = Job.fetch_many(ids, connection=conn, serializer=JSONSerializer)
    latencies = [(j.ended_at - j.enqueued_at).total_seconds() * 1000 for j in jobs if j.ended_at and j.enqueued_at]
    return elapsed, latencies


def through_mother(client: MotherClient, runs: int, poll: float = 0.05) -> tuple[float, list[float], list[str]]:
    spec = {"user_id": "bench", "task": "no-op", "pipeline": [
        {"name": n, "role": "noop", "model": "scripted"} for n in ("plan", "execute", "review")],
        "scripts": {"noop": [{"text": "ok"}]}}
    started = time.perf_counter()
    ids = [client.submit(spec) for _ in range(runs)]
    pending = set(ids)
    deadline = time.monotonic() + 300
    while pending:
        _wait(f"Mother ({len(pending)} runs left)", deadline)
        pipe = client.redis.pipeline(transaction=False)
        for run_id in pending:
            pipe.exists(keys.termination_key(run_id))
        done = {run_id for run_id, ok in zip(list(pending), pipe.execute()) if ok}
        pending -= done
        if pending:
            time.sleep(poll)
    elapsed = time.perf_counter() - started
    latencies = []
    for run_id in ids:
        history = orjson.loads(client.redis.execute_command("JSON.GET", keys.run_key(run_id), "$.history"))[0]
        marks = [h for h in history if h["event"] in ("phase_started", "phase_completed")]
        stamps = [_ms(h["at"]) for h in marks]
        latencies += [b - a for a, b in zip(stamps, stamps[1:])]
    return elapsed, latencies, ids


def mother_steps(client: MotherClient, run_id: str) -> tuple[float, list[float], float]:
    """A finished run's time line in ms, from its own records (server time): intake (submission entry →
    first phase dispatched), each phase (dispatched → its result accepted and the next one dispatched)
    and the close (last result accepted → termination record)."""
    run = orjson.loads(client.redis.execute_command("JSON.GET", keys.run_key(run_id)))
    marks = [_ms(h["at"]) for h in run["history"] if h["event"] in ("phase_started", "phase_completed")]
    submitted = int(run["entry_id"].split("-")[0])
    return marks[0] - submitted, [b - a for a, b in zip(marks, marks[1:])], _ms(run["terminated_at"]) - marks[-1]


def chain_steps(url: str, chain: int) -> list[float]:
    """A plain-RQ chain's steps in ms: the first job's enqueue → its end, then each end → the next end
    (each job enqueues the next before it ends)."""
    import redis

    jobs = Job.fetch_many([chain_job_id(chain, step) for step in range(3)], connection=redis.Redis.from_url(url),
                          serializer=JSONSerializer)
    ends = [jobs[0].enqueued_at] + [j.ended_at for j in jobs]
    return [(b - a).total_seconds() * 1000 for a, b in zip(ends, ends[1:])]


def _ms(iso: str) -> float:
    from datetime import datetime

    return datetime.strptime(iso, "%Y-%m-%dT%H:%M:%S.%fZ").timestamp() * 1000


# The benchmark measures throughput, not policy: lift the budget's defaults far out of the way.
UNLIMITED = {
    "MOTHER_BUDGET__RATE_LIMIT__MESSAGES": "100000000",
    "MOTHER_BUDGET__PER_USER_DAILY__MAX_RUNS": "100000000",
    "MOTHER_BUDGET__GLOBAL__MAX_CONCURRENT_RUNS": "100000000",
    "MOTHER_BUDGET__GLOBAL__MAX_QUEUE_DEPTH": "100000000",
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=4, help="alternating rounds the runs are split into")
    parser.add_argument("--serial", type=int, default=30,
                        help="then this many runs one at a time, alternating with single plain-RQ chains (0: skip)")
    args = parser.parse_args()
    if args.runs < args.rounds or args.rounds < 1:
        parser.error("--runs must be at least --rounds, and --rounds at least 1")
    os.environ.update(UNLIMITED)
    per_round = args.runs // args.rounds
    runs = per_round * args.rounds
    base_s = mom_s = 0.0
    cpu: dict[str, dict[str, float]] = {"baseline": {}, "mother": {}}
    base_lat: list[float] = []
    mom_lat: list[float] = []
    rounds: list[float] = []
    with tempfile.TemporaryDirectory(prefix="mother-bench-") as tmp, EmbeddedRedis(dir=Path(tmp) / "r", appendfsync="no") as server:
        stack = LocalStack(server.url, workers=args.workers, mothers=0, log_dir=Path(tmp) / "logs",
                           env={"MOTHER_LOG_LEVEL": "WARNING", "MOTHER_WORKER__WORKSPACE_ROOT": str(Path(tmp) / "ws"),
                                **UNLIMITED})
        with stack:
            mother = stack.spawn("mother-0", "run")
            time.sleep(2.0)  # workers and Mother up
            client = MotherClient(settings=load_settings(redis_url=server.url))
            for r in range(args.rounds):
                took = {}
                for kind in (("baseline", "mother") if r % 2 == 0 else ("mother", "baseline")):
                    print(f"round {r + 1}/{args.rounds}: {kind}, {per_round} runs on {args.workers} workers...",
                          file=sys.stderr)
                    before = cpu_snapshot(server, stack, mother.pid)
                    if kind == "baseline":
                        os.kill(mother.pid, signal.SIGSTOP)  # Mother idle-polling must not tax the baseline
                        try:
                            took[kind], lat = baseline(server.url, per_round, first=r * per_round)
                        finally:
                            os.kill(mother.pid, signal.SIGCONT)
                        base_lat += lat
                    else:
                        took[kind], lat, _ = through_mother(client, per_round)
                        mom_lat += lat
                    for role, secs in cpu_snapshot(server, stack, mother.pid).items():
                        cpu[kind][role] = cpu[kind].get(role, 0.0) + secs - before[role]
                base_s += took["baseline"]
                mom_s += took["mother"]
                rounds.append((took["mother"] - took["baseline"]) / (3 * per_round) * 1000)
            serial = {"baseline": [], "mother": []}
            steps: dict[str, list[float]] = {"baseline": [], "mother": [], "intake": [], "close": []}
            serial_ids: list[str] = []
            for i in range(args.serial):  # one run at a time: the latency Mother adds to a run nobody queues behind
                os.kill(mother.pid, signal.SIGSTOP)
                try:
                    serial["baseline"].append(baseline(server.url, 1, first=runs + i, poll=0.002, with_latencies=False)[0])
                finally:
                    os.kill(mother.pid, signal.SIGCONT)
                took_s, _, ids = through_mother(client, 1, poll=0.002)
                serial["mother"].append(took_s)
                serial_ids += ids
            time.sleep(0.5)  # RQ may mark a job finished a moment before it stores ended_at
            for i in range(args.serial):
                steps["baseline"] += chain_steps(server.url, runs + i)
            for run_id in serial_ids:
                intake, phase_steps, close = mother_steps(client, run_id)
                steps["intake"].append(intake)
                steps["mother"] += phase_steps
                steps["close"].append(close)
    phases = 3 * runs
    print(f"runs={runs} phases={phases} workers={args.workers} rounds={args.rounds}")
    print(f"{'':<10}{'runs/s':>10}{'phases/s':>10}{'p50 ms':>10}{'p99 ms':>10}")
    for name, secs, lat in (("plain RQ", base_s, base_lat), ("Mother", mom_s, mom_lat)):
        print(f"{name:<10}{runs / secs:>10.1f}{phases / secs:>10.1f}{statistics.median(lat):>10.1f}{pct(lat, 0.99):>10.1f}")
    print(f"CPU per phase (ms)        {'plain RQ':>10}{'Mother':>10}{'added':>10}")
    for role in cpu["mother"]:
        b, m = (cpu[k][role] / phases * 1000 for k in ("baseline", "mother"))
        print(f"  {role:<24}{b:>10.2f}{m:>10.2f}{m - b:>+10.2f}")
    b, m = (sum(cpu[k].values()) / phases * 1000 for k in ("baseline", "mother"))
    print(f"  {'all':<24}{b:>10.2f}{m:>10.2f}{m - b:>+10.2f}   (the machine has {os.cpu_count()} cores)")
    print(f"wall time added per phase over plain RQ: {(mom_s - base_s) / phases * 1000:.2f} ms "
          f"(ratio Mother/RQ wall time {mom_s / base_s:.2f}x); per round: "
          + ", ".join(f"{x:.2f}" for x in rounds) + f" ms (median {statistics.median(rounds):.2f})")
    if args.serial:
        b, m = (statistics.median(serial[k]) * 1000 for k in ("baseline", "mother"))
        print(f"one run at a time ({args.serial} each, watched every 2 ms): plain RQ chain p50 {b:.1f} ms "
              f"(p99 {pct(serial['baseline'], 0.99) * 1000:.1f}), Mother run p50 {m:.1f} ms "
              f"(p99 {pct(serial['mother'], 0.99) * 1000:.1f}): Mother adds {(m - b) / 3:.2f} ms per phase to a run's latency")
        med = {k: statistics.median(v) for k, v in steps.items()}
        print(f"  of which, per run (p50): intake {med['intake']:.2f} ms (submission entry -> first phase dispatched), "
              f"close {med['close']:.2f} ms (last result -> termination record); per phase (p50): plain RQ step "
              f"{med['baseline']:.2f} ms, Mother phase {med['mother']:.2f} ms (dispatched -> result accepted and "
              f"next dispatched): {med['mother'] - med['baseline']:.2f} ms added between phases")
    return 0


if __name__ == "__main__":
    sys.exit(main())
