"""Crashes and races: killed workers, a killed leader, two Mothers, concurrent terminations."""

from __future__ import annotations

import os
import signal
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import orjson
import pytest
import redis

from mother import keys
from mother.termination import build_record, terminate
from schemas import ResultEnvelope
from tests.conftest import (
    Pipeline,
    attacker_host,
    beating,
    first_accepted,
    host_of_worker,
    quick_spec,
    start_pipeline,
    stop_pipeline,
)
from tests.test_pipeline import example, held_back_nothing, termination_keys, wait_until
from tests.test_spawn import _spawn

NOW = "2026-12-06T00:00:00.000Z"


@pytest.fixture
def fresh(tmp_path: Path):
    """A pipeline of its own (processes get killed here): two Mothers, two workers."""
    p = start_pipeline(tmp_path, mothers=2, workers=2)
    yield p
    stop_pipeline(p)


def _slow(seconds: float, attempts: list[int] | None = None) -> dict:
    reply = {"text": "finished", "delay_seconds": seconds}
    if attempts:
        reply["attempts"] = attempts
    return example("worker-killed", scripts={"writer": [reply, {"text": "finished on retry"}]})


def test_killed_worker_parent_and_child_is_retried(fresh: Pipeline) -> None:
    """kill -9 of the worker running a phase (parent and work-horse) → retried elsewhere, success within 30 s."""
    run_id = fresh.client.submit(_slow(60, attempts=[1]))
    hb = wait_until(lambda: fresh.redis.zrange(keys.HEARTBEATS, 0, -1), timeout=20)
    assert hb == [keys.heartbeat_member(run_id, 0, 1)]
    # the worker running the job is the one with a work-horse child (the first heartbeat is written by
    # the worker just before it forks, so the horse may be a moment behind it)
    worker, horse = wait_until(lambda: _running_worker(fresh), timeout=10)
    # killed mid-call: its model call is reserved
    wait_until(
        lambda: (
            fresh.redis.execute_command(
                "JSON.OBJLEN", keys.run_budget_key(run_id), "$.reservations"
            )
            == [1]
        ),
        timeout=10,
    )
    os.kill(worker, signal.SIGKILL)
    for pid in horse:
        os.kill(pid, signal.SIGKILL)
    killed_at = time.monotonic()
    envelope = fresh.wait(run_id, timeout=30)
    assert time.monotonic() - killed_at < 30
    assert envelope.termination.reason == "success"
    assert envelope.output == "finished on retry"
    state = fresh.client.status(run_id)
    assert state.attempt == 2
    retried = [h for h in state.history if h.event == "phase_retried"]
    assert retried and retried[0].detail.startswith("worker lost: no heartbeat")
    assert termination_keys(fresh, run_id) == [keys.termination_key(run_id)]
    # the killed attempt's model call was never settled: its reservation was given back at the retry (it
    # held the run's and the user's daily tokens for the rest of the day); the retry's call was settled
    held_back_nothing(
        fresh, run_id, released_why="phase execute attempt 1 was lost: worker lost: no heartbeat"
    )


def test_worker_beats_for_its_horse_and_a_horse_whose_worker_dies_beats_for_itself(
    fresh: Pipeline,
) -> None:
    """While a work-horse runs a phase, its worker's parent keeps the attempt's heartbeat (the horse starts
    no heartbeat thread: it has one thread). kill -9 of the worker alone: the horse gets the parent-death
    signal, beats for itself past the heartbeat timeout, and its result ends the run: no retry. Each beat
    is an ask on the host's stream naming the process that sent it; Mother's mark on the attempt says
    which one beat last."""
    # long enough that the last check below comes before the phase ends (its key then goes): about 4 s
    # to the kill, a second of waits after it and 4 s past the timeout (8 s was at the edge: it failed
    # once under the full suite's load)
    run_id = fresh.client.submit(_slow(12, attempts=[1]))
    key = keys.attempt_heartbeat_key(run_id, 0, 1)
    wait_until(lambda: beating(fresh.redis.get(key)), timeout=20)
    worker, (horse,) = wait_until(lambda: _running_worker(fresh), timeout=10)
    pool = _parent(worker)
    # the worker's parent (the pool) beats every 0.5 s here, past the timeout (3 s)
    time.sleep(3.5)
    assert fresh.redis.get(key).endswith(f":{pool}")
    # ...not a thread in the horse
    assert _threads(horse) == 1
    os.kill(worker, signal.SIGKILL)
    # the orphaned horse started its own heartbeat
    wait_until(lambda: _threads(horse) == 2, timeout=5)
    wait_until(lambda: not str(fresh.redis.get(key)).endswith(f":{pool}"), timeout=5)
    # longer than the heartbeat timeout (3 s here): the horse's beats keep it
    time.sleep(4)
    assert fresh.redis.get(key) is not None
    envelope = fresh.wait(run_id, timeout=30)
    assert envelope.termination.reason == "success"
    # the orphaned horse's reply, not a retry's
    assert envelope.output == "finished"
    state = fresh.client.status(run_id)
    assert state.attempt == 1 and not [h for h in state.history if h.event == "phase_retried"]
    # the attempt is over: Mother deletes its key and its place in the index
    wait_until(
        lambda: (
            not fresh.redis.exists(key)
            and fresh.redis.zscore(keys.HEARTBEATS, keys.heartbeat_member(run_id, 0, 1)) is None
        ),
        timeout=10,
    )


def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def _running_worker(fresh: Pipeline) -> tuple[int, list[int]] | None:
    """The RQ worker running a job (a child of a worker process: `mother worker` forks its workers) and its
    work-horse(s), or None while no worker has one."""
    for name, proc in fresh.stack.procs.items():
        if not name.startswith("worker-"):
            continue
        for worker in _children(proc.pid):
            horses = _children(worker)
            if horses:
                return worker, horses
    return None


def _threads(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/task"))
    except OSError:
        return 0


def _children(pid: int) -> list[int]:
    """The work-horses of worker ``pid`` (not the tool sandbox its start proves, a bwrap child)."""
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(x) for x in text.split() if _comm(int(x)) not in ("bwrap", "")]


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def test_killed_leader_standby_finishes_the_run(fresh: Pipeline) -> None:
    """kill -9 of the active Mother mid-run → the standby takes the lease and finishes it; one record."""
    run_id = fresh.client.submit(
        example(
            "three-phase",
            scripts={
                "planner": [{"text": "plan", "delay_seconds": 1.5}],
                "coder": [{"text": "code", "delay_seconds": 1.5}],
                "critic": [{"text": "ok"}],
            },
        )
    )
    wait_until(
        lambda: (
            fresh.redis.exists(keys.run_key(run_id)) and fresh.client.status(run_id).phase == "plan"
        )
    )
    leader = fresh.redis.get(keys.LEADER_LEASE)
    leader_pid = int(leader.split(":")[1])
    names = [n for n, p in fresh.stack.procs.items() if p.pid == leader_pid]
    assert names and names[0].startswith("mother-")
    os.kill(leader_pid, signal.SIGKILL)
    envelope = fresh.wait(run_id, timeout=40)
    assert envelope.termination.reason == "success"
    new_leader = fresh.redis.get(keys.LEADER_LEASE)
    assert new_leader is not None and new_leader != leader
    assert termination_keys(fresh, run_id) == [keys.termination_key(run_id)]
    completed = [
        h.phase for h in fresh.client.status(run_id).history if h.event == "phase_completed"
    ]
    # each phase accepted exactly once across the takeover
    assert completed == ["plan", "execute", "review"]


def test_an_end_left_by_a_killed_mother_is_applied_by_the_leader(tmp_path: Path) -> None:
    """A Mother killed between a run's record and its end's writes (left here by hand: the record written,
    nothing else) leaves the run holding what it held; the leading Mother process applies the end once it has
    waited finish_end_after_seconds: the reservation a call held given back, the queued job dropped,
    ``terminated`` logged once and marked late."""
    from mother.activity import recent
    from mother.budget import Guard
    from mother.config import load_settings
    from mother.records.budgets import held_reservations
    from mother.runtime import Runtime

    p = start_pipeline(
        tmp_path, mothers=1, workers=0, env={"MOTHER_SERVICE__FINISH_END_AFTER_SECONDS": "1"}
    )
    try:
        run_id = p.client.submit(example("three-phase"))
        member = keys.heartbeat_member(run_id, 0, 1)
        # dispatched; no host is live: it waits for one
        wait_until(lambda: p.redis.zscore(keys.HOSTS_AWAITED, member) is not None)
        rt = Runtime.create(load_settings(redis_url=p.server.url))
        op = Guard(p.redis, rt.settings, run_id, "alice", rt.clock.today).reserve_call(
            rt.settings.models["scripted"], 200
        )
        record = build_record(
            run_id=run_id,
            reason="user_cancelled",
            phase="plan",
            details="Cancelled by alice: test",
            at_ms=rt.clock.now_ms(),
            at_iso=rt.clock.now_iso(),
        )
        assert terminate(
            p.redis,
            record,
            ResultEnvelope(run_id=run_id, user_id="alice", created_at=record.timestamp),
        )[0]
        assert list(held_reservations(p.redis, run_id)) == [op]
        wait_until(lambda: p.redis.zscore(keys.RUNS_ENDING, run_id) is None, timeout=20)
        held_back_nothing(p, run_id, released_why="the run ended user_cancelled")
        assert p.redis.zscore(keys.HOSTS_AWAITED, member) is None
        [ended] = [e for e in recent(p.redis, 100, run_id=run_id) if e.type == "terminated"]
        assert ended.data["late"] is True and ended.data["reason"] == "user_cancelled"
        assert p.client.wait(run_id, timeout=5).termination.reason == "user_cancelled"
    finally:
        stop_pipeline(p)


def _asked(p: Pipeline, host: str, run_id: str) -> bool:
    """Whether an ask of ``run_id``'s attempt other than a beat waits on ``host``'s stream."""
    entries = p.redis.xrange(keys.host_asks_key(host))
    return any(fields.get("run") == run_id for _id, fields in entries)


def _trim_as_another_host(p: Pipeline, stream: str) -> None:
    """The attacker: another enrolled host whose password leaked appends to ``stream`` with MAXLEN 0, or
    trims it: refused, the stream as it was."""
    _name, mallory = attacker_host(p.redis, p.url)
    before = p.redis.xlen(stream)
    with pytest.raises(redis.exceptions.NoPermissionError):
        mallory.xadd(stream, {"type": "noise"}, maxlen=0, approximate=False)
    with pytest.raises(redis.exceptions.NoPermissionError):
        mallory.xtrim(stream, maxlen=0, approximate=False)
    assert p.redis.xlen(stream) == before


def test_no_host_trims_mothers_streams_and_an_ask_mother_did_not_hear_is_served_later(
    fresh: Pipeline,
) -> None:
    """Issue 53 (and 62): no host may append to Mother's streams (an XADD may carry MAXLEN 0, which trims
    every entry not yet read): another host's XADD and XTRIM on mother:events, mother:spawns and activity
    are refused. A phase's result is an ask on its host's own stream; asked while every Mother is stopped,
    it waits there (the worker waits for its reply) and is answered when a Mother serves again. The run
    succeeds on its first attempt, its output intact."""
    run_id = fresh.client.submit(_slow(1.5))
    key = keys.attempt_heartbeat_key(run_id, 0, 1)
    wait_until(lambda: beating(fresh.redis.get(key)), timeout=20)
    host = str(fresh.redis.get(key)).split(":")[0]
    mothers = [
        pid
        for name, proc in fresh.stack.procs.items()
        if name.startswith("mother-")
        for pid in [proc.pid]
    ]
    for pid in mothers:
        os.kill(pid, signal.SIGSTOP)
    try:
        # the attempt's next ask (a charge, or its result) waits, unread, on the host's stream
        wait_until(lambda: _asked(fresh, host, run_id), timeout=20)
        for stream in (keys.EVENTS_STREAM, keys.SPAWNS_STREAM, keys.ACTIVITY_STREAM):
            _trim_as_another_host(fresh, stream)
    finally:
        for pid in mothers:
            os.kill(pid, signal.SIGCONT)
    done = fresh.wait(run_id, 60)
    assert done.termination.reason == "success" and done.output == "finished"
    state = fresh.client.status(run_id)
    assert state.attempt == 1 and [r.attempt for r in state.results] == [1], [
        (h.event, h.detail) for h in state.history
    ]
    assert not [h for h in state.history if h.event == "phase_retried"]


def test_a_queued_job_deleted_or_moved_off_its_queue_is_dispatched_again(tmp_path: Path) -> None:
    """Issue 53: the worker user may delete RQ's keys or move a job to another list. A job whose hash is
    gone was dispatched again (reconcile); one moved off its queue (its hash intact, still "queued") waited
    out its claim time, the phase's timeout (10 minutes by default). Mother now checks each attempt
    whose job still waits for a worker a heartbeat timeout after its last check: moved off every queue,
    it is dispatched again and recorded as a violation. The job is queued for a host that says it has
    workers free and takes nothing (registered by hand, its line kept): moved away, then deleted, it is
    back on that host's queue each time. A real host then starts: the job, waiting a heartbeat timeout
    on a host that says it has workers free, goes to it (and Mother queues nothing for the first host for
    a while), which runs the run's first attempt to success."""
    from tests.test_lifecycle import HOST, live_host

    p = start_pipeline(tmp_path, mothers=1, workers=0)
    try:
        live_host(p.redis)
        spec = example("worker-killed", scripts={"writer": [{"text": "finished"}]})
        run_id = p.client.submit(spec)
        queue, job = f"rq:queue:{HOST}.agents", keys.phase_job_id(HOST, run_id, 0, 1)

        def queued() -> bool:
            return job in p.redis.lrange(queue, 0, -1)

        wait_until(queued, timeout=20)
        assert p.redis.lmove(queue, "rq:queue:elsewhere", "LEFT", "RIGHT") == job
        wait_until(queued, timeout=20)
        found = [orjson.loads(v) for v in p.redis.lrange(keys.SECURITY_VIOLATIONS, 0, -1)]
        assert [v["job_id"] for v in found if v["kind"] == "rq_job_moved"] == [job]
        p.redis.delete(f"rq:job:{job}")
        p.redis.lrem(queue, 0, job)
        wait_until(queued, timeout=20)
        p.stack.add_worker()
        done = p.wait(run_id, 60)
        assert done.termination.reason == "success" and done.output == "finished"
        assert p.client.status(run_id).attempt == 1
        assert p.redis.zscore(keys.HOSTS_AVOIDED, HOST) is not None
    finally:
        stop_pipeline(p)


def test_two_mothers_give_one_record_per_run(fresh: Pipeline) -> None:
    """With two Mother processes running, every run of a batch has exactly one termination record."""
    run_ids = [fresh.client.submit(example("three-phase")) for _ in range(10)]
    for run_id in run_ids:
        assert fresh.wait(run_id, timeout=60).termination.reason == "success"
        assert termination_keys(fresh, run_id) == [keys.termination_key(run_id)]
        assert fresh.redis.zscore(keys.termination_reason_index_key("success"), run_id) is not None


def _race_terminate(url: str, run_id: str, reason: str) -> tuple[bool, str]:
    client = redis.Redis.from_url(url, decode_responses=True)
    record = build_record(
        run_id=run_id,
        reason=reason,
        phase="execute",
        details=f"by {reason}",
        at_ms=1,
        at_iso="2026-01-01T00:00:00.001Z",
    )
    envelope = ResultEnvelope(run_id=run_id, user_id="u", created_at="2026-01-01T00:00:00.001Z")
    won, stored = terminate(client, record, envelope)
    return won, stored.reason


def test_concurrent_terminations_write_one_record(r: redis.Redis, redis_url: str) -> None:
    """Eight processes terminating one run with different reasons: one wins, all see its record."""
    from mother.functions import load_functions

    load_functions(r)
    reasons = ["timeout", "user_cancelled", "retries_exhausted", "catastrophic_error"] * 2
    with ProcessPoolExecutor(8) as pool:
        outcomes = list(pool.map(_race_terminate, [redis_url] * 8, ["race-1"] * 8, reasons))
    winners = [reason for won, reason in outcomes if won]
    assert len(winners) == 1
    assert {reason for _, reason in outcomes} == {winners[0]}
    stored = orjson.loads(r.execute_command("JSON.GET", keys.termination_key("race-1")))
    assert stored["reason"] == winners[0]
    assert sum(r.zcard(keys.termination_reason_index_key(x)) for x in set(reasons)) == 1


def test_second_terminate_returns_first_record_unchanged(r: redis.Redis, redis_url: str) -> None:
    """A later terminate with another reason returns the first record, byte for byte."""
    from mother.functions import load_functions

    load_functions(r)
    first = _race_terminate(redis_url, "once-1", "timeout")
    before = r.execute_command("JSON.GET", keys.termination_key("once-1"))
    second = _race_terminate(redis_url, "once-1", "user_cancelled")
    assert first == (True, "timeout") and second == (False, "timeout")
    assert r.execute_command("JSON.GET", keys.termination_key("once-1")) == before
    result = orjson.loads(r.execute_command("JSON.GET", keys.result_key("once-1")))
    assert result["termination"]["reason"] == "timeout"


def test_poison_entry_is_dead_lettered(fresh: Pipeline) -> None:
    """A command whose handling keeps failing (its run record is corrupt) goes to mother:dead_letter;
    a person deciding on it hears at once that Mother failed applying it (not a timeout)."""
    from mother.errors import MotherError, WaitTimeout

    run_id = fresh.client.submit(example("three-phase"))
    fresh.wait(run_id)
    fresh.redis.execute_command("JSON.SET", keys.run_key(run_id), "$.status", '"bogus"')
    decision = fresh.client.send_command(
        "approve",
        {"run_id": run_id, "actor": "t", "reason": "x", "gate_id": "g-1", "digest": "0" * 64},
    )
    with pytest.raises(MotherError, match="Mother failed applying it") as failed:
        fresh.client.command_reply(decision, 60)
    assert not isinstance(failed.value, WaitTimeout)
    assert "tried again" in failed.value.message
    entry = fresh.client.send_command("cancel", {"run_id": run_id, "actor": "t", "reason": "x"})
    dead = wait_until(
        lambda: (
            (found := fresh.redis.xrange(keys.DEAD_LETTER_STREAM)) and len(found) == 2 and found
        ),
        timeout=30,
    )
    assert [d[1]["entry_id"] for d in dead] == [decision, entry]
    assert {d[1]["stream"] for d in dead} == {keys.COMMANDS_STREAM}
    assert fresh.redis.xpending(keys.COMMANDS_STREAM, "mother")["pending"] == 0
    healthy = fresh.client.submit(example("three-phase"))
    assert fresh.wait(healthy).termination.reason == "success"


def _intake_caught_up(p: Pipeline) -> bool:
    """Mother's group on the submission stream exists, with nothing pending or undelivered."""
    from mother.streams import group_backlog

    return group_backlog(p.redis, keys.SUBMISSIONS_STREAM, "mother") == (0, 0)


def test_a_submission_dead_lettered_before_it_was_taken_in_is_rejected_not_lost(
    fresh: Pipeline,
) -> None:
    """A submission whose every delivery died with its Mother (here: delivered to a consumer that
    vanished, retried past max_deliveries) goes to mother:dead_letter with a rejection record, so
    `status` and `wait` say why; before, wait() waited for it for good and status said "not taken in yet"."""
    from mother.errors import InvalidSpec

    spec = orjson.dumps(example("three-phase", run_id="run-ghost-1")).decode()
    # Mother has made its group
    wait_until(lambda: _intake_caught_up(fresh), timeout=20)
    # Mother's blocked read is served only after EXEC: it gets none
    pipe = fresh.redis.pipeline(transaction=True)
    pipe.xadd(keys.SUBMISSIONS_STREAM, {"spec": spec})
    pipe.xreadgroup("mother", "gone", {keys.SUBMISSIONS_STREAM: ">"}, count=1)
    entry, _ = pipe.execute()
    fresh.redis.execute_command(
        "XCLAIM",
        keys.SUBMISSIONS_STREAM,
        "mother",
        "gone",
        0,
        entry,
        "IDLE",
        60_000,
        "RETRYCOUNT",
        5,
    )
    dead = wait_until(lambda: fresh.redis.xrange(keys.DEAD_LETTER_STREAM), timeout=30)
    assert dead[0][1]["entry_id"] == entry and dead[0][1]["stream"] == keys.SUBMISSIONS_STREAM
    expected = (
        "run run-ghost-1 was rejected at intake: Mother failed to take this submission in on each of more "
        "than 2 deliveries; it is kept in mother:dead_letter"
    )
    for ask in (fresh.client.status, lambda run_id: fresh.client.wait(run_id, timeout=10)):
        with pytest.raises(InvalidSpec) as refused:
            ask("run-ghost-1")
        assert refused.value.message == expected
    record = orjson.loads(fresh.redis.execute_command("JSON.GET", keys.rejection_key(entry)))
    assert record["run_id"] == "run-ghost-1" and record["preview"] == spec[: len(record["preview"])]
    assert fresh.redis.xpending(keys.SUBMISSIONS_STREAM, "mother")["pending"] == 0
    assert not fresh.redis.exists(keys.run_key("run-ghost-1"))


def test_a_submission_whose_run_record_is_corrupt_stalls_nothing(fresh: Pipeline) -> None:
    """A submission naming a run whose record exists but is not a run record (edited by hand, or left by
    an incompatible version) fails its handling on every delivery. It must not take the submissions read
    with it, nor stop the reclaim pass at it: the run submitted right behind it (same read) ends success,
    the bad entry is dead-lettered after max_deliveries, and the record is left as it was. Before, the
    failure escaped while Mother checked whether the run had been made, so the entry behind it waited
    for a reclaim that stopped at the bad entry every time: never handled."""
    from tests.conftest import run_cli

    corrupt = '{"run_id":"run-corrupt-1","status":7}'
    fresh.redis.execute_command("JSON.SET", keys.run_key("run-corrupt-1"), "$", corrupt)
    wait_until(lambda: _intake_caught_up(fresh), timeout=20)
    # both in Mother's next read
    pipe = fresh.redis.pipeline(transaction=True)
    bad = pipe.xadd(
        keys.SUBMISSIONS_STREAM,
        {"spec": orjson.dumps(example("three-phase", run_id="run-corrupt-1"))},
    )
    pipe.xadd(
        keys.SUBMISSIONS_STREAM,
        {"spec": orjson.dumps(example("three-phase", run_id="run-behind-1"))},
    )
    bad = pipe.execute()[0]
    assert fresh.wait("run-behind-1", timeout=30).termination.reason == "success"
    dead = wait_until(lambda: fresh.redis.xrange(keys.DEAD_LETTER_STREAM), timeout=30)
    assert [(e[1]["entry_id"], e[1]["stream"]) for e in dead] == [(bad, keys.SUBMISSIONS_STREAM)]
    wait_until(lambda: _intake_caught_up(fresh), timeout=20)
    assert fresh.redis.execute_command("JSON.GET", keys.run_key("run-corrupt-1")) == corrupt
    result = run_cli("status", "run-corrupt-1", env={"MOTHER_REDIS_URL": fresh.url}, timeout=30)
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith(
        "error[record_invalid]: run run-corrupt-1's record (run:run-corrupt-1) is not "
        "a valid run record"
    ), result.stderr
    assert fresh.client.submit(example("three-phase", run_id="run-after-1")) == "run-after-1"
    assert fresh.wait("run-after-1", timeout=30).termination.reason == "success"


def test_a_run_record_edited_by_hand_does_not_stop_the_watchdog(fresh: Pipeline) -> None:
    """A run whose record is not a run record, with its deadline due and a lost attempt, and a heartbeat
    member that names no attempt (and a deadline that names no run): the watchdog's check of each fails
    (logged; the members that can name nothing are dropped), and
    every other run is still checked: the hanging run started after them ends timeout at its phase
    deadline. Before, the failure ended the whole tick, so no deadline behind it, lost worker or failed
    job was ever acted on (and the member, parsed before it was removed, stayed for good)."""
    fresh.redis.execute_command(
        "JSON.SET", keys.run_key("run-edited-1"), "$", '{"run_id":"run-edited-1","status":7}'
    )
    fresh.redis.zadd(keys.RUN_DEADLINES, {"run-edited-1": 0, "no run id!": 0})
    fresh.redis.zadd(keys.PHASE_DEADLINES, {"run-edited-1": 0})
    fresh.redis.zadd(
        keys.HEARTBEATS, {keys.heartbeat_member("run-edited-1", 0, 1): 0, "not a member at-all": 0}
    )
    run_id = fresh.client.submit(example("timeout"))
    envelope = fresh.wait(run_id, timeout=30)
    assert (
        envelope.termination.reason == "timeout"
        and "exceeded its timeout of 3s" in envelope.termination.details
    )
    # left for its owner to fix
    assert fresh.redis.zscore(keys.RUN_DEADLINES, "run-edited-1") == 0
    # dropped: it could name no attempt
    assert fresh.redis.zscore(keys.HEARTBEATS, "not a member at-all") is None
    # and so is a deadline of no run
    assert fresh.redis.zscore(keys.RUN_DEADLINES, "no run id!") is None
    log = "".join(
        path.read_text() for path in (fresh.server.dir.parent / "logs").glob("mother-*.log")
    )
    assert (
        "watchdog_check_failed" in log
        and "run-edited-1's record (run:run-edited-1) is not a valid run record" in log
    )
    assert "heartbeat member 'not a member at-all' is not '<run_id> <phase_index> <attempt>'" in log


def test_waiting_for_a_run_that_was_never_submitted_ends_at_once(fresh: Pipeline) -> None:
    """With Mother keeping up (no submission pending or undelivered), an unknown run id is reported as
    such by `status` and ends `wait` at once, where wait used to poll until killed; a run submitted
    while Mother is paused is still waited for, and its wait ends with the run."""
    from tests.conftest import run_cli

    # Mother has made its group and read it
    wait_until(lambda: _intake_caught_up(fresh), timeout=20)
    line = (
        "error[not_found]: no run 'run-never-1': Mother has taken in every submission and none is this run "
        "(never submitted, or its records are gone); list runs with `mother runs`"
    )
    for args in (("status", "run-never-1"), ("wait", "run-never-1")):
        result = run_cli(*args, env={"MOTHER_REDIS_URL": fresh.url}, timeout=30)
        assert (result.returncode, result.stderr.strip()) == (2, line), args
    from mother.errors import NoSuchRun

    with pytest.raises(NoSuchRun):
        fresh.client.wait("run-never-1")
    mothers = [proc.pid for name, proc in fresh.stack.procs.items() if name.startswith("mother-")]
    for pid in mothers:
        os.kill(pid, signal.SIGSTOP)
    try:
        run_id = fresh.client.submit(example("three-phase"))
        waited: dict[str, ResultEnvelope] = {}
        waiter = threading.Thread(
            target=lambda: waited.update(envelope=fresh.client.wait(run_id, timeout=60))
        )
        waiter.start()
        # the waiter sees the run not taken in, with a submission undelivered
        time.sleep(1.0)
        assert waiter.is_alive()
    finally:
        for pid in mothers:
            os.kill(pid, signal.SIGCONT)
    waiter.join(timeout=60)
    assert waited["envelope"].termination.reason == "success"


def test_redis_restart_mid_run_is_outlived(tmp_path: Path) -> None:
    """Redis stops while a phase runs and comes back on the same port and data: Mother, the worker and a
    client waiting on the run all outlive it; the run ends success with exactly one record. A principal
    made while the system ran, on a server with no ACL file (its user is lost with the restart), is
    back within seconds: Mother makes its user again from its record, and its next submission is
    taken in and succeeds."""
    from mother.cli.identities import principal_url
    from mother.identities import principals
    from mother.server import EmbeddedRedis

    p = start_pipeline(tmp_path, mothers=1, workers=1)
    try:
        _made, password = principals.add(p.redis, "late-svc", ["submit"], ["late"], NOW)
        late_url = principal_url(p.server.url, "late-svc", password)
        run_id = p.client.submit(
            example(
                "three-phase",
                scripts={
                    "planner": [{"text": "plan", "delay_seconds": 1.5}],
                    "coder": [{"text": "code"}],
                    "critic": [{"text": "ok"}],
                },
            )
        )
        # the first phase is running: a worker beats for it
        beat = keys.attempt_heartbeat_key(run_id, 0, 1)
        wait_until(lambda: beating(p.redis.get(beat)), timeout=20)
        notices: list[str] = []
        waited: dict[str, ResultEnvelope] = {}
        waiter = threading.Thread(
            target=lambda: waited.update(
                envelope=p.client.wait(run_id, timeout=90, on_notice=notices.append)
            )
        )
        waiter.start()
        port, data_dir = p.server.port, p.server.dir
        p.server.stop()
        # the phase's reply comes while Redis is away
        time.sleep(3)
        alive_during = p.stack.alive()
        p.server = EmbeddedRedis(port=port, dir=data_dir, appendfsync="no").start()
        waiter.join(timeout=90)
        assert alive_during == p.stack.alive() == {"mother-0": True, "worker-0": True}
        assert len(notices) == 1 and notices[0].startswith("Redis cannot serve (")
        assert waited["envelope"].termination.reason == "success"
        assert termination_keys(p, run_id) == [keys.termination_key(run_id)]
        completed = [
            h.phase for h in p.client.status(run_id).history if h.event == "phase_completed"
        ]
        assert completed == ["plan", "execute", "review"]
        late, late_run, _took = first_accepted(late_url, quick_spec("late"), timeout=30)
        assert late.wait(late_run, 60).termination.reason == "success"
    finally:
        stop_pipeline(p)


# at maxmemory, noeviction
# a replica after a failover: READONLY
@pytest.mark.parametrize(
    ("refuse", "restore"),
    [
        (("CONFIG", "SET", "maxmemory", "1"), ("CONFIG", "SET", "maxmemory", "0")),
        (("REPLICAOF", "127.0.0.1", "1"), ("REPLICAOF", "NO", "ONE")),
    ],
    ids=["maxmemory", "readonly"],
)
def test_redis_refusing_writes_is_outlived(
    tmp_path: Path, refuse: tuple[str, ...], restore: tuple[str, ...]
) -> None:
    """While Redis refuses every write for a few seconds, Mother and the worker stay up (they used to
    exit on the first refused write); once it takes writes again, a run goes through as before."""
    p = start_pipeline(tmp_path, mothers=1, workers=1)
    try:
        # all up
        assert p.wait(p.client.submit(example("three-phase"))).termination.reason == "success"
        p.redis.execute_command(*refuse)
        # several lease renewals, heartbeats and watchdog ticks are refused
        time.sleep(3)
        alive_during = p.stack.alive()
        p.redis.execute_command(*restore)
        assert alive_during == p.stack.alive() == {"mother-0": True, "worker-0": True}
        assert (
            p.wait(p.client.submit(example("three-phase")), timeout=60).termination.reason
            == "success"
        )
        log = (tmp_path / "logs" / "mother-0.log").read_text()
        assert '"event":"redis_unavailable"' in log and '"event":"redis_back"' in log
    finally:
        stop_pipeline(p)


def test_mother_and_a_worker_started_before_their_redis_wait_for_it(tmp_path: Path) -> None:
    """Started before their Redis is up (compose, boot order), Mother and a worker wait for it, saying
    so in their logs, and serve a run once it is up. They used to exit at once, and stayed down. The
    stack enrolls the worker's host once the server answers, with the password it chose at the start:
    the worker waits for its user meanwhile."""
    from mother.server import EmbeddedRedis, free_port
    from mother.stack import LocalStack
    from tests.conftest import FAST_ENV

    port = free_port()
    workspace = tmp_path / "workspaces"
    stack = LocalStack(
        f"redis://127.0.0.1:{port}/0",
        workers=1,
        mothers=1,
        log_dir=tmp_path / "logs",
        env={
            **FAST_ENV,
            "MOTHER_WORKER__WORKSPACE_ROOT": str(workspace),
            "MOTHER_REDIS_WAIT_SECONDS": "60",
        },
    ).start()
    server = None
    try:
        logs = {name: tmp_path / "logs" / f"{name}.log" for name in ("mother-0", "worker-0")}
        wait_until(
            lambda: all(
                path.is_file() and '"event":"redis_unavailable"' in path.read_text()
                for path in logs.values()
            ),
            timeout=30,
        )
        assert stack.alive() == {"mother-0": True, "worker-0": True}
        server = EmbeddedRedis(port=port, dir=tmp_path / "redis", appendfsync="no").start()
        p = Pipeline(server, stack, workspace)
        assert (
            p.wait(p.client.submit(example("three-phase")), timeout=60).termination.reason
            == "success"
        )
        urls = {
            "mother-0": f"redis://127.0.0.1:{port}/0",
            "worker-0": f"redis://host%3Alocal-0:***@127.0.0.1:{port}/0",
        }
        for name, path in logs.items():
            waited = [
                orjson.loads(line)
                for line in path.read_text().splitlines()
                if '"during":"startup"' in line
            ]
            assert (
                next(w["event"] for w in waited) == "redis_unavailable"
                and waited[-1]["event"] == "redis_back"
            )
            assert waited[0]["url"] == urls[name] and waited[0]["waiting_up_to_seconds"] == 60
    finally:
        stack.stop()
        if server is not None:
            server.stop()


def test_a_runs_end_sets_the_concurrent_runs_gauge_at_once(r: redis.Redis, redis_url: str) -> None:
    """The termination itself sets budget:global.concurrent_runs from the live run deadlines (it was set only
    at admission and every 5th watchdog tick, so `mother budget show --global` lagged), and takes a run that
    waited for a slot out of the admission queue."""
    from mother.functions import load_functions

    load_functions(r)
    r.execute_command(
        "JSON.SET",
        keys.GLOBAL_BUDGET,
        "$",
        orjson.dumps(
            {"concurrent_runs": 7, "queue_depth": 0, "redis_memory_mb": 0, "docling_jobs": 0}
        ),
    )
    r.zadd(keys.RUN_DEADLINES, {"gauge-1": 1e15, "gauge-2": 1e15})
    r.zadd(keys.ADMISSION_WAITING, {"gauge-1": 1, "other": 2})
    assert _race_terminate(redis_url, "gauge-1", "user_cancelled") == (True, "user_cancelled")
    assert orjson.loads(r.execute_command("JSON.GET", keys.GLOBAL_BUDGET, "$.concurrent_runs")) == [
        1
    ]
    assert r.zrange(keys.ADMISSION_WAITING, 0, -1) == ["other"]


def test_a_spawn_asked_while_mother_is_stopped_is_served_when_it_returns(tmp_path: Path) -> None:
    """Issue 53 (and 62): no host may append to mother:spawns itself (its MAXLEN would trim others'
    requests): a spawn_run request is an ask on the parent's host's own stream. Asked while Mother is
    stopped, it waits there, unread, and the parent waits for its reply; when Mother serves again it
    charges and queues the child once: the child runs, and the parent succeeds."""
    p = start_pipeline(tmp_path, mothers=1, workers=2)
    try:
        spec = example(
            "three-phase",
            limit_overrides={"depth": 2, "spend": "1.00"},
            scripts={
                "planner": [
                    # time to stop Mother before the request is made
                    {**_spawn("helper"), "delay_seconds": 1},
                    {"text": "parent planned"},
                ],
                "helper": [{"text": "child done"}],
                "coder": [{"text": "coded"}],
                "critic": [{"text": "ok"}],
            },
        )
        run_id = p.client.submit(spec)
        beat = keys.attempt_heartbeat_key(run_id, 0, 1)
        wait_until(lambda: beating(p.redis.get(beat)), timeout=30)
        host = str(p.redis.get(beat)).split(":")[0]
        mothers = [proc.pid for name, proc in p.stack.procs.items() if name.startswith("mother-")]
        for pid in mothers:
            os.kill(pid, signal.SIGSTOP)
        try:
            # the attempt's next ask (the tool call's charge, or the spawn) waits, unread
            wait_until(lambda: _asked(p, host, run_id), timeout=20)
            assert p.redis.xlen(keys.SPAWNS_STREAM) == 0
            _trim_as_another_host(p, keys.SPAWNS_STREAM)
        finally:
            for pid in mothers:
                os.kill(pid, signal.SIGCONT)
        done = p.wait(run_id, 90)
        assert done.termination.reason == "success"
        spawned = [
            e
            for _id, e in p.redis.xrange(keys.run_activity_key(run_id))
            if e["type"] == "run_spawned"
        ]
        assert len(spawned) == 1
        child = orjson.loads(spawned[0]["data"])["child_run_id"]
        assert p.wait(child, 30).termination.reason == "success"
    finally:
        stop_pipeline(p)


def _dispatched_to(p: Pipeline, run_id: str) -> list[str | None]:
    """The host each of the run's dispatches was queued for (its phase_dispatched entries, oldest first)."""
    from mother.activity import recent

    entries = [
        e
        for e in recent(p.redis, 200, run_id=run_id)
        if e.type in ("phase_dispatched", "phase_moved")
    ]
    return [e.data.get("host") for e in entries]


def test_jobs_go_from_a_busy_host_and_a_silent_one_to_a_live_one_and_a_stopped_host_is_forgotten(
    tmp_path: Path,
) -> None:
    """Mother queues each phase job for one registered host (issue 53). Two hosts of one worker each:
    - both busy, the next two runs are queued one for each; the host whose phase ends first takes the
      one queued for it, and Mother moves the other there (a job that waited on a busy host while
      another had a worker free, as a parent's child queued behind its parent's own phase): both end
      while the long phase still runs, where the second used to wait for it;
    - a host whose processes stop answering (SIGSTOP: its line lapses after a heartbeat timeout) has the
      jobs waiting on its queue moved to the live host: every run succeeds on its first attempt, some
      after a first dispatch to the silent host;
    - a pool stopped with SIGTERM says so (its line: stopped), and Mother queues nothing for its host
      from then on; the host stays enrolled (its ACL user and record are the administrator's)."""
    p = start_pipeline(tmp_path, workers=2)
    try:
        long = p.client.submit(
            example("cancelled", scripts={"crawler": [{"text": "long", "delay_seconds": 25}]})
        )
        short = p.client.submit(
            example("cancelled", scripts={"crawler": [{"text": "short", "delay_seconds": 2}]})
        )
        for run_id in (long, short):
            beat = keys.attempt_heartbeat_key(run_id, 0, 1)
            wait_until(lambda beat=beat: beating(p.redis.get(beat)), timeout=20)
        queued = [
            p.client.submit(example("cancelled", scripts={"crawler": [{"text": f"q{i}"}]}))
            for i in range(2)
        ]
        for run_id in queued:
            assert p.wait(run_id, 20).termination.reason == "success"
        assert p.client.status(long).status == "running"
        # one queued for the long phase's host was moved to the other (Mother sends each to the host
        # with the least load: the two hosts in turn, unless a host's line lagged its worker)
        busy = _dispatched_to(p, long)[-1]
        for hosts in [_dispatched_to(p, run_id) for run_id in queued]:
            assert hosts[-1] != busy and (hosts[0] != busy or len(hosts) == 2), (busy, hosts)
        p.client.cancel(long, actor="test", reason="done")
        assert p.wait(long, 30).termination.reason == "user_cancelled"

        stopped, live = host_of_worker(p, "worker-0"), host_of_worker(p, "worker-1")
        pool = p.stack.procs["worker-0"]
        os.killpg(pool.pid, signal.SIGSTOP)
        try:
            runs = [
                p.client.submit(example("cancelled", scripts={"crawler": [{"text": f"r{i}"}]}))
                for i in range(6)
            ]
            records = [p.wait(run_id, 30) for run_id in runs]
        finally:
            os.killpg(pool.pid, signal.SIGCONT)
        assert [r.termination.reason for r in records] == ["success"] * 6
        assert [p.client.status(run_id).attempt for run_id in runs] == [1] * 6
        firsts = [_dispatched_to(p, run_id) for run_id in runs]
        # the silent host had its share; each of those was moved to the live one
        moved = [hosts for hosts in firsts if hosts[0] == stopped]
        assert moved and all(hosts[-1] == live for hosts in moved), firsts
        # a pool that stops says so: forgotten at once
        os.killpg(pool.pid, signal.SIGTERM)
        # (a worker of a host Mother forgot while it was held up stops cold, after 20 s)
        pool.wait(60)
        wait_until(lambda: p.redis.get(keys.host_alive_key(stopped)) == "stopped", timeout=10)
        assert keys.host_user(stopped) in p.redis.execute_command("ACL", "USERS")
        again = p.client.submit(example("cancelled", scripts={"crawler": [{"text": "again"}]}))
        assert p.wait(again, 30).termination.reason == "success"
        # (Mother's table of hosts is half a second old at most: a dispatch to the stopped host within it
        # is moved to the live one)
        assert _dispatched_to(p, again)[-1] == live
    finally:
        stop_pipeline(p)


def test_a_job_left_on_a_forgotten_hosts_queue_goes_to_a_live_host(tmp_path: Path) -> None:
    """A dispatch that chose a host just before an administrator removed it (`mother hosts remove`; Mother's
    table is read every half second) leaves the job on a queue nobody looks at: the host is no longer
    stopped nor missing, only gone. Mother moves jobs on the queues of hosts no longer enrolled to a live
    one; before, such a run waited out its phase's timeout."""
    from mother.identities import hosts

    p = start_pipeline(tmp_path, workers=1)
    try:
        old = host_of_worker(p, "worker-0")
        # its one worker busy: the next job waits on its queue
        long = p.client.submit(
            example("cancelled", scripts={"crawler": [{"text": "long", "delay_seconds": 30}]})
        )
        beat = keys.attempt_heartbeat_key(long, 0, 1)
        wait_until(lambda: beating(p.redis.get(beat)), timeout=20)
        run_id = p.client.submit(example("cancelled", scripts={"crawler": [{"text": "moved"}]}))
        job = keys.phase_job_id(old, run_id, 0, 1)
        queue = f"rq:queue:{keys.host_queue(old, 'agents')}"
        wait_until(lambda: job in p.redis.lrange(queue, 0, -1), timeout=20)
        # removed between the dispatch and now (the long run it held cancelled: no retry of it competes
        # for the new host's one worker)
        hosts.remove(p.redis, old)
        p.client.cancel(long, actor="test", reason="done")
        p.stack.add_worker()
        assert p.wait(run_id, 60).termination.reason == "success"
        assert p.client.status(run_id).attempt == 1
        assert _dispatched_to(p, run_id)[0] == old and _dispatched_to(p, run_id)[-1] != old
    finally:
        stop_pipeline(p)


def test_a_stopping_worker_whose_host_user_is_gone_stops(tmp_path: Path) -> None:
    """A host an administrator removed has no ACL user any more, and no one makes it again: its pool
    asked to stop (SIGTERM) during a job stops, instead of waiting for its user (it waited until the
    pool's own five-minute limit)."""
    from mother.identities import hosts

    p = start_pipeline(tmp_path, workers=1)
    try:
        host = host_of_worker(p, "worker-0")
        pool = p.stack.procs["worker-0"]
        run_id = p.client.submit(
            example("cancelled", scripts={"crawler": [{"text": "x", "delay_seconds": 3}]})
        )
        beat = keys.attempt_heartbeat_key(run_id, 0, 1)
        wait_until(lambda: beating(p.redis.get(beat)), timeout=20)
        # removed (its connections closed with its user)
        hosts.remove(p.redis, host)
        os.killpg(pool.pid, signal.SIGTERM)
        pool.wait(30)
    finally:
        stop_pipeline(p)
