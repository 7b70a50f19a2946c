"""Benchmark: runs through Mother + K workers vs plain RQ running the same jobs on the same workers.

    .venv/bin/python scripts/bench_pipeline.py [--runs N] [--rounds R] [--workers K] [--serial M]

One process starts an embedded Redis and K forking RQ workers, then measures, in
one run on the same workers:

  baseline  plain RQ: N chains of 3 no-op jobs (each job enqueues the next)
  relay     the bare hop: N chains of 3 no-op jobs, each reporting to a stream that one
            central process (scripts.bench.noop.relay) reads, enqueueing the next job: Mother's
            shape with none of its work, the least a central dispatcher can add
  floor     N no-op runs making the server calls the spec asks of each phase (first read,
            the model call's reserve and settle through mh_guard, artifact, result) and of
            the dispatcher (mh_transition with the next job, context and activity; mh_terminate),
            with as little Python as can make them (scripts.bench.floor): a lower bound on what any
            dispatcher meeting the spec adds here
  mother    N runs of a three-phase no-op scripted pipeline through Mother

in R alternating rounds of N/R each (baseline, relay, floor, Mother in even rounds, the reverse in
odd ones; the dispatchers not taking their turn are paused with SIGSTOP), so all see the
same machine: on a small shared VM the speed drifts by more than the difference
being measured. All are watched the same cheap way (one small read per unfinished
run or chain every 50 ms). Prints runs/s, phase latency p50/p99 (enqueue → end for RQ;
dispatch → accepted result for Mother), the CPU time per phase of every process
taking part (Redis, Mother, the relay, the floor's dispatcher, the workers, their work-horses,
this script), and the wall time Mother adds per phase over plain RQ, in all and per round, beside
the bare hop's and the floor's.

Then (--serial M, default 30) M runs one at a time, each after a single plain-RQ chain and
a single bare-hop chain, all watched every 2 ms: the latency Mother adds to a run that waits behind no other,
per phase (a busy machine's figure above is throughput: CPU cost per phase).
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

import orjson
import redis
from rq import Queue
from rq.job import Job, JobStatus
from rq.serializers import JSONSerializer

from mother import keys
from mother.client import MotherClient
from mother.config import load_settings
from mother.functions import server_now_ms
from mother.server import EmbeddedRedis
from mother.stack import LocalStack
from schemas import ms_from_iso
from workers.pool import tree

# run as a file: the project's root is importable
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import itertools

from scripts.bench import FLOOR_STREAM, HOPS_STREAM, UNLIMITED, bench_queue, floor, worker_env
from scripts.bench.noop import chain_job_id, hop_job_id, relay_command


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def cpu_seconds(pid: int, children: bool = False) -> tuple[float, float, int]:
    """CPU time of a process, or of its reaped children (a worker's work-horses): (user s, system s, minor
    page faults). System time and faults are what a VM makes dear; user time travels between machines."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    # a horse that ended since the tree was read: its time is its worker's children's now
    except (FileNotFoundError, ProcessLookupError):
        return 0.0, 0.0, 0
    first, faults = (13, 8) if children else (11, 7)
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[first]) / tick, int(fields[first + 1]) / tick, int(fields[faults])


def cpu_snapshot(
    server: EmbeddedRedis, stack: LocalStack, dispatchers: dict[str, int]
) -> dict[str, tuple[float, float, int]]:
    """CPU (user s, system s, minor faults) so far of every process taking part, by role (``dispatchers``:
    role -> pid)."""
    # each `mother worker` is a parent (depth 0) whose RQ workers (1) fork the work-horses (2)
    found = [
        (pid, depth)
        for n, p in stack.procs.items()
        if n.startswith("worker-")
        for pid, depth in tree(p.pid)
    ]
    rq_workers = [pid for pid, depth in found if depth == 1]
    return {
        "Redis server": cpu_seconds(server.pid),
        **{role: cpu_seconds(pid) for role, pid in dispatchers.items()},
        "workers (own)": _sum([(0.0, 0.0, 0), *(cpu_seconds(pid) for pid, d in found if d <= 1)]),
        # the horses reaped (their workers' children time) and those still running
        "work-horses": _sum(
            [
                (0.0, 0.0, 0),
                *(cpu_seconds(pid, children=True) for pid in rq_workers),
                *(cpu_seconds(pid) for pid, d in found if d == 2),
            ]
        ),
        "this script (watching)": cpu_seconds(os.getpid()),
    }


def _sum(stats: Iterable[tuple[float, float, int]]) -> tuple[float, float, int]:
    user, system, faults = zip(*stats, strict=True)
    return sum(user), sum(system), sum(faults)


def _wait(what: str, deadline: float) -> None:
    if time.monotonic() > deadline:
        raise SystemExit(
            f"benchmark gave up: {what} did not finish in time (see the logs printed above)"
        )


# the stack's worker hosts (`mother up`'s names: local-0, local-1, ...): chain i goes to host i mod K
HOSTS: list[str] = []


def host_for(chain: int) -> str:
    return HOSTS[chain % len(HOSTS)]


# a chain's job function and job ids: plain RQ (each job enqueues the next), relayed (the bare hop) or the floor
CHAIN_JOBS = {
    "baseline": ("scripts.bench.noop.chain", chain_job_id),
    "relay": ("scripts.bench.noop.hop", hop_job_id),
    "floor": (floor.JOB, floor.floor_job_id),
}
FINISHED = JobStatus.FINISHED.value.encode()


def baseline(
    url: str,
    runs: int,
    first: int = 0,
    poll: float = 0.05,
    with_latencies: bool = True,
    kind: str = "baseline",
) -> tuple[float, list[float]]:
    """N chains of 3 no-op jobs: each job enqueues the next (plain RQ), or reports to the relay, which
    enqueues it (``relay``: the bare hop through a central process), or to the floor's dispatcher (``floor``:
    each run made as Mother's intake makes it, and done when its termination record is written)."""
    conn = redis.Redis.from_url(url)
    queues = {host: bench_queue(conn, host) for host in HOSTS}
    chains = range(first, first + runs)
    func, host_job_id = CHAIN_JOBS[kind]

    def job_id(i: int, step: int) -> str:
        return str(host_job_id(host_for(i), i, step))

    # watched as cheaply as Mother's runs are (one small read per unfinished chain every ``poll`` s): a
    # costlier watch would slow the baseline on this shared machine and flatter Mother. A chain is done when
    # its last job has finished; a floor run when its termination record is written.
    pending = {Job.key_for(job_id(i, 2)) for i in chains}
    ask, done = (lambda pipe, key: pipe.hget(key, "status")), FINISHED
    failed_before = sum(q.failed_job_registry.count for q in queues.values())
    started = time.perf_counter()
    # its runs made as Mother's intake makes them
    if kind == "floor":
        pipe, now_ms, settings = (
            conn.pipeline(transaction=False),
            server_now_ms(conn),
            load_settings(redis_url=url),
        )
        for i in chains:
            floor.open_run(pipe, settings, i, now_ms)
        pipe.execute()
        pending = {keys.termination_key(floor.floor_run_id(i)) for i in chains}
        ask, done = (lambda pipe, key: pipe.exists(key)), 1
    for i in chains:
        queues[host_for(i)].enqueue_call(func, args=(i, 0, 3), job_id=job_id(i, 0), result_ttl=600)
    ids = [job_id(i, step) for i in chains for step in range(3)]
    deadline = time.monotonic() + 300
    while pending:
        _wait(f"{LABELS[kind]} ({len(pending)} chains left)", deadline)
        pipe = conn.pipeline(transaction=False)
        for key in pending:
            ask(pipe, key)
        for queue in queues.values():
            pipe.zcard(queue.failed_job_registry.key)
        replies = pipe.execute()
        got, failed = replies[: len(pending)], sum(replies[len(pending) :])
        # a chain that lost a job never ends: say why now, not at the deadline
        if failed > failed_before:
            raise SystemExit(
                f"benchmark gave up: a {LABELS[kind]} job failed: {_newest_failure(queues)}"
            )
        pending -= {key for key, status in zip(list(pending), got, strict=False) if status == done}
        if pending:
            time.sleep(poll)
    elapsed = time.perf_counter() - started
    if not with_latencies:
        return elapsed, []
    # RQ may mark a job finished a moment before it stores ended_at
    time.sleep(0.5)
    jobs = Job.fetch_many(ids, connection=conn, serializer=JSONSerializer)
    latencies = [
        (j.ended_at - j.enqueued_at).total_seconds() * 1000
        for j in jobs
        if j.ended_at and j.enqueued_at
    ]
    return elapsed, latencies


def _newest_failure(queues: dict[str, Queue]) -> str:
    """A failed job of the hosts' queues: its id and the last line of its error."""
    found = [
        (q, ids) for q in queues.values() if (ids := q.failed_job_registry.get_job_ids(-1, -1))
    ]
    if not found:
        return "it left the failed-job registry before it could be read"
    queue, newest = found[0]
    job = Job.fetch(newest[0], connection=queue.connection, serializer=JSONSerializer)
    error = (job.exc_info or "no error stored").strip().splitlines()[-1]
    return f"{job.id} ({job.func_name}): {error}"


def through_mother(
    client: MotherClient, runs: int, poll: float = 0.05
) -> tuple[float, list[float], list[str]]:
    spec = {
        "user_id": "bench",
        "task": "no-op",
        "pipeline": [
            {"name": n, "role": "noop", "model": "scripted"} for n in ("plan", "execute", "review")
        ],
        "scripts": {"noop": [{"text": "ok"}]},
    }
    started = time.perf_counter()
    ids = [client.submit(spec) for _ in range(runs)]
    pending = set(ids)
    deadline = time.monotonic() + 300
    while pending:
        _wait(f"Mother ({len(pending)} runs left)", deadline)
        pipe = client.redis.pipeline(transaction=False)
        for run_id in pending:
            pipe.exists(keys.termination_key(run_id))
        done = {run_id for run_id, ok in zip(list(pending), pipe.execute(), strict=False) if ok}
        pending -= done
        if pending:
            time.sleep(poll)
    elapsed = time.perf_counter() - started
    latencies = []
    for run_id in ids:
        marks = phase_marks(
            orjson.loads(
                client.redis.execute_command("JSON.GET", keys.run_key(run_id), "$.history")
            )[0]
        )
        latencies += [b - a for a, b in itertools.pairwise(marks)]
    return elapsed, latencies, ids


def ping_p50_ms(url: str, count: int = 2000) -> float:
    """A bare Redis round trip (PING from one client, the dispatchers paused) on this machine, in ms: the
    unit the per-phase figures can be read in on another machine."""
    client = redis.Redis.from_url(url)
    times = []
    for _ in range(count):
        start = time.perf_counter()
        client.ping()
        times.append(time.perf_counter() - start)
    client.close()
    return statistics.median(times) * 1000


def phase_marks(history: list[dict[str, str]]) -> list[float]:
    """A run's phase_started and phase_completed times in ms (server time), in order."""
    return [
        ms_from_iso(h["at"]) for h in history if h["event"] in ("phase_started", "phase_completed")
    ]


def mother_steps(client: MotherClient, run_id: str) -> tuple[float, list[float], float]:
    """A finished run's time line in ms, from its own records (server time): intake (submission entry →
    first phase dispatched), each phase (dispatched → its result accepted and the next one dispatched)
    and the close (last result accepted → termination record)."""
    run = orjson.loads(client.redis.execute_command("JSON.GET", keys.run_key(run_id)))
    marks = phase_marks(run["history"])
    submitted = int(run["entry_id"].split("-")[0])
    return (
        marks[0] - submitted,
        [b - a for a, b in itertools.pairwise(marks)],
        ms_from_iso(run["terminated_at"]) - marks[-1],
    )


def chain_steps(url: str, chain: int, kind: str = "baseline") -> list[float]:
    """A chain's steps in ms: the first job's enqueue → its end, then each end → the next end (a plain-RQ
    job enqueues the next before it ends; a relayed one reports to the relay, which enqueues it)."""
    job_id = CHAIN_JOBS[kind][1]
    jobs = Job.fetch_many(
        [job_id(host_for(chain), chain, step) for step in range(3)],
        connection=redis.Redis.from_url(url),
        serializer=JSONSerializer,
    )
    ends = [jobs[0].enqueued_at] + [j.ended_at for j in jobs]
    return [(b - a).total_seconds() * 1000 for a, b in itertools.pairwise(ends)]


# of a role's [user s, system s, faults]
USER, SYSTEM, CPU, FAULTS = (slice(0, 1), slice(1, 2), slice(0, 2), slice(2, 3))
# plain RQ chains, the bare hop through a relay, the floor, Mother
KINDS = ("baseline", "relay", "floor", "mother")
# one run at a time
SERIAL_KINDS = ("baseline", "relay", "mother")
LABELS = {"baseline": "plain RQ", "relay": "bare hop", "floor": "floor", "mother": "Mother"}


@contextmanager
def paused(pids: list[int]) -> Iterator[None]:
    """SIGSTOP these processes for the block: a dispatcher idle-polling must not tax another's turn."""
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument(
        "--rounds", type=int, default=4, help="alternating rounds the runs are split into"
    )
    parser.add_argument(
        "--serial",
        type=int,
        default=30,
        help="then this many runs one at a time, alternating with single plain-RQ chains (0: skip)",
    )
    args = parser.parse_args()
    if args.runs < args.rounds or args.rounds < 1:
        parser.error("--runs must be at least --rounds, and --rounds at least 1")
    os.environ.update(UNLIMITED)
    per_round = args.runs // args.rounds
    runs = per_round * args.rounds
    secs = dict.fromkeys(KINDS, 0.0)
    # role: [user s, system s, faults]
    cpu: dict[str, dict[str, list[float]]] = {kind: {} for kind in KINDS}
    lat: dict[str, list[float]] = {kind: [] for kind in KINDS}
    # ms added per phase over plain RQ, per round
    rounds: dict[str, list[float]] = {"relay": [], "floor": [], "mother": []}
    with (
        tempfile.TemporaryDirectory(prefix="mother-bench-") as tmp,
        EmbeddedRedis(dir=Path(tmp) / "r", appendfsync="no") as server,
    ):
        stack = LocalStack(
            server.url,
            workers=args.workers,
            mothers=0,
            log_dir=Path(tmp) / "logs",
            env={
                "MOTHER_LOG_LEVEL": "WARNING",
                "MOTHER_WORKER__WORKSPACE_ROOT": str(Path(tmp) / "ws"),
                **UNLIMITED,
                **worker_env(server.url),
            },
        )
        with stack:
            mother = stack.spawn("mother-0", "run")
            relay = subprocess.Popen(
                relay_command(server.url), env={**os.environ, **worker_env(server.url)}
            )
            floor_relay = subprocess.Popen(
                floor.relay_command(server.url), env={**os.environ, **worker_env(server.url)}
            )
            roles = {"Mother": mother.pid, "relay": relay.pid, "floor dispatcher": floor_relay.pid}
            try:
                # workers and Mother up, every worker's host live (Mother has its beats)
                if not stack.wait_for_hosts(args.workers):
                    raise SystemExit("the workers' hosts were not live within 60 s: see the logs")
                HOSTS[:] = [f"{stack.host_prefix}-{i}" for i in range(args.workers)]
                # the relays' imports done (each makes its consumer group after them): else what is left of
                # them would be charged to their first turn
                conn, deadline = redis.Redis.from_url(server.url), time.monotonic() + 60
                while not all(conn.exists(stream) for stream in (HOPS_STREAM, FLOOR_STREAM)):
                    _wait("the relays' start (their consumer groups)", deadline)
                    time.sleep(0.05)
                client = MotherClient(settings=load_settings(redis_url=server.url))
                dispatchers = {
                    "baseline": [],
                    "relay": [relay.pid],
                    "floor": [floor_relay.pid],
                    "mother": [mother.pid],
                }

                def others(kind: str) -> list[int]:
                    """The dispatchers that are not ``kind``'s: paused during its turn."""
                    return [pid for other in KINDS if other != kind for pid in dispatchers[other]]

                for r in range(args.rounds):
                    took = {}
                    for kind in KINDS if r % 2 == 0 else KINDS[::-1]:
                        print(
                            f"round {r + 1}/{args.rounds}: {LABELS[kind]}, {per_round} runs on {args.workers} workers...",
                            file=sys.stderr,
                        )
                        before = cpu_snapshot(server, stack, roles)
                        with paused(others(kind)):
                            if kind == "mother":
                                took[kind], got, _ = through_mother(client, per_round)
                            else:
                                took[kind], got = baseline(
                                    server.url, per_round, first=r * per_round, kind=kind
                                )
                        lat[kind] += got
                        for role, used in cpu_snapshot(server, stack, roles).items():
                            total = cpu[kind].setdefault(role, [0.0, 0.0, 0.0])
                            for i, (now, then) in enumerate(zip(used, before[role], strict=True)):
                                total[i] += now - then
                    for kind in KINDS:
                        secs[kind] += took[kind]
                    for kind in rounds:
                        rounds[kind].append(
                            (took[kind] - took["baseline"]) / (3 * per_round) * 1000
                        )
                serial: dict[str, list[float]] = {kind: [] for kind in SERIAL_KINDS}
                steps: dict[str, list[float]] = {
                    "baseline": [],
                    "relay": [],
                    "mother": [],
                    "intake": [],
                    "close": [],
                }
                serial_ids: list[str] = []
                # one run at a time: the latency Mother adds to a run nobody queues behind
                for i in range(args.serial):
                    for kind in ("baseline", "relay"):
                        with paused(others(kind)):
                            serial[kind].append(
                                baseline(
                                    server.url,
                                    1,
                                    first=runs + i,
                                    poll=0.002,
                                    with_latencies=False,
                                    kind=kind,
                                )[0]
                            )
                    with paused(others("mother")):
                        took_s, _, ids = through_mother(client, 1, poll=0.002)
                    serial["mother"].append(took_s)
                    serial_ids += ids
                with paused(others("baseline")):
                    ping = ping_p50_ms(server.url)
                # RQ may mark a job finished a moment before it stores ended_at
                time.sleep(0.5)
                for i in range(args.serial):
                    steps["baseline"] += chain_steps(server.url, runs + i)
                    steps["relay"] += chain_steps(server.url, runs + i, kind="relay")
                for run_id in serial_ids:
                    intake, phase_steps, close = mother_steps(client, run_id)
                    steps["intake"].append(intake)
                    steps["mother"] += phase_steps
                    steps["close"].append(close)
            finally:
                for proc in (relay, floor_relay):
                    proc.kill()
                    proc.wait()
    report(
        args,
        runs,
        secs,
        cpu,
        lat,
        rounds,
        ping,
        serial if args.serial else None,
        steps if args.serial else None,
    )
    return 0


def report(
    args: argparse.Namespace,
    runs: int,
    secs: dict[str, float],
    cpu: dict[str, dict[str, list[float]]],
    lat: dict[str, list[float]],
    rounds: dict[str, list[float]],
    ping: float,
    serial: dict[str, list[float]] | None,
    steps: dict[str, list[float]] | None,
) -> None:
    phases = 3 * runs
    print(f"runs={runs} phases={phases} workers={args.workers} rounds={args.rounds}")
    print(f"{'':<10}{'runs/s':>10}{'phases/s':>10}{'p50 ms':>10}{'p99 ms':>10}")
    for kind in KINDS:
        print(
            f"{LABELS[kind]:<10}{runs / secs[kind]:>10.1f}{phases / secs[kind]:>10.1f}"
            f"{statistics.median(lat[kind]):>10.1f}{pct(lat[kind], 0.99):>10.1f}"
        )
    print(
        f"CPU per phase (ms)        {'plain RQ':>10}{'bare hop':>10}{'floor':>10}{'Mother':>10}{'hop added':>10}"
        f"{'fl. added':>10}{'M. added':>10}"
    )
    roles = [*list(cpu["mother"]), "all"]

    def per_phase(kind: str, role: str, field: slice) -> float:
        """A role's (or all roles') user and/or system ms or faults per phase."""
        rows = cpu[kind].values() if role == "all" else [cpu[kind][role]]
        return sum(sum(row[field]) for row in rows) / phases * (1000 if field != FAULTS else 1)

    for role in roles:
        b, h, f, m = (per_phase(k, role, CPU) for k in KINDS)
        print(
            f"  {role:<24}{b:>10.2f}{h:>10.2f}{f:>10.2f}{m:>10.2f}{h - b:>+10.2f}{f - b:>+10.2f}{m - b:>+10.2f}"
            + (f"   (the machine has {os.cpu_count()} cores)" if role == "all" else "")
        )
    print(
        f"Mother's added CPU per phase, split   {'user ms':>10}{'system ms':>10}{'faults':>10}   (system time and page "
        "faults are what a VM makes dear)"
    )
    for role in roles:
        user, system, faults = (
            per_phase("mother", role, f) - per_phase("baseline", role, f)
            for f in (USER, SYSTEM, FAULTS)
        )
        print(f"  {role:<36}{user:>+10.2f}{system:>+10.2f}{faults:>+10.0f}")
    added = {kind: (secs[kind] - secs["baseline"]) / phases * 1000 for kind in rounds}
    print(
        f"wall time added per phase over plain RQ: Mother {added['mother']:.2f} ms (ratio Mother/RQ wall time "
        f"{secs['mother'] / secs['baseline']:.2f}x); per round: "
        + ", ".join(f"{x:.2f}" for x in rounds["mother"])
        + f" ms (median {statistics.median(rounds['mother']):.2f})"
    )
    print(
        f"  of which the bare hop through a central process {added['relay']:.2f} ms (per round: "
        + ", ".join(f"{x:.2f}" for x in rounds["relay"])
        + f"), and Mother's own work {added['mother'] - added['relay']:.2f} ms"
    )
    print(
        f"the floor (the server calls the spec asks of a phase and its dispatch, with as little Python as can make them) "
        f"adds {added['floor']:.2f} ms per phase (per round: "
        + ", ".join(f"{x:.2f}" for x in rounds["floor"])
        + f"): Mother adds {added['mother'] - added['floor']:.2f} ms above it"
    )
    print(
        f"a bare Redis round trip here (PING p50, one client, dispatchers paused): {ping * 1000:.0f} µs, so Mother "
        f"adds {added['mother'] / ping:.1f} round trips' worth per phase (the 2 ms target: {2 / ping:.1f})"
    )
    if serial is None or steps is None:
        return
    b, h, m = (statistics.median(serial[k]) * 1000 for k in SERIAL_KINDS)
    print(
        f"one run at a time ({args.serial} each, watched every 2 ms): plain RQ chain p50 {b:.1f} ms "
        f"(p99 {pct(serial['baseline'], 0.99) * 1000:.1f}), bare-hop chain p50 {h:.1f} ms, Mother run p50 {m:.1f} ms "
        f"(p99 {pct(serial['mother'], 0.99) * 1000:.1f}): Mother adds {(m - b) / 3:.2f} ms per phase to a run's latency "
        f"(the bare hop {(h - b) / 3:.2f}; {(m - b) / 3 / ping:.1f} round trips' worth)"
    )
    med = {k: statistics.median(v) for k, v in steps.items()}
    print(
        f"  of which, per run (p50): intake {med['intake']:.2f} ms (submission entry -> first phase dispatched), "
        f"close {med['close']:.2f} ms (last result -> termination record); per phase (p50): plain RQ step "
        f"{med['baseline']:.2f} ms, bare-hop step {med['relay']:.2f} ms, Mother phase {med['mother']:.2f} ms "
        f"(dispatched -> result accepted and next dispatched): {med['mother'] - med['baseline']:.2f} ms added between phases"
    )


if __name__ == "__main__":
    sys.exit(main())
