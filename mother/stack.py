"""A local stack of processes: Mother (and a standby) plus N RQ workers, as real processes.

Each worker process is an enrolled host of its own (``{host_prefix}-{index}``), enrolled by the stack
with an administrator's connection (``admin_url``, by default the stack's own URL: the embedded
development server's default user), so ``mother up`` needs no step of an operator's.

``mother up``, ``./scripts/demo`` and the test suite use it. Each process gets its
own session (process group), so stopping it also stops an RQ work-horse it forked,
and is SIGTERMed by Linux if the process that started it dies (no orphans).
:meth:`LocalStack.respawn_dead` starts a process that exited again (a worker killed
with its job, a Mother that crashed), unless it keeps exiting: then it gives up. A
Mother that died holding the leader lease has it released at once (it can no longer
write anything), so the one started in its place leads without waiting out the lease.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import redis

from mother import calls, keys
from mother.connection import client_for
from mother.errors import MotherError
from mother.hosts.table import HostTable
from mother.identities import new_password, party_url
from mother.server import _die_with_parent

__all__ = ["DEV_ENV", "Exited", "LocalStack", "exit_text"]

# `mother up --dev`, the demo and the tests: the scripted model's fault injection (kill a worker, hang, raise) on
# and where bubblewrap is missing, tools run unsandboxed (with a warning) rather than workers refusing to start
DEV_ENV = {
    "MOTHER_MODELS__SCRIPTED__ALLOW_FAULTS": "true",
    "MOTHER_TOOLS__SANDBOX_REQUIRED": "false",
}


@dataclass(frozen=True)
class Exited:
    """A process of the stack that exited: started again, or given up on (``gave_up``: it exited
    ``restarts`` times within the stack's ``restart_window_seconds``, so starting it again would loop)."""

    name: str
    returncode: int
    restarts: int
    gave_up: bool
    log: Path | None
    window_seconds: float
    # a Mother's leader lease: what became of it ('' when it held none)
    lease: str = ""

    def __str__(self) -> str:
        """What happened, in one line: 'worker-0 exited (killed by SIGKILL); started it again', or the give-up."""
        lease = f"; {self.lease}" if self.lease else ""
        if self.gave_up:
            return (
                f"{self.name} exited again ({exit_text(self.returncode)}) after {self.restarts} restarts within "
                f"{self.window_seconds:g} s{lease}; giving up"
            )
        return f"{self.name} exited ({exit_text(self.returncode)}){lease}; started it again"

    def last_log_line(self) -> str:
        """The last non-empty line of the process's log ('' without one): usually why it exited."""
        if self.log is None or not self.log.is_file():
            return ""
        with open(self.log, "rb") as handle:
            handle.seek(max(0, handle.seek(0, os.SEEK_END) - 4096))
            lines = [
                line for line in handle.read().decode(errors="replace").splitlines() if line.strip()
            ]
        return lines[-1].strip() if lines else ""


def exit_text(returncode: int) -> str:
    """'exit code 1' or 'killed by SIGKILL' (a negative return code is the signal that ended it)."""
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit code {returncode}"


@dataclass
class LocalStack:
    redis_url: str
    workers: int = 2
    # RQ workers each worker process runs (1: itself; more: a pool it forks, workers/pool.py)
    concurrency: int = 1
    mothers: int = 1
    log_dir: Path | None = None
    # an administrator's URL the stack enrolls its worker hosts with (default: redis_url)
    admin_url: str | None = None
    # its hosts' names: {host_prefix}-{index}
    host_prefix: str = "local"
    env: dict[str, str] = field(default_factory=dict)
    queues: str = "agents,tools,maintenance"
    # also run `mother cron` (the daily GC's scheduler)
    cron: bool = False
    # also run `mother dashboard --port N` (0: not)
    dashboard_port: int = 0
    # start() returns once every worker's host is live (Mother has its first beat), so what is
    # submitted next is queued for a host at once rather than moved to one a moment later
    wait_hosts: bool = False
    # restarts of one process within restart_window_seconds before respawn_dead gives up
    restart_limit: int = 5
    restart_window_seconds: float = 60.0
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict, init=False)
    # name -> its log, open while it may run
    _logs: dict[str, IO[bytes]] = field(default_factory=dict, init=False)
    # name -> its `mother` arguments
    _args: dict[str, tuple[str, ...]] = field(default_factory=dict, init=False)
    # name -> monotonic restart times
    _restarts: dict[str, list[float]] = field(default_factory=dict, init=False)
    _given_up: set[str] = field(default_factory=set, init=False)
    # worker index -> its host's URL
    _host_urls: dict[int, str] = field(default_factory=dict, init=False)
    # set by stop(): enrollments waiting for the server give up
    _stopping: threading.Event = field(default_factory=threading.Event, init=False)

    def _env(self) -> dict[str, str]:
        """The children's environment: this process's, every ``MOTHER_*`` setting included (the stack's
        own Redis URL and JSON logs win over them, and ``env`` over both)."""
        env = dict(os.environ)
        env.update({"MOTHER_REDIS_URL": self.redis_url, "MOTHER_LOG_FORMAT": "json", **self.env})
        return env

    def spawn(
        self, name: str, *args: str, env: dict[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        out: IO[bytes] | int | None = None
        if self.log_dir is not None:
            self.log_dir.mkdir(parents=True, exist_ok=True)
            # closed in stop() or on a respawn
            handle = open(self.log_dir / f"{name}.log", "ab")  # noqa: SIM115
            previous = self._logs.pop(name, None)
            # the handle of a process of this name that exited
            if previous is not None:
                previous.close()
            self._logs[name] = out = handle
        proc = subprocess.Popen(
            [sys.executable, "-m", "mother.cli", *args],
            env={**self._env(), **(env or {})},
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            start_new_session=True,
            preexec_fn=_die_with_parent if sys.platform == "linux" else None,
        )
        self.procs[name], self._args[name] = proc, args
        return proc

    def start(self) -> LocalStack:
        self._stopping.clear()
        for i in range(self.mothers):
            self.spawn(f"mother-{i}", "run")
        for i in range(self.workers):
            self.add_worker(i)
        if self.cron:
            self.spawn("cron", "cron")
        if self.dashboard_port:
            self.spawn("dashboard", "dashboard", "--port", str(self.dashboard_port))
        if self.wait_hosts and self.mothers and self.workers:
            self.wait_for_hosts(self.workers)
        return self

    def wait_for_hosts(self, count: int, timeout: float = 60.0) -> bool:
        """Wait until ``count`` worker hosts are live (Mother has their beats: mother.hosts), so what
        is submitted next is queued for a host at once. False when that did not happen in ``timeout``
        seconds or a worker process exited meanwhile (its log says why)."""
        client = client_for(self.redis_url, decode_responses=True)
        table = HostTable(client)
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                workers = [p for n, p in self.procs.items() if n.startswith("worker-")]
                if any(p.poll() is not None for p in workers):
                    return False
                with contextlib.suppress(redis.RedisError):
                    table.refresh()
                    if len(table.live) >= count:
                        return True
                time.sleep(0.05)
            return False
        finally:
            client.close()

    def add_worker(self, index: int | None = None) -> subprocess.Popen[bytes]:
        index = len([n for n in self.procs if n.startswith("worker-")]) if index is None else index
        url = self._host_urls.get(index)
        if url is None:
            name = f"{self.host_prefix}-{index}"
            try:
                url = self._host_urls[index] = self.enroll(name)
            # the server cannot be reached yet: the host is enrolled with the password chosen now once it
            # is (the worker waits for its user meanwhile)
            except redis.ConnectionError:
                password = new_password()
                url = self._host_urls[index] = party_url(
                    self.redis_url, keys.host_user(name), password
                )
                threading.Thread(
                    target=self._enroll_when_up, args=(name, password), daemon=True
                ).start()
        return self.spawn(
            f"worker-{index}",
            "worker",
            "--queues",
            self.queues,
            "--name",
            f"w{index}-{os.getpid()}-{time.monotonic_ns() % 10**6}",
            *(("--concurrency", str(self.concurrency)) if self.concurrency > 1 else ()),
            env={"MOTHER_REDIS_URL": url},
        )

    def enroll(self, name: str, password: str | None = None) -> str:
        """Enroll worker host ``name`` (a new password when it is enrolled already; ``password`` if
        given) and return its URL."""
        from mother.clock import ServerClock
        from mother.identities import hosts
        from mother.identities.enroll import replicated

        admin = self.admin_url or self.redis_url
        with client_for(admin, decode_responses=True) as client:
            now = ServerClock(client).now_iso()
            if hosts.load(client, name) is not None:
                password = hosts.rotate(client, name, now, password)
            else:
                _host, password = hosts.add(
                    client, name, [q for q in self.queues.split(",") if q], now, password
                )
            # a failover in the next moment must not lose the record Mother makes its user from
            note = replicated(client)
            if note:
                print(f"mother: worker host {name}: {note}", file=sys.stderr)
        return party_url(self.redis_url, keys.host_user(name), password)

    def _enroll_when_up(self, name: str, password: str) -> None:
        """Enroll host ``name`` with ``password`` once the server answers (tried every 0.2 s until the
        stack stops); what else goes wrong is said on stderr, and the worker's wait for its user then
        runs out with the server's refusal."""
        while not self._stopping.wait(0.2):
            try:
                self.enroll(name, password)
                return
            except redis.ConnectionError:
                continue
            except (redis.RedisError, MotherError) as exc:
                print(f"mother: cannot enroll worker host {name}: {exc}", file=sys.stderr)
                return

    def respawn_dead(self) -> list[Exited]:
        """Start each process that exited again (a worker under a fresh RQ name: the dead one's may
        still be registered), once per call, and say which: Mother's recovery and the watchdog pick
        up what the dead one left. A process already restarted ``restart_limit`` times within
        ``restart_window_seconds`` is given up on (a bad config or a broken install would only
        exit again), reported once with ``gave_up``, and left dead."""
        exited = []
        now = time.monotonic()
        for name, proc in list(self.procs.items()):
            if name in self._given_up or proc.poll() is None:
                continue
            lease = self._release_lease_of(proc) if self._args[name][:1] == ("run",) else ""
            recent = [
                t for t in self._restarts.get(name, []) if now - t < self.restart_window_seconds
            ]
            gave_up = len(recent) >= self.restart_limit
            if gave_up:
                self._given_up.add(name)
            else:
                recent.append(now)
                if name.startswith("worker-"):
                    self.add_worker(int(name.split("-", 1)[1]))
                else:
                    self.spawn(name, *self._args[name])
            self._restarts[name] = recent
            exited.append(
                Exited(
                    name,
                    proc.returncode,
                    len(recent),
                    gave_up,
                    self._log_path(name),
                    self.restart_window_seconds,
                    lease,
                )
            )
        return exited

    def _release_lease_of(self, proc: subprocess.Popen[bytes]) -> str:
        """Release the leader lease if the Mother ``proc``, which has exited (and is reaped), holds it:
        a dead process writes nothing more, so its successor or a standby may lead at once instead of
        after ``service.lease_seconds``. Says what became of the lease ('' when it held none)."""
        try:
            with client_for(self.redis_url, socket_timeout=2) as client:
                holder = client.get(keys.LEADER_LEASE)
                if holder is None or not holder.decode().startswith(keys.leader_prefix(proc.pid)):
                    return ""
                # compare-and-delete on the server: a lease taken by another Mother meanwhile is left alone
                released = calls.release_lease(client, instance=holder)
        # the lease then runs out on its own
        except redis.RedisError as exc:
            return f"its leader lease is left to expire (Redis: {exc})"
        return "released its leader lease, so the next Mother leads at once" if released else ""

    def _log_path(self, name: str) -> Path | None:
        return self.log_dir / f"{name}.log" if self.log_dir is not None else None

    def alive(self) -> dict[str, bool]:
        return {name: proc.poll() is None for name, proc in self.procs.items()}

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM every process group, wait, then SIGKILL what is left."""
        self._stopping.set()
        for proc in self.procs.values():
            _signal_group(proc, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for proc in self.procs.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(max(0.1, deadline - time.monotonic()))
        for proc in self.procs.values():
            _signal_group(proc, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(5)
        for handle in self._logs.values():
            handle.close()
        for kept in (self.procs, self._logs, self._args, self._restarts, self._given_up):
            kept.clear()

    def __enter__(self) -> LocalStack:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _signal_group(proc: subprocess.Popen[bytes], sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)
