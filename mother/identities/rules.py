"""The ACL users of the enrolled parties: exactly what each needs, built from its record.

**A host** (:func:`host_rules`) touches only its own things: RQ's keys of its own queues, workers and
jobs (their names start with the host's), ``XADD`` to its own ask stream, and its own replies. It reads
nothing of run state, budgets, artifacts, libraries or other hosts: what an attempt needs comes in
Mother's reply to its asks.

**A principal** (:func:`principal_rules`): exactly what its grants need.

Everyone who may follow runs reads them (run records, results, terminations, rejections, budgets,
the queue: read commands only); nothing is writable but, through selectors, the principal's own
streams:

- ``submit``: ``XADD`` on ``mother:submissions:{name}`` and no other command on it;
- ``approve``, ``answer``, ``cancel``, ``operate``: ``XADD`` on ``mother:commands:{name}``;
- and its own replies, ``mother:reply:{name}:*`` (``BLPOP``).

``inspect`` reads more, still only reads: what ``mother inspect``, ``mother replay export``, ``mother
artifacts list|show`` and ``mother library list|show|policy|report`` read (artifacts, conflicts,
contexts, the ledger, GC reports, libraries' policies and access logs; never a library's text).

Redis cannot tell a server function who called it (``ACL WHOAMI`` is refused in scripts), so what a
principal can write is its identity: an entry on ``mother:submissions:alice`` was written by alice's
ACL user, because no other user may write there. Mother reads the name from the stream's key.
"""

from __future__ import annotations

from mother import keys
from schemas.host import Host
from schemas.principal import Principal

__all__ = ["COMMAND_GRANTS", "HOST_COMMANDS", "RESERVED", "host_rules", "principal_rules"]

# the service users' names (deploy/users.acl) and Redis's own: never a principal's
RESERVED = frozenset({"default", "mother", "worker", "maintenance", "dashboard", "client", "admin"})
# which grant a command on a principal's command stream needs
COMMAND_GRANTS = {
    "cancel": "cancel",
    "approve": "approve",
    "deny": "approve",
    "answer": "answer",
    "budget_override": "operate",
    "budget_stop": "operate",
    "budget_reset": "operate",
}
# what following a run reads
READ_KEYS = (
    "run:*",
    "result:*",
    "termination:*",
    "rejection:*",
    "rejections*",
    "runs:*",
    "terminations:*",
    "limits:run:*",
    "admission:*",
    "budget:*",
    "mother:config",
    "mother:deadlines:*",
    "rq:*",
    "activity",
    "activity:run:*",
    # the search index over run records (`mother runs` by status, time, "not success")
    "idx:runs",
    "ratelimit:user:*",
    # the libraries' names (a spec naming one that does not exist is refused before it is sent)
    "libraries",
    # what a connection asks the server when it opens (the JSON module's probe)
    "mother:probe",
)
READ_COMMANDS = (
    "ft.search",
    "json.get",
    "json.mget",
    "json.type",
    "zrange",
    "zrevrange",
    "zrangebyscore",
    "zrevrangebyscore",
    "zscore",
    "zrank",
    "zinter",
    "zcard",
    "zcount",
    "exists",
    "type",
    "hget",
    "hexists",
    "hgetall",
    "llen",
    "scard",
    "smembers",
    "sismember",
    "xrange",
    "xrevrange",
    "xread",
    "xinfo|stream",
    "xinfo|groups",
    "xlen",
    "xpending",
    # the client's courtesy checks (mh_submit_check, no writes)
    "fcall_ro",
)
# what a developer inspects besides (the ``inspect`` grant): read-only too
INSPECT_KEYS = (
    "artifact:*",
    "artifact_meta:*",
    "archive:artifact:*",
    "conflict:*",
    "idx:conflict",
    "context:*",
    "context_summary:*",
    # each phase's step journal (replay bundles carry it)
    "journal:*",
    "ledger:*",
    "ledger_children:*",
    "gc_report:*",
    "gc:reports",
    "library:*",
    "policy:library:*",
    "access_log:*",
    "access_logs:*",
    "idx:access_logs",
    "registry:tools",
    "tool_stats:*",
    "workspace:*",
    # a run whose end is written but not yet applied (`inspect` says since when)
    "mother:ending",
)
INSPECT_COMMANDS = ("ft.aggregate", "get", "strlen", "hlen", "sscan", "zscan", "lrange")
CONNECTION = (
    "ping",
    "hello",
    "client|setinfo",
    "client|setname",
    "acl|whoami",
    "time",
    "info",
    "function|list",
    "ft._list",
)


def _secret(password: str | None, sha256: str | None, who: str) -> str:
    if password is not None:
        return f">{password}"
    if sha256 is not None:
        return f"#{sha256}"
    raise ValueError(f"{who} has neither a password nor a digest of one")


def principal_rules(principal: Principal, password: str | None = None) -> list[str]:
    """``ACL SETUSER {name} ...`` arguments: the user reset to exactly what ``principal`` may do, its
    password ``password``, or (None) the digest its record keeps."""
    name = principal.name
    own = [keys.principal_key(name), keys.principal_submissions_key(name), keys.PRINCIPALS]
    secret = _secret(password, principal.password_sha256, f"principal {name}")
    args = ["reset", "on", secret, "resetchannels", "-@all"]
    args += [f"+{command}" for command in (*CONNECTION, *READ_COMMANDS)]
    # `~`, not `%R~`: the JSON module's commands declare no key access, so Redis asks full access for
    # their keys; the user's only commands outside its selectors read
    args += [f"~{pattern}" for pattern in (*READ_KEYS, *own)]
    if principal.may("inspect"):
        args += [f"+{command}" for command in INSPECT_COMMANDS]
        args += [f"~{pattern}" for pattern in INSPECT_KEYS]
    if principal.may("submit"):
        args.append(f"(~{keys.principal_submissions_key(name)} +xadd)")
    if any(principal.may(g) for g in set(COMMAND_GRANTS.values())):
        args.append(f"(~{keys.principal_commands_key(name)} +xadd)")
        args.append(f"(~{keys.principal_replies_pattern(name)} +blpop +lpop)")
    return args


HOST_CONNECTION = (
    "ping", "hello", "client|setinfo", "client|setname", "client|info", "acl|whoami", "time", "info",
)  # fmt: skip
# what an RQ worker does on its own keys (RQ 3: its queues, registries, job hashes, result streams, worker
# hashes), and the asks and replies; no command that reaches keys by scanning, no scripts, no pub/sub
HOST_COMMANDS = (
    "get", "set", "del", "unlink", "exists", "expire", "pexpire", "persist", "ttl", "pttl", "type",
    "hset", "hsetnx", "hget", "hmget", "hgetall", "hdel", "hincrby", "hincrbyfloat", "hexists", "hlen",
    "hkeys", "lpush", "rpush", "lpop", "rpop", "lrem", "lrange", "llen", "lpos", "lindex", "ltrim",
    "lmove", "blmove", "blpop", "zadd", "zrem", "zrange", "zrangebyscore", "zrevrangebyscore",
    "zremrangebyscore", "zremrangebyrank", "zcard", "zscore", "zcount", "zpopmin", "sadd", "srem",
    "smembers", "scard", "sismember", "xadd", "xrange", "xrevrange", "xread", "xlen", "xtrim",
    "multi", "exec", "discard", "watch", "unwatch",
)  # fmt: skip


def host_rules(host: Host, password: str | None = None) -> list[str]:
    """``ACL SETUSER host:{name} ...`` arguments: the host's user reset to its own things only (above),
    its password ``password``, or (None) the digest its record keeps."""
    name = host.name
    secret = _secret(password, host.password_sha256, f"host {name}")
    args = ["reset", "on", secret, "resetchannels", "-@all"]
    args += [f"+{command}" for command in (*HOST_CONNECTION, *HOST_COMMANDS)]
    args += [
        f"~{pattern}" for pattern in (*keys.host_rq_patterns(name), keys.host_replies_pattern(name))
    ]
    args.append(f"(~{keys.host_asks_key(name)} +xadd)")
    # RQ's shared sets: a worker adds and removes itself; the queues' set and the suspension flag are read
    args.append(f"(~{keys.RQ_WORKERS} +sadd +srem +smembers +scard +sismember)")
    args.append(
        f"(~{keys.RQ_QUEUES} ~{keys.RQ_SUSPENDED} ~{keys.RQ_RATE_LIMITS} +smembers +sismember +scard "
        "+exists +get)"
    )
    if host.takes("maintenance"):
        # the GC's job reads which ids are due (ids and times only); Mother applies each batch
        due = (keys.ARTIFACT_ARCHIVE_DUE, keys.ARTIFACT_EXPIRY, keys.RUN_RETENTION)
        args.append("(" + " ".join(f"~{k}" for k in due) + " +zrangebyscore +zrange +zcard)")
    return args
