"""The registry is the truth: every enrolled party's ACL user, made again wherever the server lacks it.

ACL users are neither replicated nor saved by ``ACL SETUSER``: a replica promoted by Sentinel, or a
server restarted without saved ACLs, has none of the principals and hosts made while it ran. Their
records (ordinary replicated data, each with its password's SHA-256, never the password) are the truth:
the leading Mother makes every missing user again from them (``ACL SETUSER … #digest``) at its start, on
taking the lead, after a reconnect and every few watchdog ticks (:func:`reapply`).

On a managed Redis that refuses ``ACL SETUSER`` from clients, the users come from an ACL file or the
provider's console instead: :func:`acl_file` writes the deployment's whole file (``mother acl export``),
and Mother, told not to make users (``service.make_acl_users: false``), only says which are missing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mother import keys
from mother.identities import hosts, principals
from mother.identities.enroll import users_there
from mother.identities.rules import host_rules, principal_rules

__all__ = ["Reapplied", "acl_file", "reapply", "wanted"]


@dataclass
class Reapplied:
    """What one pass found: users made again, users missing (not made: told not to, or refused), and
    parties whose record keeps no digest to make them from."""

    made: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    cannot: list[str] = field(default_factory=list)


def wanted(client: Any) -> dict[str, list[str]]:
    """Every enrolled party's ACL user (its name) and its rules, from the registry (a party without a
    digest is left out: it cannot be made)."""
    found: dict[str, list[str]] = {}
    for host in hosts.load_all(client).values():
        found[keys.host_user(host.name)] = host_rules(host)
    for principal in principals.load_all(client).values():
        if principal.password_sha256 is not None:
            found[principal.name] = principal_rules(principal)
    return found


def reapply(client: Any, *, make: bool = True) -> Reapplied:
    """Make again every enrolled party's user the server lacks (``make``: else only say which are
    missing). A user the server refuses to make is reported missing, not raised: the others are made."""
    done = Reapplied()
    done.cannot = sorted(
        name for name, p in principals.load_all(client).items() if p.password_sha256 is None
    )
    want = wanted(client)
    if not want:
        return done
    there = users_there(client)
    for user, rules in sorted(want.items()):
        if user in there:
            continue
        if not make:
            done.missing.append(user)
            continue
        try:
            client.execute_command("ACL", "SETUSER", user, *rules)
        except Exception:  # noqa: BLE001
            done.missing.append(user)
            continue
        done.made.append(user)
    return done


def acl_file(client: Any, service_lines: list[str]) -> str:
    """The deployment's complete ACL file: ``service_lines`` (Mother's, the dashboard's, the
    administrator's, from deploy/users.acl) and a line per enrolled host and principal, their passwords
    as the SHA-256 the registry keeps."""
    lines = [line for line in service_lines if line.strip() and not line.startswith("#")]
    for user, rules in sorted(wanted(client).items()):
        # an ACL file takes ACL SETUSER's words (a selector in its parentheses), but for `reset`
        lines.append(" ".join(["user", user, *(r for r in rules if r != "reset")]))
    return "\n".join(lines) + "\n"
