"""``mother submit``, ``status``, ``wait``, ``cancel``, ``runs``, ``logs`` and ``resubmit``."""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any

import orjson
import typer
from rich.table import Table
from rich.text import Text

from mother.activity import last_id, newer, recent
from mother.cli._common import console, ctrl_c_held, err_console, fail, handle_errors, settings
from mother.cli.gates import print_waiting
from mother.client import MotherClient, check_timeout, gate_command, load_spec_file, load_spec_text
from mother.functions import server_now_ms
from mother.observe.listing import MAX_PAGE
from mother.observe.timeline import clock_text, duration_text, suggestion_text
from schemas import ResultEnvelope, RunState, ms_from_iso

__all__ = [
    "cancel",
    "logs",
    "progress_line",
    "resubmit",
    "runs",
    "runs_table",
    "status",
    "submit",
    "wait",
]


def _client() -> MotherClient:
    cfg = settings()
    return MotherClient(settings=cfg)


def _progress_of(client: MotherClient) -> Callable[[RunState], None]:
    """What ``wait`` prints at each move: elapsed time, phase and attempt, the place in the admission
    queue, and what a waiting run waits for."""

    def progress(state: RunState) -> None:
        with ctrl_c_held():
            err_console.print(progress_line(client, state), style="dim", soft_wrap=True)

    return progress


def progress_line(client: MotherClient, state: RunState) -> str:
    elapsed = max(0, server_now_ms(client.redis) - ms_from_iso(state.created_at)) / 1000
    where = f"phase {state.phase} attempt {state.attempt}" if state.phase else "not started"
    line = f"{state.run_id}: {state.status} after {elapsed:.1f} s, {where}"
    if state.status == "queued" and state.admission == "waiting":
        place = client.queue_position(state.run_id)
        if place is not None:
            line += f", waiting for a slot: position {place[0]} of {place[1]}"
    if state.status == "waiting" and state.gate is not None:
        line += f", waits for {state.gate.kind}: {state.gate.subject} ({gate_command(state.run_id, state.gate)})"
    return line


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
    console.print("next: " + suggestion_text(term.reason, term.suggested_action, term.can_retry))
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
            run_id,
            timeout,
            on_progress=None if as_json else _progress_of(client),
            on_notice=_notice,
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
    run_id: Annotated[
        str | None, typer.Argument(help="the run; leave it out to cancel what the filters select")
    ] = None,
    actor: Annotated[
        str | None,
        typer.Option(help="who cancels (as a principal leave it out: the actor is the principal)"),
    ] = None,
    reason: Annotated[str, typer.Option(help="why")] = "cancelled from the CLI",
    user: Annotated[str | None, typer.Option(help="every run of this user not yet ended")] = None,
    status: Annotated[
        str | None,
        typer.Option(help="only runs in this status: queued, running, waiting, budget_stopped"),
    ] = None,
    hours: Annotated[
        float | None, typer.Option(help="only runs created in the last H hours", min=0)
    ] = None,
    search: Annotated[
        str | None,
        typer.Option(
            "--reason-filter",
            "--search",
            help="only runs whose task or history (why each waits, its errors) holds these words",
        ),
    ] = None,
    phase: Annotated[str | None, typer.Option(help="only runs now in this phase")] = None,
    yes: Annotated[
        bool, typer.Option("--yes", help="cancel without asking (the count is shown)")
    ] = False,
) -> None:
    """End a run as user_cancelled (Mother writes the record); or, with filters (--user, --status,
    --hours, --reason-filter, --phase) and no run, every run not yet ended that they select (the count
    shown and asked for first)."""
    client = _client()
    filters = {"user": user, "status": status, "search": search, "phase": phase}
    filtered = hours is not None or any(v is not None for v in filters.values())
    if run_id is not None and filtered:
        fail(
            "name a run or filter runs (--user, --status, --hours, --reason-filter, --phase), not both"
        )
    if run_id is None:
        if not filtered:
            fail(
                "name the run to cancel, or select runs with --user, --status, --hours, "
                "--reason-filter or --phase"
            )
        _cancel_selected(client, filters, hours, actor, reason, yes)
        return
    state = client.cancel(run_id, actor, reason)
    if state.status == "terminated":
        console.print(f"{run_id} already ended ({state.reason}); nothing to cancel")
    else:
        console.print(f"cancel requested for {run_id}")


def _cancel_selected(
    client: MotherClient,
    filters: dict[str, str | None],
    hours: float | None,
    actor: str | None,
    reason: str,
    yes: bool,
) -> None:
    """Cancel every run not yet ended that the filters select, after showing (and asking about) the
    count; a refusal of Mother's for a run is said on its line, the others go on."""
    from mother.observe.listing import OPEN_STATUSES, RunQuery

    status = filters["status"]
    if status is not None and status not in OPEN_STATUSES:
        fail(f"--status takes a status of a run not yet ended: {', '.join(OPEN_STATUSES)}")
    since = server_now_ms(client.redis) - int(hours * 3_600_000) if hours is not None else None
    selected = client.select(
        RunQuery(
            status=status,
            user=filters["user"],
            search=filters["search"],
            phase=filters["phase"],
            created_from=since,
        )
    )
    what = " ".join(
        part
        for part in (
            f"of user {filters['user']}" if filters["user"] else "",
            f"in status {status}" if status else "not yet ended",
            f"in phase {filters['phase']}" if filters["phase"] else "",
            f"matching {filters['search']!r}" if filters["search"] else "",
            f"created in the last {hours:g} h" if hours is not None else "",
        )
        if part
    )
    if not selected:
        console.print(f"no run {what}: nothing to cancel")
        return
    console.print(f"{len(selected)} run(s) {what} will be cancelled ({reason})")
    if not yes:
        if not sys.stdin.isatty():
            fail(
                f"{len(selected)} run(s) selected: pass --yes to cancel them (there is no terminal to ask)"
            )
        if not typer.confirm("cancel them?", default=False):
            fail("nothing cancelled")
    done = client.cancel_all(selected, actor, reason)
    for run_id, why in done.refused.items():
        err_console.print(f"{run_id}: refused: {why}", soft_wrap=True)
    console.print(
        f"cancel requested for {len(done.requested)} run(s)"
        + (f"; {len(done.ended)} had ended meanwhile" if done.ended else "")
        + (f"; {len(done.refused)} refused" if done.refused else "")
    )


@handle_errors
def resubmit(
    run_id: Annotated[str, typer.Argument(help="the run whose spec is submitted again")],
    wait_: Annotated[bool, typer.Option("--wait", help="show progress, then the result")] = False,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Submit a run's spec again as a new run (a new run id; ``metadata.resubmitted_from`` names the
    old one). Any run, whatever its end: a retry after fixing what stopped it."""
    client = _client()
    new = client.resubmit(run_id)
    if not wait_:
        console.print(orjson.dumps({"run_id": new}).decode() if as_json else new)
        return
    err_console.print(f"submitted {new} (again from {run_id})")
    _finish(client, new, as_json, None)


@handle_errors
def logs(
    run_id: Annotated[str, typer.Argument(help="the run")],
    follow: Annotated[
        bool, typer.Option("-f", "--follow", help="print new entries as they come, until it ends")
    ] = False,
    limit: Annotated[int, typer.Option(min=1, max=10_000, help="entries shown first")] = 200,
    as_json: Annotated[bool, typer.Option("--json", help="one JSON object per line")] = False,
) -> None:
    """The run's activity entries (what Mother, the workers and people did with it), oldest first;
    with -f followed live until the run ends (Ctrl-C stops following, not the run)."""
    client = _client()
    client.status(run_id)

    def show(event: Any) -> None:
        if as_json:
            sys.stdout.write(orjson.dumps(event.to_dict()).decode() + "\n")
            sys.stdout.flush()
            return
        data = orjson.dumps(event.data).decode() if event.data else ""
        console.print(
            Text(f"{event.at}  {event.type:<26} {event.phase or '':<12} {data[:300]}"),
            soft_wrap=True,
        )

    # where the run's stream is now: entries after it are new
    last = last_id(client.redis, run_id)
    for event in recent(client.redis, limit, run_id=run_id):
        show(event)
    if not follow:
        return
    try:
        while True:
            last, events = newer(client.redis, last, run_id, block_ms=1000)
            for event in events:
                show(event)
            if any(e.type == "terminated" for e in events):
                return
            if not events and client.status(run_id).status == "terminated":
                return
    except KeyboardInterrupt:
        raise typer.Exit(130) from None


@handle_errors
def runs(
    reason: Annotated[
        str | None, typer.Option(help="only runs that ended with this reason")
    ] = None,
    user: Annotated[str | None, typer.Option(help="only this user's runs")] = None,
    status: Annotated[
        str | None,
        typer.Option(
            help="only runs in this status: queued, running, waiting, budget_stopped, terminated"
        ),
    ] = None,
    not_success: Annotated[
        bool, typer.Option("--not-success", help="only runs that ended with any reason but success")
    ] = False,
    since: Annotated[
        str | None,
        typer.Option(
            help="created (with --by-end: ended) since: an age (30m, 2h, 7d) or an ISO time, UTC"
        ),
    ] = None,
    until: Annotated[
        str | None, typer.Option(help="created (ended) until: an age or an ISO time, UTC")
    ] = None,
    by_end: Annotated[
        bool, typer.Option("--by-end", help="--since/--until and the order are by when runs ended")
    ] = False,
    search: Annotated[
        str | None,
        typer.Option(
            help="words the task or the history (errors, why it stopped) holds, all of them"
        ),
    ] = None,
    phase: Annotated[str | None, typer.Option(help="only runs at (or ended in) this phase")] = None,
    model: Annotated[str | None, typer.Option(help="only runs with a phase on this model")] = None,
    host: Annotated[
        str | None, typer.Option(help="only runs whose last attempt ran on this host")
    ] = None,
    min_cost: Annotated[
        float | None, typer.Option(help="only ended runs that cost at least this (USD)", min=0)
    ] = None,
    max_cost: Annotated[
        float | None, typer.Option(help="only ended runs that cost at most this (USD)", min=0)
    ] = None,
    min_duration: Annotated[
        float | None, typer.Option(help="only ended runs that took at least this (seconds)", min=0)
    ] = None,
    max_duration: Annotated[
        float | None, typer.Option(help="only ended runs that took at most this (seconds)", min=0)
    ] = None,
    sort: Annotated[
        str | None,
        typer.Option(
            help="created, ended, duration or cost (the last two: ended runs only); default created "
            "(ended with --by-end)"
        ),
    ] = None,
    as_csv: Annotated[
        bool,
        typer.Option(
            "--csv", help="every run the filters select (all pages of --limit) as CSV, header first"
        ),
    ] = False,
    oldest_first: Annotated[
        bool, typer.Option("--oldest-first", help="the oldest first (default: the newest)")
    ] = False,
    limit: Annotated[int, typer.Option(min=1, max=MAX_PAGE, help="runs per page")] = 50,
    cursor: Annotated[
        str | None, typer.Option(help="the next page: the cursor the previous page printed")
    ] = None,
    as_json: Annotated[
        bool,
        typer.Option(
            "--json", help='one JSON object per line, for scripts (then {"next": cursor})'
        ),
    ] = False,
    waiting: Annotated[
        bool,
        typer.Option(
            "--waiting",
            help="runs that wait for a person, longest first, with the command to decide",
        ),
    ] = False,
    watch: Annotated[
        bool, typer.Option("--watch", help="redraw the table every --interval seconds")
    ] = False,
    interval: Annotated[float, typer.Option(min=0.2, max=3600, help="with --watch")] = 2.0,
    times: Annotated[
        int, typer.Option(min=0, help="with --watch: stop after this many redraws (0: Ctrl-C)")
    ] = 0,
) -> None:
    """Runs and why each stopped, newest first, from the index over every stored run: filter, sort and page
    through them. Times are UTC."""
    from mother.observe.listing import RunQuery, when_ms

    if waiting:
        if reason is not None or user is not None:
            fail("--waiting lists every waiting run: drop --reason and --user", "usage")
        print_waiting(as_json, limit)
        return
    client = _client()
    now = server_now_ms(client.redis) if since or until else 0
    low = when_ms(since, now, "since") if since else None
    high = when_ms(until, now, "until") if until else None
    query = RunQuery(
        reason=reason,
        status=status,
        not_success=not_success,
        user=user,
        created_from=None if by_end else low,
        created_to=None if by_end else high,
        ended_from=low if by_end else None,
        ended_to=high if by_end else None,
        search=search,
        phase=phase,
        model=model,
        host=host,
        cost_from=_micro(min_cost, "--min-cost"),
        cost_to=_micro(max_cost, "--max-cost"),
        duration_from=_ms(min_duration, "--min-duration"),
        duration_to=_ms(max_duration, "--max-duration"),
        sort=sort or ("ended" if by_end else "created"),  # type: ignore[arg-type]
        descending=not oldest_first,
        limit=limit,
        cursor=cursor,
    ).check()
    if as_csv:
        from mother.observe.listing import all_rows, csv_lines

        # every page, --limit runs a page
        for line in csv_lines(all_rows(client.redis, replace(query, cursor=None))):
            sys.stdout.write(line)
        return
    if watch:
        if as_json:
            fail("--watch draws the table: drop --json", "usage")
        _watch(client, query, interval, times)
        return
    page = client.list_runs(query)
    if as_json:
        sys.stdout.write("".join(orjson.dumps(row).decode() + "\n" for row in page.rows))
        if page.next:  # the rows alone on stdout; the next page's cursor for scripts on stderr
            sys.stderr.write(orjson.dumps({"next": page.next, "total": page.total}).decode() + "\n")
        return
    console.print(
        runs_table(page.rows, title=f"runs: {len(page.rows)} of {page.total} (times UTC)")
    )
    if page.next:
        err_console.print(f"more: add --cursor {page.next}")


def _micro(usd: float | None, what: str) -> int | None:
    """A cost in USD as micro-USD (one-line error for one that is not a finite amount)."""
    if usd is None:
        return None
    if not math.isfinite(usd):
        fail(f"{what} must be a finite amount of USD, got {usd}")
    return round(usd * 1_000_000)


def _ms(seconds: float | None, what: str) -> int | None:
    if seconds is None:
        return None
    if not math.isfinite(seconds):
        fail(f"{what} must be a finite number of seconds, got {seconds}")
    return round(seconds * 1000)


def _watch(client: Any, query: Any, interval: float, times: int) -> None:
    from rich.live import Live

    drawn = 0
    try:
        with Live(console=console, auto_refresh=False) as live:
            while True:
                page = client.list_runs(query)
                stamp = time.strftime("%H:%M:%S", time.gmtime())
                title = f"runs at {stamp} UTC: {len(page.rows)} of {page.total} (Ctrl-C stops)"
                live.update(runs_table(page.rows, title=title), refresh=True)
                drawn += 1
                if times and drawn >= times:
                    return
                time.sleep(interval)
    except KeyboardInterrupt:
        return


def _run_cells(row: dict[str, Any]) -> dict[str, str]:
    """A listing row's cells (str(): a record edited by hand may hold any JSON value anywhere)."""
    cost = row.get("spend_usd") or ""
    if row.get("total_tokens"):
        cost = f"{cost} ({row['total_tokens']} tok)"
    values = {
        "run": row["run_id"],
        "user": row.get("user_id"),
        "status": row.get("reason") or row.get("status"),
        "phase": row.get("phase_at_termination") or row.get("phase"),
        "created": clock_text(row.get("created_at")),
        "ended": clock_text(row.get("terminated_at")),
        "took": duration_text(row.get("duration_ms")) if row.get("duration_ms") else "",
        "cost": cost,
        "details": str(row.get("details") or "").replace("\n", " ")[:200],
        # a success's "abandon" means nothing is left to do: nothing to suggest
        "suggested": "" if row.get("reason") == "success" else row.get("suggested_action"),
    }
    return {name: str(value or "") for name, value in values.items()}


# the listing's columns, most needed first: a narrow terminal drops from the end (details takes what
# width is left); each row stays on one line
RUN_COLUMNS = (
    "run", "status", "user", "created", "took", "details", "cost", "phase", "ended", "suggested",
)  # fmt: skip
# the least width details is shown in
DETAILS_MIN = 16


def runs_table(rows: list[dict[str, Any]], title: str = "runs", width: int | None = None) -> Table:
    """Run, status (its reason once ended), user, created (UTC), duration, cost, phase, details, ended,
    suggested action: as many as fit ``width`` (the console's), each row on one line."""
    width = width or console.width
    cells = [_run_cells(row) for row in rows]
    natural = {name: max([len(name), *(len(c[name]) for c in cells)]) for name in RUN_COLUMNS}
    chosen: list[str] = []
    # a column costs its width and three for its borders and padding
    used = 1
    for name in RUN_COLUMNS:
        need = (DETAILS_MIN if name == "details" else natural[name]) + 3
        if used + need <= width or name == "run":
            chosen.append(name)
            used += need
    table = Table(title=title, title_justify="left")
    spare = max(0, width - used)
    for name in chosen:
        if name == "details":
            table.add_column(
                name,
                no_wrap=True,
                overflow="ellipsis",
                max_width=min(natural[name], DETAILS_MIN + spare),
            )
        else:
            table.add_column(name, no_wrap=True, overflow="ellipsis")
    for c in cells:
        table.add_row(*(c[name] for name in chosen))
    return table
