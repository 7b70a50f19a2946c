"""``mother hosts``: each worker host is enrolled by an operator, never by itself: its own Redis ACL
user (``host:{name}``) that may touch only its own things (:func:`mother.identities.rules.host_rules`),
and a record Mother reads its queues from (``host:{name}``, listed in ``hosts``).

Removing a host deletes its user (its connections are closed) and record at once; Mother then queues
what waited on the host's queues on other hosts, and the attempts it ran are lost and retried.
"""

from __future__ import annotations

from typing import Any

from mother import keys
from mother.errors import InvalidSpec, NotFound
from mother.identities.enroll import admin, digest, new_password, remove_party, rotate_party, text
from mother.identities.principals import _load_all
from mother.identities.rules import host_rules
from schemas.host import HOST_QUEUE_KINDS, Host

__all__ = ["add", "load", "load_all", "names", "remove", "rotate"]


def _check_new(client: Any, name: str, queues: list[str]) -> None:
    keys.check_host(name)
    unknown = [q for q in queues if q not in HOST_QUEUE_KINDS]
    if unknown or not queues:
        raise InvalidSpec(
            f"--queues takes some of {', '.join(HOST_QUEUE_KINDS)}"
            + (f", not {unknown[0]!r}" if unknown else ""),
            field="queues",
        )
    if client.exists(keys.host_key(name)):
        raise InvalidSpec(
            f"host {name!r} is enrolled; `mother hosts rotate {name}` gives it a new password",
            field="name",
        )
    # an administrator's connection, checked before anything is written (a user left by an earlier
    # enrollment of this name is reset)
    admin(client, "enrolling a host", "ACL", "GETUSER", keys.host_user(name))


def add(
    client: Any, name: str, queues: list[str], now: str, password: str | None = None
) -> tuple[Host, str]:
    """Enroll host ``name``: its record, then its ACL user (a new random password, returned once, unless
    the caller chose one with :func:`new_password`)."""
    _check_new(client, name, queues)
    password = password or new_password()
    host = Host(
        name=name,
        queues=list(dict.fromkeys(queues)),  # type: ignore[arg-type]
        enrolled_at=now,
        password_sha256=digest(password),
    )
    pipe = client.pipeline(transaction=True)
    pipe.execute_command("JSON.SET", keys.host_key(name), "$", host.to_json())
    pipe.sadd(keys.HOSTS, name)
    pipe.execute()
    admin(
        client,
        "enrolling a host",
        "ACL",
        "SETUSER",
        keys.host_user(name),
        *host_rules(host, password),
    )
    return host, password


def rotate(client: Any, name: str, now: str, password: str | None = None) -> str:
    """A new password for host ``name`` (the old one stops working at once; its connections close)."""
    host = _must(client, name)
    password = password or new_password()
    rotate_party(
        client,
        keys.host_key(name),
        keys.host_user(host.name),
        now,
        "rotating a host's password",
        password,
    )
    return password


def remove(client: Any, name: str) -> Host:
    """Revoke host ``name`` at once: its ACL user (its connections are closed) and its record."""
    host = _must(client, name)
    remove_party(
        client, keys.host_key(name), keys.HOSTS, name, keys.host_user(name), "removing a host"
    )
    return host


def _must(client: Any, name: str) -> Host:
    keys.check_host(name)
    host = load(client, name)
    if host is None:
        raise NotFound(f"no host {name!r} is enrolled; list them with `mother hosts list`")
    return host


def names(client: Any) -> list[str]:
    return sorted(text(n) for n in client.smembers(keys.HOSTS))


def load(client: Any, name: str) -> Host | None:
    raw = client.execute_command("JSON.GET", keys.host_key(name))
    return Host.model_validate_json(raw) if raw else None


def load_all(client: Any) -> dict[str, Host]:
    """Every enrolled host, by name (a record that is missing or does not parse is left out)."""
    return _load_all(client, names(client), keys.host_key, Host)
