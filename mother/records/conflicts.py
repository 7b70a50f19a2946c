"""``conflict:{conflict_id}``: a ConflictResolution (``schemas.ConflictResolution``), written by Mother's
conflict resolution (:mod:`mother.conflicts`) with the move that acts on it, and ``idx:conflict`` over
them when the search module is there."""

from __future__ import annotations

from typing import Any

import orjson
import redis
from pydantic import ValidationError

from mother import keys
from mother.errors import RecordInvalid
from mother.logs import get_logger
from mother.records._json import ensure_json_index
from schemas import describe_validation_error
from schemas.conflict import ConflictResolution

__all__ = ["closed_by_end", "ensure_index", "queue_write", "read_conflict", "read_conflicts"]

log = get_logger("records.conflicts")


def queue_write(pipe: Any, conflict: ConflictResolution) -> None:
    """Queue writing the whole record on ``pipe`` (a move's follow-up, or a transaction of its own)."""
    pipe.execute_command(
        "JSON.SET", keys.conflict_key(conflict.conflict_id), "$", conflict.to_json()
    )


def _parse(conflict_id: str, raw: Any, *, listed: bool = False) -> ConflictResolution:
    """A record as read (``listed``: a JSONPath read, the record inside a one-item list)."""
    try:
        data = orjson.loads(raw)
        return ConflictResolution.model_validate(data[0] if listed else data)
    except (orjson.JSONDecodeError, IndexError, KeyError, TypeError) as exc:
        why = f"not a JSON record: {exc}"
    except ValidationError as exc:
        why = describe_validation_error(exc, limit=2)
    raise RecordInvalid(
        f"{keys.conflict_key(conflict_id)} is not a conflict record ({why}); it was changed outside "
        "Mother: restore it, or delete the key"
    )


def read_conflict(client: Any, conflict_id: str) -> ConflictResolution | None:
    raw = client.execute_command("JSON.GET", keys.conflict_key(conflict_id))
    return _parse(conflict_id, raw) if raw else None


def read_conflicts(client: Any, conflict_ids: list[str]) -> list[ConflictResolution]:
    """The records of ``conflict_ids`` that exist, in that order (one round trip)."""
    if not conflict_ids:
        return []
    found = client.execute_command("JSON.MGET", *map(keys.conflict_key, conflict_ids), "$")
    return [
        _parse(cid, raw, listed=True)
        for cid, raw in zip(conflict_ids, found, strict=True)
        if raw and raw != "[]"
    ]


def closed_by_end(
    conflict: ConflictResolution, reason: str, details: str, at_ms: int, at_iso: str
) -> ConflictResolution:
    """``conflict``, still open when its run ended (``reason``: an arbiter refused by the budget, the run
    cancelled while a person was asked), closed unresolved: blocked, no winner, why in its rationale."""
    return conflict.model_copy(
        update={
            "status": "closed",
            "final_decision": "blocked",
            "resolution_successful": False,
            "winner_agent": None,
            "resolved_at": at_iso,
            "resolution_duration_ms": max(0, at_ms - conflict.detected_ms),
            "rationale": f"the run ended {reason} before the conflict was settled: {details}"[
                :4000
            ],
        }
    )


def ensure_index(client: redis.Redis) -> bool:
    """Create ``idx:conflict`` (type, strategy, decision, status and run TAGs; detected NUMERIC) when
    the search module exists; False without it."""
    made = ensure_json_index(
        client,
        keys.CONFLICT_INDEX,
        keys.CONFLICT_PREFIX,
        [
            ("$.conflict_type", "type", "TAG"),
            ("$.strategy_applied", "strategy", "TAG"),
            ("$.final_decision", "decision", "TAG"),
            ("$.status", "status", "TAG"),
            ("$.run_id", "run", "TAG"),
            ("$.detected_ms", "detected", "NUMERIC"),
        ],
    )
    if made:
        log.info("conflict_index_ready", index=keys.CONFLICT_INDEX)
    return made
