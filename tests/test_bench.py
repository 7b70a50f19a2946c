"""The benchmark's own jobs and dispatchers (scripts/bench), run on real workers that allow them."""

from __future__ import annotations

import os
from collections.abc import Iterator

import orjson
import pytest

from mother import keys
from scripts.bench import worker_env
from tests.conftest import Pipeline, start_pipeline, stop_pipeline
from tests.test_pipeline import wait_until


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pipeline]:
    """Mother + 2 workers that allow the benchmark's jobs (worker.allowed_jobs) and can import them."""
    p = start_pipeline(tmp_path_factory.mktemp("bench"), env=worker_env())
    yield p
    stop_pipeline(p)


def test_the_benchmarks_bare_hop_chain_completes_through_its_relay(pipeline: Pipeline) -> None:
    """bench_pipeline's bare hop: each no-op job reports to a stream, the relay enqueues the next step."""
    import subprocess

    import redis
    from rq import Queue
    from rq.job import Job, JobStatus
    from rq.serializers import JSONSerializer

    from scripts.bench import HOPS_STREAM
    from scripts.bench.noop import hop_job_id, relay_command

    conn = redis.Redis.from_url(pipeline.url)
    relay = subprocess.Popen(relay_command(pipeline.url), env={**os.environ, **worker_env()})
    try:
        Queue("agents", connection=conn, serializer=JSONSerializer).enqueue_call(
            "scripts.bench.noop.hop", args=(7, 0, 3), job_id=hop_job_id(7, 0), result_ttl=60
        )
        last = Job.key_for(hop_job_id(7, 2))
        wait_until(
            lambda: conn.hget(last, "status") == JobStatus.FINISHED.value.encode(), timeout=30
        )
        # still serving
        assert relay.poll() is None
        # every step acknowledged
        assert conn.xpending(HOPS_STREAM, "relay")["pending"] == 0
    finally:
        relay.kill()
        relay.wait()


def test_the_benchmarks_floor_run_ends_through_its_dispatcher(pipeline: Pipeline) -> None:
    """bench_pipeline's floor: each phase reserves and settles its model call through the guard, stores its
    artifact and reports; the dispatcher moves the run on with mh_transition and ends it with mh_terminate."""
    import subprocess

    import redis
    from rq import Queue
    from rq.serializers import JSONSerializer

    from mother.config import load_settings
    from mother.functions import server_now_ms
    from scripts.bench import FLOOR_ENDING, FLOOR_STREAM, floor

    conn = redis.Redis.from_url(pipeline.url)
    dispatcher = subprocess.Popen(
        floor.relay_command(pipeline.url), env={**os.environ, **worker_env()}
    )
    try:
        pipe = conn.pipeline(transaction=False)
        floor.open_run(pipe, load_settings(redis_url=pipeline.url), 7, server_now_ms(conn))
        pipe.execute()
        Queue("agents", connection=conn, serializer=JSONSerializer).enqueue_call(
            floor.JOB, args=(7, 0, 3), job_id=floor.floor_job_id(7, 0), result_ttl=60
        )
        wait_until(lambda: conn.exists(keys.termination_key("floor-7")), timeout=30)
        record = orjson.loads(conn.execute_command("JSON.GET", keys.termination_key("floor-7")))
        assert (record["reason"], record["phase_at_termination"]) == ("success", "review")
        run = orjson.loads(conn.execute_command("JSON.GET", keys.run_key("floor-7")))
        assert (run["status"], run["phase_index"], [r["phase"] for r in run["results"]]) == (
            "terminated",
            2,
            ["plan", "execute"],
        )
        assert len(run["artifacts"]) == 2 and all(
            conn.exists(keys.artifact_key(a)) for a in run["artifacts"]
        )
        budget = orjson.loads(conn.execute_command("JSON.GET", keys.run_budget_key("floor-7")))
        # three model calls reserved and settled (10 + 2 tokens each), nothing left held
        closed = orjson.loads(
            conn.execute_command("JSON.GET", keys.run_limits_key("floor-7"), "$.status")
        )
        assert (budget["model_calls"], budget["total_tokens"], budget["reservations"], closed) == (
            3,
            36,
            {},
            ["closed"],
        )
        assert budget["reserved"]["total_tokens"] == 0
        # every result acknowledged
        assert conn.xpending(FLOOR_STREAM, "floor")["pending"] == 0
        assert (
            conn.zscore(FLOOR_ENDING, "floor-7") is not None
            and conn.zscore(keys.RUNS_ENDING, "floor-7") is None
        )
        # still serving
        assert dispatcher.poll() is None
    finally:
        dispatcher.kill()
        dispatcher.wait()
