"""Budget guards on the real server: atomic under contention, thresholds, overrides, stop, rate limit."""

from __future__ import annotations

import math
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import orjson
import pytest
import redis

from mother import keys
from mother.activity import recent
from mother.budget import (
    Guard,
    admit,
    append_submission,
    emergency_stop,
    open_run_budget,
    override,
    rate_check,
    reset_stop,
)
from mother.clock import ServerClock
from mother.config import Settings, load_settings
from mother.errors import (
    BudgetExhausted,
    BudgetStopped,
    InvalidSpec,
    OverrideRefused,
    QueueFull,
    RateLimited,
)
from mother.functions import load_functions
from mother.limits import resolve_for_spec
from mother.records.budgets import budget_doc, budget_view
from schemas import RunSpec
from tests.conftest import cli, start_pipeline, stop_pipeline
from tests.test_pipeline import example

SETTINGS = load_settings()


def _spec(run_id: str, profile: str = "balanced", **overrides: object) -> RunSpec:
    return RunSpec(
        run_id=run_id,
        user_id="u1",
        task="t",
        budget_profile=profile,
        pipeline=[{"name": "a", "role": "r", "model": "scripted"}],
        limit_overrides=overrides,
    )


def _open(client: redis.Redis, run_id: str, settings: Settings = SETTINGS, **kw: object) -> Guard:
    load_functions(client)
    clock = ServerClock(client)
    spec = _spec(run_id, **kw)
    open_run_budget(client, settings, spec, clock.now_ms(), resolve_for_spec(settings, spec))
    return Guard(client, settings, run_id, "u1", clock.today)


def _doc(client: redis.Redis, run_id: str) -> dict:
    """The run's counters with what is enforced on them (limits, overrides, status, stop, fence)."""
    return budget_view(client, run_id)


def _guard(url: str, run_id: str) -> Guard:
    """A guard of its own (a separate process's connection) for the run."""
    client = redis.Redis.from_url(url, decode_responses=True)
    clock = ServerClock(client)
    return Guard(client, SETTINGS, run_id, "u1", clock.today)


def _charge_tools(url: str, run_id: str, count: int) -> int:
    guard = _guard(url, run_id)
    accepted = 0
    for _ in range(count):
        try:
            guard.charge_tool(read_only=False)
            accepted += 1
        except BudgetExhausted:
            pass
    return accepted


def test_200_concurrent_tool_charges_from_8_processes_accept_exactly_100(
    r: redis.Redis, redis_url: str
) -> None:
    """Against a tool-call limit of 100, 8 processes x 25 charges: exactly 100 accepted; the counter reads 100."""
    settings = SETTINGS.model_copy(deep=True)
    settings.budget.profiles["balanced"].tool_calls = 100
    _open(r, "tools-1", settings)
    with ProcessPoolExecutor(8) as pool:
        accepted = sum(pool.map(_charge_tools, [redis_url] * 8, ["tools-1"] * 8, [25] * 8))
    assert accepted == 100
    doc = _doc(r, "tools-1")
    assert doc["tool_calls"] == 100
    # the spec's string[]
    assert doc["limits_exceeded"] == ["budget_tool_call_exceeded"]
    assert [(c["code"], c["current"], c["max"]) for c in doc["limit_crossings"]] == [
        ("budget_tool_call_exceeded", 100, 100)
    ]


def _reserve_settle(url: str, run_id: str, calls: int) -> int:
    guard = _guard(url, run_id)
    done = 0
    for _ in range(calls):
        try:
            op = guard.reserve_model_call(max_tokens=1000, max_spend_micro_usd=0, cloud=False)
        except BudgetExhausted:
            continue
        # the call is in flight: other agents reserve meanwhile
        time.sleep(0.001)
        guard.settle_model_call(op, input_tokens=700, output_tokens=300, spend=0)
        done += 1
    return done


def test_parallel_reserve_then_settle_never_overshoots_more_than_one_call(
    r: redis.Redis, redis_url: str
) -> None:
    """8 agents of one run against 10,000 tokens: usage ends within the limit plus one call's grace."""
    _open(r, "llm-1", tokens=10_000)
    with ProcessPoolExecutor(8) as pool:
        calls = sum(pool.map(_reserve_settle, [redis_url] * 8, ["llm-1"] * 8, [10] * 8))
    doc = _doc(r, "llm-1")
    assert doc["total_tokens"] == calls * 1000
    assert 10_000 <= doc["total_tokens"] <= 10_000 + 1000
    assert doc["reserved"]["total_tokens"] == 0 and doc["reservations"] == {}
    assert doc["model_calls"] == calls


@pytest.mark.parametrize(
    ("profile", "limit", "warn_at"),
    [("conservative", 80, 60), ("balanced", 180, 144), ("extended", 360, 306)],
)
def test_profile_warning_fires_at_its_ratio_once(
    r: redis.Redis, profile: str, limit: int, warn_at: int
) -> None:
    """Each profile's tool-call warning appears exactly at 75/80/85% and only once, in the doc and the activity stream."""
    run_id = f"warn-{profile}"
    guard = _open(r, run_id, profile=profile)
    for _ in range(warn_at - 1):
        guard.charge_tool(read_only=False)
    assert _doc(r, run_id)["warnings_triggered"] == []
    guard.charge_tool(read_only=False)
    assert _doc(r, run_id)["warnings_triggered"] == ["budget_tool_call_warning"]
    for _ in range(limit - warn_at):
        guard.charge_tool(read_only=False)
    with pytest.raises(BudgetExhausted, match=f"budget_tool_call_exceeded \\({limit}/{limit}\\)"):
        guard.charge_tool(read_only=False)
    doc = _doc(r, run_id)
    assert doc["warnings_triggered"] == ["budget_tool_call_warning"] and doc["tool_calls"] == limit
    events = [
        orjson.loads(f["data"])
        for _, f in r.xrange(keys.ACTIVITY_STREAM)
        if f["type"] == "budget_warning" and f.get("run_id") == run_id
    ]
    assert events == [
        {
            "code": "budget_tool_call_warning",
            "current": warn_at,
            "max": limit,
            "ratio": {"conservative": 0.75, "balanced": 0.8, "extended": 0.85}[profile],
        }
    ]


def _shown_tool_calls(url: str, run_id: str) -> tuple[str, str]:
    """What `mother budget show` prints as the run's tool-call limit, and how it words its override."""
    shown = cli("budget", "show", run_id, url=url)
    assert shown.exit_code == 0, shown.output
    row = next(line for line in shown.stdout.splitlines() if "tool_calls" in line).split("│")
    line = next(line for line in shown.stdout.splitlines() if line.startswith("override"))
    return row[4].strip(), "expired at" if "expired at" in line else "until"


def test_overrides_capped_at_2x_and_expire(r: redis.Redis) -> None:
    """3x refused, 2x accepted and effective; once expired (server time) the base limit applies again."""
    # tool_calls 80
    guard = _open(r, "ovr-1", profile="conservative")
    with pytest.raises(
        OverrideRefused, match=r"effective limit 240 would exceed 2x the profile default \(160\)"
    ):
        override(
            r,
            "ovr-1",
            dimension="tool_calls",
            delta=160,
            expires_in_s=60,
            actor="ops",
            reason="x",
            maxlen=1000,
        )
    record = override(
        r,
        "ovr-1",
        dimension="tool_calls",
        delta=80,
        expires_in_s=1.5,
        actor="ops",
        reason="big job",
        maxlen=1000,
    )
    assert (record["actor"], record["reason"], record["delta"]) == ("ops", "big job", 80)
    url = r.connection_pool.connection_kwargs
    url = f"redis://{url['host']}:{url['port']}/{url.get('db', 0)}"
    assert _shown_tool_calls(url, "ovr-1") == ("160", "until")
    for _ in range(100):
        # past 80: the override is in force
        guard.charge_tool(read_only=False)
    time.sleep(1.6)
    with pytest.raises(BudgetExhausted, match="budget_tool_call_exceeded"):
        guard.charge_tool(read_only=False)
    # `mother budget show` counts only overrides in force (server time), as the guard does
    assert _shown_tool_calls(url, "ovr-1") == ("80", "expired at")
    audit = [f for _, f in r.xrange(keys.ACTIVITY_STREAM) if f["type"] == "budget_override"]
    assert len(audit) == 1 and orjson.loads(audit[0]["data"])["effective"] == 160


def test_audited_actions_need_an_actor_and_a_reason_and_sane_deltas(r: redis.Redis) -> None:
    """A blank actor or reason is refused before anything is written; so is a delta of 0 or past MAX_AMOUNT, and
    an expiry under 1 s (0.5 s was taken, though the message says 1 s) or over 30 days."""
    _open(r, "audit-1")
    before = _doc(r, "audit-1")
    with pytest.raises(InvalidSpec, match="actor must say who acts; it is empty"):
        override(
            r,
            "audit-1",
            dimension="tool_calls",
            delta=5,
            expires_in_s=60,
            actor=" ",
            reason="x",
            maxlen=1000,
        )
    with pytest.raises(InvalidSpec, match="reason must say why; it is empty"):
        emergency_stop(r, "audit-1", "ops", "", 1000)
    with pytest.raises(InvalidSpec, match="actor must say who acts"):
        reset_stop(r, "audit-1", "", "fixed", 1000)
    with pytest.raises(
        OverrideRefused,
        match=r"delta must be a whole number from -1000000000000 to 1000000000000, got 10000000000000",
    ):
        override(
            r,
            "audit-1",
            dimension="tool_calls",
            delta=10**13,
            expires_in_s=60,
            actor="ops",
            reason="x",
            maxlen=1000,
        )
    with pytest.raises(
        OverrideRefused, match="delta must not be 0: such an override changes no limit"
    ):
        override(
            r,
            "audit-1",
            dimension="tool_calls",
            delta=0,
            expires_in_s=60,
            actor="ops",
            reason="x",
            maxlen=1000,
        )
    for seconds in (0.5, 0, -5, math.nan, 31 * 86400):
        with pytest.raises(
            OverrideRefused, match="expires-in must be between 1 second and 30 days"
        ):
            override(
                r,
                "audit-1",
                dimension="tool_calls",
                delta=5,
                expires_in_s=seconds,
                actor="ops",
                reason="x",
                maxlen=1000,
            )
    assert _doc(r, "audit-1") == before


def test_emergency_stop_refuses_mutations_allows_reads_and_reset_resumes(r: redis.Redis) -> None:
    """After stop: a model call and a write tool are refused, a read-only tool runs; reset lifts it."""
    guard = _open(r, "stop-1")
    guard.charge_tool(read_only=False)
    event = emergency_stop(r, "stop-1", "ops", "runaway loop", 1000)
    assert (event["actor"], event["reason"], event["counters"]["tool_calls"]) == (
        "ops",
        "runaway loop",
        1,
    )
    with pytest.raises(BudgetStopped):
        guard.reserve_model_call(max_tokens=10, max_spend_micro_usd=0, cloud=False)
    with pytest.raises(BudgetStopped):
        guard.charge_tool(read_only=False)
    guard.charge_tool(read_only=True)
    assert _doc(r, "stop-1")["status"] == "budget_stopped"
    # the refusals name the run (they were written with run_id '', which no listing of activity could read), and a
    # stop is refused in the activity stream once, not at every poll of a worker that waits for the reset (30 in 17 s)
    refusals = [e.data for e in recent(r, 50, run_id="stop-1") if e.type == "budget_refused"]
    assert refusals == [
        {"code": "budget_stopped", "current": 0, "max": 0, "stopped_at": event["at"]}
    ]
    # changes nothing: the first stop stands
    again = emergency_stop(r, "stop-1", "oncall", "second stop", 1000)
    assert (again["already"], again["actor"], again["reason"]) == (True, "ops", "runaway loop")
    assert _doc(r, "stop-1")["stop"]["actor"] == "ops"
    reset_stop(r, "stop-1", "ops", "fixed", 1000)
    with pytest.raises(
        OverrideRefused,
        match=r"the run is not emergency-stopped \(its budget is active\); nothing to reset",
    ):
        reset_stop(r, "stop-1", "ops", "twice", 1000)
    assert (
        sum(
            1
            for _, f in r.xrange(keys.ACTIVITY_STREAM)
            if f["type"] == "budget_reset" and f.get("run_id") == "stop-1"
        )
        == 1
    )
    op = guard.reserve_model_call(max_tokens=10, max_spend_micro_usd=0, cloud=False)
    guard.settle_model_call(op, input_tokens=5, output_tokens=5, spend=0)
    assert _doc(r, "stop-1")["tool_calls"] == 2 and _doc(r, "stop-1")["stop"] is None


def test_hand_edits_between_tool_charges_are_honoured(r: redis.Redis) -> None:
    """Edits made by hand with JSON.SET between charges (a limit, a counter of the same width, the status, the
    wall clock's start, a counter the charge itself writes over) all take effect at the next charge."""
    guard = _open(r, "hand-1")
    key, enforced = keys.run_budget_key("hand-1"), keys.run_limits_key("hand-1")
    # from the second charge on, each reads the text the one before it left
    for _ in range(3):
        guard.charge_tool(read_only=False)
    r.execute_command("JSON.SET", enforced, "$.limits.tool_calls", 3)
    with pytest.raises(BudgetExhausted, match=r"budget_tool_call_exceeded \(3/3\)"):
        guard.charge_tool(read_only=False)
    r.execute_command("JSON.SET", enforced, "$.limits.tool_calls", 9)
    # 4
    guard.charge_tool(read_only=False)
    # 5: kept for the next charge
    guard.charge_tool(read_only=False)
    # one digit, as the 5 it replaces
    r.execute_command("JSON.SET", key, "$.tool_calls", 8)
    # 9: at the limit
    guard.charge_tool(read_only=False)
    with pytest.raises(BudgetExhausted, match=r"budget_tool_call_exceeded \(9/9\)"):
        guard.charge_tool(read_only=False)
    r.execute_command("JSON.SET", enforced, "$.limits.tool_calls", 20)
    # 10
    guard.charge_tool(read_only=False)
    r.execute_command("JSON.SET", enforced, "$.status", '"budget_stopped"')
    with pytest.raises(BudgetStopped):
        guard.charge_tool(read_only=False)
    r.execute_command("JSON.SET", enforced, "$.status", '"active"')
    # 11
    guard.charge_tool(read_only=False)
    # one digit, as the 0 it replaces, between the counts
    r.execute_command("JSON.SET", key, "$.duration_sec", 7)
    # 12: its own count of seconds is written over the 7
    guard.charge_tool(read_only=False)
    assert _doc(r, "hand-1")["duration_sec"] < 7
    # an hour ago
    r.execute_command(
        "JSON.SET", enforced, "$.started_ms", _doc(r, "hand-1")["started_ms"] - 3_600_000
    )
    with pytest.raises(BudgetExhausted, match="budget_wall_clock_exceeded"):
        guard.charge_tool(read_only=False)
    doc = _doc(r, "hand-1")
    assert doc["tool_calls"] == 12 and doc["limit_crossings"][-1]["current"] >= 3600
    assert doc["limits_exceeded"] == ["budget_tool_call_exceeded", "budget_wall_clock_exceeded"]


def test_101st_message_in_an_hour_is_429_and_connections_share_the_window(
    r: redis.Redis, redis_url: str
) -> None:
    """100 messages pass, the 101st (from a second connection) is RateLimited 429 with retry_after."""
    load_functions(r)
    other = redis.Redis.from_url(redis_url, decode_responses=True)
    for i in range(100):
        rate_check(r if i % 2 else other, SETTINGS, "chatty")
    with pytest.raises(RateLimited) as info:
        rate_check(other, SETTINGS, "chatty")
    assert info.value.status == 429 and info.value.code == "rate_limited"
    assert 3590 < info.value.retry_after <= 3600
    # per user
    rate_check(r, SETTINGS, "someone-else")


def test_rate_window_rolls_over(r: redis.Redis) -> None:
    """With a 2-message / 1-second window the third is refused, then allowed after the window passes."""
    load_functions(r)
    settings = SETTINGS.model_copy(deep=True)
    settings.budget.rate_limit.messages, settings.budget.rate_limit.window_seconds = 2, 1
    rate_check(r, settings, "u9")
    rate_check(r, settings, "u9")
    with pytest.raises(RateLimited):
        rate_check(r, settings, "u9")
    time.sleep(1.05)
    rate_check(r, settings, "u9")


@pytest.mark.parametrize("skew_ms", [-300_000, 300_000])
def test_client_clock_skew_changes_no_decision(r: redis.Redis, skew_ms: int) -> None:
    """A guard whose idea of 'today' is 5 minutes off still charges the server's daily key and decides the same."""
    guard = _open(r, f"skew{skew_ms}", profile="conservative")
    clock = ServerClock(r)
    server_day = clock.now_iso()[:10]
    skewed_days = iter([_day_at(clock.now_ms() + skew_ms), _day_at(clock.now_ms() + skew_ms)])
    guard.day = lambda: next(skewed_days, server_day)
    op = guard.reserve_model_call(max_tokens=100, max_spend_micro_usd=0, cloud=True)
    guard.settle_model_call(op, input_tokens=60, output_tokens=40, spend=0)
    user = budget_doc(r, keys.user_daily_budget_key("u1", server_day))
    assert (user["cloud_calls"], user["total_tokens"]) == (1, 100)


def test_repeated_tool_charges_follow_the_server_day(r: redis.Redis) -> None:
    """A tool charge's command is built once per day: a guard whose day is wrong is told the server's
    and charges under it, and the command kept for one day is never sent for another."""
    guard = _open(r, "day-tools")
    clock = ServerClock(r)
    days = iter(["1999-01-01", "1999-01-01", clock.today(), "2099-12-31"])
    guard.day = lambda: next(days, clock.today())
    for _ in range(5):
        guard.charge_tool(read_only=False)
    assert _doc(r, "day-tools")["tool_calls"] == 5
    sent = []
    guard.client = _Recorder(r, sent)
    guard.charge_tool(read_only=False)
    assert _doc(r, "day-tools")["tool_calls"] == 6
    assert sent[0][-1] == b"1" and orjson.loads(sent[0][-3])["day"] == clock.today()


class _Recorder:
    """A client that records the commands it sends (and sends them)."""

    def __init__(self, client: redis.Redis, sent: list[tuple[object, ...]]) -> None:
        self.client, self.sent = client, sent

    def execute_command(self, *command: object) -> object:
        self.sent.append(command)
        return self.client.execute_command(*command)


def _day_at(ms: int) -> str:
    from schemas import iso_from_ms

    return iso_from_ms(ms)[:10]


@pytest.mark.parametrize("amount", [-1, 1.5, math.nan, math.inf, True, 10**13, "5"])
def test_bad_amounts_are_refused_and_write_nothing(r: redis.Redis, amount: object) -> None:
    """Negative, fractional, non-finite, boolean, absurd and non-numeric amounts are refused before the server."""
    guard = _open(r, "bad-1")
    before = _doc(r, "bad-1")
    with pytest.raises(InvalidSpec):
        guard.reserve_model_call(max_tokens=amount, max_spend_micro_usd=0, cloud=False)  # type: ignore[arg-type]
    with pytest.raises(InvalidSpec):
        guard.charge("spawns", amount)  # type: ignore[arg-type]
    assert _doc(r, "bad-1") == before


def test_admission_queues_past_max_concurrent_runs_and_caps_daily_runs(r: redis.Redis) -> None:
    """Concurrent runs at max: a new run waits in the admission queue (its position said, never ended for
    being busy), and every later one waits behind it; a child run never waits (its parent waits on it); the
    user's 51st run of the day is refused."""
    load_functions(r)
    clock = ServerClock(r)
    day = clock.now_iso()[:10]
    settings = SETTINGS.model_copy(deep=True)
    settings.budget.global_.max_concurrent_runs = 2
    r.zadd(keys.RUN_DEADLINES, {"live-1": 1e15, "live-2": 1e15})
    first = admit(r, settings, "new-1", "u1", day, 1000)
    assert (first.ok, first.waiting, first.position) == (True, True, 1)
    child = admit(r, settings, "child-1", "u1", day, 1000, child=True)
    assert (child.ok, child.waiting) == (True, False)
    r.zrem(keys.RUN_DEADLINES, "live-1", "child-1")
    # a slot is free, but new-1 waits for it first
    behind = admit(r, settings, "new-2", "u1", day, 1000)
    assert (behind.ok, behind.waiting, behind.position) == (True, True, 2)
    queued = [
        orjson.loads(f["data"])
        for _, f in r.xrange(keys.ACTIVITY_STREAM)
        if f["type"] == "run_queued"
    ]
    assert [(q["position"], q["waiting"], q["running"]) for q in queued] == [(1, 1, 2), (2, 2, 1)]
    r.delete(keys.RUN_DEADLINES, keys.ADMISSION_WAITING)
    for i in range(48):
        assert admit(r, settings, f"ok-{i}", "u2", day, 1000).ok
    # u1 has 3 runs today: not capped
    capped = admit(r, settings, "51st", "u1", day, 1000)
    assert capped.ok
    for i in range(47):
        admit(r, settings, f"more-{i}", "u1", day, 1000)
    capped = admit(r, settings, "51st-u1", "u1", day, 1000)
    assert (capped.ok, capped.details) == (False, "Daily run limit reached for user u1 (50/50)")
    # the user's warning and refusal name the run that crossed the line ('' before: unreadable in any listing)
    named = {
        e.type: e
        for e in recent(r, 200)
        if e.type in ("budget_warning", "budget_refused")
        and e.data.get("code", "").startswith("budget_user_daily_runs")
    }
    assert named["budget_refused"].run_id == "51st-u1"


def test_the_admission_queue_takes_users_in_turn(r: redis.Redis) -> None:
    """Fair across users, first come first served within a user: a user who queued three runs does not
    keep a later user's one run waiting behind all three; admission is decided once per run (asked again,
    the run keeps its place and is counted once)."""
    load_functions(r)
    day = ServerClock(r).now_iso()[:10]
    settings = SETTINGS.model_copy(deep=True)
    settings.budget.global_.max_concurrent_runs = 1
    r.zadd(keys.RUN_DEADLINES, {"live": 1e15})
    for run_id, user in (
        ("a1", "alice"),
        ("a2", "alice"),
        ("a3", "alice"),
        ("b1", "bob"),
        ("c1", "carol"),
    ):
        r.execute_command("JSON.SET", keys.run_key(run_id), "$", orjson.dumps({"run_id": run_id}))
        assert admit(r, settings, run_id, user, day, 1000).waiting
    assert r.zrange(keys.ADMISSION_WAITING, 0, -1) == ["a1", "b1", "c1", "a2", "a3"]
    again = admit(r, settings, "b1", "bob", day, 1000)
    assert (again.waiting, again.position) == (True, 2)
    assert budget_doc(r, keys.user_daily_budget_key("bob", day))["runs"] == 1
    assert orjson.loads(r.execute_command("JSON.GET", keys.run_key("b1"), "$.admission")) == [
        "waiting"
    ]


def test_a_crossed_run_limit_is_the_records_primary_code(tmp_path: Path) -> None:
    """A profile's tool-call limit set in part from the environment: the third tool call is refused, the run ends
    budget_exhausted naming the first crossed code with current/max, and the budget document keeps the spec's
    string[] limits_exceeded beside the crossings' figures."""
    p = start_pipeline(
        tmp_path, workers=1, env={"MOTHER_BUDGET__PROFILES__BALANCED__TOOL_CALLS": "2"}
    )
    try:
        tools = [{"tool_calls": [{"name": "list_dir", "arguments": {}}]}] * 4 + [{"text": "done"}]
        spec = example(
            "three-phase",
            scripts={"planner": tools, "coder": [{"text": "x"}], "critic": [{"text": "y"}]},
        )
        record = p.wait(p.client.submit(spec)).termination
        assert (record.reason, record.details) == (
            "budget_exhausted",
            "Limit exceeded: budget_tool_call_exceeded (2/2)",
        )
        assert record.contributing_factors == ["budget_tool_call_exceeded (2/2)"]
        doc = budget_view(p.redis, record.run_id)
        # the rest stays
        assert (doc["tool_calls"], doc["limits"]["tool_calls"], doc["warning_ratio"]) == (2, 2, 0.8)
        assert doc["limits_exceeded"] == ["budget_tool_call_exceeded"]
        assert [(c["code"], c["current"], c["max"]) for c in doc["limit_crossings"]] == [
            ("budget_tool_call_exceeded", 2, 2)
        ]
        assert doc["exhausted"]["resource"] == "tools"
    finally:
        stop_pipeline(p)


def _append(r: redis.Redis, settings: Settings, run_id: str) -> str:
    return append_submission(
        r, settings, stream=keys.SUBMISSIONS_STREAM, payload=b"{}", run_id=run_id, user_id="u"
    )


def test_queue_full_refuses_and_enqueues_nothing(r: redis.Redis) -> None:
    """At max queue depth submit raises QueueFull and the stream does not grow; runs waiting in the admission
    queue count in the depth (the submitter's check; intake decides again)."""
    load_functions(r)
    settings = SETTINGS.model_copy(deep=True)
    settings.budget.global_.max_queue_depth = 3
    _append(r, settings, "q-1")
    _append(r, settings, "q-2")
    r.zadd(keys.ADMISSION_WAITING, {"waiting-1": 1})
    with pytest.raises(
        QueueFull, match=r"the submission queue is full \(3/3 runs waiting to start\)"
    ):
        _append(r, settings, "q-3")
    assert r.xlen(keys.SUBMISSIONS_STREAM) == 2
    # the submitter claims nothing: Mother claims run ids at intake
    assert not r.exists(keys.RUN_CLAIMS)


def test_the_queue_depth_is_the_servers_and_the_leading_mothers_limit(r: redis.Redis) -> None:
    """Depth is what Mother's consumer group has not handled (pending + lag, from the stream itself: raw
    XADDs count at once, a stale gauge does not), and the limit is the one the leading Mother published in
    mother:config: two clients with different settings are refused at the same depth."""
    load_functions(r)
    settings = SETTINGS.model_copy(deep=True)
    # this client's own idea: not the one in force
    settings.budget.global_.max_queue_depth = 1000
    r.xgroup_create(keys.SUBMISSIONS_STREAM, settings.service.consumer_group, id="$", mkstream=True)
    r.execute_command(
        "JSON.SET",
        keys.GLOBAL_BUDGET,
        "$",
        orjson.dumps(
            {"concurrent_runs": 0, "queue_depth": 104, "redis_memory_mb": 0, "docling_jobs": 0}
        ),
    )
    r.execute_command("JSON.SET", keys.MOTHER_CONFIG, "$", orjson.dumps({"max_queue_depth": 3}))
    # the queue is empty: the gauge was stale
    first = _append(r, settings, "d-1")
    # the gauge is Mother's to refresh: a submission leaves it
    assert orjson.loads(r.execute_command("JSON.GET", keys.GLOBAL_BUDGET, "$.queue_depth")) == [104]
    for _ in range(2):
        # raw entries count at once
        r.xadd(keys.SUBMISSIONS_STREAM, {"spec": "{}"})
    with pytest.raises(
        QueueFull, match=r"the submission queue is full \(3/3 runs waiting to start\)"
    ):
        _append(r, settings, "d-2")
    assert (
        r.xlen(keys.SUBMISSIONS_STREAM) == 3
        and r.xrange(keys.SUBMISSIONS_STREAM, count=1)[0][0] == first
    )
    r.xreadgroup(settings.service.consumer_group, "c", {keys.SUBMISSIONS_STREAM: ">"})
    # Mother took one in
    r.xack(keys.SUBMISSIONS_STREAM, settings.service.consumer_group, first)
    _append(r, settings, "d-2")


def test_a_claimed_run_id_is_refused_before_it_is_appended(r: redis.Redis) -> None:
    """A run_id Mother has claimed for a submission is refused at once, naming that submission's entry,
    and nothing is appended (Mother's intake refuses a later duplicate in any case)."""
    load_functions(r)
    r.hset(keys.RUN_CLAIMS, "same-id", "1-0")
    with pytest.raises(
        InvalidSpec, match=r"run_id 'same-id' is already used \(by submission 1-0\)"
    ):
        _append(r, SETTINGS, "same-id")
    assert r.xlen(keys.SUBMISSIONS_STREAM) == 0


def test_a_full_rate_window_is_refused_before_it_is_appended(r: redis.Redis) -> None:
    """The submitter's check reads the user's window without counting in it (Mother counts at intake):
    at the limit it raises RateLimited with retry_after, and appends nothing."""
    load_functions(r)
    settings = SETTINGS.model_copy(deep=True)
    settings.budget.rate_limit.messages = 2
    rate_check(r, settings, "u")
    rate_check(r, settings, "u")
    before = r.zcard(keys.rate_limit_key("u"))
    with pytest.raises(RateLimited) as info:
        _append(r, settings, "r-1")
    assert 3590 < info.value.retry_after <= 3600
    assert r.zcard(keys.rate_limit_key("u")) == before == 2
    assert r.xlen(keys.SUBMISSIONS_STREAM) == 0


def test_the_early_rate_check_uses_the_leading_mothers_limit(r: redis.Redis) -> None:
    """A client whose own settings allow 2 messages an hour is not refused where the leading Mother,
    which decides at intake, allows 5 (it publishes its limit in mother:config); one allowing 100 is
    refused where the leading Mother allows 2."""
    load_functions(r)
    strict = SETTINGS.model_copy(deep=True)
    strict.budget.rate_limit.messages = 2
    for _ in range(2):
        rate_check(r, strict, "u")
    r.execute_command(
        "JSON.SET",
        keys.MOTHER_CONFIG,
        "$",
        orjson.dumps({"rate_limit_messages": 5, "rate_limit_window_ms": 3_600_000}),
    )
    _append(r, strict, "r-ok")
    r.execute_command("JSON.SET", keys.MOTHER_CONFIG, "$.rate_limit_messages", "2")
    with pytest.raises(RateLimited):
        _append(r, SETTINGS, "r-refused")


def test_run_ends_budget_exhausted_end_to_end(tmp_path: Path) -> None:
    """A run limited to 2 turns whose script wants more ends budget_exhausted with the fail-safe message."""
    p = start_pipeline(tmp_path, workers=1)
    try:
        tools = [{"tool_calls": [{"name": "list_dir", "arguments": {}}]}] * 5 + [{"text": "done"}]
        spec = example(
            "three-phase",
            limit_overrides={"turns": 2},
            scripts={"planner": tools, "coder": [{"text": "x"}], "critic": [{"text": "y"}]},
        )
        run_id = p.client.submit(spec)
        record = p.wait(run_id).termination
        # the ledger's turn-start check fires first, with its fail-safe message
        assert (record.reason, record.details) == (
            "budget_exhausted",
            "Limit exceeded: turns_exceeded (2/2)",
        )
        assert record.contributing_factors[0] == "Limit exceeded: turns_exceeded (2/2)"
        doc = budget_view(p.redis, run_id)
        assert doc["status"] == "closed" and doc["model_calls"] == 2 and doc["tool_calls"] == 2
        assert doc["exhausted"]["termination_reason"] == "budget_exhausted"
        # the spec's record names the resource and the limit's real figures (it said tokens_exceeded, 0 and 0)
        assert (
            doc["exhausted"]["resource"],
            doc["exhausted"]["limit"],
            doc["exhausted"]["consumed"],
        ) == ("model_calls", 2, 2)
    finally:
        stop_pipeline(p)


def test_server_time_text_matches_python_across_seconds_and_days(r: redis.Redis) -> None:
    """The Lua formatter caches each second's text; the text must still be exact for every millisecond,
    across second, day, month, leap-year and century boundaries."""
    from datetime import UTC, datetime

    load_functions(r)
    points = [
        0,
        999,
        1000,
        86_399_999,
        86_400_000,
        951_782_399_999,
        951_782_400_000,
        4_107_542_400_000,
        1_795_308_086_556,
        1_795_308_086_007,
        1_795_308_087_050,
    ]
    points += [1_700_000_000_000 + 137 * i for i in range(40)]
    texts = r.fcall("mh_now", 0, *points)
    for ms, text in zip(points, texts, strict=True):
        want = (
            datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.")
            + f"{ms % 1000:03d}Z"
        )
        assert (text.decode() if isinstance(text, bytes) else text) == want, ms
    assert abs(int(r.fcall("mh_now", 0)) - ServerClock(r).now_ms()) < 5_000


def test_admission_with_a_wrong_day_counts_on_the_servers_day(r: redis.Redis) -> None:
    """Intake's admission sent with a day that is not the server's is asked again with the server's day."""
    load_functions(r)
    server_day = ServerClock(r).now_iso()[:10]
    assert admit(r, SETTINGS, "skewed-run", "u-skew", "1999-01-01", 1000).ok
    assert budget_doc(r, keys.user_daily_budget_key("u-skew", server_day))["runs"] == 1
    assert not r.exists(keys.user_daily_budget_key("u-skew", "1999-01-01"))


def test_settle_queued_on_a_pipeline_with_a_wrong_day_is_redone(r: redis.Redis) -> None:
    """The worker's last settle rides in its final transaction; if its day was not the server's,
    the reply says so and the settle is made again with the server's day (charged exactly once)."""
    guard = _open(r, "queued-settle")
    server_day = ServerClock(r).now_iso()[:10]
    op = guard.reserve_model_call(max_tokens=100, max_spend_micro_usd=0, cloud=False)
    guard.day = lambda: "1999-01-01"
    pipe = r.pipeline(transaction=True)
    guard.settle_model_call(op, input_tokens=30, output_tokens=20, spend=0, pipe=pipe)
    (raw,) = pipe.execute()
    # still the wrong day: the server's reply names its own
    guard.queued_reply(raw)
    doc = _doc(r, "queued-settle")
    assert (doc["total_tokens"], doc["input_tokens"], doc["reservations"]) == (50, 30, {})
    assert budget_doc(r, keys.user_daily_budget_key("u1", server_day))["total_tokens"] == 50


def test_repeated_action_texts_are_charged_as_written_past_the_servers_cache(
    r: redis.Redis,
) -> None:
    """mh_guard keeps the decoding of actions marked as repeating (the tool charge). Each text must
    still charge exactly what it says, past the cache's bound (64 texts) and after it starts over."""
    roomy = load_settings()
    roomy.budget.profiles["balanced"].tool_calls = 10**9
    _open(r, "repeats", roomy)
    day = ServerClock(r).today()
    # 70 distinct texts, then three seen before the cache restarted
    amounts = [*range(1, 71), 3, 70, 1]
    for n in amounts:
        action = orjson.dumps(
            {"read_only": False, "check": ["tool_calls"], "add": {"tool_calls": n}, "day": day}
        )
        reply = r.fcall(
            "mh_guard",
            5,
            keys.run_budget_key("repeats"),
            keys.user_daily_budget_key("u1", day),
            keys.ACTIVITY_STREAM,
            keys.run_limits_key("repeats"),
            keys.METRICS_COUNTERS,
            action,
            1000,
            "1",
        )
        assert reply == '{"ok":true}', reply
    assert _doc(r, "repeats")["tool_calls"] == sum(amounts)
    guard = Guard(r, SETTINGS, "repeats", "u1", lambda: day)
    guard.charge_tool(read_only=True)
    # same run, the other cached text: both charge one
    guard.charge_tool(read_only=False)
    assert _doc(r, "repeats")["tool_calls"] == sum(amounts) + 2


def test_budget_library_loaded_without_its_codes_says_how_to_load_it(r: redis.Redis) -> None:
    """The reason codes are rendered into the library by load_functions; the raw file loaded by hand
    must refuse every charge with a message naming the fix (before writing anything), not fail with
    a decode error at the first threshold after charging."""
    from mother.functions import _read, _with_prelude

    tight = load_settings()
    tight.budget.profiles["balanced"].tool_calls = 1
    guard = _open(r, "raw-library", tight)
    r.execute_command("FUNCTION", "LOAD", "REPLACE", _with_prelude(_read("budget.lua")))
    try:
        with pytest.raises(redis.ResponseError, match="load_functions"):
            guard.charge_tool(read_only=False)
    finally:
        load_functions(r)
    assert _doc(r, "raw-library")["tool_calls"] == 0
    guard.charge_tool(read_only=False)
    with pytest.raises(BudgetExhausted, match="budget_tool_call_exceeded"):
        guard.charge_tool(read_only=False)


def test_reservation_id_that_is_not_a_plain_name_is_refused_and_writes_nothing(
    r: redis.Redis,
) -> None:
    """A reservation's id becomes a member name in the guard's JSON.MERGE; one with JSON syntax in it
    (a raw FCALL could send one) must be refused before any write, not merged into the counters."""
    guard = _open(r, "bad-op")
    before = _doc(r, "bad-op")
    evil = 'x":{},"model_calls":-100,"y'
    with pytest.raises(InvalidSpec, match=r"reserve\.op"):
        guard._call(
            {
                "check": ["model_calls"],
                "add": {"model_calls": 1},
                "reserve": {
                    "op": evil,
                    "dims": {"total_tokens": 5},
                    "user_dims": {"total_tokens": 5},
                },
            }
        )
    after = _doc(r, "bad-op")
    assert (after["model_calls"], after["reserved"], after["reservations"]) == (
        0,
        before["reserved"],
        {},
    )
    op = guard.reserve_model_call(max_tokens=10, max_spend_micro_usd=10, cloud=False)
    assert list(_doc(r, "bad-op")["reservations"]) == [op]


def test_reservations_no_settle_will_come_for_are_given_back_and_a_late_settle_charges_once(
    r: redis.Redis,
) -> None:
    """A model call reserved by an attempt that was lost (its horse killed mid-call) or cut off by the run's end
    is never settled: its reservation stood, counted against the run's limits and the user's daily tokens for
    the rest of the day. release_reservations gives back each one held, on the run's document and the user's of
    the day it was made, leaves a tombstone, and says so in the activity stream; a settle that still comes
    charges what the call used, once; a reservation of a day not passed is left as it is."""
    from mother.budget import release_reservations
    from mother.records.budgets import held_reservations

    guard = _open(r, "lost-calls")
    day = ServerClock(r).now_iso()[:10]
    user_key = keys.user_daily_budget_key("u1", day)
    ops = [
        guard.reserve_model_call(max_tokens=n, max_spend_micro_usd=5, cloud=False)
        for n in (400, 600)
    ]
    assert _doc(r, "lost-calls")["reserved"]["total_tokens"] == 1000
    assert budget_doc(r, user_key)["reserved"]["total_tokens"] == 1000

    def held() -> dict:
        return held_reservations(r, "lost-calls")

    assert sorted(held()) == sorted(ops)
    reply = orjson.loads(
        release_reservations(r, SETTINGS, "lost-calls", "u1", held(), "attempt 1 was lost")
    )
    assert reply == {"released": 2, "left": 0}
    doc = _doc(r, "lost-calls")
    assert (
        doc["reserved"]["total_tokens"],
        doc["reserved"]["spend_micro_usd"],
        doc["total_tokens"],
    ) == (0, 0, 0)
    assert budget_doc(r, user_key)["reserved"]["total_tokens"] == 0
    assert held() == {} and all(set(doc["reservations"][op]) == {"at", "released"} for op in ops)
    [entry] = [e for e in recent(r, 20) if e.type == "reservations_released"]
    assert (entry.run_id, entry.data) == (
        "lost-calls",
        {"count": 2, "total_tokens": 1000, "why": "attempt 1 was lost"},
    )
    # nothing held: no call
    assert release_reservations(r, SETTINGS, "lost-calls", "u1", held(), "again") is None

    # the horse outlived its attempt
    guard.settle_model_call(ops[0], input_tokens=70, output_tokens=30, spend=3)
    # sent twice: charged once
    guard.settle_model_call(ops[0], input_tokens=70, output_tokens=30, spend=3)
    doc = _doc(r, "lost-calls")
    assert (doc["total_tokens"], doc["spend_micro_usd"], doc["reserved"]["total_tokens"]) == (
        100,
        3,
        0,
    )
    assert ops[0] not in doc["reservations"] and ops[1] in doc["reservations"]
    user = budget_doc(r, user_key)
    assert (user["total_tokens"], user["reserved"]["total_tokens"]) == (100, 0)

    third = guard.reserve_model_call(max_tokens=50, max_spend_micro_usd=0, cloud=False)
    r.execute_command(
        "JSON.SET",
        keys.run_budget_key("lost-calls"),
        f"$.reservations.{third}.at",
        '"1999-01-01T00:00:00.000Z"',
    )
    # its day's document is not among the keys
    reply = orjson.loads(call_release(r, "lost-calls", ["2000-01-01"]))
    assert (
        reply == {"released": 0, "left": 1}
        and _doc(r, "lost-calls")["reserved"]["total_tokens"] == 50
    )


def test_an_attempt_given_up_on_can_reserve_and_charge_nothing_more(r: redis.Redis) -> None:
    """A lost attempt's horse may only have stalled and wake up after Mother gave back what it held: a call it
    reserved then stood unreleased until the run's end. The give-back fences the attempt, in the same call:
    its (and earlier attempts') reservations and charges are refused (phase_stale, nothing written), its
    settles still go through, later attempts and phases are not fenced, and the fence never moves back."""
    from mother.budget import release_reservations
    from mother.errors import PhaseStale
    from mother.records.budgets import held_reservations

    _open(r, "fenced")
    clock = ServerClock(r)

    def guard(index: int, attempt: int) -> Guard:
        return Guard(r, SETTINGS, "fenced", "u1", clock.today, attempt=(index, attempt))

    old, new = guard(1, 1), guard(1, 2)
    op = old.reserve_model_call(max_tokens=300, max_spend_micro_usd=7, cloud=False)
    # each reservation names its attempt
    assert _doc(r, "fenced")["reservations"][op]["attempt"] == "1:1"
    reply = release_reservations(
        r,
        SETTINGS,
        "fenced",
        "u1",
        held_reservations(r, "fenced"),
        "attempt 1 was lost",
        fence=(1, 1),
    )
    assert orjson.loads(reply) == {"released": 1, "left": 0}
    before = _doc(r, "fenced")
    assert before["fence"] == "1:1" and before["reserved"]["total_tokens"] == 0
    for refused in (
        lambda g: g.reserve_model_call(max_tokens=10, max_spend_micro_usd=1, cloud=False),
        lambda g: g.charge_tool(read_only=True),
        lambda g: g.charge("spawns"),
    ):
        # the attempt given up on, and an earlier phase's
        for stale in (old, guard(0, 3)):
            with pytest.raises(
                PhaseStale,
                match=r"^run fenced gave up on attempt \d:\d \(fence 1:1\); nothing was charged$",
            ):
                refused(stale)
    after = _doc(r, "fenced")
    assert (after["model_calls"], after["tool_calls"], after["spawns"], after["reservations"]) == (
        before["model_calls"],
        before["tool_calls"],
        before["spawns"],
        before["reservations"],
    )
    # what the woken horse's call used: charged
    old.settle_model_call(op, input_tokens=40, output_tokens=10, spend=2)
    assert (_doc(r, "fenced")["total_tokens"], _doc(r, "fenced")["spend_micro_usd"]) == (50, 2)
    # the retry is not fenced
    kept = new.reserve_model_call(max_tokens=20, max_spend_micro_usd=1, cloud=False)
    # nor is the next phase
    guard(2, 1).charge_tool(read_only=False)
    assert list(held_reservations(r, "fenced")) == [kept]
    # the fence moves on (with nothing held too), never back
    assert orjson.loads(
        release_reservations(
            r, SETTINGS, "fenced", "u1", held_reservations(r, "fenced"), "x", fence=(2, 1)
        )
    ) == {"released": 1, "left": 0}
    assert orjson.loads(
        release_reservations(r, SETTINGS, "fenced", "u1", {}, "x", fence=(1, 3))
    ) == {"released": 0, "left": 0}
    assert _doc(r, "fenced")["fence"] == "2:1"
    assert orjson.loads(
        release_reservations(r, SETTINGS, "fenced", "u1", {}, "x", fence=(2, 4))
    ) == {"released": 0, "left": 0}
    assert _doc(r, "fenced")["fence"] == "2:4"
    with pytest.raises(PhaseStale):
        guard(2, 1).charge_tool(read_only=False)
    # nothing held, nothing to fence: no call
    assert release_reservations(r, SETTINGS, "fenced", "u1", {}, "x") is None
    bad = Guard(r, SETTINGS, "fenced", "u1", clock.today)
    bad.attempt = "2-1"
    with pytest.raises(
        InvalidSpec, match=r"^budget guard refused the call: attempt must be 'index:attempt'$"
    ):
        bad.charge("spawns")
    with pytest.raises(
        redis.ResponseError, match=r"the fence must be 'index:attempt' or empty, got 1"
    ):
        call_release(r, "fenced", [], fence="1")


def call_release(client: redis.Redis, run_id: str, days: list[str], fence: str = "") -> str:
    from mother.functions import call

    return call(
        client,
        "mh_release_reservations",
        [
            keys.run_budget_key(run_id),
            keys.ACTIVITY_STREAM,
            keys.run_limits_key(run_id),
            *(keys.user_daily_budget_key("u1", d) for d in days),
        ],
        [SETTINGS.service.activity_maxlen, "test", fence, *days],
    )


def test_an_emergency_stop_holds_the_run_and_a_reset_lets_it_finish(pipeline) -> None:
    """`budget stop` makes run:{id}.status budget_stopped at once (it stayed running); the phase waits at its next
    mutating action (read-only tools go on), logging one budget_refused entry for the stop, not one per poll; the
    reset makes it running again and the run succeeds, both steps in its history."""
    from tests.test_pipeline import wait_until

    spec = example(
        "cancelled",
        pipeline=[{"name": "execute", "role": "crawler", "model": "scripted"}],
        scripts={
            "crawler": [
                {"tool_calls": [{"name": "list_dir", "arguments": {}}], "delay_seconds": 1.0},
                {"text": "done"},
            ]
        },
    )
    run_id = pipeline.client.submit(spec)
    # in its call
    wait_until(
        lambda: (budget_view(pipeline.redis, run_id) or {}).get("model_calls") == 1, step=0.02
    )
    emergency_stop(pipeline.redis, run_id, "ops", "look first", 1000)
    assert pipeline.client.status(run_id).status == "budget_stopped"
    # the read-only tool ran
    wait_until(lambda: budget_view(pipeline.redis, run_id)["tool_calls"] == 1)
    # the worker polls every 0.5 s while it waits for the reset
    time.sleep(2.0)
    refusals = [e for e in recent(pipeline.redis, 500, run_id=run_id) if e.type == "budget_refused"]
    assert len(refusals) == 1 and refusals[0].data["code"] == "budget_stopped"
    assert pipeline.client.status(run_id).status == "budget_stopped"
    reset_stop(pipeline.redis, run_id, "ops", "looked", 1000)
    envelope = pipeline.wait(run_id, 30)
    state = pipeline.client.status(run_id)
    assert envelope.termination.reason == "success" and envelope.output == "done"
    assert [h.event for h in state.history if h.event.startswith("budget_")] == [
        "budget_stopped",
        "budget_reset",
    ]


def test_the_guard_enforces_the_users_daily_limits_mother_set_not_the_documents(
    r: redis.Redis,
) -> None:
    """The user's daily document is written by the guard (workers), so the limits it is checked against come
    from the run's limits document (Mother's): raising them in the daily document by hand changes nothing."""
    settings = SETTINGS.model_copy(deep=True)
    settings.budget.per_user_daily.max_total_tokens = 100
    guard = _open(r, "daily-1", settings)
    day = ServerClock(r).today()
    op = guard.reserve_model_call(max_tokens=60, max_spend_micro_usd=0, cloud=False)
    guard.settle_model_call(op, input_tokens=50, output_tokens=50, spend=0)
    r.execute_command(
        "JSON.SET", keys.user_daily_budget_key("u1", day), "$.limits.total_tokens", 10**9
    )
    with pytest.raises(BudgetExhausted, match=r"budget_user_daily_token_exceeded \(100/100\)"):
        guard.reserve_model_call(max_tokens=10, max_spend_micro_usd=0, cloud=False)


def test_the_wall_clock_warns_at_its_ratio_and_its_deadline_is_a_recorded_crossing(
    pipeline,
) -> None:
    """A run limited to 2 s that works longer: its budget records budget_wall_clock_warning at the profile's
    ratio (an activity entry with it) and budget_wall_clock_exceeded with its figures when the deadline ends
    it `timeout` (neither was ever recorded: the wall clock was checked only by the next charge)."""
    spec = example(
        "cancelled",
        pipeline=[{"name": "execute", "role": "crawler", "model": "scripted"}],
        limit_overrides={"duration_seconds": 2},
        scripts={"crawler": [{"text": "slow", "delay_seconds": 20}]},
    )
    run_id = pipeline.client.submit(spec)
    record = pipeline.wait(run_id, 30).termination
    doc = budget_view(pipeline.redis, run_id)
    warnings = [
        e.data for e in recent(pipeline.redis, 200, run_id=run_id) if e.type == "budget_warning"
    ]
    assert record.reason == "timeout"
    assert "budget_wall_clock_warning" in doc["warnings_triggered"]
    assert doc["limits_exceeded"] == ["budget_wall_clock_exceeded"]
    [crossing] = doc["limit_crossings"]
    assert (crossing["code"], crossing["max"]) == ("budget_wall_clock_exceeded", 2)
    assert crossing["current"] >= 2
    assert [w["code"] for w in warnings] == ["budget_wall_clock_warning"]
    assert warnings[0]["ratio"] == 0.8


@pytest.mark.parametrize(
    ("profile", "wall_clock", "tokens"),
    [("conservative", 900, 80_000), ("balanced", 1800, 180_000), ("extended", 3600, 360_000)],
)
def test_a_runs_profile_sets_its_wall_clock_and_tokens_over_the_defaults(
    r: redis.Redis, profile: str, wall_clock: int, tokens: int
) -> None:
    """The profile's wall clock and token estimate are the run's limits (the resilience defaults,
    600 s and 200,000 tokens, fill only what a profile does not set: turns, spend, spawns, depth),
    named as the profile's in the limits' sources; a limit override still lowers them."""
    _open(r, f"prof-{profile}", profile=profile)
    doc = _doc(r, f"prof-{profile}")
    assert doc["limits"]["duration_sec"] == wall_clock
    assert doc["limits"]["total_tokens"] == tokens
    assert doc["limits"]["model_calls"] == 15
    assert doc["limit_sources"]["duration_sec"] == f"budget.profiles.{profile}"
    assert doc["limit_sources"]["total_tokens"] == f"budget.profiles.{profile}"
    assert resolve_for_spec(SETTINGS, _spec("x", profile))["duration_seconds"] == wall_clock
    _open(r, f"prof-{profile}-o", profile=profile, duration_seconds=120, tokens=5000)
    lowered = _doc(r, f"prof-{profile}-o")
    assert (lowered["limits"]["duration_sec"], lowered["limits"]["total_tokens"]) == (120, 5000)
    assert lowered["limit_sources"]["duration_sec"] == "limit_overrides (duration_seconds)"
