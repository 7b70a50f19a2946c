"""The tool registry's documents: ``registry:tools`` (``schemas.tool.ToolRegistry``) and each tool's
``tool_stats:{tool_id}`` (``schemas.tool.ToolStats``, written only by Mother through the server function
``mh_tool_stat``, which counts a call and stamps it with the server's clock in one step)."""

from __future__ import annotations

from typing import Any

import orjson
from pydantic import ValidationError

from mother import keys
from mother.errors import RecordInvalid
from mother.functions import call
from schemas import describe_validation_error
from schemas.tool import ToolRegistry, ToolStats

__all__ = ["read_registry", "read_stats", "record_call", "refresh_success_rates", "write_registry"]


def write_registry(client: Any, registry: ToolRegistry) -> None:
    """Replace ``registry:tools`` (one JSON.SET: a reader sees the old registry or the new one)."""
    client.execute_command("JSON.SET", keys.tools_registry_key(), "$", registry.to_json())


def read_registry(client: Any) -> ToolRegistry | None:
    """``registry:tools``, or None when no registry was synced."""
    raw = client.execute_command("JSON.GET", keys.tools_registry_key())
    if raw is None:
        return None
    try:
        return ToolRegistry.model_validate_json(raw)
    except ValidationError as exc:
        raise RecordInvalid(
            f"{keys.tools_registry_key()} is not a tool registry "
            f"({describe_validation_error(exc)}); run `mother tools sync`"
        ) from None


def read_stats(client: Any, tool_ids: list[str]) -> dict[str, ToolStats]:
    """Each tool's statistics (a tool never called has none), in one JSON.MGET."""
    if not tool_ids:
        return {}
    raws = client.execute_command("JSON.MGET", *(keys.tool_stats_key(t) for t in tool_ids), "$")
    stats = {}
    for tool_id, raw in zip(tool_ids, raws, strict=True):
        if raw:
            found = orjson.loads(raw)
            if found:
                stats[tool_id] = ToolStats.model_validate(found[0])
    return stats


def refresh_success_rates(client: Any) -> bool:
    """Set ``registry:tools.tool_success_rates`` from each tool's ``tool_stats`` as of now (Mother's
    watchdog, now and then); False when no registry is synced."""
    raw = client.execute_command("JSON.GET", keys.TOOLS_REGISTRY, "$.routing_order")
    if not raw:
        return False
    listed = orjson.loads(raw)
    tool_ids = listed[0] if listed else []
    stats = read_stats(client, tool_ids)
    rates = {tool_id: s.success_rate for tool_id, s in stats.items()}
    client.execute_command(
        "JSON.SET", keys.TOOLS_REGISTRY, "$.tool_success_rates", orjson.dumps(rates), "XX"
    )
    return True


def record_call(client: Any, tool_id: str, *, ok: bool, execution_ms: float) -> None:
    """Count one call of ``tool_id`` in ``tool_stats:{tool_id}`` (atomic on the server)."""
    call(
        client,
        "mh_tool_stat",
        [keys.tool_stats_key(tool_id), keys.METRICS_COUNTERS],
        [1 if ok else 0, execution_ms],
    )
