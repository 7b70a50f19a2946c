"""Many hosts (issue 54): worker "hosts" as Linux network namespaces (a veth pair each, Redis and Mother
in the root namespace), each with its own workspace root. A run's phases land on different hosts and
read each other's files; a host killed mid-phase (every process in it); a host cut off mid-phase
(its link down) and back after the heartbeat timeout. Every run ends exactly once, no phase result is
accepted twice. Needs root and iproute2 (CI runs as root); skipped elsewhere, with the reason."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from mother import keys
from mother.client import MotherClient
from mother.config import load_settings
from mother.server import EmbeddedRedis
from mother.stack import LocalStack
from tests.conftest import FAST_ENV, beating, need, tool_calls_counted
from tests.test_pipeline import example, wait_until
from tests.test_workspaces import _spec


def _why_not() -> str | None:
    """Why this machine cannot make the hosts (None: it can): root, iproute2, and a kernel and
    container that allow a network namespace and a veth pair (tried, then removed)."""
    if os.geteuid() != 0:
        return "network namespaces need root (CI runs as root)"
    if shutil.which("ip") is None:
        return "network namespaces need iproute2 (`ip`; .ci/run installs it)"
    probe = f"mhp{os.getpid() % 100_000}"
    for made, removed in (
        (("netns", "add", probe), ("netns", "del", probe)),
        (
            ("link", "add", probe, "type", "veth", "peer", "name", probe + "x"),
            ("link", "del", probe),
        ),
    ):
        tried = subprocess.run(["ip", *made], capture_output=True, text=True)
        if tried.returncode != 0:
            return f"this machine cannot `ip {made[0]} {made[1]}` ({tried.stderr.strip()[:200]})"
        subprocess.run(["ip", *removed], capture_output=True)
    return None


WHY_NOT = _why_not()


@pytest.fixture(autouse=True)
def _namespaces() -> None:
    need(WHY_NOT)


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


@dataclass
class Host:
    """One namespace: its name, the root side of its link, its address for Redis, its workers."""

    ns: str
    link: str
    redis_ip: str
    root: Path
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    # its enrolled worker host's URL (Cluster.host_url)
    url: str | None = None

    def pids(self) -> list[int]:
        out = subprocess.run(["ip", "netns", "pids", self.ns], capture_output=True, text=True)
        return [int(p) for p in out.stdout.split()]

    def kill_all(self) -> None:
        """kill -9 of every process in the host, and wait until none is left: a worker killed but not yet
        gone still holds its blocking dequeue on Redis, and could take (and lose) the next job."""
        for pid in self.pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for proc in self.procs:
            proc.wait(timeout=10)
        self.procs.clear()
        wait_until(lambda: not self.pids(), timeout=10)


@dataclass
class Cluster:
    server: EmbeddedRedis
    mother: LocalStack
    client: MotherClient
    hosts: list[Host]
    logs: Path

    def host_url(self, host: Host) -> str:
        """The URL of ``host``'s enrolled worker host (``h1``, ``h2``: enrolled at its first start)."""
        from mother.clock import ServerClock
        from mother.identities import hosts, party_url

        name = f"h{self.hosts.index(host) + 1}"
        if host.url is None:
            admin = self.client.redis
            _enrolled, password = hosts.add(
                admin, name, ["agents", "tools", "maintenance"], ServerClock(admin).now_iso()
            )
            base = f"redis://{host.redis_ip}:{self.server.port}/0"
            host.url = party_url(base, keys.host_user(name), password)
        return host.url

    def start_worker(self, host: Host, name: str) -> subprocess.Popen[bytes]:
        env = {
            **os.environ,
            **FAST_ENV,
            "MOTHER_REDIS_URL": self.host_url(host),
            "MOTHER_WORKER__WORKSPACE_ROOT": str(host.root),
            "MOTHER_LOG_FORMAT": "json",
        }
        log = (self.logs / f"{name}.log").open("ab")
        proc = subprocess.Popen(
            [
                *("ip", "netns", "exec", host.ns, sys.executable, "-m", "mother.cli", "worker"),
                *("--queues", "agents,tools,maintenance", "--name", name),
            ],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
        )
        host.procs.append(proc)
        return proc


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    tag = f"{os.getpid() % 10_000}"
    hosts: list[Host] = []
    server = mother = None
    try:
        for i in (1, 2):
            ns, link, peer = f"mh{tag}h{i}", f"mv{tag}h{i}", f"mp{tag}h{i}"
            _ip("netns", "add", ns)
            hosts.append(Host(ns, link, f"10.88.{i}.1", tmp_path / f"host-{i}"))
            _ip("link", "add", link, "type", "veth", "peer", "name", peer)
            _ip("link", "set", peer, "netns", ns)
            _ip("addr", "add", f"10.88.{i}.1/24", "dev", link)
            _ip("link", "set", link, "up")
            _ip("-n", ns, "addr", "add", f"10.88.{i}.2/24", "dev", peer)
            _ip("-n", ns, "link", "set", peer, "up")
            _ip("-n", ns, "link", "set", "lo", "up")
        binds = ["127.0.0.1", *(h.redis_ip for h in hosts)]
        server = EmbeddedRedis(
            dir=tmp_path / "redis",
            appendfsync="no",
            extra_args=["--bind", *binds, "--protected-mode", "no"],
        ).start()
        logs = tmp_path / "logs"
        mother = LocalStack(server.url, workers=0, mothers=1, log_dir=logs, env=FAST_ENV).start()
        client = MotherClient(settings=load_settings(redis_url=server.url))
        yield Cluster(server, mother, client, hosts, logs)
    finally:
        for host in hosts:
            host.kill_all()
        if mother is not None:
            mother.stop()
        if server is not None:
            server.stop()
        for host in hosts:
            subprocess.run(["ip", "netns", "del", host.ns], capture_output=True)
            subprocess.run(["ip", "link", "del", host.link], capture_output=True)


def _claimed(c: Cluster, run_id: str, attempt: int) -> None:
    beat = keys.attempt_heartbeat_key(run_id, 0, attempt)
    wait_until(lambda: beating(c.client.redis.get(beat)), timeout=30)


def _once(c: Cluster, run_id: str) -> list[int]:
    """The run ended exactly once; the attempts of its first phase whose result was accepted."""
    entries = c.client.redis.xrange(keys.run_activity_key(run_id))
    assert [e["type"] for _id, e in entries].count("terminated") == 1
    state = c.client.status(run_id)
    return [r.attempt for r in state.results if r.phase_index == 0]


def test_phases_on_two_hosts_read_each_others_files_over_the_network(cluster: Cluster) -> None:
    c = cluster
    a, b = c.hosts
    first = c.start_worker(a, "host-1-w")
    run_id = c.client.submit(_spec())
    _claimed(c, run_id, 1)
    first.send_signal(signal.SIGTERM)
    c.start_worker(b, "host-2-w")
    assert c.client.wait(run_id, 90).termination.reason == "success"
    stats = tool_calls_counted(c.client.redis, "read_file", 2)
    assert (stats["success_count"], stats["failure_count"]) == (2, 0)
    assert (b.root / run_id / "notes.txt").read_text() == "hello from host a"
    assert _once(c, run_id) == [1]


def _slow(seconds: float) -> dict:
    return example(
        "three-phase",
        scripts={
            # the first attempt is slow (it is the one killed or cut off); its retry is not
            "planner": [
                {"text": "planned", "delay_seconds": seconds, "attempts": [1]},
                {"text": "planned again"},
            ],
            "coder": [{"text": "coded"}],
            "critic": [{"text": "ok"}],
        },
    )


def test_a_host_killed_mid_phase_and_a_host_cut_off_and_back(cluster: Cluster) -> None:
    """Host 1 takes the first phase and dies whole (kill -9 of every process in it): the attempt is
    lost after the heartbeat timeout and retried on host 2. Then host 1 (restarted) takes another run's
    first phase and its link goes down: lost, retried on host 2, and the link comes back while host 1's
    horse still holds the old attempt, whose result is refused (its host no longer holds it). Each run
    ends once, with the retry's result only."""
    c = cluster
    a, b = c.hosts
    c.start_worker(a, "host-1-w1")
    killed = c.client.submit(_slow(30))
    _claimed(c, killed, 1)
    c.start_worker(b, "host-2-w")
    a.kill_all()
    assert c.client.wait(killed, 90).termination.reason == "success"
    assert _once(c, killed) == [2]
    # only host 1 listens when the next run's first phase is dispatched
    c.start_worker(a, "host-1-w2")
    b.kill_all()
    cut = c.client.submit(_slow(8))
    _claimed(c, cut, 1)
    c.start_worker(b, "host-2-w2")
    _ip("link", "set", a.link, "down")
    try:
        # lost after the heartbeat timeout; the retry is dispatched (to host 2: host 1 is unreachable),
        # and it (and the phases after it) may end before the run's attempt is seen at 2
        wait_until(
            lambda: any(h.event == "phase_retried" for h in c.client.status(cut).history),
            timeout=30,
        )
    finally:
        _ip("link", "set", a.link, "up")
    assert c.client.wait(cut, 90).termination.reason == "success"
    assert _once(c, cut) == [2]
