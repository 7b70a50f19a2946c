"""The access report (seed 003 §7, AccessAuditor.getAccessReport): a library's accesses in a time range,
computed by the search module (``FT.AGGREGATE`` over ``idx:access_logs``), not by loading the logs."""

from __future__ import annotations

from typing import Any

from mother import keys
from mother.records._json import aggregate_rows, tag

__all__ = ["access_report"]


def access_report(client: Any, library_id: str, from_ms: int, to_ms: int) -> dict[str, Any]:
    """Totals, unique users, accesses by agent and by outcome, violations, redactions, chunks retrieved."""
    query = (
        f"@library_id:{tag(keys.check_id(library_id, 'library_id'))} @timestamp:[{from_ms} {to_ms}]"
    )

    def aggregate(*steps: str) -> list[dict[str, str]]:
        return aggregate_rows(
            client.execute_command(
                "FT.AGGREGATE", keys.ACCESS_LOG_INDEX, query, *steps, "DIALECT", "2"
            )
        )

    totals = aggregate(
        "GROUPBY", "0",
        "REDUCE", "COUNT", "0", "AS", "total",
        "REDUCE", "COUNT_DISTINCT", "1", "@user_id", "AS", "users",
        "REDUCE", "SUM", "1", "@violations", "AS", "violations",
        "REDUCE", "SUM", "1", "@redactions", "AS", "redactions",
        "REDUCE", "SUM", "1", "@retrieved", "AS", "retrieved",
    )  # fmt: skip
    by_agent = aggregate("GROUPBY", "1", "@agent_role", "REDUCE", "COUNT", "0", "AS", "n")
    by_outcome = aggregate("GROUPBY", "1", "@granted", "REDUCE", "COUNT", "0", "AS", "n")
    first = totals[0] if totals else {}
    outcome = {row["granted"]: int(float(row["n"])) for row in by_outcome}
    return {
        "library_id": library_id,
        "from_ms": from_ms,
        "to_ms": to_ms,
        "total_accesses": int(float(first.get("total", 0))),
        "granted": outcome.get("yes", 0),
        "refused": outcome.get("no", 0),
        "unique_users": int(float(first.get("users", 0))),
        "by_agent": {row["agent_role"]: int(float(row["n"])) for row in by_agent},
        "violations": int(float(first.get("violations", 0))),
        "redactions_applied": int(float(first.get("redactions", 0))),
        "chunks_retrieved": int(float(first.get("retrieved", 0))),
    }
