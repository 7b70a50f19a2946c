"""``mother principals add | list | show | remove | rotate``: who may submit, approve, answer, cancel and
operate, each its own Redis ACL user (run with an administrator's MOTHER_REDIS_URL)."""

from __future__ import annotations

from typing import Annotated
from urllib.parse import quote, urlsplit, urlunsplit

import typer
from rich.table import Table
from rich.text import Text

from mother import keys
from mother.cli._common import console, data_console, handle_errors, redis_client, settings
from mother.clock import ServerClock
from mother.errors import NotFound
from mother.principals import add, load, load_all, persist, remove, rotate
from schemas.principal import GRANTS, Principal

__all__ = ["app", "principal_url"]

app = typer.Typer(
    help="Principals: each person or service its own Redis ACL user, with exactly what its grants "
    "need. Run these with an administrator's MOTHER_REDIS_URL.",
    no_args_is_help=True,
)


def principal_url(base: str, name: str, password: str) -> str:
    """``base`` (any Redis URL of the server: ``redis://``, ``rediss://``, ``unix://``, or
    ``redis+sentinel://`` naming several sentinels) as principal ``name``: its user and password in place
    of the base's, everything else (the hosts and their ports, the path, the query) as it was."""
    parts = urlsplit(base)
    hosts = parts.netloc.rpartition("@")[2] or "127.0.0.1"
    netloc = f"{quote(name, safe='')}:{quote(password, safe='')}@{hosts}"
    path = parts.path if parts.path or parts.scheme.startswith("unix") else "/0"
    return urlunsplit((parts.scheme, netloc, path, parts.query, parts.fragment))


def _words(text: str) -> list[str]:
    return [w.strip() for w in text.replace(",", " ").split() if w.strip()]


def _said(principal: Principal, password: str, note: str | None) -> None:
    url = principal_url(settings().redis_url, principal.name, password)
    console.print(f"principal {principal.name}: can {', '.join(principal.grants)}", soft_wrap=True)
    if principal.acts_for:
        console.print(f"  acts for: {', '.join(principal.acts_for)}", soft_wrap=True)
    console.print("its password, shown this once (store it now):", style="bold")
    console.print(f"  export MOTHER_REDIS_URL={url}", soft_wrap=True)
    console.print(
        f"  raw submissions: XADD {keys.principal_submissions_key(principal.name)} '*' spec "
        "'<RunSpec JSON>'",
        soft_wrap=True,
    )
    if note:
        console.print(Text(f"note: {note}"), style="yellow", soft_wrap=True)


@app.command("add")
@handle_errors
def add_cmd(
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
    cfg = settings()
    # the URL it will print can be made: checked before the server is changed
    principal_url(cfg.redis_url, name, "x")
    client = redis_client(cfg)
    principal, password = add(
        client,
        name,
        _words(can),
        [u for item in acts_for or () for u in _words(item)],
        ServerClock(client).now_iso(),
    )
    _said(principal, password, persist(client))


@app.command("rotate")
@handle_errors
def rotate_cmd(name: Annotated[str, typer.Argument()]) -> None:
    """A new password for a principal; the old one stops working at once."""
    cfg = settings()
    principal_url(cfg.redis_url, name, "x")
    client = redis_client(cfg)
    password = rotate(client, name, ServerClock(client).now_iso())
    principal = load(client, name)
    assert principal is not None
    _said(principal, password, persist(client))


@app.command("remove")
@handle_errors
def remove_cmd(name: Annotated[str, typer.Argument()]) -> None:
    """Delete a principal's ACL user and record (its connections are closed)."""
    client = redis_client(settings())
    remove(client, name)
    console.print(f"principal {name} removed")
    note = persist(client)
    if note:
        console.print(Text(f"note: {note}"), style="yellow", soft_wrap=True)


@app.command("list")
@handle_errors
def list_cmd() -> None:
    """Every principal: its grants and whom it acts for."""
    found = load_all(redis_client(settings()))
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


@app.command("show")
@handle_errors
def show_cmd(name: Annotated[str, typer.Argument()]) -> None:
    """One principal as JSON, with the streams it writes."""
    principal = load(redis_client(settings()), name)
    if principal is None:
        raise NotFound(f"no principal {name!r}; list them with `mother principals list`")
    data_console().print_json(
        data={
            **principal.to_dict(),
            "submits_on": keys.principal_submissions_key(name),
            "commands_on": keys.principal_commands_key(name),
        }
    )
