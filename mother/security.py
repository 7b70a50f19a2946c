"""Security violations: ``security:violations``, a list, newest first, capped at ``MAX_VIOLATIONS``
(trimmed with every append); each entry is mirrored as a ``security_violation`` activity entry. Only
Mother writes it: what a worker host saw is its ask (:mod:`mother.asks`), recorded with the host's name.
"""

from __future__ import annotations

from typing import Any

import orjson

from mother import keys
from mother.activity import emit

__all__ = ["MAX_VIOLATIONS", "cap_violations", "record_violation"]

MAX_VIOLATIONS = 10_000


def cap_violations(client: Any) -> None:
    """Keep the newest ``MAX_VIOLATIONS`` (Mother's watchdog, every few ticks)."""
    client.ltrim(keys.SECURITY_VIOLATIONS, 0, MAX_VIOLATIONS - 1)


def record_violation(
    client: Any,
    kind: str,
    *,
    at: str,
    maxlen: int,
    run_id: str | None = None,
    activity: bool = True,
    counted_as: str | None = None,
    **data: Any,
) -> None:
    """Append a violation to ``security:violations`` (the newest ``MAX_VIOLATIONS`` kept) and
    (``activity``) the activity stream, in one round trip (``client`` may be a pipeline: then the caller
    executes it), and count it by kind (``mother_security_violations_total{kind}``; ``counted_as``: the
    label a kind someone else named is counted under, so no party makes labels of its own). Only Mother
    writes there: a host's violation is its ask, which Mother records."""
    entry = {"kind": kind, "at": at, "run_id": run_id, **data}
    pipe = client if hasattr(client, "command_stack") else client.pipeline(transaction=False)
    pipe.lpush(keys.SECURITY_VIOLATIONS, orjson.dumps(entry))
    pipe.ltrim(keys.SECURITY_VIOLATIONS, 0, MAX_VIOLATIONS - 1)
    pipe.hincrby(keys.METRICS_COUNTERS, f"security_violations|{counted_as or kind}", 1)
    if activity:
        emit(pipe, "security_violation", at=at, run_id=run_id, maxlen=maxlen, kind=kind, **data)
    if pipe is not client:
        pipe.execute()
