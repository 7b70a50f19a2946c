"""``metrics:counters``: the monotonic counters /metrics exposes (:mod:`mother.web.metrics`), a hash of
``field|label…`` → n. The server functions count what they do themselves (``count`` in
``mother/lua/prelude.lua``); what Mother counts with a move rides on the move as follow-up writes."""

from __future__ import annotations

from typing import Any

from mother import keys

__all__ = ["DURATION_BOUNDS", "bound_text", "duration_follow_ups", "queue_count"]

# the phase-duration histogram's upper bounds, in seconds ('+Inf' after the last)
DURATION_BOUNDS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800)


def bound_text(bound: float) -> str:
    """A bound as its bucket's field names it: 1 -> '1', 0.5 -> '0.5'."""
    return str(int(bound)) if float(bound).is_integer() else repr(bound)


def duration_follow_ups(duration_ms: int) -> tuple[list[str], list[Any]]:
    """An accepted attempt's duration counted in the histogram, as a move's follow-up writes (keys,
    words: :func:`mother.functions.follow_ups`' shape): its bucket, the sum and the count."""
    seconds = duration_ms / 1000
    bucket = next((bound_text(b) for b in DURATION_BOUNDS if seconds <= b), "+Inf")
    fields = (
        (f"phase_duration_bucket|{bucket}", 1),
        ("phase_duration_ms_sum", int(duration_ms)),
        ("phase_duration_count", 1),
    )
    words: list[Any] = []
    for field, n in fields:
        words += [3, "HINCRBY", field, n]
    return [keys.METRICS_COUNTERS] * len(fields), words


def queue_count(pipe: Any, *field: str) -> None:
    """Count one event in ``metrics:counters`` (``'conflicts', 'critic_vs_coder'`` →
    ``conflicts|critic_vs_coder``) on ``pipe``, with the writes of what it counts."""
    pipe.hincrby(keys.METRICS_COUNTERS, "|".join(field), 1)
