"""Human gates end to end: runs that wait for a person's approval or answer, with real Redis, Mother and
workers; decisions from the Python client, the CLI and a raw XADD; deadlines on the server's clock;
waiting runs that outlive kill -9 of Mother and of Redis."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from mother import keys
from mother.activity import recent
from mother.errors import GateRefused, InvalidSpec
from mother.functions import server_now_ms
from mother.records.budgets import budget_doc
from mother.server import EmbeddedRedis
from schemas import RunState
from tests.conftest import Pipeline, run_cli, start_pipeline, stop_pipeline
from tests.test_pipeline import example, wait_until


@pytest.fixture(scope="module")
def gated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pipeline]:
    p = start_pipeline(tmp_path_factory.mktemp("gates"))
    yield p
    stop_pipeline(p)


def _waiting(p: Pipeline, run_id: str, timeout: float = 30) -> RunState:
    def ready() -> RunState | None:
        if not p.redis.exists(keys.run_key(run_id)):
            return None
        state = p.client.status(run_id)
        assert state.status != "terminated", f"{run_id} ended {state.reason}"
        return state if state.status == "waiting" else None

    return wait_until(ready, timeout=timeout)


def _raw(p: Pipeline, run_id: str) -> Any:
    return p.redis.execute_command("JSON.GET", keys.run_key(run_id))


def test_a_phase_waits_for_approval_with_its_clock_paused_then_runs(gated: Pipeline) -> None:
    """require_approval: the run waits at the phase's attempt 0 (no job, no phase deadline, its wall clock
    paused), with a deadline on the server's clock; approved, the phase is dispatched and the decision
    is kept with actor, reason and the server's time."""
    spec = example("approval-denied", gate_timeout_seconds=600)
    run_id = gated.client.submit(spec)
    state = _waiting(gated, run_id)
    gate = state.gate
    assert gate is not None and (gate.kind, gate.phase, state.attempt, gate.approvers) == (
        "approval",
        "deploy",
        0,
        ["ops"],
    )
    now = server_now_ms(gated.redis)
    assert gate.deadline_ms is not None and 0 < gate.deadline_ms - now <= 600_000
    assert gated.redis.zscore(keys.GATE_DEADLINES, run_id) == gate.deadline_ms
    assert gated.redis.zscore(keys.RUNS_WAITING, run_id) is not None
    # paused: no run or phase deadline while it waits
    assert gated.redis.zscore(keys.RUN_DEADLINES, run_id) is None
    assert gated.redis.zscore(keys.PHASE_DEADLINES, run_id) is None
    assert gate.paused_run_ms is not None and gate.paused_run_ms > 0
    started_before = budget_doc(gated.redis, keys.run_limits_key(run_id))["started_ms"]
    time.sleep(1.0)
    reply = gated.client.approve(
        run_id, actor="ops", reason="change 42 approved", digest=gate.digest
    )
    assert reply == {
        "run_id": run_id,
        "gate_id": gate.gate_id,
        "decision": "approve",
        "actor": "ops",
    }
    assert gated.wait(run_id).termination.reason == "success"
    state = gated.client.status(run_id)
    (kept,) = state.gates
    assert kept.decision is not None
    assert (kept.gate_id, kept.decision.decision, kept.decision.actor, kept.decision.reason) == (
        gate.gate_id,
        "approve",
        "ops",
        "change 42 approved",
    )
    assert kept.decision.at is not None and kept.decision.at >= (gate.opened_at or "")
    # the wait does not count toward the run's wall clock
    started_after = budget_doc(gated.redis, keys.run_limits_key(run_id))["started_ms"]
    assert started_after - started_before >= 1000
    events = [e.type for e in recent(gated.redis, 100, run_id=run_id)]
    assert "gate_opened" in events and "gate_decided" in events


def test_decisions_that_cannot_be_taken_are_refused_changing_nothing(gated: Pipeline) -> None:
    """A run that does not wait, another gate, an actor not allowed, a wrong digest, an answer to an
    approval, a second decision: each a one-line GateRefused or InvalidSpec, the run as it was."""
    run_id = gated.client.submit(example("approval-denied", gate_timeout_seconds=600))
    state = _waiting(gated, run_id)
    gate = state.gate
    assert gate is not None
    before = _raw(gated, run_id)
    refusals: list[tuple[Any, str]] = [
        (
            lambda: gated.client.approve(run_id, actor="ops", reason="r", gate_id="g9.9.x"),
            "not g9.9.x",
        ),
        (
            lambda: gated.client.approve(run_id, actor="mallory", reason="r"),
            "mallory may not decide",
        ),
        (
            lambda: gated.client.approve(run_id, actor="ops", reason="r", digest="0" * 64),
            "other content",
        ),
        (lambda: gated.client.answer(run_id, "yes", actor="ops"), "asks for approval"),
        (
            lambda: gated.client.approve(run_id, actor="no spaces allowed", reason="r"),
            "actor must be",
        ),
        (lambda: gated.client.answer(run_id, "x" * 100_001, actor="ops"), "the limit is 100000"),
    ]
    for attempt, says in refusals:
        with pytest.raises((GateRefused, InvalidSpec), match=says):
            attempt()
    assert _raw(gated, run_id) == before
    gated.client.deny(run_id, actor="ops", reason="freeze week")
    with pytest.raises(GateRefused, match="is not waiting for a person"):
        gated.client.approve(run_id, actor="ops", reason="too late")
    termination = gated.wait(run_id).termination
    assert (termination.reason, termination.suggested_action) == ("approval_denied", "user_input")
    assert "ops denied" in termination.details and "freeze week" in termination.details
    running = gated.client.submit(example("three-phase"))
    wait_until(lambda: gated.redis.exists(keys.run_key(running)))
    with pytest.raises(GateRefused, match="is not waiting for a person"):
        gated.client.approve(running, actor="ops", reason="r")


def test_mother_refuses_a_raw_decision_with_a_reply_and_an_activity_entry(gated: Pipeline) -> None:
    """What the client checks, Mother checks again on the server: a raw XADD from an actor not allowed gets
    a refusal on mother:reply:{entry}, a gate_decision_refused entry, and the run keeps waiting."""
    run_id = gated.client.submit(example("approval-denied", gate_timeout_seconds=600))
    state = _waiting(gated, run_id)
    assert state.gate is not None
    gate = {"gate_id": state.gate.gate_id, "digest": state.gate.digest}
    before = _raw(gated, run_id)
    # a decision that does not name its gate and digest could approve whatever the run waits on
    unnamed = gated.redis.xadd(
        keys.COMMANDS_STREAM,
        {
            "type": "approve",
            "payload": orjson.dumps({"run_id": run_id, "actor": "ops", "reason": "any gate"}),
        },
    )
    with pytest.raises(GateRefused, match="must name the gate it decides and its digest"):
        gated.client.command_reply(unnamed, 10)
    entry = gated.redis.xadd(
        keys.COMMANDS_STREAM,
        {
            "type": "approve",
            "payload": orjson.dumps({"run_id": run_id, "actor": "mallory", "reason": "me", **gate}),
        },
    )
    with pytest.raises(GateRefused, match="mallory may not decide"):
        gated.client.command_reply(entry, 10)
    assert _raw(gated, run_id) == before
    refused = [
        e for e in recent(gated.redis, 50, run_id=run_id) if e.type == "gate_decision_refused"
    ]
    assert refused and refused[-1].data["actor"] == "mallory"
    # the same from the raw stream, by an approver: taken
    entry = gated.redis.xadd(
        keys.COMMANDS_STREAM,
        {
            "type": "approve",
            "payload": orjson.dumps({"run_id": run_id, "actor": "ops", "reason": "ok", **gate}),
        },
    )
    assert gated.client.command_reply(entry, 10)["decision"] == "approve"
    assert gated.wait(run_id).termination.reason == "success"


def test_a_waiting_run_can_be_cancelled(gated: Pipeline) -> None:
    run_id = gated.client.submit(example("approval-denied", gate_timeout_seconds=600))
    _waiting(gated, run_id)
    gated.client.cancel(run_id, actor="ops", reason="not needed any more")
    assert gated.wait(run_id).termination.reason == "user_cancelled"
    for zset in (keys.GATE_DEADLINES, keys.GATE_WARNINGS, keys.RUNS_WAITING):
        assert gated.redis.zscore(zset, run_id) is None
    assert run_id not in [row["run_id"] for row in gated.client.waiting()]


def test_a_gate_nobody_decides_ends_the_run_blocked_after_a_warning(gated: Pipeline) -> None:
    run_id = gated.client.submit(example("gate-timeout", gate_timeout_seconds=2))
    termination = gated.wait(run_id, timeout=30).termination
    assert (termination.reason, termination.suggested_action) == ("blocked", "user_input")
    assert "before its deadline" in termination.details
    events = [e.type for e in recent(gated.redis, 100, run_id=run_id)]
    assert events.index("gate_deadline_warning") < events.index("gate_expired")
    state = gated.client.status(run_id)
    assert state.gates[-1].decision is not None and state.gates[-1].decision.decision == "expire"
    for zset in (keys.GATE_DEADLINES, keys.GATE_WARNINGS, keys.RUNS_WAITING):
        assert gated.redis.zscore(zset, run_id) is None


def test_a_conflicts_question_is_answered_and_the_answer_joins_the_next_context(
    gated: Pipeline,
) -> None:
    """request_user_input: the run waits on an input gate; `wait` says what for and how to answer; the
    answer settles the conflict and is a required part of every later phase's context."""
    run_id = gated.client.submit(example("conflict-ask-user"))
    state = _waiting(gated, run_id)
    assert state.gate is not None and state.gate.kind == "input" and state.gate.conflict_id
    notices: list[str] = []
    with pytest.raises(Exception, match="has not ended"):
        gated.client.wait(run_id, timeout=1.5, on_notice=notices.append)
    assert any("waits for an answer to" in n and f"mother answer {run_id}" in n for n in notices)
    gated.client.answer(run_id, "Use the UTC date.", actor="alice", reason="ops decision")
    assert gated.wait(run_id).termination.reason == "success"
    context = orjson.loads(gated.redis.execute_command("JSON.GET", keys.context_key(run_id, 1)))
    current = next(s for s in context["sections"] if s["section"] == "current_phase")
    assert "answer from alice: Use the UTC date." in current["content"]
    assert (
        next(s for s in context["sections"] if s["section"] == "current_phase")["required"] is True
    )


def test_a_tool_call_waits_for_approval_and_runs_once_approved(gated: Pipeline) -> None:
    """approval_tools: the phase stops before the call; approved, it runs again and makes exactly that
    call; waiting cost none of the phase's retries."""
    spec = example(
        "three-phase",
        approval_tools=["write_file"],
        approvers=["lead"],
        pipeline=[{"name": "execute", "role": "coder", "model": "scripted", "max_retries": 0}],
    )
    run_id = gated.client.submit(spec)
    state = _waiting(gated, run_id)
    gate = state.gate
    assert gate is not None and gate.tool is not None
    assert (gate.tool.tool, gate.tool.arguments["path"], state.attempt) == (
        "write_file",
        "CHANGELOG.md",
        1,
    )
    workspace = gated.workspace / run_id / "CHANGELOG.md"
    assert not workspace.exists()
    gated.client.approve(run_id, actor="lead", reason="the changelog may change")
    assert gated.wait(run_id).termination.reason == "success"
    assert workspace.read_text().startswith("# Changelog")
    state = gated.client.status(run_id)
    assert (state.attempt, state.retry_base, state.grants) == (2, 1, [gate.tool.digest])


def test_the_cli_lists_waiting_runs_and_approves(gated: Pipeline) -> None:
    run_id = gated.client.submit(example("approval-denied", gate_timeout_seconds=600))
    _waiting(gated, run_id)
    env = {"MOTHER_REDIS_URL": gated.url}
    listed = run_cli("runs", "--waiting", "--json", env=env)
    rows = [orjson.loads(line) for line in listed.stdout.splitlines()]
    (row,) = [r for r in rows if r["run_id"] == run_id]
    assert row["kind"] == "approval" and row["approvers"] == ["ops"]
    # with Mother's own credentials --actor names who decides
    assert row["command"].startswith(f"mother approve {run_id} --actor ops")
    wrong = run_cli("approve", run_id, "--actor", "eve", "--reason", "x", env=env)
    assert wrong.returncode != 0 and "error[gate_refused]: eve may not decide" in wrong.stderr
    done = run_cli("approve", run_id, "--actor", "ops", "--reason", "ok", env=env)
    assert done.returncode == 0, done.stderr
    assert "approve of gate" in done.stdout
    assert gated.wait(run_id).termination.reason == "success"


def test_a_waiting_run_outlives_kill_9_of_mother_and_of_redis(tmp_path: Path) -> None:
    """The gate lives in Redis (AOF, fsync always here): kill -9 of Mother and of the server, both back,
    and the run still waits on the same gate with the same deadline, and is answerable."""
    p = start_pipeline(tmp_path, workers=1)
    try:
        port, data_dir = p.server.port, p.server.dir
        p.server.stop()
        p.server = EmbeddedRedis(port=port, dir=data_dir, appendfsync="always").start()
        run_id = p.client.submit(example("approval-denied", gate_timeout_seconds=600))
        before = _waiting(p, run_id, timeout=60)
        mother = next(proc for name, proc in p.stack.procs.items() if name.startswith("mother-"))
        os.kill(mother.pid, signal.SIGKILL)
        assert p.server.pid is not None
        os.kill(p.server.pid, signal.SIGKILL)
        # reaps the killed server and frees its data dir
        p.server.stop()
        p.server = EmbeddedRedis(port=port, dir=data_dir, appendfsync="always").start()
        wait_until(lambda: p.stack.respawn_dead(), timeout=20)
        after = p.client.status(run_id)
        assert after.status == "waiting" and after.gate == before.gate
        reply = p.client.approve(run_id, actor="ops", reason="after the crash", timeout=30)
        assert reply["decision"] == "approve"
        assert p.wait(run_id, timeout=60).termination.reason == "success"
    finally:
        stop_pipeline(p)


def test_a_first_phase_that_requires_approval_waits_before_it_starts(gated: Pipeline) -> None:
    """require_approval on the pipeline's first phase: its start (from the run's (0, 0)) is not taken
    for the approval; the run waits, and runs once approved."""
    spec = example("three-phase")
    spec["pipeline"][0]["require_approval"] = True
    run_id = gated.client.submit(spec)
    state = _waiting(gated, run_id)
    assert state.gate is not None and state.gate.phase == "plan" and state.attempt == 0
    gated.client.approve(run_id, actor="ops", reason="go", digest=state.gate.digest)
    assert gated.wait(run_id).termination.reason == "success"


def test_the_decide_command_shown_is_the_one_that_works_for_its_reader() -> None:
    """A principal decides as itself (`--actor` is refused for principals): it is shown the command
    without it; one the gate does not name is told who may; a page's reader is shown each approver's
    own command; only Mother's own credentials get `--actor`."""
    from mother.client import SERVICE_VIEWER, gate_command
    from schemas.gate import Gate

    gate = Gate.model_validate(
        {
            "gate_id": "g-1",
            "kind": "approval",
            "phase": "deploy",
            "phase_index": 0,
            "attempt": 1,
            "timeout_ms": 60_000,
            "subject": "phase deploy",
            "approvers": ["ops"],
            "opened_at": "2026-11-28T00:00:00.000Z",
            "deadline": "2026-11-29T00:00:00.000Z",
            "digest": "0" * 64,
        }
    )
    assert gate_command("r-1", gate, "ops") == "mother approve r-1 --reason '...' (or mother deny)"
    assert gate_command("r-1", gate, "eve") == (
        "as ops, with its own credentials: mother approve r-1 --reason '...' (or mother deny)"
    )
    assert gate_command("r-1", gate, None).startswith("as ops, with its own credentials:")
    assert gate_command("r-1", gate, SERVICE_VIEWER).startswith("mother approve r-1 --actor ops")
    anyone = gate.model_copy(update={"approvers": [], "kind": "input"})
    assert gate_command("r-1", anyone, "eve").startswith("mother answer r-1 --text")
