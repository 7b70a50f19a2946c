"""Per-attempt credentials (issue 53): what a phase attempt's holder may write, nobody else may.

Mother makes, for each phase attempt it dispatches, a Redis ACL user of its own
(``attempt:{run}:{index}:{attempt}``) whose password is the attempt's one-time result token: only the
worker that claims the token (``GETDEL``, once) can authenticate as it. Today that user may write one
key, the attempt's heartbeat (``heartbeat:{run}:{index}:{attempt}``, a string with a time to live):
the shared ``worker`` user may not write it, nor Mother's index of running attempts
(``mother:heartbeats``, Mother's alone), so no other worker's credentials can age an attempt into
"lost". Mother decides an attempt is lost when its heartbeat key is gone, and acts on RQ's failed-job
registry (writable by any worker) only then. Redis Functions cannot do this for us: a function runs
with its caller's permissions, so whatever it writes its caller could write directly.

Mother deletes an attempt's user (and its heartbeat key) once the attempt is no longer its run's
current one (:func:`sweep`, every few watchdog ticks; ``ACL DELUSER`` also closes its connections).
ACL users are not persisted: after a Redis restart Mother makes the users of the current attempts again
from their runs' ``token_digest`` (the token's SHA-256, which ACL takes as a password's hash), so their
workers go on beating.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import time
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import redis

from mother import effects, keys
from mother.activity import DEFAULT_MAXLEN
from mother.logs import get_logger
from mother.security import record_violation
from schemas import iso_from_ms

__all__ = [
    "DISPATCH_MARK",
    "PHASE_FUNCTIONS",
    "READ_SELECTORS",
    "REPORTED_MARK",
    "REPORTED_MS",
    "act_as",
    "attempt_client",
    "check_permitted",
    "dispatch_mark",
    "dispatched_to",
    "mint",
    "own_keys",
    "phase_artifact_id",
    "queue_alive",
    "remint",
    "rules",
    "sweep",
    "users",
]

log = get_logger(__name__)
# what Mother writes on an attempt's heartbeat key at dispatch (its life covers the wait for a worker)
DISPATCH_MARK = "dispatched"
# what the attempt writes on its heartbeat key just before its result, and for how long: a result on its
# way is not a lost attempt (Mother deletes the key with the attempt's user once the result is taken)
REPORTED_MARK = "reported"
REPORTED_MS = 24 * 3_600_000


def check_permitted(client: Any) -> None:
    """A Mother whose ACL user may not make, list and delete attempt users stops at start, in one line
    (else every dispatch would fail)."""
    from mother.acl import NEEDS, denied
    from mother.errors import ConfigError

    lacks = [
        what
        for what, command in NEEDS["mother"]
        if "attempt" in what or "ACL " in what
        if denied(client, command)
    ]
    if lacks:
        raise ConfigError(
            f"this Redis user may not {lacks[0]}: Mother makes an ACL user per phase attempt and per "
            "worker host; grant +acl|setuser +acl|deluser +acl|users +acl|getuser to Mother's user "
            "(deploy/users.acl)"
        )


# what a phase attempt reads of everyone's: the read-only selectors of deploy/users.acl's worker user
# (the shipped file and these are checked against each other by the tests)
READ_SELECTORS = (
    "(~run:* ~result:* ~termination:* ~context:* ~limits:* ~policy:* ~registry:tools ~mother:config"
    " ~mother:probe ~admission:waiting ~rejection:* ~rejections:by_run ~budget:* ~tool_stats:*"
    " ~tokens:calibration:* ~context_summary:* +hget +hgetall +json.get +json.mget +json.type"
    " +json.objkeys +json.arrlen +json.resp +exists +type +zcard +zrank +zscore +ft._list)",
    "(~mother:spawns ~runs:claimed ~admission:waiting ~mother:config ~ratelimit:user:* +fcall_ro +hget"
    " +xinfo|groups +xrange +zcard +zcount +zrange +json.get)",
    "(~idx:chunks ~chunk:* +ft.search)",
)
# the server functions a phase calls (FCALL runs each command a function sends with the caller's
# permissions: these name which functions, the key selectors below say on what)
PHASE_FUNCTIONS = (
    "mh_guard",
    "mh_library_take",
    "ledger_register",
    "ledger_reserve",
    "ledger_report",
    "ledger_release",
)
# what a phase may do on the keys it may write (no key-space-wide, server-wide or script-loading command)
WRITE_COMMANDS = "+@all -@dangerous -@scripting -@pubsub -@connection"


def phase_artifact_id(token_digest: str) -> str:
    """The id of the output artifact of the attempt whose token has this SHA-256: known to Mother when it
    makes the attempt's user (so the user may write that artifact and no other) and to the worker that
    holds the token."""
    return f"art-{token_digest[:20]}"


def days_of(today: str) -> tuple[str, str]:
    """The server days an attempt that starts on ``today`` may charge: today and the next (a phase that
    runs over midnight charges the new day)."""
    day = _dt.date.fromisoformat(today)
    return day.isoformat(), (day + _dt.timedelta(days=1)).isoformat()


def own_keys(run_id: str, index: int, attempt: int, token_digest: str) -> list[str]:
    """The keys only this attempt (and Mother) may write: its heartbeat, its run's counters, ledger,
    activity and library counters, its output artifact, the ledger nodes of the children it spawns."""
    art = phase_artifact_id(token_digest)
    return [
        keys.attempt_heartbeat_key(run_id, index, attempt),
        keys.attempt_result_key(run_id, index, attempt),
        keys.attempt_effects_key(run_id, index, attempt),
        keys.run_budget_key(run_id),
        keys.run_activity_key(run_id),
        keys.ledger_key(run_id),
        keys.ledger_children_key(run_id),
        keys.library_run_violations_key(run_id),
        keys.artifact_key(art),
        keys.artifact_meta_key(art),
        keys.workspace_key(run_id),
        keys.workspace_blobs_key(run_id),
    ]


def own_patterns(run_id: str) -> list[str]:
    """Key patterns for the run's keys whose last part is not known in advance: its per-library query
    counters (run ids hold no ``:``), its spawned children's ledger nodes (``{child prefix}.c{8 hex}``,
    exactly: :func:`mother.keys.child_prefix`), its library
    access logs (:func:`mother.keys.access_log_id_prefix`), its workspace's stored contents and the
    requests for the children it spawns (:func:`mother.keys.spawn_request_key`)."""
    return [
        keys.library_run_usage_key(run_id, "x")[: -len("x")] + "*",
        keys.ledger_key(keys.child_prefix(run_id)) + keys.CHILD_SUFFIX_GLOB,
        keys.access_log_key(keys.access_log_id_prefix(run_id) + "x")[: -len("x")] + "*",
        keys.workspace_blob_key(run_id, "0" * 64)[:-64] + "*",
        keys.spawn_request_key(keys.child_prefix(run_id)) + keys.CHILD_SUFFIX_GLOB,
    ]


def user_keys(user_id: str, today: str) -> list[str]:
    """Keys of the run's user the attempt writes (through the budget guard and the library caps): its daily
    counters and per-library daily counters, today's and the next day's."""
    out = []
    for day in days_of(today):
        out.append(keys.user_daily_budget_key(user_id, day))
        out.append(keys.library_user_usage_key(user_id, day, "x")[: -len("x")] + "*")
    return out


# keys every attempt writes and no run owns, each with the only command a phase uses on it, which only
# adds: the activity inbox (Mother moves it to the stream) and the violations list. No stream of Mother's:
# an ACL cannot allow XADD without its MAXLEN. A result and a spawned child's request go to the attempt's
# own keys, and it says so on Mother's relay channel (RELAY_RULES). What it adds to the metrics, tool
# statistics, a model's calibration and a library's timeline it counts in its own attempt_effects key,
# which Mother adds (mother/effects.py).
SHARED_SELECTORS = (f"(~{keys.ACTIVITY_INBOX} +rpush)", f"(~{keys.SECURITY_VIOLATIONS} +lpush)")
# PUBLISH on Mother's relay channel and no other (RQ's command channels included)
RELAY_RULES = ("resetchannels", f"&{keys.RELAY_CHANNEL}", "+publish")


def rules(
    run_id: str, index: int, attempt: int, token_digest: str, user_id: str, today: str
) -> list[str]:
    """The attempt user's ACL rules: on, its password the token (given as the token's SHA-256, which is
    what the run record keeps as ``token_digest``); writes to its run's keys (:func:`own_keys`) and its
    user's counters (:func:`user_keys`); calls to the phase's server functions on those keys and the
    shared ones they touch; appends on the shared keys (:data:`SHARED_SELECTORS`); its word on Mother's
    relay channel (:data:`RELAY_RULES`); reads like a worker."""
    writable = [*own_keys(run_id, index, attempt, token_digest), *own_patterns(run_id)]
    writable += user_keys(user_id, today)
    fcall_keys = [*writable, keys.run_limits_key(run_id), keys.ACTIVITY_INBOX]
    functions = " ".join(f"+fcall|{name}" for name in PHASE_FUNCTIONS)
    return [
        "reset",
        "on",
        "#" + token_digest,
        "resetkeys",
        "-@all",
        *RELAY_RULES,
        "+ping",
        "+hello",
        "+auth",
        "+time",
        "+info",
        "+client|setinfo",
        "+client|setname",
        "(" + " ".join(f"~{k}" for k in writable) + f" {WRITE_COMMANDS})",
        "(" + " ".join(f"~{k}" for k in fcall_keys) + f" {functions})",
        *SHARED_SELECTORS,
        *READ_SELECTORS,
    ]


def mint(
    client: Any, run_id: str, index: int, attempt: int, token: str, user_id: str, today: str
) -> None:
    """Make (or remake) the attempt's user. ``ACL SETUSER`` runs in no server function, so it is its own
    command, before the dispatch that hands the token over; a user whose dispatch then does not apply is
    an attempt that is not current, which :func:`sweep` deletes."""
    remint(
        client, run_id, index, attempt, hashlib.sha256(token.encode()).hexdigest(), user_id, today
    )


def remint(
    client: Any, run_id: str, index: int, attempt: int, token_digest: str, user_id: str, today: str
) -> None:
    """Make the attempt's user from the token's digest (the run record's ``token_digest``): after a Redis
    restart, which keeps no ACL user Mother made, the attempt's worker can go on beating."""
    client.execute_command(
        "ACL",
        "SETUSER",
        keys.attempt_user(run_id, index, attempt),
        *rules(run_id, index, attempt, token_digest, user_id, today),
    )


def queue_alive(
    pipe: Any,
    run_id: str,
    index: int,
    attempt: int,
    *,
    ttl_ms: int,
    now_ms: int,
    host: str | None = None,
) -> None:
    """With the dispatch: the attempt is alive until ``ttl_ms`` from now without a beat (its job may wait
    in the queue that long), and in Mother's index of attempts to check. The mark names the host its job
    was queued for (:func:`dispatch_mark`)."""
    pipe.set(
        keys.attempt_heartbeat_key(run_id, index, attempt), dispatch_mark(host), px=max(1, ttl_ms)
    )
    pipe.zadd(keys.HEARTBEATS, {keys.heartbeat_member(run_id, index, attempt): now_ms})


def dispatch_mark(host: str | None) -> str:
    """What an attempt's heartbeat key holds until its first beat: ``dispatched:{host}``, or
    ``dispatched`` when its job waits on the shared queue for a host."""
    return f"{DISPATCH_MARK}:{host}" if host else DISPATCH_MARK


def dispatched_to(value: object) -> tuple[bool, str | None]:
    """Whether a heartbeat key's value is a dispatch mark, and the host it names (None: no host)."""
    if not isinstance(value, str) or not value.startswith(DISPATCH_MARK):
        return False, None
    rest = value[len(DISPATCH_MARK) :]
    if not rest:
        return True, None
    host = rest[1:]
    return (True, host) if rest[0] == ":" and keys.is_host_id(host) else (False, None)


def attempt_client(url: str, member: str, token: str) -> redis.Redis:
    """A connection authenticated as the attempt ``member`` names (its token is the password), to ``url``'s
    server: what the attempt's beats go through."""
    from mother.connection import SENTINEL_SCHEME, client_for

    run_id, index, attempt = keys.parse_heartbeat_member(member)
    parts = urlsplit(url)
    if parts.scheme == SENTINEL_SCHEME:
        # the sentinels' addresses stay; the URL's user and password are not the attempt's
        url = urlunsplit(
            (parts.scheme, parts.netloc.rpartition("@")[2], parts.path, parts.query, "")
        )
    elif parts.scheme in ("redis", "rediss"):
        netloc = parts.hostname or "127.0.0.1"
        if ":" in netloc:
            netloc = f"[{netloc}]"
        if parts.port:
            netloc = f"{netloc}:{parts.port}"
        url = urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
    else:  # unix://user:pass@/path: the path is all it needs
        url = urlunsplit((parts.scheme, "", parts.path, parts.query, parts.fragment))
    return client_for(
        url,
        username=keys.attempt_user(run_id, index, attempt),
        password=token,
        single_connection_client=True,
        decode_responses=True,
        socket_timeout=5,
        socket_connect_timeout=5,
    )


def act_as(
    client: redis.Redis, run_id: str, index: int, attempt: int, token: str, wait_seconds: float
) -> Any:
    """Make ``client`` (its whole pool: the phase's guard, ledger, artifacts, activity and result all go
    through it) the attempt's user; returns what undoes it. A user not there yet (Redis restarted, Mother
    has not made it again) is waited for up to ``wait_seconds``; then ``AttemptRefused``."""
    from mother.connection import authenticate_as
    from mother.errors import AttemptRefused

    user = keys.attempt_user(run_id, index, attempt)
    deadline = time.monotonic() + wait_seconds
    delay = 0.1
    while True:
        try:
            restore = authenticate_as(client, user, token)
        except redis.AuthenticationError as exc:
            if time.monotonic() + delay > deadline:
                raise AttemptRefused(
                    f"Redis refused the credentials of attempt user {user} ({exc}): the attempt is no "
                    "longer current, or Mother has not made its user again after a Redis restart"
                ) from None
            time.sleep(delay)
            delay = min(1.0, delay * 2)
            continue
        break
    # what the phase adds to shared keys goes to the attempt's own hash (mother/effects.py)
    effects.begin(run_id, index, attempt)

    def undo() -> None:
        effects.end()
        restore()

    return undo


def users(client: Any) -> list[str]:
    """The attempt users there are now."""
    return [
        str(u)
        for u in client.execute_command("ACL", "USERS")
        if str(u).startswith(keys.ATTEMPT_USER_PREFIX)
    ]


def fold_orphans(client: Any, is_current: Any, batch: int = 500) -> int:
    """Add what attempts whose ACL user is gone counted for shared keys: an attempt that ended just
    before a Redis restart lost its user with it, so no sweep names it and its ``attempt_effects`` hash
    would stay. Every such hash (a scan of the key space) of an attempt with no user that is not current
    (``is_current``, as for :func:`sweep`: a current one gets its user again) is folded. Returns how many."""
    there = set(users(client))
    orphans = []
    for key in client.scan_iter(match=keys.ATTEMPT_EFFECTS_PREFIX + "*", count=1000):
        ids = keys.parse_attempt_user(str(key), keys.ATTEMPT_EFFECTS_PREFIX)
        if ids is not None and keys.attempt_user(*ids) not in there:
            orphans.append(ids)
    folded = 0
    for start in range(0, len(orphans), batch):
        chunk = orphans[start : start + batch]
        ended = [ids for ids, now in zip(chunk, is_current(chunk), strict=True) if not now]
        _fold(client, ended)
        folded += len(ended)
    if folded:
        log.info("attempt_effects_folded", count=folded, why="their attempts' users were gone")
    return folded


def _fold(client: Any, attempts: list[tuple[str, int, int]]) -> None:
    """:func:`mother.effects.fold` for ``attempts``; what it refuses is a security violation."""
    for key, field, why in effects.fold(client, attempts):
        log.warning("attempt_effects_refused", key=key, field=field[:200], why=why[:300])
        record_violation(
            client,
            "attempt_effects_refused",
            at=iso_from_ms(int(time.time() * 1000)),
            maxlen=DEFAULT_MAXLEN,
            activity=False,
            key=key,
            field=field[:200],
            why=why[:300],
        )


def sweep(client: Any, is_current: Any, batch: int = 500) -> list[str]:
    """Delete the users (and heartbeat keys, and index members) of attempts that are no longer current,
    then add what every attempt with a user counted for shared keys (:func:`mother.effects.fold`):
    ``is_current`` answers for a batch of them (a callable taking a list of (run_id, index, attempt),
    returning a list of bools). Returns the attempt users left."""
    found = users(client)
    gone: set[str] = set()
    for start in range(0, len(found), batch):
        chunk = found[start : start + batch]
        ids = [keys.parse_attempt_user(str(u)) for u in chunk]
        known = [(u, i) for u, i in zip(chunk, ids, strict=True) if i is not None]
        current = is_current([i for _u, i in known]) if known else []
        stale: list[tuple[Any, tuple[str, int, int] | None]] = [
            (u, i) for (u, i), now in zip(known, current, strict=True) if not now
        ]
        stale += [(u, None) for u, i in zip(chunk, ids, strict=True) if i is None]
        if stale:
            pipe = client.pipeline(transaction=False)
            for user, ids_ in stale:
                pipe.execute_command("ACL", "DELUSER", user)
                if ids_ is not None:
                    pipe.delete(keys.attempt_heartbeat_key(*ids_), keys.attempt_result_key(*ids_))
                    pipe.zrem(keys.HEARTBEATS, keys.heartbeat_member(*ids_))
            pipe.execute(raise_on_error=False)
            gone.update(user for user, _ids in stale)
        # after the stale users are gone (nothing more comes from them), what every attempt counted for
        # shared keys so far is added: a live one's later counts start a new hash, added next time
        _fold(client, [i for _u, i in known])
    if gone:
        log.debug("attempt_users_deleted", count=len(gone))
    return [user for user in found if user not in gone]
