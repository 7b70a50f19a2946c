"""The embedded server starts with RedisJSON/RediSearch and AOF, and fails with one clear line."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import redis

from mother.errors import (
    DataDirInUse,
    DataDirNotWritable,
    ModuleLoadFailed,
    PortInUse,
    ServerBinaryMissing,
    ServerError,
)
from mother.server import EmbeddedRedis, free_port
from tests.conftest import run_cli


def test_json_and_search_work_and_aof_is_on(r: redis.Redis, embedded: EmbeddedRedis) -> None:
    """JSON.SET/GET and FT.SEARCH work on the session server, with appendonly on."""
    assert r.execute_command("JSON.SET", "a", "$", '{"x":1}') == "OK"
    assert r.execute_command("JSON.GET", "a") == '{"x":1}'
    r.execute_command(
        "FT.CREATE",
        "idx:t",
        "ON",
        "JSON",
        "PREFIX",
        "1",
        "a",
        "SCHEMA",
        "$.x",
        "AS",
        "x",
        "NUMERIC",
    )
    assert r.config_get("appendonly") == {"appendonly": "yes"}
    assert (Path(embedded.dir) / "appendonlydir").is_dir()


def test_unix_socket_and_data_survive_restart(tmp_path: Path) -> None:
    """A server on a unix socket keeps a JSON document across a clean stop and start (AOF)."""
    sock = tmp_path / "r.sock"
    with EmbeddedRedis(unix_socket=sock, dir=tmp_path / "d") as server:
        server.client().execute_command("JSON.SET", "doc", "$", '{"kept":true}')
    with EmbeddedRedis(unix_socket=sock, dir=tmp_path / "d") as server:
        assert server.client().execute_command("JSON.GET", "doc") == b'{"kept":true}'


def test_port_in_use() -> None:
    """Starting on a taken port raises PortInUse, and the CLI prints one line and exits 2."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        with pytest.raises(PortInUse, match=f"port {port} on 127.0.0.1 is already in use"):
            EmbeddedRedis(port=port, dir=Path("/tmp")).start()
        result = run_cli("server", "--port", str(port), "--dir", "/tmp/mother-port-test")
    # not a TCP port: an OverflowError from bind() (70000) or a random port (0)
    for bad in (0, 70000):
        with pytest.raises(
            ServerError, match=f"port {bad} is not a TCP port; pick one from 1 to 65535"
        ):
            EmbeddedRedis(port=bad, dir=Path("/tmp")).start()
    assert result.returncode == 2
    assert (
        result.stderr.strip()
        == f"error[server_port_in_use]: port {port} on 127.0.0.1 is already in use; pick another with --port"
    )


def test_restart_on_the_same_port_right_after_a_stop(tmp_path: Path) -> None:
    """A stopped server's TIME_WAIT sockets (it closed its clients' connections) do not make the
    next start on its port fail with PortInUse."""
    port = free_port()
    with EmbeddedRedis(port=port, dir=tmp_path) as server:
        client = server.client()
        assert client.set("k", "v")
    with EmbeddedRedis(port=port, dir=tmp_path) as again:
        assert again.client().get("k") == b"v"


def test_one_server_per_data_dir(tmp_path: Path) -> None:
    """A second server on a data dir in use is refused (they would overwrite each other's AOF); the
    dir is free again once the first stops, and the CLI says so in one line."""
    with EmbeddedRedis(dir=tmp_path) as first:
        with pytest.raises(
            DataDirInUse,
            match=rf"data dir {tmp_path} is in use by the server of pid \d+ "
            rf"\(redis://127\.0\.0\.1:{first.port}/0\); stop that server",
        ):
            EmbeddedRedis(dir=tmp_path).start()
        result = run_cli("server", "--port", str(free_port()), "--dir", str(tmp_path))
        assert result.returncode == 2 and result.stderr.startswith(
            "error[server_dir_in_use]: data dir "
        )
        # the first one is untouched
        assert first.client().ping()
    with EmbeddedRedis(dir=tmp_path) as again:
        assert again.client().ping()


def test_missing_binary(tmp_path: Path) -> None:
    """A binary that is not there is named in the error."""
    with pytest.raises(ServerBinaryMissing, match="missing or not executable"):
        EmbeddedRedis(dir=tmp_path, binary=tmp_path / "nope").start()


def test_module_fails_to_load(tmp_path: Path) -> None:
    """A module file that is not a loadable library stops the start with ModuleLoadFailed."""
    mods = tmp_path / "mods"
    mods.mkdir()
    for name in ("rejson.so", "redisearch.so"):
        (mods / name).write_text("not an ELF file")
    with pytest.raises(ModuleLoadFailed, match="a module failed to load"):
        EmbeddedRedis(port=free_port(), dir=tmp_path / "d", modules_directory=mods).start()


def test_data_dir_not_writable(tmp_path: Path) -> None:
    """A data dir that cannot be created or written is refused before starting anything."""
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(DataDirNotWritable, match="is not writable"):
        EmbeddedRedis(dir=blocker / "sub").start()
    result = run_cli("server", "--port", str(free_port()), "--dir", str(blocker / "sub"))
    assert result.returncode == 2
    assert result.stderr.startswith("error[server_dir_not_writable]: data dir")
    assert len(result.stderr.strip().splitlines()) == 1


def test_an_interrupt_while_it_starts_leaves_no_server(tmp_path: Path) -> None:
    """A Ctrl-C that lands once the server process exists but before it answered: the start is
    interrupted and the server stopped, the data dir free again (it was left running, holding it)."""
    import os
    import signal

    server = EmbeddedRedis(port=free_port(), dir=tmp_path)
    started: list[int] = []

    def interrupt(_signum: int, _frame: object) -> None:
        if server._proc is None:
            return  # not launched yet: the next tick
        started.append(server._proc.pid)
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, 0.002, 0.002)
    try:
        with pytest.raises(KeyboardInterrupt):
            server.start()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert started and server._proc is None
    with pytest.raises(ProcessLookupError):
        os.kill(started[0], 0)
    with EmbeddedRedis(port=free_port(), dir=tmp_path) as again:
        assert again.client().ping()


def test_mother_server_stops_on_a_ctrl_c_while_it_starts(tmp_path: Path) -> None:
    """`mother server` started with SIGINT ignored (as a parent that ignores it passes on) and sent one as
    soon as it holds its data dir, while the server starts: it stops the server and exits 0."""
    import signal
    import subprocess

    from tests.conftest import MOTHER_BIN, cli_env, sigint_ignored
    from tests.test_pipeline import wait_until

    proc = subprocess.Popen(
        [str(MOTHER_BIN), "server", "--port", str(free_port()), "--dir", str(tmp_path)],
        env=cli_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        preexec_fn=sigint_ignored,
    )
    try:
        lock = tmp_path / ".mother-server.lock"
        wait_until(lambda: lock.exists() and "pid" in lock.read_text(), timeout=60)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 0, (out, err)
    with EmbeddedRedis(port=free_port(), dir=tmp_path) as again:
        assert again.client().ping()
