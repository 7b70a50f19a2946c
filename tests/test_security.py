"""The trust boundary: what a worker host's credentials can and cannot decide about runs."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
import redis

from mother import keys
from mother.activity import recent
from mother.review import on_phase_result
from mother.streams import Delivery
from schemas import PhaseResult
from tests.conftest import start_pipeline, stop_pipeline
from tests.test_lifecycle import HOST, _started
from tests.test_pipeline import example, wait_until


def _violations(r: redis.Redis) -> list[dict]:
    return [orjson.loads(v) for v in r.lrange(keys.SECURITY_VIOLATIONS, 0, -1)]


def test_a_result_from_another_host_than_the_attempts_is_refused_and_recorded(
    r: redis.Redis, redis_url: str
) -> None:
    """A phase_result for the current attempt that came from no host, or from another host than the one
    Mother queued the attempt on, moves nothing (Mother's events carry the host of the ask they came
    from; a result here was appended by Mother itself, so this is defence in depth): it is recorded in
    security:violations and the activity stream; the attempt's own host's result is accepted."""
    rt, run_id = _started(r, redis_url)
    forged = PhaseResult(
        run_id=run_id,
        phase="plan",
        phase_index=0,
        attempt=1,
        status="completed",
        output="forged",
        confidence=1.0,
        finished_at="2026-11-22T00:00:00.000Z",
    )
    on_phase_result(rt, forged, None, delivery=Delivery(keys.EVENTS_STREAM, "mother", "1-1"))
    on_phase_result(
        rt, forged, "other-host", delivery=Delivery(keys.EVENTS_STREAM, "mother", "1-2")
    )
    failed = forged.model_copy(update={"status": "failed", "error": "boom", "output": ""})
    # nor can a forged failure make Mother retry the attempt
    on_phase_result(rt, failed, None, delivery=Delivery(keys.EVENTS_STREAM, "mother", "1-3"))
    run = rt.load_run(run_id)
    assert (run.phase_index, run.attempt, run.results) == (0, 1, [])
    assert [(v["kind"], v["entry_id"], v["run_id"]) for v in _violations(r)] == [
        ("phase_result_not_held", "1-3", run_id),
        ("phase_result_not_held", "1-2", run_id),
        ("phase_result_not_held", "1-1", run_id),
    ]
    assert sum(1 for e in recent(r, 100, run_id=run_id) if e.type == "security_violation") == 3
    on_phase_result(
        rt,
        forged.model_copy(update={"output": "the plan"}),
        HOST,
        delivery=Delivery(keys.EVENTS_STREAM, "mother", "1-4"),
    )
    run = rt.load_run(run_id)
    assert (run.phase_index, run.attempt, [x.output for x in run.results]) == (1, 1, ["the plan"])
    assert run.host == HOST and len(_violations(r)) == 3


def test_a_cancel_on_the_events_stream_is_not_taken(tmp_path: Path) -> None:
    """Workers can append to mother:events; a cancel there (a worker's credentials ending another user's run) is
    ignored. People's commands go to mother:commands, which the worker ACL user cannot write."""
    p = start_pipeline(tmp_path, workers=1)
    try:
        run_id = p.client.submit(
            example("cancelled", scripts={"crawler": [{"text": "done", "delay_seconds": 1.5}]})
        )
        wait_until(lambda: p.redis.exists(keys.run_key(run_id)))
        p.redis.xadd(
            keys.EVENTS_STREAM, {"type": "cancel", "payload": orjson.dumps({"run_id": run_id})}
        )
        assert p.wait(run_id, 30).termination.reason == "success"
        other = p.client.submit(
            example("cancelled", scripts={"crawler": [{"text": "done", "delay_seconds": 5}]})
        )
        wait_until(lambda: p.redis.exists(keys.run_key(other)))
        p.client.cancel(other, "tester", "via mother:commands")
        assert p.wait(other, 30).termination.reason == "user_cancelled"
    finally:
        stop_pipeline(p)


def test_workers_run_only_the_projects_jobs(pipeline, tmp_path: Path) -> None:
    """Anyone able to enqueue an RQ job could have any worker run `os.system` (code execution on every worker
    host). A job naming a function outside the project's jobs and worker.allowed_jobs is failed unrun, nothing it
    names imported, and recorded; one naming another run's attempt in its arguments changes nothing for that run."""
    import uuid

    from rq import Queue
    from rq.serializers import JSONSerializer

    from mother.connection import connect

    conn = connect(pipeline.url, check=False, decode_responses=False)
    # a host's own queue (the only ones its workers listen on)
    host = "local-0"
    queue = Queue(keys.host_queue(host, "agents"), connection=conn, serializer=JSONSerializer)
    marker = tmp_path / f"pwned-{uuid.uuid4().hex[:6]}"
    victim = pipeline.client.submit(
        example("cancelled", scripts={"crawler": [{"text": "done", "delay_seconds": 2}]})
    )
    wait_until(lambda: pipeline.redis.exists(keys.run_key(victim)))
    shell = queue.enqueue_call(
        "os.system", args=(f"touch {marker}",), job_id=f"{host}_evil-{marker.name}"
    )
    posing = queue.enqueue_call(
        "builtins.print", args=(victim, 0, 1), job_id=f"{host}_posing-{marker.name}"
    )

    def refused_jobs() -> list[dict]:
        return [v for v in _violations(pipeline.redis) if v["kind"] == "job_refused"]

    wait_until(lambda: {shell.id, posing.id} <= {v["job_id"] for v in refused_jobs()}, timeout=20)
    refused = refused_jobs()
    assert {v["job_id"] for v in refused} >= {shell.id, posing.id}
    assert not marker.exists()
    assert (
        "job function 'os.system' is not one workers run"
        in next(v for v in refused if v["job_id"] == shell.id)["why"]
    )
    record = pipeline.wait(victim, 30).termination
    assert record.reason == "success" and pipeline.client.status(victim).attempt == 1


def test_fault_injection_is_refused_unless_the_deployment_allows_it(
    r: redis.Redis, redis_url: str
) -> None:
    """A scripted reply with `fail: kill_worker` (or hang, raise, kill) let anyone who may submit kill workers until
    `mother up` gave up and stopped the whole stack. Mother refuses it at intake unless its scripted model
    allows faults (`mother up --dev`, the demo, the tests); the client's own settings cannot switch it on."""
    from mother.client import MotherClient
    from mother.config import load_settings
    from mother.intake import handle_submission
    from mother.runtime import Runtime

    production = Runtime.create(load_settings(redis_url=redis_url))
    client = MotherClient(
        settings=load_settings(redis_url=redis_url, models={"scripted": {"allow_faults": True}})
    )
    run_id = client.submit(example("worker-killed"))
    [(entry_id, fields)] = r.xrange(keys.SUBMISSIONS_STREAM)
    assert handle_submission(production, entry_id, fields) is None
    rejection = orjson.loads(r.execute_command("JSON.GET", keys.rejection_key(entry_id)))
    assert rejection["error"].startswith(
        "scripts.writer: reply 1 injects a fault (fail: kill_worker), which this "
        "deployment does not allow"
    )
    assert not r.exists(keys.run_key(run_id))
    dev = Runtime.create(
        load_settings(redis_url=redis_url, models={"scripted": {"allow_faults": True}})
    )
    again = client.submit(example("worker-killed"))
    [(_, _), (entry_id, fields)] = r.xrange(keys.SUBMISSIONS_STREAM)
    assert handle_submission(dev, entry_id, fields).run_id == again


def test_a_submitter_is_refused_what_mothers_published_settings_refuse(
    r: redis.Redis, redis_url: str
) -> None:
    """`mother submit` of a spec that injects a fault, on a deployment whose leading Mother allows none,
    is refused before it is sent (it exited 0 and was rejected later), whatever the client's own
    settings say; on one that allows them it goes."""
    from mother.client import MotherClient
    from mother.config import load_settings
    from mother.errors import InvalidSpec
    from mother.records.budgets import publish_limits
    from schemas.budget import PublishedLimits

    client = MotherClient(
        settings=load_settings(redis_url=redis_url, models={"scripted": {"allow_faults": True}})
    )
    published = PublishedLimits(
        max_queue_depth=100,
        max_concurrent_runs=10,
        max_redis_memory_mb=1000,
        max_docling_jobs=2,
        fault_models=[],
        published_by="m",
        published_at="2026-11-27T00:00:00.000Z",
    )
    publish_limits(r, published)
    with pytest.raises(
        InvalidSpec, match=r"injects a fault .* which this deployment does not allow"
    ):
        client.submit(example("worker-killed"))
    assert r.xlen(keys.SUBMISSIONS_STREAM) == 0
    publish_limits(r, published.model_copy(update={"fault_models": ["scripted"]}))
    assert client.submit(example("worker-killed"))


def test_a_spec_naming_a_library_that_does_not_exist_is_refused_on_every_path(
    r: redis.Redis, redis_url: str
) -> None:
    """A library that does not exist: refused at submit with one line; by raw XADD (no run_id) a
    rejection and no run (it was accepted, then ended catastrophic_error or timed out)."""
    from mother.client import MotherClient
    from mother.config import load_settings
    from mother.errors import InvalidSpec
    from mother.intake import handle_submission
    from mother.runtime import Runtime

    settings = load_settings(redis_url=redis_url)
    spec = {**example("three-phase"), "libraries": ["nope"]}
    with pytest.raises(InvalidSpec, match="library 'nope' does not exist"):
        MotherClient(settings=settings).submit(spec)
    del spec["run_id"]
    entry_id = r.xadd(keys.SUBMISSIONS_STREAM, {"spec": orjson.dumps(spec)})
    assert (
        handle_submission(Runtime.create(settings), entry_id, {"spec": orjson.dumps(spec).decode()})
        is None
    )
    rejection = orjson.loads(r.execute_command("JSON.GET", keys.rejection_key(entry_id)))
    assert rejection["error"].startswith("library 'nope' does not exist")
    assert not r.exists(keys.run_key(f"run-{entry_id}"))
