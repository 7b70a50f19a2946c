"""``mother approve``, ``deny`` and ``answer``: people's decisions on runs that wait for them (human
gates); ``mother runs --waiting`` lists those runs."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import orjson
import typer
from rich.table import Table
from rich.text import Text

from mother.cli._common import console, fail, handle_errors, settings
from mother.client import MotherClient

__all__ = ["answer", "approve", "deny", "waiting_table"]

RunArg = Annotated[str, typer.Argument(help="the waiting run")]
GateOpt = Annotated[
    str | None, typer.Option("--gate", help="the gate it waits on (refused if it waits on another)")
]
ActorOpt = Annotated[
    str | None,
    typer.Option(
        help="who decides (an approver of the gate); as a principal leave it out: the actor is the "
        "principal, proven by its Redis user"
    ),
]
TimeoutOpt = Annotated[
    float | None, typer.Option(help="seconds to wait for Mother's reply (gates.reply_seconds)")
]


def _client() -> MotherClient:
    return MotherClient(settings=settings())


def _done(reply: dict[str, Any]) -> None:
    console.print(
        f"{reply['decision']} of gate {reply['gate_id']} by {reply['actor']} taken: "
        f"`mother status {reply['run_id']}` shows where the run is now"
    )


@handle_errors
def approve(
    run_id: RunArg,
    reason: Annotated[str, typer.Option(help="why (kept with the decision)")],
    actor: ActorOpt = None,
    gate: GateOpt = None,
    digest: Annotated[
        str | None, typer.Option(help="approve only if the gate asks for exactly this content")
    ] = None,
    timeout: TimeoutOpt = None,
) -> None:
    """Approve what a run waits for: a phase to start, a tool call, a conflict's work."""
    _done(
        _client().approve(
            run_id, actor=actor, reason=reason, gate_id=gate, digest=digest, timeout=timeout
        )
    )


@handle_errors
def deny(
    run_id: RunArg,
    reason: Annotated[str, typer.Option(help="why (kept with the decision)")],
    actor: ActorOpt = None,
    gate: GateOpt = None,
    timeout: TimeoutOpt = None,
) -> None:
    """Deny what a run waits for: the run ends approval_denied."""
    _done(_client().deny(run_id, actor=actor, reason=reason, gate_id=gate, timeout=timeout))


@handle_errors
def answer(
    run_id: RunArg,
    actor: ActorOpt = None,
    text: Annotated[str | None, typer.Option(help="the answer")] = None,
    file: Annotated[
        Path | None, typer.Option(help="the answer, from a file ('-': standard input)")
    ] = None,
    reason: Annotated[str, typer.Option(help="why (kept with the decision)")] = "",
    gate: GateOpt = None,
    timeout: TimeoutOpt = None,
) -> None:
    """Answer the question a run waits on: the work is accepted and the answer joins every later
    phase's context."""
    if (text is None) == (file is None):
        fail("give the answer with exactly one of --text TEXT or --file FILE", "usage")
    if file is not None:
        try:
            text = sys.stdin.read() if str(file) == "-" else file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            fail(f"cannot read the answer from {file}: {exc}", "usage")
    assert text is not None
    _done(_client().answer(run_id, text, actor=actor, reason=reason, gate_id=gate, timeout=timeout))


def waiting_table(rows: list[dict[str, Any]]) -> Table:
    table = Table(title="runs waiting for a person (longest first)")
    for column in ("run", "user", "waits for", "since", "deadline", "who may decide", "command"):
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(
            Text(row["run_id"]),
            Text(row["user"]),
            Text(f"{row['kind']}: {row['subject']}"),
            Text(row["since"] or ""),
            Text(row["deadline"] or ""),
            Text(", ".join(row["approvers"]) or "anyone"),
            Text(row["command"]),
        )
    return table


def print_waiting(as_json: bool, limit: int) -> None:
    rows = _client().waiting(limit=limit)
    if as_json:
        sys.stdout.write("".join(orjson.dumps(row).decode() + "\n" for row in rows))
        return
    if not rows:
        console.print("no run waits for a person")
        return
    console.print(waiting_table(rows))
