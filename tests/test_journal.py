"""The step journal (issue 64): every model and tool call of a phase attempt is a step Mother records with
its charge, and a new attempt of the phase resumes from it, paying for no step twice. Real processes:
the embedded server, two Mothers, two worker hosts; the scripted model and a local chat-completions
server that counts what it is asked."""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from mother import keys
from mother.clock import ServerClock
from mother.config import load_settings
from mother.journal import check_step
from mother.server import EmbeddedRedis
from mother.tools import sync
from schemas.journal import MAX_STEP_BYTES, Step, chain
from tests.chat_server import ChatServer
from tests.conftest import ROOT, Pipeline, start_pipeline, stop_pipeline, wait_for_person
from tests.test_pipeline import wait_until
from tests.test_resilience import _running_worker

# the destructive tool the drills call (tests/tool_fixtures.py), allowed on the workers
ENV = {
    "MOTHER_WORKER__ALLOWED_JOBS": json.dumps(["tests.tool_fixtures.deploy"]),
    # the roles' capabilities: the shipped ones and deploy
    "MOTHER_HARNESS__DEFAULT_PERMISSIONS": json.dumps(
        ["tool.write_file", "tool.list_dir", "tool.run_tests", "tool.deploy", "model.*"]
    ),
    "PYTHONPATH": str(ROOT),
    # the scripted model at a price: what a step costs shows in the run's spend
    "MOTHER_MODELS": json.dumps(
        {
            "scripted": {
                "provider": "scripted",
                "input_price_per_1k_usd": 0.01,
                "output_price_per_1k_usd": 0.03,
            }
        }
    ),
    "MOTHER_TOOLS__REFRESH_SECONDS": "0.5",
}
DEPLOY = {
    "tool_id": "deploy",
    "tool_name": "Deploy",
    "version": "1.0.0",
    "description": "Deploys the workspace to a target (destructive: each call deploys again).",
    "category": "compute",
    "input_schema": {
        "type": "object",
        "properties": {"target": {"type": "string"}, "seconds": {"type": "number"}},
        "required": ["target"],
    },
    "output_schema": {
        "type": "object",
        "properties": {"count": {"type": "integer"}},
        "required": ["count"],
    },
    "side_effects": "destructive",
    "priority": 10,
    "allowed_roles": ["*"],
    "entrypoint": "tests.tool_fixtures:deploy",
}
TEST_COMMAND = "python -m pytest -q -p no:cacheprovider"


def _calls(*calls: tuple[str, dict[str, Any]], **reply: Any) -> dict[str, Any]:
    return {
        "tool_calls": [{"name": n, "arguments": a} for n, a in calls],
        "usage": {"input_tokens": 1000, "output_tokens": 100},
        **reply,
    }


def drill(delay: float = 0.0) -> dict[str, Any]:
    """A one-phase run of 5 model calls and 4 tool calls (2 write_file, run_tests, the destructive
    deploy); its 4th model call takes ``delay`` seconds on the first attempt (where it is crashed)."""
    deploy = ("deploy", {"target": "prod"})
    return {
        "run_id": f"journal-{uuid.uuid4().hex[:8]}",
        "user_id": "journal",
        "task": "Build the feature and ship it",
        "pipeline": [{"name": "build", "role": "coder", "model": "scripted"}],
        "scripts": {
            "coder": [
                _calls(("write_file", {"path": "a.py", "content": "A = 1\n"})),
                _calls(
                    (
                        "write_file",
                        {
                            "path": "test_a.py",
                            "content": "from a import A\n\ndef test_a():\n    assert A == 1\n",
                        },
                    )
                ),
                _calls(("run_tests", {"repo_path": ".", "test_command": TEST_COMMAND})),
                _calls(deploy, delay_seconds=delay, attempts=[1]),
                _calls(deploy, attempts=[2]),
                {
                    "text": "built, tested and deployed",
                    "usage": {"input_tokens": 1200, "output_tokens": 50},
                },
            ]
        },
    }


def _sync(p: Pipeline, folder: Path, *extra: dict[str, Any]) -> None:
    """The shipped tools, deploy and ``extra`` in the registry (workers read it at each attempt's begin)."""
    folder.mkdir(parents=True, exist_ok=True)
    for manifest in (DEPLOY, *extra):
        (folder / f"{manifest['tool_id']}.yaml").write_text(yaml.safe_dump(manifest))
    settings = load_settings(redis_url=p.url)
    tools = settings.tools.model_copy(update={"manifests_dir": folder})
    sync(p.redis, settings.model_copy(update={"tools": tools}), ServerClock(p.redis).now_iso())


@pytest.fixture
def journaled(tmp_path: Path) -> Iterator[Pipeline]:
    """Two Mothers, two worker hosts (one workspace root: a host's loss is shown by deleting it), the
    deploy tool in the registry."""
    p = start_pipeline(tmp_path, mothers=2, workers=2, env=ENV)
    _sync(p, tmp_path / "manifests")
    try:
        yield p
    finally:
        stop_pipeline(p)


def steps(p: Pipeline, run_id: str, index: int = 0) -> list[Step]:
    return [
        Step.model_validate_json(s) for s in p.redis.lrange(keys.journal_key(run_id, index), 0, -1)
    ]


def _sent(p: Pipeline, run_id: str, number: int, kind: str) -> bool:
    return any(
        s.step == number and s.kind == kind and s.state == "sent" and s.attempt == 1
        for s in steps(p, run_id)
    )


def counters(p: Pipeline, run_id: str) -> dict[str, int]:
    doc = orjson.loads(p.redis.execute_command("JSON.GET", keys.run_budget_key(run_id)))
    return {
        k: doc[k]
        for k in ("model_calls", "input_tokens", "output_tokens", "spend_micro_usd", "tool_calls")
    }


def _activity(p: Pipeline, run_id: str, kind: str) -> list[dict[str, Any]]:
    return [
        orjson.loads(e.get("data") or "{}")
        for _id, e in p.redis.xrange(keys.run_activity_key(run_id))
        if e["type"] == kind
    ]


def _kill_horse(p: Pipeline) -> None:
    _worker, horses = wait_until(lambda: _running_worker(p), timeout=10)
    for horse in horses:
        os.kill(horse, signal.SIGKILL)


def _host_running(p: Pipeline, run_id: str) -> str:
    mark = str(p.redis.get(keys.attempt_heartbeat_key(run_id, 0, 1)) or "")
    return mark.split(":")[0]


def _crash(p: Pipeline, how: str, run_id: str) -> None:
    """Crash the attempt running ``run_id``'s phase, during its 4th model call."""
    if how == "horse":
        _kill_horse(p)
    elif how == "host":
        # every process of the host running it (its horse is a session of its own); its workspace goes
        # with it, as on another machine
        host = wait_until(lambda: _host_running(p, run_id), timeout=10)
        _worker, horses = wait_until(lambda: _running_worker(p), timeout=10)
        os.killpg(p.stack.procs[f"worker-{host.rsplit('-', 1)[1]}"].pid, signal.SIGKILL)
        for horse in horses:
            os.kill(horse, signal.SIGKILL)
        shutil.rmtree(p.workspace / run_id)
    elif how == "redis":
        # longer than the heartbeat timeout: the attempt's beats are gone when the server is back
        port, folder = p.server.port, p.server.dir
        p.server.stop()
        time.sleep(4)
        p.server = EmbeddedRedis(port=port, dir=folder, appendfsync="no").start()
    elif how == "leader":
        holder = str(p.redis.get(keys.LEADER_LEASE) or "")
        (leader,) = [
            proc
            for name, proc in p.stack.procs.items()
            if name.startswith("mother-") and holder.startswith(keys.leader_prefix(proc.pid))
        ]
        os.kill(leader.pid, signal.SIGKILL)


@pytest.mark.parametrize("how", ["horse", "host", "redis", "leader"])
def test_a_crashed_phase_resumes_from_its_journal_and_pays_each_step_once(
    journaled: Pipeline, how: str
) -> None:
    """A phase of 5 model calls and 4 tool calls crashed during its 4th model call (kill -9 of the
    work-horse; of every process of its host, the other host resuming with the workspace gone; a
    Redis restart; kill -9 of the leading Mother). The retry replays steps 1-6 from the journal (no
    model call, no charge, the tools not run again; the writes re-applied) and makes steps 7-9 live:
    tokens, spend and tool calls equal an uninterrupted run's, model calls one more (the call in
    flight, whose reservation was given back); the files are there, deploy ran once, the output is
    the same, and the timeline and the metrics say what was replayed. A leader's death crashes no
    phase: it goes on, and every step is paid once."""
    p = journaled
    baseline = p.client.submit(drill())
    expected = p.wait(baseline, 60)
    assert expected.termination.reason == "success"
    uninterrupted = counters(p, baseline)
    assert (uninterrupted["model_calls"], uninterrupted["tool_calls"]) == (5, 4)

    # a leader's death crashes no phase: its slow call runs out (long enough for the kill to land in it)
    run_id = p.client.submit(drill(delay=6 if how == "leader" else 20))
    wait_until(lambda: _sent(p, run_id, 7, "model"), timeout=60)
    _crash(p, how, run_id)
    envelope = p.wait(run_id, 120)
    assert envelope.termination.reason == "success", envelope.termination
    assert envelope.output == expected.output
    got = counters(p, run_id)
    resumed = how != "leader"
    assert got == {**uninterrupted, "model_calls": 5 + resumed}
    assert (p.workspace / run_id / "a.py").read_text() == "A = 1\n"
    assert (p.workspace / run_id / "test_a.py").exists()
    assert (p.workspace / run_id / "deployed.log").read_text() == "prod\n"
    state = p.client.status(run_id)
    accepted = state.results[-1]
    if not resumed:
        assert accepted.attempt == 1 and accepted.resumed is None
        return
    assert accepted.attempt == 2 and accepted.resumed is not None
    assert (accepted.resumed.replayed, accepted.resumed.steps) == (6, 9)
    assert accepted.resumed.label() == "replayed 1-6, live 7-9"
    assert accepted.resumed.model_calls_saved == 3 and accepted.resumed.tool_calls_saved == 3
    assert accepted.resumed.tokens_saved == 3 * 1100
    # 3 calls of 1,000 input tokens ($0.01 per 1k) and 100 output ($0.03 per 1k)
    assert accepted.resumed.spend_saved_micro_usd == 3 * 13_000
    assert uninterrupted["spend_micro_usd"] > 0
    # what the attempt reports is the phase's, as if it had run once
    assert (accepted.usage.model_calls, accepted.usage.tool_calls) == (5, 4)
    (said,) = _activity(p, run_id, "phase_resumed")
    assert (said["replayed"], said["live_from"], said["tokens_saved"]) == (6, 7, 3300)
    view = p.client.inspect(run_id)
    assert [a.get("steps") for a in view["timeline"]["attempts"]][-1] == "replayed 1-6, live 7-9"
    metrics = p.redis.hgetall(keys.METRICS_COUNTERS)
    assert int(metrics["steps_replayed"]) >= 6 and int(metrics["tokens_saved"]) >= 3300
    text = _scrape(p)
    assert "mother_steps_replayed_total" in text and "mother_tokens_saved_total" in text
    # the journal: attempt 1's six steps done and the 7th sent; attempt 2's 7th to 9th
    recorded = [(s.attempt, s.step, s.state) for s in steps(p, run_id)]
    assert (1, 7, "sent") in recorded and (1, 7, "done") not in recorded
    assert [(a, n) for a, n, st in recorded if st == "done"] == [
        *((1, n) for n in range(1, 7)),
        *((2, n) for n in range(7, 10)),
    ]


def _scrape(p: Pipeline) -> str:
    from prometheus_client import generate_latest
    from prometheus_client.registry import CollectorRegistry

    from mother.web.metrics import RedisCollector

    registry = CollectorRegistry()
    registry.register(RedisCollector(p.redis))
    return generate_latest(registry).decode()


def _in_flight_spec() -> dict[str, Any]:
    """A phase whose destructive deploy (3 s) is in flight when its horse is killed."""
    return {
        "run_id": f"inflight-{uuid.uuid4().hex[:8]}",
        "user_id": "journal",
        "task": "Ship the feature",
        "pipeline": [{"name": "ship", "role": "coder", "model": "scripted"}],
        "scripts": {
            "coder": [
                _calls(("write_file", {"path": "a.py", "content": "A = 1\n"})),
                _calls(("deploy", {"target": "prod", "seconds": 3})),
                {"text": "shipped"},
            ]
        },
    }


@pytest.mark.parametrize("decision", ["approve", "deny"])
def test_a_destructive_call_in_flight_waits_for_a_person(
    journaled: Pipeline, decision: str
) -> None:
    """The horse is killed while the destructive deploy runs: the retry replays steps 1-3 and, not
    knowing whether deploy ran, stops at a gate that names the call in flight; approved, it runs again
    (tool calls: the write, deploy twice) and the run succeeds; denied, the run ends approval_denied."""
    p = journaled
    run_id = p.client.submit(_in_flight_spec())
    wait_until(lambda: _sent(p, run_id, 4, "tool"), timeout=60)
    _kill_horse(p)
    state = wait_for_person(p, run_id, timeout=60)
    assert state.gate is not None and state.gate.subject == "deploy in flight (step 4)"
    assert state.gate.tool is not None and state.gate.tool.tool == "deploy"
    if decision == "deny":
        p.client.deny(run_id, actor="ops", reason="it did deploy")
        assert p.wait(run_id, 60).termination.reason == "approval_denied"
        assert not (p.workspace / run_id / "deployed.log").exists()
        return
    p.client.approve(run_id, actor="ops", reason="it did not deploy")
    assert p.wait(run_id, 60).termination.reason == "success"
    assert (p.workspace / run_id / "deployed.log").read_text() == "prod\n"
    assert counters(p, run_id)["tool_calls"] == 3
    assert p.client.status(run_id).results[-1].resumed.replayed == 3  # type: ignore[union-attr]


def test_a_changed_tool_registry_diverges_at_the_first_step_and_runs_live(
    journaled: Pipeline, tmp_path: Path
) -> None:
    """Between the attempts the tool registry changes (a role file changes the request only through its
    hooks' context or the tools it is offered: the same check, the request's digest, catches both): the
    retry's first call differs from the journal's, so it says resume_diverged at step 1 and makes every
    call live."""
    p = journaled
    run_id = p.client.submit(drill(delay=20))
    wait_until(lambda: _sent(p, run_id, 7, "model"), timeout=60)
    extra = {**DEPLOY, "tool_id": "rollback", "tool_name": "Rollback"}
    _sync(p, tmp_path / "more", extra)
    _kill_horse(p)
    assert p.wait(run_id, 120).termination.reason == "success"
    (said,) = _activity(p, run_id, "resume_diverged")
    assert said["step"] == 1 and "conversation differs" in said["why"]
    assert p.client.status(run_id).results[-1].resumed is None
    assert _activity(p, run_id, "phase_resumed") == []
    # 4 model calls by the first attempt (the 4th in flight), 5 by the second
    assert counters(p, run_id)["model_calls"] == 9


def test_a_real_models_phase_resumes_without_asking_the_model_again_and_replays_from_its_journal(
    tmp_path: Path,
) -> None:
    """A phase on the local chat-completions server (it counts requests): the first attempt makes 3
    requests (the third killed mid-call), the retry 1, not 3. The replay bundle's replies come from the
    journal (both tool-call turns included), and `replay` runs them to the same output with no request
    reaching the server: tokens and tool calls equal, one model call fewer (the original's in flight)."""
    from mother.client import MotherClient
    from mother.replay import export, replay

    replies = [
        {
            "text": None,
            "tool_calls": [{"name": "write_file", "arguments": {"path": "n.txt", "content": "hi"}}],
        },
        {"text": "Listing.", "tool_calls": [{"name": "list_dir", "arguments": {}}]},
        {"text": "slow", "delay": 20},
        {
            "text": "The workspace holds n.txt.",
            "usage": {"prompt_tokens": 30, "completion_tokens": 6},
        },
    ]
    with ChatServer(replies) as chat:
        models = {
            "scripted": {"provider": "scripted"},
            "local-llm": {
                "provider": "openai",
                "base_url": chat.url,
                "request_timeout_seconds": 60,
            },
        }
        p = start_pipeline(tmp_path, workers=1, env={"MOTHER_MODELS": json.dumps(models)})
        try:
            client = MotherClient(settings=load_settings(redis_url=p.url, models=models))
            run_id = client.submit(
                {
                    "user_id": "u1",
                    "task": "Describe the workspace",
                    "pipeline": [{"name": "look", "role": "analyst", "model": "local-llm"}],
                }
            )
            wait_until(lambda: len(chat.requests) == 3, timeout=60)
            _kill_horse(p)
            envelope = client.wait(run_id, 90)
            assert envelope.termination.reason == "success"
            assert envelope.output == "The workspace holds n.txt."
            assert len(chat.requests) == 4
            original = counters(p, run_id)
            bundle = export(client, run_id)
            assert bundle["replies"]["source"] == "journal"
            (turns,) = bundle["replies"]["scripts"].values()
            assert [t.get("tool_calls", [{}])[0].get("name") for t in turns[:2]] == [
                "write_file",
                "list_dir",
            ]
            assert "0" in bundle["journals"]
            again = replay(client, bundle, timeout=90)
            assert again.same_reason and len(chat.requests) == 4
            assert client.wait(again.run_id, 10).output == envelope.output
            replayed = counters(p, again.run_id)
            for name in ("input_tokens", "output_tokens", "tool_calls"):
                assert replayed[name] == original[name], name
            assert replayed["model_calls"] == original["model_calls"] - 1
        finally:
            stop_pipeline(p)


def test_an_ask_delivered_again_is_charged_and_recorded_once(journaled: Pipeline) -> None:
    """A charge ask another Mother applies again (the first died before acknowledging it) charges
    nothing twice and records its step once: mh_guard keeps each attempt's last ask."""
    from mother.asks.attempts import charge
    from mother.asks.wire import Ask
    from mother.runtime import Runtime

    p = journaled
    with inproc_mother(p) as rt:
        run_id = p.client.submit(drill(delay=20))
        wait_until(lambda: _sent(p, run_id, 7, "model"), timeout=60)
        host = _host_running(p, run_id)
        before = counters(p, run_id)
        step = {"step": 8, "lane": "", "kind": "tool", "state": "sent", "tool": "deploy",
                "arguments": {"target": "prod"}, "side_effects": "destructive"}  # fmt: skip
        action = {
            "read_only": False,
            "check": ["tool_calls"],
            "add": {"tool_calls": 1},
            "step": step,
        }
        ask = Ask(host, "1-1", "charge", "a1", (run_id, 0, 1), {"action": action})
        for _ in range(2):
            assert charge(rt, ask).reply["ok"]  # type: ignore[index]
        assert counters(p, run_id)["tool_calls"] == before["tool_calls"] + 1
        assert [s.step for s in steps(p, run_id) if s.step == 8] == [8]
        assert isinstance(rt, Runtime)


def inproc_mother(p: Pipeline) -> Any:
    from contextlib import contextmanager

    from mother.config import load_settings
    from mother.runtime import Runtime

    @contextmanager
    def made() -> Iterator[Runtime]:
        rt = Runtime.create(load_settings(redis_url=p.url))
        yield rt

    return made()


def test_a_step_is_checked_and_a_bad_journal_entry_is_skipped() -> None:
    """A step Mother records is checked: not an object, not a step, or over 256 KB is refused in one
    line (the charge goes on without it), and its attempt and time are Mother's. A journal element
    that is not a step is skipped (the chain goes on without it), and one attempt's step re-made by a
    later attempt replaces what came after it."""
    now = "2026-12-06T00:00:00.000Z"
    sent = {"step": 1, "kind": "model", "state": "sent", "digest": "a" * 64, "model": "scripted"}
    recorded = orjson.loads(check_step({**sent, "attempt": 9}, 2, now))
    assert (recorded["attempt"], recorded["at"]) == (2, now)
    for bad, why in (
        ("x", "a step is a JSON object"),
        ({"step": 0, "kind": "model", "state": "sent"}, "not a journal step"),
        ({"step": 1, "kind": "model", "state": "sent"}, "digest"),
        (
            {
                "step": 1,
                "kind": "tool",
                "state": "done",
                "output": "x" * MAX_STEP_BYTES,
                "ok": True,
            },
            "bytes",
        ),
    ):
        with pytest.raises(Exception, match=why) as caught:
            check_step(bad, 1, now)
        assert "\n" not in str(caught.value)
    reply = {"text": None, "tool_calls": [{"id": "c", "name": "list_dir", "arguments": {}}]}
    done = {"step": 1, "attempt": 1, "kind": "model", "state": "done", "reply": reply}
    tool = {"step": 2, "attempt": 1, "kind": "tool", "state": "sent", "tool": "list_dir"}
    elements = [
        orjson.dumps({**sent, "attempt": 1}),
        b"not json at all",
        orjson.dumps(done),
        orjson.dumps(tool),
        orjson.dumps({**tool, "state": "done", "output": "[]", "ok": True}),
        orjson.dumps({**sent, "step": 3, "attempt": 1}),
        # the second attempt re-makes step 2: step 3 of the first is no longer in the chain
        orjson.dumps({**tool, "attempt": 2}),
    ]
    found = chain(elements, "")
    assert found.malformed == [1]
    assert sorted(found.sent) == [1, 2] and found.done(1) is not None and found.done(2) is None
    # a finished chain (its last step a final reply) is not replayed: a new attempt starts afresh
    final = {**done, "step": 2, "reply": {"text": "done"}}
    finished = [orjson.dumps({**sent, "attempt": 1}), orjson.dumps(done),
                orjson.dumps({**sent, "step": 2, "attempt": 1}), orjson.dumps(final)]  # fmt: skip
    assert len(chain(finished, "")) == 0 and len(chain(finished, "", keep_complete=True)) == 2
    # another lane's steps (a conflict's arbiter) are not this lane's
    assert len(chain(elements, "run_arbiter:c-1")) == 0
