"""``mother worker --concurrency N``: one worker process tree per host.

One parent imports and warms up everything a phase needs once (settings, the runtime and its server
connections, the project's modules, the model SDK and a client per configured HTTP model, hooks, the
sandbox check), freezes the garbage collector (``gc.freeze``: the objects it made are never traversed
again, so no collection writes to their headers and the pages stay shared with every child), and forks
N RQ workers (:class:`workers.worker.PhaseWorker`). Each worker freezes again before it forks a
work-horse (:meth:`PhaseWorker.fork_work_horse`). A child that dies is replaced.

The parent also beats for every attempt its workers run (one ``beat`` ask a round, naming them, with the
host's line: :mod:`workers.heartbeat`): a worker tells it, through a pipe, when it takes a phase job and
when the job is over. So an attempt stays alive while its worker sets it up or its horse is starved of
CPU, and what ends the beating is a real death: the worker's (the parent reaps it and stops beating for
it; its orphaned horse beats for itself) or the horse's (its worker ends the job: the next beat says it
died, and Mother takes the attempt for lost at once).

Why not RQ's ``WorkerPool``: it joins each child for 0.1 s in turn every loop (with 200 children a dead
one is noticed ~20 s late), builds each worker with fixed arguments (no name, no monitoring interval)
and always with RQ's scheduler (200 schedulers contending for its lock), and has no hook to freeze the
collector before it forks. This supervisor is ~200 lines of our own.

The host's line (concurrency, busy workers, memory measured as PSS) rides with the beats; Mother keeps it
(``hosts:alive:{host}``), chooses hosts by it and ``mother hosts list`` shows it.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import gc
import os
import random
import select
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import redis

from mother.config import Settings
from mother.hosts.table import STOPPED
from mother.logs import get_logger
from mother.server import parent_death_signal
from workers.asking import Asker
from workers.heartbeat import beat

__all__ = [
    "MemoryPlan",
    "Pool",
    "PoolLink",
    "memory_available_mb",
    "memory_plan",
    "pss_mb",
    "tree",
    "tree_pids",
]

log = get_logger("pool")

# a child that exits this many times within RESPAWN_WINDOW is restarted after RESPAWN_PAUSE
RESPAWN_BURST = 5
RESPAWN_WINDOW = 30.0
RESPAWN_PAUSE = 5.0
# how often the host's memory (PSS) is measured for its line
PSS_EVERY = 5.0
# workers forked between two looks at the beats (a fork of the warmed parent takes ~1-3 ms, more on a
# starved host)
FORK_BATCH = 8
# processes of each kind (workers, horses) whose PSS is read for the host's line
PSS_SAMPLE = 8
# a message a worker writes to the pool: "<pid> <b|e> <member>\n", at most PIPE_BUF bytes (atomic)
MESSAGE_MAX = 512


# -- memory ---------------------------------------------------------------------------------------


def pss_mb(pid: int) -> float:
    """The proportional set size of a process in MB (``/proc/PID/smaps_rollup``): its private pages, and
    its share of the pages it shares (what N forked children really cost, where RSS counts shared pages
    N times). 0 when the process is gone."""
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as f:
            for line in f:
                if line.startswith(b"Pss:"):
                    return int(line.split()[1]) / 1024
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return 0.0
    return 0.0


def tree_pids(root: int) -> list[int]:
    """``root`` and every process below it (its workers and their horses)."""
    return [pid for pid, _ in tree(root)]


def tree(root: int) -> list[tuple[int, int]]:
    """``root`` and every process below it, each with its depth (0: ``root``)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                ppid = int(f.read().rsplit(b")", 1)[1].split()[1])
        except (FileNotFoundError, ProcessLookupError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [(root, 0)]
    while todo:
        pid, depth = todo.pop()
        out.append((pid, depth))
        todo.extend((child, depth + 1) for child in children.get(pid, []))
    return out


def memory_available_mb() -> float | None:
    """MemAvailable from /proc/meminfo (what can be used without swapping), or None where unknown."""
    try:
        with open("/proc/meminfo", "rb") as f:
            for line in f:
                if line.startswith(b"MemAvailable:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


@dataclass(frozen=True)
class MemoryPlan:
    concurrency: int
    need_mb: float
    available_mb: float | None
    fits: int | None

    @property
    def refused(self) -> bool:
        return self.available_mb is not None and self.need_mb > self.available_mb

    @property
    def tight(self) -> bool:
        return self.available_mb is not None and self.need_mb > 0.8 * self.available_mb

    def line(self) -> str:
        if self.available_mb is None:
            return f"{self.concurrency} phases need ~{self.need_mb:.0f} MB (this host's free memory is unknown)"
        return (
            f"{self.concurrency} concurrent phases need ~{self.need_mb:.0f} MB "
            f"(worker.base_memory_mb + N x worker.phase_memory_mb); this host has "
            f"{self.available_mb:.0f} MB available: at most {self.fits} fit"
        )


def memory_plan(settings: Settings, concurrency: int, available: float | None = None) -> MemoryPlan:
    """What ``concurrency`` phases on this host need by the measured per-phase memory (configurable:
    worker.phase_memory_mb, worker.base_memory_mb), against what the host has free."""
    w = settings.worker
    available = memory_available_mb() if available is None else available
    need = w.base_memory_mb + concurrency * w.phase_memory_mb
    fits = (
        max(0, int((available - w.base_memory_mb) // w.phase_memory_mb))
        if available is not None
        else None
    )
    return MemoryPlan(concurrency, need, available, fits)


# -- the worker's side ----------------------------------------------------------------------------


@dataclass
class PoolLink:
    """A worker's line to its pool: it says which attempt it runs, and the pool beats for it. When the
    pool is gone (the worker was orphaned) or cannot be told (its pipe full), the worker beats itself."""

    fd: int
    pool_pid: int
    broken: bool = False

    def alive(self) -> bool:
        return not self.broken and os.getppid() == self.pool_pid

    def begin(self, member: str) -> bool:
        """The worker runs ``member``'s attempt: the pool beats for it."""
        return self._say(b"b", f"{member}\tok")

    def end(self, member: str, *, died: bool = False) -> bool:
        """The job is over: its result was reported, or its horse died (the pool's next beat, at once,
        says so: Mother acts at once)."""
        return self._say(b"e", f"{member}\t{'died' if died else 'ok'}")

    def _say(self, kind: bytes, member: str) -> bool:
        if not self.alive():
            return False
        message = b"%d %s %s\n" % (os.getpid(), kind, member.encode())
        if len(message) > MESSAGE_MAX:
            self.broken = True
            log.warning("pool_message_too_long", member=member[:100])
            return False
        try:
            os.write(self.fd, message)
        except OSError as exc:
            # EAGAIN: the pool is not reading; EPIPE: it is gone. Either way, beat for ourselves.
            self.broken = True
            log.warning("pool_unreachable", error=str(exc))
            return False
        return True


# -- the parent -----------------------------------------------------------------------------------


@dataclass
class _Child:
    index: int
    pid: int
    started: float
    # the attempts it runs now (heartbeat members)
    members: set[str] = field(default_factory=set)


@dataclass
class Pool:
    """The parent of a host's workers. ``run_worker(index, link)`` runs one worker in a forked child and
    returns its exit code; ``warm`` makes what the children inherit, before the first fork. ``asker``
    (None: no enrolled host, no beats) is the host's line to Mother."""

    settings: Settings
    concurrency: int
    client: redis.Redis
    run_worker: Callable[[int, PoolLink], int]
    warm: Callable[[], None] = lambda: None
    asker: Asker | None = None
    # the workers exit when the queues are empty (RQ's burst mode): none is replaced, the pool ends with them
    burst: bool = False
    children: dict[int, _Child] = field(default_factory=dict, init=False)
    stopping: int = field(default=0, init=False)
    _exits: dict[int, list[float]] = field(default_factory=dict, init=False)
    _paused: dict[int, float] = field(default_factory=dict, init=False)
    # burst: the slots whose worker ended (not replaced)
    _done: set[int] = field(default_factory=set, init=False)
    _read_fd: int = field(default=-1, init=False)
    _write_fd: int = field(default=-1, init=False)
    _buffer: bytes = field(default=b"", init=False)
    # attempts whose horse died since the last beat (the next beat says so, at once)
    _died: list[str] = field(default_factory=list, init=False)
    # a beat is due now (a worker took or ended a job)
    _beat_now: bool = field(default=False, init=False)
    _pss: float = field(default=0.0, init=False)

    def run(self) -> int:
        """Warm up, fork the workers and keep them: until SIGTERM/SIGINT, which is passed on to every
        worker (RQ's warm shutdown: a job running finishes; a second signal stops them at once)."""
        self.warm()
        self._read_fd, self._write_fd = os.pipe()
        os.set_blocking(self._write_fd, False)
        fcntl.fcntl(self._read_fd, fcntl.F_SETFD, fcntl.FD_CLOEXEC)
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        # everything made so far is shared with every child from here on
        gc.collect()
        gc.freeze()
        log.info("pool_starting", concurrency=self.concurrency, pid=os.getpid())
        interval = self.settings.worker.heartbeat_interval_seconds
        next_beat = next_pss = time.monotonic()
        started = False
        try:
            while self.children or not (self.stopping or self._done):
                # the workers are forked FORK_BATCH at a time between the rounds of beats: the first
                # ones take jobs while the rest are forked, and their attempts must be beaten for
                self._read_messages(0 if self._forked_short() else min(interval, 0.5))
                self._reap()
                now = time.monotonic()
                if not self.stopping:
                    self._respawn(now)
                if not started and not self._forked_short():
                    started = True
                    log.info("pool_started", concurrency=self.concurrency, pid=os.getpid())
                if now >= next_pss:
                    next_pss = now + PSS_EVERY
                    self._pss = self.pss_estimate()
                if now >= next_beat or self._beat_now:
                    if now - next_beat > interval:
                        # the loop was held up (a starved host): the beats came late
                        log.warning("pool_beats_late", late_seconds=round(now - next_beat, 1))
                    next_beat = now + interval
                    self._beat()
        finally:
            self._beat(STOPPED)
        log.info("pool_stopped")
        return 0

    # -- children -----------------------------------------------------------------------------------
    def _fork(self, index: int) -> None:
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                os.close(self._read_fd)
                for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD):
                    signal.signal(sig, signal.SIG_DFL)
                # the pool gone: stop taking jobs (RQ's warm shutdown) and beat for ourselves meanwhile
                parent_death_signal(signal.SIGTERM)
                code = self.run_worker(index, PoolLink(self._write_fd, os.getppid()))
            except BaseException as exc:  # noqa: BLE001 - the child must never return into the pool's loop
                with contextlib.suppress(Exception):
                    log.error(
                        "pool_worker_failed", index=index, error=f"{type(exc).__name__}: {exc}"
                    )
            finally:
                os._exit(code)
        self.children[pid] = _Child(index, pid, time.monotonic())

    def _reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            child = self.children.pop(pid, None)
            if child is None:
                continue
            how = (
                f"killed by signal {os.WTERMSIG(status)}"
                if os.WIFSIGNALED(status)
                else f"exit code {os.WEXITSTATUS(status)}"
            )
            # its attempts are no longer beaten for here: an orphaned horse beats for itself
            quiet = (
                self.stopping or self.burst or (os.WIFEXITED(status) and not os.WEXITSTATUS(status))
            )
            (log.info if quiet else log.warning)(
                "pool_worker_exited",
                index=child.index,
                pid=pid,
                how=how,
                attempts=sorted(child.members),
            )
            if self.burst:
                self._done.add(child.index)
            elif not self.stopping:
                self._paused[child.index] = time.monotonic()
                self._exits.setdefault(child.index, []).append(time.monotonic())

    def _forked_short(self) -> bool:
        """Whether slots are still without a worker (not counting burst's finished ones)."""
        return not self.stopping and len(self.children) + len(self._done) < self.concurrency

    def _respawn(self, now: float) -> None:
        """Fork a worker for up to FORK_BATCH slots that have none."""
        running = {c.index for c in self.children.values()}
        forked = 0
        for index in range(self.concurrency):
            if forked >= FORK_BATCH:
                return
            if index in running or index in self._done:
                continue
            recent = [t for t in self._exits.get(index, []) if now - t < RESPAWN_WINDOW]
            self._exits[index] = recent
            # a worker that keeps dying (a bad config, a broken install) is restarted slowly
            if len(recent) >= RESPAWN_BURST and now - self._paused.get(index, 0) < RESPAWN_PAUSE:
                continue
            self._fork(index)
            forked += 1

    def _on_signal(self, signum: int, _frame: Any) -> None:
        self.stopping += 1
        for pid in list(self.children):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)

    # -- what the workers say, and the beats ---------------------------------------------------------
    def _read_messages(self, timeout: float) -> None:
        try:
            ready, _, _ = select.select([self._read_fd], [], [], timeout)
        except InterruptedError:
            return
        if not ready:
            return
        try:
            chunk = os.read(self._read_fd, 65536)
        except OSError as exc:
            if exc.errno in (errno.EAGAIN, errno.EINTR):
                return
            raise
        self._buffer += chunk
        *lines, self._buffer = self._buffer.split(b"\n")
        for line in lines:
            parts = line.split(b" ", 2)
            if len(parts) != 3:
                log.warning("pool_message_malformed", message=line[:100].decode(errors="replace"))
                continue
            child = self.children.get(int(parts[0]))
            if child is None:
                continue
            member, _, how = parts[2].decode().partition("\t")
            # at once: until then the attempt's key has the life that covered its queue
            self._beat_now = True
            if parts[1] == b"b":
                child.members.add(member)
            else:
                child.members.discard(member)
                if how == "died":
                    self._died.append(member)

    def busy(self) -> int:
        return sum(1 for c in self.children.values() if c.members)

    def _beat(self, line: str | None = None) -> None:
        """One ``beat`` ask: every attempt the workers run is alive, those whose horse died are not, and
        the host's line (``stopped`` when the pool stops). A beat that fails is tried again next round
        (Mother tolerates missed beats up to the timeout)."""
        self._beat_now = False
        if self.asker is None:
            return
        members = [m for c in self.children.values() for m in c.members]
        died, self._died = self._died, []
        try:
            beat(self.asker, members, died=died, line=line or self.host_line())
        except redis.RedisError as exc:
            self._died = died + self._died
            log.warning("pool_heartbeat_failed", attempts=len(members), error=str(exc)[:300])

    def host_line(self) -> dict[str, Any]:
        """What the host's line says: its concurrency, busy workers and workers, and memory (PSS, MB)."""
        return {
            "concurrency": self.concurrency,
            "busy": self.busy(),
            "workers": len(self.children),
            "pss_mb": round(self._pss, 1),
        }

    def pss_estimate(self) -> float:
        """The PSS of the whole tree in MB: the parent's, and a sample of up to PSS_SAMPLE workers and as
        many horses scaled to their number (reading every process's smaps_rollup makes the kernel walk
        each one's page tables: with hundreds of processes that would hold up the beats)."""
        levels: dict[int, list[int]] = {}
        for pid, depth in tree(os.getpid()):
            levels.setdefault(min(depth, 2), []).append(pid)
        total = sum(pss_mb(pid) for pid in levels.get(0, []))
        for depth in (1, 2):
            pids = levels.get(depth, [])
            sample = random.sample(pids, min(PSS_SAMPLE, len(pids)))
            if sample:
                total += sum(pss_mb(pid) for pid in sample) * len(pids) / len(sample)
        return total
