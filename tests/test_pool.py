"""``mother worker --concurrency N``: one parent forks N RQ workers, replaces one that dies, and beats for
the attempts they run; kill -9 of a horse or a worker is still found and retried once; a phase whose
worker and horse are stopped past the heartbeat timeout (a slow set-up, a starved CPU) is not lost; the
memory check refuses what the host cannot hold. Real processes against the embedded server."""

from __future__ import annotations

import os
import signal
import time
import uuid
from pathlib import Path

import orjson
import pytest

from mother import keys
from mother.config import load_settings
from tests.conftest import FAST_ENV, Pipeline, beating, run_cli, start_pipeline, stop_pipeline
from workers.pool import memory_plan, tree

SLOTS = 3


def _until(predicate, timeout: float = 60.0, what: str = "condition"):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = predicate()
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError(f"{what} not met within {timeout} s")


def _levels(p: Pipeline) -> tuple[int, list[int], list[int]]:
    """The pool's parent, its workers and their work-horses."""
    root = p.stack.procs["worker-0"].pid
    found = tree(root)
    return root, [pid for pid, d in found if d == 1], [pid for pid, d in found if d == 2]


def _host_line(p: Pipeline) -> dict:
    """The pool's host's line, as Mother wrote it from its last beat."""
    line = p.redis.get(keys.host_alive_key("local-0"))
    assert line is not None
    return orjson.loads(line)


@pytest.fixture(scope="module")
def pooled(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    p = start_pipeline(tmp_path_factory.mktemp("pool"), workers=1, concurrency=SLOTS)
    _until(lambda: len(_levels(p)[1]) == SLOTS, what="the pool's workers")
    yield p
    stop_pipeline(p)


def _spec(fail: str | None, delay: float = 0.0) -> dict:
    first = (
        {"fail": fail, "attempts": [1]}
        if fail
        else {"text": "slow", "delay_seconds": delay, "attempts": [1]}
    )
    return {
        "run_id": f"pool-{uuid.uuid4().hex[:8]}",
        "user_id": "pool-user",
        "task": "write the notes",
        "pipeline": [{"name": "execute", "role": "writer", "model": "scripted", "max_retries": 2}],
        "scripts": {"writer": [first, {"text": "done", "confidence": 0.9}]},
    }


def test_the_pool_runs_phases_on_its_workers_and_publishes_its_host(pooled: Pipeline) -> None:
    run_ids = [pooled.client.submit(_spec(None, 0.5)) for _ in range(SLOTS * 2)]
    for run_id in run_ids:
        envelope = pooled.client.wait(run_id, 60)
        assert envelope.termination.reason == "success", envelope.termination.details
    # RQ workers named after the host and the pool, one per slot
    names = {w.decode() if isinstance(w, bytes) else w for w in pooled.redis.smembers("rq:workers")}
    assert len([n for n in names if n.startswith("rq:worker:local-0.w0-")]) == SLOTS, names
    line = _until(lambda: (found := _host_line(pooled))["pss_mb"] > 0 and found)
    assert (line["concurrency"], line["workers"]) == (SLOTS, SLOTS) and 0 <= line["busy"] <= SLOTS


def test_a_killed_worker_is_replaced_and_its_attempt_retried_once(pooled: Pipeline) -> None:
    """`fail: kill_worker` SIGKILLs the worker running the phase and its horse: the pool stops beating
    for the attempt, Mother retries it once, and the pool forks a worker in the dead one's slot."""
    _, before, _ = _levels(pooled)
    run_id = pooled.client.submit(_spec("kill_worker"))
    envelope = pooled.client.wait(run_id, 60)
    assert envelope.termination.reason == "success", envelope.termination.details
    state = pooled.client.status(run_id)
    assert state.attempt == 2

    def replaced() -> list[int] | None:
        workers = _levels(pooled)[1]
        return workers if len(workers) == SLOTS and set(workers) != set(before) else None

    after = _until(replaced, what="a replaced worker")
    assert len(set(before) - set(after)) == 1


def _beaten(p: Pipeline, run_id: str, index: int = 0, attempt: int = 1) -> str | None:
    """Who last beat for the attempt (its heartbeat key), None before a worker did (Mother's own mark at
    dispatch is not a beat)."""
    who = p.redis.get(keys.attempt_heartbeat_key(run_id, index, attempt))
    return who if beating(who) else None


def test_a_killed_horse_is_found_and_its_attempt_retried_once(pooled: Pipeline) -> None:
    """kill -9 of the work-horse from outside (an OOM kill): its worker ends the job, the pool stops
    beating for it, Mother retries the attempt once."""
    spec = _spec(None, 30.0)
    run_id = pooled.client.submit(spec)
    horse = _until(
        lambda: next(iter(_levels(pooled)[2]), None) if _beaten(pooled, run_id) else None,
        what="the phase's horse",
    )
    os.kill(horse, signal.SIGKILL)
    _until(lambda: pooled.client.status(run_id).attempt == 2, what="the retry")
    envelope = pooled.client.wait(run_id, 60)
    assert envelope.termination.reason == "success", envelope.termination.details


def test_a_phase_whose_worker_and_horse_stall_past_the_timeout_is_not_lost(
    pooled: Pipeline,
) -> None:
    """The pool beats for the attempt: a worker and its horse that cannot run for three heartbeat
    timeouts (SIGSTOP: what a set-up starved of CPU looks like from outside) keep their attempt; when
    they run again the phase ends on its first attempt."""
    run_id = pooled.client.submit(_spec(None, 2.0))
    _until(lambda: _beaten(pooled, run_id), what="the phase's first beat")

    def with_horse() -> tuple[int, list[int], list[int]] | None:
        levels = _levels(pooled)
        return levels if levels[2] else None

    _, workers, horses = _until(with_horse, what="a horse")
    [horse] = horses
    worker = int(Path(f"/proc/{horse}/stat").read_text().rsplit(")", 1)[1].split()[1])
    assert worker in workers
    # the pipeline's (FAST_ENV), not this process's settings
    timeout = float(FAST_ENV["MOTHER_SERVICE__HEARTBEAT_TIMEOUT_SECONDS"])
    os.kill(worker, signal.SIGSTOP)
    os.kill(horse, signal.SIGSTOP)
    try:
        stalled = time.monotonic()
        # three timeouts pass while neither can run; the attempt stays
        while time.monotonic() - stalled < 3 * timeout:
            assert pooled.client.status(run_id).attempt == 1
            time.sleep(0.2)
    finally:
        os.kill(horse, signal.SIGCONT)
        os.kill(worker, signal.SIGCONT)
    envelope = pooled.client.wait(run_id, 60)
    assert envelope.termination.reason == "success", envelope.termination.details
    assert pooled.client.status(run_id).attempt == 1


def test_memory_plan_refuses_and_warns() -> None:
    settings = load_settings(worker={"phase_memory_mb": 10, "base_memory_mb": 100})
    fits = memory_plan(settings, 50, available=2000.0)
    assert not fits.refused and not fits.tight and fits.fits == 190
    tight = memory_plan(settings, 160, available=2000.0)
    assert tight.tight and not tight.refused
    over = memory_plan(settings, 500, available=2000.0)
    assert over.refused and "at most 190 fit" in over.line()


def test_worker_refuses_a_concurrency_the_host_cannot_hold() -> None:
    result = run_cli(
        "worker", "--concurrency", "4000", env={"MOTHER_WORKER__PHASE_MEMORY_MB": "60000"}
    )
    assert result.returncode != 0
    assert "error[config]: --concurrency 4000: 4000 concurrent phases need" in result.stderr
    assert "\n" not in result.stderr.strip()
