"""The trust boundary (issue 62): Mother is the only writer of run state; a worker host is an enrolled
identity that may touch only its own RQ keys, ask on its own stream and read its own replies. Each test
is an attack made with a host's leaked password (or a removed host's), with real processes: it gets or
decides no other host's attempt, writes nothing only Mother writes, reads no library chunk, delays no
other principal's run by flooding, and its GC asks delete nothing protected or live."""

from __future__ import annotations

import contextlib
import math
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis

from mother import keys
from mother.acl import check
from mother.clock import ServerClock
from mother.identities import hosts, party_url
from mother.streams import group_backlog
from tests.conftest import Pipeline, attacker_host, beating, paused, start_pipeline, stop_pipeline
from tests.test_pipeline import example, wait_until
from workers.asking import Asker

ACL = Path(__file__).resolve().parents[1] / "deploy" / "users.acl"
MALLORY = "mallory-host"


@pytest.fixture(scope="module")
def p(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pipeline]:
    """Mother and one real worker host (local-0); the attacker enrolls hosts of its own in each test."""
    pipeline = start_pipeline(tmp_path_factory.mktemp("boundary"), mothers=1, workers=1)
    try:
        yield pipeline
    finally:
        stop_pipeline(pipeline)


def _slow(seconds: float) -> dict[str, Any]:
    return example(
        "worker-killed", scripts={"writer": [{"text": "finished", "delay_seconds": seconds}]}
    )


def _running(p: Pipeline, run_id: str) -> str:
    """The host running ``run_id``'s first attempt, once it has begun."""
    key = keys.attempt_heartbeat_key(run_id, 0, 1)
    wait_until(lambda: beating(p.redis.get(key)), timeout=30)
    return str(p.redis.get(key)).split(":")[0]


def _asker(client: redis.Redis, name: str = MALLORY) -> Asker:
    return Asker(client, name, timeout_seconds=20)


@contextlib.contextmanager
def _beating_free(client: redis.Redis, name: str) -> Iterator[None]:
    """Host ``name`` beats every 0.5 s claiming 8 free workers for the block (a single beat may lapse
    before Mother queues a job on a loaded machine)."""
    stop = threading.Event()
    asker = Asker(redis.Redis(connection_pool=client.connection_pool), name, timeout_seconds=20)

    def beat() -> None:
        while not stop.is_set():
            line = {"concurrency": 8, "busy": 0, "workers": 8}
            asker.ask("beat", {"attempts": [], "line": line}, wait=False)
            stop.wait(0.5)

    beater = threading.Thread(target=beat, daemon=True)
    beater.start()
    try:
        yield
    finally:
        stop.set()
        beater.join(timeout=10)


def _forged(run_id: str, index: int = 0, attempt: int = 1) -> dict[str, Any]:
    return {
        "run_id": run_id,
        "phase": "execute",
        "phase_index": index,
        "attempt": attempt,
        "status": "completed",
        "output": "FORGED by mallory",
        "confidence": 1.0,
        "artifacts": [keys.phase_artifact_id(run_id, index, attempt)],
        "finished_at": "2026-12-01T00:00:00.000Z",
    }


def _violations(p: Pipeline, kind: str) -> list[dict[str, Any]]:
    found = [orjson.loads(v) for v in p.redis.lrange(keys.SECURITY_VIOLATIONS, 0, -1)]
    return [v for v in found if v["kind"] == kind]


def test_the_shipped_acl_file_keeps_no_shared_worker_or_maintenance_user() -> None:
    """A leaked shared `worker` password let anyone register a host, be dispatched another principal's
    run and forge its result. deploy/users.acl now defines Mother's user, the dashboard's and an
    administrator template only: a worker host is enrolled (`mother hosts add`), its own ACL user."""
    users = [line.split()[1] for line in ACL.read_text().splitlines() if line.startswith("user ")]
    assert users == ["default", "mother", "dashboard", "admin"]
    assert "user default off" in ACL.read_text() and "user admin off " in ACL.read_text()


def test_a_leaked_host_password_gets_and_decides_no_other_hosts_attempt(p: Pipeline) -> None:
    """With an enrolled host's leaked password an attacker reads nothing of a run another host runs (its
    queue, its job, its stream, its replies, the run's record and context), sends no RQ command to that
    host's workers, and every ask it makes about that attempt on its own stream is refused: its begin
    gets no run record, its forged result, charge and activity entry change nothing (each recorded as a
    violation naming the attacker's host), and a beat saying the attempt died does not end it. Bob's run
    ends on its first attempt with its own output."""
    name, mallory = attacker_host(p.redis, p.url)
    run_id = p.client.submit(_slow(3))
    victim = _running(p, run_id)
    assert victim != name
    job = keys.phase_job_id(victim, run_id, 0, 1)
    reply_key = keys.host_reply_key(victim, "0" * 16)
    for command in (
        ("LRANGE", f"rq:queue:{keys.host_queue(victim, 'agents')}", "0", "-1"),
        ("LPOP", f"rq:queue:{keys.host_queue(victim, 'agents')}"),
        ("HGETALL", f"rq:job:{job}"),
        ("HSET", f"rq:job:{job}", "status", "finished"),
        ("DEL", f"rq:job:{job}"),
        ("ZADD", f"rq:wip:{keys.host_queue(victim, 'agents')}", "1", job),
        ("XADD", keys.host_asks_key(victim), "*", "k", "result"),
        ("XRANGE", keys.host_asks_key(victim), "-", "+"),
        ("LPOP", reply_key),
        ("BLPOP", reply_key, "0.01"),
        ("JSON.GET", keys.run_key(run_id)),
        ("JSON.GET", keys.context_key(run_id, 0)),
        ("JSON.GET", keys.run_budget_key(run_id)),
        ("GET", keys.attempt_heartbeat_key(run_id, 0, 1)),
        ("DEL", keys.attempt_heartbeat_key(run_id, 0, 1)),
        ("PUBLISH", f"rq:pubsub:{keys.host_worker_name(victim, 'w0')}", "{}"),
        ("XADD", keys.EVENTS_STREAM, "*", "type", "phase_result", "payload", "{}"),
    ):
        with pytest.raises(redis.exceptions.NoPermissionError):
            mallory.execute_command(*command)
    asker, ids = _asker(mallory), (run_id, 0, 1)
    begun = asker.ask("begin", {}, ids, raising=False)
    assert begun["code"] == "not_held" and "run" not in begun
    forged = asker.ask("result", {"result": _forged(run_id)}, ids, raising=False)
    assert forged["code"] == "not_held", forged
    charged = asker.ask("charge", {"action": {"add": {"total_tokens": 5}}}, ids, raising=False)
    assert charged["code"] == "not_held", charged
    said = asker.ask(
        "emit", {"type": "tool_success", "fields": {"note": "forged"}}, ids, raising=False
    )
    assert said["code"] == "not_held", said
    asker.ask("beat", {"died": [list(ids)], "attempts": []}, wait=False)
    done = p.wait(run_id, 60)
    assert done.termination.reason == "success" and done.output == "finished"
    state = p.client.status(run_id)
    assert state.attempt == 1 and not [h for h in state.history if h.event == "phase_retried"]
    seen = [v for v in _violations(p, "ask_for_another_hosts_attempt") if v["run_id"] == run_id]
    assert {v["ask"] for v in seen} == {"result", "charge", "emit"}
    assert all(v["host"] == name and v["held_by"] == victim for v in seen)


def test_a_rotated_or_removed_host_password_stops_working_at_once(p: Pipeline) -> None:
    """`mother hosts rotate` closes the host's connections and its old password connects no more;
    `mother hosts remove` deletes its ACL user and record: nothing it held is reachable with it."""
    name, mallory = attacker_host(p.redis, p.url, "leaked-host")
    old_url = mallory.connection_pool.connection_kwargs["password"]
    assert mallory.ping()
    now = ServerClock(p.redis).now_iso()
    hosts.rotate(p.redis, name, now)
    with pytest.raises(redis.exceptions.RedisError):
        mallory.ping()
    again = redis.Redis.from_url(party_url(p.url, keys.host_user(name), old_url))
    with pytest.raises(redis.exceptions.AuthenticationError):
        again.ping()
    password = hosts.rotate(p.redis, name, now)
    fresh = redis.Redis.from_url(party_url(p.url, keys.host_user(name), password))
    assert fresh.ping()
    hosts.remove(p.redis, name)
    with pytest.raises(redis.exceptions.RedisError):
        fresh.ping()
    with pytest.raises(redis.exceptions.AuthenticationError):
        redis.Redis.from_url(party_url(p.url, keys.host_user(name), password)).ping()
    assert keys.host_user(name) not in p.redis.execute_command("ACL", "USERS")
    assert not p.redis.exists(keys.host_key(name))


def test_no_host_writes_what_only_mother_writes(p: Pipeline) -> None:
    """A host enrolled for every queue may not write (or read) run state, budgets, artifacts, libraries,
    Mother's streams, violations, activity, counters or another host's things: `mother doctor`'s probes
    find nothing in excess, and the commands that did it before (the maintenance user trimmed a run's
    activity and appended a forged phase_completed; the worker user pushed 10,001 junk violations) are
    refused."""
    admin = p.redis
    _host, password = hosts.add(
        admin, "every-queue", ["agents", "tools", "maintenance"], ServerClock(admin).now_iso()
    )
    host = redis.Redis.from_url(
        party_url(p.url, keys.host_user("every-queue"), password), decode_responses=True
    )
    report = check(host)
    assert (report.role, report.lacks, report.excess) == ("host", [], [])
    run_id = p.client.submit(example("three-phase"))
    assert p.wait(run_id, 60).termination.reason == "success"
    art = p.client.status(run_id).artifacts[0]
    for command in (
        ("LPUSH", keys.SECURITY_VIOLATIONS, "junk"),
        ("LTRIM", keys.SECURITY_VIOLATIONS, "1", "0"),
        ("XADD", keys.run_activity_key(run_id), "*", "type", "phase_completed"),
        ("XTRIM", keys.run_activity_key(run_id), "MAXLEN", "0"),
        ("XADD", keys.ACTIVITY_STREAM, "*", "type", "noise"),
        ("ZREM", keys.RUNS_INDEX, run_id),
        ("ZREM", keys.user_runs_key("erin"), run_id),
        ("JSON.SET", keys.run_key(run_id), "$.status", '"running"'),
        ("JSON.SET", keys.termination_key(run_id), "$.reason", '"success"'),
        ("JSON.NUMINCRBY", keys.run_budget_key(run_id), "$.total_tokens", "-100"),
        ("HINCRBY", keys.METRICS_COUNTERS, "runs_terminated", "-1"),
        ("JSON.SET", keys.artifact_meta_key(art), "$.protected", "false"),
        ("DEL", keys.artifact_key(art)),
        ("JSON.SET", keys.TOOLS_REGISTRY, "$", "{}"),
        ("ZADD", keys.ARTIFACT_EXPIRY, "1", art),
        ("ZADD", keys.RUN_RETENTION, "1", run_id),
        ("FCALL", "mh_guard", "0"),
        ("EVAL", "return redis.call('DEL', KEYS[1])", "1", keys.run_key(run_id)),
        ("SCAN", "0"),
        ("KEYS", "*"),
        ("SUBSCRIBE", "mother:probe"),
        ("CONFIG", "SET", "maxmemory", "1"),
        ("FLUSHALL",),
        ("ACL", "SETUSER", keys.host_user("every-queue"), "~*"),
        ("CLIENT", "KILL", "USER", "default"),
        ("FUNCTION", "DELETE", "mother"),
        ("MONITOR",),
    ):
        with pytest.raises(redis.exceptions.NoPermissionError):
            host.execute_command(*command)
    assert p.wait(run_id, 5).termination.reason == "success"
    hosts.remove(admin, "every-queue")


def test_a_host_holding_an_attempt_charges_nothing_back(p: Pipeline) -> None:
    """Even for an attempt it holds (dispatched to it: the attacker's host beats claiming workers free,
    the real host's line lapsed), a host's charge may only add, in whole amounts, to known dimensions: a
    negative, fractional, non-finite or unknown amount, a clock or a budget override is refused in one
    line, and the run's counters are unchanged by it."""
    name, mallory = attacker_host(p.redis, p.url, "holding-host")
    asker = _asker(mallory, name)
    with paused(p), _beating_free(mallory, name):
        # the real host's line lapses; the attacker's, kept beating, is the only live one
        wait_until(lambda: p.redis.get(keys.host_alive_key("local-0")) is None, timeout=20)
        run_id = p.client.submit(example("three-phase"))
        queue = f"rq:queue:{keys.host_queue(name, 'agents')}"
        job = wait_until(lambda: mallory.lpop(queue), timeout=20)
        assert job == keys.phase_job_id(name, run_id, 0, 1)
        ids = (run_id, 0, 1)
        begun = asker.ask("begin", {}, ids)
        assert begun["run"]["run_id"] == run_id
        before = p.redis.execute_command("JSON.GET", keys.run_budget_key(run_id))
        for action in (
            {"add": {"total_tokens": -1000}},
            {"add": {"spend_micro_usd": -5}},
            {"add": {"total_tokens": 1.5}},
            {"add": {"total_tokens": math.inf}},
            {"add": {"duration_sec": 10}},
            {"add": {"made_up": 1}},
            {"user_add": {"total_tokens": -1}},
            {"reserve": {"op": "x", "dims": {"total_tokens": -10}}},
            {"now": 0},
            {"override": {"spend": "100"}},
        ):
            got = asker.ask("charge", {"action": action}, ids, raising=False)
            assert not got["ok"] and got["code"] == "invalid_spec", (action, got)
        assert p.redis.execute_command("JSON.GET", keys.run_budget_key(run_id)) == before
        assert asker.ask("charge", {"action": {"add": {"tool_calls": 1}}}, ids)["ok"]
        p.client.cancel(run_id, actor="test", reason="done")
        assert p.wait(run_id, 30).termination.reason == "user_cancelled"
    hosts.remove(p.redis, name)


def test_a_host_flooding_its_stream_delays_no_other_principals_run(p: Pipeline) -> None:
    """An attacker's host floods its own stream (50,000 words slowed another principal's run from 0.26 s
    to 24 s through the old relay): Mother serves the hosts' streams in turn, so bob's run on another host
    ends while most of the flood still waits."""
    name, mallory = attacker_host(p.redis, p.url, "flooding-host")
    stream = keys.host_asks_key(name)
    bogus = [[f"run-{i:05d}", 0, 1] for i in range(100)]
    body = orjson.dumps({"attempts": bogus})
    for _ in range(20):
        pipe = mallory.pipeline(transaction=False)
        for _ in range(500):
            pipe.xadd(stream, {"k": "beat", "id": "", "run": "", "i": "", "a": "", "b": body})
        pipe.execute()
    flood = p.redis.xlen(stream)

    def left() -> int | None:
        backlog = group_backlog(p.redis, stream, "mother")
        return None if backlog is None else backlog[0] + (backlog[1] or flood)

    # Mother has begun on the flood
    wait_until(lambda: (n := left()) is not None and n < flood, timeout=30)
    run_id = p.client.submit(example("three-phase"))
    assert p.wait(run_id, 60).termination.reason == "success"
    remaining = left()
    assert remaining is not None and remaining > flood // 2, (remaining, flood)
    hosts.remove(p.redis, name)
    p.redis.delete(stream)


def test_no_host_reads_a_library_chunk(p: Pipeline, tmp_path: Path) -> None:
    """Worker, host and attempt users could FT.SEARCH idx:chunks: every library's stored text. A host
    reads no chunk by key, by index, by cursor or by scan; it asks Mother (`library` asks, for an attempt
    it holds, under the run's library policy), and asks about another host's attempt are refused."""
    import yaml

    from mother.libraries.ingest import create_library

    examples = Path(__file__).resolve().parents[1] / "examples" / "libraries"
    data = yaml.safe_load((examples / "personal.yaml").read_text())
    data.update(library_id="secrets", library_name="Secrets")
    policy = tmp_path / "secrets.yaml"
    policy.write_text(yaml.safe_dump(data))
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "salaries.md").write_text("# Salaries\n\nThe CEO earns 1,234,567 a year.\n")
    create_library(p.redis, policy, [docs], ServerClock(p.redis).now_iso())
    chunk = next(iter(p.redis.scan_iter(match="chunk:secrets:*")))
    _name, mallory = attacker_host(p.redis, p.url, "reading-host")
    for command in (
        ("JSON.GET", chunk),
        ("GET", chunk),
        ("DUMP", chunk),
        ("FT.SEARCH", keys.CHUNK_INDEX, "*"),
        ("FT.AGGREGATE", keys.CHUNK_INDEX, "*", "LOAD", "1", "@text"),
        ("FT.PROFILE", keys.CHUNK_INDEX, "SEARCH", "QUERY", "*"),
        ("FT.INFO", keys.CHUNK_INDEX),
        ("SCAN", "0", "MATCH", "chunk:*"),
    ):
        with pytest.raises(redis.exceptions.NoPermissionError):
            mallory.execute_command(*command)
    run_id = p.client.submit(_slow(2))
    _running(p, run_id)
    got = _asker(mallory, "reading-host").ask(
        "library", {"library_id": "secrets", "query": "CEO"}, (run_id, 0, 1), raising=False
    )
    # refused before anything of the run is looked at (not even whether the library is one of its)
    assert got["code"] == "not_held" and "secrets" not in got["error"], got
    assert p.wait(run_id, 60).termination.reason == "success"
    hosts.remove(p.redis, "reading-host")


def test_the_gc_deletes_nothing_protected_or_live_whatever_its_host_asks(p: Pipeline) -> None:
    """A host enrolled for maintenance asks Mother for each GC step; Mother checks each item again as of
    its own clock: asked as of 2099, a live run's records, an ended run's not past retention, a
    protected artifact and one not yet expired all stay. A host not enrolled for maintenance is refused
    any GC step."""
    admin = p.redis
    _host, password = hosts.add(admin, "gc-host", ["maintenance"], ServerClock(admin).now_iso())
    gc = _asker(
        redis.Redis.from_url(
            party_url(p.url, keys.host_user("gc-host"), password), decode_responses=True
        ),
        "gc-host",
    )
    ended = p.client.submit(example("three-phase"))
    assert p.wait(ended, 60).termination.reason == "success"
    protected, young = p.client.status(ended).artifacts[:2]
    admin.execute_command("JSON.SET", keys.artifact_meta_key(protected), "$.protected", "true")
    admin.zadd(keys.ARTIFACT_EXPIRY, {protected: 1})
    live = p.client.submit(_slow(3))
    _running(p, live)
    far = 4_070_908_800_000
    begun = gc.ask("gc", {"op": "begin", "now": far})
    report = begun["key"]
    forget = gc.ask("gc", {"op": "forget", "now": far, "key": report, "ids": [live, ended]})
    assert forget.get("forgotten", []) == []
    expire = gc.ask("gc", {"op": "expire", "now": far, "key": report, "ids": [protected, young]})
    assert expire["delta"]["protected"] == 1
    gc.ask("gc", {"op": "archive", "now": far, "key": report, "ids": [young]})
    for key in (
        keys.run_key(live),
        keys.run_key(ended),
        keys.artifact_key(protected),
        keys.artifact_key(young),
    ):
        assert admin.exists(key), key
    assert p.wait(live, 60).termination.reason == "success"
    _name, other = attacker_host(admin, p.url, "agents-host")
    refused = _asker(other, "agents-host").ask("gc", {"op": "begin", "now": far}, raising=False)
    assert refused["code"] == "not_maintenance"
    for name in ("gc-host", "agents-host"):
        hosts.remove(admin, name)
