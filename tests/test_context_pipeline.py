"""Context composition through the real pipeline: Mother composes, workers validate and run."""

from __future__ import annotations

import uuid
from pathlib import Path

import orjson

from mother import keys
from schemas import ContextSummary
from tests.conftest import Pipeline, paused, run_cli, start_pipeline, stop_pipeline
from tests.test_pipeline import example, wait_until


def activity_of(p: Pipeline, run_id: str, kind: str) -> list[dict]:
    return [
        orjson.loads(f.get("data", "{}"))
        for _, f in p.redis.xrange(keys.ACTIVITY_STREAM)
        if f.get("run_id") == run_id and f["type"] == kind
    ]


def test_context_summarized_example_succeeds_on_summaries(pipeline: Pipeline) -> None:
    """Retrieval hits and the earlier phase's output overflow the scripted window: summarized, named, recorded."""
    run_id = pipeline.client.submit(example("context-summarized"))
    envelope = pipeline.wait(run_id)
    assert envelope.termination.reason == "success"
    research, write = envelope.phases
    assert [s.section for s in research.manifest.sections if s.summary_id] == ["retrieval_hits"]
    assert [s.section for s in write.manifest.sections if s.summary_id] == [
        "retrieval_hits",
        "previous_artifacts",
    ]
    for phase in (research, write):
        assert (
            phase.manifest.model == "scripted"
            and phase.manifest.total_tokens <= phase.manifest.available_for_context
        )
        for summary_id in phase.manifest.summary_ids:
            assert f"(see {summary_id})" in phase.output
            stored = ContextSummary.model_validate(
                orjson.loads(
                    pipeline.redis.execute_command("JSON.GET", keys.context_summary_key(summary_id))
                )
            )
            assert (
                stored.run_id == run_id and stored.summary_token_count < stored.source_token_count
            )
    assert "Note: Context included summarized retrieval hits (see summary-" in envelope.output
    assert len(activity_of(pipeline, run_id, "context_summarized")) == 3
    shown = run_cli("inspect", run_id, "--json", env={"MOTHER_REDIS_URL": pipeline.url})
    assert (
        shown.returncode == 0
        and research.manifest.summary_ids[0] in shown.stdout
        and '"summary_ids"' in shown.stdout
    )


def test_required_context_too_big_for_the_phase_model_escalates(pipeline: Pipeline) -> None:
    # about 10,000 tokens > 6,656 on scripted
    task = "Review this log and say what failed. " + "line " * 6_000
    run_id = pipeline.client.submit(example("three-phase", task=task))
    envelope = pipeline.wait(run_id)
    assert envelope.termination.reason == "success"
    manifest = envelope.phases[0].manifest
    assert (manifest.requested_model, manifest.model) == ("scripted", "scripted-large")
    assert manifest.escalation_reason.startswith("scripted: the required sections need")
    [event] = activity_of(pipeline, run_id, "context_escalated")[:1]
    assert event["model"] == "scripted-large"


def test_required_context_that_fits_no_model_ends_context_budget_exceeded(
    pipeline: Pipeline,
) -> None:
    # 597,000 bytes: about 199,000 tokens, more than any scripted window
    task = "\u20ac" * 199_000
    run_id = pipeline.client.submit(example("three-phase", task=task))
    envelope = pipeline.wait(run_id)
    record = envelope.termination
    assert (
        record.reason == "context_budget_exceeded" and record.suggested_action == "escalate_model"
    )
    assert "required sections need 199,0" in record.details
    assert "(tried scripted -> scripted-large)" in record.details
    assert any("escalated to scripted-large" in f for f in record.contributing_factors)
    # nothing half-composed was stored
    assert not pipeline.redis.exists(keys.context_key(run_id, 0))


def test_worker_refuses_an_altered_context_and_the_retry_recomposes(tmp_path: Path) -> None:
    p = start_pipeline(tmp_path, workers=1)
    try:
        spec = example("three-phase", run_id=f"ctx-alter-{uuid.uuid4().hex[:6]}")
        # the job waits, queued for the host, while its context is altered
        with paused(p):
            run_id = p.client.submit(spec)
            key = keys.context_key(run_id, 0)
            wait_until(lambda: p.redis.exists(key))
            p.redis.execute_command(
                "JSON.SET", key, "$.sections[0].content", orjson.dumps("# Task\nsomething else")
            )
        envelope = p.wait(run_id)
        history = orjson.loads(
            p.redis.execute_command("JSON.GET", keys.run_key(run_id), "$.history")
        )[0]
    finally:
        stop_pipeline(p)
    assert envelope.termination.reason == "success"
    # attempt 1 refused its context; Mother recomposed for attempt 2
    assert envelope.phases[0].attempt == 2
    [retried] = [h for h in history if h["event"] == "phase_retried"]
    assert "does not match its content_hash" in retried["detail"]
