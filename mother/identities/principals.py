"""``mother principals``: each person or service is a principal, its own Redis ACL user, with exactly
what its grants need (:func:`mother.identities.rules.principal_rules`), and a record Mother reads its
grants and ``acts_for`` from (``principal:{name}``, listed in ``principals``).

Adding, rotating and removing need an administrator's connection (``ACL SETUSER``). Where the server
has an ACL file, the change is saved to it (``ACL SAVE``); the leading Mother makes a principal's user
again from its record wherever the server lost it (:mod:`mother.identities.reapply`).
"""

from __future__ import annotations

from typing import Any

from mother import keys
from mother.errors import InvalidSpec, NotFound
from mother.identities.enroll import admin, digest, new_password, remove_party, rotate_party, text
from mother.identities.rules import RESERVED, principal_rules
from schemas.principal import GRANTS, Principal

__all__ = ["add", "load", "load_all", "names", "remove", "rotate"]


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
    if admin(client, "adding a principal", "ACL", "GETUSER", name) is not None:
        raise InvalidSpec(
            f"Redis already has an ACL user {name!r}; pick another name", field="name"
        )


def add(
    client: Any, name: str, grants: list[str], acts_for: list[str], now: str
) -> tuple[Principal, str]:
    """Make principal ``name``: its record, then its ACL user (a new random password, returned once).
    The record comes first: a user the server took is one Mother can make again."""
    _check_new(client, name, grants, acts_for)
    password = new_password()
    principal = Principal(
        name=name,
        grants=list(dict.fromkeys(grants)),  # type: ignore[arg-type]
        acts_for=list(dict.fromkeys(acts_for)),
        created_at=now,
        password_sha256=digest(password),
    )
    pipe = client.pipeline(transaction=True)
    pipe.execute_command("JSON.SET", keys.principal_key(name), "$", principal.to_json())
    pipe.sadd(keys.PRINCIPALS, name)
    pipe.execute()
    admin(
        client, "adding a principal", "ACL", "SETUSER", name, *principal_rules(principal, password)
    )
    return principal, password


def rotate(client: Any, name: str, now: str) -> str:
    """A new password for ``name`` (the old one stops working at once; its connections are closed)."""
    principal = load(client, name)
    if principal is None:
        raise NotFound(f"no principal {name!r}; list them with `mother principals list`")
    password = new_password()
    rotate_party(client, keys.principal_key(name), name, now, "rotating a password", password)
    return password


def remove(client: Any, name: str) -> Principal:
    """Delete ``name``'s ACL user (its connections are closed) and its record. Its streams stay, with
    what Mother has not taken yet, until their retention: Mother no longer reads them."""
    principal = load(client, name)
    if principal is None:
        raise NotFound(f"no principal {name!r}; list them with `mother principals list`")
    remove_party(
        client, keys.principal_key(name), keys.PRINCIPALS, name, name, "removing a principal"
    )
    return principal


def names(client: Any) -> list[str]:
    return sorted(text(n) for n in client.smembers(keys.PRINCIPALS))


def load(client: Any, name: str) -> Principal | None:
    raw = client.execute_command("JSON.GET", keys.principal_key(name))
    return Principal.model_validate_json(raw) if raw else None


def load_all(client: Any) -> dict[str, Principal]:
    """Every principal, by name (a record that is missing or does not parse is left out)."""
    return _load_all(client, names(client), keys.principal_key, Principal)


def _load_all(client: Any, listed: list[str], key: Any, model: Any) -> dict[str, Any]:
    if not listed:
        return {}
    pipe = client.pipeline(transaction=False)
    for name in listed:
        pipe.execute_command("JSON.GET", key(name))
    found = {}
    for name, raw in zip(listed, pipe.execute(raise_on_error=False), strict=True):
        if isinstance(raw, (str, bytes)):
            try:
                found[name] = model.model_validate_json(raw)
            except ValueError:
                continue
    return found
