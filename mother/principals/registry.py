"""``mother principals``: each person or service is a principal, its own Redis ACL user, with exactly
what its grants need (:mod:`mother.principals.acl`), and a record Mother reads its grants and
``acts_for`` from (``principal:{name}``, listed in ``principals``).

Adding, rotating and removing need an administrator's connection (``ACL SETUSER``); Mother's own
user cannot change ACL users. Where the server has an ACL file, the change is saved to it
(``ACL SAVE``); elsewhere (the embedded development server) principals last until the server
restarts, and :func:`persist` says so.
"""

from __future__ import annotations

import hashlib
import secrets as _secrets
from typing import Any

import orjson
import redis

from mother import keys
from mother.errors import ConfigError, InvalidSpec, NotFound
from mother.principals.acl import RESERVED, rules
from schemas.principal import GRANTS, Principal

__all__ = ["add", "load", "load_all", "names", "persist", "reapply", "remove", "rotate"]


def _admin(client: Any, what: str, *args: Any) -> Any:
    """``args`` run as an administrator: Mother's own user may make and delete users (attempts', hosts')
    but is no administrator, so an ACL command it lacks (``ACL DRYRUN``, harmless) is tried first."""
    try:
        client.execute_command("ACL", "DRYRUN", "default", "PING")
        return client.execute_command(*args)
    except redis.exceptions.NoPermissionError:
        raise ConfigError(
            f"{what} needs an administrator's connection (ACL SETUSER): set MOTHER_REDIS_URL to a "
            "Redis user with the ACL commands (not Mother's, which may not make users)"
        ) from None


def _check_new(client: Any, name: str, grants: list[str], acts_for: list[str]) -> None:
    keys.check_principal(name)
    if name in RESERVED:
        raise InvalidSpec(f"{name!r} is a service user's name; pick another", field="name")
    unknown = [g for g in grants if g not in GRANTS]
    if unknown or not grants:
        raise InvalidSpec(
            f"--can takes some of {', '.join(GRANTS)}"
            + (f", not {unknown[0]!r}" if unknown else ""),
            field="grants",
        )
    for user in acts_for:
        if user != "*":
            keys.check_id(user, "acts_for")
    if client.exists(keys.principal_key(name)):
        raise InvalidSpec(
            f"principal {name!r} exists; `mother principals rotate {name}` gives it a new password",
            field="name",
        )
    if _admin(client, "adding a principal", "ACL", "GETUSER", name) is not None:
        raise InvalidSpec(
            f"Redis already has an ACL user {name!r}; pick another name", field="name"
        )


def add(
    client: Any, name: str, grants: list[str], acts_for: list[str], now: str
) -> tuple[Principal, str]:
    """Make principal ``name``: its ACL user (a new random password, returned once) and its record."""
    _check_new(client, name, grants, acts_for)
    password = _secrets.token_urlsafe(24)
    principal = Principal(
        name=name,
        grants=list(dict.fromkeys(grants)),  # type: ignore[arg-type]
        acts_for=list(dict.fromkeys(acts_for)),
        created_at=now,
        password_sha256=_digest(password),
    )
    _admin(
        client, "adding a principal", "ACL", "SETUSER", name, *rules(principal, password=password)
    )
    pipe = client.pipeline(transaction=True)
    pipe.execute_command("JSON.SET", keys.principal_key(name), "$", principal.to_json())
    pipe.sadd(keys.PRINCIPALS, name)
    pipe.execute()
    return principal, password


def rotate(client: Any, name: str, now: str) -> str:
    """A new password for ``name`` (the old one stops working at once; its connections are closed)."""
    principal = load(client, name)
    if principal is None:
        raise NotFound(f"no principal {name!r}; list them with `mother principals list`")
    password = _secrets.token_urlsafe(24)
    _admin(client, "rotating a password", "ACL", "SETUSER", name, "resetpass", f">{password}")
    _admin(client, "rotating a password", "CLIENT", "KILL", "USER", name)
    pipe = client.pipeline(transaction=True)
    pipe.execute_command("JSON.SET", keys.principal_key(name), "$.rotated_at", orjson.dumps(now))
    pipe.execute_command(
        "JSON.SET", keys.principal_key(name), "$.password_sha256", orjson.dumps(_digest(password))
    )
    pipe.execute()
    return password


def _digest(password: str) -> str:
    return hashlib.sha256(password.encode()).hexdigest()


def reapply(client: Any) -> tuple[list[str], list[str]]:
    """Make again the ACL user of every principal the registry holds and the server lacks (a restart
    without saved ACLs, a replica promoted by Sentinel: ACL users are neither saved by SETUSER nor
    replicated), from its record and its password's digest (Mother's own user may ``ACL SETUSER``).
    Returns (the principals made again, those that cannot be: no digest kept, made before it was)."""
    found = load_all(client)
    if not found:
        return [], []
    there = {_text(u) for u in client.execute_command("ACL", "USERS")}
    made, cannot = [], []
    for name, principal in sorted(found.items()):
        if name in there:
            continue
        if principal.password_sha256 is None:
            cannot.append(name)
            continue
        client.execute_command("ACL", "SETUSER", name, *rules(principal))
        made.append(name)
    return made, cannot


def remove(client: Any, name: str) -> Principal:
    """Delete ``name``'s ACL user (its connections are closed) and its record. Its streams stay, with
    what Mother has not taken yet, until their retention: Mother no longer reads them."""
    principal = load(client, name)
    if principal is None:
        raise NotFound(f"no principal {name!r}; list them with `mother principals list`")
    _admin(client, "removing a principal", "ACL", "DELUSER", name)
    pipe = client.pipeline(transaction=True)
    pipe.delete(keys.principal_key(name))
    pipe.srem(keys.PRINCIPALS, name)
    pipe.execute()
    return principal


def persist(client: Any) -> str | None:
    """Save the ACL users to the server's ACL file; a note when the server has none (principals then
    last until it restarts)."""
    try:
        client.execute_command("ACL", "SAVE")
    except redis.exceptions.ResponseError as exc:
        if "ACL file" in str(exc) or "aclfile" in str(exc).lower():
            return (
                "this server has no ACL file: principals last until it restarts (start it with "
                "--aclfile, as deploy/ does, to keep them)"
            )
        raise
    return None


def names(client: Any) -> list[str]:
    return sorted(_text(n) for n in client.smembers(keys.PRINCIPALS))


def load(client: Any, name: str) -> Principal | None:
    raw = client.execute_command("JSON.GET", keys.principal_key(name))
    return Principal.model_validate_json(raw) if raw else None


def load_all(client: Any) -> dict[str, Principal]:
    """Every principal, by name (a record that is missing or does not parse is left out)."""
    listed = names(client)
    if not listed:
        return {}
    pipe = client.pipeline(transaction=False)
    for name in listed:
        pipe.execute_command("JSON.GET", keys.principal_key(name))
    found = {}
    for name, raw in zip(listed, pipe.execute(raise_on_error=False), strict=True):
        if isinstance(raw, (str, bytes)):
            try:
                found[name] = Principal.model_validate_json(raw)
            except ValueError:
                continue
    return found


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
