"""Identity from authentication, attacked as a hostile tenant would, against the embedded server with the
shipped ACL file, real principals, and Mother and workers on their own users: a principal may submit
only for itself (or whom it acts for), past the rate limit raw submissions are refused at intake, no
principal or service user can destroy others' work (Mother's streams, run-id claims, rate windows, a
waiting run's gate), the actor of a decision is the principal, and a decision names its gate and digest.
"""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis

from mother import keys
from mother.acl import check
from mother.cli.identities import principal_url
from mother.client import MotherClient
from mother.config import load_settings
from mother.connection import connect
from mother.errors import GateRefused, PolicyViolation, RateLimited
from mother.identities import principals
from schemas.rejection import Rejection
from tests.conftest import (
    as_user,
    attacker_host,
    cli,
    first_accepted,
    quick_spec,
    run_cli,
    start_acl_stack,
    start_up_dev,
)
from tests.test_pipeline import example, wait_until

ACL = Path(__file__).resolve().parents[1] / "deploy" / "users.acl"
NOW = "2026-11-27T00:00:00.000Z"


_as = as_user


class Tenancy:
    """The server with the shipped users, Mother and workers on theirs, and principals made by an
    administrator."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.admin = connect(_as(url, "admin"))
        self.mother = MotherClient(settings=load_settings(redis_url=_as(url, "mother")))
        self.stack: Any = None

    def principal(self, name: str, grants: list[str], acts_for: list[str] = ()) -> str:  # type: ignore[assignment]
        """A new principal's URL."""
        if principals.load(self.admin, name) is not None:
            principals.remove(self.admin, name)
        _, password = principals.add(self.admin, name, grants, list(acts_for), NOW)
        return principal_url(self.url, name, password)

    def host_url(self, name: str) -> str:
        """A new enrolled host's URL (its password as a leaked one would be known)."""
        from mother.identities import hosts

        if hosts.load(self.admin, name) is not None:
            hosts.remove(self.admin, name)
        _, password = hosts.add(self.admin, name, ["agents", "tools", "maintenance"], NOW)
        return principal_url(self.url, keys.host_user(name), password)

    def client(self, url: str) -> MotherClient:
        return MotherClient(settings=load_settings(redis_url=url))

    def rejection(self, ref: str) -> Rejection | None:
        raw = self.admin.execute_command("JSON.GET", keys.rejection_key(ref))
        return Rejection.model_validate_json(raw) if raw else None


@pytest.fixture(scope="module")
def tenancy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tenancy]:
    # floods of raw submissions here test the rate limit and the refusals' bounds, not the queue's
    # depth (a loaded machine's intake may fall 100 entries behind, refusing them queue_full)
    server, stack = start_acl_stack(
        tmp_path_factory.mktemp("tenancy"), env={"MOTHER_BUDGET__GLOBAL__MAX_QUEUE_DEPTH": "100000"}
    )
    try:
        t = Tenancy(server.url)
        t.stack = stack
        wait_until(lambda: t.admin.execute_command("FUNCTION", "LIST", "LIBRARYNAME", "mother"))
        yield t
    finally:
        stack.stop()
        server.stop()


_quick = quick_spec


def _handled(t: Tenancy, stream: str, entry_ids: list[str]) -> bool:
    """Mother has acknowledged every one of these entries."""
    try:
        pending = t.admin.xpending(stream, "mother")
    # Mother has not read the new principal's stream yet
    except redis.ResponseError:
        return False
    info = t.admin.xinfo_groups(stream)
    last = next(g["last-delivered-id"] for g in info if g["name"] == "mother")
    return pending["pending"] == 0 and last == entry_ids[-1]


def test_the_101st_raw_submission_in_an_hour_is_refused_at_intake(tenancy: Tenancy) -> None:
    """101 raw XADDs on a principal's stream in well under a second: Mother's intake counts each in the
    user's window (the caller has no say in the limit or the window) and refuses the 101st,
    rate_limited with retry_after, leaving a rejection record and no run."""
    url = tenancy.principal("flood", ["submit"])
    raw = connect(url)
    stream = keys.principal_submissions_key("flood")
    ids = [
        raw.xadd(stream, {"spec": orjson.dumps(_quick("flood", f"flood-{i}"))}) for i in range(101)
    ]
    assert wait_until(lambda: _handled(tenancy, stream, ids), timeout=60)
    last = tenancy.rejection(f"flood:{ids[-1]}")
    assert last is not None and last.code == "rate_limited" and last.principal == "flood"
    assert last.retry_after is not None and 3500 < last.retry_after <= 3600
    assert not tenancy.admin.exists(keys.run_key("flood-100"))
    assert all(tenancy.admin.exists(keys.run_key(f"flood-{i}")) for i in range(100))
    # the client reads it as the 429 it is
    with pytest.raises(RateLimited):
        tenancy.client(url).status("flood-100")
    # and its own courtesy check refuses the next one before appending
    with pytest.raises(RateLimited):
        tenancy.client(url).submit(_quick("flood"))
    assert raw.xlen(stream) == 101


def test_a_principal_may_submit_only_for_itself_or_whom_it_acts_for(tenancy: Tenancy) -> None:
    """mallory's raw submission as carol is refused (identity_refused) and touches none of carol's
    counters or windows; the client refuses it before sending; a service principal acting for carol
    submits her run, which records who sent it."""
    mallory = tenancy.principal("mallory", ["submit"])
    raw = connect(mallory)
    entry = raw.xadd(
        keys.principal_submissions_key("mallory"),
        {"spec": orjson.dumps(_quick("carol", "as-carol"))},
    )
    got = wait_until(lambda: tenancy.rejection(f"mallory:{entry}"), timeout=20)
    assert got.code == "identity_refused" and "may not submit for user carol" in got.error
    assert not tenancy.admin.exists(keys.run_key("as-carol"))
    assert not tenancy.admin.exists(keys.rate_limit_key("carol"))
    assert not list(tenancy.admin.scan_iter(match="budget:user:carol:*"))
    with pytest.raises(PolicyViolation, match="may not submit for user carol"):
        tenancy.client(mallory).submit(_quick("carol"))
    # a child under carol's run is not a way around it
    service = tenancy.client(tenancy.principal("portal", ["submit"], ["carol"]))
    carol_run = service.submit(_quick("carol"))
    envelope = service.wait(carol_run, 60)
    assert envelope.termination.reason == "success"
    assert service.status(carol_run).submitted_by == "portal"
    child = raw.xadd(
        keys.principal_submissions_key("mallory"),
        {"spec": orjson.dumps({**_quick("mallory", "under-carol"), "parent_run_id": carol_run})},
    )
    got = wait_until(lambda: tenancy.rejection(f"mallory:{child}"), timeout=20)
    assert got.code == "identity_refused" and "its parent's user's" in got.error


@pytest.mark.parametrize("user", ["flood", "host", "dashboard"])
def test_no_principal_or_service_user_can_destroy_others_work(tenancy: Tenancy, user: str) -> None:
    """Neither a principal nor a host's or the dashboard's credentials can expire, trim, delete or XDEL
    Mother's streams, write run-id claims or rate windows, or rewrite a waiting run's gate (its
    approvers, its deadline); a probe of each (mother.acl) finds none allowed."""
    if user == "flood":
        url = tenancy.principal("vandal", ["submit", "cancel"])
    elif user == "host":
        url = tenancy.host_url("vandal-host")
    else:
        url = _as(tenancy.url, user)
    conn = connect(url)
    before = {
        stream: tenancy.admin.xlen(stream)
        for stream in (keys.SUBMISSIONS_STREAM, keys.EVENTS_STREAM, keys.COMMANDS_STREAM)
    }
    for command in (
        ("PEXPIRE", keys.SUBMISSIONS_STREAM, "1"),
        ("EXPIRE", keys.EVENTS_STREAM, "1"),
        ("DEL", keys.COMMANDS_STREAM),
        ("XTRIM", keys.SUBMISSIONS_STREAM, "MAXLEN", "0"),
        ("XDEL", keys.EVENTS_STREAM, "0-1"),
        ("HSET", keys.RUN_CLAIMS, "squatted", "1-0"),
        ("DEL", keys.RUN_CLAIMS),
        ("ZADD", keys.rate_limit_key("victim"), "1", "x"),
        ("DEL", keys.rate_limit_key("victim")),
        ("JSON.SET", keys.run_key("waiting-run"), "$.gate.approvers", '["me"]'),
        ("JSON.SET", keys.run_key("waiting-run"), "$.gate.deadline", '"2099-01-01T00:00:00.000Z"'),
    ):
        with pytest.raises(redis.exceptions.NoPermissionError):
            conn.execute_command(*command)
    report = check(conn)
    assert report.excess == [] and report.lacks == [], report
    after = {stream: tenancy.admin.xlen(stream) for stream in before}
    assert after == before and not tenancy.admin.hexists(keys.RUN_CLAIMS, "squatted")


def _gated(client: MotherClient, name: str, target: str = "production") -> str:
    """A run waiting for approval of its deploy phase (to ``target``: what the gate's digest covers)."""
    spec = example("approval-denied", run_id=name, gate_timeout_seconds=600)
    spec["pipeline"][1]["task"] = f"Deploy 1.2 to {target}."
    assert client.principal is not None
    spec["user_id"] = client.principal.name
    run_id = client.submit(spec)

    def waiting() -> bool:
        return tenancy_status(client, run_id) == "waiting"

    assert wait_until(waiting, timeout=30)
    return run_id


def tenancy_status(client: MotherClient, run_id: str) -> str | None:
    try:
        return client.status(run_id).status
    except Exception:  # noqa: BLE001
        return None


def test_the_actor_is_the_principal_and_a_decision_names_its_gate(tenancy: Tenancy) -> None:
    """ops (approve) decides as ops whatever it says; an approval naming another gate's id or digest
    (the staging gate's on the production run) is refused changing nothing; a principal without the
    grant, or one naming another actor on its raw stream, is refused."""
    submitter = tenancy.client(tenancy.principal("alice", ["submit", "cancel"]))
    ops_url = tenancy.principal("ops", ["approve", "answer"])
    ops = tenancy.client(ops_url)
    staging = _gated(submitter, "staging-1", "staging")
    production = _gated(submitter, "production-1", "production")
    staging_gate = submitter.status(staging).gate
    production_gate = submitter.status(production).gate
    assert staging_gate is not None and production_gate is not None
    with pytest.raises(PolicyViolation, match="the actor is the principal"):
        ops.approve(production, actor="root", reason="let me")
    raw = connect(ops_url)
    for payload, error in (
        # staging's gate on the production run
        ({"gate_id": staging_gate.gate_id, "digest": staging_gate.digest}, "waits on gate"),
        # production's gate with staging's digest
        ({"gate_id": production_gate.gate_id, "digest": staging_gate.digest}, "digest"),
        ({}, "must name the gate it decides and its digest"),
        (
            {
                "gate_id": production_gate.gate_id,
                "digest": production_gate.digest,
                "actor": "mallory",
            },
            "is not who sent this",
        ),
    ):
        entry = raw.xadd(
            keys.principal_commands_key("ops"),
            {
                "type": "approve",
                "payload": orjson.dumps({"run_id": production, "reason": "x", **payload}),
            },
        )
        with pytest.raises((GateRefused, PolicyViolation), match=error):
            ops.command_reply(entry, 10)
        assert submitter.status(production).status == "waiting"
    # alice is no approver: her client says so; sent raw, Mother refuses it for want of the grant
    with pytest.raises(GateRefused, match="alice may not decide"):
        submitter.approve(production, reason="mine")
    entry = connect(submitter.settings.redis_url).xadd(
        keys.principal_commands_key("alice"),
        {
            "type": "approve",
            "payload": orjson.dumps(
                {
                    "run_id": production,
                    "reason": "mine",
                    "gate_id": production_gate.gate_id,
                    "digest": production_gate.digest,
                }
            ),
        },
    )
    with pytest.raises(PolicyViolation, match="principal alice may not approve"):
        submitter.command_reply(entry, 10)
    reply = ops.approve(production, reason="release window open")
    assert reply["actor"] == "ops"
    state = submitter.wait(production, 60)
    assert state.termination.reason == "success"
    decided = submitter.status(production).gates[-1]
    assert decided.decision is not None and decided.decision.actor == "ops"
    submitter.cancel(staging, reason="not needed")
    assert submitter.wait(staging, 30).termination.reason == "user_cancelled"


def test_a_principal_cancels_only_its_own_users_runs(tenancy: Tenancy) -> None:
    """bob (cancel) may not cancel alice's run; alice may; the record names who."""
    alice = tenancy.client(tenancy.principal("alice2", ["submit", "cancel"]))
    bob = tenancy.client(tenancy.principal("bob", ["submit", "cancel"]))
    run_id = _gated(alice, "alices-gated")
    with pytest.raises(PolicyViolation, match="may not cancel run"):
        bob.cancel(run_id, reason="mine now")
    assert alice.status(run_id).status == "waiting"
    alice.cancel(run_id, reason="done with it")
    record = alice.wait(run_id, 30).termination
    assert record.reason == "user_cancelled" and record.details.startswith("Cancelled by alice2:")


def test_hosts_submit_only_their_attempts_children(tenancy: Tenancy) -> None:
    """A host may append to no stream of Mother's (submissions, spawns): a child is asked of Mother with
    the host's spawn ask, which Mother makes from the parent's own record (its user, its scripts) and
    only for an attempt the host holds; a child asked for another run's attempt is refused, nothing
    made."""
    from workers.asking import Asker

    name, host = attacker_host(tenancy.admin, tenancy.url, "spawner-host")
    for stream in (keys.SUBMISSIONS_STREAM, keys.SPAWNS_STREAM):
        with pytest.raises(redis.exceptions.NoPermissionError):
            host.xadd(stream, {"spec": orjson.dumps(_quick("carol"))})
    parent = _gated_parent(tenancy)
    reply = Asker(host, name, 10).ask(
        "spawn",
        {"arguments": {"role": "helper", "task": "t", "budget": "0.10"}},
        (parent, 0, 1),
        raising=False,
    )
    assert reply["ok"] is False and reply["code"] == "not_held", reply
    assert not list(tenancy.admin.scan_iter(match=f"run:{keys.child_prefix(parent)}.c*"))


def _gated_parent(tenancy: Tenancy) -> str:
    """Another principal's run that waits (a parent whose children no other attempt may ask for)."""
    return _gated(tenancy.client(tenancy.principal("dana", ["submit"])), "danas-parent")


def test_principals_cli_adds_shows_rotates_and_removes(tenancy: Tenancy) -> None:
    admin = {"MOTHER_REDIS_URL": _as(tenancy.url, "admin")}
    added = run_cli(
        "principals", "add", "erin", "--can", "submit,approve", "--acts-for", "x1", env=admin
    )
    assert added.returncode == 0, added.stderr
    url = next(
        line.split("=", 1)[1] for line in added.stdout.splitlines() if "MOTHER_REDIS_URL=" in line
    )
    assert "XADD mother:submissions:erin '*' spec" in added.stdout
    assert connect(url).execute_command("ACL", "WHOAMI") == "erin"
    listed = run_cli("principals", "list", env=admin)
    assert "erin" in listed.stdout and "submit, approve" in listed.stdout
    shown = orjson.loads(run_cli("principals", "show", "erin", env=admin).stdout)
    assert shown["acts_for"] == ["x1"] and shown["submits_on"] == "mother:submissions:erin"
    rotated = run_cli("principals", "rotate", "erin", env=admin)
    assert rotated.returncode == 0, rotated.stderr
    with pytest.raises(redis.exceptions.AuthenticationError):
        redis.Redis.from_url(url).ping()
    refused = run_cli("principals", "add", "worker", "--can", "submit", env=admin)
    assert refused.returncode == 2 and "is a service user's name" in refused.stderr
    not_admin = run_cli(
        "principals",
        "add",
        "zed",
        "--can",
        "submit",
        env={"MOTHER_REDIS_URL": _as(tenancy.url, "mother")},
    )
    assert not_admin.returncode == 2 and "administrator's connection" in not_admin.stderr
    assert run_cli("principals", "remove", "erin", env=admin).returncode == 0
    assert principals.load(tenancy.admin, "erin") is None
    assert tenancy.admin.execute_command("ACL", "GETUSER", "erin") is None


def test_up_dev_makes_a_dev_principal_that_can_do_everything(tmp_path: Path) -> None:
    """`mother up --dev` prints the dev principal's URL; with it a run for any user is submitted and
    taken in, recorded as dev's, and inspected, exported, its artifacts and the libraries listed."""
    proc = start_up_dev(tmp_path, {"COLUMNS": "400"}, stderr=subprocess.DEVNULL)
    try:
        assert proc.stdout is not None
        url, libraries = None, None
        for line in proc.stdout:
            if "dev principal" in line:
                url = line.strip().split("MOTHER_REDIS_URL=", 1)[1]
            if "example libraries" in line:
                libraries = line
                break
        assert url is not None and url.startswith("redis://dev:")
        assert libraries is not None and "financials" in libraries
        client = MotherClient(settings=load_settings(redis_url=url))
        # the library examples run as their headers say: their libraries are there
        assert client.submit(example("library-redacted"))
        run_id = client.submit(_quick("anyone"))
        assert wait_until(lambda: tenancy_status(client, run_id) is not None, timeout=30)
        assert client.status(run_id).submitted_by == "dev"
        # what a developer does with it: inspect a run, export its replay, its artifacts, libraries
        for args in (
            ("inspect", run_id),
            ("inspect", run_id, "--json"),
            ("replay", "export", run_id, "--output", str(tmp_path / "bundle.json.gz")),
            ("artifacts", "list", run_id),
            ("library", "list"),
            ("library", "show", "financials"),
            ("library", "policy", "financials"),
            ("library", "report", "financials"),
            ("gc", "reports"),
        ):
            done = cli(*args, url=url)
            assert done.exit_code == 0, (args, done.output)
        # it writes nothing but its own streams: a library's text stays out of its reach
        with pytest.raises(redis.exceptions.NoPermissionError):
            client.redis.execute_command("FT.SEARCH", "idx:chunks", "*")
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=60)


def test_one_principal_decides_and_cancels_only_what_is_its_own(tenancy: Tenancy) -> None:
    """bob's run names no approvers (the shipped default lets anyone approved decide): alice-svc's
    approve, deny, answer and cancel of it are refused in one line (by her client, and by Mother when
    sent raw) and change nothing; bob-svc's approve goes through; a principal granted operate may
    deny another of bob's runs. alice-svc is not shown bob's runs as hers to decide."""
    alice = tenancy.client(
        tenancy.principal("alice-svc", ["submit", "approve", "answer", "cancel"], ["alice"])
    )
    bob = tenancy.client(
        tenancy.principal("bob-svc", ["submit", "approve", "answer", "cancel"], ["bob"])
    )
    ops = tenancy.client(tenancy.principal("ops2", ["approve", "operate"]))

    def gated(name: str) -> str:
        spec = example("approval-denied", run_id=name, gate_timeout_seconds=600)
        spec["user_id"], spec["approvers"] = "bob", []
        run_id = bob.submit(spec)
        assert wait_until(lambda: tenancy_status(bob, run_id) == "waiting", timeout=30)
        return run_id

    first, second = gated("bobs-first"), gated("bobs-second")
    gate = bob.status(first).gate
    assert gate is not None and gate.approvers == []
    for decide in (
        lambda: alice.approve(first, reason="mine now"),
        lambda: alice.deny(first, reason="no"),
        lambda: alice.answer(first, "x", reason="x"),
    ):
        with pytest.raises(GateRefused, match="principal alice-svc may not"):
            decide()
    with pytest.raises(PolicyViolation, match="principal alice-svc may not cancel run bobs-first"):
        alice.cancel(first, reason="mine now")
    raw = connect(alice.settings.redis_url)
    for kind in ("approve", "deny", "answer"):
        payload = {"run_id": first, "reason": "x", "gate_id": gate.gate_id, "digest": gate.digest}
        entry = raw.xadd(
            keys.principal_commands_key("alice-svc"),
            {"type": kind, "payload": orjson.dumps({**payload, "text": "x"})},
        )
        with pytest.raises(GateRefused, match="only the principal that submitted it"):
            alice.command_reply(entry, 10)
    state = bob.status(first)
    assert state.status == "waiting" and all(g.decision is None for g in state.gates)
    assert first not in {row["run_id"] for row in alice.waiting()}
    assert first in {row["run_id"] for row in bob.waiting()}
    assert bob.approve(first, reason="mine")["actor"] == "bob-svc"
    assert bob.wait(first, 60).termination.reason == "success"
    assert ops.deny(second, reason="freeze")["actor"] == "ops2"
    assert bob.wait(second, 60).termination.reason == "approval_denied"


@pytest.mark.parametrize(
    ("base", "expected"),
    [
        (
            "redis+sentinel://admin:pw@10.0.0.1:26379,10.0.0.2:26380,s3/mymaster/0",
            "redis+sentinel://erin:p%40ss@10.0.0.1:26379,10.0.0.2:26380,s3/mymaster/0",
        ),
        (
            "redis+sentinel://s1:26379,s2:26379/mymaster?sentinel_password=x",
            "redis+sentinel://erin:p%40ss@s1:26379,s2:26379/mymaster?sentinel_password=x",
        ),
        ("redis://admin:pw@redis-host:6380/2", "redis://erin:p%40ss@redis-host:6380/2"),
        ("redis://127.0.0.1:6379", "redis://erin:p%40ss@127.0.0.1:6379/0"),
        ("rediss://[::1]:6380/0", "rediss://erin:p%40ss@[::1]:6380/0"),
    ],
)
def test_a_principals_url_keeps_every_host_of_the_base(base: str, expected: str) -> None:
    """`principals add` and `rotate` print the new principal's URL made from the deployment's: a
    redis+sentinel:// URL naming several sentinels keeps them all (it crashed with "Port could not be
    cast to integer" after changing the server, so the password shown once was never shown)."""
    from mother.cli.identities import principal_url
    from mother.connection import sentinel_parts

    got = principal_url(base, "erin", "p@ss")
    assert got == expected
    if base.startswith("redis+sentinel"):
        parts = sentinel_parts(got)
        assert (parts["username"], parts["password"]) == ("erin", "p@ss")
        assert len(parts["sentinels"]) == len(sentinel_parts(base)["sentinels"])


def test_a_principal_whose_acl_user_the_server_lost_gets_it_back(tenancy: Tenancy) -> None:
    """ACL users are neither saved by ACL SETUSER nor replicated: a restart without saved ACLs, or a
    replica promoted by Sentinel, loses a principal made while the system ran (all its submissions
    then failed AuthenticationError). Its record keeps its password's digest (never the password);
    the leading Mother makes its user again within seconds, says so in the activity stream, and the
    principal's next submission is taken in."""
    url = tenancy.principal("carol-svc", ["submit"], ["carol"])
    record = principals.load(tenancy.admin, "carol-svc")
    assert record is not None and record.password_sha256 is not None
    assert url.split(":")[2].split("@")[0] not in orjson.dumps(record.to_dict()).decode()
    tenancy.admin.execute_command("ACL", "DELUSER", "carol-svc")
    with pytest.raises(redis.exceptions.AuthenticationError):
        redis.Redis.from_url(url).ping()

    def back() -> bool:
        try:
            return bool(redis.Redis.from_url(url).ping())
        except redis.exceptions.AuthenticationError:
            return False

    assert wait_until(back, timeout=30)
    client = tenancy.client(url)
    run_id = client.submit(_quick("carol"))
    assert client.wait(run_id, 60).termination.reason == "success"
    said = [
        orjson.loads(f["data"])
        for _, f in tenancy.admin.xrange(keys.ACTIVITY_STREAM, count=100_000)
        if f["type"] == "acl_users_reapplied"
    ]
    assert any("carol-svc" in s["users"] for s in said)


def test_mothers_connections_killed_with_a_users_loss_are_outlived(tenancy: Tenancy) -> None:
    """Every connection of Mother's user is killed (`CLIENT KILL USER mother`) just as the server loses
    a principal's user: Mother stays up, reconnects, makes the user again within seconds, and the
    principal's next submission is taken in and succeeds."""
    url = tenancy.principal("dora-svc", ["submit"], ["dora"])
    tenancy.admin.execute_command("ACL", "DELUSER", "dora-svc")
    assert tenancy.admin.execute_command("CLIENT", "KILL", "USER", "mother") > 0
    client, run_id, _took = first_accepted(url, quick_spec("dora"), timeout=30)
    assert client.wait(run_id, 60).termination.reason == "success"
    assert tenancy.stack.alive() == {"mother-0": True, "worker-0": True, "worker-1": True}


def test_a_party_that_floods_hurts_only_itself(tenancy: Tenancy) -> None:
    """10,000 junk submissions on a flooder's stream (the same bad spec, as a script sends it): they are
    refused, one record kept and the rest counted (5,000 junk left 5,000 records kept 30 days); quiet's
    submissions sent during the flood are taken in while the flood is still pending (Mother handles
    the parties' entries in turn), and succeed."""
    flooder = connect(tenancy.principal("flooder", ["submit"]))
    quiet = tenancy.client(tenancy.principal("quiet", ["submit"]))
    before = tenancy.admin.zcard(keys.REJECTIONS_INDEX)
    stream = keys.principal_submissions_key("flooder")
    pipe = flooder.pipeline(transaction=False)
    for _ in range(10_000):
        pipe.xadd(stream, {"spec": "{not json"})
    pipe.execute()
    sent = [quiet.submit(_quick("quiet")) for _ in range(5)]

    def taken_in() -> bool:
        return all(tenancy.admin.exists(keys.run_key(run_id)) for run_id in sent)

    assert wait_until(taken_in, timeout=60)
    # the flood was not yet all handled when the quiet party's runs were taken in
    info = {g["name"]: g for g in tenancy.admin.xinfo_groups(stream)}["mother"]
    assert int(info.get("lag") or 0) + int(info["pending"]) > 0
    for run_id in sent:
        assert quiet.wait(run_id, 60).termination.reason == "success"
    counted = keys.party_refusals_key("flooder")
    assert wait_until(
        lambda: (
            sum(
                int(v) for k, v in tenancy.admin.hgetall(counted).items() if not k.endswith("|said")
            )
            >= 9_999
        ),
        timeout=120,
    )
    assert tenancy.admin.zcard(keys.party_rejections_key("flooder")) == 1
    assert tenancy.admin.zcard(keys.REJECTIONS_INDEX) - before == 1
