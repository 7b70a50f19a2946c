"""``mother principals``, ``mother hosts`` and ``mother acl``: every party but Mother is an enrolled
identity, its own Redis ACL user (run these with an administrator's MOTHER_REDIS_URL)."""

from __future__ import annotations

from typing import Annotated

import orjson
import typer
from rich.table import Table
from rich.text import Text

from mother import keys
from mother.cli._common import console, data_console, handle_errors, redis_client, settings
from mother.clock import ServerClock
from mother.errors import NotFound
from mother.identities import acl_file, hosts, party_url, persist, principals
from schemas.host import HOST_QUEUE_KINDS, Host
from schemas.principal import GRANTS, Principal

__all__ = ["acl_app", "hosts_app", "principal_url", "principals_app"]

principals_app = typer.Typer(
    help="Principals: each person or service its own Redis ACL user, with exactly what its grants "
    "need. Run these with an administrator's MOTHER_REDIS_URL.",
    no_args_is_help=True,
)
hosts_app = typer.Typer(
    help="Worker hosts: each enrolled here, its own Redis ACL user that may touch only its own queues "
    "and ask Mother on its own stream. Run these with an administrator's MOTHER_REDIS_URL.",
    no_args_is_help=True,
)
acl_app = typer.Typer(
    help="The deployment's Redis ACL users, for servers that take them from a file or a console.",
    no_args_is_help=True,
)


def principal_url(base: str, name: str, password: str) -> str:
    """``base`` (any Redis URL of the server, ``redis+sentinel://`` naming several sentinels too) as
    principal ``name``."""
    return party_url(base, name, password)


def _words(text: str) -> list[str]:
    return [w.strip() for w in text.replace(",", " ").split() if w.strip()]


def _note(note: str | None) -> None:
    if note:
        console.print(Text(f"note: {note}"), style="yellow", soft_wrap=True)


def _shown_once(user: str, password: str, note: str | None, extra: list[str]) -> None:
    url = party_url(settings().redis_url, user, password)
    console.print("its password, shown this once (store it now):", style="bold")
    console.print(f"  export MOTHER_REDIS_URL={url}", soft_wrap=True)
    for line in extra:
        console.print(f"  {line}", soft_wrap=True)
    _note(note)


def _said(principal: Principal, password: str, note: str | None) -> None:
    console.print(f"principal {principal.name}: can {', '.join(principal.grants)}", soft_wrap=True)
    if principal.acts_for:
        console.print(f"  acts for: {', '.join(principal.acts_for)}", soft_wrap=True)
    raw = f"raw submissions: XADD {keys.principal_submissions_key(principal.name)} '*' spec '<RunSpec JSON>'"
    _shown_once(principal.name, password, note, [raw])


def _checked_url(name: str, user: str) -> None:
    """The URL the command will print can be made: checked before the server is changed."""
    party_url(settings().redis_url, user, "x")


# -- principals ----------------------------------------------------------------------------------------


@principals_app.command("add")
@handle_errors
def principal_add(
    name: Annotated[str, typer.Argument(help="its name (also its Redis user's)")],
    can: Annotated[str, typer.Option("--can", help=f"some of {', '.join(GRANTS)}")],
    acts_for: Annotated[
        list[str] | None,
        typer.Option(
            "--acts-for",
            help="a user it may submit runs for besides itself (a service for its end users); "
            "repeat, or '*' for every user",
        ),
    ] = None,
) -> None:
    """Make a principal: its ACL user (a new password, shown once) and its record."""
    _checked_url(name, name)
    client = redis_client(settings())
    principal, password = principals.add(
        client,
        name,
        _words(can),
        [u for item in acts_for or () for u in _words(item)],
        ServerClock(client).now_iso(),
    )
    _said(principal, password, persist(client))


@principals_app.command("rotate")
@handle_errors
def principal_rotate(name: Annotated[str, typer.Argument()]) -> None:
    """A new password for a principal; the old one stops working at once."""
    _checked_url(name, name)
    client = redis_client(settings())
    password = principals.rotate(client, name, ServerClock(client).now_iso())
    principal = principals.load(client, name)
    assert principal is not None
    _said(principal, password, persist(client))


@principals_app.command("remove")
@handle_errors
def principal_remove(name: Annotated[str, typer.Argument()]) -> None:
    """Delete a principal's ACL user and record (its connections are closed)."""
    client = redis_client(settings())
    principals.remove(client, name)
    console.print(f"principal {name} removed")
    _note(persist(client))


@principals_app.command("list")
@handle_errors
def principal_list() -> None:
    """Every principal: its grants and whom it acts for."""
    found = principals.load_all(redis_client(settings()))
    table = Table(title=f"principals ({len(found)})")
    for column in ("name", "can", "acts for", "created", "rotated"):
        table.add_column(column)
    for principal in found.values():
        table.add_row(
            principal.name,
            ", ".join(principal.grants),
            ", ".join(principal.acts_for) or "-",
            principal.created_at,
            principal.rotated_at or "-",
        )
    data_console().print(table)


@principals_app.command("show")
@handle_errors
def principal_show(name: Annotated[str, typer.Argument()]) -> None:
    """One principal as JSON, with the streams it writes."""
    principal = principals.load(redis_client(settings()), name)
    if principal is None:
        raise NotFound(f"no principal {name!r}; list them with `mother principals list`")
    data_console().print_json(
        data={
            **principal.to_dict(),
            "submits_on": keys.principal_submissions_key(name),
            "commands_on": keys.principal_commands_key(name),
        }
    )


# -- hosts ---------------------------------------------------------------------------------------------


def _host_said(host: Host, password: str, note: str | None) -> None:
    console.print(
        f"host {host.name}: takes {', '.join(host.queues)} jobs on its own queues "
        f"({', '.join(keys.host_queue(host.name, q) for q in host.queues)})",
        soft_wrap=True,
    )
    _shown_once(keys.host_user(host.name), password, note, ["then, on the host: mother worker"])


@hosts_app.command("add")
@handle_errors
def host_add(
    name: Annotated[str, typer.Argument(help="its name: a lowercase letter, then a-z 0-9 -")],
    queues: Annotated[
        str, typer.Option(help=f"the jobs it takes: some of {', '.join(HOST_QUEUE_KINDS)}")
    ] = "agents,tools",
) -> None:
    """Enroll a worker host: its ACL user (a new password, shown once with the URL its workers use)."""
    keys.check_host(name)
    _checked_url(name, keys.host_user(name))
    client = redis_client(settings())
    host, password = hosts.add(client, name, _words(queues), ServerClock(client).now_iso())
    _host_said(host, password, persist(client))


@hosts_app.command("rotate")
@handle_errors
def host_rotate(name: Annotated[str, typer.Argument()]) -> None:
    """A new password for a host; the old one stops working at once (its workers' connections close)."""
    keys.check_host(name)
    _checked_url(name, keys.host_user(name))
    client = redis_client(settings())
    password = hosts.rotate(client, name, ServerClock(client).now_iso())
    host = hosts.load(client, name)
    assert host is not None
    _host_said(host, password, persist(client))


@hosts_app.command("remove")
@handle_errors
def host_remove(name: Annotated[str, typer.Argument()]) -> None:
    """Revoke a host at once: its ACL user (connections closed) and record. Mother queues what waited on
    its queues elsewhere; the attempts it ran are lost and retried."""
    client = redis_client(settings())
    hosts.remove(client, name)
    console.print(f"host {name} removed: its jobs go to other hosts")
    _note(persist(client))


@hosts_app.command("list")
@handle_errors
def host_list(
    as_json: Annotated[bool, typer.Option("--json", help="the rows as JSON")] = False,
) -> None:
    """Every enrolled host: the jobs it takes, whether it is live (Mother has its beats), its workers
    busy and free, its queues' depths, the attempts it runs now, its last beat, and the phases it
    finished and failed in the last hour."""
    from mother.hosts.view import host_rows

    config = settings()
    rows = host_rows(redis_client(config), int(config.service.heartbeat_timeout_seconds * 1000))
    if as_json:
        print(orjson.dumps([r.to_dict() for r in rows]).decode())
        return
    shown = Table(title=f"hosts ({len(rows)})")
    for column in ("name", "takes", "state", "busy/workers", "queued", "running", "beat",
                   "done 1h", "failed 1h"):  # fmt: skip
        shown.add_column(column)
    for row in rows:
        shown.add_row(
            row.name,
            ", ".join(row.takes),
            row.state,
            f"{row.busy}/{row.workers}" if row.workers is not None else "-",
            ", ".join(f"{k} {n}" for k, n in row.queued.items()) or "-",
            ", ".join(f"{r['run_id']} #{r['phase_index']}.{r['attempt']}" for r in row.running)
            or "-",
            f"{row.beat_ms_ago / 1000:.1f}s ago" if row.beat_ms_ago is not None else "-",
            str(row.done_last_hour),
            str(row.failed_last_hour),
        )
    data_console().print(shown)


@hosts_app.command("show")
@handle_errors
def host_show(name: Annotated[str, typer.Argument()]) -> None:
    """One host as JSON, with its stream and queues."""
    keys.check_host(name)
    host = hosts.load(redis_client(settings()), name)
    if host is None:
        raise NotFound(f"no host {name!r} is enrolled; list them with `mother hosts list`")
    data_console().print_json(
        data={
            **host.model_dump(mode="json", exclude={"password_sha256"}),
            "user": keys.host_user(name),
            "asks_on": keys.host_asks_key(name),
            "queues_on": [keys.host_queue(name, q) for q in host.queues],
        }
    )


# -- acl -----------------------------------------------------------------------------------------------


@acl_app.command("export")
@handle_errors
def acl_export(
    service_file: Annotated[
        str,
        typer.Option(
            "--service-file",
            help="the service users' ACL file (Mother's, the dashboard's, the administrator's)",
        ),
    ] = "deploy/users.acl",
) -> None:
    """Print the deployment's complete ACL file: the service users, then every enrolled host and
    principal (passwords as their SHA-256), for a Redis that loads users from a file or a provider's
    console and refuses ACL SETUSER (run Mother there with service.make_acl_users: false)."""
    from pathlib import Path

    path = Path(service_file)
    if not path.is_file():
        raise NotFound(f"no service ACL file at {path}: pass --service-file (deploy/users.acl)")
    lines = path.read_text().splitlines()
    print(acl_file(redis_client(settings()), lines), end="")
