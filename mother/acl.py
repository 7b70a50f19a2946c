"""What each of the shipped ACL users (``deploy/users.acl``) needs, and a check of a connection against it.

``mother doctor`` asks the server which user it is connected as (``ACL WHOAMI``) and tries, for that
user's role, one harmless command per need (a read of a key that does not exist, a delete of one, a
trim that trims nothing, a server function that writes nothing): a NOPERM names what the user lacks.
For a host (and the dashboard, and a principal) it also tries what it must never do (read or write run
state, budgets, artifacts, libraries, Mother's streams, another host's things) and warns when the ACL
lets it. The threat model is in docs/security.md.
"""

from __future__ import annotations

from dataclasses import dataclass

import redis

from mother import keys
from mother.functions import FUNCTIONS_PROBE

__all__ = [
    "DESTROYS",
    "MUST_NOT",
    "NEEDS",
    "AclReport",
    "check",
    "denied",
    "host_must_not",
    "host_needs",
    "mother_lacks",
    "principal_must_not",
    "principal_needs",
    "role_of",
    "whoami",
]

# a probe that starts with it is queued in a MULTI and discarded: the server answers whether the command
# is permitted when it is queued, and nothing runs (for an append or an increment, which has no harmless form)
QUEUED = "(queued)"
# an id no run, artifact or token has: the probes touch keys that do not exist
PROBE = "mother-doctor-probe"
# a host no one enrolled
PROBE_HOST = "mother-doctor-probe"
HUGE = "1000000000000"

ACL_SETUSER_NEED = (
    "make enrolled parties' ACL users again after a restart or a failover (ACL SETUSER)"
)
ACL_USERS_NEED = "list the ACL users (ACL USERS)"
# role -> [(what it is for, a harmless command that needs that permission)]
NEEDS: dict[str, list[tuple[str, tuple[str, ...]]]] = {
    "mother": [
        ("write termination records", ("JSON.DEL", keys.termination_key(PROBE))),
        ("write run records", ("JSON.DEL", keys.run_key(PROBE))),
        ("write run limits", ("JSON.DEL", keys.run_limits_key(PROBE))),
        ("read people's commands", ("XTRIM", keys.COMMANDS_STREAM, "MAXLEN", "~", HUGE)),
        ("take submissions", ("XTRIM", keys.SUBMISSIONS_STREAM, "MAXLEN", "~", HUGE)),
        ("read hosts' asks", ("XTRIM", keys.host_asks_key(PROBE_HOST), "MAXLEN", "~", HUGE)),
        ("load the server functions", ("FUNCTION", "LIST", "LIBRARYNAME", PROBE)),
        ("read Redis memory (INFO)", ("INFO", "memory")),
        (ACL_SETUSER_NEED, (QUEUED, "ACL", "SETUSER", keys.host_user(PROBE_HOST))),
        (ACL_USERS_NEED, ("ACL", "USERS")),
    ],
    "dashboard": [
        ("read run and termination records", ("JSON.GET", keys.run_key(PROBE))),
        ("read the metrics counters", ("HGETALL", keys.METRICS_COUNTERS)),
        ("read the gauges", ("ZCARD", keys.RUN_DEADLINES)),
        ("read RQ's workers and queues", ("SCARD", "rq:workers")),
        ("read the activity stream", ("XREVRANGE", keys.ACTIVITY_STREAM, "+", "-", "COUNT", "1")),
        (
            "read a run's own activity",
            ("XREVRANGE", keys.run_activity_key(PROBE), "+", "-", "COUNT", "1"),
        ),
        ("read the hosts' attempts", ("ZRANGE", keys.HEARTBEATS, "0", "0")),
        ("read when a host beat", ("PTTL", keys.host_alive_key(PROBE_HOST))),
        ("read the last hour's activity", ("XRANGE", keys.ACTIVITY_STREAM, "-", "+", "COUNT", "1")),
        ("follow the activity live", ("XREAD", "COUNT", "1", "STREAMS", keys.ACTIVITY_STREAM, "$")),
    ],
}


def host_needs(name: str) -> list[tuple[str, tuple[str, ...]]]:
    """What enrolled host ``name`` needs: its own queues, jobs and workers, its stream, its replies."""
    return [
        (
            "take jobs from its own queues",
            ("LLEN", keys.rq_queue_key(keys.host_queue(name, "agents"))),
        ),
        ("write its own RQ jobs", ("DEL", keys.rq_job_key(keys.host_job_id(name, PROBE)))),
        (
            "register its own RQ workers",
            ("DEL", keys.rq_worker_key(keys.host_worker_name(name, PROBE))),
        ),
        ("ask Mother on its own stream", ("XADD", keys.host_asks_key(name), "0-0", "k", "1")),
        ("read Mother's replies to it", ("LPOP", keys.host_reply_key(name, "0" * 16))),
    ]


# what no principal, host or dashboard user may do to others' work
DESTROYS = [
    (
        "trim or delete Mother's submissions",
        ("XTRIM", keys.SUBMISSIONS_STREAM, "MAXLEN", "~", HUGE),
    ),
    ("trim or delete Mother's events", ("XTRIM", keys.EVENTS_STREAM, "MAXLEN", "~", HUGE)),
    ("expire Mother's commands", ("PEXPIRE", keys.COMMANDS_STREAM, HUGE)),
    ("claim run ids (runs:claimed)", ("HDEL", keys.RUN_CLAIMS, PROBE)),
    ("write users' rate windows", ("ZREM", keys.rate_limit_key(PROBE), PROBE)),
    # a path no run has: deletes nothing even where it is allowed
    ("write run records (a waiting run's gate)", ("JSON.DEL", keys.run_key(PROBE), "$.gate")),
]


def host_must_not(name: str) -> list[tuple[str, tuple[str, ...]]]:
    """What host ``name`` must not be able to do: anything of run state, budgets, artifacts, libraries,
    Mother's streams or other hosts (each probe harmless: it changes nothing where it is allowed)."""
    other = PROBE_HOST if name != PROBE_HOST else "other-probe-host"
    return [
        *DESTROYS,
        ("read run records", ("JSON.GET", keys.run_key(PROBE))),
        ("read run counters", ("JSON.GET", keys.run_budget_key(PROBE))),
        ("read composed contexts", ("JSON.GET", keys.context_key(PROBE, 0))),
        ("read artifacts", ("JSON.GET", keys.artifact_key(PROBE))),
        ("read library chunks", ("JSON.GET", keys.chunk_key(PROBE, PROBE, 0))),
        (
            "search library chunks (FT.SEARCH idx:chunks)",
            ("FT.SEARCH", keys.CHUNK_INDEX, f"@library_id:{{{PROBE}}}", "LIMIT", "0", "0"),
        ),
        ("write termination records", ("JSON.DEL", keys.termination_key(PROBE))),
        ("write run limits", ("JSON.DEL", keys.run_limits_key(PROBE))),
        ("write budget counters", ("JSON.DEL", keys.run_budget_key(PROBE), "$.probe")),
        ("write artifacts", ("JSON.DEL", keys.artifact_meta_key(PROBE), "$.probe")),
        ("write security violations", ("LTRIM", keys.SECURITY_VIOLATIONS, "0", "-1")),
        ("write the activity stream", ("XTRIM", keys.ACTIVITY_STREAM, "MAXLEN", "~", HUGE)),
        (
            "write a run's own activity",
            ("XTRIM", keys.run_activity_key(PROBE), "MAXLEN", "~", HUGE),
        ),
        ("write the metrics counters", ("HDEL", keys.METRICS_COUNTERS, PROBE)),
        ("write heartbeats", ("DEL", keys.attempt_heartbeat_key(PROBE, 0, 0))),
        ("write the hosts' lines", ("DEL", keys.host_alive_key(name))),
        ("write the run indexes", ("ZREM", keys.RUNS_INDEX, PROBE)),
        ("write the tool registry", ("JSON.DEL", keys.TOOLS_REGISTRY, "$.probe")),
        ("call the server functions", ("FCALL", FUNCTIONS_PROBE, "0")),
        ("run scripts of its own (EVAL)", ("EVAL", "return 1", "0")),
        ("ask on another host's stream", ("XADD", keys.host_asks_key(other), "0-0", "k", "1")),
        ("read another host's replies", ("LPOP", keys.host_reply_key(other, "0" * 16))),
        ("take another host's jobs", ("LLEN", keys.rq_queue_key(keys.host_queue(other, "agents")))),
        ("write another host's RQ jobs", ("DEL", keys.rq_job_key(keys.host_job_id(other, PROBE)))),
        ("append to Mother's spawns", ("XADD", keys.SPAWNS_STREAM, "0-0", "k", "1")),
        ("submit runs", ("XADD", keys.SUBMISSIONS_STREAM, "0-0", "k", "1")),
        ("list the key space (SCAN)", ("SCAN", "0", "COUNT", "1")),
        ("send RQ's commands to workers", ("PUBLISH", "rq:pubsub:mother-doctor-probe", "{}")),
    ]


MUST_NOT: dict[str, list[tuple[str, tuple[str, ...]]]] = {
    "dashboard": [
        *DESTROYS,
        ("append people's commands (cancel)", ("XTRIM", keys.COMMANDS_STREAM, "MAXLEN", "~", HUGE)),
        ("read library chunks", ("JSON.GET", keys.chunk_key(PROBE, PROBE, 0))),
    ]
}


@dataclass
class AclReport:
    user: str
    role: str
    lacks: list[str]
    # what this role's user can do and must not
    excess: list[str]


def whoami(client: redis.Redis) -> str:
    """The ACL user the connection is authenticated as ('default' without ACLs)."""
    name = client.execute_command("ACL", "WHOAMI")
    return name.decode() if isinstance(name, bytes) else str(name)


def role_of(user: str, principal: bool = False) -> str:
    """The role a user name stands for: a host (``host:{name}``), the dashboard, a principal
    (``principal``), or mother (any other name is checked as mother: everything a Mother needs)."""
    if principal:
        return "principal"
    if keys.host_of_user(user) is not None:
        return "host"
    return "dashboard" if user == "dashboard" else "mother"


def principal_needs(name: str, grants: list[str]) -> list[tuple[str, tuple[str, ...]]]:
    """What principal ``name`` needs for its grants."""
    needs: list[tuple[str, tuple[str, ...]]] = [
        ("read run records", ("JSON.GET", keys.run_key(PROBE)))
    ]
    if "submit" in grants:
        needs.append(
            (
                "submit on its stream",
                ("XADD", keys.principal_submissions_key(name), "0-0", "p", "1"),
            )
        )
    if set(grants) - {"submit"}:
        needs.append(
            ("command on its stream", ("XADD", keys.principal_commands_key(name), "0-0", "p", "1"))
        )
    return needs


def principal_must_not(name: str) -> list[tuple[str, tuple[str, ...]]]:
    """What principal ``name`` must not be able to do: others' streams, and destroying others' work."""
    other = "zz-doctor-probe" if name != "zz-doctor-probe" else "zy-doctor-probe"
    return [
        *DESTROYS,
        (
            "submit as another principal",
            ("XADD", keys.principal_submissions_key(other), "0-0", "p", "1"),
        ),
        ("submit on Mother's own stream", ("XADD", keys.SUBMISSIONS_STREAM, "0-0", "p", "1")),
        ("command on Mother's own stream", ("XADD", keys.COMMANDS_STREAM, "0-0", "p", "1")),
        ("delete its own submissions stream", ("DEL", keys.principal_submissions_key(name))),
    ]


def check(client: redis.Redis, role: str | None = None) -> AclReport:
    """What the connection's user lacks for its role, and what it can do and must not."""
    from mother.identities.who import principal_of

    user = whoami(client)
    me = principal_of(client) if role in (None, "principal") else None
    role = role or role_of(user, me is not None)
    host = keys.host_of_user(user)
    if me is not None:
        needs, must_not = principal_needs(user, list(me.grants)), principal_must_not(user)
    elif role == "host" and host is not None:
        needs, must_not = host_needs(host), host_must_not(host)
    else:
        needs, must_not = NEEDS[role], MUST_NOT.get(role, [])
    lacks = [what for what, command in needs if denied(client, command)]
    excess = [what for what, command in must_not if not denied(client, command)]
    return AclReport(user, role, lacks, excess)


def mother_lacks(client: redis.Redis, make_acl_users: bool) -> list[str]:
    """What a Mother's connection lacks to serve (without ``make_acl_users`` it makes no ACL user, and
    needs neither ACL SETUSER nor ACL USERS): checked at its start, so a narrow user stops it in one
    line instead of failing at every dispatch."""
    optional = () if make_acl_users else (ACL_SETUSER_NEED, ACL_USERS_NEED)
    return [
        what
        for what, command in NEEDS["mother"]
        if what not in optional and denied(client, command)
    ]


def denied(client: redis.Redis, command: tuple[str, ...]) -> bool:
    """Whether the server refuses ``command`` for lack of permission (any other reply or error is not that).
    A ``QUEUED`` probe is queued in a MULTI and discarded: it never runs."""
    if command[0] == QUEUED:
        return _denied_queued(client, command[1:])
    try:
        client.execute_command(*command)
    except redis.ResponseError as exc:
        return _refused(exc)
    return False


def _refused(exc: redis.ResponseError) -> bool:
    """Whether an error reply says the user lacks the permission (NOPERM), not that the command failed."""
    return isinstance(exc, redis.exceptions.NoPermissionError) or (
        "NOPERM" in str(exc) or "no permissions" in str(exc).lower()
    )


def _denied_queued(client: redis.Redis, command: tuple[str, ...]) -> bool:
    """``command`` queued in a MULTI on one connection, then DISCARDed: the server checks its permission as
    it queues it (NOPERM then) and runs nothing."""
    connection = client.connection_pool.get_connection()
    try:
        connection.send_command("MULTI")
        connection.read_response()
        connection.send_command(*command)
        try:
            connection.read_response()
            refused = False
        except redis.ResponseError as exc:
            refused = _refused(exc)
        connection.send_command("DISCARD")
        connection.read_response()
        return refused
    finally:
        client.connection_pool.release(connection)
