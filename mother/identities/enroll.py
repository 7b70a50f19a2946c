"""What enrolling any party takes, principals and hosts alike: an administrator's connection, a new
password shown once (its SHA-256 kept, never the password), the ACL file saved, and the URL the party
connects with."""

from __future__ import annotations

import hashlib
import secrets
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

import redis

from mother.errors import ConfigError

__all__ = ["admin", "digest", "new_password", "party_url", "persist", "text", "users_there"]


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
    """Save the ACL users to the server's ACL file; a note when the server has none (the users then last
    until it restarts, and the leading Mother makes them again from their digests)."""
    try:
        client.execute_command("ACL", "SAVE")
    except redis.exceptions.ResponseError as exc:
        if "ACL file" in str(exc) or "aclfile" in str(exc).lower():
            return (
                "this server has no ACL file: the user lasts until it restarts, and the leading Mother "
                "makes it again from its record then (start the server with --aclfile, as deploy/ does, "
                "to keep it meanwhile)"
            )
        raise
    return None


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
