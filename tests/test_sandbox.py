"""The tool sandbox, attacked: a hostile test suite run through ``run_tests`` (directly, and through an
agent's tool call in a real run) tries to read the worker's environment and /proc/*/environ, reach
Redis and the model endpoint, write outside its workspace and into another run's, read the worker's
config and data directory, fork-bomb, fill the disk, leave a setsid child behind its timeout; a
repository's config tries to make git run a command. Each attempt must fail, with nothing leaked and
a marker file on the host untouched. Also: network and environment only as a manifest asks and the
deployment allows, limits, and a worker that will not start without its sandbox.

Every sandboxed test skips, saying why, on a host where bubblewrap cannot make a sandbox, and fails
in CI (.ci/run installs it); the git and file-path hardening is tested unsandboxed too."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mother import secrets
from mother.config import Settings
from schemas import RunSpec
from schemas.tool import DeterministicTool
from tests.conftest import (
    Pipeline,
    need,
    run_cli,
    sigint_ignored,
    start_pipeline,
    start_up_dev,
    stop_pipeline,
)
from tests.test_pipeline import wait_until
from tests.test_tools import _tool
from workers.sandbox.bwrap import Sandbox, SandboxUnavailable, hand_over
from workers.sandbox.rules import CallPolicy, ToolRules
from workers.sandbox.state import SandboxState, sandbox_state
from workers.tools import shipped_tools
from workers.tools.executor import ToolExecutor

SECRET = "hunter2-0f1e2d"
FIXTURES = frozenset(
    f"tests.tool_fixtures.{name}"
    for name in ("sleepy", "connect", "environment", "hog_memory", "spin")
)


@pytest.fixture(scope="module")
def maybe_sandbox() -> Sandbox | None:
    """This host's sandbox, or None where bubblewrap cannot make one."""
    return sandbox_state(Settings()).sandbox


@pytest.fixture(scope="module")
def sandbox(maybe_sandbox: Sandbox | None) -> Sandbox:
    if maybe_sandbox is None:
        need(f"no tool sandbox on this host: {sandbox_state(Settings()).detail}")
    return maybe_sandbox


@pytest.fixture
def secret_env(monkeypatch: pytest.MonkeyPatch, redis_url: str) -> None:
    """The test process holds what a worker holds: its Redis URL with a password, the libraries' hash
    key, a model's API key."""
    port = redis_url.rsplit(":", 1)[1].split("/")[0]
    monkeypatch.setenv("MOTHER_REDIS_URL", f"redis://worker:{SECRET}@127.0.0.1:{port}/0")
    monkeypatch.setenv("MOTHER_LIBRARIES__HASH_KEY", f"hash-{SECRET}")
    monkeypatch.setenv("OPENAI_API_KEY", f"sk-{SECRET}")


@pytest.fixture
def listener() -> Iterator[int]:
    """A TCP port listening on the host's loopback (what a model endpoint or Redis looks like)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    yield sock.getsockname()[1]
    sock.close()


def _run_tests(**changes: Any) -> DeterministicTool:
    return DeterministicTool.model_validate({**shipped_tools()["run_tests"].to_dict(), **changes})


# -- the hostile suite -------------------------------------------------------------------------------

HOSTILE = """
import json, os, socket, subprocess, sys, time
from pathlib import Path

PORTS = {ports!r}
READS = {reads!r}
WRITES = {writes!r}
REPORT = Path("report")
REPORT.mkdir(exist_ok=True)


def report(name, value):
    (REPORT / (name + ".json")).write_text(json.dumps(value))


def test_environment():
    environs = {{}}
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                environs[pid] = open("/proc/%s/environ" % pid, "rb").read().decode("latin-1")
            except OSError as exc:
                environs[pid] = "denied: %s" % exc
    report("environment", {{"env": dict(os.environ), "proc": environs}})


def test_network():
    got = {{}}
    for name, port in PORTS.items():
        sock = socket.socket()
        sock.settimeout(2)
        try:
            sock.connect(("127.0.0.1", port))
            got[name] = "connected"
        except OSError as exc:
            got[name] = "failed: %s" % exc
        finally:
            sock.close()
    try:
        socket.create_connection(("1.1.1.1", 53), timeout=2).close()
        got["internet"] = "connected"
    except OSError as exc:
        got["internet"] = "failed: %s" % exc
    report("network", got)


def test_files():
    got = {{"uid": os.getuid(), "root": sorted(os.listdir("/"))}}
    for name, path in READS.items():
        try:
            got[name] = "read: " + Path(path).read_text()[:200]
        except OSError as exc:
            got[name] = "failed: " + type(exc).__name__
    for name, path in WRITES.items():
        try:
            Path(path).write_text("escaped")
            got[name] = "wrote"
        except OSError as exc:
            got[name] = "failed: " + type(exc).__name__
    report("files", got)


def test_fork_bomb():
    pids, error = [], None
    try:
        for _ in range(5000):
            pid = os.fork()
            if pid == 0:
                time.sleep(60)
                os._exit(0)
            pids.append(pid)
    except OSError as exc:
        error = "%s" % exc
    for pid in pids:
        os.kill(pid, 9)
    report("fork_bomb", {{"forked": len(pids), "error": error}})


def test_fill_disk():
    got = {{}}
    for name, path in (("workspace", "big.bin"), ("tmp", "/tmp/big.bin")):
        written = 0
        try:
            with open(path, "wb") as f:
                for _ in range(64):
                    f.write(b"x" * (1 << 20))
                    f.flush()
                    written += 1
            got[name] = "wrote 64 MB"
        except OSError as exc:
            got[name] = "stopped after %d MB: %s" % (written, exc.strerror)
        if os.path.exists(path):
            os.remove(path)
    report("fill_disk", got)
"""


def _hostile_workspace(base: Path, listener: int, redis_url: str) -> tuple[Path, dict[str, Path]]:
    """A run's workspace holding the hostile suite, beside another run's workspace, with the worker's
    config and data files on the host; returns the workspace and the host paths that must stay
    untouched."""
    runs = base / "workspaces"
    workspace, other = runs / "run-hostile", runs / "run-other"
    workspace.mkdir(parents=True)
    other.mkdir()
    (other / "notes.txt").write_text(f"other run's {SECRET}")
    config = base / "etc" / "mother.yaml"
    config.parent.mkdir()
    config.write_text(f"redis_url: redis://worker:{SECRET}@127.0.0.1:6379/0\n")
    data = base / "data" / "mother" / "secret.txt"
    data.parent.mkdir(parents=True)
    data.write_text(SECRET)
    marker = base / "host-marker.txt"
    marker.write_text("untouched")
    redis_port = int(redis_url.rsplit(":", 1)[1].split("/")[0])
    source = HOSTILE.format(
        ports={"redis": redis_port, "model_endpoint": listener},
        reads={
            "config": str(config),
            "data_dir": str(data),
            "other_run": str(other / "notes.txt"),
            "home": str(Path.home() / ".bashrc"),
            "shadow": "/etc/shadow",
        },
        writes={
            "marker": str(marker),
            "other_run": str(other / "planted.txt"),
            "outside": str(base / "planted.txt"),
            "usr": "/usr/planted.txt",
        },
    )
    (workspace / "test_hostile.py").write_text(source)
    return workspace, {"marker": marker, "other": other, "base": base}


def _report(workspace: Path, name: str) -> Any:
    return json.loads((workspace / "report" / f"{name}.json").read_text())


def _no_secret_in(text: str) -> None:
    assert SECRET not in text
    assert "MOTHER_" not in text


def test_a_hostile_test_suite_run_by_run_tests_gets_nothing(
    sandbox: Sandbox, secret_env: None, listener: int, redis_url: str, tmp_path: Path
) -> None:
    """Each attack of the hostile suite fails in the sandbox; the run's tool call itself succeeds."""
    workspace, host = _hostile_workspace(tmp_path, listener, redis_url)
    ex = ToolExecutor(sandbox=sandbox)
    # a fork bomb meets its processes limit; a big file its file_size_mb; /tmp its tmp_mb
    tool = _run_tests(limits={"processes": 64, "file_size_mb": 8, "tmp_mb": 4})
    outcome = ex.run(tool, workspace, {"test_command": "python -m pytest -q -p no:cacheprovider"})
    assert outcome.ok, outcome.error
    assert outcome.output is not None and outcome.output["tests_passed"] == 5

    environment = _report(workspace, "environment")
    _no_secret_in(json.dumps(environment))
    assert set(environment["env"]) <= {
        "PATH",
        "HOME",
        "TMPDIR",
        "LANG",
        "USER",
        "LOGNAME",
        "PWD",
        "PYTHONDONTWRITEBYTECODE",
        "PYTEST_VERSION",
        "PYTEST_CURRENT_TEST",
    }
    # only the sandbox's own processes: bwrap's init, the tool, pytest
    assert len(environment["proc"]) <= 4

    network = _report(workspace, "network")
    assert all(v.startswith("failed") for v in network.values()), network

    files = _report(workspace, "files")
    assert files["uid"] != 0
    assert set(files["root"]) <= {
        "bin", "dev", "etc", "lib", "lib32", "lib64", "libx32", "proc", "sbin", "tmp", "usr",
        "workspace", *{Path(p).parts[1] for p in sandbox.read_only},
    }  # fmt: skip
    for name in ("config", "data_dir", "other_run", "home", "shadow", "marker", "outside", "usr"):
        assert files[name].startswith("failed"), (name, files[name])
    assert files["other_run"] == "failed: FileNotFoundError"
    _no_secret_in(json.dumps(files))

    bomb = _report(workspace, "fork_bomb")
    assert bomb["forked"] < 64 and "Resource temporarily unavailable" in bomb["error"]
    disk = _report(workspace, "fill_disk")
    assert disk["workspace"].startswith("stopped after 8 MB: File too large"), disk
    assert disk["tmp"].startswith("stopped after") and "No space left" in disk["tmp"], disk

    assert host["marker"].read_text() == "untouched"
    assert sorted(p.name for p in host["other"].iterdir()) == ["notes.txt"]
    assert not (host["base"] / "planted.txt").exists()
    assert not Path("/usr/planted.txt").exists()


def test_a_child_that_leaves_its_session_dies_with_the_sandbox(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    """A test that double-forks a child into a session of its own, then hangs: at the tool's timeout the
    whole sandbox is killed, the child with it (its heartbeat file stops changing)."""
    beater = (
        "import os, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        "        n = 0\n"
        "        while True:\n"
        "            n += 1\n"
        "            open('/workspace/beat', 'w').write(str(n))\n"
        "            time.sleep(0.05)\n"
    )
    (tmp_path / "beater.py").write_text(beater)
    (tmp_path / "test_hang.py").write_text(
        "import subprocess, sys, time\n\n\ndef test_hang():\n"
        "    subprocess.run([sys.executable, 'beater.py'], start_new_session=True)\n"
        "    time.sleep(120)\n"
    )
    ex = ToolExecutor(sandbox=sandbox)
    outcome = ex.run(_run_tests(timeout_ms=4000), tmp_path, {"test_command": "pytest -q"})
    assert (
        outcome.timed_out and outcome.error == "timed out after 4000 ms; its processes were killed"
    )
    beat = tmp_path / "beat"
    assert beat.exists()
    first = beat.read_text()
    time.sleep(0.6)
    assert beat.read_text() == first


def test_git_runs_no_command_a_repository_names(
    tmp_path: Path, maybe_sandbox: Sandbox | None
) -> None:
    """A repository whose config names core.fsmonitor, a hooks path, a clean filter, a diff textconv,
    a pager and an alias: git_status reports its files and runs none of them, sandboxed or not (each
    would append to .git/ran)."""
    repo = tmp_path / "ws"
    repo.mkdir()
    marker = repo / ".git" / "ran"
    git = ["git", "-C", str(repo), "-c", "user.email=a@b", "-c", "user.name=n"]
    home = {**os.environ, "HOME": str(tmp_path)}
    subprocess.run([*git, "init", "-q"], check=True, env=home)
    (repo / ".gitattributes").write_text("*.txt filter=evil diff=evil\n")
    (repo / "a.txt").write_text("one\n")
    subprocess.run([*git, "add", "."], check=True, env=home)
    subprocess.run([*git, "commit", "-qm", "x"], check=True, env=home)
    hooks = repo / ".git" / "evil-hooks"
    hooks.mkdir()
    for hook in ("post-index-change", "pre-commit", "fsmonitor-watchman"):
        (hooks / hook).write_text(f"#!/bin/sh\necho {hook} >> .git/ran\n")
        (hooks / hook).chmod(0o755)
    run = "sh -c 'echo $0 >> .git/ran; cat'"
    with (repo / ".git" / "config").open("a") as config:
        config.write(
            "[core]\n\tfsmonitor = echo fsmonitor >> .git/ran; echo\n"
            "\thooksPath = .git/evil-hooks\n\tpager = echo pager >> .git/ran\n"
            f'[filter "evil"]\n\tclean = {run}\n\tsmudge = {run}\n\tprocess = {run}\n'
            f'[diff "evil"]\n\ttextconv = {run}\n\tcommand = {run}\n'
            "[alias]\n\tst = !echo alias >> .git/ran\n"
        )
    # a.txt changes after the index was written: git must look at (and filter) its content
    time.sleep(1.1)
    (repo / "a.txt").write_text("two\n")
    tool = shipped_tools()["git_status"]
    executors = [ToolExecutor()]
    if maybe_sandbox is not None:
        executors.append(ToolExecutor(sandbox=maybe_sandbox))
    for ex in executors:
        outcome = ex.run(tool, repo, {"repo_path": "."})
        assert outcome.ok, outcome.error
        assert outcome.output is not None and outcome.output["modified_files"] == ["a.txt"]
        assert not marker.exists(), marker.read_text()
    # the same repository, unhardened: the config does run (what the test would catch)
    unhardened = ["git", "-c", "safe.directory=*", "-C", str(repo), "status"]
    subprocess.run(unhardened, capture_output=True, check=False, env=home)
    assert "fsmonitor" in marker.read_text()


@pytest.mark.parametrize(
    "path",
    [".git/config", ".git/hooks/pre-commit", "sub/.GIT/hooks/post-checkout", ".git", "link/config"],
)
def test_file_tools_refuse_git_directories(tmp_path: Path, path: str) -> None:
    """write_file (and read_file, list_dir) refuse a path in a .git directory, the .git file, and a
    symlink into one; a manifest with allow_git_dir may."""
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "config").write_text("[core]\n")
    (tmp_path / "link").symlink_to(".git")
    ex = ToolExecutor()
    for tool_id, inputs in (
        ("write_file", {"path": path, "content": "[core]\n\tfsmonitor = evil\n"}),
        ("read_file", {"path": path}),
        ("list_dir", {"path": path}),
    ):
        outcome = ex.run(shipped_tools()[tool_id], tmp_path, inputs)
        assert not outcome.ok and "is in a .git directory" in (outcome.error or ""), tool_id
    assert (tmp_path / ".git" / "config").read_text() == "[core]\n"
    allowed = shipped_tools()["read_file"].model_copy(update={"allow_git_dir": True})
    assert ex.run(allowed, tmp_path, {"path": ".git/config"}).ok


def test_network_only_where_a_manifest_asks_and_the_deployment_allows(
    sandbox: Sandbox, listener: int, tmp_path: Path
) -> None:
    """A tool without network: true cannot reach the host's loopback; one that asks is refused until
    tools.sandbox_network_tools lists it, then connects."""
    plain = _tool("dial", "tests.tool_fixtures:connect")
    asking = _tool("dial", "tests.tool_fixtures:connect", network=True)
    ex = ToolExecutor(sandbox=sandbox, allowed_entrypoints=FIXTURES)
    no_net = ex.run(plain, tmp_path, {"fail": listener})
    assert not no_net.ok and "could not connect" in (no_net.error or "")
    refused = ex.run(asking, tmp_path, {"fail": listener})
    assert not refused.ok and refused.tries == 0
    assert refused.error == (
        "dial asks for the network (network: true in its manifest), which this deployment does "
        "not allow it; add it to tools.sandbox_network_tools to allow it"
    )
    allowing = ToolRules(sandbox.rules.limits, network_tools=frozenset({"dial"}))
    allowed = ToolExecutor(sandbox=sandbox, rules=allowing, allowed_entrypoints=FIXTURES)
    got = allowed.run(asking, tmp_path, {"fail": listener})
    assert got.ok, got.error


def test_a_manifest_passes_only_the_variables_it_names(
    sandbox: Sandbox, secret_env: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """env: [NAME] passes the worker's NAME; a credential (MOTHER_*, a model's api_key_env) is refused."""
    monkeypatch.setenv("TOOL_REGION", "eu-west")
    rules = ToolRules(sandbox.rules.limits, secret_env=frozenset({"OPENAI_API_KEY"}))
    for ex in (
        ToolExecutor(sandbox=sandbox, rules=rules, allowed_entrypoints=FIXTURES),
        ToolExecutor(rules=rules, allowed_entrypoints=FIXTURES),
    ):
        tool = _tool("env", "tests.tool_fixtures:environment", env=["TOOL_REGION"])
        assert ex.run(tool, tmp_path, {}).ok
        seen = json.loads((tmp_path / "environment.json").read_text())
        assert seen["TOOL_REGION"] == "eu-west"
        _no_secret_in(json.dumps(seen))
        for name in ("MOTHER_REDIS_URL", "OPENAI_API_KEY"):
            leaking = _tool("env", "tests.tool_fixtures:environment", env=[name])
            refused = ex.run(leaking, tmp_path, {})
            assert not refused.ok and f"passes {name} into its sandbox" in (refused.error or "")


def test_memory_and_cpu_limits_end_a_call_in_one_line(sandbox: Sandbox, tmp_path: Path) -> None:
    ex = ToolExecutor(sandbox=sandbox, allowed_entrypoints=FIXTURES)
    hog = _tool("hog", "tests.tool_fixtures:hog_memory", limits={"memory_mb": 256})
    memory = ex.run(hog, tmp_path, {"fail": 1024})
    assert memory.error == "it ran out of memory (its sandbox's memory_mb limit)"
    assert ex.run(hog, tmp_path, {"fail": 16}).ok
    spin = _tool("spin", "tests.tool_fixtures:spin", limits={"cpu_seconds": 1})
    cpu = ex.run(spin, tmp_path, {})
    assert cpu.error == "it used up its CPU time (1 s)"


def test_a_sandboxed_tool_is_an_unprivileged_user(sandbox: Sandbox, tmp_path: Path) -> None:
    """Not root and no capability inside; under a root worker, files it makes belong to the run's own
    user id, not root's."""
    ex = ToolExecutor(sandbox=sandbox)
    written = ex.run(shipped_tools()["write_file"], tmp_path, {"path": "f.txt", "content": "x"})
    assert written.ok, written.error
    owner = (tmp_path / "f.txt").stat().st_uid
    if os.geteuid() == 0:
        assert owner == sandbox.uid_for(tmp_path.resolve()) >= 100_000
    else:
        assert owner == os.geteuid()
    probe = Sandbox(sandbox.bwrap, rules=sandbox.rules, setpriv=sandbox.setpriv)
    got = probe.run(
        "workers.sandbox.probe:whoami",
        tmp_path,
        {},
        sandbox.rules.policy(_tool("p", "workers.sandbox.probe:whoami")),
        30,
        1 << 16,
    )
    probe.close()
    assert got["output"]["uid"] != 0 and got["output"]["capabilities"] == 0


def test_an_installation_under_tmp_is_seen_in_the_sandbox(sandbox: Sandbox, tmp_path: Path) -> None:
    """A project, venv or CI checkout under /tmp: its read-only paths are bound after the sandbox's
    private /tmp is mounted, not hidden by it (a tool module there imports and runs)."""
    install = Path(tempfile.mkdtemp(prefix="mh-install-", dir="/tmp"))
    install.chmod(0o755)
    try:
        (install / "tmp_probe_tool.py").write_text(
            "def hello(workspace, inputs):\n    return {'from': __file__}\n"
        )
        probe = Sandbox(
            sandbox.bwrap, rules=sandbox.rules, setpriv=sandbox.setpriv, extra_paths=[install]
        )
        policy = CallPolicy(limits=sandbox.rules.limits, module_paths=(install / "x.py",))
        got = probe.run("tmp_probe_tool:hello", tmp_path, {}, policy, 30, 1 << 16)
        probe.close()
        assert got == {"output": {"from": str(install / "tmp_probe_tool.py")}}
    finally:
        shutil.rmtree(install)


def _bwrap_pids(mark: str, *, unreaped: bool) -> set[int]:
    """The bwrap processes that are this process's or were left to init and whose command line holds
    ``mark`` (the sandboxes of another test, running meanwhile in another process, are not): the live
    ones, and with ``unreaped`` the exited ones nobody has reaped (whose command line is gone: any
    with this process as parent)."""
    found = set()
    for entry in Path("/proc").iterdir():
        with contextlib.suppress(OSError):
            if entry.name.isdigit() and (entry / "comm").read_text().strip() == "bwrap":
                state, ppid = (entry / "stat").read_text().rsplit(")", 1)[1].split()[:2]
                ours = mark in (entry / "cmdline").read_text() or (
                    state == "Z" and int(ppid) == os.getpid()
                )
                if ours and (unreaped or state != "Z") and int(ppid) in (1, os.getpid()):
                    found.add(int(entry.name))
    return found


def test_a_failed_check_and_a_killed_sandbox_leave_no_process(sandbox: Sandbox) -> None:
    """A check that fails (the interpreter missing, as a path bwrap cannot reach) says bubblewrap
    refused, not that it is missing, and leaves no bwrap process running (a sandbox whose PID 1 ended
    on its own is init's to reap); a sandbox killed as it starts leaves none, not even unreaped: its
    PID 1 is killed first, and bwrap reaps it."""
    broken = Sandbox(sandbox.bwrap, rules=sandbox.rules, setpriv=sandbox.setpriv)
    broken.python = "/nonexistent/python3"
    before = _bwrap_pids(broken.python, unreaped=False)
    with pytest.raises(SandboxUnavailable, match="bwrap cannot make a sandbox here"):
        broken.check()
    assert _bwrap_pids(broken.python, unreaped=False) - before == set()
    state = SandboxState("missing", "bwrap cannot make a sandbox here: x", None, sandbox.rules)
    assert state.remedy.startswith("bubblewrap is installed but refused")
    with tempfile.TemporaryDirectory() as scratch:
        before = _bwrap_pids(scratch, unreaped=True)
        for wait in (0, 0.01, 0.2):
            started = sandbox._start(Path(scratch), CallPolicy(limits=sandbox.rules.limits))
            time.sleep(wait)
            started.kill()
            assert _bwrap_pids(scratch, unreaped=True) - before == set()


@pytest.mark.skipif(os.geteuid() != 0, reason="hand_over runs for a root worker only")
def test_handing_a_workspace_over_never_follows_a_symlink(tmp_path: Path) -> None:
    """A workspace holding a symlink to a host file (and to a directory): the run's user gets the
    workspace and the links, never what they point to."""
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "file").write_text("host")
    workspace = tmp_path / "ws"
    (workspace / "sub").mkdir(parents=True)
    (workspace / "sub" / "a.txt").write_text("a")
    (workspace / "file-link").symlink_to(victim / "file")
    (workspace / "dir-link").symlink_to(victim)
    hand_over(workspace, 123_456)
    for path in (workspace, workspace / "sub", workspace / "sub" / "a.txt", workspace / "dir-link"):
        assert path.lstat().st_uid == 123_456, path
    assert (workspace / "file-link").lstat().st_uid == 123_456
    assert victim.stat().st_uid == 0 and (victim / "file").stat().st_uid == 0
    assert workspace.stat().st_mode & 0o777 == 0o700


def test_the_user_namespace_mode_holds_the_same(sandbox: Sandbox, tmp_path: Path) -> None:
    """The mode a worker that is not root uses (an unprivileged user namespace): the same attacks on
    the environment, the network and the files fail."""
    userns = Sandbox(sandbox.bwrap, rules=sandbox.rules, mode="userns")
    try:
        userns.check()
    except Exception as exc:  # noqa: BLE001
        pytest.skip(f"unprivileged user namespaces are not available here: {exc}")
    (tmp_path / "test_probe.py").write_text(
        "import os, socket\n\n\ndef test_probe():\n"
        "    assert not any(k.startswith('MOTHER_') for k in os.environ)\n"
        "    assert open('/proc/self/status').read().split('CapEff:')[1].split()[0] == '0' * 16\n"
        "    assert not os.path.exists('/etc/shadow')\n"
        "    s = socket.socket(); s.settimeout(1)\n"
        "    try:\n        s.connect(('127.0.0.1', 22))\n        raise SystemExit('connected')\n"
        "    except OSError:\n        pass\n"
    )
    outcome = ToolExecutor(sandbox=userns).run(
        _run_tests(), tmp_path, {"test_command": "pytest -q -p no:cacheprovider"}
    )
    userns.close()
    assert outcome.ok and outcome.output is not None, outcome.error
    assert (outcome.output["tests_passed"], outcome.output["tests_failed"]) == (1, 0)


def test_an_unsandboxed_tool_still_gets_only_the_allowlisted_environment(
    secret_env: None, tmp_path: Path
) -> None:
    """tools.sandbox: none (or a development host without bubblewrap): the tool's process and what it
    starts see none of the worker's credentials either."""
    (tmp_path / "test_env.py").write_text(
        "import json, os\n\n\ndef test_env():\n"
        "    open('env.json', 'w').write(json.dumps(dict(os.environ)))\n"
    )
    outcome = ToolExecutor().run(_run_tests(), tmp_path, {"test_command": "pytest -q"})
    assert outcome.ok, outcome.error
    _no_secret_in((tmp_path / "env.json").read_text())


def test_a_worker_keeps_its_credentials_out_of_its_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """secrets.take moves MOTHER_* and the models' API keys out of os.environ; they stay readable by
    name for what needs them (a provider's key)."""
    monkeypatch.setenv("MOTHER_LIBRARIES__HASH_KEY", f"hash-{SECRET}")
    monkeypatch.setenv("MY_MODEL_KEY", f"sk-{SECRET}")
    cfg = Settings(
        models={"paid": {"provider": "openai", "base_url": "http://127.0.0.1:9/v1",
                         "api_key_env": "MY_MODEL_KEY"}}
    )  # fmt: skip
    try:
        taken = secrets.take(cfg)
        assert {"MOTHER_LIBRARIES__HASH_KEY", "MY_MODEL_KEY"} <= set(taken)
        assert "MY_MODEL_KEY" not in os.environ and "MOTHER_LIBRARIES__HASH_KEY" not in os.environ
        assert secrets.get("MY_MODEL_KEY") == f"sk-{SECRET}"
        child = subprocess.run(
            [sys.executable, "-c", "import os; print(sorted(os.environ))"],
            capture_output=True,
            text=True,
            check=True,
        )
        _no_secret_in(child.stdout)
    finally:
        # the rest of the session's tests read MOTHER_* from the environment
        for name in list(secrets.taken()):
            os.environ[name] = secrets.get(name)
        secrets._kept.clear()


# -- the worker, the CLI ----------------------------------------------------------------------------


def test_a_worker_refuses_to_start_without_its_sandbox(r: Any, redis_url: str) -> None:
    from mother import keys
    from mother.identities import hosts, party_url

    _host, password = hosts.add(r, "sandboxed", ["agents", "tools"], "2026-12-01T00:00:00.000Z")
    url = party_url(redis_url, keys.host_user("sandboxed"), password)
    missing = {"MOTHER_REDIS_URL": url, "MOTHER_TOOLS__SANDBOX_BWRAP": "/nonexistent/bwrap"}
    done = run_cli("worker", "--burst", env=missing)
    assert done.returncode == 2
    assert done.stderr.startswith("error[config_invalid]: the tool sandbox cannot be made")
    assert "bubblewrap is not installed ('/nonexistent/bwrap' not found" in done.stderr
    assert "tools.sandbox: none" in done.stderr and len(done.stderr.strip().splitlines()) == 1
    up = run_cli(
        "up",
        "--workers",
        "0",
        "--dashboard-port",
        "0",
        env={**missing, "MOTHER_REDIS_URL": redis_url},
    )
    assert up.returncode == 2 and up.stderr.startswith("error[sandbox_missing]:")
    # said explicitly, a worker runs tools unsandboxed (and says so in its log)
    explicit = run_cli("worker", "--burst", env={**missing, "MOTHER_TOOLS__SANDBOX": "none"})
    assert explicit.returncode == 0, explicit.stderr
    assert "tools.sandbox is none" in explicit.stdout + explicit.stderr


def test_up_dev_without_a_sandbox_says_so_in_one_yellow_line(tmp_path: Path) -> None:
    """The yellow line; and a Ctrl-C right after it, while the server starts, stops everything, even
    where SIGINT was ignored when `up` started (it was lost, and `up` ran on)."""
    env = {
        "MOTHER_TOOLS__SANDBOX_BWRAP": "/nonexistent/bwrap",
        "FORCE_COLOR": "1",
        "COLUMNS": "300",
    }
    proc = start_up_dev(tmp_path, env, preexec_fn=sigint_ignored)
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            out, _ = proc.communicate(timeout=60)
        finally:
            proc.kill()
    assert "\x1b[33m" in line and "warning: tools run UNSANDBOXED" in line
    assert "bubblewrap is not installed" in line
    assert proc.returncode == 0 and out.rstrip().endswith("stopped."), out


def test_doctor_reports_the_sandbox(redis_url: str, sandbox: Sandbox) -> None:
    done = run_cli("doctor", env={"MOTHER_REDIS_URL": redis_url})
    assert "tool sandbox" in done.stdout
    row = next(line for line in done.stdout.splitlines() if "tool sandbox" in line)
    assert row.startswith("ok") and "bubblewrap" in row and "no network" in row
    missing = run_cli(
        "doctor",
        env={"MOTHER_REDIS_URL": redis_url, "MOTHER_TOOLS__SANDBOX_BWRAP": "/nonexistent/bwrap"},
    )
    row = next(line for line in missing.stdout.splitlines() if "tool sandbox" in line)
    assert row.startswith("warn") and "a worker on this host would refuse to start" in row


# -- through an agent's tool call, in a real run ----------------------------------------------------


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, sandbox: Sandbox) -> Iterator[Pipeline]:
    p = start_pipeline(
        tmp_path_factory.mktemp("sandbox"),
        workers=1,
        env={"MOTHER_TOOLS__SANDBOX_REQUIRED": "true"},
    )
    yield p
    stop_pipeline(p)


def test_an_agents_hostile_tests_leak_nothing_and_the_run_goes_on(
    stack: Pipeline, listener: int
) -> None:
    """The model writes the hostile suite with write_file and runs it with run_tests, from its tool
    loop, in a real run on a real worker (whose environment holds MOTHER_REDIS_URL): every attack
    fails (another run's workspace is a real sibling of this one), and the run ends success."""
    workspace, host = _hostile_workspace(stack.workspace.parent, listener, stack.url)
    suite = (workspace / "test_hostile.py").read_text()
    spec = RunSpec.model_validate(
        {
            "user_id": "mallory",
            "task": "Write the tests and run them.",
            "pipeline": [{"name": "code", "role": "coder", "model": "scripted"}],
            "scripts": {
                "coder": [
                    {"tool_calls": [{"name": "write_file",
                                     "arguments": {"path": "test_hostile.py", "content": suite}}]},
                    {"tool_calls": [{"name": "run_tests",
                                     "arguments": {"test_command": "pytest -q -p no:cacheprovider",
                                                   "repo_path": "."}}]},
                    {"text": "Ran them.", "confidence": 0.9},
                ]
            },
        }
    )  # fmt: skip
    run_id = stack.client.submit(spec)
    envelope = stack.wait(run_id, timeout=120)
    assert envelope.termination is not None and envelope.termination.reason == "success"
    ran = stack.workspace / run_id
    environment = _report(ran, "environment")
    _no_secret_in(json.dumps(environment))
    assert "MOTHER_REDIS_URL" not in environment["env"]
    network = _report(ran, "network")
    assert all(v.startswith("failed") for v in network.values()), network
    files = _report(ran, "files")
    for name in ("config", "data_dir", "other_run", "home", "marker", "outside"):
        assert files[name].startswith("failed"), (name, files[name])
    assert host["marker"].read_text() == "untouched"
    assert wait_until(lambda: (ran / "report" / "fill_disk.json").exists(), timeout=1)
