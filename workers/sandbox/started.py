"""A started sandbox: the pipes of its request, result, stderr and bwrap's info, and how a call is
waited for (its timeout, its output's size) and ended (its PID 1 killed: the kernel kills the rest)."""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import time
from typing import Any

import orjson

from workers.sandbox.outcome import decoded, timed_out, too_large

__all__ = ["Started"]

# what is kept of the sandbox's own stderr, for a call that ends without a result
_STDERR_KEEP = 4096
# how long bwrap is given to write its info, or to reap its killed PID 1 and exit
_REAP_SECONDS = 2.0


class Started:
    """A started sandbox: its request's pipe, its result, its stderr, and its PID 1 (from bwrap's info
    descriptor)."""

    def __init__(
        self,
        proc: subprocess.Popen[bytes],
        stdin: int,
        result: int,
        info: int,
        err: int,
        *,
        result_fd: int,
    ) -> None:
        self.proc = proc
        self.stdin = stdin
        # the result's descriptor number in the sandbox
        self.result_fd = result_fd
        self.result, self.info, self.err = result, info, err
        self.buffers = {result: bytearray(), info: bytearray(), err: bytearray()}
        self.closed = False

    def alive(self) -> bool:
        return not self.closed and self.proc.poll() is None

    def call(self, request: bytes, timeout_s: float, max_bytes: int) -> dict[str, Any]:
        """Send ``request``, wait for the outcome (or the timeout, or ``max_bytes`` of output)."""
        deadline = time.monotonic() + timeout_s
        pending = memoryview(request)
        open_fds = set(self.buffers)
        os.set_blocking(self.stdin, False)
        try:
            while open_fds:
                left = deadline - time.monotonic()
                if left <= 0:
                    self.kill()
                    return timed_out(timeout_s)
                writing = [self.stdin] if self.stdin >= 0 else []
                ready, can_write, _ = select.select(list(open_fds), writing, [], left)
                if can_write:
                    pending = self._send(pending)
                for fd in ready:
                    if self._read(fd, max_bytes):
                        open_fds.discard(fd)
                if self.oversize:
                    self.kill()
                    return too_large(max_bytes)
        finally:
            self._close()
        # everything in the sandbox has closed its ends: its first process is gone, or going
        try:
            status = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.kill()
            status = self.proc.returncode
        return self._outcome(status)

    oversize = False

    def _send(self, pending: memoryview) -> memoryview:
        """Write what the pipe takes of ``pending`` and return the rest; once all is written (or the
        sandbox has gone), close the pipe: the entry reads its request to the end."""
        try:
            pending = pending[os.write(self.stdin, pending) :]
        except BlockingIOError:
            return pending
        # the sandbox ended before it read its request: its stderr says why
        except BrokenPipeError:
            pending = pending[len(pending) :]
        if not pending:
            os.close(self.stdin)
            self.stdin = -1
        return pending

    def _read(self, fd: int, max_bytes: int) -> bool:
        """Read what ``fd`` has; True at its end."""
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            return True
        buffer = self.buffers[fd]
        buffer += chunk
        if fd == self.result and len(buffer) > max_bytes:
            self.oversize = True
        if fd == self.err and len(buffer) > 2 * _STDERR_KEEP:
            del buffer[:-_STDERR_KEEP]
        return False

    def _close(self) -> None:
        if self.closed:
            return
        self.closed = True
        for fd in (self.stdin, *self.buffers):
            if fd >= 0:
                os.close(fd)
        self.stdin = -1

    def _outcome(self, status: int | None) -> dict[str, Any]:
        last = [
            line
            for line in self.buffers[self.err].decode("utf-8", "replace").splitlines()
            if line.strip()
        ]
        why = f": {last[-1].strip()[:300]}" if last else ""
        ended = f"the tool's sandbox ended without a result (exit status {status}){why}"
        return decoded(bytes(self.buffers[self.result]), ended)

    def kill(self) -> None:
        """End the sandbox and leave nothing of it: kill its PID 1 (the kernel then kills every process
        of its namespace), let bwrap reap it and exit, reap bwrap, and close the pipes. bwrap itself is
        killed only when it does not exit: killed first, its PID 1 would be handed to the host's init
        unreaped (a zombie, or a live sandbox where the kill missed it)."""
        pid = self._sandbox_pid()
        if pid > 0:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=_REAP_SECONDS)
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=5)
        self._close()

    def _sandbox_pid(self) -> int:
        """The pid of the sandbox's PID 1, from bwrap's info (written once the sandbox is made; a
        sandbox being made is waited for, briefly); 0 when bwrap has gone or never says."""
        deadline = time.monotonic() + _REAP_SECONDS
        while not self.closed:
            with contextlib.suppress(BlockingIOError, OSError):
                os.set_blocking(self.info, False)
                self.buffers[self.info] += os.read(self.info, 1 << 16)
            if self.buffers[self.info].rstrip().endswith(b"}") or self.proc.poll() is not None:
                break
            left = deadline - time.monotonic()
            if left <= 0:
                break
            select.select([self.info], [], [], min(left, 0.05))
        try:
            info = orjson.loads(bytes(self.buffers[self.info]) or b"{}")
            return int(info.get("child-pid", 0))
        except (orjson.JSONDecodeError, ValueError, TypeError, AttributeError):
            return 0
