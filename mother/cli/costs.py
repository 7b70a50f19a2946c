"""``mother costs``: what runs cost, by user, by day and by model, and the most expensive runs."""

from __future__ import annotations

from typing import Annotated

import orjson
import typer
from rich.table import Table

from mother.cli._common import console, data_console, handle_errors, redis_client, settings
from mother.functions import server_now_ms
from mother.observe.costs import costs as read_costs
from mother.observe.costs import period
from mother.observe.timeline import usd

__all__ = ["costs"]


@handle_errors
def costs(
    since: Annotated[
        str, typer.Option(help="the period's start: an age (7d, 24h) or an ISO date-time (UTC)")
    ] = "7d",
    until: Annotated[
        str | None, typer.Option(help="the period's end (default: now), as --since")
    ] = None,
    top: Annotated[
        int, typer.Option(help="how many of the most expensive runs", min=1, max=500)
    ] = 10,
    as_json: Annotated[bool, typer.Option("--json", help="everything as one JSON object")] = False,
) -> None:
    """What the runs created in a period cost, by user and by day (UTC), the most expensive of them, and
    spend by model (every settled model call since the counters began)."""
    client = redis_client(settings())
    start, end = period(since, until, server_now_ms(client), "--")
    found = read_costs(client, start, end, top)
    if as_json:
        print(orjson.dumps(found.to_dict()).decode())
        return
    console.print(
        f"{found.runs} run(s) created {found.to_dict()['since'][:16]} to "
        f"{found.to_dict()['until'][:16]} UTC: {found.spend_usd}, {found.tokens:,} tokens"
    )
    for title, rows, key in (
        ("by user", found.by_user, "user"),
        ("by day (UTC)", found.by_day, "day"),
    ):
        table = Table(title=title, title_justify="left")
        for column in (key, "runs", "spend", "tokens"):
            table.add_column(column, justify="left" if column == key else "right")
        for row in rows:
            table.add_row(str(row[key]), str(row["runs"]), row["spend_usd"], f"{row['tokens']:,}")
        data_console().print(table)
    table = Table(title=f"the {len(found.top)} most expensive", title_justify="left")
    for column in ("run", "user", "status", "reason", "spend", "tokens"):
        table.add_column(column)
    for row in found.top:
        table.add_row(
            row["run_id"],
            row["user"],
            str(row["status"] or ""),
            str(row["reason"] or ""),
            row["spend_usd"],
            f"{row['tokens']:,}",
        )
    data_console().print(table)
    table = Table(title="by model (since the counters began)", title_justify="left")
    for column in ("model", "calls", "input tokens", "output tokens", "spend"):
        table.add_column(column)
    for row in found.by_model:
        table.add_row(
            row["model"],
            str(row["calls"]),
            f"{row['input_tokens']:,}",
            f"{row['output_tokens']:,}",
            usd(row["spend_micro_usd"]),
        )
    data_console().print(table)
