"""``mother inspect``: a run's summary (``--json``: its whole record), or any key as JSON."""

from __future__ import annotations

import sys
from itertools import islice
from typing import Annotated, Any

import orjson
import redis
import typer
from rich.table import Table
from rich.text import Text

from mother import keys
from mother.cli._common import console, handle_errors, redis_client, settings
from mother.client import MotherClient
from mother.connection import connect
from mother.errors import NotFound
from mother.observe.timeline import clock_text, duration_text, suggestion_text, usd

__all__ = ["RunView", "inspect_key", "inspect_run", "print_summary", "read_key", "resolve_inspect"]


@handle_errors
def inspect_key(
    target: Annotated[
        str, typer.Argument(help="a run id, or a Redis key such as termination:run-abc123")
    ],
    as_json: Annotated[
        bool,
        typer.Option(
            "--json",
            help="a run's whole record as JSON (state, termination, budget, timeline, artifacts, "
            "contexts, activity) instead of the summary",
        ),
    ] = False,
) -> None:
    """A run's summary (why it stopped, its timeline and cost, per phase and attempt), or with --json
    everything about it; any other key as JSON."""
    cfg = settings()
    client = MotherClient(settings=cfg, client=redis_client(cfg))
    found = resolve_inspect(client, target)
    if isinstance(found, RunView) and not as_json:
        print_summary(found.view)
        return
    value = found.view if isinstance(found, RunView) else found
    if as_json:
        sys.stdout.write(orjson.dumps(value).decode() + "\n")
        return
    console.print_json(orjson.dumps(value).decode())


class RunView:
    """What :func:`resolve_inspect` found for a run id: the run's whole view."""

    def __init__(self, view: dict[str, Any]) -> None:
        self.view = view


def print_summary(view: dict[str, Any]) -> None:
    """A run in a screenful: who, what, why it stopped, when and how long, what it cost, each phase and
    attempt (queued, ran, model and tool time, errors), its gates and conflicts, where to read more."""
    run, term, tl = view["run"], view.get("termination"), view["timeline"]
    cost = tl["cost"]
    status = run.get("status")
    head = Text(f"run {run['run_id']}", style="bold")
    head.append(f" · user {run.get('user_id')} · {status}")
    if term:
        head.append(f" · {term['reason']}", style="bold")
    console.print(head)
    when = f"created {clock_text(run.get('created_at'))} UTC"
    if run.get("terminated_at"):
        when += f" · ended {clock_text(run['terminated_at'])} UTC · took {duration_text(tl['duration_ms'])}"
    console.print(Text(when))
    trace = run.get("trace")
    if isinstance(trace, dict):
        console.print(
            Text(f"trace {trace.get('trace_id')} (OpenTelemetry; root span {trace.get('span_id')})")
        )
    console.print(
        Text(
            f"cost {cost['spend_usd']} · {cost['total_tokens']} tokens ({cost['input_tokens']} in, "
            f"{cost['output_tokens']} out) · {cost['model_calls']} model calls · {cost['tool_calls']} tool calls"
        )
    )
    console.print(
        Text(
            f"waits: before its first phase {duration_text(tl['admission_wait_ms'])}"
            + (" (for a slot)" if tl["queued_for_slot"] else "")
            + f" · in worker queues {duration_text(tl['queue_wait_ms'])} · for people "
            f"{duration_text(tl['gate_wait_ms'])} · model {duration_text(tl['model_ms'])} · tools "
            f"{duration_text(tl['tool_ms'])} · {tl['retries']} retries"
        )
    )
    if term:
        line = Text("why it stopped: ", style="bold")
        line.append(f"{term['reason']}: {term['details']}")
        console.print(line)
        line = Text("next: ", style="bold")
        line.append(
            suggestion_text(term["reason"], term["suggested_action"], term.get("can_retry"))
        )
        console.print(line)
    elif run.get("gate"):
        gate = run["gate"]
        console.print(Text(f"waits for a person: {gate.get('kind')}: {gate.get('subject')}"))
    attempts = Table(title="attempts (times UTC)", title_justify="left")
    for col in (
        "phase",
        "#",
        "status",
        "started",
        "queued",
        "ran",
        "model",
        "tools",
        "tokens",
        "cost",
        "steps",
        "error",
    ):
        attempts.add_column(col, overflow="fold")
    for a in tl["attempts"]:
        attempts.add_row(
            str(a["phase"]),
            str(a["attempt"]),
            a["status"],
            clock_text(a["started_at"])[11:],
            duration_text(a["queue_ms"]),
            duration_text(a["run_ms"]),
            duration_text(a["model_ms"]),
            duration_text(a["tool_ms"]),
            f"{a['input_tokens']}/{a['output_tokens']}",
            usd(a["spend_micro_usd"]),
            a.get("steps") or "",
            (a["error"] or "")[:160],
        )
    console.print(attempts)
    if tl["gates"]:
        for g in tl["gates"]:
            console.print(
                Text(
                    f"gate {g['gate_id']} ({g['phase']}): {g['decision'] or 'waiting'}"
                    + (f" by {g['actor']}" if g["actor"] else "")
                    + f", waited {duration_text(g['wait_ms'])}"
                )
            )
    if view.get("conflicts"):
        for c in view["conflicts"]:
            console.print(
                Text(
                    f"conflict {c.get('conflict_id')}: {c.get('conflict_type')} → "
                    f"{c.get('strategy_applied') or ''} {c.get('final_decision') or c.get('status') or ''}"
                )
            )
            for side in c.get("their_outputs") or []:
                console.print(
                    Text(
                        f"  {side.get('agent_id')}@{side.get('model') or '?'} ({side.get('phase')} "
                        f"#{side.get('attempt')}): {side.get('stance')}, confidence "
                        f"{side.get('confidence')}, artifacts {', '.join(side.get('artifact_ids') or []) or 'none'}"
                    )
                )
            if c.get("rationale"):
                console.print(Text(f"  why: {c['rationale']}"))
    console.print(
        Text(
            f"{len(view.get('artifacts') or [])} artifacts · {len(view.get('contexts') or [])} contexts · "
            f"{len(view.get('activity') or [])} activity entries (mother logs {run['run_id']}) · "
            f"everything: mother inspect {run['run_id']} --json",
            style="dim",
        )
    )


def read_key(client: redis.Redis, url: str, key: str) -> Any:
    """A key's value as plain JSON-ready data, whatever its type (the first 1000 items of a collection,
    the newest 100 entries of a stream). Read as bytes: what is not UTF-8 is shown as \\xNN escapes."""
    kind = client.type(key)
    if kind == "none":
        raise NotFound(
            f"key {key!r} does not exist; list keys with `redis-cli --scan --pattern 'run:*'`"
        )
    if kind == "ReJSON-RL":
        return orjson.loads(client.execute_command("JSON.GET", key))
    with connect(url, check=False, decode_responses=False) as raw:
        if kind == "string":
            value = raw.get(key)
            try:
                return orjson.loads(value)
            except orjson.JSONDecodeError:
                return _readable(value)
        if kind == "hash":
            return _readable(dict(islice(raw.hscan_iter(key), 1000)))
        if kind == "list":
            return _readable(raw.lrange(key, 0, 999))
        if kind == "set":
            return sorted(_readable(list(islice(raw.sscan_iter(key), 1000))))
        if kind == "zset":
            return [
                {"member": _readable(m), "score": s}
                for m, s in raw.zrange(key, 0, 999, withscores=True)
            ]
        if kind == "stream":
            return [{"id": _readable(i), **_readable(f)} for i, f in raw.xrevrange(key, count=100)]
    return {"type": kind, "note": "not rendered"}


def _readable(value: Any) -> Any:
    """Bytes as text, with what is not UTF-8 as \\xNN escapes, through dicts and lists."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "backslashreplace")
    if isinstance(value, dict):
        return {_readable(k): _readable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_readable(v) for v in value]
    return value


def inspect_run(client: MotherClient, run_id: str) -> dict[str, Any]:
    """Everything about a run (:meth:`MotherClient.inspect`)."""
    return client.inspect(run_id)


def resolve_inspect(client: MotherClient, target: str) -> Any:
    """``inspect`` takes a run id (then shows the whole run), or a key. A run id is looked for first:
    a principal may read runs, not any key its name could be."""
    if keys.is_id(target) and client.redis.exists(keys.run_key(target)):
        return RunView(inspect_run(client, target))
    try:
        return read_key(client.redis, client.settings.redis_url, target)
    except NotFound:
        if not keys.is_id(target):
            raise
        raise NotFound(
            f"no run and no key {target!r}; list runs with `mother runs`, "
            "keys with `redis-cli --scan --pattern 'run:*'`"
        ) from None
