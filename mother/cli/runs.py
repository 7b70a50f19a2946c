"""``mother submit``, ``status``, ``wait``, ``cancel``, ``runs`` and ``inspect RUN``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import orjson
import typer
from rich.table import Table
from rich.text import Text

from mother.cli._common import console, ctrl_c_held, err_console, fail, handle_errors, settings
from mother.cli.gates import print_waiting
from mother.client import MotherClient, check_timeout, gate_command, load_spec_file, load_spec_text
from schemas import ResultEnvelope, RunState

__all__ = ["cancel", "runs", "runs_table", "status", "submit", "wait"]


def _client() -> MotherClient:
    cfg = settings()
    return MotherClient(settings=cfg)


def _progress(state: RunState) -> None:
    where = f"phase {state.phase} attempt {state.attempt}" if state.phase else "queued"
    with ctrl_c_held():
        err_console.print(f"{state.run_id}: {state.status}, {where}", style="dim")


def _print_envelope(envelope: ResultEnvelope, as_json: bool) -> None:
    if as_json:
        sys.stdout.write(
            orjson.dumps(envelope.to_dict(), option=orjson.OPT_INDENT_2).decode() + "\n"
        )
        return
    term = envelope.termination
    assert term is not None
    colour = "green" if term.reason == "success" else "red"
    console.print(
        Text.assemble(
            (term.reason, f"bold {colour}"),
            f" at phase {term.phase_at_termination}: {term.details}",
        )
    )
    for factor in term.contributing_factors:
        console.print(f"  - {factor}")
    console.print(f"suggested action: {term.suggested_action} (can retry: {term.can_retry})")
    if envelope.output:
        console.print(f"\n{envelope.output}")


@handle_errors
def submit(
    spec: Annotated[Path, typer.Argument(help="RunSpec as YAML or JSON ('-' for stdin)")],
    wait_: Annotated[
        bool, typer.Option("--wait", help="show progress, then the ResultEnvelope")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
    timeout: Annotated[
        float | None, typer.Option(help="with --wait: give up waiting after this many seconds")
    ] = None,
) -> None:
    """Submit a run; print its run_id. With --wait exit 0 only if it ends in success."""
    # before anything is submitted
    check_timeout(timeout)
    client = _client()
    data: Any = (
        load_spec_text(sys.stdin.buffer.read(), "standard input", Path.cwd())
        if str(spec) == "-"
        else load_spec_file(spec)
    )
    run_id = client.submit(data)
    if not wait_:
        console.print(orjson.dumps({"run_id": run_id}).decode() if as_json else run_id)
        return
    err_console.print(f"submitted {run_id}")
    _finish(client, run_id, as_json, timeout)


def _notice(text: str) -> None:
    with ctrl_c_held():
        err_console.print(text, style="yellow", soft_wrap=True)


def _finish(client: MotherClient, run_id: str, as_json: bool, timeout: float | None) -> None:
    try:
        envelope = client.wait(
            run_id, timeout, on_progress=None if as_json else _progress, on_notice=_notice
        )
    # Ctrl-C stops the waiting, not the run: say so, and how to go on
    except KeyboardInterrupt:
        fail(
            f"stopped waiting; {run_id} goes on: `mother wait {run_id}` to wait again, "
            f"`mother cancel {run_id}` to end it",
            "interrupted",
            130,
        )
    _print_envelope(envelope, as_json)
    raise typer.Exit(0 if envelope.termination and envelope.termination.reason == "success" else 1)


@handle_errors
def wait(
    run_id: Annotated[str, typer.Argument()],
    as_json: Annotated[bool, typer.Option("--json")] = False,
    timeout: Annotated[
        float | None, typer.Option(help="give up waiting after this many seconds")
    ] = None,
) -> None:
    """Wait for a run to end; print its ResultEnvelope. Exit 0 only for success."""
    _finish(_client(), run_id, as_json, timeout)


@handle_errors
def status(
    run_id: Annotated[str, typer.Argument()],
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Where a run is: status, phase, attempt (or its place in the admission queue), and its history."""
    client = _client()
    state = client.status(run_id)
    if as_json:
        sys.stdout.write(state.model_dump_json(indent=2) + "\n")
        return
    where = (
        client.queue_position(run_id)
        if state.status == "queued" and state.admission == "waiting"
        else None
    )
    console.print(
        f"{state.run_id} ({state.user_id}): {state.status}"
        + (f", phase {state.phase} attempt {state.attempt}" if state.phase else "")
        + (f", waiting for a slot: position {where[0]} of {where[1]}" if where else "")
        + (f", reason {state.reason}" if state.reason else "")
    )
    if state.gate is not None and state.status == "waiting":
        gate = state.gate
        console.print(
            f"  waits for {gate.kind}: {gate.subject} (gate {gate.gate_id}, until {gate.deadline}; "
            f"who may decide: {', '.join(gate.approvers) or 'anyone'})"
        )
        if gate.question:
            console.print(Text(f"  {gate.question[:2000]}"))
        console.print(Text(f"  decide: {gate_command(run_id, gate)}"))
    for entry in state.history[-20:]:
        console.print(
            f"  {entry.at}  {entry.event:<16} {entry.phase or '':<12} {entry.detail[:100]}"
        )


@handle_errors
def cancel(
    run_id: Annotated[str, typer.Argument()],
    actor: Annotated[str, typer.Option(help="who cancels")] = "cli",
    reason: Annotated[str, typer.Option(help="why")] = "cancelled from the CLI",
) -> None:
    """End a run as user_cancelled (Mother writes the record)."""
    state = _client().cancel(run_id, actor, reason)
    if state.status == "terminated":
        console.print(f"{run_id} already ended ({state.reason}); nothing to cancel")
    else:
        console.print(f"cancel requested for {run_id}")


@handle_errors
def runs(
    reason: Annotated[
        str | None, typer.Option(help="only runs that ended with this reason")
    ] = None,
    user: Annotated[str | None, typer.Option(help="only this user's runs")] = None,
    limit: Annotated[int, typer.Option(min=1, max=10_000)] = 50,
    as_json: Annotated[
        bool, typer.Option("--json", help="one JSON object per line, for scripts")
    ] = False,
    waiting: Annotated[
        bool,
        typer.Option(
            "--waiting",
            help="runs that wait for a person, longest first, with the command to decide",
        ),
    ] = False,
) -> None:
    """A table of the newest runs and why each stopped."""
    if waiting:
        if reason is not None or user is not None:
            fail("--waiting lists every waiting run: drop --reason and --user", "usage")
        print_waiting(as_json, limit)
        return
    rows = _client().runs(reason=reason, user=user, limit=limit)
    if as_json:
        sys.stdout.write("".join(orjson.dumps(row).decode() + "\n" for row in rows))
        return
    console.print(runs_table(rows))


def runs_table(rows: list[dict[str, Any]], title: str = "runs") -> Table:
    """Run, user, status, reason, phase at termination (or current phase), details, suggested action."""
    table = Table(title=title)
    for col in ("run", "user", "status", "reason", "phase", "details", "suggested action"):
        table.add_column(col, overflow="fold", no_wrap=col in ("run", "reason"))
    # str(): a record edited by hand may hold any JSON value anywhere
    for row in rows:
        table.add_row(
            *(
                str(value or "")
                for value in (
                    row["run_id"],
                    row.get("user_id"),
                    row.get("status"),
                    row.get("reason"),
                    row.get("phase_at_termination") or row.get("phase"),
                    str(row.get("details") or "")[:200],
                    row.get("suggested_action"),
                )
            )
        )
    return table
