"""The run commands of the CLI against a live pipeline, and `mother up` start/stop."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
import uuid
from pathlib import Path

import redis
import yaml

from mother import keys
from mother.server import free_port
from mother.stack import Exited, LocalStack, exit_text
from tests.conftest import MOTHER_BIN, Pipeline, cli_env, need, run_cli
from tests.test_pipeline import EXAMPLES, example, wait_until


def _spec_file(tmp_path: Path, name: str, **changes: object) -> Path:
    return _write(tmp_path, example(name, **changes))


def test_submit_wait_exit_codes_and_json(pipeline: Pipeline, tmp_path: Path) -> None:
    """submit --wait exits 0 for success, 1 otherwise; --json prints the ResultEnvelope."""
    env = {"MOTHER_REDIS_URL": pipeline.url}
    ok = run_cli("submit", str(_spec_file(tmp_path, "three-phase")), "--wait", "--json", env=env)
    assert ok.returncode == 0, ok.stderr
    envelope = json.loads(ok.stdout)
    assert (
        envelope["termination"]["reason"] == "success"
        and envelope["termination"]["logged_by"] == "mother"
    )
    bad = run_cli("submit", str(_spec_file(tmp_path, "retries-exhausted")), "--wait", env=env)
    assert bad.returncode == 1
    assert "retries_exhausted at phase execute" in bad.stdout
    assert (
        "next: escalate_model: submit it again on a larger model (it can be retried)" in bad.stdout
    )
    # a success's "abandon" is said as what it means
    good = run_cli("submit", str(_spec_file(tmp_path, "three-phase")), "--wait", env=env)
    assert good.returncode == 0 and "next: nothing left to do: it succeeded" in good.stdout
    assert "abandon" not in good.stdout


def test_submit_reads_yaml_files_and_stdin_and_says_what_is_wrong(
    pipeline: Pipeline, tmp_path: Path
) -> None:
    """`mother submit -` takes YAML (as its help says; it took JSON only); a spec file that is not UTF-8,
    empty, not YAML, or names a missing script_file is one line naming the file and what is wrong (a
    non-UTF-8 file was a bare UnicodeDecodeError)."""
    env = cli_env({"MOTHER_REDIS_URL": pipeline.url})
    spec = "user_id: u\ntask: t\npipeline: [{name: a, role: r, model: scripted}]\nscripts: {r: [{text: from stdin}]}\n"
    piped = subprocess.run(
        [str(MOTHER_BIN), "submit", "-", "--wait", "--json"],
        input=spec.encode(),
        env=env,
        capture_output=True,
        timeout=60,
    )
    assert piped.returncode == 0, piped.stderr
    assert json.loads(piped.stdout)["output"] == "from stdin"
    garbled = subprocess.run(
        [str(MOTHER_BIN), "submit", "-"],
        input=b"user_id: \xff\n",
        env=env,
        capture_output=True,
        timeout=60,
    )
    assert garbled.stderr.decode().strip() == (
        "error[invalid_spec]: standard input: not UTF-8 text (byte 0xff at offset 9); save it as UTF-8"
    )
    # 400 bytes of nested aliases stand for 10^9 strings: the CLI hung building their JSON
    bomb = (
        "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n"
        + "".join(f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]\n" for i in range(1, 9))
        + spec
        + "metadata: {boom: *a8}\n"
    )
    files = {
        "latin1.yaml": b"task: caf\xe9\n",
        "empty.yaml": b"",
        "broken.yaml": b"user_id: [unclosed\n",
        "scripted.yaml": spec.replace(
            "scripts: {r: [{text: from stdin}]}", "script_file: replies.yaml"
        ).encode(),
        "bomb.yaml": bomb.encode(),
        "loop.yaml": (spec + "metadata: {m: &m [1, *m]}\n").encode(),
        "deep.json": ("[" * 5000 + "]" * 5000).encode(),
        "nested.yaml": (spec + "metadata: {m: " + "[" * 40 + "]" * 40 + "}\n").encode(),
    }
    for name, raw in files.items():
        (tmp_path / name).write_bytes(raw)
    expected = {
        "latin1.yaml": f"spec file {tmp_path / 'latin1.yaml'}: not UTF-8 text (byte 0xe9 at offset 9); save it as UTF-8",
        "empty.yaml": f"{tmp_path / 'empty.yaml'} is empty; it must hold a RunSpec",
        "broken.yaml": f"{tmp_path / 'broken.yaml'}: not valid YAML: line 2, column 1: expected ',' or ']', but got '<stream end>'",
        "scripted.yaml": f"script_file {(tmp_path / 'replies.yaml').resolve()}: cannot read it: No such file or directory",
        "bomb.yaml": f"{tmp_path / 'bomb.yaml'}: its aliases (*name) expand to more than 1,000,000 values; "
        "write the values out, or use fewer aliases",
        "loop.yaml": f"{tmp_path / 'loop.yaml'}: an alias (*name) refers to a value that contains it; "
        "a document that contains itself cannot be sent as JSON",
        "deep.json": f"{tmp_path / 'deep.json'}: nested too deeply to read (more than 200 levels); flatten it",
        "nested.yaml": "invalid RunSpec: metadata: nested more than 32 levels deep; flatten it",
    }
    for name, message in expected.items():
        got = run_cli("submit", str(tmp_path / name), env={"MOTHER_REDIS_URL": pipeline.url})
        assert (got.returncode, got.stderr.strip()) == (2, f"error[invalid_spec]: {message}"), name


def test_runs_status_cancel_and_errors(pipeline: Pipeline, tmp_path: Path) -> None:
    """submit prints the id; cancel ends it user_cancelled; runs filters by reason; bad input is one line."""
    env = {"MOTHER_REDIS_URL": pipeline.url, "COLUMNS": "250"}
    submitted = run_cli("submit", str(_spec_file(tmp_path, "cancelled")), env=env)
    run_id = submitted.stdout.strip()
    assert submitted.returncode == 0 and run_id.startswith("cancelled-")
    deadline = time.monotonic() + 20
    while (
        "running" not in run_cli("status", run_id, env=env).stdout and time.monotonic() < deadline
    ):
        time.sleep(0.2)
    blank = run_cli("cancel", run_id, "--actor", "ops", "--reason", "  ", env=env)
    assert (blank.returncode, blank.stderr.strip()) == (
        2,
        "error[invalid_spec]: reason must say why; it is empty",
    )
    assert (
        run_cli("cancel", run_id, "--actor", "ops", "--reason", "wrong task", env=env).returncode
        == 0
    )
    waited = run_cli("wait", run_id, "--json", env=env)
    assert json.loads(waited.stdout)["termination"]["details"] == "Cancelled by ops: wrong task"
    # ended: nothing is sent, and it says so
    late = run_cli("cancel", run_id, env=env)
    assert (late.returncode, late.stdout.strip()) == (
        0,
        f"{run_id} already ended (user_cancelled); nothing to cancel",
    )
    listed = run_cli("runs", "--reason", "user_cancelled", env=env)
    assert run_id in listed.stdout and "user_cancelled" in listed.stdout
    # into a pipe with no COLUMNS: one line per run (rich's default 80 columns folded every cell)
    piped = subprocess.run(
        [str(MOTHER_BIN), "runs", "--reason", "user_cancelled"],
        env=cli_env({"MOTHER_REDIS_URL": pipeline.url}, drop=("COLUMNS",)),
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    row = next(line for line in piped.stdout.splitlines() if run_id in line)
    assert "user_cancelled" in row and "Cancelled by ops: wrong task" in row
    inspected = json.loads(run_cli("inspect", run_id, "--json", env=env).stdout)
    assert (
        inspected["termination"]["reason"] == "user_cancelled"
        and inspected["run"]["status"] == "terminated"
    )
    missing = run_cli("status", "no-such-run", env=env)
    assert missing.returncode == 2 and missing.stderr.startswith(
        "error[not_found]: no run 'no-such-run'"
    )
    # not "it goes on": it never was
    never = run_cli("wait", "no-such-run", "--timeout", "0.5", env=env)
    assert never.returncode == 2 and never.stderr.startswith(
        "error[not_found]: no run 'no-such-run'"
    )
    # said at once, not waited out
    assert "Mother has taken in every submission and none is this run" in never.stderr
    unknown_reason = run_cli("runs", "--reason", "timed_out", env=env)
    assert unknown_reason.returncode == 2
    assert unknown_reason.stderr.startswith(
        "error[invalid_spec]: unknown termination reason 'timed_out'; use one of: success,"
    )
    bad = tmp_path / "bad.yaml"
    bad.write_text("user_id: 'a b'\ntask: t\npipeline: []\n")
    refused = run_cli("submit", str(bad), env=env)
    assert refused.returncode == 2
    assert refused.stderr.strip() == (
        "error[invalid_spec]: invalid RunSpec: user_id: must be 1-128 characters from A-Z a-z 0-9 _ . : -; "
        "pipeline: List should have at least 1 item after validation, not 0"
    )


def test_ctrl_c_while_waiting_stops_the_wait_not_the_run(
    pipeline: Pipeline, tmp_path: Path
) -> None:
    """Ctrl-C during `submit --wait` says the run goes on and how to wait again or cancel it (it said only
    'interrupted'), exit 130; the run is still running."""
    env = cli_env({"MOTHER_REDIS_URL": pipeline.url})
    # as a terminal's foreground job: Ctrl-C at its default, which Python turns into KeyboardInterrupt (a suite run
    # as a background job, `./scripts/test &`, hands its children SIGINT ignored, and Python then leaves it so)
    proc = subprocess.Popen(
        [str(MOTHER_BIN), "submit", str(_spec_file(tmp_path, "cancelled")), "--wait"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        stdin=subprocess.DEVNULL,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert proc.stderr is not None
    # "submitted RUN"
    run_id = proc.stderr.readline().split()[-1]
    # a slow intake adds a notice ("... is `mother run` running?") before the progress
    for line in proc.stderr:
        # the progress line: the phase has started
        if line.startswith(f"{run_id}: running"):
            break
    else:
        raise AssertionError("no progress line")
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130
    assert err.strip() == (
        f"error[interrupted]: stopped waiting; {run_id} goes on: `mother wait {run_id}` to wait again, "
        f"`mother cancel {run_id}` to end it"
    )
    assert "running" in run_cli("status", run_id, env={"MOTHER_REDIS_URL": pipeline.url}).stdout
    run_cli("cancel", run_id, env={"MOTHER_REDIS_URL": pipeline.url})


def test_redis_cli_xadd_submission(pipeline: Pipeline) -> None:
    """The literal `redis-cli XADD mother:submissions '*' spec '<json>'` starts a run that succeeds."""
    need(
        None if shutil.which("redis-cli") else "no redis-cli on this machine (Debian's redis-tools)"
    )
    spec = json.dumps(example("three-phase"))
    port = pipeline.url.rsplit(":", 1)[1].split("/")[0]
    out = subprocess.run(
        ["redis-cli", "-p", port, "XADD", "mother:submissions", "*", "spec", spec],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "-" in out.stdout
    assert pipeline.wait(json.loads(spec)["run_id"]).termination.reason == "success"


def _start_up(tmp_path: Path, port: int, dashboard_port: int) -> subprocess.Popen[str]:
    """`mother up` with one worker, its Redis on ``port``, in a session of its own."""
    return subprocess.Popen(
        [
            str(MOTHER_BIN),
            "up",
            "--dashboard-port",
            str(dashboard_port),
            "--port",
            str(port),
            "--dir",
            str(tmp_path / "redis"),
            "--workers",
            "1",
        ],
        env=cli_env({"MOTHER_WORKER__WORKSPACE_ROOT": str(tmp_path / "ws")}),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def _submit_once_up(url: str) -> subprocess.CompletedProcess[str]:
    """Submit the three-phase example and wait for it, trying again while up's Redis is starting."""
    deadline = time.monotonic() + 60
    while True:
        result = run_cli(
            "submit",
            str(EXAMPLES / "three-phase.yaml"),
            "--wait",
            "--timeout",
            "40",
            env={"MOTHER_REDIS_URL": url},
        )
        if "cannot reach Redis" not in result.stderr or time.monotonic() > deadline:
            return result
        time.sleep(1)


def test_up_starts_everything_restarts_a_killed_mother_and_ctrl_c_leaves_nothing(
    tmp_path: Path,
) -> None:
    """`mother up` serves a run; a Mother killed with -9 is started again and serves the next run (up used to
    stop everything); SIGINT stops Redis, Mother and workers with no process left behind."""
    port, web = free_port(), free_port()
    proc = _start_up(tmp_path, port, web)
    try:
        url = f"redis://127.0.0.1:{port}/0"
        result = _submit_once_up(url)
        assert result is not None and result.returncode == 0, result.stderr
        # the dashboard up started answers, and shows the run that just ended
        import urllib.request

        with urllib.request.urlopen(f"http://127.0.0.1:{web}/runs", timeout=10) as page:
            assert "success" in page.read().decode()
        r = redis.Redis.from_url(url, decode_responses=True)
        # host:pid:nonce of the Mother up started
        leader = r.get(keys.LEADER_LEASE)
        assert leader is not None
        os.kill(int(leader.split(":")[1]), signal.SIGKILL)
        again = run_cli(
            "submit",
            str(_spec_file(tmp_path, "three-phase")),
            "--wait",
            "--timeout",
            "60",
            env={"MOTHER_REDIS_URL": url},
        )
        assert again.returncode == 0, again.stderr
        assert r.get(keys.LEADER_LEASE) not in (None, leader)
        os.killpg(proc.pid, signal.SIGINT)
        out, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0, out
    assert (
        "mother-0 exited (killed by SIGKILL); released its leader lease, so the next Mother leads at once; "
        "started it again"
    ) in out
    assert "stopped." in out
    assert f"dashboard: http://127.0.0.1:{web}/ (metrics at /metrics)" in out
    # beside the server's own log, in the --dir given
    logs = tmp_path / "redis" / "logs"
    assert f"logs in {logs}" in out
    assert (logs / "mother-0.log").is_file() and (logs / "worker-0.log").is_file()
    leftover = subprocess.run(
        ["pgrep", "-f", f"(--port {port}|{tmp_path})"], capture_output=True, text=True
    ).stdout.split()
    assert [pid for pid in leftover if int(pid) != os.getpid()] == []


def test_the_stack_restarts_a_process_that_exits_and_gives_up_on_one_that_keeps_exiting(
    tmp_path: Path,
) -> None:
    """LocalStack.respawn_dead (what `mother up` and the demo supervise with) starts an exited process again
    up to restart_limit times within the window, then reports it once as given up, with its log's last line
    saying why, and leaves it dead; a process killed by a signal is reported by the signal's name."""
    # a worker that cannot start: it exits 2 before it connects to anything
    stack = LocalStack(
        "redis://127.0.0.1:1/0",
        workers=1,
        mothers=0,
        log_dir=tmp_path / "logs",
        queues="nope",
        restart_limit=2,
    )
    seen: list[Exited] = []
    with stack:
        deadline = time.monotonic() + 60
        while not any(e.gave_up for e in seen) and time.monotonic() < deadline:
            seen += stack.respawn_dead()
            time.sleep(0.1)
        # no further start, so nothing more exits
        time.sleep(3)
        assert stack.respawn_dead() == []
        assert [(e.name, e.returncode, e.restarts, e.gave_up) for e in seen] == [
            ("worker-0", 2, 1, False),
            ("worker-0", 2, 2, False),
            ("worker-0", 2, 2, True),
        ]
        assert "unknown queue 'nope'" in seen[-1].last_log_line()
        assert seen[-1].log == tmp_path / "logs" / "worker-0.log"
        assert list(stack.alive().values()) == [False]
    assert (exit_text(-9), exit_text(-15), exit_text(1)) == (
        "killed by SIGKILL",
        "killed by SIGTERM",
        "exit code 1",
    )


def test_the_stack_releases_the_lease_of_a_mother_that_died_holding_it(
    r: redis.Redis, redis_url: str, tmp_path: Path
) -> None:
    """A Mother killed with -9 while it leads has its lease released by respawn_dead before its successor
    starts (it used to hold it for service.lease_seconds: no Mother led meanwhile); a lease another Mother
    holds is left alone when a Mother that did not lead dies."""
    # far longer than the test: a lease gone must have been released, not run out
    lease_seconds = 60
    stack = LocalStack(
        redis_url,
        workers=0,
        mothers=1,
        log_dir=tmp_path / "logs",
        env={"MOTHER_SERVICE__LEASE_SECONDS": str(lease_seconds)},
    )
    with stack:
        dead = stack.procs["mother-0"]
        wait_until(
            lambda: (r.get(keys.LEADER_LEASE) or "").split(":")[1:2] == [str(dead.pid)], timeout=30
        )
        held = r.get(keys.LEADER_LEASE)
        os.kill(dead.pid, signal.SIGKILL)
        dead.wait(10)
        [exited] = stack.respawn_dead()
        assert exited.lease == "released its leader lease, so the next Mother leads at once"
        assert str(exited).endswith(
            "; released its leader lease, so the next Mother leads at once; started it again"
        )
        # free, or already the new Mother's
        assert r.get(keys.LEADER_LEASE) != held
        successor = stack.procs["mother-0"]
        wait_until(
            lambda: (r.get(keys.LEADER_LEASE) or "").split(":")[1:2] == [str(successor.pid)],
            timeout=30,
        )

        # a Mother on another machine leads; ours stands by, then dies
        other = "elsewhere:1:abcdef"
        r.set(keys.LEADER_LEASE, other, px=lease_seconds * 1000)
        os.kill(successor.pid, signal.SIGKILL)
        successor.wait(10)
        [exited] = stack.respawn_dead()
        assert (
            exited.lease == ""
            and str(exited) == "mother-0 exited (killed by SIGKILL); started it again"
        )
        assert r.get(keys.LEADER_LEASE) == other


def test_doctor_says_which_mother_leads_and_which_hosts_are_live(pipeline: Pipeline) -> None:
    """On a served server doctor names the leading Mother and the live hosts for each kind of job, with
    each host's workers."""
    from mother.hosts import HostTable

    def live() -> bool:
        table = HostTable(pipeline.redis)
        table.refresh()
        return bool(pipeline.redis.exists(keys.LEADER_LEASE)) and len(table.live) == 2

    # the module's stack may have just started
    wait_until(live, timeout=30)
    result = run_cli("doctor", env={"MOTHER_REDIS_URL": pipeline.url})
    assert result.returncode == 0, result.stderr
    leader = pipeline.redis.get(keys.LEADER_LEASE)
    assert f"ok   mother             {leader} leads (its lease has " in result.stdout
    for kind in ("agents", "tools", "maintenance"):
        assert f"ok   {kind + ' jobs':<18} 2 live host(s): local-0, local-1" in result.stdout
    assert "ok   host local-0       1 workers: " in result.stdout
    assert "warn" not in result.stdout


def test_budget_cli_stop_show_reset_and_stopped_at_deadline(
    pipeline: Pipeline, tmp_path: Path
) -> None:
    """`mother budget stop/show/override/reset` work on a live run; a run still stopped at its deadline ends budget_exhausted."""
    env = {"MOTHER_REDIS_URL": pipeline.url, "COLUMNS": "200"}
    spec = example(
        "cancelled",
        pipeline=[
            {"name": "execute", "role": "crawler", "model": "scripted", "timeout_seconds": 8}
        ],
        scripts={"crawler": [{"text": "never", "delay_seconds": 30}]},
    )
    run_id = pipeline.client.submit(spec)
    deadline = time.monotonic() + 20
    while not pipeline.redis.exists(keys.run_budget_key(run_id)) and time.monotonic() < deadline:
        time.sleep(0.1)
    # all before the phase's 8 s deadline, which ends the run (an ended run's limits can no longer change)
    refused = run_cli(
        "budget",
        "override",
        run_id,
        "--dimension",
        "tool_calls",
        "--delta",
        "999",
        "--expires-in",
        "5m",
        "--actor",
        "ops",
        "--reason",
        "x",
        env=env,
    )
    assert refused.returncode == 2 and "would exceed 2x the profile default (360)" in refused.stderr
    stop = run_cli("budget", "stop", run_id, "--actor", "ops", "--reason", "runaway", env=env)
    assert stop.returncode == 0, stop.stderr
    shown = run_cli("budget", "show", run_id, env=env)
    assert "budget_stopped)" in shown.stdout and "emergency stop by ops" in shown.stdout
    # the run's own status says so at once (it said running)
    status = run_cli("status", run_id, env=env)
    assert (
        f"{run_id} ({spec['user_id']}): budget_stopped, phase execute attempt 1" in status.stdout
    ), status.stdout
    record = pipeline.wait(run_id, timeout=30).termination
    assert record.reason == "budget_exhausted"
    assert (
        record.details
        == "Run still emergency-stopped at its phase deadline (stopped by ops: runaway)"
    )
    reset = run_cli("budget", "reset", run_id, "--actor", "ops", "--reason", "late", env=env)
    assert reset.returncode == 2 and "the run has ended" in reset.stderr
    # an ended run's limits change nothing
    late = run_cli(
        "budget",
        "override",
        run_id,
        "--dimension",
        "tool_calls",
        "--delta",
        "5",
        "--expires-in",
        "5m",
        "--actor",
        "ops",
        "--reason",
        "late",
        env=env,
    )
    assert late.returncode == 2 and "the run has ended" in late.stderr
    limits = json.loads(pipeline.redis.execute_command("JSON.GET", keys.run_limits_key(run_id)))
    assert limits["overrides"] == []
    assert run_cli("budget", "show", "--global", env=env).returncode == 0


def test_cli_prints_brackets_in_data_as_they_are(pipeline: Pipeline, tmp_path: Path) -> None:
    """Model output, details and an operator's reason holding '[/i]' or '[bold]' are printed verbatim by
    wait, status, runs and budget show (rich read them as markup: '[/i]' crashed the command with a
    traceback after the run had ended, '[bold]' vanished from the text)."""
    env = {"MOTHER_REDIS_URL": pipeline.url}
    text = "Result: a[/i] b [bold]c[/]] [/] [link=x]y"
    spec = example(
        "three-phase",
        pipeline=[{"name": "plan", "role": "planner", "model": "scripted"}],
        scripts={"planner": [{"text": text}]},
    )
    done = run_cli("submit", str(_write(tmp_path, spec)), "--wait", env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.rstrip().endswith(text)
    assert "Traceback" not in done.stderr
    listed = run_cli("runs", "--json", env=env)
    assert listed.returncode == 0, listed.stderr
    rows = [json.loads(line) for line in listed.stdout.splitlines()]
    assert {
        "run_id": spec["run_id"],
        "reason": "success",
        "user_id": spec["user_id"],
    }.items() <= rows[0].items()

    slow = example(
        "cancelled",
        pipeline=[{"name": "execute", "role": "crawler", "model": "scripted"}],
        scripts={"crawler": [{"text": "never", "delay_seconds": 30}]},
    )
    run_id = pipeline.client.submit(slow)
    wait_until(lambda: pipeline.redis.exists(keys.run_budget_key(run_id)))
    why = "runaway [/x] loop [bold]now[/bold]"
    assert (
        run_cli("budget", "stop", run_id, "--actor", "ops[/]", "--reason", why, env=env).returncode
        == 0
    )
    shown = run_cli("budget", "show", run_id, env=env)
    assert shown.returncode == 0, shown.stderr
    assert "emergency stop by ops[/] at " in shown.stdout and shown.stdout.rstrip().endswith(why)
    cancelled = run_cli("cancel", run_id, "--reason", "stop [/it]", env=env)
    assert cancelled.returncode == 0, cancelled.stderr
    assert pipeline.wait(run_id, timeout=30).termination.reason == "user_cancelled"
    for args in (("status", run_id), ("wait", run_id), ("runs",)):
        got = run_cli(*args, env=env)
        assert got.returncode in (0, 1) and "Traceback" not in got.stderr, (args, got.stderr)
    assert "stop [/it]" in run_cli("status", run_id, env=env).stdout


def _write(tmp_path: Path, spec: dict) -> Path:
    path = tmp_path / f"{spec['run_id']}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def test_inspect_shows_foreign_activity_entries_as_unreadable(pipeline: Pipeline) -> None:
    """Entries someone else XADDed to `activity` (not UTF-8, data that is not JSON, no time) are listed as
    unreadable_entry with what is wrong; `mother inspect` failed on any of them, for every run."""
    run_id = pipeline.client.submit(example("three-phase"))
    assert pipeline.wait(run_id).termination.reason == "success"
    stream = keys.run_activity_key(run_id)  # what inspect reads: the run's own stream
    bad = {
        pipeline.redis.xadd(
            stream, {"type": b"note\xff", "at": "2026-01-01T00:00:00.000Z", "run_id": run_id}
        ): "field 'type' is not UTF-8",
        pipeline.redis.xadd(
            stream,
            {"type": "note", "at": "2026-01-01T00:00:00.000Z", "run_id": run_id, "data": "{oops"},
        ): "field 'data' is not JSON: unexpected character",
        pipeline.redis.xadd(
            stream, {"type": "note", "run_id": run_id}
        ): "at: required field is missing",
    }
    got = run_cli("inspect", run_id, "--json", env={"MOTHER_REDIS_URL": pipeline.url})
    assert got.returncode == 0, got.stderr
    activity = json.loads(got.stdout)["activity"]
    assert [e["type"] for e in activity if e["type"] != "unreadable_entry"][:1] == ["run_submitted"]
    unreadable = {
        e["data"]["entry_id"]: e["data"]["error"]
        for e in activity
        if e["type"] == "unreadable_entry"
    }
    assert unreadable.keys() == bad.keys()
    for entry_id, error in bad.items():
        assert error in unreadable[entry_id], unreadable[entry_id]


def test_runs_by_reason_and_user_finds_the_users_older_runs(pipeline: Pipeline) -> None:
    """--reason R --user U lists U's runs that ended R even when more than --limit runs of others ended R
    since (it scanned only the reason's newest --limit runs and showed none)."""
    user = f"solo-{uuid.uuid4().hex[:6]}"
    one_phase = {
        "pipeline": [{"name": "a", "role": "planner", "model": "scripted"}],
        "scripts": {"planner": [{"text": "ok"}]},
    }
    mine = pipeline.client.submit(example("three-phase", user_id=user, **one_phase))
    assert pipeline.wait(mine).termination.reason == "success"
    others = [pipeline.client.submit(example("three-phase", **one_phase)) for _ in range(3)]
    assert all(pipeline.wait(run_id).termination.reason == "success" for run_id in others)
    assert [
        row["run_id"] for row in pipeline.client.runs(reason="success", user=user, limit=2)
    ] == [mine]
    got = run_cli(
        "runs",
        "--reason",
        "success",
        "--user",
        user,
        "--limit",
        "1",
        "--json",
        env={"MOTHER_REDIS_URL": pipeline.url},
    )
    assert [json.loads(line)["run_id"] for line in got.stdout.splitlines()] == [mine]
    assert pipeline.client.runs(reason="timeout", user=user) == []
    # its record deleted by hand: still listed for its user, not dropped
    pipeline.redis.delete(keys.run_key(mine))
    rows = pipeline.client.runs(user=user)
    assert [(row["run_id"], row.get("status"), row["reason"]) for row in rows] == [
        (mine, None, "success")
    ]


def test_runs_and_status_say_what_is_wrong_with_a_record_edited_by_hand(pipeline: Pipeline) -> None:
    """Run records that are not run records (a wrong field type, a key of another type, JSON that is not an
    object) are listed by `mother runs` with what is wrong, where the table failed with a traceback; `status`
    names the record and what to do in one line."""
    user = f"hand-{uuid.uuid4().hex[:6]}"
    ids = [f"run-{user}-{n}" for n in range(3)]
    pipeline.redis.execute_command(
        "JSON.SET", keys.run_key(ids[0]), "$", '{"run_id":"x","status":7}'
    )
    pipeline.redis.set(keys.run_key(ids[1]), "not json")
    pipeline.redis.execute_command("JSON.SET", keys.run_key(ids[2]), "$", "[1,2]")
    pipeline.redis.zadd(keys.user_runs_key(user), {run_id: n for n, run_id in enumerate(ids)})
    env = {"MOTHER_REDIS_URL": pipeline.url}
    table = run_cli("runs", "--user", user, env=env)
    assert table.returncode == 0 and not table.stderr, table.stderr
    assert all(run_id in table.stdout for run_id in ids) and "record unreadable" in table.stdout
    rows = [
        json.loads(line)
        for line in run_cli("runs", "--user", user, "--json", env=env).stdout.splitlines()
    ]
    assert [(row["run_id"], row["status"]) for row in rows] == [
        (ids[2], None),
        (ids[1], "record unreadable: Existing key has wrong Redis type"),
        (ids[0], 7),
    ]
    for run_id, why in (
        (ids[0], "user_id: required field is missing"),
        (ids[2], "(whole record): Input should be a valid dictionary"),
    ):
        got = run_cli("status", run_id, env=env)
        assert got.returncode == 2 and got.stderr.count("\n") == 1, got.stderr
        assert got.stderr.startswith(
            f"error[record_invalid]: run {run_id}'s record ({keys.run_key(run_id)}) is not a "
            f"valid run record ({why}"
        ), got.stderr
        assert got.stderr.rstrip().endswith("restore it, or delete the key")
    pipeline.redis.delete(*map(keys.run_key, ids), keys.user_runs_key(user))


def test_up_goes_on_without_a_dashboard_whose_port_is_taken(tmp_path: Path) -> None:
    """The dashboard's port is taken: `mother up` says so once it gives up on it, and runs go on."""
    import socket
    import threading

    port = free_port()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        proc = _start_up(tmp_path, port, busy)
        lines: list[str] = []
        reader = threading.Thread(target=lambda: lines.extend(proc.stdout or []), daemon=True)
        reader.start()
        try:
            url = f"redis://127.0.0.1:{port}/0"
            result = _submit_once_up(url)
            assert result is not None and result.returncode == 0, result.stderr
            # the stack gives up on the dashboard (5 exits) and says so; then runs still go on
            wait_until(lambda: any("runs go on without the dashboard" in ln for ln in lines), 30)
            again = run_cli(
                "submit",
                str(_spec_file(tmp_path, "three-phase")),
                "--wait",
                "--timeout",
                "40",
                env={"MOTHER_REDIS_URL": url},
            )
            assert again.returncode == 0, again.stderr
            os.killpg(proc.pid, signal.SIGINT)
            proc.wait(timeout=30)
            reader.join(timeout=10)
            out = "".join(lines)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0, out
    assert "runs go on without the dashboard" in out and "--dashboard-port" in out


def test_the_runs_listing_fits_the_terminal_one_line_a_run() -> None:
    """At 120 columns each run is one line (it wrapped into ~22 lines): the columns that do not fit
    are dropped from the least needed, details is cut to what is left; at 250 every column shows."""
    import io

    from rich.console import Console

    from mother.cli.runs import runs_table

    rows = [
        {
            "run_id": f"three-phase-{n:08x}",
            "user_id": "alice",
            "status": "terminated",
            "reason": "budget_exhausted" if n % 2 else "success",
            "phase_at_termination": "implement",
            "created_at": "2026-11-28T03:16:44.123Z",
            "terminated_at": "2026-11-28T03:17:02.456Z",
            "duration_ms": 18_333,
            "spend_usd": "$0.0123",
            "total_tokens": 4400,
            "details": "Limit exceeded: budget_model_call_exceeded (2/2) " * 3,
            "suggested_action": "escalate_model",
        }
        for n in range(6)
    ]
    for width, expect in ((120, {"run", "status", "user", "created"}), (250, {"suggested"})):
        out = io.StringIO()
        Console(file=out, width=width, color_system=None).print(runs_table(rows, width=width))
        lines = out.getvalue().splitlines()
        body = [line for line in lines if "three-phase-" in line]
        assert len(body) == len(rows), out.getvalue()
        assert all(len(line) <= width for line in lines)
        header = next(line for line in lines if "run" in line and "status" in line)
        assert all(name in header for name in expect), header


def test_cancel_selects_runs_by_user_and_status_shows_the_count_and_asks_first(
    pipeline: Pipeline,
) -> None:
    """`mother cancel --user U --status waiting --reason R`: every run of U waiting for a person (all
    pages of them), the count said first; without a terminal it asks for --yes and cancels nothing;
    with --yes each ends user_cancelled with the reason, and V's runs are left as they were. A named
    run with filters, no run and no filter, or a status that cannot be cancelled is a one-line error."""
    from mother.observe import listing
    from tests.conftest import cli, wait_for_person

    tag = uuid.uuid4().hex[:6]
    mine = [
        pipeline.client.submit(example("approval-denied", user_id=f"u-{tag}")) for _ in range(5)
    ]
    theirs = pipeline.client.submit(example("approval-denied", user_id=f"v-{tag}"))
    for run_id in [*mine, theirs]:
        wait_for_person(pipeline, run_id)
    args = ("cancel", "--user", f"u-{tag}", "--status", "waiting", "--reason", "clean up")
    asked = cli(*args, url=pipeline.url)
    assert asked.exit_code != 0 and "5 run(s) of user" in asked.output and "--yes" in asked.output
    assert all(pipeline.client.status(r).status == "waiting" for r in mine)
    # pages of 2: every page is selected
    saved, listing.MAX_PAGE = listing.MAX_PAGE, 2
    try:
        done = cli(*args, "--yes", url=pipeline.url)
    finally:
        listing.MAX_PAGE = saved
    assert done.exit_code == 0, done.output
    assert "cancel requested for 5 run(s)" in done.output
    for run_id in mine:
        record = pipeline.wait(run_id, 60).termination
        assert record.reason == "user_cancelled" and "clean up" in record.details
    assert pipeline.client.status(theirs).status == "waiting"
    # --reason-filter: words of the task or of why each waits; --phase: the phase each is in
    staging = pipeline.client.submit(
        example("approval-denied", user_id=f"w-{tag}", task="Rotate the staging keys")
    )
    other = pipeline.client.submit(example("approval-denied", user_id=f"w-{tag}"))
    for run_id in (staging, other):
        wait_for_person(pipeline, run_id)
    phase = pipeline.client.status(staging).phase
    picked = cli(
        "cancel",
        "--user",
        f"w-{tag}",
        "--reason-filter",
        "staging",
        "--phase",
        phase,
        "--yes",
        url=pipeline.url,
    )
    assert picked.exit_code == 0 and "cancel requested for 1 run(s)" in picked.output, picked.output
    assert "matching 'staging'" in picked.output and f"in phase {phase}" in picked.output
    assert pipeline.wait(staging, 60).termination.reason == "user_cancelled"
    assert pipeline.client.status(other).status == "waiting"
    none = cli("cancel", "--user", f"w-{tag}", "--phase", "no-such-phase", url=pipeline.url)
    assert none.exit_code == 0 and "nothing to cancel" in none.output, none.output
    pipeline.client.cancel(other, reason="done")
    for bad, why in (
        (("cancel", theirs, "--user", "x"), "not both"),
        (("cancel", theirs, "--reason-filter", "x"), "not both"),
        (("cancel",), "name the run to cancel"),
        (("cancel", "--user", "x", "--status", "terminated"), "not yet ended"),
    ):
        got = cli(*bad, url=pipeline.url)
        assert got.exit_code != 0 and why in got.output, got.output
    pipeline.client.cancel(theirs, reason="done")
