"""A phase's move and its dispatch in one server call, fenced by the attempt: Mother's intake and
lifecycle called in this process against the real server (no Mother process, no workers)."""

from __future__ import annotations

import orjson
import pytest
import redis
from rq.job import Job

from mother import calls, keys
from mother.client import EVENT_PHASE_RESULT, MotherClient
from mother.config import load_settings
from mother.functions import follow_ups
from mother.intake import handle_submission
from mother.lifecycle import Move, _transition_args
from mother.review import on_phase_result
from mother.runtime import Runtime
from mother.streams import Delivery, ensure_group
from schemas import PhaseResult, ms_from_iso
from tests.conftest import live_host
from tests.test_pipeline import example

GROUP = "mother"
# a live worker host Mother addresses the jobs to (no process behind it: these tests take no job)
HOST = "t-host"
QUEUE = f"rq:queue:{HOST}.agents"


def _started(r: redis.Redis, redis_url: str, **settings: object) -> tuple[Runtime, str]:
    """A three-phase run taken in and started by Mother's own intake: phase 0, attempt 1 dispatched."""
    from workers.providers import make_provider

    rt = Runtime.create(load_settings(redis_url=redis_url, **settings))
    rt.make_provider = make_provider
    live_host(r)
    run_id = MotherClient(settings=rt.settings).submit(example("three-phase"))
    [(entry_id, fields)] = r.xrange(keys.SUBMISSIONS_STREAM)
    assert handle_submission(rt, entry_id, fields) is not None
    ensure_group(r, keys.EVENTS_STREAM, GROUP)
    return rt, run_id


def _delivered(r: redis.Redis, rt: Runtime, result: PhaseResult) -> Delivery:
    """Append ``result`` to the events stream and read it as Mother's group does: the entry being handled."""
    r.xadd(keys.EVENTS_STREAM, {"type": EVENT_PHASE_RESULT, "payload": result.to_json()})
    [(_, [(entry_id, _)])] = r.xreadgroup(GROUP, "test", {keys.EVENTS_STREAM: ">"}, count=1)
    return Delivery(keys.EVENTS_STREAM, GROUP, entry_id)


def _token(r: redis.Redis, result: PhaseResult) -> str | None:
    """The host Mother queued the result's attempt on (only that host's result moves the run)."""
    raw = r.execute_command("JSON.GET", keys.run_key(result.run_id), "$.host")
    found = orjson.loads(raw) if raw else []
    return found[0] if found else None


def _calls(r: redis.Redis) -> dict[str, int]:
    return {name: int(stats["calls"]) for name, stats in r.info("commandstats").items()}


def test_a_result_moves_the_run_and_dispatches_the_next_phase_in_one_call_and_a_duplicate_writes_nothing(
    r: redis.Redis, redis_url: str
) -> None:
    """The accepted result, the next attempt's RQ job, its context, the activity entries and the entry's XACK
    are made by the one mh_transition call (no MULTI/EXEC of their own, no read of the run); a re-delivered copy of the same
    result finds the attempt no longer current and writes nothing at all, its entry left to the caller to ack."""
    rt, run_id = _started(r, redis_url)
    result = PhaseResult(
        run_id=run_id,
        phase="plan",
        phase_index=0,
        attempt=1,
        status="completed",
        output="the plan",
        confidence=0.9,
        finished_at="2026-11-22T00:00:00.000Z",
    )
    delivery = _delivered(r, rt, result)
    job_key = Job.key_for(keys.phase_job_id(HOST, run_id, 1, 1))
    activity_before, queued_before = r.xlen(keys.ACTIVITY_STREAM), r.llen(QUEUE)
    host = _token(r, result)
    # the hosts' table as Mother last read it (it reads them every half second)
    rt.hosts.refresh()
    before = _calls(r)
    on_phase_result(rt, result, host, delivery=delivery)
    after = _calls(r)
    # the dispatch rode with the transition: one server call, no ACL command
    assert after.get("cmdstat_exec", 0) == before.get("cmdstat_exec", 0)
    assert after["cmdstat_fcall"] - before["cmdstat_fcall"] == 1
    assert not any(name.startswith("cmdstat_acl") for name in set(after) - set(before))
    # the fence's, in mh_transition: Mother reads nothing itself
    assert after["cmdstat_json.get"] - before["cmdstat_json.get"] == 1
    run = rt.load_run(run_id)
    assert (run.status, run.phase_index, run.attempt, run.phase) == ("running", 1, 1, "execute")
    assert [p.output for p in run.results] == ["the plan"]
    assert r.hget(job_key, "status") == "queued" and r.llen(QUEUE) == queued_before + 1
    assert "the plan" in r.execute_command("JSON.GET", keys.context_key(run_id, 1))
    types = [fields["type"] for _, fields in r.xrange(keys.ACTIVITY_STREAM)][activity_before:]
    assert types == ["phase_completed", "phase_dispatched"]
    assert delivery.acked and r.xpending(keys.EVENTS_STREAM, GROUP)["pending"] == 0

    duplicate = _delivered(r, rt, result)
    # so a job written again would show
    r.delete(job_key)
    state_before, activity_before = (
        r.execute_command("JSON.GET", keys.run_key(run_id)),
        r.xlen(keys.ACTIVITY_STREAM),
    )
    on_phase_result(rt, result, _token(r, result), delivery=duplicate)
    assert r.execute_command("JSON.GET", keys.run_key(run_id)) == state_before
    assert not r.exists(job_key) and r.llen(QUEUE) == queued_before + 1
    assert r.xlen(keys.ACTIVITY_STREAM) == activity_before
    # the duplicate moved nothing, so nothing acknowledged it: its caller does
    assert not duplicate.acked and duplicate.entry_id != delivery.entry_id
    assert r.xpending(keys.EVENTS_STREAM, GROUP)["pending"] == 1


def test_with_an_llm_summarizer_the_move_comes_first_and_the_dispatch_after_it(
    r: redis.Redis, redis_url: str
) -> None:
    """Composing may call a model, so it waits for the fence: the move is one call, the dispatch its own
    transaction after it; a duplicate is refused by the move and composes and dispatches nothing."""
    rt, run_id = _started(
        r, redis_url, context={"summarizer": "llm_generated", "summarizer_model": "scripted"}
    )
    result = PhaseResult(
        run_id=run_id,
        phase="plan",
        phase_index=0,
        attempt=1,
        status="completed",
        output="the plan",
        finished_at="2026-11-22T00:00:00.000Z",
    )
    delivery = _delivered(r, rt, result)
    host = _token(r, result)
    rt.hosts.refresh()
    before = _calls(r)
    on_phase_result(rt, result, host, delivery=delivery)
    after = _calls(r)
    # the move (mh_transition) and the dispatch's MULTI
    assert (
        after["cmdstat_fcall"] - before["cmdstat_fcall"],
        after["cmdstat_exec"] - before["cmdstat_exec"],
    ) == (1, 1)
    run = rt.load_run(run_id)
    assert (run.phase_index, run.attempt) == (1, 1) and r.exists(
        Job.key_for(keys.phase_job_id(HOST, run_id, 1, 1))
    )
    assert delivery.acked and r.xpending(keys.EVENTS_STREAM, GROUP)["pending"] == 0

    delivery = _delivered(r, rt, result)
    queued, activity = r.llen(QUEUE), r.xlen(keys.ACTIVITY_STREAM)
    on_phase_result(rt, result, _token(r, result), delivery=delivery)
    assert (r.llen(QUEUE), r.xlen(keys.ACTIVITY_STREAM)) == (queued, activity)
    assert not delivery.acked


def test_a_follow_up_whose_keys_are_not_known_is_refused(r: redis.Redis) -> None:
    """Only commands whose one key comes first can ride with a server function (their key goes in KEYS)."""
    pipe = r.pipeline()
    pipe.hset("h", mapping={"a": 1})
    assert follow_ups(pipe) == (["h"], [3, "HSET", "a", 1])
    pipe.delete("a", "b")
    with pytest.raises(
        RuntimeError,
        match=r"^DEL cannot be a follow-up write: only commands whose one key comes first",
    ):
        follow_ups(pipe)


@pytest.mark.parametrize(
    ("more_keys", "words", "error"),
    [
        (["h"], [5, "HSET", "a"], "malformed follow-up command at ARGV 15"),
        (["h"], [], r"follow-up keys \(1\) do not match the commands \(0\)"),
        ([], [3, "HSET", "a", "1"], "malformed follow-up command at ARGV 15"),
    ],
)
def test_malformed_follow_ups_are_refused_before_anything_is_written(
    r: redis.Redis, redis_url: str, more_keys: list, words: list, error: str
) -> None:
    """A hand-made mh_transition call whose follow-ups do not match their keys is an error and moves nothing."""
    rt, run_id = _started(r, redis_url)
    before = r.execute_command("JSON.GET", keys.run_key(run_id))
    args = _transition_args(
        rt, Move(run_id, rt.spec(run_id), frm=(0, 1), to=(1, 1), event="phase_completed")
    )
    with pytest.raises(redis.ResponseError, match=error):
        calls.transition(r, **args, follow_ups=(more_keys, words))
    assert r.execute_command("JSON.GET", keys.run_key(run_id)) == before and not r.exists("h")


def test_a_failed_attempt_is_retried_with_what_it_still_holds_given_back(
    r: redis.Redis, redis_url: str
) -> None:
    """A failed attempt whose call's settle never reached the server (its connection failed mid-phase) has no
    settle to come: before the retry is dispatched, Mother gives back what the run holds, with why, and fences
    the attempt: its horse (if it still runs) can reserve nothing the give-back would miss."""
    from mother.budget import Guard
    from mother.errors import PhaseStale
    from mother.records.budgets import held_reservations

    rt, run_id = _started(r, redis_url)
    guard = Guard(r, rt.settings, run_id, "alice", rt.clock.today, attempt=(0, 1))
    # the attempt's call, never settled
    op = guard.reserve_call(rt.settings.models["scripted"], 200)
    assert list(held_reservations(r, run_id)) == [op]
    result = PhaseResult(
        run_id=run_id,
        phase="plan",
        phase_index=0,
        attempt=1,
        status="failed",
        error="ConnectionError: Connection reset by peer",
        finished_at="2026-11-22T00:00:00.000Z",
    )
    delivery = _delivered(r, rt, result)
    on_phase_result(rt, result, _token(r, result), delivery=delivery)
    run = rt.load_run(run_id)
    assert (run.status, run.phase_index, run.attempt) == ("running", 0, 2)
    assert held_reservations(r, run_id) == {}
    budget = orjson.loads(r.execute_command("JSON.GET", keys.run_budget_key(run_id)))
    assert budget["reserved"]["total_tokens"] == 0 and set(budget["reservations"][op]) == {
        "at",
        "attempt",
        "released",
    }
    [released] = [
        f for _, f in r.xrange(keys.ACTIVITY_STREAM) if f["type"] == "reservations_released"
    ]
    assert (
        orjson.loads(released["data"])["why"]
        == "phase plan attempt 1 failed: ConnectionError: Connection reset by peer"
    )
    # the failed attempt is fenced with the give-back: its horse, if it still runs, reserves nothing more; the retry does
    assert orjson.loads(r.execute_command("JSON.GET", keys.run_limits_key(run_id), "$.fence")) == [
        "0:1"
    ]
    with pytest.raises(PhaseStale):
        guard.reserve_call(rt.settings.models["scripted"], 200)
    retry = Guard(r, rt.settings, run_id, "alice", rt.clock.today, attempt=(0, 2)).reserve_call(
        rt.settings.models["scripted"], 200
    )
    assert list(held_reservations(r, run_id)) == [retry]


def test_an_end_a_mother_died_before_applying_is_applied_by_the_watchdog_once(
    r: redis.Redis, redis_url: str
) -> None:
    """A Mother that wrote a run's record and died before its end's writes leaves the run in mother:ending,
    holding what it held: past finish_end_after_seconds the watchdog applies the end (the reservation given
    back, the queued job dropped, ``terminated`` logged as late); applied again (the dead Mother was only
    stalled, and wakes), it changes nothing."""
    import time

    from mother.budget import Guard
    from mother.cli.inspect import inspect_run
    from mother.lifecycle import finish_end, queue_end_reads
    from mother.records.budgets import held_reservations
    from mother.termination import build_record, terminate
    from mother.watchdog import Watchdog
    from schemas import ResultEnvelope

    rt, run_id = _started(r, redis_url, service={"finish_end_after_seconds": 0.2})
    guard = Guard(r, rt.settings, run_id, "alice", rt.clock.today)
    # a call in flight when the run ended
    op = guard.reserve_call(rt.settings.models["scripted"], 200)
    job_id = keys.phase_job_id(HOST, run_id, 0, 1)
    assert job_id in r.lrange(QUEUE, 0, -1)
    record = build_record(
        run_id=run_id,
        reason="user_cancelled",
        phase="plan",
        details="Cancelled by alice: test",
        at_ms=rt.clock.now_ms(),
        at_iso=rt.clock.now_iso(),
    )
    assert terminate(
        r, record, ResultEnvelope(run_id=run_id, user_id="alice", created_at=record.timestamp)
    )[0]
    # what the dying Mother left: the record, the run in mother:ending, the reservation held, nothing logged
    assert r.zscore(keys.RUNS_ENDING, run_id) is not None and list(
        held_reservations(r, run_id)
    ) == [op]

    def terminated_entries() -> list[dict]:
        return [
            f
            for _, f in r.xrange(keys.ACTIVITY_STREAM)
            if f["type"] == "terminated" and f.get("run_id") == run_id
        ]

    client = MotherClient(settings=rt.settings)
    # server time of the record's write; the record's own time is this process's estimate of the
    # server's clock (mother.clock), which may run a few ms ahead of it
    pending = ms_from_iso(inspect_run(client, run_id)["end_pending_since"])
    assert pending >= ms_from_iso(record.timestamp) - 50
    watchdog = Watchdog(rt)
    # too soon: the Mother that wrote it may still be applying it
    watchdog.finish_ends()
    assert r.zscore(keys.RUNS_ENDING, run_id) is not None and terminated_entries() == []
    time.sleep(0.3)
    user_key = keys.user_daily_budget_key("alice", rt.clock.today())
    watchdog.finish_ends()
    assert r.zscore(keys.RUNS_ENDING, run_id) is None and held_reservations(r, run_id) == {}
    assert orjson.loads(r.execute_command("JSON.GET", user_key, "$.reserved.total_tokens")) == [0]
    [entry] = terminated_entries()
    assert orjson.loads(entry["data"]) == {
        "reason": "user_cancelled",
        "details": "Cancelled by alice: test",
        "suggested_action": "user_input",
        "late": True,
    }
    [released] = [
        f for _, f in r.xrange(keys.ACTIVITY_STREAM) if f["type"] == "reservations_released"
    ]
    assert orjson.loads(released["data"])["why"] == "the run ended user_cancelled"
    assert (
        job_id not in r.lrange(QUEUE, 0, -1)
        and inspect_run(client, run_id)["end_pending_since"] is None
    )

    before = {k: r.execute_command("JSON.GET", k) for k in (keys.run_budget_key(run_id), user_key)}
    pipe = r.pipeline(transaction=False)
    queue_end_reads(pipe, run_id)
    # the stalled Mother's, applied again
    assert not finish_end(rt, rt.load_run(run_id), record, *pipe.execute())
    assert {k: r.execute_command("JSON.GET", k) for k in before} == before and len(
        terminated_entries()
    ) == 1


def test_a_success_applied_late_logs_its_last_phase_completed_too(
    r: redis.Redis, redis_url: str
) -> None:
    """A Mother that died between a successful run's record and the rest of its end had not logged the last
    phase's ``phase_completed`` either (it goes with ``terminated``): the watchdog's late end logs it, from
    the run's results, before ``terminated``."""
    import time

    from mother.lifecycle import make
    from mother.termination import build_record, terminate
    from mother.watchdog import Watchdog
    from schemas import ResultEnvelope

    rt, run_id = _started(r, redis_url, service={"finish_end_after_seconds": 0.2})
    for index, name in enumerate(("plan", "execute")):
        result = PhaseResult(
            run_id=run_id,
            phase=name,
            phase_index=index,
            attempt=1,
            status="completed",
            output=f"{name} done",
            confidence=0.9,
            artifacts=[],
            finished_at=rt.clock.now_iso(),
        )
        delivery = _delivered(r, rt, result)
        on_phase_result(rt, result, _token(r, result), delivery=delivery)
    last = PhaseResult(
        run_id=run_id,
        phase="review",
        phase_index=2,
        attempt=1,
        status="completed",
        output="approved",
        confidence=0.75,
        artifacts=["art-review"],
        finished_at=rt.clock.now_iso(),
    )
    # what the dying Mother did of the success: the result accepted, the record written; nothing logged
    assert (
        make(
            rt,
            Move(
                run_id,
                rt.spec(run_id),
                frm=(2, 1),
                to=(2, 1),
                event="phase_completed",
                detail="confidence 0.75",
                result=last,
                then="stay",
            ),
        ).state
        is not None
    )
    record = build_record(
        run_id=run_id,
        reason="success",
        phase="review",
        details="All 3 phases completed",
        at_ms=rt.clock.now_ms(),
        at_iso=rt.clock.now_iso(),
    )
    assert terminate(
        r, record, ResultEnvelope(run_id=run_id, user_id="alice", created_at=record.timestamp)
    )[0]

    def logged() -> list[tuple[str, str, dict]]:
        return [
            (f["type"], f.get("phase"), orjson.loads(f.get("data", "{}")))
            for _, f in r.xrange(keys.ACTIVITY_STREAM)
            if f.get("run_id") == run_id and f["type"] in ("phase_completed", "terminated")
        ]

    assert [(t, p) for t, p, _ in logged()] == [
        ("phase_completed", "plan"),
        ("phase_completed", "execute"),
    ]
    time.sleep(0.3)
    Watchdog(rt).finish_ends()
    assert logged()[2:] == [
        (
            "phase_completed",
            "review",
            {
                "attempt": 1,
                "confidence": 0.75,
                "artifacts": ["art-review"],
                # when a worker took it, which one, what it used (the run's timeline)
                "started_at": None,
                "worker": None,
                "usage": last.usage.to_dict(),
            },
        ),
        (
            "terminated",
            "review",
            {
                "reason": "success",
                "details": "All 3 phases completed",
                "suggested_action": "abandon",
                "late": True,
            },
        ),
    ]


def test_a_redelivered_submission_announces_and_counts_its_run_once(
    r: redis.Redis, redis_url: str
) -> None:
    """The run's record, its run_id claim and its run_submitted entry are made in one server call (a Mother
    killed between the record and its announcement left a run no activity entry named), and the admission is
    decided once: handling the same entry again (a Mother that died before acking it) announces nothing,
    counts nothing and starts nothing twice."""
    rt, run_id = _started(r, redis_url)
    [(entry_id, fields)] = r.xrange(keys.SUBMISSIONS_STREAM)
    assert r.hget(keys.RUN_CLAIMS, run_id) == entry_id
    before = r.xlen(keys.ACTIVITY_STREAM), r.llen(QUEUE)
    again = handle_submission(rt, entry_id, fields)
    assert again is not None and again.status == "running"
    assert (r.xlen(keys.ACTIVITY_STREAM), r.llen(QUEUE)) == before
    announced = [f for _, f in r.xrange(keys.ACTIVITY_STREAM) if f["type"] == "run_submitted"]
    assert [f["run_id"] for f in announced] == [run_id]
    day = rt.clock.today()
    assert orjson.loads(
        r.execute_command("JSON.GET", keys.user_daily_budget_key(again.user_id, day), "$.runs")
    ) == [1]
    # another entry with the same run_id (a raw XADD)
    other = r.xadd(keys.SUBMISSIONS_STREAM, fields)
    assert handle_submission(rt, other, fields) is None
    rejection = orjson.loads(r.execute_command("JSON.GET", keys.rejection_key(other)))
    assert rejection["error"] == f"run_id {run_id!r} is already used by another submission"


@pytest.mark.parametrize("late_status", ["completed", "failed"])
def test_a_result_of_an_attempt_that_was_retried_moves_nothing(
    r: redis.Redis, redis_url: str, late_status: str
) -> None:
    """The attempt fence: attempt 1 of a phase failed and Mother dispatched attempt 2; attempt 1's horse,
    still alive, then reports (with its own valid token). The phase is the same, only the attempt differs:
    the result is no longer current and moves nothing: no accepted result, no next phase, no third attempt,
    no activity entry, and its entry is left to its caller to acknowledge."""
    rt, run_id = _started(r, redis_url)
    failed = PhaseResult(
        run_id=run_id,
        phase="plan",
        phase_index=0,
        attempt=1,
        status="failed",
        error="TimeoutError: the model did not answer",
        finished_at="2026-11-22T00:00:00.000Z",
    )
    first_token = _token(r, failed)
    assert first_token is not None
    on_phase_result(rt, failed, first_token, delivery=_delivered(r, rt, failed))
    assert (rt.load_run(run_id).phase_index, rt.load_run(run_id).attempt) == (0, 2)

    late = PhaseResult(
        run_id=run_id,
        phase="plan",
        phase_index=0,
        attempt=1,
        status=late_status,
        finished_at="2026-11-22T00:00:01.000Z",
        **(
            {"output": "the plan, late", "confidence": 0.9}
            if late_status == "completed"
            else {"error": "RuntimeError: late"}
        ),
    )
    delivery = _delivered(r, rt, late)
    state_before = r.execute_command("JSON.GET", keys.run_key(run_id))
    activity_before = r.xlen(keys.ACTIVITY_STREAM)
    queued_before = r.lrange(QUEUE, 0, -1)
    on_phase_result(rt, late, first_token, delivery=delivery)
    assert r.execute_command("JSON.GET", keys.run_key(run_id)) == state_before
    run = rt.load_run(run_id)
    assert (run.status, run.phase_index, run.attempt, run.results) == ("running", 0, 2, [])
    assert r.xlen(keys.ACTIVITY_STREAM) == activity_before
    assert r.lrange(QUEUE, 0, -1) == queued_before
    for moved in (keys.phase_job_id(HOST, run_id, 1, 1), keys.phase_job_id(HOST, run_id, 0, 3)):
        assert not r.exists(Job.key_for(moved))
    assert not delivery.acked
    # the server's fence on its own, without the host check: a move of Mother's (no host: a timeout's
    # retry, an advance) made from attempt 1 is refused for the attempt alone
    args = _transition_args(
        rt,
        Move(run_id, rt.spec(run_id), frm=(0, 1), to=(1, 1), event="phase_completed", result=late),
    )
    assert calls.transition(r, **args) == 0
    assert r.execute_command("JSON.GET", keys.run_key(run_id)) == state_before


def test_mother_spreads_the_jobs_over_the_live_hosts_that_take_their_kind(r: redis.Redis) -> None:
    """Two idle live hosts of one worker each get one job each; a host not enrolled for a kind of job
    gets none of it; a host whose line is gone (silent) gets none."""
    from mother.hosts import HostTable

    first, second = live_host(r, "h-one", 1), live_host(r, "h-two", 1)
    table = HostTable(r)
    table.refresh()
    assert sorted([table.choose("agents"), table.choose("agents")]) == [first, second]
    assert table.choose("maintenance") is None
    r.delete(keys.host_alive_key(second))
    table.refresh()
    assert {table.choose("agents") for _ in range(4)} == {first}
