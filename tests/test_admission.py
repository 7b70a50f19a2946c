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
