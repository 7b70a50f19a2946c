"""A library's ``require_approval_for.cloud_escalation``: a phase Mother escalates to a cloud model (a
conflict's escalated re-run, or a context too large for the phase's model) while it reads such a
library stops before its first model call and waits for a person; approved, it runs there, denied, the
run ends approval_denied. A library that refuses cloud models ends the run policyViolation instead of
letting its chunks reach one. Real Mother and workers, a catalogue with a scripted cloud model."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
import yaml

from tests.conftest import start_pipeline, stop_pipeline, wait_for_person

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "libraries"

CONFIG = {
    "models": {
        "scripted-cloud": {
            "provider": "scripted",
            "cloud": True,
            "max_tokens": 131_072,
            "reserved_for_system": 3_000,
            "reserved_for_output": 15_000,
        },
        "scripted": {
            "provider": "scripted",
            "max_tokens": 8_192,
            "reserved_for_system": 512,
            "reserved_for_output": 1_024,
            "escalate_to": "scripted-cloud",
        },
    },
    "conflicts": {"policy": {"critic_vs_coder": ["escalate_model"]}},
}


def _library(tmp: Path, library_id: str, **changes: object) -> Path:
    data = yaml.safe_load((EXAMPLES / "public_research.yaml").read_text())
    data.update(library_id=library_id, library_name=library_id, **changes)
    path = tmp / f"{library_id}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory):
    from mother.clock import ServerClock
    from mother.libraries.ingest import create_library

    tmp = tmp_path_factory.mktemp("library-gates")
    config = tmp / "mother.yaml"
    config.write_text(yaml.safe_dump(CONFIG))
    p = start_pipeline(tmp, env={"MOTHER_CONFIG": str(config)})
    now = ServerClock(p.redis).now_iso()
    docs = [EXAMPLES / "docs" / "public_research"]
    gated = {"cloud_escalation": True, "export_to_artifact": False, "cross_library_joins": False}
    create_library(p.redis, _library(tmp, "gated", require_approval_for=gated), docs, now)
    create_library(p.redis, _library(tmp, "nocloud", cloud_models_allowed=False), docs, now)
    yield p
    stop_pipeline(p)


def _escalating_run(library: str) -> dict:
    """The critic rejects the coder; the policy's only strategy re-runs the coder on scripted's
    escalate_to, the cloud model; the critic then accepts."""
    return {
        "run_id": f"esc-{uuid.uuid4().hex[:8]}",
        "user_id": "alice",
        "task": "Describe the retry policy",
        "libraries": [library],
        "pipeline": [
            {"name": "code", "role": "coder", "model": "scripted"},
            {"name": "review", "role": "critic", "model": "scripted", "reviews": "code"},
        ],
        "scripts": {
            "coder": [{"text": "Retries forever.", "confidence": 0.8, "evidence_count": 1}],
            "coder@scripted-cloud": [
                {"text": "Retries with backoff, capped.", "confidence": 0.9, "evidence_count": 3}
            ],
            "critic": [
                {"text": "Unbounded.\nVERDICT: REJECT", "confidence": 0.85, "attempts": [1]},
                {"text": "Capped now.\nVERDICT: ACCEPT", "confidence": 0.9},
            ],
        },
    }


def test_an_escalation_to_a_cloud_model_waits_for_approval(stack) -> None:
    spec = _escalating_run("gated")
    run_id = stack.client.submit(spec)
    state = wait_for_person(stack, run_id)
    gate = state.gate
    assert gate is not None and gate.kind == "approval"
    assert gate.subject == "cloud escalation of phase code to scripted-cloud (gated)"
    assert gate.tool is not None and gate.tool.tool == "cloud_escalation"
    stack.client.approve(run_id, actor="ops", reason="public papers may go to the cloud model")
    record = stack.wait(run_id).termination
    assert record.reason == "success", record.details
    # the escalated output replaced the coder's
    result = stack.client.result(run_id)
    assert result.phases[0].output.startswith("Retries with backoff")

    denied = stack.client.submit(_escalating_run("gated"))
    wait_for_person(stack, denied)
    stack.client.deny(denied, actor="ops", reason="no cloud for this run")
    assert stack.wait(denied).termination.reason == "approval_denied"

    # a library without the requirement: the escalation runs with no one asked
    plain = stack.client.submit(_escalating_run("nocloud") | {"libraries": []})
    assert stack.wait(plain).termination.reason == "success"


def test_chunks_never_reach_a_cloud_model_their_library_refuses(stack) -> None:
    """The phase's model (local) may read `nocloud`; its required sections do not fit that model, so
    Mother escalates to the cloud model: the phase ends before any model call, policyViolation."""
    run_id = stack.client.submit(
        {
            "user_id": "alice",
            "task": "Describe the retry policy",
            "libraries": ["nocloud"],
            "pipeline": [
                {
                    "name": "long",
                    "role": "coder",
                    "model": "scripted",
                    "exit_criteria": "Cover every retry case — " * 790,
                }
            ],
            "scripts": {"coder": [{"text": "never runs"}]},
        }
    )
    record = stack.wait(run_id).termination
    assert record.reason == "policyViolation", record.details
    assert "escalated to cloud model scripted-cloud" in record.details
    assert "nocloud" in record.details


def test_contradiction_rule() -> None:
    from mother.libraries.context import contradiction
    from mother.libraries.retrieval import Hit

    def hit(doc: str, score: float, text: str) -> Hit:
        return Hit(f"{doc}-0", doc, score, text, 0)

    three = hit("a", 2.0, "Retry 3 times, 2 s apart.")
    five = hit("b", 1.95, "Retry 5 times, 10 s apart.")
    assert contradiction("lib", [three, five], 0.05) is not None
    # off, far apart in score, one document, the same figures, no figures
    assert contradiction("lib", [three, five], 0) is None
    assert contradiction("lib", [three, hit("b", 1.5, "Retry 5 times.")], 0.05) is None
    assert contradiction("lib", [three, hit("a", 1.99, "Retry 5 times.")], 0.05) is None
    assert contradiction("lib", [three, hit("b", 1.99, "Wait 2 s, retry 3 times.")], 0.05) is None
    assert (
        contradiction("lib", [hit("a", 2, "Retry."), hit("b", 2, "Retry 5 times.")], 0.05) is None
    )
    why = contradiction("lib", [three, hit("a", 1.99, "x"), five], 0.05)
    assert why is not None and "a-0 and b-0" in why and "2, 3 / 10, 5" in why


def test_contradicting_hits_raise_retrieval_ambiguity(stack, tmp_path: Path) -> None:
    """Two documents equally relevant to the query state different retry limits: the phase reports
    ambiguity, Mother raises retrieval_ambiguity; the default table escalates (the hits are the
    same there, so it fails), then asks a person, whose answer settles it."""
    import orjson

    from mother import keys
    from mother.clock import ServerClock
    from mother.libraries.ingest import create_library

    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "ops-guide.md").write_text("The retry limit is 3 attempts with a 2 second backoff.\n")
    (docs / "sre-guide.md").write_text("The retry limit is 5 attempts with a 10 second backoff.\n")
    create_library(
        stack.redis, _library(tmp_path, "runbooks"), [docs], ServerClock(stack.redis).now_iso()
    )
    run_id = stack.client.submit(
        {
            "user_id": "alice",
            "task": "What is the retry limit and backoff?",
            "libraries": ["runbooks"],
            "pipeline": [{"name": "answer", "role": "coder", "model": "scripted"}],
            "scripts": {"coder": [{"text": "The retry limit is 3 or 5.", "confidence": 0.8}]},
        }
    )
    state = wait_for_person(stack, run_id)
    assert state.gate is not None and state.gate.kind == "input"
    conflict = orjson.loads(
        stack.redis.execute_command("JSON.GET", keys.conflict_key(state.conflicts[0]))
    )
    assert conflict["conflict_type"] == "retrieval_ambiguity"
    tried = [(s["strategy"], s["outcome"]) for s in conflict["steps"]]
    assert ("escalate_model", "failed") in tried and tried[-1][0] == "request_user_input", tried
    context = orjson.loads(stack.redis.execute_command("JSON.GET", keys.context_key(run_id, 0)))
    assert "state different figures" in context["retrieval_ambiguity"]
    stack.client.answer(run_id, "Use the SRE guide: 5 attempts.", actor="ops")
    assert stack.wait(run_id).termination.reason == "success"
