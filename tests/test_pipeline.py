"""The run pipeline end to end: real Redis, a real Mother process, real forking RQ workers."""

from __future__ import annotations

import re
import time
import uuid
from pathlib import Path

import orjson
import pytest

from mother import keys
from mother.activity import recent
from mother.client import load_spec_file
from mother.errors import InvalidSpec, WaitTimeout
from tests.conftest import Pipeline, inproc_host, start_pipeline, stop_pipeline

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def example(name: str, **changes: object) -> dict:
    spec = load_spec_file(EXAMPLES / f"{name}.yaml")
    spec["run_id"] = f"{name}-{uuid.uuid4().hex[:8]}"
    spec.update(changes)
    return spec


def termination_keys(p: Pipeline, run_id: str) -> list[str]:
    return [k for k in p.redis.scan_iter(match=keys.termination_key(run_id))]


def wait_until(predicate, timeout: float = 20.0, step: float = 0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(step)
    raise AssertionError("condition not met in time")


def test_three_phase_run_succeeds_with_one_record(pipeline: Pipeline) -> None:
    """The three-phase example ends success; its record, envelope, artifacts and activity are exact."""
    run_id = pipeline.client.submit(example("three-phase"))
    envelope = pipeline.wait(run_id)
    record = envelope.termination
    assert record is not None
    assert (record.reason, record.phase_at_termination, record.logged_by) == (
        "success",
        "review",
        "mother",
    )
    assert (record.can_retry, record.suggested_action) == (False, "abandon")
    assert record.details == "All 3 phases completed"
    assert [r.phase for r in envelope.phases] == ["plan", "execute", "review"]
    assert envelope.output == "Approved: the entry is accurate and concise."
    assert record.final_artifacts == envelope.artifacts and len(record.final_artifacts) == 3
    meta = orjson.loads(
        pipeline.redis.execute_command(
            "JSON.GET", keys.artifact_meta_key(record.final_artifacts[0])
        )
    )
    assert meta["run_id"] == run_id and meta["created_at"].endswith("Z")
    usage = envelope.phases[1].usage
    assert (usage.model_calls, usage.tool_calls, usage.input_tokens, usage.output_tokens) == (
        3,
        2,
        2060,
        130,
    )
    # every model call is settled (each phase's last one with the phase's final write): the run's
    # counters are the phases' usage and no reservation is left
    budget = orjson.loads(pipeline.redis.execute_command("JSON.GET", keys.run_budget_key(run_id)))
    for field in ("model_calls", "input_tokens", "output_tokens", "tool_calls"):
        assert budget[field] == sum(getattr(p.usage, field) for p in envelope.phases), field
    assert budget["reservations"] == {} and budget["reserved"]["total_tokens"] == 0
    assert (pipeline.workspace / run_id / "CHANGELOG.md").read_text().startswith("# Changelog")
    assert termination_keys(pipeline, run_id) == [keys.termination_key(run_id)]
    assert pipeline.redis.zscore(keys.termination_reason_index_key("success"), run_id) is not None
    state = pipeline.client.status(run_id)
    assert state.status == "terminated" and state.reason == "success"
    types = [e.type for e in recent(pipeline.redis, 50, run_id=run_id)]
    assert types == ["run_submitted"] + ["phase_dispatched", "phase_completed"] * 3 + ["terminated"]


def test_every_failure_example_ends_with_its_reason(pipeline: Pipeline) -> None:
    """retries_exhausted, timeout and user_cancelled examples each end with one record of that reason."""
    exhausted = pipeline.client.submit(example("retries-exhausted"))
    timeout = pipeline.client.submit(example("timeout"))
    cancelled = pipeline.client.submit(example("cancelled"))
    wait_until(
        lambda: (
            pipeline.client.status(cancelled).status == "running"
            if pipeline.redis.exists(keys.run_key(cancelled))
            else False
        )
    )
    pipeline.client.cancel(cancelled, actor="tester", reason="no longer needed")

    rec = pipeline.wait(exhausted).termination
    assert (rec.reason, rec.phase_at_termination, rec.suggested_action, rec.can_retry) == (
        "retries_exhausted",
        "execute",
        "escalate_model",
        True,
    )
    assert rec.details.startswith("Phase execute (coder on scripted) failed on all 3 attempts")
    assert rec.contributing_factors == [
        f"attempt {n}: scripted failure of role 'coder' (reply 1)" for n in (1, 2, 3)
    ]
    types = [e.type for e in recent(pipeline.redis, 50, run_id=exhausted)]
    assert types.count("phase_retried") == 2 and types.count("phase_failed") == 3

    rec = pipeline.wait(timeout).termination
    assert (rec.reason, rec.details) == (
        "timeout",
        "Phase execute (attempt 1) exceeded its timeout of 3s",
    )

    rec = pipeline.wait(cancelled).termination
    assert (rec.reason, rec.details) == ("user_cancelled", "Cancelled by tester: no longer needed")
    for run_id in (exhausted, timeout, cancelled):
        assert termination_keys(pipeline, run_id) == [keys.termination_key(run_id)]
    # their model calls were cut off by the run's end
    for run_id in (timeout, cancelled):
        held_back_nothing(pipeline, run_id)


def held_back_nothing(p: Pipeline, run_id: str, released_why: str | None = None) -> None:
    """After the run, neither its budget nor its user's daily document holds a reservation (a horse cut off
    by the run's end settles its call itself, a moment later); with ``released_why``, the reservation a lost
    call left was given back by Mother (its tombstone stays, and ``released_why`` starts its activity entry's why)."""

    def doc(key: str) -> dict:
        return orjson.loads(p.redis.execute_command("JSON.GET", key))

    budget = doc(keys.run_budget_key(run_id))
    user_key = keys.user_daily_budget_key(budget["user_id"], budget["started_at"][:10])
    wait_until(
        lambda: (
            doc(keys.run_budget_key(run_id))["reserved"]["total_tokens"] == 0
            and doc(user_key)["reserved"]["total_tokens"] == 0
        ),
        timeout=10,
    )
    budget = doc(keys.run_budget_key(run_id))
    assert budget["reserved"]["spend_micro_usd"] == 0
    # its end was applied
    assert p.redis.zscore(keys.RUNS_ENDING, run_id) is None
    # none held: each one left is a release's tombstone (with the attempt that made it, when a horse did)
    assert all(
        set(r) - {"attempt", "host"} == {"at", "released"} for r in budget["reservations"].values()
    )
    if released_why is not None:
        assert len(budget["reservations"]) == 1
        [released] = [
            e for e in recent(p.redis, 50, run_id=run_id) if e.type == "reservations_released"
        ]
        assert released.data["count"] == 1 and str(released.data["why"]).startswith(released_why), (
            released.data
        )


def test_raw_xadd_submission_completes(pipeline: Pipeline) -> None:
    """A spec appended with a raw XADD (no client, no run_id) runs to success as run-{entry_id}."""
    spec = example("three-phase")
    del spec["run_id"]
    entry_id = pipeline.redis.execute_command(
        "XADD", keys.SUBMISSIONS_STREAM, "*", "spec", orjson.dumps(spec)
    )
    envelope = pipeline.wait(f"run-{entry_id}")
    assert envelope.termination.reason == "success"


def test_search_index_finds_records_by_reason(pipeline: Pipeline) -> None:
    """FT.SEARCH idx:termination '@reason:{timeout}' returns the timed-out run."""
    run_id = pipeline.client.submit(example("timeout"))
    pipeline.wait(run_id)
    found = wait_until(
        lambda: pipeline.redis.execute_command(
            "FT.SEARCH",
            keys.TERMINATION_INDEX,
            "@reason:{timeout}",
            "NOCONTENT",
            "LIMIT",
            "0",
            "1000",
        )
    )
    # RESP2 (our connections' protocol): [total, id, id, ...]
    ids = found[1:]
    assert keys.termination_key(run_id) in ids


def _nested(levels: int) -> object:
    value: object = "x"
    for _ in range(levels):
        value = [value]
    return value


@pytest.mark.parametrize(
    ("fields", "error"),
    [
        ({"spec": "{not json"}, "invalid RunSpec: not valid JSON"),
        (
            {
                "spec": orjson.dumps(
                    {"task": "t", "pipeline": [{"name": "a", "role": "r", "model": "scripted"}]}
                )
            },
            "invalid RunSpec: user_id: required field is missing",
        ),
        (
            {
                "spec": orjson.dumps(
                    {
                        "user_id": "u",
                        "task": "x" * 10_000_000,
                        "pipeline": [{"name": "a", "role": "r", "model": "scripted"}],
                    }
                )
            },
            "bytes; the limit is 1048576 bytes",
        ),
        (
            {
                "spec": orjson.dumps(
                    {
                        "user_id": "u",
                        "task": "t",
                        "pipeline": [{"name": "a", "role": "r", "model": "gpt-9"}],
                    }
                )
            },
            "model 'gpt-9' is not in the model catalogue",
        ),
        ({"payload": "x"}, "the entry has no 'spec' field"),
        # nested past RedisJSON's 128 levels once inside the run document: JSON.SET failed inside Mother
        (
            {
                "spec": orjson.dumps(
                    {
                        "user_id": "u",
                        "task": "t",
                        "metadata": {"d": _nested(200)},
                        "pipeline": [{"name": "a", "role": "r", "model": "scripted"}],
                    }
                )
            },
            "invalid RunSpec: metadata: nested more than 32 levels deep; flatten it",
        ),
        (
            {"spec": b'\xff\xfe{"user_id": "u"}'},
            "field 'spec' is not UTF-8 text (byte 0xff at offset 0)",
        ),
        (
            {
                "spec": orjson.dumps(
                    {
                        "user_id": "u",
                        "task": "t",
                        "pipeline": [{"name": "a", "role": "r", "model": "scripted"}],
                    }
                ),
                b"note\xc3": "x",
            },
            "a field name is not UTF-8 text (byte 0xc3 at offset 4)",
        ),
    ],
)
def test_invalid_entries_are_rejected_and_mother_keeps_serving(
    pipeline: Pipeline, fields: dict, error: str
) -> None:
    """Each bad entry gets rejection:{entry_id} with its error and time; a good run after it still succeeds."""
    entry_id = pipeline.redis.xadd(keys.SUBMISSIONS_STREAM, fields)
    rejection = wait_until(
        lambda: pipeline.redis.execute_command("JSON.GET", keys.rejection_key(entry_id))
    )
    record = orjson.loads(rejection)
    assert (
        error in record["error"] and record["entry_id"] == entry_id and record["at"].endswith("Z")
    )
    assert any(
        e.type == "run_rejected" and e.data.get("entry_id") == entry_id
        for e in recent(pipeline.redis, 200)
    )
    if "limit is" in error:
        # oversized payload dropped
        assert pipeline.redis.xrange(keys.SUBMISSIONS_STREAM, entry_id, entry_id) == []
    run_id = pipeline.client.submit(example("three-phase"))
    assert pipeline.wait(run_id).termination.reason == "success"


def test_status_and_wait_name_the_error_of_a_rejected_run(pipeline: Pipeline) -> None:
    """A run rejected at intake, behind 250 rejections of other runs: `status` and `wait` raise its error
    (rejections:by_run names its entry; they read the newest 200 rejections, and missed an older one); a
    run id no rejection names is not mistaken for one."""
    run_id = f"rejected-{uuid.uuid4().hex[:8]}"
    spec = {
        "run_id": run_id,
        "user_id": "u",
        "task": "t",
        "pipeline": [{"name": "a", "role": "r", "model": "gpt-9"}],
    }
    entry_id = pipeline.redis.xadd(keys.SUBMISSIONS_STREAM, {"spec": orjson.dumps(spec)})
    # newer rejections of other runs (and one naming none)
    for other in range(250):
        bad = {**spec, "run_id": f"{run_id}-{other}"} if other else {"spec": "{not json"}
        last = pipeline.redis.xadd(
            keys.SUBMISSIONS_STREAM, {"spec": orjson.dumps(bad)} if other else bad
        )
    wait_until(
        lambda: pipeline.redis.execute_command("JSON.GET", keys.rejection_key(last)), timeout=60
    )
    for ask in (pipeline.client.status, lambda rid: pipeline.client.wait(rid, timeout=10)):
        with pytest.raises(InvalidSpec) as refused:
            ask(run_id)
        assert refused.value.message.startswith(
            f"run {run_id} was rejected at intake: phase a: model 'gpt-9' is not in the model catalogue; known: "
        )
    assert pipeline.client.rejection_for(run_id)["entry_id"] == entry_id
    assert pipeline.client.rejection_for(f"{run_id}-249")["entry_id"] == last
    assert pipeline.client.rejection_for(f"{run_id}-x") is None


@pytest.mark.parametrize(
    "fields",
    [
        # not UTF-8
        {"type": "phase_result", "payload": b"\x80\x81"},
        # JSON, not an object
        {"type": "cancel", "payload": "[1, 2]"},
        {"type": "cancel", "payload": '"run-1"'},
        {"type": "cancel", "payload": '{"run_id": 5}'},
        {"type": "cancel", "payload": '{"run_id": "bad id!"}'},
    ],
)
def test_bad_event_is_ignored_and_mother_keeps_serving(pipeline: Pipeline, fields: dict) -> None:
    """A malformed entry on mother:events (anyone can XADD there) is acknowledged and ignored: not fatal
    to Mother, and not left pending to be reclaimed and dead-lettered with a traceback each time."""
    entry_id = pipeline.redis.xadd(keys.EVENTS_STREAM, fields)
    run_id = pipeline.client.submit(example("three-phase"))
    assert pipeline.wait(run_id).termination.reason == "success"
    pending = pipeline.redis.xpending_range(
        keys.EVENTS_STREAM, "mother", min=entry_id, max=entry_id, count=1
    )
    # acknowledged: never reclaimed, never dead-lettered
    assert pending == []


def test_duplicate_run_id_is_rejected(pipeline: Pipeline) -> None:
    """A second submission with a used run_id is refused by the client, and by Mother for a raw XADD."""
    spec = example("three-phase")
    run_id = pipeline.client.submit(spec)
    pipeline.wait(run_id)
    with pytest.raises(InvalidSpec, match="is already used"):
        pipeline.client.submit(spec)
    entry_id = pipeline.redis.xadd(keys.SUBMISSIONS_STREAM, {"spec": orjson.dumps(spec)})
    record = orjson.loads(
        wait_until(lambda: pipeline.redis.execute_command("JSON.GET", keys.rejection_key(entry_id)))
    )
    assert record["error"] == f"run_id {run_id!r} is already used by another submission"
    # the first run's record is untouched
    assert pipeline.wait(run_id).termination.reason == "success"


def test_job_for_terminated_run_does_nothing(pipeline: Pipeline) -> None:
    """Running the phase job of a run that already ended, on an enrolled host, writes no event and no
    artifact: Mother refuses its begin ask (the host holds no such attempt)."""
    from workers import phase

    run_id = pipeline.client.submit(example("three-phase"))
    pipeline.wait(run_id)
    before = pipeline.redis.xlen(keys.EVENTS_STREAM)
    with inproc_host(pipeline.url, beating=False):
        assert phase.execute(run_id, 0, 1) == {"status": "stale"}
    assert pipeline.redis.xlen(keys.EVENTS_STREAM) == before


def _job_ended(p: Pipeline, job_id: str) -> bool:
    """Whether RQ's job ``job_id`` is no longer queued or running (or is gone)."""
    from rq.exceptions import NoSuchJobError
    from rq.job import Job
    from rq.serializers import JSONSerializer

    try:
        job = Job.fetch(
            job_id, connection=p.server.client(decode_responses=False), serializer=JSONSerializer
        )
    except NoSuchJobError:
        return True
    return job.get_status() not in ("queued", "started", "scheduled", "deferred")


def test_prefetch_sets_up_a_current_attempt_and_a_stale_one_does_nothing(tmp_path: Path) -> None:
    """The worker asks Mother to begin a phase job's attempt before forking (PhaseWorker → prefetch) and,
    for the attempt its host holds, sets the phase up (context, provider, hooks, meter, messages) without
    writing anything: the horse uses it only for that very attempt. A stale attempt gets no setup and
    does nothing. A setup that fails is left to the horse."""
    import os

    from mother.hooks import load_hooks
    from workers import phase

    p = start_pipeline(tmp_path, workers=0)
    try:
        with inproc_host(p.url):
            # one slow phase, queued on this host: the only live one
            run_id = p.client.submit(example("cancelled"))
            wait_until(lambda: p.redis.llen(f"rq:queue:{keys.host_queue('inproc', 'agents')}"))
            got = phase.prefetch(run_id, 0, 1)
            assert got is not None and got.ids == (run_id, 0, 1) and got.begun is not None
            state, context = got.begun.state, got.begun.context
            assert (state.status, state.phase_index, state.attempt, state.host) == (
                "running",
                0,
                1,
                "inproc",
            )
            # made by the setup, before the fork (before this test asks for it)
            assert context is not None
            made = context._manifest
            assert (
                context.run_id == run_id and context.manifest().content_hash == context.content_hash
            )
            setup = got.setup
            assert setup is not None and setup.context is context and made is context.manifest()
            role = state.spec.pipeline[0].role
            expected = [h.spec.id for h in load_hooks(phase.runtime().settings, role).hooks]
            assert expected and [h.spec.id for h in setup.harness.hooks.hooks] == expected
            # the run's counters, from Mother's reply
            assert setup.meter.defer_final and isinstance(
                (setup.meter.counters or {}).get("model_calls"), int
            )
            assert [m["role"] for m in setup.messages] == ["system", "user"]
            assert role in setup.messages[0]["content"]
            # nothing written before the horse runs
            assert not setup.toolbox.workspace.exists()
            # a broken hook file: Mother's reply is still inherited, the setup left for the horse
            bad = tmp_path / "bad-hooks.yaml"
            bad.write_text("- id: x\n  event: [unclosed\n")
            os.environ["MOTHER_HOOKS__PROJECT_FILE"] = str(bad)
            phase.runtime.cache_clear()
            got = phase.prefetch(run_id, 0, 1)
            assert got is not None and got.begun is not None and got.setup is None
            del os.environ["MOTHER_HOOKS__PROJECT_FILE"]
            phase.runtime.cache_clear()
            p.client.cancel(run_id)
            assert p.wait(run_id).termination.reason == "user_cancelled"
            # the run ended: Mother refuses the begin, so no setup, and nothing beats for it
            got = phase.prefetch(run_id, 0, 1)
            assert got is not None and got.begun is None and got.setup is None
            assert phase.execute(run_id, 0, 1) == {"status": "stale"}
            # an unknown run: the same
            got = phase.prefetch("run-nope", 0, 1)
            assert got is not None and got.begun is None and got.setup is None
            assert phase.execute("run-nope", 0, 1) == {"status": "stale"}
        # no result
        assert p.redis.xlen(keys.EVENTS_STREAM) == 0
        assert not p.redis.exists(keys.attempt_heartbeat_key("run-nope", 0, 1))
    finally:
        os.environ.pop("MOTHER_HOOKS__PROJECT_FILE", None)
        stop_pipeline(p)


def test_phase_the_worker_cannot_set_up_fails_in_the_horse_with_the_reason(tmp_path: Path) -> None:
    """A setup that fails before the fork (here: a broken hook file in the workers' config) is made again
    by the work-horse, whose failed PhaseResult carries the error: the run ends catastrophic_error naming
    the file, not as a lost phase."""
    bad = tmp_path / "bad-hooks.yaml"
    bad.write_text("- id: x\n  event: [unclosed\n")
    p = start_pipeline(tmp_path, workers=1, env={"MOTHER_HOOKS__PROJECT_FILE": str(bad)})
    try:
        record = p.wait(p.client.submit(example("three-phase"))).termination
    finally:
        stop_pipeline(p)
    assert record.reason == "catastrophic_error"
    assert "bad-hooks.yaml" in record.details and record.contributing_factors == [
        "invalid configuration"
    ]


def test_wait_says_when_no_worker_starts_a_phase_and_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """wait() tells, once per attempt, of a phase whose job no worker has started: no worker host is live
    (it used to show 'running' and nothing else until the phase's deadline), or all the workers of the
    host Mother chose are busy; a phase
    a worker has started gets no such notice. The wait counts from the attempt's dispatch, so a wait started
    late says so at once (it counted from when it first looked)."""
    import mother.client

    monkeypatch.setattr(mother.client, "QUEUE_NOTICE_SECONDS", 1.0)
    hang = {"crawler": [{"text": "done", "delay_seconds": 60}]}
    p = start_pipeline(tmp_path, workers=0)
    try:
        first = p.client.submit(example("cancelled", scripts=hang))
        # dispatched (a loaded machine may take its intake longer than the wait below)
        wait_until(
            lambda: (
                p.redis.exists(keys.run_key(first)) and p.client.status(first).status == "running"
            ),
            timeout=30,
        )
        notices: list[str] = []
        with pytest.raises(WaitTimeout):
            p.client.wait(first, 3, on_notice=notices.append)
        assert [re.sub(r"waited \d+s", "waited Ns", n) for n in notices] == [
            f"run {first}: phase execute (attempt 1) has waited Ns for a worker host, and no live host "
            "takes it (enrolled, beating); still waiting (start one: `mother hosts add NAME`, then "
            "`mother worker` with its URL)"
        ]
        # a wait started late counts from the dispatch (server clock), not from when it looked:
        notices.clear()
        # (the dispatch 2 s old by the server's clock, however late a loaded machine made it)
        from mother.functions import server_now_ms
        from schemas import ms_from_iso

        dispatched = ms_from_iso(p.client.status(first).updated_at)
        wait_until(lambda: server_now_ms(p.redis) - dispatched >= 2100, timeout=10)
        # it says so at once, though it waits less than QUEUE_NOTICE_SECONDS
        with pytest.raises(WaitTimeout):
            p.client.wait(first, 0.6, on_notice=notices.append)
        # > 0.6
        assert len(notices) == 1 and int(re.findall(r"has waited (\d+)s", notices[0])[0]) >= 2, (
            notices
        )
        # takes the first run's phase, which then hangs: the worker is busy
        p.stack.add_worker()
        host = "local-0"
        wait_until(
            lambda: (
                p.redis.hget(f"rq:job:{keys.phase_job_id(host, first, 0, 1)}", "status")
                == "started"
            ),
            timeout=30,
        )
        second = p.client.submit(example("cancelled", scripts=hang))
        notices.clear()
        with pytest.raises(WaitTimeout):
            p.client.wait(second, 3, on_notice=notices.append)
        # (its own job, and on a loaded machine perhaps the first run's next attempt)
        said = [re.sub(r"waited \d+s", "waited Ns", n) for n in notices]
        assert [re.sub(r"busy, \d job", "busy, N job", n) for n in said] == [
            f"run {second}: phase execute (attempt 1) has waited Ns for a worker of host {host} (queue "
            f"'{host}.agents', Mother's choice): its workers are busy, N job(s) queued; still waiting "
            "(more workers: `mother worker --concurrency N`, or another host)"
        ]
        notices.clear()
        with pytest.raises(WaitTimeout):
            p.client.wait(first, 1.5, on_notice=notices.append)
        assert notices == []
        for run_id in (first, second):
            p.client.cancel(run_id, actor="test", reason="done")
            assert p.wait(run_id).termination.reason == "user_cancelled"
    finally:
        stop_pipeline(p)


def test_unexpected_error_ends_only_that_run(pipeline: Pipeline) -> None:
    """An exception in Mother's handling of one run ends it catastrophic_error; other runs go on."""
    run_id = pipeline.client.submit(
        example("cancelled", scripts={"crawler": [{"text": "done", "delay_seconds": 2}]})
    )
    wait_until(
        lambda: (
            pipeline.redis.exists(keys.run_key(run_id))
            and pipeline.client.status(run_id).status == "running"
        )
    )
    # A phase index past the pipeline's end makes the next transition raise inside Mother.
    pipeline.redis.execute_command("JSON.SET", keys.run_key(run_id), "$.phase_index", "7")
    pipeline.redis.xadd(
        keys.EVENTS_STREAM,
        {
            "type": "phase_result",
            "payload": orjson.dumps(
                {
                    "run_id": run_id,
                    "phase": "execute",
                    "phase_index": 7,
                    "attempt": 1,
                    "status": "completed",
                    "output": "x",
                    "finished_at": "2026-01-01T00:00:00.000Z",
                }
            ),
        },
    )
    record = pipeline.wait(run_id).termination
    assert record.reason == "catastrophic_error"
    assert record.details.startswith("Mother failed while handling this run: IndexError")
    other = pipeline.client.submit(example("three-phase"))
    assert pipeline.wait(other).termination.reason == "success"


def test_a_worker_imports_only_allowed_job_modules_before_forking() -> None:
    """The worker imports the module of an allowed job (the project's, and worker.allowed_jobs) before it forks
    (each work-horse inherits it; RQ would import it again in every horse), and never one of a job it does not
    allow (refused before anything it names is imported)."""
    import sys

    from workers.worker import preload_module

    sys.modules.pop("scripts.bench.noop", None)
    preload_module("scripts.bench.noop.chain", frozenset({"workers.phase.execute"}))
    assert "scripts.bench.noop" not in sys.modules
    preload_module("scripts.bench.noop.chain", frozenset({"scripts.bench.noop.chain"}))
    assert "scripts.bench.noop" in sys.modules
