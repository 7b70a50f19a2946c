"""The benchmark's own jobs and dispatchers (scripts/bench), run on real workers that allow them."""

from __future__ import annotations

import os
from collections.abc import Iterator

import orjson
import pytest

from mother import keys
from scripts.bench import bench_queue, worker_env
from tests.conftest import Pipeline, stop_pipeline
from tests.test_pipeline import wait_until


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pipeline]:
    """Mother + 2 worker hosts that allow the benchmark's jobs (worker.allowed_jobs), can import them and
    write with the benchmark's own connection (the embedded server's default user)."""
    from mother.server import EmbeddedRedis
    from mother.stack import LocalStack
    from tests.conftest import FAST_ENV

    tmp = tmp_path_factory.mktemp("bench")
    server = EmbeddedRedis(dir=tmp / "redis", appendfsync="no").start()
    env = {**FAST_ENV, "MOTHER_WORKER__WORKSPACE_ROOT": str(tmp / "ws"), **worker_env(server.url)}
    stack = LocalStack(server.url, workers=2, log_dir=tmp / "logs", env=env, wait_hosts=True)
    p = Pipeline(server, stack.start(), tmp / "ws")
    yield p
    stop_pipeline(p)


def test_the_benchmarks_bare_hop_chain_completes_through_its_relay(pipeline: Pipeline) -> None:
    """bench_pipeline's bare hop: each no-op job reports to a stream, the relay enqueues the next step."""
    import subprocess

    import redis
    from rq.job import Job, JobStatus

    from scripts.bench import HOPS_STREAM
    from scripts.bench.noop import hop_job_id, relay_command

    conn = redis.Redis.from_url(pipeline.url)
    relay = subprocess.Popen(
        relay_command(pipeline.url), env={**os.environ, **worker_env(pipeline.url)}
    )
    try:
        bench_queue(conn, "local-0").enqueue_call(
            "scripts.bench.noop.hop",
            args=(7, 0, 3),
            job_id=hop_job_id("local-0", 7, 0),
            result_ttl=60,
        )
        last = Job.key_for(hop_job_id("local-0", 7, 2))
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

    from mother.config import load_settings
    from mother.functions import server_now_ms
    from scripts.bench import FLOOR_ENDING, FLOOR_STREAM, floor

    conn = redis.Redis.from_url(pipeline.url)
    dispatcher = subprocess.Popen(
        floor.relay_command(pipeline.url), env={**os.environ, **worker_env(pipeline.url)}
    )
    try:
        pipe = conn.pipeline(transaction=False)
        floor.open_run(pipe, load_settings(redis_url=pipeline.url), 7, server_now_ms(conn))
        pipe.execute()
        bench_queue(conn, "local-1").enqueue_call(
            floor.JOB, args=(7, 0, 3), job_id=floor.floor_job_id("local-1", 7, 0), result_ttl=60
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
