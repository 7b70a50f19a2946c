"""``mother budget show | override | stop | reset``."""

from __future__ import annotations

import re
from typing import Annotated, Any

import typer
from rich.table import Table
from rich.text import Text

from mother import keys
from mother.budget import emergency_stop, override, reset_stop
from mother.cli._common import console, fail, handle_errors, redis_client, settings
from mother.client import MotherClient
from mother.clock import ServerClock
from mother.codes import CODES, USER_CODES
from mother.errors import InvalidSpec, NotFound
from mother.records.budgets import budget_doc, budget_view
from mother.runtime import Runtime

__all__ = ["app"]

app = typer.Typer(
    help="Budgets: show usage, override a limit, emergency stop and reset.", no_args_is_help=True
)
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)([smhd]?)$")
_UNIT = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str) -> float:
    """'90', '90s', '30m', '2h', '1d' → seconds."""
    match = _DURATION.match(text.strip())
    if not match:
        raise typer.BadParameter(f"{text!r} is not a duration; use e.g. 90s, 30m, 2h")
    return float(match.group(1)) * _UNIT[match.group(2)]


def _table(
    title: str,
    doc: dict[str, Any],
    dims: dict[str, str],
    limits: dict[str, Any],
    sources: dict[str, str] | None = None,
) -> Table:
    table = Table(title=title)
    columns = ("dimension", "used", "reserved", "limit", "%", "state")
    for col in (*columns, "set by") if sources is not None else columns:
        table.add_column(
            col, justify="right" if col in ("used", "reserved", "limit", "%") else "left"
        )
    warnings = set(doc.get("warnings_triggered") or [])
    exceeded = set(doc.get("limits_exceeded") or [])
    for dim, code in dims.items():
        limit = limits.get(dim)
        used = doc.get(dim, 0) or 0
        reserved = (doc.get("reserved") or {}).get(dim, 0)
        pct = f"{100 * used / limit:.0f}" if limit else "-"
        state = (
            "EXCEEDED"
            if code in exceeded
            else "warning"
            if code.replace("_exceeded", "_warning") in warnings
            else ""
        )
        row = [dim, str(used), str(reserved or ""), str(limit if limit is not None else "-")]
        row += [pct, state]
        if sources is not None:
            row.append(sources.get(dim, ""))
        table.add_row(*row)
    return table


@app.command("show")
@handle_errors
def show(
    run_id: Annotated[str | None, typer.Argument(help="a run id")] = None,
    user: Annotated[
        str | None, typer.Option(help="a user's counters for today (server date)")
    ] = None,
    global_: Annotated[bool, typer.Option("--global", help="the global gauges")] = False,
) -> None:
    """Used / limit / % per dimension, with warnings and crossed limits."""
    cfg = settings()
    if sum(x is not None and x is not False for x in (run_id, user, global_ or None)) != 1:
        fail("give exactly one of RUN, --user U, --global", "usage")
    client = redis_client(cfg)
    if global_:
        doc = budget_doc(client, keys.GLOBAL_BUDGET) or {}
        g = cfg.budget.global_
        # the limits in force are the leading Mother's (it publishes them); this process's only without one
        mine = {
            "max_concurrent_runs": g.max_concurrent_runs,
            "max_queue_depth": g.max_queue_depth,
            "max_redis_memory_mb": g.max_redis_memory_mb,
            "max_docling_jobs": g.max_docling_jobs,
        }
        published = budget_doc(client, keys.MOTHER_CONFIG)
        source = {**mine, **(published or {})}
        limits = {name.removeprefix("max_"): source[name] for name in mine}
        title = keys.GLOBAL_BUDGET + (
            f" (limits of Mother {published.get('published_by')})"
            if published
            else " (limits of this configuration: no Mother has published its own)"
        )
        console.print(_table(title, doc, {k: "" for k in limits}, limits))
        return
    if user is not None:
        rt = Runtime(settings=cfg, redis=client)
        key = keys.user_daily_budget_key(user, rt.clock.today())
        counters = budget_doc(client, key)
        if counters is None:
            raise NotFound(f"no counters for user {user} today ({key})")
        console.print(_table(key, counters, USER_CODES, counters.get("limits") or {}))
        return
    assert run_id is not None
    view = budget_view(client, run_id)
    if view is None:
        raise NotFound(
            f"no budget for run {run_id!r}; is the run id right? (a run waiting for a slot has none yet)"
        )
    title = f"{keys.run_budget_key(run_id)} ({view['profile']}, status {view['status']})"
    now_ms = ServerClock(client).now_ms()
    console.print(_table(title, view, CODES, _effective(view, now_ms), _sources(view, now_ms)))
    for o in view.get("overrides") or []:
        until = "until" if _live(o, now_ms) else "expired at"
        console.print(
            f"override {o['dimension']} {o['delta']:+d} by {o['actor']} {until} {o['expires_at']}: {o['reason']}"
        )
    if view.get("stop"):
        stop = view["stop"]
        console.print(
            Text.assemble(
                ("emergency stop", "red"), f" by {stop['actor']} at {stop['at']}: {stop['reason']}"
            )
        )


def _live(override: dict[str, Any], now_ms: int) -> bool:
    """Whether an override is still in force at the server's ``now_ms`` (as the guard decides)."""
    return int(override.get("expires_at_ms") or 0) > now_ms


def _sources(doc: dict[str, Any], now_ms: int) -> dict[str, str]:
    """Which layer set each limit in force, an operator's override in force named over it."""
    sources = dict(doc.get("limit_sources") or {})
    for o in doc.get("overrides") or []:
        if _live(o, now_ms):
            sources[o["dimension"]] = f"override by {o['actor']} ({o['delta']:+d})"
    return sources


def _effective(doc: dict[str, Any], now_ms: int) -> dict[str, Any]:
    """The limits the guard enforces at ``now_ms``: the run's, plus the overrides not yet expired."""
    limits = dict(doc.get("limits") or {})
    for o in doc.get("overrides") or []:
        if _live(o, now_ms):
            limits[o["dimension"]] = limits.get(o["dimension"], 0) + o["delta"]
    return limits


ActorOpt = Annotated[
    str | None, typer.Option(help="who (as a principal leave it out: the actor is the principal)")
]


def _by_principal(kind: str, run_id: str, payload: dict[str, Any]) -> dict[str, Any] | None:
    """As a principal (with ``operate``): the command goes to Mother on its stream and this waits for
    Mother's reply (Mother applies it with its own rights, the principal the actor). None: the
    connection is Mother's own credentials, which write directly."""
    client = MotherClient(settings=settings())
    if client.principal is None:
        return None
    client.actor_for(payload.pop("actor", None))
    entry_id = client.send_command(kind, {"run_id": run_id, **payload})
    return client.command_reply(entry_id, client.settings.gates.reply_seconds)


def _actor(actor: str | None) -> str:
    if actor is None:
        raise InvalidSpec(
            "--actor: who acts (required with Mother's own credentials)", field="actor"
        )
    return actor


@app.command("override")
@handle_errors
def override_cmd(
    run_id: Annotated[str, typer.Argument()],
    dimension: Annotated[str, typer.Option(help=f"one of {', '.join(CODES)}")],
    delta: Annotated[int, typer.Option(help="added to the limit (negative lowers it)")],
    expires_in: Annotated[str, typer.Option(help="e.g. 30m, 2h")],
    reason: Annotated[str, typer.Option(help="why")],
    actor: ActorOpt = None,
) -> None:
    """A time-boxed, audited limit change (never above 2x the profile default)."""
    cfg = settings()
    expires_in_s = parse_duration(expires_in)
    reply = _by_principal(
        "budget_override",
        run_id,
        {
            "dimension": dimension,
            "delta": delta,
            "expires_in_s": expires_in_s,
            "actor": actor,
            "reason": reason,
        },
    )
    record = (
        reply["override"]
        if reply is not None
        else override(
            redis_client(cfg),
            run_id,
            dimension=dimension,
            delta=delta,
            expires_in_s=expires_in_s,
            actor=_actor(actor),
            reason=reason,
            maxlen=cfg.service.activity_maxlen,
        )
    )
    console.print(f"override recorded: {dimension} {delta:+d} until {record['expires_at']}")


def _state(kind: str, run_id: str, reason: str, actor: str | None) -> dict[str, Any]:
    """An emergency stop or its reset: through Mother for a principal, else directly; the event."""
    reply = _by_principal(kind, run_id, {"actor": actor, "reason": reason})
    if reply is not None:
        event: dict[str, Any] = reply["event"]
        return event
    cfg = settings()
    act = emergency_stop if kind == "budget_stop" else reset_stop
    return act(redis_client(cfg), run_id, _actor(actor), reason, cfg.service.activity_maxlen)


@app.command("stop")
@handle_errors
def stop_cmd(
    run_id: Annotated[str, typer.Argument()],
    reason: Annotated[str, typer.Option()],
    actor: ActorOpt = None,
) -> None:
    """Emergency stop: mutating actions are refused at once until `mother budget reset`."""
    event = _state("budget_stop", run_id, reason, actor)
    if event.get("already"):
        console.print(
            f"run {run_id} was already budget_stopped (at {event['at']} by {event['actor']}: "
            f"{event['reason']}); nothing changed"
        )
    else:
        console.print(f"run {run_id} is budget_stopped (at {event['at']})")


@app.command("reset")
@handle_errors
def reset_cmd(
    run_id: Annotated[str, typer.Argument()],
    reason: Annotated[str, typer.Option()],
    actor: ActorOpt = None,
) -> None:
    """Lift an emergency stop."""
    event = _state("budget_reset", run_id, reason, actor)
    console.print(f"run {run_id} is active again (at {event['at']})")
