"""Admission: runs past max_concurrent_runs wait in a fair queue and start when a slot frees."""

from __future__ import annotations

import uuid
from pathlib import Path

import orjson

from mother import keys
from tests.conftest import run_cli, start_pipeline, stop_pipeline


def _quick(run_id: str, user: str, delay: float) -> dict:
    return {
        "run_id": run_id,
        "user_id": user,
        "task": "say hi",
        "pipeline": [{"name": "only", "role": "writer", "model": "scripted"}],
        "scripts": {"writer": [{"text": "hi", "delay_seconds": delay}]},
    }


def test_runs_past_the_concurrency_limit_wait_their_turn_and_all_succeed(tmp_path: Path) -> None:
    """Twelve quick submissions with max_concurrent_runs 2 (the default is 10; 100 quick ones ended 90
    runs 'System at capacity'): every run succeeds, none ends for being busy; the waiting ones are queued
    in a fair order (the users take turns: bob's and carol's first runs start before alice's fourth);
    `wait` and `status` say where a run waits; the global gauges count them while they wait."""
    p = start_pipeline(tmp_path, workers=2, env={"MOTHER_BUDGET__GLOBAL__MAX_CONCURRENT_RUNS": "2"})
    try:
        tag = uuid.uuid4().hex[:6]
        order = (
            [("alice", i) for i in range(6)]
            + [("bob", i) for i in range(3)]
            + [("carol", i) for i in range(3)]
        )
        ids = {
            (user, i): p.client.submit(_quick(f"{user}-{i}-{tag}", user, 0.6)) for user, i in order
        }
        last = ids[("carol", 2)]

        def taken_in() -> bool:
            return p.redis.exists(keys.run_key(last)) == 1

        _until(taken_in)
        status = run_cli("status", last, env={"MOTHER_REDIS_URL": p.url})
        notices: list[str] = []
        envelope = p.client.wait(last, 90, on_notice=notices.append)
        outcomes = {
            key: p.client.wait(run_id, 90).termination.reason for key, run_id in ids.items()
        }
        starts = [
            f["run_id"]
            for _, f in p.redis.xrange(keys.ACTIVITY_STREAM)
            if f["type"] == "phase_dispatched" and f.get("run_id", "").endswith(tag)
        ]
        queued = [f for _, f in p.redis.xrange(keys.ACTIVITY_STREAM) if f["type"] == "run_queued"]
    finally:
        stop_pipeline(p)
    assert envelope.termination.reason == "success"
    assert set(outcomes.values()) == {"success"}
    # two started at once, ten waited
    assert len(queued) == 10
    assert starts.index(ids[("bob", 0)]) < starts.index(ids[("alice", 3)])
    assert starts.index(ids[("carol", 0)]) < starts.index(ids[("alice", 3)])
    assert [run for run in starts if run.startswith("alice")] == [
        ids[("alice", i)] for i in range(6)
    ]
    assert "waiting for a slot: position" in status.stdout, status.stdout + status.stderr
    assert any(f"run {last} waits for a slot: position" in n for n in notices), notices


def test_a_run_cancelled_while_it_waits_leaves_the_queue(tmp_path: Path) -> None:
    """A waiting run that is cancelled ends user_cancelled at once and frees its place; the one behind it
    moves up and starts when the busy run ends."""
    p = start_pipeline(tmp_path, workers=1, env={"MOTHER_BUDGET__GLOBAL__MAX_CONCURRENT_RUNS": "1"})
    try:
        tag = uuid.uuid4().hex[:6]
        busy = p.client.submit(_quick(f"busy-{tag}", "u1", 2.0))
        waiting = p.client.submit(_quick(f"waiting-{tag}", "u1", 0.0))
        behind = p.client.submit(_quick(f"behind-{tag}", "u2", 0.0))
        _until(lambda: p.client.queue_position(behind) is not None)
        assert p.client.queue_position(waiting)[:2] == (1, 2)
        p.client.cancel(waiting, "tester", "not needed")
        cancelled = p.client.wait(waiting, 30).termination
        assert p.client.queue_position(behind)[:2] == (1, 1)
        assert p.client.wait(busy, 30).termination.reason == "success"
        assert p.client.wait(behind, 30).termination.reason == "success"
        admission = orjson.loads(
            p.redis.execute_command("JSON.GET", keys.run_key(behind), "$.admission")
        )
    finally:
        stop_pipeline(p)
    assert (cancelled.reason, cancelled.phase_at_termination) == ("user_cancelled", "only")
    assert admission == ["admitted"]


def _until(predicate, timeout: float = 30.0) -> None:
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError("condition not met in time")


def _submitted(r, rt, spec: dict) -> str:
    """Submit ``spec`` and have Mother's intake take it in (in this process, against the real server)."""
    from mother.client import MotherClient
    from mother.intake import handle_submission

    run_id = MotherClient(settings=rt.settings).submit(spec)
    [(entry_id, fields)] = [
        (e, f) for e, f in r.xrange(keys.SUBMISSIONS_STREAM) if run_id in str(f.get("spec", ""))
    ]
    handle_submission(rt, entry_id, fields)
    return run_id


def test_the_circuit_breaker_refuses_new_runs_while_a_gauge_is_at_its_limit_and_closes_after(
    r, redis_url: str, monkeypatch
) -> None:
    """budget:global's gauges trip the breaker: with Redis's real memory (the watchdog's INFO reading)
    at or past max_redis_memory_mb, or docling jobs at max_docling_jobs, a new run ends at intake
    budget_exhausted, "System at capacity", naming the gauge and its figures; the refusal is an activity
    entry (circuit_breaker) and a counter; the user's daily run count and the concurrent slots are left
    alone. When the gauge falls under its limit again, the next run starts."""
    from mother.config import load_settings
    from mother.records.results import read_termination
    from mother.service import Mother
    from mother.web.data import gauges

    monkeypatch.setenv("MOTHER_BUDGET__GLOBAL__MAX_REDIS_MEMORY_MB", "1")
    monkeypatch.setenv("MOTHER_BUDGET__GLOBAL__MAX_DOCLING_JOBS", "2")
    mother = Mother(load_settings(redis_url=redis_url))
    mother.publish_config()
    mother.watchdog.refresh_gauges()
    rt = mother.rt
    memory_mb = orjson.loads(r.execute_command("JSON.GET", keys.GLOBAL_BUDGET))["redis_memory_mb"]
    assert memory_mb >= 1
    assert gauges(r)["circuit"] == "open"
    refusals = int(r.hget(keys.METRICS_COUNTERS, "budget_refusals|circuit_open") or 0)
    tag = uuid.uuid4().hex[:6]
    user = f"breaker-{tag}"
    daily = keys.user_daily_budget_key(user, rt.clock.today())
    run_id = _submitted(r, rt, _quick(f"mem-{tag}", user, 0))
    record = read_termination(r, run_id)
    assert record is not None and record.reason == "budget_exhausted"
    assert "System at capacity" in record.details
    assert record.contributing_factors == [f"redis_memory_mb {memory_mb}/1"]
    [entry] = [
        f
        for _, f in r.xrange(keys.ACTIVITY_STREAM)
        if f["type"] == "circuit_breaker" and f.get("run_id") == run_id
    ]
    assert orjson.loads(entry["data"])["gauge"] == "redis_memory_mb"
    assert int(r.hget(keys.METRICS_COUNTERS, "budget_refusals|circuit_open")) == refusals + 1
    assert not r.exists(daily) or orjson.loads(r.execute_command("JSON.GET", daily))["runs"] == 0
    assert r.zscore(keys.RUN_DEADLINES, run_id) is None

    # memory back under a limit it may reach; docling jobs at theirs: still open, for that gauge
    monkeypatch.setenv("MOTHER_BUDGET__GLOBAL__MAX_REDIS_MEMORY_MB", "16000")
    mother = Mother(load_settings(redis_url=redis_url))
    mother.publish_config()
    rt = mother.rt
    r.execute_command("JSON.SET", keys.GLOBAL_BUDGET, "$.docling_jobs", 2)
    assert gauges(r)["circuit"] == "open"
    run_id = _submitted(r, rt, _quick(f"docling-{tag}", user, 0))
    record = read_termination(r, run_id)
    assert record is not None and record.contributing_factors == ["docling_jobs 2/2"]

    # closed again: the next run is admitted and started
    r.execute_command("JSON.SET", keys.GLOBAL_BUDGET, "$.docling_jobs", 0)
    assert gauges(r)["circuit"] == "closed"
    run_id = _submitted(r, rt, _quick(f"open-{tag}", user, 0))
    assert read_termination(r, run_id) is None
    assert r.zscore(keys.RUN_DEADLINES, run_id) is not None
    assert orjson.loads(r.execute_command("JSON.GET", daily))["runs"] == 1
    assert int(r.hget(keys.METRICS_COUNTERS, "budget_refusals|circuit_open")) == refusals + 2
