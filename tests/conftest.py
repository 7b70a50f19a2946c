"""Shared fixtures: one real embedded Redis (Valkey + RedisJSON + RediSearch) per session.

Every test gets it flushed. Nothing here is a double: tests talk to the real
server the product ships with, and CLI tests run the real ``mother`` command.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from mother.server import EmbeddedRedis
from mother.stack import DEV_ENV, LocalStack

MOTHER_BIN = Path(sys.executable).parent / "mother"
# what the CLI prints is read at one width, whatever runs the tests (a terminal, a pipe, an xdist
# worker, where rich would choose 80 columns)
os.environ.setdefault("COLUMNS", "200")
ROOT = Path(__file__).resolve().parents[1]


def in_ci() -> bool:
    """Whether this is CI (``CI`` set true, as CI services and .ci/run set it)."""
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def need(why_not: str | None) -> None:
    """A test's real part (bubblewrap, chromium, iproute2, Ceph, redis-cli, npm) is missing when
    ``why_not`` says why: the test skips, saying so; in CI, where .ci/run installs every part, it fails."""
    if why_not is None:
        return
    if in_ci():
        pytest.fail(f"CI: {why_not} (.ci/run installs it; it may not skip in CI)", pytrace=False)
    pytest.skip(why_not)


def gated_spec(user: str, **more: Any) -> dict[str, Any]:
    """A run whose one phase waits for a person's approval before it starts (no approvers named: its
    submitter decides)."""
    return {
        "user_id": user,
        "task": "Deploy the release",
        "pipeline": [
            {"name": "deploy", "role": "deployer", "model": "scripted", "require_approval": True}
        ],
        "scripts": {"deployer": [{"text": "deployed"}]},
        **more,
    }


def pytest_collection_finish(session: pytest.Session) -> None:
    """The S3 store's tests are collected: their gateway starts now, in the background (tests/s3_server.py).
    Under pytest-xdist each worker collects every test and runs some: the gateway starts at its first
    use, in the worker that runs the S3 tests."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return
    if any("s3" in item.name for item in session.items):
        from tests.s3_server import prestart

        prestart()


def pytest_sessionfinish(session: pytest.Session) -> None:
    from tests.s3_server import stop_shared

    stop_shared()


@pytest.fixture(scope="session", autouse=True)
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The session's data directory (XDG_DATA_HOME, so every process the tests start inherits it);
    afterwards, nothing of ours left in the checkout or the user's home."""
    home = tmp_path_factory.mktemp("data-home")
    before = os.environ.get("XDG_DATA_HOME")
    os.environ["XDG_DATA_HOME"] = str(home)
    had = (ROOT / ".mother").exists()
    yield home / "mother"
    if before is None:
        os.environ.pop("XDG_DATA_HOME", None)
    else:
        os.environ["XDG_DATA_HOME"] = before
    left = ROOT / ".mother" / "workspaces"
    assert had or not left.exists(), f"the tests left workspaces in the checkout: {left}"


@pytest.fixture(scope="session")
def embedded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedRedis]:
    """The session's embedded server, on a random free port."""
    server = EmbeddedRedis(dir=tmp_path_factory.mktemp("redis"), appendfsync="no")
    with server:
        yield server


@pytest.fixture(scope="session")
def redis_url(embedded: EmbeddedRedis) -> str:
    return embedded.url


@pytest.fixture
def r(embedded: EmbeddedRedis) -> Iterator[redis.Redis]:
    """A decoded client on a freshly flushed server."""
    client = redis.Redis.from_url(embedded.url, decode_responses=True)
    client.flushall()
    yield client
    client.close()


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No MOTHER_* variables and a cwd without mother.yaml; returns the cwd."""
    for name in list(os.environ):
        if name.startswith("MOTHER_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def cli_env(env: dict[str, str] | None = None, drop: tuple[str, ...] = ()) -> dict[str, str]:
    """This process's environment for a ``mother`` command: MOTHER_* (and ``drop``) left out, ``env`` added."""
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith("MOTHER_") and k not in drop},
        **(env or {}),
    }


def run_cli(
    *args: str, env: dict[str, str] | None = None, cwd: Path | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """Run the installed ``mother`` command; MOTHER_* from the parent are dropped unless given."""
    base = cli_env(env)
    base.setdefault("COLUMNS", "200")
    return subprocess.run(
        [str(MOTHER_BIN), *args],
        env=base,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def cli(*args: str, url: str, input: str | None = None) -> Any:
    """Run ``mother ARGS`` in this process (typer's test runner) against ``url``: what a subprocess would
    prove no better for a command that only reads and prints. Returns click's Result (stdout, stderr,
    exit_code); ``main``'s one-line errors are exercised by :func:`run_cli`."""
    from typer.testing import CliRunner

    from mother.cli import app

    env = {"MOTHER_REDIS_URL": url, "COLUMNS": "200", "NO_COLOR": "1"}
    return CliRunner().invoke(app, list(args), env=env, input=input, catch_exceptions=False)


# -- the run pipeline: real Mother and RQ worker processes -----------------------------------

FAST_ENV = {
    "MOTHER_SERVICE__LEASE_SECONDS": "2",
    "MOTHER_SERVICE__WATCHDOG_INTERVAL_SECONDS": "0.3",
    "MOTHER_SERVICE__HEARTBEAT_TIMEOUT_SECONDS": "3",
    "MOTHER_SERVICE__CLAIM_IDLE_SECONDS": "2",
    "MOTHER_SERVICE__MAX_DELIVERIES": "2",
    "MOTHER_WORKER__HEARTBEAT_INTERVAL_SECONDS": "0.5",
    # the examples kill workers, hang and raise on purpose
    **DEV_ENV,
}


class Pipeline:
    """A server with Mother and workers running against it, and a client."""

    def __init__(self, server: EmbeddedRedis, stack: LocalStack, workspace: Path) -> None:
        from mother.client import MotherClient
        from mother.config import load_settings

        self.server, self.stack, self.workspace = server, stack, workspace
        self.url = server.url
        self.client = MotherClient(settings=load_settings(redis_url=server.url))
        self.redis = self.client.redis

    def wait(self, run_id: str, timeout: float = 60):
        """The run's envelope once it ended, and once the rest of its end is applied (its conflicts
        closed, its counters released: Mother writes the record first, ``mother:ending`` says what is
        left), so a test reads what the end did, not what it was about to do."""
        from mother import keys
        from tests.test_pipeline import wait_until

        envelope = self.client.wait(run_id, timeout)
        wait_until(lambda: self.redis.zscore(keys.RUNS_ENDING, run_id) is None, timeout=30)
        return envelope


def start_pipeline(
    tmp: Path,
    *,
    mothers: int = 1,
    workers: int = 2,
    env: dict[str, str] | None = None,
    concurrency: int = 1,
) -> Pipeline:
    """An embedded server, Mother(s) and ``workers`` worker processes, each running ``concurrency`` RQ
    workers (more than one: a pool, workers/pool.py)."""
    server = EmbeddedRedis(dir=tmp / "redis", appendfsync="no").start()
    workspace = tmp / "workspaces"
    stack = LocalStack(
        server.url,
        workers=workers,
        concurrency=concurrency,
        mothers=mothers,
        log_dir=tmp / "logs",
        env={**FAST_ENV, "MOTHER_WORKER__WORKSPACE_ROOT": str(workspace), **(env or {})},
    ).start()
    return Pipeline(server, stack, workspace)


def start_with_libraries(tmp: Path, env: dict[str, str] | None = None) -> Pipeline:
    """A pipeline whose store holds the spec's three example libraries (examples/libraries/)."""
    from mother.clock import ServerClock
    from mother.libraries.ingest import create_example_libraries

    p = start_pipeline(tmp, env=env)
    assert create_example_libraries(p.redis, ServerClock(p.redis).now_iso())
    return p


def wait_for_person(p: Pipeline, run_id: str, timeout: float = 60) -> Any:
    """The run's state once it waits for a person (it must not end first; not yet taken in is waited out)."""
    from mother.errors import NotFound

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            state = p.client.status(run_id)
        except NotFound:
            state = None
        if state is not None:
            assert state.status != "terminated", f"{run_id} ended {state.reason}"
            if state.status == "waiting":
                return state
        time.sleep(0.05)
    raise AssertionError(f"{run_id} did not wait for a person within {timeout} s")


def stop_pipeline(p: Pipeline) -> None:
    p.stack.stop()
    p.server.stop()


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pipeline]:
    """Mother + 2 workers on their own embedded server, shared by a test module (no flushing); their
    hosts registered before the first test."""
    p = start_pipeline(tmp_path_factory.mktemp("pipeline"))
    p.stack.wait_for_hosts(2)
    yield p
    stop_pipeline(p)


# -- the shipped ACL file, and `mother up --dev` -------------------------------------------------------

SHIPPED_ACL = ROOT / "deploy" / "users.acl"


def attacker_host(
    admin: redis.Redis, url: str, name: str = "mallory-host"
) -> tuple[str, redis.Redis]:
    """An enrolled host whose password an attacker holds (it leaked): (its name, a connection as it). Asked
    again for the same name, its password is rotated (earlier connections as it close)."""
    from mother import keys
    from mother.clock import ServerClock
    from mother.identities import hosts, party_url

    now = ServerClock(admin).now_iso()
    if hosts.load(admin, name) is None:
        _host, password = hosts.add(admin, name, ["agents", "tools"], now)
    else:
        password = hosts.rotate(admin, name, now)
    client = redis.Redis.from_url(
        party_url(url, keys.host_user(name), password), decode_responses=True
    )
    return name, client


def tool_calls_counted(client: redis.Redis, tool_id: str, calls: int) -> dict[str, Any]:
    """``tool_stats:{tool_id}`` once it counts ``calls`` calls (each a host's ask Mother applies)."""
    import orjson

    from mother import keys
    from tests.test_pipeline import wait_until

    def counted() -> dict[str, Any] | None:
        raw = client.execute_command("JSON.GET", keys.tool_stats_key(tool_id))
        doc = orjson.loads(raw) if raw else None
        return doc if doc and doc["success_count"] + doc["failure_count"] >= calls else None

    found: dict[str, Any] = wait_until(counted)
    return found


def as_user(url: str, user: str) -> str:
    """``url`` as one of the shipped users (their CHANGE-ME passwords), or the tests' ``admin``."""
    return url.replace("redis://", f"redis://{user}:CHANGE-ME-{user}@")


def start_acl_stack(
    tmp: Path, env: dict[str, str] | None = None
) -> tuple[EmbeddedRedis, LocalStack]:
    """The embedded server with the shipped ACL file (its administrator template enabled: the tests, and
    the stack, make users with it); Mother on the mother user, two enrolled hosts serving agents, tools
    and maintenance; ``env`` for every process."""
    acl = tmp / "users.acl"
    # the shipped administrator template, enabled
    acl.write_text(SHIPPED_ACL.read_text().replace("user admin off ", "user admin on "))
    server = EmbeddedRedis(
        dir=tmp / "redis", appendfsync="no", extra_args=["--aclfile", str(acl)]
    ).start()
    stack = LocalStack(
        as_user(server.url, "mother"),
        workers=2,
        admin_url=as_user(server.url, "admin"),
        log_dir=tmp / "logs",
        env={**FAST_ENV, "MOTHER_WORKER__WORKSPACE_ROOT": str(tmp / "ws"), **(env or {})},
        wait_hosts=True,
    ).start()
    return server, stack


def sigint_ignored() -> None:
    """A child's ``preexec_fn``: SIGINT ignored, as a parent that ignores it (a test runner's worker, a
    shell without job control) passes on; the child's own handler is all that can see a Ctrl-C."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)


def start_up_dev(
    tmp: Path, env: dict[str, str], *, stderr: Any = subprocess.PIPE, **popen: Any
) -> Any:
    """``mother up --dev`` with no workers and no dashboard on a free port, as a process (stdout piped)."""
    import socket

    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    return subprocess.Popen(
        [str(MOTHER_BIN), "up", "--dev", "--workers", "0", "--dashboard-port", "0", "--port",
         str(port), "--dir", str(tmp / "redis")],
        env=cli_env(env),
        stdout=subprocess.PIPE,
        stderr=stderr,
        stdin=subprocess.DEVNULL,
        text=True,
        **popen,
    )  # fmt: skip


def beating(value: str | None) -> bool:
    """Whether an attempt's heartbeat key says a worker runs it: not gone, not Mother's dispatch mark
    (``dispatched``, ``dispatched:{host}``), not ``reported``."""
    return value is not None and not value.startswith("dispatched") and value != "reported"


@contextlib.contextmanager
def paused(p: Pipeline, name: str = "worker-0") -> Iterator[str]:
    """The stack's worker process tree ``name`` stopped (SIGSTOP) for the block: its host stays enrolled
    (its line lapses after a heartbeat timeout), so what Mother queues for it waits (an idle worker's
    blocked pop may still take one job off the queue, server-side). Yields its host's name."""
    import signal

    pool = p.stack.procs[name]
    os.killpg(pool.pid, signal.SIGSTOP)
    try:
        yield host_of_worker(p, name)
    finally:
        os.killpg(pool.pid, signal.SIGCONT)


def host_of_worker(p: Pipeline, name: str) -> str:
    """The host the stack's worker process ``name`` (worker-N) runs as: ``{host_prefix}-N``."""
    return f"{p.stack.host_prefix}-{name.split('-', 1)[1]}"


@contextlib.contextmanager
def inproc_host(url: str, name: str = "inproc", *, beating: bool = True) -> Iterator[str]:
    """This test process as enrolled host ``name`` (MOTHER_REDIS_URL its URL, and workers.host's current
    host): a phase job's code runs here as a worker host's would. With ``beating`` it beats from a
    thread, so Mother counts it live and queues jobs on it. Yields its URL."""
    import threading

    from mother import keys
    from mother.clock import ServerClock
    from mother.identities import hosts, party_url
    from workers import phase
    from workers.asking import Asker
    from workers.heartbeat import beat
    from workers.host import Host, set_current

    admin = redis.Redis.from_url(url, decode_responses=True)
    _host, password = hosts.add(admin, name, ["agents", "tools"], ServerClock(admin).now_iso())
    host_url = party_url(url, keys.host_user(name), password)
    before = os.environ.get("MOTHER_REDIS_URL")
    os.environ["MOTHER_REDIS_URL"] = host_url
    phase.runtime.cache_clear()
    set_current(Host(name))
    stop = threading.Event()

    def beats() -> None:
        client = redis.Redis.from_url(host_url, decode_responses=True)
        line = {"concurrency": 1, "busy": 0, "workers": 1}
        while not stop.is_set():
            beat(Asker(client, name), [], line=line)
            stop.wait(0.3)
        client.close()

    thread = threading.Thread(target=beats, daemon=True)
    if beating:
        thread.start()
    try:
        yield host_url
    finally:
        stop.set()
        if beating:
            thread.join(2)
        set_current(None)
        phase.runtime.cache_clear()
        if before is None:
            os.environ.pop("MOTHER_REDIS_URL", None)
        else:
            os.environ["MOTHER_REDIS_URL"] = before
        hosts.remove(admin, name)
        admin.close()


def live_host(
    r: redis.Redis,
    host: str = "t-host",
    concurrency: int = 4,
    queues: tuple[str, ...] | list[str] = ("agents", "tools"),
) -> str:
    """Enroll ``host`` (its record; no ACL user: nothing connects as it) and give it a line that does not
    expire, as Mother writes from its beats (mother.hosts): Mother queues jobs on it."""
    import orjson

    from mother import keys

    record = {
        "name": host,
        "queues": list(queues),
        "enrolled_at": "2026-01-01T00:00:00.000Z",
        "password_sha256": "0" * 64,
    }
    r.execute_command("JSON.SET", keys.host_key(host), "$", orjson.dumps(record))
    r.sadd(keys.HOSTS, host)
    r.set(keys.host_alive_key(host), orjson.dumps({"concurrency": concurrency, "busy": 0}))
    return host


def quick_spec(user: str, run_id: str | None = None) -> dict[str, Any]:
    """A one-phase run for ``user`` whose scripted coder says ok."""
    spec: dict[str, Any] = {
        "user_id": user,
        "task": "say ok",
        "pipeline": [{"name": "only", "role": "coder", "model": "scripted"}],
        "scripts": {"coder": [{"text": "ok"}]},
    }
    if run_id:
        spec["run_id"] = run_id
    return spec


def first_accepted(url: str, spec: dict[str, Any], timeout: float) -> tuple[Any, str, float]:
    """Submit ``spec`` as the principal of ``url`` until the server lets it in (after a restart or a
    failover its user is made again by Mother meanwhile): the client, the run's id and the seconds it
    took from the first try."""
    from mother.client import MotherClient
    from mother.config import load_settings
    from mother.errors import RedisUnavailable

    started = time.monotonic()
    while True:
        try:
            client = MotherClient(settings=load_settings(redis_url=url))
            run_id = client.submit(dict(spec))
            return client, run_id, time.monotonic() - started
        except (RedisUnavailable, redis.RedisError):
            if time.monotonic() - started > timeout:
                raise
            time.sleep(0.05)


def bpe_tokenizer(folder: Path) -> tuple[Path, list[str]]:
    """A real BPE tokenizer.json trained offline on a third of Python's own documentation topics (in
    ``folder``), and the topics' texts."""
    from pydoc_data.topics import topics

    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    texts = [v for _, v in sorted(topics.items())]
    tok = Tokenizer(models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.train_from_iterator(
        texts[::3],
        trainers.BpeTrainer(
            vocab_size=8000,
            special_tokens=["[UNK]"],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        ),
    )
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "tokenizer.json"
    tok.save(str(path))
    return path, texts
