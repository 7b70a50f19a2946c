"""What enrolling any party takes, principals and hosts alike: an administrator's connection, a new
password shown once (its SHA-256 kept, never the password), the ACL file saved, and the URL the party
connects with."""

from __future__ import annotations

import hashlib
import secrets
import time
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

import orjson
import redis

from mother.errors import ConfigError

__all__ = [
    "admin",
    "digest",
    "new_password",
    "party_url",
    "persist",
    "remove_party",
    "replicated",
    "rotate_party",
    "text",
    "users_there",
]

# how long an enrolment waits for the server's replicas to have the party's record
REPLICAS_WAIT_SECONDS = 2.0


def admin(client: Any, what: str, *args: Any) -> Any:
    """``args`` run as an administrator: Mother's own user may make users again from their digests but is
    no administrator, so an ACL command it lacks (``ACL DRYRUN``, harmless) is tried first."""
    try:
        client.execute_command("ACL", "DRYRUN", "default", "PING")
        return client.execute_command(*args)
    except redis.exceptions.NoPermissionError:
        raise ConfigError(
            f"{what} needs an administrator's connection (ACL SETUSER): set MOTHER_REDIS_URL to a "
            "Redis user with the ACL commands (deploy/users.acl's admin line), not Mother's"
        ) from None


def new_password() -> str:
    return secrets.token_urlsafe(24)


def digest(password: str) -> str:
    return hashlib.sha256(password.encode()).hexdigest()


def persist(client: Any) -> str | None:
    """Save the ACL users to the server's ACL file, and wait until the server's replicas have the
    party's record (:func:`replicated`); a note when the server has no ACL file (the users then last
    until it restarts, and the leading Mother makes them again from their digests) or a replica did not
    confirm."""
    notes = []
    try:
        client.execute_command("ACL", "SAVE")
    except redis.exceptions.ResponseError as exc:
        if "ACL file" not in str(exc) and "aclfile" not in str(exc).lower():
            raise
        notes.append(
            "this server has no ACL file: the user lasts until it restarts, and the leading Mother "
            "makes it again from its record then (start the server with --aclfile, as deploy/ does, "
            "to keep it meanwhile)"
        )
    notes.append(replicated(client) or "")
    return "; ".join(n for n in notes if n) or None


def replicated(client: Any, timeout: float = REPLICAS_WAIT_SECONDS) -> str | None:
    """Wait until every replica of the server has acknowledged all the primary has written so far (the
    party's record among it), up to ``timeout`` seconds: a failover in the moment after an enrolment
    must not lose the record Mother makes the party's user from (an ACL user is not replicated; the
    record is). A note when a replica did not confirm in time; None when it did, or there is none.

    The replicas' acknowledged offsets are read from ``INFO replication`` rather than by ``WAIT``,
    which counts only the writes of its own connection (a pooled client may have written on another)."""
    deadline = time.monotonic() + timeout
    target: int | None = None
    while True:
        info = client.info("replication")
        target = int(info.get("master_repl_offset", 0)) if target is None else target
        replicas = [v for k, v in info.items() if k.startswith("slave") and isinstance(v, dict)]
        behind = [r for r in replicas if int(r.get("offset", 0)) < target]
        if not behind:
            return None
        if time.monotonic() >= deadline:
            return (
                f"{len(behind)} of {len(replicas)} replicas did not confirm the record within "
                f"{timeout:g} s: a failover now could lose this party; run the command again to be sure"
            )
        time.sleep(0.02)


def rotate_party(client: Any, key: str, user: str, now: str, what: str, password: str) -> None:
    """Give the party whose record is ``key`` and whose ACL user is ``user`` a new ``password``: the
    record's digest first (the truth Mother makes a lost user from), then the user, whose connections
    are closed. When the server refuses the user's change, the record is put back as it was."""
    before = client.execute_command("JSON.GET", key, "$.password_sha256", "$.rotated_at")
    _set_password(client, key, digest(password), now)
    try:
        admin(client, what, "ACL", "SETUSER", user, "resetpass", f">{password}")
    except BaseException:
        old = orjson.loads(before) if before else {}
        _set_password(
            client, key, *(_first(old.get(p)) for p in ("$.password_sha256", "$.rotated_at"))
        )
        raise
    admin(client, what, "CLIENT", "KILL", "USER", user)


def _first(values: Any) -> Any:
    return values[0] if values else None


def _set_password(client: Any, key: str, sha256: str | None, rotated_at: str | None) -> None:
    pipe = client.pipeline(transaction=True)
    pipe.execute_command("JSON.SET", key, "$.rotated_at", orjson.dumps(rotated_at))
    pipe.execute_command("JSON.SET", key, "$.password_sha256", orjson.dumps(sha256))
    pipe.execute()


def remove_party(client: Any, key: str, listed_in: str, name: str, user: str, what: str) -> None:
    """Delete a party's ACL user (its connections are closed), then its record and listing."""
    admin(client, what, "ACL", "DELUSER", user)
    pipe = client.pipeline(transaction=True)
    pipe.delete(key)
    pipe.srem(listed_in, name)
    pipe.execute()


def users_there(client: Any) -> set[str]:
    """The ACL users the server has now."""
    return {text(u) for u in client.execute_command("ACL", "USERS")}


def party_url(base: str, user: str, password: str) -> str:
    """``base`` (any Redis URL of the server: ``redis://``, ``rediss://``, ``unix://``, or
    ``redis+sentinel://`` naming several sentinels) as ACL user ``user``: its user and password in place
    of the base's, everything else (the hosts and their ports, the path, the query) as it was."""
    parts = urlsplit(base)
    hosts = parts.netloc.rpartition("@")[2] or "127.0.0.1"
    netloc = f"{quote(user, safe='')}:{quote(password, safe='')}@{hosts}"
    path = parts.path if parts.path or parts.scheme.startswith("unix") else "/0"
    return urlunsplit((parts.scheme, netloc, path, parts.query, parts.fragment))


def text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
