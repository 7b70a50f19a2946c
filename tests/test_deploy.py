"""deploy/users.acl loaded into the real server: runs work end to end with Mother and workers on their own
users, and a worker's credentials decide nothing about runs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis

from mother import calls, keys
from mother.acl import MUST_NOT, NEEDS, PROBE_HOST, WORKER_GAPS, check
from mother.attempt_users import attempt_client
from mother.budget import override
from mother.client import MotherClient
from mother.clock import ServerClock
from mother.config import load_settings
from mother.connection import connect
from mother.records.artifacts import artifact_control
from mother.records.tools import read_stats
from mother.server import EmbeddedRedis
from mother.stack import LocalStack
from tests.conftest import FAST_ENV, as_user, attacker_attempt, beating, run_cli, start_acl_stack
from tests.test_pipeline import example, wait_until

ACL = Path(__file__).resolve().parents[1] / "deploy" / "users.acl"
# what the shipped worker user can still do to runs it does not hold: RQ's own keys (a denial of service:
# Mother dispatches a deleted or moved job again); everything else moved to the attempts' own users and
# the hosts' (issue 53)
GAPS_OPEN = [what for what, _ in WORKER_GAPS]


_as = as_user


@pytest.fixture(scope="module")
def acl_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, MotherClient]]:
    """The embedded server with the shipped ACL file; Mother on the mother user, two workers on the worker user."""
    server, stack = start_acl_stack(tmp_path_factory.mktemp("acl"))
    try:
        yield server.url, MotherClient(settings=load_settings(redis_url=_as(server.url, "mother")))
    finally:
        stack.stop()
        server.stop()


def test_the_shipped_acl_runs_multi_phase_runs_with_tools_and_a_child(
    acl_stack: tuple[str, MotherClient],
) -> None:
    """With users.acl loaded, Mother as `mother` and workers as `worker` run a three-phase run whose first phase
    writes and lists files and spawns a child run: all succeed (the worker user could not read
    context:{run}:{i}, so every run ended retries_exhausted)."""
    _url, client = acl_stack
    plain = client.submit(example("three-phase"))
    busy = client.submit(
        example(
            "three-phase",
            limit_overrides={"depth": 2, "spend": "1.00"},
            scripts={
                "planner": [
                    {
                        "tool_calls": [
                            {
                                "name": "write_file",
                                "arguments": {"path": "notes.txt", "content": "x"},
                            },
                            {"name": "list_dir", "arguments": {}},
                        ]
                    },
                    {
                        "tool_calls": [
                            {
                                "name": "spawn_run",
                                "arguments": {"role": "helper", "task": "t", "budget": "0.10"},
                            }
                        ]
                    },
                    {"text": "parent planned"},
                ],
                "helper": [{"text": "child done"}],
                "coder": [{"text": "coded"}],
                "critic": [{"text": "ok"}],
            },
        )
    )
    for run_id in (plain, busy):
        record = client.wait(run_id, 60).termination
        assert (record.reason, record.details) == ("success", "All 3 phases completed")
    children = [k.split(":", 1)[1] for k in client.redis.scan_iter(match=f"run:{busy}.c*")]
    assert len(children) == 1 and client.result(children[0]).output == "child done"
    # the attempts counted their tool calls in their own hashes, which Mother added to tool_stats:*
    # (mother/effects.py); the tools came from the registry Mother synced (registry:tools)
    stats = wait_until(
        lambda: (
            len(s := read_stats(client.redis, ["write_file", "list_dir"])) == 2
            and s["write_file"].success_count >= 2
            and s
        )
    )
    assert stats["write_file"].success_count >= 2 and stats["list_dir"].success_count >= 1
    assert client.redis.exists(keys.TOOLS_REGISTRY)


def test_a_workers_credentials_decide_nothing_about_runs(
    acl_stack: tuple[str, MotherClient],
) -> None:
    """As the worker user: no termination, run, result or limits write, no command on mother:commands, no read of
    an attempt token (only its one-time claim), no function of its own, no flush; a server function cannot write
    past the ACL either (raising its own limit through mh_override, ending a run through mh_terminate)."""
    url, client = acl_stack
    run_id = client.submit(
        example("cancelled", scripts={"crawler": [{"text": "done", "delay_seconds": 3}]})
    )
    # includes the JSON-module check
    worker = connect(_as(url, "worker"))
    limits = keys.run_limits_key(run_id)
    for _ in range(100):
        if client.redis.exists(limits):
            break
        __import__("time").sleep(0.05)
    assert worker.execute_command("JSON.GET", keys.run_key(run_id), "$.status") == '["running"]'
    denied = [
        ("JSON.SET", keys.termination_key(run_id), "$", '{"reason":"success"}'),
        ("JSON.SET", keys.run_key(run_id), "$.status", '"terminated"'),
        ("JSON.SET", keys.result_key(run_id), "$", "{}"),
        ("JSON.SET", limits, "$.limits.tool_calls", "100000"),
        ("JSON.SET", keys.library_policy_key("lib"), "$", "{}"),
        (
            "XADD",
            keys.COMMANDS_STREAM,
            "*",
            "type",
            "cancel",
            "payload",
            orjson.dumps({"run_id": run_id}),
        ),
        ("GET", keys.host_token_key(PROBE_HOST, run_id, 0, 1)),
        (
            "EVAL",
            "return redis.call('JSON.SET', KEYS[1], '$.status', '\"x\"')",
            "1",
            keys.run_key(run_id),
        ),
        ("FUNCTION", "DELETE", "mother"),
        ("FLUSHALL",),
    ]
    for command in denied:
        with pytest.raises(redis.exceptions.NoPermissionError):
            worker.execute_command(*command)
    # a function cannot write past the ACL either
    with pytest.raises(redis.ResponseError, match="No permissions"):
        override(
            worker,
            run_id,
            dimension="tool_calls",
            delta=5,
            expires_in_s=60,
            actor="w",
            reason="r",
            maxlen=1000,
        )
    with pytest.raises(redis.ResponseError, match="No permissions"):
        calls.terminate(
            worker,
            run_id=run_id,
            reason="success",
            record=b"{}",
            envelope=b"{}",
            at="t",
            history=b"{}",
        )
    # nor the claim of a token: only the host Mother queued the attempt's job for may take it
    for host in client.redis.hkeys(keys.HOSTS_REGISTERED):
        with pytest.raises(redis.exceptions.NoPermissionError):
            worker.getdel(keys.host_token_key(host, run_id, 0, 1))
    assert client.wait(run_id, 30).termination.reason == "success"
    assert client.redis.execute_command("JSON.GET", limits, "$.limits.tool_calls") == "[180]"


def test_rq_commands_cannot_stop_another_runs_attempt_or_the_workers(
    acl_stack: tuple[str, MotherClient],
) -> None:
    """Before (issue 53): with the worker credentials, RQ's `kill-horse` published to the worker running a
    victim's attempt killed it (the run retried or ended), and `shutdown` stopped every worker. Now the
    worker user may publish on no channel, and the workers listen to no command: even credentials that
    may publish (the tests' administrator) reach no one. The victim's first attempt ends the run."""
    from rq.command import send_kill_horse_command, send_shutdown_command

    url, client = acl_stack
    run_id = client.submit(
        example("cancelled", scripts={"crawler": [{"text": "done", "delay_seconds": 2}]})
    )
    admin = connect(_as(url, "admin"))
    for _ in range(200):
        if not admin.exists(keys.run_key(run_id)):
            __import__("time").sleep(0.05)
            continue
        state = client.status(run_id)
        if state.status == "running" and admin.zscore(
            keys.HEARTBEATS, keys.heartbeat_member(run_id, state.phase_index, state.attempt)
        ):
            break
        __import__("time").sleep(0.05)
    worker = connect(_as(url, "worker"))
    names = sorted(n.removeprefix("rq:worker:") for n in admin.smembers("rq:workers"))
    assert names
    job_id = keys.phase_job_id(run_id, state.phase_index, state.attempt)
    for name in names:
        for send in (send_kill_horse_command, send_shutdown_command):
            with pytest.raises(redis.exceptions.NoPermissionError):
                send(worker, name)
        stop_job = orjson.dumps({"command": "stop-job", "job_id": job_id})
        with pytest.raises(redis.exceptions.NoPermissionError):
            worker.publish(f"rq:pubsub:{name}", stop_job)
        assert admin.execute_command("PUBSUB", "NUMSUB", f"rq:pubsub:{name}")[1] == 0
        send_kill_horse_command(admin, name)
        send_shutdown_command(admin, name)
    done = client.wait(run_id, 30)
    assert done.termination.reason == "success"
    assert client.status(run_id).attempt == 1
    # the workers still serve
    again = client.submit(example("cancelled", scripts={"crawler": [{"text": "done"}]}))
    assert client.wait(again, 30).termination.reason == "success"


def test_another_workers_credentials_cannot_make_an_attempt_lost(
    acl_stack: tuple[str, MotherClient],
) -> None:
    """Before (issue 53): with the worker credentials, aging a victim's member in `mother:heartbeats` ended
    its attempt in ~3 s, and its job id in RQ's failed registry failed it at the next tick. Now an attempt's
    liveness is its own key, writable only by its own ACL user (whose password is its one-time token);
    Mother's index is Mother's; and a failed-registry entry counts only when the attempt's key is gone.
    Neither the shared worker user nor another attempt's user can touch it: the victim's first attempt
    ends the run."""

    url, client = acl_stack
    run_id = client.submit(
        example("cancelled", scripts={"crawler": [{"text": "done", "delay_seconds": 4}]})
    )
    admin, worker = connect(_as(url, "admin")), connect(_as(url, "worker"))
    key = keys.attempt_heartbeat_key(run_id, 0, 1)
    for _ in range(200):
        if beating(admin.get(key)):
            break
        __import__("time").sleep(0.05)
    member = keys.heartbeat_member(run_id, 0, 1)
    for command in (
        ("ZADD", keys.HEARTBEATS, "0", member),
        ("ZREM", keys.HEARTBEATS, member),
        ("DEL", key),
        ("SET", key, "x", "PX", "1"),
        ("PEXPIRE", key, "1"),
        ("ACL", "DELUSER", keys.attempt_user(run_id, 0, 1)),
    ):
        with pytest.raises(redis.exceptions.NoPermissionError):
            worker.execute_command(*command)
    # an attempt's own user reaches its own key only
    other_run, other = attacker_attempt(client, admin, url)
    other.set(keys.attempt_heartbeat_key(other_run, 0, 1), "me", px=60_000)
    for command in (
        ("DEL", key),
        ("SET", key, "x", "PX", "1"),
        ("ZADD", keys.HEARTBEATS, "0", member),
    ):
        with pytest.raises(redis.exceptions.NoPermissionError):
            other.execute_command(*command)
    with pytest.raises(redis.exceptions.AuthenticationError):
        attempt_client(url, member, "a guessed token").ping()
    # the failed registry: any worker may write it, and it is not enough
    job_id = keys.phase_job_id(run_id, 0, 1)
    worker.zadd("rq:failed:agents", {job_id: 0})
    done = client.wait(run_id, 30)
    assert done.termination.reason == "success"
    state = client.status(run_id)
    assert state.attempt == 1 and not [h for h in state.history if h.event == "phase_retried"]


def _snapshot(
    admin: redis.Redis, run_id: str, user_id: str, day: str, artifact_id: str
) -> list[Any]:
    """What an attack on a run could change: its counters, its user's daily counters, its ledger node,
    its output artifact (content, metadata, expiry), its own activity, the violations and metrics."""
    pipe = admin.pipeline(transaction=False)
    for key in (
        keys.run_budget_key(run_id),
        keys.user_daily_budget_key(user_id, day),
        keys.ledger_key(run_id),
        keys.artifact_key(artifact_id),
        keys.artifact_meta_key(artifact_id),
    ):
        pipe.execute_command("JSON.GET", key)
    pipe.zscore(keys.ARTIFACT_EXPIRY, artifact_id)
    pipe.xlen(keys.run_activity_key(run_id))
    pipe.xlen(keys.EVENTS_STREAM)
    pipe.lrange(keys.SECURITY_VIOLATIONS, 0, -1)
    pipe.hgetall(keys.METRICS_COUNTERS)
    return list(pipe.execute())


def test_neither_a_workers_nor_another_attempts_credentials_rewrite_a_victim_run(
    acl_stack: tuple[str, MotherClient],
) -> None:
    """Issue 53's attacks on the records of a run that ended, made with the shared worker credentials and with
    the credentials of an attempt of another user's run: rewriting its counters, its user's daily counters,
    its ledger, its protected output artifact (content, protection, expiry, deletion), its own activity, the
    recorded violations and the metrics, trimming Mother's streams, and charging it through the budget
    guard. Every one is refused for permission, and the victim's records are byte for byte as they were.
    The attacking attempt's user may write its own run's counters (it is not refused for everything)."""
    url, client = acl_stack
    victim = client.submit(example("cancelled", scripts={"crawler": [{"text": "victim output"}]}))
    done = client.wait(victim, 60)
    assert done.termination.reason == "success"
    state = client.status(victim)
    admin, worker = connect(_as(url, "admin")), connect(_as(url, "worker"))
    artifact_id = state.results[0].artifacts[0]
    # the output's id comes from the attempt's token; Mother indexed its expiry at the dispatch
    assert artifact_id.startswith("art-") and len(artifact_id) == 24
    clock = ServerClock(client.redis)
    artifact_control(
        client.redis,
        "protect",
        artifact_id,
        run_id=victim,
        now_ms=clock.now_ms(),
        actor="compliance",
        reason="legal hold",
        star_protects=True,
        maxlen=1000,
    )
    user_id = state.spec.user_id
    day = clock.today()
    # an access log of the victim's (as its search_library would write it): audit, not to be rewritten
    log_key = keys.access_log_key(keys.access_log_id_prefix(victim) + "0123456789ab")
    admin.execute_command(
        "JSON.SET", log_key, "$", orjson.dumps({"run_id": victim, "granted": "no"})
    )
    mallory_run, mallory = attacker_attempt(client, admin, url)
    before = _snapshot(admin, victim, user_id, day, artifact_id)
    assert (
        before[0]
        and before[1]
        and before[3]
        and b'"protected":true' in (before[4].encode() if isinstance(before[4], str) else before[4])
    )
    # it may write its own run's counters: not a user refused everything
    mallory.execute_command("JSON.NUMINCRBY", keys.run_budget_key(mallory_run), "$.tool_calls", 0)
    attacks = [
        ("JSON.SET", keys.run_budget_key(victim), "$.tokens_used", "0"),
        ("JSON.NUMINCRBY", keys.run_budget_key(victim), "$.tokens_used", "100000"),
        ("DEL", keys.run_budget_key(victim)),
        ("JSON.SET", keys.user_daily_budget_key(user_id, day), "$.spend_micro_usd", "0"),
        ("JSON.SET", keys.ledger_key(victim), "$.spent_micro", "0"),
        ("JSON.SET", keys.artifact_key(artifact_id), "$.content", '"forged"'),
        ("JSON.SET", keys.artifact_meta_key(artifact_id), "$.protected", "false"),
        ("DEL", keys.artifact_key(artifact_id), keys.artifact_meta_key(artifact_id)),
        ("ZADD", keys.ARTIFACT_EXPIRY, "0", artifact_id),
        ("JSON.SET", log_key, "$.granted", '"yes"'),
        ("DEL", log_key),
        ("XTRIM", keys.run_activity_key(victim), "MAXLEN", "0"),
        ("XADD", keys.run_activity_key(victim), "MAXLEN", "0", "*", "type", "forged"),
        ("DEL", keys.run_activity_key(victim)),
        ("LTRIM", keys.SECURITY_VIOLATIONS, "1", "0"),
        ("HSET", keys.METRICS_COUNTERS, "mother_runs_total", "0"),
        ("HDEL", keys.METRICS_COUNTERS, "mother_runs_total"),
        ("XTRIM", keys.EVENTS_STREAM, "MAXLEN", "0"),
        ("DEL", keys.EVENTS_STREAM),
        ("XTRIM", keys.ACTIVITY_STREAM, "MAXLEN", "0"),
        ("DEL", keys.SUBMISSIONS_STREAM),
        (
            "FCALL",
            "mh_guard",
            "6",
            keys.run_budget_key(victim),
            keys.user_daily_budget_key(user_id, day),
            keys.ACTIVITY_STREAM,
            keys.run_limits_key(victim),
            keys.METRICS_COUNTERS,
            keys.run_activity_key(victim),
            "{}",
            "100",
        ),
    ]
    for who, conn in (("worker", worker), ("another attempt", mallory)):
        for command in attacks:
            with pytest.raises(redis.exceptions.NoPermissionError):
                conn.execute_command(*command)
                pytest.fail(f"{who} could {command[:2]}")
    assert _snapshot(admin, victim, user_id, day, artifact_id) == before
    assert orjson.loads(admin.execute_command("JSON.GET", log_key))["granted"] == "no"


def test_a_mother_whose_user_may_not_make_attempt_users_stops_in_one_line(
    acl_stack: tuple[str, MotherClient],
) -> None:
    """An ACL file from before issue 53 (Mother's user without ACL SETUSER/DELUSER/USERS): `mother run`
    stops at start naming what to grant, where every dispatch would have failed."""
    url, _client = acl_stack
    connect(_as(url, "admin")).execute_command(
        "ACL", "SETUSER", "oldmother", "on", ">CHANGE-ME-oldmother", "~*", "&*", "+@all", "-@dangerous",
        "+info", "+client|list", "+module|list",
    )  # fmt: skip
    got = run_cli("run", env={"MOTHER_REDIS_URL": _as(url, "oldmother")}, timeout=60)
    assert got.returncode == 2, got.stdout + got.stderr
    assert got.stderr.count("\n") == 1 and "+acl|setuser +acl|deluser +acl|users" in got.stderr


def test_neither_workers_nor_attempts_rewrite_what_every_run_counts(
    acl_stack: tuple[str, MotherClient],
) -> None:
    """Before (issue 53): the worker user could trim or delete `security:violations` and set, delete or
    reset the metrics; an attempt's holder could still `HINCRBY` the metrics or a model's calibration by a
    negative amount, `JSON.SET` a tool's statistics and `ZADD` another run's access log to another place
    on its library's timeline (where the GC prunes it). Now both may only append a violation; an attempt
    counts what it adds in its own `attempt_effects` hash, and Mother adds from it only additions: a
    negative count or another run's log there is refused and recorded as a violation."""
    url, client = acl_stack
    worker, admin = connect(_as(url, "worker")), connect(_as(url, "admin"))
    attacker_run, attacker = attacker_attempt(client, admin, url)
    stats, calibration = (
        keys.tool_stats_key("victim_tool"),
        keys.token_calibration_key("victim-model"),
    )
    timeline = keys.access_logs_key("victim-lib")
    admin.lpush(keys.SECURITY_VIOLATIONS, b'{"kind": "recorded before"}')
    admin.hset(keys.METRICS_COUNTERS, "victim_counter", 5)
    admin.execute_command("JSON.SET", stats, "$", '{"success_count": 9, "failure_count": 0}')
    admin.hset(calibration, mapping={"estimated": 100, "reported": 100, "samples": 5})
    admin.zadd(timeline, {"acc-victim-log": 1_000})

    def shared() -> tuple[Any, ...]:
        return (
            admin.hget(keys.METRICS_COUNTERS, "victim_counter"),
            admin.execute_command("JSON.GET", stats),
            admin.hgetall(calibration),
            admin.zrange(timeline, 0, -1, withscores=True),
        )

    before = shared()
    violations = admin.lrange(keys.SECURITY_VIOLATIONS, 0, -1)
    attacks = [
        ("LTRIM", keys.SECURITY_VIOLATIONS, "1", "0"),
        ("DEL", keys.SECURITY_VIOLATIONS),
        ("LSET", keys.SECURITY_VIOLATIONS, "0", "{}"),
        ("LPOP", keys.SECURITY_VIOLATIONS),
        ("RENAME", keys.SECURITY_VIOLATIONS, "x"),
        ("EXPIRE", keys.SECURITY_VIOLATIONS, "1"),
        ("HSET", keys.METRICS_COUNTERS, "victim_counter", "0"),
        ("HDEL", keys.METRICS_COUNTERS, "victim_counter"),
        ("HINCRBY", keys.METRICS_COUNTERS, "victim_counter", "-5"),
        ("DEL", keys.METRICS_COUNTERS),
        ("UNLINK", keys.METRICS_COUNTERS),
        ("PEXPIRE", keys.METRICS_COUNTERS, "1"),
        ("JSON.SET", stats, "$.success_count", "0"),
        ("FCALL", "mh_tool_stat", "2", stats, keys.METRICS_COUNTERS, "0", "1"),
        ("HINCRBY", calibration, "reported", "-99"),
        ("ZADD", timeline, "0", "acc-victim-log"),
        ("ZADD", timeline, "1", "acc-made-up"),
    ]
    for who, conn in (("worker", worker), ("attempt", attacker)):
        for command in attacks:
            with pytest.raises(redis.exceptions.NoPermissionError):
                conn.execute_command(*command)
            assert shared() == before, (who, command)
    assert admin.lrange(keys.SECURITY_VIOLATIONS, 0, -1) == violations
    # what they need still works: appending a violation
    assert worker.lpush(keys.SECURITY_VIOLATIONS, b'{"kind": "probe"}') == len(violations) + 1
    admin.lpop(keys.SECURITY_VIOLATIONS)
    # the attempt's own hash: Mother adds an addition, refuses a subtraction and another run's log
    effects = keys.attempt_effects_key(attacker_run, 0, 1)
    attacker.hincrby(effects, "m|victim_counter", -5)
    attacker.hincrby(effects, "m|attacker_counter", 2)
    attacker.hset(effects, "z|victim-lib|acc-victim-log", 0)
    attacker.hincrby(effects, "c|victim-model|reported", 100_000_000)
    attacker.hincrby(effects, "c|victim-model|estimated", 1)
    attacker.hincrby(effects, "c|victim-model|samples", 1)

    def refused() -> set[str]:
        found = (orjson.loads(v) for v in admin.lrange(keys.SECURITY_VIOLATIONS, 0, 50))
        return {
            v["field"]
            for v in found
            if v.get("kind") == "attempt_effects_refused" and v.get("key") == effects
        }

    assert wait_until(
        lambda: refused() >= {"m|victim_counter", "z|victim-lib|acc-victim-log", "c|victim-model"},
        timeout=30,
    )
    assert shared() == before
    assert admin.hget(keys.METRICS_COUNTERS, "attacker_counter") == "2"


def test_counters_an_attempt_sets_back_are_raised_again_before_the_next_attempt(
    acl_stack: tuple[str, MotherClient],
) -> None:
    """Before (issue 53): whoever held a phase attempt's credentials (a stolen token is enough) could set
    its run's counters and its user's counters for the day back to 0, and the run's next attempt could
    spend again what had been spent, past the run's limits. Now Mother keeps a floor under every counted
    dimension, raised at each dispatch: before the next attempt starts, a counter found below it is set
    back to it and recorded (`counter_lowered`)."""
    from mother.attempt_users import mint

    url, client = acl_stack
    admin = connect(_as(url, "admin"))
    spec = example(
        "three-phase",
        user_id="floor-user",
        scripts={
            "planner": [{"text": "planned", "usage": {"input_tokens": 1200, "output_tokens": 200}}],
            "coder": [{"fail": "raise", "delay_seconds": 1.5, "attempts": [1]}, {"text": "coded"}],
            "critic": [{"text": "ok"}],
        },
    )
    run_id = client.submit(spec)
    beat = keys.attempt_heartbeat_key(run_id, 1, 1)
    wait_until(lambda: beating(admin.get(beat)), timeout=30)
    today = ServerClock(admin).today()
    mint(admin, run_id, 1, 1, "held-token", "floor-user", today)
    holder = attempt_client(url, keys.heartbeat_member(run_id, 1, 1), "held-token")
    run_key, user_key = keys.run_budget_key(run_id), keys.user_daily_budget_key("floor-user", today)
    spent = orjson.loads(admin.execute_command("JSON.GET", run_key))
    assert spent["total_tokens"] >= 1400 and spent["model_calls"] >= 1
    holder.execute_command("JSON.SET", run_key, "$.total_tokens", "0")
    holder.execute_command("JSON.SET", run_key, "$.model_calls", "0")
    holder.execute_command("JSON.SET", user_key, "$.total_tokens", "0")
    assert client.wait(run_id, 60).termination.reason == "success"
    after = orjson.loads(admin.execute_command("JSON.GET", run_key))
    assert after["total_tokens"] >= spent["total_tokens"]
    assert after["model_calls"] >= spent["model_calls"]
    user = orjson.loads(admin.execute_command("JSON.GET", user_key))
    assert user["total_tokens"] >= spent["total_tokens"]
    found = [orjson.loads(v) for v in admin.lrange(keys.SECURITY_VIOLATIONS, 0, 200)]
    lowered = {
        (v["key"], v["dim"], v["was"])
        for v in found
        if v["kind"] == "counter_lowered" and v["run_id"] == run_id
    }
    assert lowered == {
        (run_key, "total_tokens", 0),
        (run_key, "model_calls", 0),
        (user_key, "total_tokens", 0),
    }


def test_attempts_append_to_mothers_streams_only_through_mother(
    acl_stack: tuple[str, MotherClient],
) -> None:
    """Before (issue 53): every attempt's user could XADD to mother:events, mother:spawns and activity, and
    an XADD may carry MAXLEN 0, which trims what every other run appended. Now no attempt may append to,
    trim or delete any of Mother's streams, nor take what others pushed to the activity inbox, nor publish
    on any channel but Mother's relay. What it may: push entries to the inbox (Mother moves them to the
    stream, dropping what is not an entry's fields), and name on the relay channel a key of its own that
    holds a result (Mother appends that): a word naming anything else appends nothing."""
    url, client = acl_stack
    admin = connect(_as(url, "admin"))
    attacker_run, attacker = attacker_attempt(client, admin, url)
    streams = (
        keys.EVENTS_STREAM,
        keys.SPAWNS_STREAM,
        keys.ACTIVITY_STREAM,
        keys.SUBMISSIONS_STREAM,
    )
    admin.rpush(keys.ACTIVITY_INBOX, orjson.dumps(["type", "pushed_before", "at", "x"]))
    attacks = [
        *(("XADD", s, "MAXLEN", "0", "*", "type", "noise") for s in streams),
        *(("XTRIM", s, "MAXLEN", "0") for s in streams),
        ("XDEL", keys.EVENTS_STREAM, "0-1"),
        ("DEL", keys.ACTIVITY_STREAM),
        ("LPOP", keys.ACTIVITY_INBOX),
        ("LTRIM", keys.ACTIVITY_INBOX, "1", "0"),
        ("DEL", keys.ACTIVITY_INBOX),
        ("LMOVE", keys.ACTIVITY_INBOX, keys.run_activity_key(attacker_run), "LEFT", "RIGHT"),
        ("PUBLISH", "rq:pubsub:any-worker", '{"command": "shutdown"}'),
        ("PUBLISH", "__keyspace@0__:run:x", "x"),
    ]
    for command in attacks:
        with pytest.raises(redis.exceptions.NoPermissionError):
            attacker.execute_command(*command)
    # what it may: entries pushed to the inbox, moved by Mother in order; items that are none, dropped
    mine = ["type", "attacker_entry", "at", "2026-01-01T00:00:00.000Z", "run_id", attacker_run]
    huge = orjson.dumps(["type", "huge", "data", "x" * 300_000])
    attacker.rpush(
        keys.ACTIVITY_INBOX, b"not json", orjson.dumps(["odd"]), orjson.dumps([1, 2]), huge
    )
    attacker.rpush(keys.ACTIVITY_INBOX, orjson.dumps(mine))
    wait_until(lambda: admin.llen(keys.ACTIVITY_INBOX) == 0, timeout=10)
    moved = [f for _, f in admin.xrevrange(keys.ACTIVITY_STREAM, count=200)]
    assert [f["type"] for f in moved if f["type"] in ("pushed_before", "attacker_entry")] == [
        "attacker_entry",
        "pushed_before",
    ]
    assert not [f for f in moved if f["type"] in ("not json", "odd", "1", "huge")]
    # the relay: words naming keys the attempt did not write append nothing; one naming its own result
    # key appends that (Mother reads it as any result: not one of a current attempt's, ignored)
    last = admin.xrevrange(keys.EVENTS_STREAM, count=1)
    after = f"({last[0][0]}" if last else "-"
    for word in (
        keys.attempt_result_key("victim", 0, 1),
        keys.spawn_request_key("victim.c0123abcd"),
        keys.run_key(attacker_run),
        "x" * 5000,
    ):
        attacker.publish(keys.RELAY_CHANNEL, word)
    own = keys.attempt_result_key(attacker_run, 0, 1)
    with pytest.raises(redis.exceptions.NoPermissionError):
        attacker.set(keys.attempt_result_key("victim", 0, 1), "{}")
    attacker.set(own, orjson.dumps({"payload": "{}", "token": "forged"}))
    assert attacker.publish(keys.RELAY_CHANNEL, own) >= 1

    def relayed() -> list[dict[str, str]]:
        return [f for _, f in admin.xrange(keys.EVENTS_STREAM, after) if f.get("token") == "forged"]

    assert wait_until(relayed, timeout=10) == [
        {"type": "phase_result", "payload": "{}", "token": "forged"}
    ]
    attacker.delete(own)


def test_doctor_names_the_acl_user_and_what_it_lacks(
    acl_stack: tuple[str, MotherClient], tmp_path: Path
) -> None:
    """`mother doctor` says which ACL user it is connected as; the shipped users lack nothing, and a worker user
    that cannot read composed contexts (the shipped file's old defect) is named with what it lacks."""
    url, _client = acl_stack
    for user in ("mother", "worker", "maintenance"):
        result = run_cli("doctor", env={"MOTHER_REDIS_URL": _as(url, user)})
        assert result.returncode == 0, result.stdout + result.stderr
        assert f"ACL user           {user} (checked for what a {user} needs)" in result.stdout
        shown = result.stdout.split("ACL user")[1]
        assert "FAIL" not in result.stdout and " can " not in shown.replace(" can still ", "")
        # issue 53: what a worker's credentials can still do to runs it does not hold, listed
        still = {
            line.split(" can still ", 1)[1].split(": a known gap")[0]
            for line in shown.splitlines()
            if " can still " in line
        }
        assert still == (set(GAPS_OPEN) if user == "worker" else set()), still
    # every gap listed is one a worker's connection can really do; RQ's commands are closed (issue 53)
    assert check(connect(_as(url, "worker")), role="worker").gaps == GAPS_OPEN
    connect(_as(url, "admin")).execute_command(
        "ACL",
        "SETUSER",
        "narrow",
        "on",
        ">CHANGE-ME-narrow",
        "resetkeys",
        "~budget:*",
        "~run:*",
        "+@all",
        "-@dangerous",
        "+info",
    )
    report = check(connect(_as(url, "narrow")), role="worker")
    assert (
        "read composed contexts" in report.lacks
        and "register its host (RPUSH hosts:hello)" in report.lacks
    )
    # it may write run:* keys: a worker's credentials must not
    assert "write run records (a waiting run's gate)" in report.excess
    assert {what for what, _ in NEEDS["worker"]} > set(report.lacks) and MUST_NOT["worker"]


def test_a_worker_started_before_mother_waits_for_the_functions_its_user_may_not_load(
    tmp_path: Path,
) -> None:
    """The worker user may not load the server functions: a worker that starts first (as in docker compose)
    waits for a Mother to load them, saying so, instead of failing; then runs work."""
    import time

    server = EmbeddedRedis(
        dir=tmp_path / "redis", appendfsync="no", extra_args=["--aclfile", str(ACL)]
    ).start()
    stack = LocalStack(
        _as(server.url, "mother"),
        workers=1,
        mothers=0,
        worker_url=_as(server.url, "worker"),
        log_dir=tmp_path / "logs",
        env={**FAST_ENV, "MOTHER_WORKER__WORKSPACE_ROOT": str(tmp_path / "ws")},
    )
    try:
        stack.start()
        log = tmp_path / "logs" / "worker-0.log"
        deadline = time.monotonic() + 20
        while (
            "waiting_for_server_functions" not in (log.read_text() if log.exists() else "")
            and time.monotonic() < deadline
        ):
            time.sleep(0.1)
        assert stack.alive() == {"worker-0": True}
        stack.spawn("mother-0", "run")
        client = MotherClient(settings=load_settings(redis_url=_as(server.url, "mother")))
        assert (
            client.wait(client.submit(example("three-phase")), 60).termination.reason == "success"
        )
    finally:
        stack.stop()
        server.stop()
    assert "waiting_for_server_functions" in log.read_text()


def test_the_maintenance_user_collects_and_the_worker_user_cannot_remove_run_records(
    acl_stack: tuple[str, MotherClient], tmp_path: Path
) -> None:
    """The GC job runs on a maintenance worker as the `maintenance` ACL user: it removes an ended run's
    records. The `worker` user may not: the GC's report names the refusal and the fix. The GC's user
    appends activity through the inbox (Mother moves its entries onto the stream) and only counts into
    the metrics: it may not trim, delete or XADD to the activity stream, take what others pushed to the
    inbox, rewrite the violations or set the metrics (issue 53: before, it could do all of those)."""
    from rq import Queue
    from rq.serializers import JSONSerializer

    from mother.errors import ConfigError
    from mother.runtime import Runtime
    from tests.test_pipeline import wait_until
    from workers.gc import collect

    url, client = acl_stack
    run_id = client.submit(example("three-phase"))
    assert client.wait(run_id, 60).termination.reason == "success"
    far = "2099-01-01T00:00:00.000Z"
    as_worker = connect(_as(url, "worker"))
    with pytest.raises(
        ConfigError, match="run the maintenance worker as the ACL user `maintenance`"
    ):
        collect(
            Runtime(settings=load_settings(redis_url=_as(url, "worker")), redis=as_worker),
            now_ms=4_070_908_800_000,
        )
    assert client.redis.exists(keys.run_key(run_id)) == 1
    maint = LocalStack(
        _as(url, "maintenance"),
        workers=1,
        mothers=0,
        queues="maintenance",
        log_dir=tmp_path / "logs",
        env=FAST_ENV,
    ).start()
    try:
        admin = redis.Redis.from_url(_as(url, "admin"))
        job = Queue("maintenance", connection=admin, serializer=JSONSerializer).enqueue_call(
            "workers.gc.run", kwargs={"now": far}
        )
        wait_until(lambda: job.get_status(refresh=True) in ("finished", "failed"), timeout=60)
        result = job.latest_result()
        assert job.get_status() == "finished", result.exc_string if result else None
        report = job.return_value()
        assert report["errors"] == [] and report["runs_removed"] >= 1
        assert client.redis.exists(keys.run_key(run_id)) == 0

        def collected() -> list[dict[str, str]]:
            entries = client.redis.xrevrange(keys.ACTIVITY_STREAM, count=500)
            return [f for _, f in entries if f["type"] == "run_records_removed"]

        assert wait_until(collected, timeout=10)
        assert client.redis.hget(keys.METRICS_COUNTERS, "gc_runs")
    finally:
        maint.stop()
    as_gc = connect(_as(url, "maintenance"))
    for command in (
        ("XADD", keys.ACTIVITY_STREAM, "MAXLEN", "0", "*", "type", "noise"),
        ("XTRIM", keys.ACTIVITY_STREAM, "MAXLEN", "0"),
        ("DEL", keys.ACTIVITY_STREAM),
        ("LPOP", keys.ACTIVITY_INBOX),
        ("DEL", keys.ACTIVITY_INBOX),
        ("LTRIM", keys.SECURITY_VIOLATIONS, "1", "0"),
        ("DEL", keys.SECURITY_VIOLATIONS),
        ("HSET", keys.METRICS_COUNTERS, "gc_runs", "0"),
        ("DEL", keys.METRICS_COUNTERS),
    ):
        with pytest.raises(redis.exceptions.NoPermissionError):
            as_gc.execute_command(*command)


def test_the_dashboard_runs_as_its_read_only_acl_user(acl_stack: tuple[str, MotherClient]) -> None:
    """The shipped `dashboard` user reads every page and /metrics, and can write nothing, read no attempt
    token and no library chunk by key."""
    from starlette.testclient import TestClient

    from mother.web import create_app

    url, client = acl_stack
    run_id = client.submit(example("three-phase"))
    assert client.wait(run_id, 60).termination.reason == "success"
    cfg = load_settings(redis_url=_as(url, "dashboard"))
    with TestClient(create_app(cfg)) as web:
        for path in ("/", "/?bucket=day", "/runs", f"/runs/{run_id}", "/waiting", "/metrics"):
            got = web.get(path)
            assert got.status_code == 200, (path, got.text[-500:])
        assert run_id in web.get("/runs").text
        assert 'mother_runs_terminated_total{reason="success"}' in web.get("/metrics").text
    as_dashboard = connect(_as(url, "dashboard"))
    report = check(as_dashboard)
    assert (report.role, report.lacks, report.excess) == ("dashboard", [], [])
    for command in (
        ("SET", keys.run_key(run_id), "x"),
        ("JSON.SET", keys.run_key(run_id), "$.status", '"running"'),
        ("XADD", keys.COMMANDS_STREAM, "*", "type", "cancel"),
        ("GET", keys.host_token_key(PROBE_HOST, run_id, 0, 1)),
        ("JSON.GET", keys.chunk_key("financials", "doc", 0)),
    ):
        with pytest.raises(redis.exceptions.NoPermissionError):
            as_dashboard.execute_command(*command)


def test_a_principal_submits_and_watches_with_its_own_acl_user(
    acl_stack: tuple[str, MotherClient],
) -> None:
    """A principal made by an administrator (`mother principals add`) submits a run on its own stream
    and follows it to its end; it cannot write run fate, Mother's streams, people's commands, budgets,
    claims, rate windows or tokens, and `mother doctor` as it finds nothing lacking or in excess."""
    from mother import principals
    from mother.cli.principals import principal_url
    from tests.test_pipeline import wait_until

    url, mother = acl_stack
    admin = connect(_as(url, "admin"))
    _, password = principals.add(
        admin, "alice", ["submit", "cancel"], [], "2026-11-27T00:00:00.000Z"
    )
    alice_url = principal_url(url, "alice", password)
    client = MotherClient(settings=load_settings(redis_url=alice_url))
    assert client.principal is not None and client.principal.name == "alice"
    wait_until(lambda: mother.redis.execute_command("FUNCTION", "LIST", "LIBRARYNAME", "mother"))
    run_id = client.submit(example("three-phase"))
    envelope = client.wait(run_id, 60)
    assert envelope.termination.reason == "success"
    state = client.status(run_id)
    assert state.status == "terminated" and state.submitted_by == "alice"
    assert state.entry_id is not None and state.entry_id.startswith("alice:")
    assert client.runs(user="alice", limit=5)[0]["run_id"] == run_id
    as_alice = connect(alice_url)
    for command in (
        ("JSON.SET", keys.run_key(run_id), "$.status", '"running"'),
        ("JSON.SET", keys.GLOBAL_BUDGET, "$.redis_memory_mb", "99999"),
        ("XADD", keys.COMMANDS_STREAM, "*", "type", "cancel"),
        ("XADD", keys.SUBMISSIONS_STREAM, "*", "spec", "{}"),
        ("XTRIM", keys.SUBMISSIONS_STREAM, "MAXLEN", "0"),
        ("PEXPIRE", keys.SUBMISSIONS_STREAM, "1"),
        ("DEL", keys.principal_submissions_key("alice")),
        ("XDEL", keys.principal_submissions_key("alice"), "0-1"),
        ("HSET", keys.RUN_CLAIMS, "squat", "1-0"),
        ("ZADD", keys.rate_limit_key("carol"), "1", "x"),
        ("GET", keys.host_token_key(PROBE_HOST, run_id, 0, 1)),
        ("JSON.SET", keys.run_limits_key(run_id), "$.status", '"open"'),
    ):
        with pytest.raises(redis.exceptions.NoPermissionError):
            as_alice.execute_command(*command)
    # a refusal names the command, the key and the ACL user, and the way out
    with pytest.raises(redis.exceptions.NoPermissionError) as refused:
        as_alice.execute_command("XADD", keys.COMMANDS_STREAM, "*", "type", "cancel")
    assert "XADD on mother:commands as ACL user 'alice'" in str(refused.value)
    stop = run_cli("budget", "stop", run_id, "--reason", "x", env={"MOTHER_REDIS_URL": alice_url})
    assert stop.returncode == 2 and stop.stderr.count("\n") == 1, stop.stderr
    assert "principal alice may not budget_stop" in stop.stderr
    doctor = run_cli("doctor", env={"MOTHER_REDIS_URL": alice_url})
    assert "ACL user           alice (checked for what a principal needs)" in doctor.stdout
    assert "FAIL" not in doctor.stdout and " can " not in doctor.stdout.split("ACL user")[1]


def test_agents_search_a_library_under_the_shipped_acl(
    acl_stack: tuple[str, MotherClient], tmp_path: Path
) -> None:
    """search_library, the agents' tool, works for the worker user of the shipped ACL file (it could
    not FT.SEARCH idx:chunks: every call failed, yet took the run's quota and left no audit record),
    for a library whose id holds '-' and '.' (a query syntax error before) and a query in German
    ('Gehälter' was split into 'geh' and 'lter' and found nothing)."""
    import uuid

    import yaml

    from mother.clock import ServerClock
    from mother.libraries.ingest import create_library

    _url, client = acl_stack
    examples = Path(__file__).resolve().parents[1] / "examples" / "libraries"
    data = yaml.safe_load((examples / "personal.yaml").read_text())
    data.update(library_id="hr.eu-1", library_name="HR EU")
    policy = tmp_path / "hr.yaml"
    policy.write_text(yaml.safe_dump(data))
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "gehalt.md").write_text(
        "# Gehälter 2026\n\nDie Gehälter steigen im März um drei Prozent.\n"
    )
    create_library(client.redis, policy, [docs], ServerClock(client.redis).now_iso())
    run_id = f"lib-{uuid.uuid4().hex[:8]}"
    call = {"name": "search_library", "arguments": {"library_id": "hr.eu-1", "query": "Gehälter"}}
    client.submit(
        {
            "run_id": run_id,
            "user_id": "alice",
            "task": "Wie steigen die Gehälter?",
            "libraries": ["hr.eu-1"],
            "pipeline": [{"name": "look", "role": "coder", "model": "scripted"}],
            "scripts": {
                "coder": [{"tool_calls": [call]}, {"text": "um drei Prozent", "confidence": 0.9}]
            },
        }
    )
    envelope = client.wait(run_id, 60)
    assert envelope.termination.reason == "success", envelope.termination.details

    def logs_of_run() -> list[dict[str, Any]]:
        logs = [
            orjson.loads(client.redis.execute_command("JSON.GET", keys.access_log_key(log_id)))
            for log_id in client.redis.zrange(keys.access_logs_key("hr.eu-1"), 0, -1)
        ]
        return [log for log in logs if log["run_id"] == run_id]

    # the agent's log reaches the library's timeline when Mother adds its attempt's (mother/effects.py)
    mine = wait_until(lambda: len(found := logs_of_run()) == 2 and found)
    # the phase's retrieval_hits (Mother's) and the agent's call (the worker's): both found it
    assert len(mine) == 2 and all(
        log["access_granted"] and log["retrieval_count"] >= 1 for log in mine
    )
    stats = read_stats(client.redis, ["search_library"])["search_library"]
    assert stats.success_count >= 1 and stats.failure_count == 0


def _as_host(url: str, host_id: str, password: str) -> redis.Redis:
    """A connection as a registered host's own ACL user (``host:{id}``: a name a URL cannot carry)."""
    return connect(url, check=False, username=keys.host_user(host_id), password=password)


def test_worker_credentials_take_no_token_mother_did_not_queue_for_their_host(
    tmp_path: Path,
) -> None:
    """Before (issue 53): with the worker credentials, `GETDEL attempt_token:{run}:{i}:{a}` took a queued
    attempt's one-time token before the worker that dequeued its job, and with it that attempt's ACL user
    and its result (the real worker recorded `attempt_token_missing`, the run was retried). Now Mother
    queues each phase job for one registered, live host, and puts its token where only that host's own
    user may take it. With the shipped ACL, while the victim's job waits (its hosts' processes stopped):
    the worker user reads or takes no token by any command; a host the attacker registers with the worker
    credentials takes none either; it cannot register a real host's id again with its own password (nor
    log in as that host), and junk hellos are refused and recorded. The victim's first attempt ends the
    run, its output intact, and no token went missing."""
    import hashlib
    import os
    import secrets
    import signal

    from mother.hosts import Hello

    server, stack = start_acl_stack(tmp_path)
    try:
        url = server.url
        client = MotherClient(settings=load_settings(redis_url=_as(url, "mother")))
        admin, worker = connect(_as(url, "admin")), connect(_as(url, "worker"))
        real = set(admin.hkeys(keys.HOSTS_REGISTERED))
        assert len(real) == 2
        # the attacker's own host, registered with the worker credentials; it never writes its line,
        # so Mother queues nothing for it
        thief_id, password = secrets.token_hex(8), secrets.token_urlsafe(16)
        worker.rpush(
            keys.HOST_HELLOS,
            Hello(thief_id, hashlib.sha256(password.encode()).hexdigest(), "thief", 4).to_json(),
        )
        thief = _as_host(url, thief_id, password)
        wait_until(lambda: _pings(thief), timeout=20)
        pools = [p for name, p in stack.procs.items() if name.startswith("worker-")]
        for pool in pools:
            os.killpg(pool.pid, signal.SIGSTOP)
        try:
            victim = client.submit(
                example("cancelled", user_id="victim", scripts={"crawler": [{"text": "victim's"}]})
            )
            token_key = wait_until(
                lambda: next(
                    (k for h in real if admin.exists(k := keys.host_token_key(h, victim, 0, 1))),
                    None,
                )
            )
            host = token_key.split(":")[1]
            queue = f"rq:queue:{keys.host_queue('agents', host)}"
            # (its job may already be popped by a stopped worker's blocked BLMOVE: its token waits)
            for who in (worker, thief):
                for command in (
                    ("GETDEL", token_key),
                    ("GET", token_key),
                    ("GETEX", token_key, "PERSIST"),
                    ("DUMP", token_key),
                    ("COPY", token_key, "rq:stolen"),
                    ("RENAME", token_key, "rq:stolen"),
                    ("SORT", queue, "BY", "nosort", "GET", token_key),
                    ("OBJECT", "ENCODING", token_key),
                ):
                    with pytest.raises(redis.exceptions.NoPermissionError):
                        who.execute_command(*command)
            # the real host's id again, with the attacker's password: refused, and no way in as it
            worker.rpush(
                keys.HOST_HELLOS,
                Hello(host, hashlib.sha256(password.encode()).hexdigest(), "again", 1).to_json(),
            )
            for junk in (b"not json", b'{"host": 1}', b"x" * 5000):
                worker.rpush(keys.HOST_HELLOS, junk)
            wait_until(lambda: admin.llen(keys.HOST_HELLOS) == 0)
            with pytest.raises(redis.exceptions.AuthenticationError):
                _as_host(url, host, password).ping()
            # the attacker's own host's key for the victim's attempt: nothing Mother put there
            assert thief.getdel(keys.host_token_key(thief_id, victim, 0, 1)) is None
        finally:
            for pool in pools:
                os.killpg(pool.pid, signal.SIGCONT)
        done = client.wait(victim, 60)
        assert done.termination.reason == "success"
        assert client.result(victim).output == "victim's"
        assert client.status(victim).attempt == 1
        kinds = [orjson.loads(v)["kind"] for v in admin.lrange(keys.SECURITY_VIOLATIONS, 0, -1)]
        assert kinds.count("host_hello_refused") == 4 and "attempt_token_missing" not in kinds
        assert admin.hget(keys.HOSTS_REGISTERED, host) is not None
        # the shared worker user has no token key at all, nor the attacker's host another's
        assert check(worker, role="worker").excess == []
    finally:
        stack.stop()
        server.stop()


def _pings(client: redis.Redis) -> bool:
    try:
        return bool(client.ping())
    except redis.exceptions.AuthenticationError:
        return False
