"""The budget documents (``schemas.budget``) and the paths of them the product reads or writes.

``budget:run:{id}`` (counters: the guard charges them), ``limits:run:{id}`` (what the guard enforces:
Mother and operators write it), ``budget:user:{id}:daily:{day}``, ``budget:global`` and
``mother:config`` (the leading Mother's published limits). The server functions in
``mother/lua/budget.lua`` write the counters; everything the Python side reads or writes is here.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import orjson

from mother import keys
from mother.records._json import path_values
from schemas.budget import (
    BudgetCounter,
    BudgetExhaustedRecord,
    GlobalGauges,
    PublishedLimits,
    RunLimits,
)

__all__ = [
    "COUNTER_PATHS",
    "ENFORCED_FIELDS",
    "RESERVATIONS_PATH",
    "SPEND_PATH",
    "budget_doc",
    "budget_view",
    "create_run_budget",
    "held_reservations",
    "parse_counters",
    "parse_end_read",
    "publish_limits",
    "published_limits",
    "queue_counters_read",
    "queue_end_read",
    "read_counters",
    "read_own_spend",
    "read_run_limits",
    "refresh_gauges",
    "reservations_of",
    "set_exhausted",
    "spend_usd",
]

# what the turn-start check of the run limits needs of the counters
COUNTER_PATHS = (
    "$.model_calls",
    "$.input_tokens",
    "$.output_tokens",
    "$.spend_micro_usd",
    "$.duration_sec",
)
SPEND_PATH = "$.spend_micro_usd"
# of budget:run:{id}: op -> {dims, user_dims, at, attempt}, or a tombstone {released}
RESERVATIONS_PATH = "$.reservations"
# what budget_view shows of limits:run:{id} beside the counters
ENFORCED_FIELDS = (
    "profile",
    "warning_ratio",
    "limits",
    "limit_sources",
    "overrides",
    "status",
    "stop",
    "fence",
    "started_ms",
)
MICRO = Decimal(1_000_000)


def create_run_budget(client: Any, counters: BudgetCounter, enforced: RunLimits) -> None:
    """Create the run's two budget documents (NX each: a re-delivered start keeps the first) on ``client``
    (a pipeline: queued)."""
    client.execute_command(
        "JSON.SET", keys.run_budget_key(counters.run_id), "$", counters.to_json(), "NX"
    )
    client.execute_command(
        "JSON.SET", keys.run_limits_key(enforced.run_id), "$", enforced.to_json(), "NX"
    )


def budget_view(client: Any, run_id: str) -> dict[str, Any] | None:
    """A run's budget as one mapping: its counters (``budget:run:{id}``) with what is enforced on them
    (``limits:run:{id}``: limits, overrides, status, stop, fence); None when the run has no budget."""
    pipe = client.pipeline(transaction=False)
    pipe.execute_command("JSON.GET", keys.run_budget_key(run_id))
    pipe.execute_command("JSON.GET", keys.run_limits_key(run_id))
    counters, enforced = pipe.execute()
    if counters is None and enforced is None:
        return None
    view = orjson.loads(counters) if counters else {}
    if enforced:
        limits = orjson.loads(enforced)
        view.update({name: limits.get(name) for name in ENFORCED_FIELDS})
    return view


def budget_doc(client: Any, key: str) -> dict[str, Any] | None:
    """A budget document as stored (any of them), or None."""
    raw = client.execute_command("JSON.GET", key)
    return orjson.loads(raw) if raw else None


def read_run_limits(client: Any, run_id: str) -> RunLimits | None:
    """What the run's guard enforces, validated; None when the run has no budget (yet)."""
    raw = client.execute_command("JSON.GET", keys.run_limits_key(run_id))
    return RunLimits.model_validate_json(raw) if raw else None


def read_counters(client: Any, run_id: str) -> dict[str, Any] | None:
    """The counters the turn-start check needs (COUNTER_PATHS), or None without a budget."""
    return parse_counters(
        client.execute_command("JSON.GET", keys.run_budget_key(run_id), *COUNTER_PATHS)
    )


def queue_counters_read(pipe: Any, run_id: str) -> None:
    """Queue the read of the counters the turn-start check needs on ``pipe`` (:func:`parse_counters`)."""
    pipe.execute_command("JSON.GET", keys.run_budget_key(run_id), *COUNTER_PATHS)


def parse_counters(raw: Any) -> dict[str, Any] | None:
    return None if raw is None else path_values(raw)


def spend_usd(micro: int | None) -> Decimal:
    """Micro-USD as USD (0 for none)."""
    return Decimal(micro or 0) / MICRO


def read_own_spend(client: Any, run_id: str) -> Decimal:
    """A run's own spend in USD (0 without a budget)."""
    raw = client.execute_command("JSON.GET", keys.run_budget_key(run_id), SPEND_PATH)
    return spend_usd(orjson.loads(raw)[0]) if raw else Decimal(0)


def reservations_of(found: Any) -> dict[str, Any]:
    """Of a run budget's ``reservations`` as read (None without a budget), those still holding something (a
    released one's tombstone holds nothing)."""
    if not isinstance(found, dict):
        return {}
    return {op: r for op, r in found.items() if isinstance(r, dict) and r.get("dims")}


def held_reservations(client: Any, run_id: str) -> dict[str, Any]:
    """The model-call reservations the run's budget holds now (one read)."""
    raw = client.execute_command("JSON.GET", keys.run_budget_key(run_id), RESERVATIONS_PATH)
    return reservations_of(orjson.loads(raw)[0] if raw else None)


def queue_end_read(pipe: Any, run_id: str) -> None:
    """Queue what a run's end needs of its counters on ``pipe``: its spend and its reservations."""
    pipe.execute_command("JSON.GET", keys.run_budget_key(run_id), SPEND_PATH, RESERVATIONS_PATH)


def parse_end_read(raw: Any) -> tuple[int, dict[str, Any]]:
    """The reply of :func:`queue_end_read`: the run's spend (micro-USD) and the reservations it still holds."""
    found = path_values(raw) if raw else {}
    return int(found.get("spend_micro_usd") or 0), reservations_of(found.get("reservations"))


def set_exhausted(client: Any, record: BudgetExhaustedRecord) -> None:
    """Store the spec's BudgetExhausted record in the run's counters (``$.exhausted``)."""
    client.execute_command(
        "JSON.SET", keys.run_budget_key(record.run_id), "$.exhausted", record.to_json()
    )


def refresh_gauges(client: Any, concurrent: int, depth: int, memory_mb: int) -> None:
    """Set ``budget:global`` from the truth (made with every gauge at 0 when there is none), in one MULTI."""
    pipe = client.pipeline(transaction=True)
    pipe.execute_command("JSON.SET", keys.GLOBAL_BUDGET, "$", GlobalGauges().to_json(), "NX")
    pipe.execute_command(
        "JSON.MERGE",
        keys.GLOBAL_BUDGET,
        "$",
        orjson.dumps(
            {"concurrent_runs": concurrent, "queue_depth": depth, "redis_memory_mb": memory_mb}
        ),
    )
    pipe.execute()


def publish_limits(client: Any, limits: PublishedLimits) -> None:
    """Write the leading Mother's global limits to ``mother:config``."""
    client.execute_command("JSON.SET", keys.MOTHER_CONFIG, "$", limits.to_json())


def published_limits(client: Any) -> PublishedLimits | None:
    """The leading Mother's published limits, or None when no Mother has published any."""
    raw = client.execute_command("JSON.GET", keys.MOTHER_CONFIG)
    return PublishedLimits.model_validate_json(raw) if raw else None
