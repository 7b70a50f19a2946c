"""What runs cost (``mother costs`` and the dashboard's ``/costs``, one reader for both): the runs created in
a period, added up by user and by day (UTC, by creation), each run's cost what its budget counters say
the guard charged; the most expensive of them; and spend, calls and tokens by model, from the metrics
counters (every settled model call since the counters began)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import asdict, dataclass, field
from typing import Any

from mother import keys
from mother.observe.listing import MAX_PAGE, RunQuery, all_rows
from mother.observe.timeline import usd
from schemas import iso_from_ms

__all__ = ["Costs", "costs"]

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


def _add(total: dict[str, Any], spend: int, tokens: int) -> None:
    total["runs"] += 1
    total["spend_micro_usd"] += spend
    total["tokens"] += tokens


def _priced(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{**r, "spend_usd": usd(r["spend_micro_usd"])} for r in rows]


def costs(client: Any, since_ms: int, until_ms: int, top: int = 10) -> Costs:
    """The costs of the runs created from ``since_ms`` to ``until_ms`` (epoch ms, server clock): each run
    read once, through the listing's pages."""
    found = Costs(since_ms, until_ms)
    users: dict[str, dict[str, Any]] = {}
    days: dict[str, dict[str, Any]] = {}
    priciest: list[dict[str, Any]] = []
    query = RunQuery(created_from=since_ms, created_to=until_ms, limit=MAX_PAGE).check()
    for row in all_rows(client, query):
        spend = row.get("spend_micro_usd") or 0
        tokens = row.get("total_tokens") or 0
        found.runs += 1
        found.spend_micro_usd += spend
        found.tokens += tokens
        user = str(row.get("user_id") or "-")
        _add(users.setdefault(user, _total("user", user)), spend, tokens)
        day = str(row.get("created_at") or "")[:10] or "-"
        _add(days.setdefault(day, _total("day", day)), spend, tokens)
        priciest.append(
            {
                "run_id": row["run_id"],
                "user": user,
                "status": row.get("status"),
                "reason": row.get("reason"),
                "created_at": row.get("created_at"),
                "spend_micro_usd": spend,
                "tokens": tokens,
            }
        )
        # keep the costliest ``top`` so far: a period of many runs is read once, not held whole
        if len(priciest) > 4 * max(top, 1):
            priciest = sorted(priciest, key=_costliest)[:top]
    found.by_user = _priced(
        sorted(users.values(), key=lambda t: (-t["spend_micro_usd"], t["user"]))
    )
    found.by_day = _priced(sorted(days.values(), key=lambda t: t["day"]))
    found.top = _priced(sorted(priciest, key=_costliest)[:top])
    found.by_model = _models(client)
    return found


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
