"""Artifact lifecycle and retention (seed 003 §6): the retention policy (:mod:`mother.artifacts.policy`),
what a run's end sets (:func:`retain`), and people's controls of an artifact
(:mod:`mother.artifacts.controls`). The daily garbage collector that applies them is the workers'
(:mod:`workers.gc`)."""

from __future__ import annotations

from typing import Any

from mother.artifacts.policy import REASON_CLASS, Retention, artifact_default, retention_for
from mother.config import Settings
from mother.records.artifacts import queue_retain
from schemas import RunState, TerminationRecord, ms_from_iso

__all__ = ["REASON_CLASS", "Retention", "artifact_default", "retain", "retention_for"]


def retain(pipe: Any, settings: Settings, state: RunState, record: TerminationRecord) -> Retention:
    """Queue on ``pipe`` what the run's end sets: its artifacts' class, expiry and archive times (from
    the end), and when its own records may go."""
    end_ms = (
        record.timestamp_ms if record.timestamp_ms is not None else ms_from_iso(record.timestamp)
    )
    retention = retention_for(settings, record.reason, end_ms)
    queue_retain(
        pipe,
        state.run_id,
        list(dict.fromkeys([*state.artifacts, *state.superseded_artifacts])),
        retention_class=retention.retention_class,
        expires_ms=retention.expires_ms,
        archive_ms=retention.archive_ms,
        records_ms=retention.records_ms,
    )
    return retention
