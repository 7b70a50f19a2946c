"""What runs cost (``mother costs`` and the dashboard's ``/costs``, one reader for both): the runs created in
a period, added up by user and by day (UTC, by creation), each run's cost what its budget counters say
the guard charged; the most expensive of them; and spend, calls and tokens by model, from the metrics
counters (every settled model call since the counters began)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import redis

from mother import keys
from mother.errors import InvalidSpec
from mother.observe.listing import MAX_PAGE, OPEN_STATUSES, RunQuery, all_rows, list_runs, when_ms
from mother.observe.timeline import usd
from mother.records._json import aggregate_rows
from schemas import iso_from_ms

__all__ = ["Costs", "costs", "period"]

DAY_MS = 86_400_000
# the model counters' fields: metrics:counters 'model_<dim>|<model>'
_MODEL_DIMS = ("calls", "input_tokens", "output_tokens", "spend_micro_usd")


@dataclass
class Costs:
    since_ms: int
    until_ms: int
    runs: int = 0
    spend_micro_usd: int = 0
    tokens: int = 0
    by_user: list[dict[str, Any]] = field(default_factory=list)
    by_day: list[dict[str, Any]] = field(default_factory=list)
    top: list[dict[str, Any]] = field(default_factory=list)
    by_model: list[dict[str, Any]] = field(default_factory=list)

    @property
    def spend_usd(self) -> str:
        return usd(self.spend_micro_usd)

    def to_dict(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "since": iso_from_ms(self.since_ms),
            "until": iso_from_ms(self.until_ms),
            "spend_usd": self.spend_usd,
        }


def _total(kind: str, name: str) -> dict[str, Any]:
    return {kind: name, "runs": 0, "spend_micro_usd": 0, "tokens": 0}


def _add(total: dict[str, Any], runs: int, spend: int, tokens: int) -> None:
    total["runs"] += runs
    total["spend_micro_usd"] += spend
    total["tokens"] += tokens


def _priced(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{**r, "spend_usd": usd(r["spend_micro_usd"])} for r in rows]


def period(since: str, until: str | None, now_ms: int, flag: str = "") -> tuple[int, int]:
    """A period's ends in epoch ms from ``since`` and ``until`` (an age, 7d or 24h, or an ISO date-time;
    ``until`` None: ``now_ms``); InvalidSpec naming the option (``flag``: ``--`` for the CLI's) when one
    is not a time or the period ends before it starts."""
    start = when_ms(since, now_ms, f"{flag}since")
    end = when_ms(until, now_ms, f"{flag}until") if until else now_ms
    if start > end:
        raise InvalidSpec(
            f"{flag}since ({since[:40]}) is after {flag}until ({(until or 'now')[:40]})"
        )
    return start, end


def costs(client: Any, since_ms: int, until_ms: int, top: int = 10) -> Costs:
    """The costs of the runs created from ``since_ms`` to ``until_ms`` (epoch ms, server clock). The ended
    runs are added up on the server (``FT.AGGREGATE`` on idx:runs over the cost Mother copies onto each
    record at its end), their most expensive found by one sorted search; the runs not yet ended (at
    most what is running or waiting) are read one by one, at what their budget counters say so far.
    Without the search module every run is read through the listing."""
    found = Costs(since_ms, until_ms)
    users: dict[str, dict[str, Any]] = {}
    days: dict[str, dict[str, Any]] = {}
    priciest: list[dict[str, Any]] = []
    window = RunQuery(created_from=since_ms, created_to=until_ms, limit=MAX_PAGE).check()
    open_rows: Iterator[dict[str, Any]]
    try:
        _ended(client, window, users, days, priciest, top)
        open_rows = (
            row
            for status in OPEN_STATUSES
            for row in all_rows(client, replace(window, status=status))
        )
    except redis.ResponseError as exc:
        if "unknown command" not in str(exc).lower():
            raise
        users.clear()
        days.clear()
        priciest.clear()
        open_rows = all_rows(client, window)
    for row in open_rows:
        spend, tokens = row.get("spend_micro_usd") or 0, row.get("total_tokens") or 0
        user = str(row.get("user_id") or "-")
        _add(users.setdefault(user, _total("user", user)), 1, spend, tokens)
        day = str(row.get("created_at") or "")[:10] or "-"
        _add(days.setdefault(day, _total("day", day)), 1, spend, tokens)
        priciest.append(_top_row(row))
    for total in users.values():
        found.runs += total["runs"]
        found.spend_micro_usd += total["spend_micro_usd"]
        found.tokens += total["tokens"]
    found.by_user = _priced(
        sorted(users.values(), key=lambda t: (-t["spend_micro_usd"], t["user"]))
    )
    found.by_day = _priced(sorted(days.values(), key=lambda t: t["day"]))
    found.top = _priced(sorted(priciest, key=_costliest)[:top])
    found.by_model = _models(client)
    return found


def _ended(
    client: Any,
    window: RunQuery,
    users: dict[str, dict[str, Any]],
    days: dict[str, dict[str, Any]],
    priciest: list[dict[str, Any]],
    top: int,
) -> None:
    """The ended runs of ``window``, added up by user and by day on the server, and the ``top`` most
    expensive of them."""
    ended = replace(window, status="terminated")
    query = ended.text(None)
    sums = ["REDUCE", "COUNT", "0", "AS", "runs", "REDUCE", "SUM", "1", "@cost", "AS", "spend",
            "REDUCE", "SUM", "1", "@tokens", "AS", "tokens"]  # fmt: skip
    for row in _aggregate(client, query, ["GROUPBY", "1", "@user", *sums]):
        user = row.get("user") or "-"
        _add(users.setdefault(user, _total("user", user)), *_sums(row))
    day_of = ["LOAD", "1", "@created", "APPLY", f"floor(@created/{DAY_MS})*{DAY_MS}", "AS", "day"]
    for row in _aggregate(client, query, [*day_of, "GROUPBY", "1", "@day", *sums]):
        day = iso_from_ms(int(float(row.get("day") or 0)))[:10]
        _add(days.setdefault(day, _total("day", day)), *_sums(row))
    costly = list_runs(client, replace(ended, sort="cost", limit=max(1, min(top, MAX_PAGE))))
    priciest += [_top_row(row) for row in costly.rows]


def _aggregate(client: Any, query: str, steps: list[str]) -> list[dict[str, str]]:
    reply = client.execute_command(
        "FT.AGGREGATE", keys.RUN_SEARCH_INDEX, query, *steps, "LIMIT", "0", "100000", "DIALECT", "2"
    )
    return aggregate_rows(reply)


def _sums(row: dict[str, str]) -> tuple[int, int, int]:
    return tuple(int(float(row.get(k) or 0)) for k in ("runs", "spend", "tokens"))  # type: ignore[return-value]


def _top_row(row: dict[str, Any]) -> dict[str, Any]:
    return {
        "run_id": row["run_id"],
        "user": str(row.get("user_id") or "-"),
        "status": row.get("status"),
        "reason": row.get("reason"),
        "created_at": row.get("created_at"),
        "spend_micro_usd": row.get("spend_micro_usd") or 0,
        "tokens": row.get("total_tokens") or 0,
    }


def _costliest(row: dict[str, Any]) -> tuple[int, int, str]:
    return (-row["spend_micro_usd"], -row["tokens"], row["run_id"])


def _models(client: Any) -> list[dict[str, Any]]:
    """Spend, calls and tokens by model, from the settled model calls' counters."""
    counters = client.hgetall(keys.METRICS_COUNTERS) or {}
    models: dict[str, dict[str, Any]] = defaultdict(dict)
    for raw_field, value in counters.items():
        name = raw_field.decode() if isinstance(raw_field, bytes) else str(raw_field)
        dim, _, model = name.partition("|")
        dim = dim.removeprefix("model_")
        if name.startswith("model_") and model and dim in _MODEL_DIMS:
            models[model][dim] = int(value)
    rows = [
        {
            "model": model,
            **{dim: got.get(dim, 0) for dim in _MODEL_DIMS},
            "spend_usd": usd(got.get("spend_micro_usd", 0)),
        }
        for model, got in models.items()
    ]
    return sorted(rows, key=lambda r: (-r["spend_micro_usd"], r["model"]))
