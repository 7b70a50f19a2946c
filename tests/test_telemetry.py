"""OpenTelemetry traces (issue 67): with telemetry.otlp_endpoint set, Mother and the workers export a
trace per run over OTLP/HTTP, decoded here with the official opentelemetry-proto messages from what a
receiver got: the run's root span, intake, each phase attempt, each model and tool call, with the GenAI
semantic conventions' attributes, and the gate as events of the root."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from mother import keys
from tests.conftest import Pipeline, cli, start_pipeline, stop_pipeline, wait_for_person
from tests.otlp_receiver import Receiver, Span
from tests.test_pipeline import example, wait_until


@pytest.fixture
def traced(tmp_path: Path) -> Iterator[tuple[Pipeline, Receiver]]:
    receiver = Receiver()
    p = start_pipeline(tmp_path, workers=1, env={"MOTHER_TELEMETRY__OTLP_ENDPOINT": receiver.url})
    try:
        yield p, receiver
    finally:
        stop_pipeline(p)
        receiver.close()


def test_a_run_is_one_trace_with_a_span_per_phase_model_call_and_tool_call(
    traced: tuple[Pipeline, Receiver],
) -> None:
    """A three-phase run with tool calls and a gate before its review: one trace (its id in the run's
    record and in `mother inspect`); the root span `run {id}` (no parent, the ids the record keeps,
    the gate's opening and decision as events); `intake`, then `invoke_agent {role}` for each phase
    under the root; `chat {model}` for each model call and `execute_tool {tool}` for each tool call
    under their phase's span, with gen_ai.operation.name, provider, request model, usage and finish
    reasons, and the tool's name and call id."""
    p, receiver = traced
    spec = example("three-phase")
    spec["pipeline"][2]["require_approval"] = True
    run_id = p.client.submit(spec)
    wait_for_person(p, run_id)
    p.client.approve(run_id, actor="ops", reason="reviewed")
    assert p.wait(run_id, 60).termination.reason == "success"
    state = p.client.status(run_id)
    assert state.trace is not None
    trace = state.trace.trace_id

    def root() -> Span | None:
        return next((s for s in receiver.of(trace) if s.name == f"run {run_id}"), None)

    top = wait_until(root, timeout=30)
    spans = receiver.of(trace)
    assert (top.span_id, top.parent_id) == (state.trace.span_id, "")
    assert top.attributes["mother.termination.reason"] == "success"
    events = [name for name, _ in top.events]
    assert "gate_opened" in events and "gate_decided" in events
    (intake,) = [s for s in spans if s.name == "intake"]
    assert intake.parent_id == top.span_id
    agents = [s for s in spans if s.name.startswith("invoke_agent ")]
    assert sorted(s.name for s in agents) == sorted(
        f"invoke_agent {phase.role}" for phase in state.spec.pipeline
    )
    assert all(s.parent_id == top.span_id for s in agents)
    assert all(s.attributes["gen_ai.operation.name"] == "invoke_agent" for s in agents)
    by_id = {s.span_id: s for s in agents}
    chats = [s for s in spans if s.name.startswith("chat ")]
    tools = [s for s in spans if s.name.startswith("execute_tool ")]
    usage = sum(r.usage.model_calls for r in state.results)
    assert len(chats) == usage and len(tools) == sum(r.usage.tool_calls for r in state.results) > 0
    for chat in chats:
        assert chat.parent_id in by_id and chat.name == "chat scripted"
        a = chat.attributes
        assert (
            a["gen_ai.operation.name"],
            a["gen_ai.provider.name"],
            a["gen_ai.request.model"],
        ) == ("chat", "scripted", "scripted")
        assert a["gen_ai.usage.input_tokens"] > 0 and a["gen_ai.response.finish_reasons"] in (
            ["stop"],
            ["tool_calls"],
        )
    assert sum(c.attributes["gen_ai.usage.input_tokens"] for c in chats) == sum(
        r.usage.input_tokens for r in state.results
    )
    for tool in tools:
        assert tool.parent_id in by_id
        assert tool.name == f"execute_tool {tool.attributes['gen_ai.tool.name']}"
        assert tool.attributes["gen_ai.tool.call.id"]
    assert {s.service for s in spans} == {"mother-harness"}
    shown = cli("inspect", run_id, url=p.url)
    assert f"trace {trace}" in shown.output
    raw = p.redis.execute_command("JSON.GET", keys.run_key(run_id), "$.trace.trace_id")
    assert trace in raw


def test_no_endpoint_no_trace(tmp_path: Path) -> None:
    """Traces are off by default: a run's record has no trace, and nothing of OpenTelemetry is
    imported by Mother or the worker (their processes' modules checked)."""
    p = start_pipeline(tmp_path, workers=1)
    try:
        run_id = p.client.submit(example("three-phase"))
        assert p.wait(run_id, 60).termination.reason == "success"
        assert p.client.status(run_id).trace is None
        for proc in p.stack.procs.values():
            maps = Path(f"/proc/{proc.pid}/maps").read_text()
            assert "opentelemetry" not in maps
    finally:
        stop_pipeline(p)


# where .ci/run installs Arize Phoenix (a virtual environment of its own)
CI_PHOENIX = "/opt/mother-ci/phoenix/bin/phoenix"


def _phoenix() -> str | None:
    """Arize Phoenix's command: $PHOENIX_BIN, else one on PATH, else .ci/run's."""
    import os
    import shutil

    found = os.environ.get("PHOENIX_BIN") or shutil.which("phoenix") or CI_PHOENIX
    return found if Path(found).exists() else None


def test_a_real_receiver_nobody_here_wrote_shows_the_runs_trace(tmp_path: Path) -> None:
    """Arize Phoenix (from the package index), started by the test with its OTLP/HTTP receiver: a run's
    spans arrive there whole, each with its parent, the model calls as LLM spans with their tokens, as
    Phoenix's own REST API lists them."""
    import json
    import os
    import signal
    import subprocess
    import urllib.request

    from mother.server import free_port
    from tests.conftest import need

    phoenix = _phoenix()
    need(None if phoenix else "no Arize Phoenix here (pip install arize-phoenix; .ci/run does)")
    assert phoenix is not None
    port, grpc = free_port(), free_port()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("MOTHER_")},
        "PHOENIX_PORT": str(port),
        "PHOENIX_GRPC_PORT": str(grpc),
        "PHOENIX_WORKING_DIR": str(tmp_path / "phoenix"),
    }
    server = subprocess.Popen(
        [phoenix, "serve"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"

    def read(path: str) -> dict:
        with urllib.request.urlopen(base + path, timeout=5) as got:
            return json.loads(got.read())

    def up() -> bool:
        try:
            return bool(read("/v1/projects"))
        except OSError:
            return False

    try:
        wait_until(up, timeout=120, step=0.5)
        p = start_pipeline(
            tmp_path / "run", workers=1, env={"MOTHER_TELEMETRY__OTLP_ENDPOINT": base}
        )
        try:
            run_id = p.client.submit(example("three-phase"))
            assert p.wait(run_id, 60).termination.reason == "success"
            state = p.client.status(run_id)
            assert state.trace is not None
            trace = state.trace.trace_id

            def spans() -> list[dict] | None:
                found = [
                    s
                    for s in read("/v1/projects/default/spans?limit=1000")["data"]
                    if s["context"]["trace_id"] == trace
                ]
                return found if any(s["name"] == f"run {run_id}" for s in found) else None

            got = wait_until(spans, timeout=60, step=0.5)
        finally:
            stop_pipeline(p)
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(30)
    ids = {s["context"]["span_id"] for s in got}
    (root,) = [s for s in got if s["name"] == f"run {run_id}"]
    assert root["context"]["span_id"] == state.trace.span_id and not root["parent_id"]
    assert all(s["parent_id"] in ids for s in got if s is not root)
    names = {s["name"] for s in got}
    assert {"intake", "invoke_agent planner", "invoke_agent coder", "invoke_agent critic"} <= names
    llm = [s for s in got if s["name"] == "chat scripted"]
    assert len(llm) == sum(r.usage.model_calls for r in state.results)
    assert sum(s["attributes"]["gen_ai.usage.input_tokens"] for s in llm) == sum(
        r.usage.input_tokens for r in state.results
    )
