"""A run's timeline and cost, read from its own activity stream and its records.

Every attempt of every phase (dispatched, taken by a worker, ended: completed, failed or lost) with its
queue wait, run time, model and tool time, tokens and spend; the wait before the first phase (intake and
the admission queue); each gate's wait for a person; the conflict steps; and the cost of each phase and
of the run. One function of what is stored, so the run page, ``mother inspect`` and a replay bundle show
the same figures. Times are the server's clock (UTC).
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from schemas import ms_from_iso

__all__ = ["MICRO", "clock_text", "duration_text", "suggestion_text", "timeline", "usd"]

MICRO = Decimal(1_000_000)


# what each suggested action asks of a person, in words
_SUGGESTIONS = {
    "retry": "retry: submit it again; it may succeed as it is",
    "escalate_model": "escalate_model: submit it again on a larger model",
    "broaden_scope": "broaden_scope: give it more to work with (libraries, context, limits)",
    "user_input": "user_input: a person must fix what it names (its input, a model endpoint), then "
    "submit it again",
    "abandon": "abandon: submitting it again as it is would end the same way",
}


def suggestion_text(reason: Any, action: Any, can_retry: Any = False) -> str:
    """A run's suggested action said for people: what it asks of them (a successful run's ``abandon``
    means nothing is left to do)."""
    if reason == "success":
        return "nothing left to do: it succeeded"
    said = _SUGGESTIONS.get(str(action), str(action))
    return said + (" (it can be retried)" if can_retry and action != "retry" else "")


def usd(micro: int | None) -> str:
    """Micro-USD as dollars for people: ``$0.0123`` (four decimals; six below a cent)."""
    if not micro:
        return "$0"
    value = Decimal(micro) / MICRO
    return f"${value:.4f}" if value >= Decimal("0.01") else f"${value:.6f}"


def duration_text(ms: Any) -> str:
    """Milliseconds for people: 850ms, 12.3s, 4m05s, 2h03m."""
    if not isinstance(ms, int):
        return ""
    if ms < 1000:
        return f"{ms}ms"
    if ms < 60_000:
        return f"{ms / 1000:.1f}s"
    if ms < 3_600_000:
        return f"{ms // 60_000}m{ms % 60_000 // 1000:02d}s"
    return f"{ms // 3_600_000}h{ms % 3_600_000 // 60_000:02d}m"


def clock_text(at: Any) -> str:
    """A stored ISO time as people read it: ``YYYY-MM-DD HH:MM:SS`` (UTC, as stored); '' for none."""
    return at[:19].replace("T", " ") if isinstance(at, str) else ""


def _ms(at: Any) -> int | None:
    if not isinstance(at, str):
        return None
    try:
        return ms_from_iso(at)
    except ValueError:
        return None


def _span(start: Any, end: Any) -> int | None:
    a, b = _ms(start), _ms(end)
    return b - a if a is not None and b is not None and b >= a else None


def _attempt(phase: str | None, number: int) -> dict[str, Any]:
    return {
        "phase": phase,
        "attempt": number,
        "status": "dispatched",
        "dispatched_at": None,
        "started_at": None,
        "ended_at": None,
        "queue_ms": None,
        "run_ms": None,
        "model_ms": 0,
        "tool_ms": 0,
        "input_tokens": 0,
        "output_tokens": 0,
        "spend_micro_usd": 0,
        "worker": None,
        "error": None,
        # "replayed 1-6, live 7" for an attempt that resumed from the phase's journal
        "steps": None,
    }


def _ended(row: dict[str, Any], at: str, data: dict[str, Any], status: str) -> None:
    row["status"], row["ended_at"] = status, at
    found = data.get("usage")
    usage: dict[str, Any] = found if isinstance(found, dict) else {}
    for name in ("model_ms", "tool_ms", "input_tokens", "output_tokens", "spend_micro_usd"):
        value = usage.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            row[name] = value
    if isinstance(data.get("started_at"), str):
        row["started_at"] = data["started_at"]
    if isinstance(data.get("worker"), str):
        row["worker"] = data["worker"]
    if isinstance(data.get("steps"), str):
        row["steps"] = data["steps"][:200]
    if isinstance(data.get("error"), str):
        row["error"] = data["error"]


def _same_phase(dispatched: Any, reported: Any) -> bool:
    """Whether an attempt dispatched as ``dispatched`` is one that reports as ``reported``: a conflict's
    extra attempt is dispatched as ``review.arbiter`` (or ``code.escalated``) and reports as its phase."""
    return (
        isinstance(dispatched, str)
        and isinstance(reported, str)
        and dispatched.split(".")[0] == reported.split(".")[0]
    )


def timeline(
    run: dict[str, Any],
    activity: list[dict[str, Any]],
    budget: dict[str, Any] | None,
    now: str | None = None,
) -> dict[str, Any]:
    """The run's timeline from its record (``run``: RunState as a dict), its activity entries (oldest
    first, as dicts) and its budget counters (what the guard charged: the run's cost of record); a gate
    still open has waited until the run's end, or ``now`` (the server's time, ISO)."""
    attempts: dict[tuple[str | None, int], dict[str, Any]] = {}
    order: list[dict[str, Any]] = []
    gates: dict[str, dict[str, Any]] = {}
    conflicts: list[dict[str, Any]] = []
    submitted_at = run.get("created_at")
    first_dispatch: str | None = None
    queued = False
    retries = 0

    def row_of(phase: str | None, number: Any) -> dict[str, Any] | None:
        if not isinstance(number, int) or isinstance(number, bool):
            return None
        key = (phase, number)
        if key not in attempts:
            attempts[key] = _attempt(phase, number)
            order.append(attempts[key])
        return attempts[key]

    def ended_row(phase: str | None, number: Any) -> dict[str, Any] | None:
        """The row an attempt's end belongs to: its own, or the conflict's extra attempt dispatched
        under its own name."""
        if (phase, number) not in attempts:
            for row in order:
                if (
                    row["attempt"] == number
                    and row["status"] == "dispatched"
                    and _same_phase(row["phase"], phase)
                ):
                    return row
        return row_of(phase, number)

    for entry in activity:
        kind, at, phase = entry.get("type"), str(entry.get("at") or ""), entry.get("phase")
        raw = entry.get("data")
        data: dict[str, Any] = raw if isinstance(raw, dict) else {}
        if kind == "run_submitted":
            submitted_at = at
        elif kind == "run_queued":
            queued = True
        elif kind == "phase_dispatched":
            first_dispatch = first_dispatch or at
            row = row_of(phase, data.get("attempt"))
            if row is not None:
                row["dispatched_at"] = at
        elif kind in ("phase_completed", "phase_failed"):
            row = ended_row(phase, data.get("attempt"))
            if row is not None:
                status = "completed" if kind == "phase_completed" else "failed"
                _ended(row, at, data, "lost" if data.get("lost") else status)
        elif kind == "phase_retried":
            retries += 1
        elif kind == "gate_opened" and isinstance(data.get("gate_id"), str):
            gates[data["gate_id"]] = {
                "gate_id": data["gate_id"],
                "phase": phase,
                "kind": data.get("kind"),
                "opened_at": at,
                "closed_at": None,
                "decision": None,
                "actor": None,
                "wait_ms": None,
            }
        elif kind in ("gate_decided", "gate_expired") and data.get("gate_id") in gates:
            gate = gates[data["gate_id"]]
            gate["closed_at"] = at
            gate["decision"] = data.get("decision") if kind == "gate_decided" else "expired"
            gate["actor"] = data.get("actor")
            gate["wait_ms"] = _span(gate["opened_at"], at)
        elif isinstance(kind, str) and kind.startswith("conflict_"):
            conflicts.append({"at": at, "type": kind, "phase": phase, "data": data})
    ended_at = run.get("terminated_at")
    for gate in gates.values():
        if gate["closed_at"] is None:
            gate["wait_ms"] = _span(gate["opened_at"], ended_at or now)
    for row in order:
        if row["status"] == "dispatched" and ended_at is not None:
            row["status"] = "ended_with_run"
        row["queue_ms"] = _span(row["dispatched_at"], row["started_at"])
        row["run_ms"] = _span(row["started_at"], row["ended_at"])
    phases: dict[str | None, dict[str, Any]] = {}
    for row in order:
        p = phases.setdefault(
            row["phase"],
            {
                "phase": row["phase"],
                "attempts": 0,
                "status": None,
                "model_ms": 0,
                "tool_ms": 0,
                "input_tokens": 0,
                "output_tokens": 0,
                "spend_micro_usd": 0,
            },
        )
        p["attempts"] += 1
        p["status"] = row["status"]
        for name in ("model_ms", "tool_ms", "input_tokens", "output_tokens", "spend_micro_usd"):
            p[name] += row[name]
    for p in phases.values():
        p["spend_usd"] = usd(p["spend_micro_usd"])
    counters = budget or {}
    spend = int(counters.get("spend_micro_usd") or 0)
    gate_list = list(gates.values())
    return {
        "created_at": submitted_at,
        "ended_at": ended_at,
        "duration_ms": _span(submitted_at, ended_at),
        # from submission to its first phase's dispatch: intake, the circuit breaker and the admission
        # queue (``queued``: it waited for a slot)
        # (a run that ended before its first phase waited until its end)
        "admission_wait_ms": _span(submitted_at, first_dispatch or ended_at),
        "queued_for_slot": queued,
        "queue_wait_ms": sum(r["queue_ms"] or 0 for r in order),
        "gate_wait_ms": sum(g["wait_ms"] or 0 for g in gate_list),
        "model_ms": sum(r["model_ms"] for r in order),
        "tool_ms": sum(r["tool_ms"] for r in order),
        "retries": retries,
        "attempts": order,
        "phases": list(phases.values()),
        "gates": gate_list,
        "conflicts": conflicts,
        "cost": {
            "spend_micro_usd": spend,
            "spend_usd": usd(spend),
            "input_tokens": int(counters.get("input_tokens") or 0),
            "output_tokens": int(counters.get("output_tokens") or 0),
            "total_tokens": int(counters.get("total_tokens") or 0),
            "model_calls": int(counters.get("model_calls") or 0),
            "tool_calls": int(counters.get("tool_calls") or 0),
        },
    }
