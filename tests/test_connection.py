"""Connecting: a forked child starts on the connection its parent opened for it (ForkHandoffPool), and a
starting Mother or worker waits for its Redis as long as it is told to (connect_waiting)."""

from __future__ import annotations

import os
import time

import redis

from mother.connection import ForkHandoffPool, connect
from mother.server import free_port
from tests.conftest import Pipeline
from tests.test_pipeline import example


def _ids(client: redis.Redis) -> set[int]:
    return {int(c["id"]) for c in client.client_list()}


def _in_child(client: redis.Redis) -> tuple[int, int]:
    """Fork; the child reports the CLIENT ID of its first command and of a pipeline's, then exits."""
    read, write = os.pipe()
    pid = os.fork()
    # the child: never returns
    if pid == 0:
        try:
            first = client.client_id()
            pipe = client.pipeline(transaction=False)
            pipe.client_id()
            os.write(write, f"{first} {pipe.execute()[0]}".encode())
        finally:
            os._exit(0)
    os.close(write)
    _, status = os.waitpid(pid, 0)
    assert status == 0
    first, piped = os.read(read, 100).decode().split()
    os.close(read)
    return int(first), int(piped)


def test_forked_child_starts_on_the_connection_its_parent_opened(redis_url: str) -> None:
    """open_for_child connects one connection that the next forked child uses as its own (commands and
    pipelines alike), the parent never uses it, close_handoff closes it, and a later child connects anew."""
    client = connect(redis_url)
    pool = client.connection_pool
    assert isinstance(pool, ForkHandoffPool)
    own = client.client_id()
    before = _ids(client)
    pool.open_for_child()
    handoff = _ids(client) - before
    assert len(handoff) == 1
    (handoff_id,) = handoff
    # the parent keeps its own connection
    assert client.client_id() == own
    # its own, taken: the next one the pool gives is new
    held = pool.get_connection()
    # and not the child's
    spare = pool.get_connection()
    try:
        spare.send_command("CLIENT", "ID")
        assert spare.read_response() not in (handoff_id, own)
    finally:
        pool.release(spare)
        pool.release(held)
    assert _in_child(client) == (handoff_id, handoff_id)
    pool.close_handoff()
    deadline = time.monotonic() + 5
    while handoff_id in _ids(client) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert handoff_id not in _ids(client)
    # nothing handed off: the child connects for itself
    first, _ = _in_child(client)
    assert first not in (handoff_id, own)
    # closing twice, or with nothing open, is harmless
    pool.close_handoff()
    client.close()


def test_worker_closes_the_connections_it_opened_for_its_horses(pipeline: Pipeline) -> None:
    """Across runs, the connections the workers open for their horses (two per phase) are all closed
    again: a leak would add 2 x 12 clients over these 12 phases; only a few may come and go with the
    processes' threads."""
    warm = pipeline.client.submit(example("three-phase"))
    pipeline.wait(warm)
    before = len(pipeline.redis.client_list())
    run_ids = [pipeline.client.submit(example("three-phase")) for _ in range(4)]
    for run_id in run_ids:
        assert pipeline.wait(run_id).termination.reason == "success"
    deadline = time.monotonic() + 10
    while len(pipeline.redis.client_list()) > before + 4 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert len(pipeline.redis.client_list()) <= before + 4


def test_a_long_running_process_waits_for_redis_only_as_long_as_told(tmp_path) -> None:
    """`mother run` / `mother worker` against a Redis that never comes: with MOTHER_REDIS_WAIT_SECONDS=0 one
    line at once; with 1, the wait is logged and the same line says how long it waited."""
    from tests.conftest import run_cli

    url = f"redis://127.0.0.1:{free_port()}/0"
    for command in ("run", "worker"):
        at_once = run_cli(command, env={"MOTHER_REDIS_URL": url, "MOTHER_REDIS_WAIT_SECONDS": "0"})
        assert at_once.returncode == 2
        # one line: no wait was logged
        assert at_once.stderr.strip().splitlines() == [at_once.stderr.strip()]
        assert at_once.stderr.startswith(f"error[redis_unavailable]: cannot reach Redis at {url}")
        waited = run_cli(
            command,
            env={
                "MOTHER_REDIS_URL": url,
                "MOTHER_REDIS_WAIT_SECONDS": "1",
                "MOTHER_LOG_FORMAT": "json",
            },
        )
        assert waited.returncode == 2
        lines = waited.stderr.strip().splitlines()
        assert '"event":"redis_unavailable"' in lines[0] and '"during":"startup"' in lines[0]
        assert lines[-1].startswith(f"error[redis_unavailable]: cannot reach Redis at {url}")
        assert lines[-1].endswith("(waited 1 s; MOTHER_REDIS_WAIT_SECONDS sets how long)")


def test_wrong_credentials_are_said_so_and_not_waited_for(tmp_path) -> None:
    """A server that refuses our password is not 'unreachable': the error says to fix the URL, and a
    starting process does not wait for it (redis-py's AuthenticationError is a ConnectionError)."""
    from mother.connection import connect_waiting
    from mother.errors import RedisUnavailable
    from mother.server import EmbeddedRedis

    class Log:
        def __init__(self) -> None:
            self.lines: list[str] = []

        def warning(self, event: str, **_: object) -> None:
            self.lines.append(event)

        info = warning

    with EmbeddedRedis(dir=tmp_path / "r", appendfsync="no") as server:
        redis.Redis.from_url(server.url).config_set("requirepass", "right")
        url = server.url.replace("redis://", "redis://:wrong@")
        log = Log()
        try:
            connect_waiting(url, 30, log)
        except RedisUnavailable as exc:
            assert exc.message.startswith(
                f"Redis at {url.replace(':wrong@', ':***@')} refused our credentials"
            )
            assert exc.message.endswith("; fix the URL")
        else:
            raise AssertionError("a wrong password was accepted")
        assert log.lines == []
        assert connect_waiting(server.url.replace("redis://", "redis://:right@"), 30, log).ping()
