"""deploy/users.acl loaded into the real server: runs work end to end with Mother on its own user and
enrolled worker hosts on theirs; `mother doctor` checks every role; the dashboard only reads; a principal
submits on its own stream; the GC runs on a maintenance host. The attacks on a host's credentials are in
tests/test_boundary.py."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis

from mother import keys
from mother.acl import check, host_must_not, host_needs, mother_lacks
from mother.client import MotherClient
from mother.config import load_settings
from mother.connection import connect
from mother.records.tools import read_stats
from tests.conftest import as_user, attacker_host, run_cli, start_acl_stack
from tests.test_pipeline import example, wait_until

_as = as_user
ACL = Path(__file__).resolve().parents[1] / "deploy" / "users.acl"


@pytest.fixture(scope="module")
def acl_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, MotherClient]]:
    """The embedded server with the shipped ACL file; Mother on the mother user, two enrolled hosts."""
    server, stack = start_acl_stack(tmp_path_factory.mktemp("acl"))
    try:
        yield server.url, MotherClient(settings=load_settings(redis_url=_as(server.url, "mother")))
    finally:
        stack.stop()
        server.stop()


def test_the_shipped_acl_runs_multi_phase_runs_with_tools_and_a_child(
    acl_stack: tuple[str, MotherClient],
) -> None:
    """With users.acl loaded, Mother as `mother` and workers as enrolled hosts (`host:local-N`) run a
    three-phase run whose first phase writes and lists files and spawns a child run: all succeed."""
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
    # the hosts asked Mother to count their tool calls (tool_stat asks); the tools came from the registry
    # Mother synced (registry:tools)
    stats = wait_until(
        lambda: (
            len(s := read_stats(client.redis, ["write_file", "list_dir"])) == 2
            and s["write_file"].success_count >= 2
            and s
        )
    )
    assert stats["write_file"].success_count >= 2 and stats["list_dir"].success_count >= 1
    assert client.redis.exists(keys.TOOLS_REGISTRY)


def test_doctor_checks_every_role_and_names_what_a_user_lacks_or_may_do(
    acl_stack: tuple[str, MotherClient],
) -> None:
    """`mother doctor` says which ACL user it is connected as and checks it for its role: Mother's and the
    dashboard's shipped users and an enrolled host's lack nothing and may do nothing they must not. A
    host user made narrower than enrollment makes it is named with what it lacks; one made wider, with
    what it may do and must not (read run records, write budgets, another host's stream)."""
    url, _client = acl_stack
    from mother.identities import hosts, party_url

    admin = connect(_as(url, "admin"))
    name = "doctor-host"
    _host, password = hosts.add(admin, name, ["agents"], "2026-12-01T00:00:00.000Z")
    host_url = party_url(url, keys.host_user(name), password)
    for who, role, env_url in (
        ("mother", "mother", _as(url, "mother")),
        ("dashboard", "dashboard", _as(url, "dashboard")),
        (keys.host_user(name), "host", host_url),
    ):
        result = run_cli("doctor", env={"MOTHER_REDIS_URL": env_url})
        assert result.returncode == 0, result.stdout + result.stderr
        assert f"ACL user           {who} (checked for what a {role} needs)" in result.stdout
        shown = result.stdout.split("ACL user")[1]
        assert "FAIL" not in result.stdout and " can " not in shown, shown
    assert check(connect(host_url)).role == "host"
    # narrower: its own stream taken away
    admin.execute_command(
        "ACL", "SETUSER", keys.host_user(name), "resetkeys", "clearselectors", f"~rq:queue:{name}.*"
    )
    report = check(connect(host_url))
    assert "ask Mother on its own stream" in report.lacks and report.excess == []
    # wider: every key
    admin.execute_command("ACL", "SETUSER", keys.host_user(name), "~*", "+@all")
    report = check(connect(host_url))
    assert report.lacks == []
    assert {"read run records", "write budget counters", "ask on another host's stream"} <= set(
        report.excess
    )
    assert set(report.excess) <= {what for what, _ in host_must_not(name)}
    assert {what for what, _ in host_needs(name)}
    hosts.remove(admin, name)


def test_a_mother_whose_user_may_not_make_acl_users_stops_in_one_line(
    acl_stack: tuple[str, MotherClient],
) -> None:
    """A Mother user without ACL SETUSER and ACL USERS (an ACL file of before the enrolled hosts):
    `mother run` stops at its start naming what it may not do and what to grant, where every host's user
    lost in a restart would stay lost. With service.make_acl_users off (a managed server's ACLs) it
    needs neither."""
    url, _client = acl_stack
    admin = connect(_as(url, "admin"))
    admin.execute_command(
        "ACL", "SETUSER", "oldmother", "on", ">CHANGE-ME-oldmother", "~*", "&*", "+@all", "-@dangerous",
        "+info", "+client|list", "+module|list",
    )  # fmt: skip
    got = run_cli("run", env={"MOTHER_REDIS_URL": _as(url, "oldmother")}, timeout=60)
    assert got.returncode == 2, got.stdout + got.stderr
    assert got.stderr.count("\n") == 1 and "+acl|setuser +acl|users" in got.stderr
    assert "ACL user 'oldmother'" in got.stderr and "(ACL SETUSER)" in got.stderr
    oldmother = connect(_as(url, "oldmother"))
    assert mother_lacks(oldmother, make_acl_users=False) == []
    assert mother_lacks(connect(_as(url, "mother")), make_acl_users=True) == []
    admin.execute_command("ACL", "DELUSER", "oldmother")


def test_the_gc_runs_on_a_maintenance_host_and_no_host_removes_run_records(
    acl_stack: tuple[str, MotherClient],
) -> None:
    """The GC job runs on an enrolled host that serves maintenance, as that host's ACL user: it reads
    which ids are due and asks Mother to remove an ended run's records (`gc` asks), which Mother checks
    and applies as of its own clock: a run past its retention goes, and one not yet past it stays though
    the job asks as of 2099. The host itself may not delete, trim or write any run's records, Mother's
    activity, the violations or the metrics."""
    from rq import Queue
    from rq.serializers import JSONSerializer

    url, client = acl_stack
    due, kept = (client.submit(example("three-phase")) for _ in range(2))
    for run_id in (due, kept):
        assert client.wait(run_id, 60).termination.reason == "success"
    admin = redis.Redis.from_url(_as(url, "admin"))
    # past its retention
    admin.zadd(keys.RUN_RETENTION, {due: 1})
    host = "local-0"
    job = Queue(
        keys.host_queue(host, "maintenance"), connection=admin, serializer=JSONSerializer
    ).enqueue_call(
        "workers.gc.run",
        kwargs={"now": "2099-01-01T00:00:00.000Z"},
        job_id=keys.host_job_id(host, "gc-test"),
    )
    wait_until(lambda: job.get_status(refresh=True) in ("finished", "failed"), timeout=60)
    result = job.latest_result()
    assert job.get_status() == "finished", result.exc_string if result else None
    report = job.return_value()
    assert report["errors"] == [] and report["runs_removed"] >= 1
    assert client.redis.exists(keys.run_key(due)) == 0
    assert client.redis.exists(keys.run_key(kept)) == 1

    def collected() -> list[dict[str, str]]:
        entries = client.redis.xrevrange(keys.ACTIVITY_STREAM, count=500)
        return [f for _, f in entries if f["type"] == "run_records_removed"]

    assert wait_until(collected, timeout=10)
    assert client.redis.hget(keys.METRICS_COUNTERS, "gc_runs")
    _name, as_host = attacker_host(connect(_as(url, "admin")), url, "gc-thief")
    for command in (
        ("DEL", keys.run_key(kept)),
        ("JSON.DEL", keys.run_key(kept)),
        ("DEL", keys.termination_key(kept)),
        ("ZREM", keys.RUNS_INDEX, kept),
        ("ZADD", keys.RUN_RETENTION, "1", kept),
        ("XADD", keys.ACTIVITY_STREAM, "MAXLEN", "0", "*", "type", "noise"),
        ("XTRIM", keys.ACTIVITY_STREAM, "MAXLEN", "0"),
        ("DEL", keys.ACTIVITY_STREAM),
        ("LTRIM", keys.SECURITY_VIOLATIONS, "1", "0"),
        ("DEL", keys.SECURITY_VIOLATIONS),
        ("HSET", keys.METRICS_COUNTERS, "gc_runs", "0"),
        ("DEL", keys.METRICS_COUNTERS),
    ):
        with pytest.raises(redis.exceptions.NoPermissionError):
            as_host.execute_command(*command)
    assert client.redis.exists(keys.run_key(kept)) == 1


def test_the_dashboard_runs_as_its_read_only_acl_user(acl_stack: tuple[str, MotherClient]) -> None:
    """The shipped `dashboard` user reads every page and /metrics, and can write nothing, ask nothing of
    Mother as a host and read no library chunk by key."""
    from starlette.testclient import TestClient

    from mother.web import create_app

    url, client = acl_stack
    run_id = client.submit(example("three-phase"))
    assert client.wait(run_id, 60).termination.reason == "success"
    cfg = load_settings(redis_url=_as(url, "dashboard"))
    with TestClient(create_app(cfg)) as web:
        for path in (
            "/",
            "/?bucket=day",
            "/runs",
            f"/runs/{run_id}",
            "/waiting",
            "/hosts",
            "/api/hosts",
            "/costs",
            "/api/costs",
            "/metrics",
        ):
            got = web.get(path)
            assert got.status_code == 200, (path, got.text[-500:])
        assert run_id in web.get("/runs").text
        hosts = {h["name"]: h for h in web.get("/api/hosts").json()}
        assert {n: h["state"] for n, h in hosts.items() if n.startswith("local-")} == {
            "local-0": "live",
            "local-1": "live",
        }
        assert sum(h["done_last_hour"] for h in hosts.values()) >= 3
        assert 'mother_runs_terminated_total{reason="success"}' in web.get("/metrics").text
    as_dashboard = connect(_as(url, "dashboard"))
    report = check(as_dashboard)
    assert (report.role, report.lacks, report.excess) == ("dashboard", [], [])
    for command in (
        ("SET", keys.run_key(run_id), "x"),
        ("JSON.SET", keys.run_key(run_id), "$.status", '"running"'),
        ("XADD", keys.COMMANDS_STREAM, "*", "type", "cancel"),
        ("XADD", keys.host_asks_key("local-0"), "*", "k", "beat"),
        ("LPOP", keys.host_reply_key("local-0", "0" * 16)),
        ("JSON.GET", keys.chunk_key("financials", "doc", 0)),
    ):
        with pytest.raises(redis.exceptions.NoPermissionError):
            as_dashboard.execute_command(*command)


def test_a_principal_submits_and_watches_with_its_own_acl_user(
    acl_stack: tuple[str, MotherClient],
) -> None:
    """A principal made by an administrator (`mother principals add`) submits a run on its own stream
    and follows it to its end; it cannot write run fate, Mother's streams, people's commands, budgets,
    claims, rate windows or hosts' streams, and `mother doctor` as it finds nothing lacking or in
    excess."""
    from mother.cli.identities import principal_url
    from mother.identities import principals

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
        ("XADD", keys.host_asks_key("local-0"), "*", "k", "beat"),
        ("LPOP", keys.host_reply_key("local-0", "0" * 16)),
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
    """search_library, the agents' tool, works on enrolled hosts under the shipped ACL file (a host may
    not read the chunks: it asks Mother, who searches and logs the access), for a library whose id holds
    '-' and '.' (a query syntax error before) and a query in German ('Gehälter' was split into 'geh'
    and 'lter' and found nothing)."""
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

    # the agent's search is Mother's (a library ask), logged on the library's timeline
    mine = wait_until(lambda: len(found := logs_of_run()) == 2 and found)
    # the phase's retrieval_hits (Mother's) and the agent's call (the worker's): both found it
    assert len(mine) == 2 and all(
        log["access_granted"] and log["retrieval_count"] >= 1 for log in mine
    )
    stats = read_stats(client.redis, ["search_library"])["search_library"]
    assert stats.success_count >= 1 and stats.failure_count == 0


def test_acl_export_prints_a_file_a_server_loads_with_every_enrolled_party(
    tmp_path: Path, redis_url: str
) -> None:
    """`mother acl export` prints the deployment's complete ACL file (the service users, then each
    enrolled host and principal with its password's SHA-256): a server that loads users only from a file
    (a managed Redis's console, `service.make_acl_users: false`) started with it lets the host and the
    principal in with their passwords, each with exactly its own rules, and nobody else."""
    from mother.clock import ServerClock
    from mother.identities import hosts, party_url, principals
    from mother.server import EmbeddedRedis
    from tests.conftest import cli

    admin = connect(redis_url)
    now = ServerClock(admin).now_iso()
    _host, host_password = hosts.add(admin, "export-host", ["agents"], now)
    _who, alice_password = principals.add(admin, "export-alice", ["submit"], [], now)
    try:
        got = cli("acl", "export", "--service-file", str(ACL), url=redis_url)
        assert got.exit_code == 0, got.output
        lines = got.stdout.splitlines()
        assert [line.split()[1] for line in lines[:4]] == [
            "default",
            "mother",
            "dashboard",
            "admin",
        ]
        host_line = next(line for line in lines if line.startswith("user host:export-host "))
        assert host_password not in got.stdout and alice_password not in got.stdout
        assert f"#{hashlib.sha256(host_password.encode()).hexdigest()}" in host_line
        loaded = tmp_path / "exported.acl"
        loaded.write_text(got.stdout)
        with EmbeddedRedis(
            dir=tmp_path / "other", appendfsync="no", extra_args=["--aclfile", str(loaded)]
        ) as other:
            as_host = redis.Redis.from_url(
                party_url(other.url, keys.host_user("export-host"), host_password)
            )
            as_host.xadd(keys.host_asks_key("export-host"), {"k": "beat"})
            with pytest.raises(redis.exceptions.NoPermissionError):
                as_host.execute_command("JSON.GET", keys.run_key("any"))
            as_alice = redis.Redis.from_url(party_url(other.url, "export-alice", alice_password))
            as_alice.xadd(keys.principal_submissions_key("export-alice"), {"spec": "{}"})
            with pytest.raises(redis.exceptions.NoPermissionError):
                as_alice.xadd(keys.SUBMISSIONS_STREAM, {"spec": "{}"})
            with pytest.raises(redis.exceptions.AuthenticationError):
                redis.Redis.from_url(
                    party_url(other.url, keys.host_user("export-host"), "guessed")
                ).ping()
        missing = cli("acl", "export", "--service-file", str(tmp_path / "none.acl"), url=redis_url)
        assert missing.exit_code != 0
    finally:
        hosts.remove(admin, "export-host")
        principals.remove(admin, "export-alice")


def test_a_lost_host_user_is_made_again_or_only_named_when_mother_makes_no_users(
    r: redis.Redis, redis_url: str, capfd: pytest.CaptureFixture[str]
) -> None:
    """A host's ACL user the server lost (a restart without saved ACLs, a failover) is made again from its
    record by the watchdog, said in the activity stream, and the host's password works again. With
    service.make_acl_users off (a managed Redis) Mother makes none: it names the missing user once,
    not at every check."""
    from mother.activity import recent
    from mother.clock import ServerClock
    from mother.config import load_settings
    from mother.functions import load_functions
    from mother.identities import hosts, party_url
    from mother.logs import configure_logging
    from mother.runtime import Runtime
    from mother.watchdog import Watchdog

    load_functions(r)
    configure_logging("INFO", "json")
    _host, password = hosts.add(r, "lost-host", ["agents"], ServerClock(r).now_iso())
    user = keys.host_user("lost-host")
    url = party_url(redis_url, user, password)
    try:
        r.execute_command("ACL", "DELUSER", user)
        managed = Watchdog(
            Runtime.create(load_settings(redis_url=redis_url, service={"make_acl_users": False}))
        )
        managed.reapply_identities()
        managed.reapply_identities()
        said = [line for line in capfd.readouterr().err.splitlines() if "acl_users_missing" in line]
        assert len(said) == 1 and user in said[0]
        assert user not in r.execute_command("ACL", "USERS")
        Watchdog(Runtime.create(load_settings(redis_url=redis_url))).reapply_identities()
        assert redis.Redis.from_url(url).ping()
        made = [e for e in recent(r, 50) if e.type == "acl_users_reapplied"]
        assert made and user in made[0].data["users"]
    finally:
        hosts.remove(r, "lost-host")
