"""A local stack of processes: Mother (and a standby) plus N RQ workers, as real processes.

``mother up``, ``./scripts/demo`` and the test suite use it. Each process gets its
own session (process group), so stopping it also stops an RQ work-horse it forked,
and is SIGTERMed by Linux if the process that started it dies (no orphans).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from mother.server import _die_with_parent

__all__ = ["LocalStack"]


@dataclass
class LocalStack:
    redis_url: str
    workers: int = 2
    mothers: int = 1
    log_dir: Path | None = None
    env: dict[str, str] = field(default_factory=dict)
    queues: str = "agents,tools,maintenance"
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict, init=False)
    _logs: list[IO[bytes]] = field(default_factory=list, init=False)

    def _env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("MOTHER_") or k == "MOTHER_CONFIG"}
        env.update({"MOTHER_REDIS_URL": self.redis_url, "MOTHER_LOG_FORMAT": "json", **self.env})
        return env

    def spawn(self, name: str, *args: str) -> subprocess.Popen[bytes]:
        out: IO[bytes] | int | None = None
        if self.log_dir is not None:
            self.log_dir.mkdir(parents=True, exist_ok=True)
            handle = open(self.log_dir / f"{name}.log", "ab")  # noqa: SIM115 - closed in stop()
            self._logs.append(handle)
            out = handle
        proc = subprocess.Popen(
            [sys.executable, "-m", "mother.cli", *args],
            env=self._env(), stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True,
            preexec_fn=_die_with_parent if sys.platform == "linux" else None,
        )
        self.procs[name] = proc
        return proc

    def start(self) -> LocalStack:
        for i in range(self.mothers):
            self.spawn(f"mother-{i}", "run")
        for i in range(self.workers):
            self.add_worker(i)
        return self

    def add_worker(self, index: int | None = None) -> subprocess.Popen[bytes]:
        index = len([n for n in self.procs if n.startswith("worker-")]) if index is None else index
        return self.spawn(f"worker-{index}", "worker", "--queues", self.queues, "--name", f"w{index}-{os.getpid()}-{time.monotonic_ns() % 10**6}")

    def respawn_dead_workers(self) -> list[str]:
        """Start a fresh worker for each one that exited; return their names."""
        dead = [n for n, p in self.procs.items() if n.startswith("worker-") and p.poll() is not None]
        for name in dead:
            self.add_worker(int(name.split("-", 1)[1]))
        return dead

    def alive(self) -> dict[str, bool]:
        return {name: proc.poll() is None for name, proc in self.procs.items()}

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM every process group, wait, then SIGKILL what is left."""
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
        for handle in self._logs:
            handle.close()
        self.procs.clear()
        self._logs.clear()

    def __enter__(self) -> LocalStack:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _signal_group(proc: subprocess.Popen[bytes], sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)
