"""First contact: setup mistakes refused or named at the right moment, not retried as run failures.
Real Mother and workers; the model double is the local chat-completions server."""

from __future__ import annotations

import os
import socket
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
import yaml

from mother.errors import InvalidSpec
from tests.chat_server import ChatServer
from tests.conftest import Pipeline, run_cli, start_pipeline, stop_pipeline
from tests.test_pipeline import wait_until


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def chat() -> Iterator[ChatServer]:
    with ChatServer([], serves=("local-model",)) as server:
        yield server


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory, chat: ChatServer) -> Iterator[Path]:
    path = tmp_path_factory.mktemp("first-contact") / "mother.yaml"
    common = {"max_tokens": 32_000, "reserved_for_system": 500, "reserved_for_output": 2_000}
    path.write_text(
        yaml.safe_dump(
            {
                "models": {
                    "local": {
                        "provider": "openai",
                        "base_url": chat.url,
                        "model": "local-model",
                        **common,
                    },
                    "renamed": {
                        "provider": "openai",
                        "base_url": chat.url,
                        "model": "other",
                        **common,
                    },
                    "offline": {
                        "provider": "openai",
                        "base_url": f"http://127.0.0.1:{_closed_port()}/v1",
                        **common,
                    },
                }
            }
        )
    )
    before = os.environ.get("MOTHER_CONFIG")
    os.environ["MOTHER_CONFIG"] = str(path)
    yield path
    if before is None:
        os.environ.pop("MOTHER_CONFIG", None)
    else:
        os.environ["MOTHER_CONFIG"] = before


@pytest.fixture(scope="module")
def stack(config: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pipeline]:
    p = start_pipeline(tmp_path_factory.mktemp("stack"), env={"MOTHER_CONFIG": str(config)})
    yield p
    stop_pipeline(p)


def test_a_scripted_role_without_replies_is_refused_at_submit(stack: Pipeline) -> None:
    spec = {
        "user_id": "alice",
        "task": "Plan the release",
        "pipeline": [{"name": "plan", "role": "planner", "model": "scripted"}],
        "scripts": {"coder": [{"text": "not the planner's"}]},
    }
    with pytest.raises(
        InvalidSpec, match=r"role 'planner' runs on the scripted model .* no 'planner' entry"
    ):
        stack.client.submit(spec)
    # a raw XADD skips the client: Mother refuses it at intake, and nothing runs
    run_id = f"raw-{uuid.uuid4().hex[:8]}"
    stack.redis.xadd("mother:submissions", {"spec": orjson.dumps({**spec, "run_id": run_id})})
    wait_until(lambda: stack.client.rejection_for(run_id) is not None, timeout=20)
    assert "no 'planner' entry" in stack.client.rejection_for(run_id)["error"]
    assert not stack.redis.exists(f"run:{run_id}")
    # role@model counts, and a phase with a task a tool may do is let through
    ok = {**spec, "scripts": {"planner@scripted": [{"text": "plan"}]}}
    assert stack.wait(stack.client.submit(ok)).termination.reason == "success"


def test_an_unreachable_model_ends_the_run_blocked_at_once_naming_the_fix(stack: Pipeline) -> None:
    run_id = stack.client.submit(
        {
            "user_id": "alice",
            "task": "Summarise the notes",
            "pipeline": [{"name": "sum", "role": "writer", "model": "offline", "max_retries": 3}],
        }
    )
    record = stack.wait(run_id).termination
    assert (record.reason, record.suggested_action) == ("blocked", "user_input"), record.details
    assert "model 'offline' at http://127.0.0.1:" in record.details
    assert "cannot be reached" in record.details and "mother doctor --models" in record.details
    # no phase retry was spent on it: attempt 1 was the only one; its call was sent again once
    # (call_retries: a refused connection may be a server restarting) before the run ended
    attempts = {h.attempt for h in stack.client.status(run_id).history if h.attempt}
    assert attempts == {1}
    retried = [
        f
        for _, f in stack.redis.xrange(f"activity:run:{run_id}")
        if f["type"] == "model_call_retried"
    ]
    assert len(retried) == 1 and "cannot be reached" in retried[0]["data"]


def test_a_refused_connection_is_sent_again_and_a_server_back_answers(
    stack: Pipeline, config: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A model server that refuses the connection (restarting) and is back before the call's retries
    run out answers the call: the run succeeds on its first attempt (it ended blocked 45 ms after the
    first try)."""
    port = _closed_port()
    settings = yaml.safe_load(config.read_text())
    settings["models"]["restarting"] = {
        "provider": "openai",
        "base_url": f"http://127.0.0.1:{port}/v1",
        "model": "local-model",
        "call_retries": 4,
        "max_tokens": 32_000,
        "reserved_for_system": 500,
        "reserved_for_output": 2_000,
    }
    restarting = tmp_path / "mother.yaml"
    restarting.write_text(yaml.safe_dump(settings))
    monkeypatch.setenv("MOTHER_CONFIG", str(restarting))
    p = start_pipeline(tmp_path / "stack", env={"MOTHER_CONFIG": str(restarting)})
    try:
        run_id = p.client.submit(
            {
                "user_id": "alice",
                "task": "Summarise the notes",
                "pipeline": [{"name": "sum", "role": "writer", "model": "restarting"}],
            }
        )

        def retried() -> bool:
            return any(
                f["type"] == "model_call_retried"
                for _, f in p.redis.xrange(f"activity:run:{run_id}")
            )

        wait_until(retried, timeout=60)
        with ChatServer([{"text": "the summary"}], serves=("local-model",), port=port):
            envelope = p.wait(run_id, 60)
        assert envelope.termination.reason == "success" and envelope.output == "the summary"
        assert envelope.phases[0].attempt == 1
    finally:
        stop_pipeline(p)


def test_a_prompt_the_server_refuses_as_too_long_ends_context_budget_exceeded(
    stack: Pipeline, chat: ChatServer
) -> None:
    """HTTP 400 "request (4678 tokens) exceeds the available context size (2048 tokens)": the run ends
    context_budget_exceeded at once, naming it, not after retrying the same prompt until
    retries_exhausted; the server's count teaches the model's calibration."""
    refusal = "request (4678 tokens) exceeds the available context size (2048 tokens)"
    chat.replies[:] = [{"status": 400, "message": refusal}] * 4
    sent = len(chat.requests)
    run_id = stack.client.submit(
        {
            "user_id": "alice",
            "task": "Summarise the notes",
            "pipeline": [{"name": "sum", "role": "writer", "model": "local", "max_retries": 3}],
        }
    )
    record = stack.wait(run_id).termination
    assert record.reason == "context_budget_exceeded", record.details
    assert "4678 tokens" in record.details and "context window" in record.details
    assert len(chat.requests) - sent == 1
    # Mother adds what the attempt counted
    assert wait_until(
        lambda: int(stack.redis.hget("tokens:calibration:local", "reported") or 0) >= 4678,
        timeout=30,
    )
    chat.replies.clear()


def test_doctor_checks_every_model_endpoint(stack: Pipeline, config: Path) -> None:
    env = {"MOTHER_REDIS_URL": stack.url, "MOTHER_CONFIG": str(config)}
    done = run_cli("doctor", "--models", env=env)
    out = done.stdout
    assert done.returncode == 1, out + done.stderr
    assert "model local" in out and "serves local-model" in out
    assert "model renamed" in out and "does not list other (it lists local-model)" in out
    assert "model offline" in out and "cannot be reached" in out
    assert "model scripted" in out and "scripted (no endpoint)" in out
    assert done.stderr.count("\n") == 1 and "offline" in done.stderr


def test_watching_runs_from_the_cli(stack: Pipeline, config: Path) -> None:
    import subprocess

    from tests.conftest import MOTHER_BIN, cli_env, wait_for_person
    from tests.test_pipeline import example

    env = {"MOTHER_REDIS_URL": stack.url, "MOTHER_CONFIG": str(config)}
    # wait: elapsed time, phase and attempt, what it waits for and the command that decides it
    gated = stack.client.submit(example("approval-denied"))
    wait_for_person(stack, gated)
    waited = run_cli("wait", gated, "--timeout", "2", env=env)
    assert waited.returncode != 0
    assert (
        f"{gated}: waiting after " in waited.stderr
        and " s, phase deploy attempt 0" in waited.stderr
    )
    assert "waits for approval: start phase deploy" in waited.stderr
    assert f"mother approve {gated}" in waited.stderr
    stack.client.deny(gated, actor="ops", reason="not now")

    # logs -f follows a running run until it ends
    slow = stack.client.submit(example("cancelled"))
    wait_until(
        lambda: stack.redis.exists(f"run:{slow}") and stack.client.status(slow).status == "running"
    )
    follow = subprocess.Popen(
        [str(MOTHER_BIN), "logs", slow, "-f"],
        env=cli_env(env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(1.0)
    stack.client.cancel(slow, actor="tester", reason="enough")
    out, err = follow.communicate(timeout=30)
    assert follow.returncode == 0, err
    lines = out.splitlines()
    assert lines[0].split()[1] == "run_submitted" and "terminated" in lines[-1]
    assert any("phase_dispatched" in line for line in lines)
    logged = run_cli("logs", slow, "--json", env=env)
    assert [orjson.loads(x)["type"] for x in logged.stdout.splitlines()][-1] == "terminated"

    # resubmit: the same spec as a new run
    again = run_cli("resubmit", gated, "--json", env=env)
    assert again.returncode == 0, again.stderr
    new = orjson.loads(again.stdout)["run_id"]
    state = stack.client.status(new)
    assert new != gated and state.spec.metadata["resubmitted_from"] == gated
    assert state.spec.pipeline == stack.client.status(gated).spec.pipeline

    watched = run_cli("runs", "--watch", "--times", "2", "--interval", "0.2", env=env)
    assert watched.returncode == 0 and watched.stdout.count("runs at") >= 1
    assert "--install-completion" in run_cli("--help", env=env).stdout


def test_budget_show_says_which_layer_set_each_limit(stack: Pipeline, config: Path) -> None:
    from mother.limits import resolve_for_spec
    from tests.test_pipeline import example

    env = {"MOTHER_REDIS_URL": stack.url, "MOTHER_CONFIG": str(config), "COLUMNS": "250"}
    run_id = stack.client.submit(example("three-phase", limit_overrides={"turns": 5}))
    assert stack.wait(run_id).termination.reason == "success"
    limits = stack.client.inspect(run_id)["budget"]
    sources = limits["limit_sources"]
    assert (
        sources["model_calls"] == "limit_overrides (turns)" and limits["limits"]["model_calls"] == 5
    )
    assert sources["tool_calls"] == "budget.profiles.balanced"
    assert sources["cloud_calls"] == "budget.per_run"
    # the wall clock and tokens: the balanced profile's, not the harness defaults' 600 s and 200k
    resolved = resolve_for_spec(stack.client.settings, stack.client.status(run_id).spec)
    assert resolved["duration_seconds"] == limits["limits"]["duration_sec"] == 1800
    assert sources["duration_sec"] == sources["total_tokens"] == "budget.profiles.balanced"
    shown = run_cli("budget", "show", run_id, env=env)
    assert shown.returncode == 0, shown.stderr
    row = next(line for line in shown.stdout.splitlines() if "model_calls" in line)
    assert "limit_overrides (turns)" in row and "set by" in shown.stdout


def test_workers_log_json_lines_and_say_when_an_attempt_failed(stack: Pipeline) -> None:
    from tests.test_pipeline import example

    failing = stack.client.submit(example("retries-exhausted"))
    assert stack.wait(failing).termination.reason == "retries_exhausted"
    for _ in range(2):
        assert (
            stack.wait(stack.client.submit(example("three-phase"))).termination.reason == "success"
        )
    worker_lines = []
    for log in sorted(stack.stack.log_dir.glob("worker-*.log")):
        for line in log.read_text().splitlines():
            if line.strip():
                worker_lines.append(orjson.loads(line))  # every line is JSON
    rq_lines = [x for x in worker_lines if str(x.get("logger", "")).startswith("rq.")]
    assert rq_lines, "RQ's own lines come through as JSON"
    from mother.keys import phase_job_id

    at = stack.client.status(failing).phase_index
    failed_jobs = {
        phase_job_id(host, failing, at, n) for host in ("local-0", "local-1") for n in (1, 2, 3)
    }
    seen = [x for x in rq_lines if any(job in x["event"] for job in failed_jobs)]
    assert seen, "RQ's lines name the failed attempts' jobs"
    for line in rq_lines:
        for job in failed_jobs:
            if job in line["event"]:
                assert "Job OK" not in line["event"]
    assert any("phase attempt failed" in x["event"] for x in rq_lines)
    assert any("Job OK" in x["event"] for x in rq_lines)
    mother_log = "".join(p.read_text() for p in stack.stack.log_dir.glob("mother-*.log"))
    warned = [
        orjson.loads(line)
        for line in mother_log.splitlines()
        if '"capability_risk"' in line and '"warning"' in line
    ]
    pairs = [(w.get("role"), w.get("warning")) for w in warned if w.get("level") == "warning"]
    assert len(pairs) == len(set(pairs)), "each role's risk warning is logged once"


def test_every_client_error_is_one_line_mother_error(r, redis_url: str) -> None:
    """A Redis at its memory limit, and one too slow to answer, give the client a one-line Mother error
    that says what to do (never the spec it was sent), not redis-py's OutOfMemoryError or TimeoutError."""
    import redis as redis_lib

    from mother.client import MotherClient
    from mother.config import load_settings
    from mother.errors import MotherError, RedisUnavailable
    from mother.functions import load_functions
    from tests.test_pipeline import example

    load_functions(r)
    spec = example("three-phase", task="SECRET-TASK-TEXT " * 20)
    client = MotherClient(settings=load_settings(redis_url=redis_url))
    policy = r.config_get("maxmemory-policy")["maxmemory-policy"]
    r.config_set("maxmemory-policy", "noeviction")
    r.config_set("maxmemory", "1")
    try:
        with pytest.raises(RedisUnavailable) as full:
            client.submit(spec)
    finally:
        r.config_set("maxmemory", "0")
        r.config_set("maxmemory-policy", policy)
    assert "memory limit" in full.value.message and "\n" not in full.value.message
    assert "SECRET-TASK-TEXT" not in full.value.message and full.value.unreachable
    slow = MotherClient(
        settings=load_settings(redis_url=redis_url),
        client=redis_lib.Redis.from_url(redis_url, decode_responses=True, socket_timeout=0.3),
    )
    r.execute_command("CLIENT", "PAUSE", "1500", "ALL")
    with pytest.raises(MotherError, match=r"^Redis did not answer in time") as late:
        slow.runs(limit=1)
    assert isinstance(late.value, RedisUnavailable) and "\n" not in late.value.message
    wait_until(lambda: r.ping(), timeout=10)
