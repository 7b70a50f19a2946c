"""``result:{run_id}`` (the final ResultEnvelope) and ``termination:{run_id}`` (its record), as read.
Both are written once, by ``mh_terminate``."""

from __future__ import annotations

from typing import Any

from mother import keys
from schemas import ResultEnvelope, TerminationRecord

__all__ = ["queue_termination_read", "read_result", "read_termination"]


def read_result(client: Any, run_id: str) -> ResultEnvelope | None:
    """The run's result envelope (its termination record inside once it ended), or None."""
    raw = client.execute_command("JSON.GET", keys.result_key(run_id))
    return ResultEnvelope.model_validate_json(raw) if raw else None


def queue_termination_read(pipe: Any, run_id: str) -> None:
    """Queue the read of the run's termination record on ``pipe`` (its JSON text, or None)."""
    pipe.execute_command("JSON.GET", keys.termination_key(run_id))


def read_termination(client: Any, run_id: str) -> TerminationRecord | None:
    """The run's termination record, or None while it runs."""
    raw = client.execute_command("JSON.GET", keys.termination_key(run_id))
    return TerminationRecord.model_validate_json(raw) if raw else None
