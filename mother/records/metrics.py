"""``metrics:counters``: the monotonic counters /metrics exposes (:mod:`mother.web.metrics`), a hash of
``field|label…`` → n. The server functions count what they do themselves (``count`` in
``mother/lua/prelude.lua``); what Mother counts with a move rides on the move as follow-up writes."""

from __future__ import annotations

from typing import Any

from mother import keys

__all__ = [
    "DURATION_BOUNDS",
    "HISTOGRAMS",
    "LONG_BOUNDS",
    "bound_text",
    "observe_follow_ups",
    "queue_count",
    "queue_observe",
]

# the phase-duration and queue-wait histograms' upper bounds, in seconds ('+Inf' after the last)
DURATION_BOUNDS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800)
# the run-duration and gate-wait histograms' (runs and people take longer); the server functions count
# run durations with the same bounds (rendered into mother/lua/prelude.lua)
LONG_BOUNDS = (1, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200, 14400, 43200, 86400)
# histogram name -> (help, bounds); each is mother_<name>_seconds, counted in metrics:counters as
# '<name>_bucket|<bound>', '<name>_ms_sum' and '<name>_count'
HISTOGRAMS: dict[str, tuple[str, tuple[float, ...]]] = {
    "phase_duration": ("Duration of accepted phase attempts", DURATION_BOUNDS),
    "queue_wait": (
        "Time accepted phase attempts waited in an RQ queue for a worker (dispatch to start)",
        DURATION_BOUNDS,
    ),
    "gate_wait": (
        "Time runs waited for a person at a gate (opened to decided or expired)",
        LONG_BOUNDS,
    ),
    "run_duration": ("Duration of ended runs (submitted to terminated)", LONG_BOUNDS),
}


def bound_text(bound: float) -> str:
    """A bound as its bucket's field names it: 1 -> '1', 0.5 -> '0.5'."""
    return str(int(bound)) if float(bound).is_integer() else repr(bound)


def observe_follow_ups(name: str, ms: int) -> tuple[list[str], list[Any]]:
    """One observation of histogram ``name`` (``ms`` milliseconds), as a move's follow-up writes (keys,
    words: :func:`mother.functions.follow_ups`' shape): its bucket, the sum and the count."""
    seconds = ms / 1000
    bounds = HISTOGRAMS[name][1]
    bucket = next((bound_text(b) for b in bounds if seconds <= b), "+Inf")
    fields = (
        (f"{name}_bucket|{bucket}", 1),
        (f"{name}_ms_sum", max(0, int(ms))),
        (f"{name}_count", 1),
    )
    words: list[Any] = []
    for field, n in fields:
        words += [3, "HINCRBY", field, n]
    return [keys.METRICS_COUNTERS] * len(fields), words


def queue_observe(pipe: Any, name: str, ms: int) -> None:
    """One observation of histogram ``name`` on ``pipe``, with the writes of what it measures."""
    ks, words = observe_follow_ups(name, ms)
    for key, i in zip(ks, range(0, len(words), 4), strict=True):
        pipe.hincrby(key, words[i + 2], words[i + 3])


def queue_count(pipe: Any, *field: str) -> None:
    """Count one event in ``metrics:counters`` (``'conflicts', 'critic_vs_coder'`` →
    ``conflicts|critic_vs_coder``) on ``pipe``, with the writes of what it counts."""
    pipe.hincrby(keys.METRICS_COUNTERS, "|".join(field), 1)
