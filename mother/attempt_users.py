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

import hashlib
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import redis

from mother import keys
from mother.logs import get_logger

__all__ = [
    "DISPATCH_MARK",
    "attempt_client",
    "check_permitted",
    "mint",
    "queue_alive",
    "remint",
    "rules",
    "sweep",
    "users",
]

log = get_logger(__name__)
# what Mother writes on an attempt's heartbeat key at dispatch (its life covers the wait for a worker)
DISPATCH_MARK = "dispatched"


def check_permitted(client: Any) -> None:
    """A Mother whose ACL user may not make, list and delete attempt users stops at start, in one line
    (else every dispatch would fail)."""
    from mother.acl import NEEDS, denied
    from mother.errors import ConfigError

    lacks = [
        what
        for what, command in NEEDS["mother"]
        if "attempt" in what or "ACL USERS" in what
        if denied(client, command)
    ]
    if lacks:
        raise ConfigError(
            f"this Redis user may not {lacks[0]}: Mother makes an ACL user per phase attempt; grant "
            "+acl|setuser +acl|deluser +acl|users to Mother's user (deploy/users.acl)"
        )


def rules(run_id: str, index: int, attempt: int, token_digest: str) -> list[str]:
    """The attempt user's ACL rules: on, its password the token (given as the token's SHA-256, which is
    what the run record keeps as ``token_digest``), its heartbeat key only."""
    key = keys.attempt_heartbeat_key(run_id, index, attempt)
    return [
        "reset",
        "on",
        "#" + token_digest,
        "resetchannels",
        f"~{key}",
        "-@all",
        "+set",
        "+del",
        "+ping",
        "+hello",
        "+client|setinfo",
        "+client|setname",
    ]


def mint(client: Any, run_id: str, index: int, attempt: int, token: str) -> None:
    """Make (or remake) the attempt's user. ``ACL SETUSER`` runs in no server function, so it is its own
    command, before the dispatch that hands the token over; a user whose dispatch then does not apply is
    an attempt that is not current, which :func:`sweep` deletes."""
    remint(client, run_id, index, attempt, hashlib.sha256(token.encode()).hexdigest())


def remint(client: Any, run_id: str, index: int, attempt: int, token_digest: str) -> None:
    """Make the attempt's user from the token's digest (the run record's ``token_digest``): after a Redis
    restart, which keeps no ACL user Mother made, the attempt's worker can go on beating."""
    client.execute_command(
        "ACL",
        "SETUSER",
        keys.attempt_user(run_id, index, attempt),
        *rules(run_id, index, attempt, token_digest),
    )


def queue_alive(
    pipe: Any, run_id: str, index: int, attempt: int, *, ttl_ms: int, now_ms: int
) -> None:
    """With the dispatch: the attempt is alive until ``ttl_ms`` from now without a beat (its job may wait
    in the queue that long), and in Mother's index of attempts to check."""
    pipe.set(keys.attempt_heartbeat_key(run_id, index, attempt), DISPATCH_MARK, px=max(1, ttl_ms))
    pipe.zadd(keys.HEARTBEATS, {keys.heartbeat_member(run_id, index, attempt): now_ms})


def attempt_client(url: str, member: str, token: str) -> redis.Redis:
    """A connection authenticated as the attempt ``member`` names (its token is the password), to ``url``'s
    server: what the attempt's beats go through."""
    run_id, index, attempt = keys.parse_heartbeat_member(member)
    parts = urlsplit(url)
    if parts.scheme in ("redis", "rediss"):
        netloc = parts.hostname or "127.0.0.1"
        if ":" in netloc:
            netloc = f"[{netloc}]"
        if parts.port:
            netloc = f"{netloc}:{parts.port}"
        url = urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
    else:  # unix://user:pass@/path: the path is all it needs
        url = urlunsplit((parts.scheme, "", parts.path, parts.query, parts.fragment))
    return redis.Redis.from_url(
        url,
        username=keys.attempt_user(run_id, index, attempt),
        password=token,
        single_connection_client=True,
        decode_responses=True,
        socket_timeout=5,
        socket_connect_timeout=5,
    )


def users(client: Any) -> list[str]:
    """The attempt users there are now."""
    return [
        str(u)
        for u in client.execute_command("ACL", "USERS")
        if str(u).startswith(keys.ATTEMPT_USER_PREFIX)
    ]


def sweep(client: Any, is_current: Any, batch: int = 500) -> list[str]:
    """Delete the users (and heartbeat keys, and index members) of attempts that are no longer current:
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
        if not stale:
            continue
        pipe = client.pipeline(transaction=False)
        for user, ids_ in stale:
            pipe.execute_command("ACL", "DELUSER", user)
            if ids_ is not None:
                pipe.delete(keys.attempt_heartbeat_key(*ids_))
                pipe.zrem(keys.HEARTBEATS, keys.heartbeat_member(*ids_))
        pipe.execute(raise_on_error=False)
        gone.update(user for user, _ids in stale)
    if gone:
        log.debug("attempt_users_deleted", count=len(gone))
    return [user for user in found if user not in gone]
