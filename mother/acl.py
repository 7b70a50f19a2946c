"""What each of the shipped ACL users (``deploy/users.acl``) needs, and a check of a connection against it.

``mother doctor`` asks the server which user it is connected as (``ACL WHOAMI``) and tries, for that
user's role, one harmless command per need (a read of a key that does not exist, a delete of one, a
trim that trims nothing, a server function that writes nothing): a NOPERM names what the user lacks.
For a worker it also tries what a worker must never do (write run fate, its own limits, people's
commands, read attempt tokens) and warns when the ACL lets it. The threat model is in docs/security.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import redis

from mother import keys
from mother.functions import FUNCTIONS_PROBE

__all__ = [
    "ATTEMPT_ONLY",
    "DESTROYS",
    "MUST_NOT",
    "NEEDS",
    "WORKER_GAPS",
    "AclReport",
    "check",
    "denied",
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
# a host id no host has
PROBE_HOST = "0000000000000000"
HUGE = "1000000000000"

# role -> [(what it is for, a harmless command that needs that permission)]
NEEDS: dict[str, list[tuple[str, tuple[str, ...]]]] = {
    # a worker's shared user: what RQ needs to dequeue, reads, the claim of a token; what a phase writes
    # it writes as its attempt's own user (mother/attempt_users.py), which Mother makes per attempt
    "worker": [
        ("read run records", ("JSON.GET", keys.run_key(PROBE))),
        ("read composed contexts", ("JSON.GET", keys.context_key(PROBE, 0))),
        ("read run limits", ("JSON.GET", keys.run_limits_key(PROBE))),
        ("read run counters", ("JSON.GET", keys.run_budget_key(PROBE))),
        ("register its host (RPUSH hosts:hello)", (QUEUED, "RPUSH", keys.HOST_HELLOS, "probe")),
        ("read the tool registry", ("JSON.TYPE", keys.TOOLS_REGISTRY)),
        ("record security violations", (QUEUED, "LPUSH", keys.SECURITY_VIOLATIONS, "probe")),
        ("take RQ jobs", ("DEL", f"rq:{PROBE}")),
        ("write its host's line (mother:hosts)", ("HDEL", keys.WORKER_HOSTS, PROBE)),
        (
            "search libraries for search_library (FT.SEARCH idx:chunks)",
            ("FT.SEARCH", keys.CHUNK_INDEX, f"@library_id:{{{PROBE}}}", "LIMIT", "0", "0"),
        ),
    ],
    "mother": [
        ("write termination records", ("JSON.DEL", keys.termination_key(PROBE))),
        ("write run records", ("JSON.DEL", keys.run_key(PROBE))),
        ("write run limits", ("JSON.DEL", keys.run_limits_key(PROBE))),
        ("read people's commands", ("XTRIM", keys.COMMANDS_STREAM, "MAXLEN", "~", HUGE)),
        ("take submissions", ("XTRIM", keys.SUBMISSIONS_STREAM, "MAXLEN", "~", HUGE)),
        ("load the server functions", ("FUNCTION", "LIST", "LIBRARYNAME", PROBE)),
        ("read Redis memory (INFO)", ("INFO", "memory")),
        ("write attempt tokens", ("DEL", keys.host_token_key(PROBE_HOST, PROBE, 0, 0))),
        (
            "make worker hosts' ACL users from the worker user's rules (ACL GETUSER)",
            ("ACL", "GETUSER", PROBE),
        ),
        (
            "make each attempt's ACL user (ACL SETUSER)",
            (QUEUED, "ACL", "SETUSER", keys.attempt_user(PROBE, 0, 0)),
        ),
        (
            "delete attempts' ACL users (ACL DELUSER)",
            ("ACL", "DELUSER", keys.attempt_user(PROBE, 0, 0)),
        ),
        ("list the ACL users (ACL USERS)", ("ACL", "USERS")),
    ],
}

# what a worker's credentials must not be able to do: each a harmless command that needs that permission
NEEDS["maintenance"] = [
    ("read the GC's indexes", ("ZCARD", keys.ARTIFACT_EXPIRY)),
    ("call the GC's server functions", ("FCALL", FUNCTIONS_PROBE, "1", keys.RUN_RETENTION)),
    (
        "delete artifacts and archives",
        ("DEL", keys.artifact_key(PROBE), keys.archive_artifact_key(PROBE)),
    ),
    ("delete ended runs' records", ("DEL", keys.run_key(PROBE), keys.run_activity_key(PROBE))),
    ("write GC reports", ("JSON.DEL", keys.gc_report_key(PROBE))),
    ("append activity (through the inbox)", (QUEUED, "RPUSH", keys.ACTIVITY_INBOX, PROBE)),
    ("count GC runs in the metrics", (QUEUED, "HINCRBY", keys.METRICS_COUNTERS, PROBE, "0")),
    ("take RQ jobs", ("DEL", f"rq:{PROBE}")),
]

NEEDS["dashboard"] = [
    ("read run and termination records", ("JSON.GET", keys.run_key(PROBE))),
    ("read the metrics counters", ("HGETALL", keys.METRICS_COUNTERS)),
    ("read the gauges", ("ZCARD", keys.RUN_DEADLINES)),
    ("read RQ's workers and queues", ("SCARD", "rq:workers")),
    ("read the activity stream", ("XREVRANGE", keys.ACTIVITY_STREAM, "+", "-", "COUNT", "1")),
    (
        "read a run's own activity",
        ("XREVRANGE", keys.run_activity_key(PROBE), "+", "-", "COUNT", "1"),
    ),
]

# what no principal, worker, maintenance or dashboard user may do to others' work
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

# what the shared worker user could do before per-attempt users (issue 53), and must not now: each
# harmless (it changes nothing where it is allowed)
ATTEMPT_ONLY: list[tuple[str, tuple[str, ...]]] = [
    (
        "age another run's heartbeat (Mother's index, mother:heartbeats), so Mother takes it for lost",
        ("ZADD", keys.HEARTBEATS, "XX", "0", keys.heartbeat_member(PROBE, 0, 0)),
    ),
    (
        "write or delete another attempt's heartbeat key",
        ("DEL", keys.attempt_heartbeat_key(PROBE, 0, 0)),
    ),
    (
        "append to Mother's events stream (XADD, whose MAXLEN trims results not yet read)",
        ("XADD", keys.EVENTS_STREAM, "MAXLEN", HUGE, "0-0", "probe", "1"),
    ),
    (
        "append to Mother's spawns stream (XADD, whose MAXLEN trims children asked for)",
        ("XADD", keys.SPAWNS_STREAM, "MAXLEN", HUGE, "0-0", "probe", "1"),
    ),
    (
        "append to the activity stream (XADD, whose MAXLEN trims it)",
        ("XADD", keys.ACTIVITY_STREAM, "MAXLEN", HUGE, "0-0", "probe", "1"),
    ),
    (
        "take or drop what attempts pushed to the activity inbox",
        ("LTRIM", keys.ACTIVITY_INBOX, "0", "-1"),
    ),
    (
        "rewrite another run's budget counters (budget:run:*)",
        ("JSON.DEL", keys.run_budget_key(PROBE), "$.mother_doctor_probe"),
    ),
    (
        "rewrite another user's daily counters",
        ("JSON.DEL", keys.user_daily_budget_key(PROBE, "2000-01-01"), "$.mother_doctor_probe"),
    ),
    ("rewrite another run's ledger", ("JSON.DEL", keys.ledger_key(PROBE), "$.mother_doctor_probe")),
    (
        "rewrite or delete artifacts, protected ones too",
        ("JSON.DEL", keys.artifact_meta_key(PROBE), "$.mother_doctor_probe"),
    ),
    ("move artifacts' expiry", ("ZREM", keys.ARTIFACT_EXPIRY, PROBE)),
    (
        "rewrite library access logs",
        ("JSON.DEL", keys.access_log_key(PROBE), "$.mother_doctor_probe"),
    ),
    (
        "drop or rewrite recorded security violations",
        ("LTRIM", keys.SECURITY_VIOLATIONS, "0", "-1"),
    ),
    ("delete or set the metrics counters", ("HDEL", keys.METRICS_COUNTERS, "mother-doctor-probe")),
    (
        "count into the metrics (HINCRBY, by a negative amount too)",
        (QUEUED, "HINCRBY", keys.METRICS_COUNTERS, "mother-doctor-probe", "0"),
    ),
    ("rewrite tool statistics", ("JSON.DEL", keys.tool_stats_key(PROBE), "$.mother_doctor_probe")),
    (
        "rewrite a model's token calibration",
        ("HDEL", keys.token_calibration_key(PROBE), "mother-doctor-probe"),
    ),
    (
        "move or add library access logs on their timeline",
        ("ZREM", keys.access_logs_key(PROBE), PROBE),
    ),
    (
        "trim the activity stream (XADD MAXLEN, XTRIM)",
        ("XTRIM", keys.ACTIVITY_STREAM, "MAXLEN", "~", HUGE),
    ),
    (
        "trim or delete another run's own activity",
        ("XTRIM", keys.run_activity_key(PROBE), "MAXLEN", "~", HUGE),
    ),
    (
        "charge budgets through the server functions",
        ("FCALL", FUNCTIONS_PROBE, "1", keys.run_budget_key(PROBE)),
    ),
    (
        "send RQ's commands to workers (kill a horse, stop a job, shut down)",
        ("PUBLISH", "rq:pubsub:mother-doctor-probe", "{}"),
    ),
]

# of those, what the GC's user may not do either: it appends activity through the inbox and only counts
# into the metrics
MAINTENANCE_MUST_NOT = frozenset(
    {
        "append to the activity stream (XADD, whose MAXLEN trims it)",
        "trim the activity stream (XADD MAXLEN, XTRIM)",
        "take or drop what attempts pushed to the activity inbox",
        "drop or rewrite recorded security violations",
        "delete or set the metrics counters",
    }
)

MUST_NOT: dict[str, list[tuple[str, tuple[str, ...]]]] = {
    "worker": [
        *DESTROYS,
        (
            "submit runs on mother:submissions (any user's)",
            ("XADD", keys.SUBMISSIONS_STREAM, "0-0", "probe", "1"),
        ),
        ("write termination records", ("JSON.DEL", keys.termination_key(PROBE))),
        ("write run limits (raise its own)", ("JSON.DEL", keys.run_limits_key(PROBE))),
        ("append people's commands (cancel)", ("XTRIM", keys.COMMANDS_STREAM, "MAXLEN", "~", HUGE)),
        ("read attempt tokens (GET)", ("GET", keys.host_token_key(PROBE_HOST, PROBE, 0, 0))),
        (
            "claim (GETDEL) an attempt's token Mother put for a host",
            ("GETDEL", keys.host_token_key(PROBE_HOST, PROBE, 0, 0)),
        ),
        ("take or drop hosts' hellos", ("LTRIM", keys.HOST_HELLOS, "0", "-1")),
        ("register or forget hosts (hosts:registered)", ("HDEL", keys.HOSTS_REGISTERED, PROBE)),
        ("write a host's line (hosts:alive:*)", ("PEXPIRE", keys.host_alive_key(PROBE_HOST), HUGE)),
        ("load server functions", ("FUNCTION", "DELETE", PROBE)),
        # a path no registry has: deletes nothing even where it is allowed
        ("write the tool registry", ("JSON.DEL", keys.TOOLS_REGISTRY, "$.mother_doctor_probe")),
        ("run scripts of its own (EVAL)", ("EVAL", "return 1", "0")),
        *ATTEMPT_ONLY,
    ],
    # the GC removes a forgotten run's run-id claim with its records
    "maintenance": [
        *(d for d in DESTROYS if "runs:claimed" not in d[0]),
        *(a for a in ATTEMPT_ONLY if a[0] in MAINTENANCE_MUST_NOT),
    ],
    "dashboard": [
        *DESTROYS,
        ("append people's commands (cancel)", ("XTRIM", keys.COMMANDS_STREAM, "MAXLEN", "~", HUGE)),
        ("read attempt tokens (GET)", ("GET", keys.host_token_key(PROBE_HOST, PROBE, 0, 0))),
        ("read library chunks", ("JSON.GET", keys.chunk_key(PROBE, PROBE, 0))),
    ],
}


# what a worker's credentials can still do to runs it does not hold, that the shipped ACL cannot forbid
# without breaking what a worker needs (docs/security.md, "Known gaps"). `mother doctor` as a worker
# lists each its user can do; each probe changes nothing.
WORKER_GAPS: list[tuple[str, tuple[str, ...]]] = [
    (
        "delete, move or reorder RQ's queued jobs (rq:*): Mother dispatches a deleted or moved job "
        "again within a heartbeat timeout (denial of service, not a decision)",
        ("DEL", f"rq:job:{PROBE}"),
    )
]


@dataclass
class AclReport:
    user: str
    role: str
    lacks: list[str]
    # what this role's user can do and must not
    excess: list[str]
    # (a worker) what its user can still do to other runs that the shipped ACL cannot forbid yet
    gaps: list[str] = field(default_factory=list)


def whoami(client: redis.Redis) -> str:
    """The ACL user the connection is authenticated as ('default' without ACLs)."""
    name = client.execute_command("ACL", "WHOAMI")
    return name.decode() if isinstance(name, bytes) else str(name)


def role_of(user: str, principal: bool = False) -> str:
    """The role a user name stands for: worker, maintenance, dashboard, a principal (``principal``), or
    mother (any other name is checked as mother: everything a Mother needs)."""
    if principal:
        return "principal"
    if user.startswith("host:"):
        # a registered worker host's own user (mother.hosts): the worker's rules and its own tokens
        return "worker"
    return user if user in ("worker", "maintenance", "dashboard") else "mother"


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
    from mother.principals.identity import principal_of

    user = whoami(client)
    me = principal_of(client) if role in (None, "principal") else None
    role = role or role_of(user, me is not None)
    if me is not None:
        needs, must_not = principal_needs(user, list(me.grants)), principal_must_not(user)
    else:
        needs, must_not = NEEDS[role], MUST_NOT.get(role, [])
    lacks = [what for what, command in needs if denied(client, command)]
    excess = [what for what, command in must_not if not denied(client, command)]
    gaps = (
        [what for what, command in WORKER_GAPS if not denied(client, command)]
        if role == "worker"
        else []
    )
    return AclReport(user, role, lacks, excess, gaps)


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
