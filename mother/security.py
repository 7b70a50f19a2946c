"""The trust boundary's own records: attempt tokens and security violations.

A phase attempt's result is accepted only with the attempt's token. Mother mints it when it dispatches
the attempt and stores it in ``host_token:{host}:{run}:{index}:{attempt}`` for the worker host it queued
the job for (:mod:`mother.hosts`), whose ACL user alone may take it, with GETDEL: the worker that starts
the attempt claims it, once, and no other credentials can read it. Mother keeps only its SHA-256 (``run:{id}.token_digest``) and compares it on the server when the
result moves the run. A result without the token, or with another, is refused and recorded here.

``security:violations`` is a list, newest first, capped at ``MAX_VIOLATIONS``; each entry is mirrored as a
``security_violation`` activity entry.
"""

from __future__ import annotations

import hashlib
import secrets
from typing import Any

import orjson

from mother import keys
from mother.activity import emit

__all__ = [
    "MAX_VIOLATIONS",
    "cap_violations",
    "digest",
    "mint_token",
    "queue_token",
    "queue_token_claim",
    "record_violation",
]

MAX_VIOLATIONS = 10_000


def mint_token() -> str:
    """A new attempt token: 192 random bits, URL-safe text."""
    return secrets.token_urlsafe(24)


def queue_token(
    pipe: Any, host: str, run_id: str, phase_index: int, attempt: int, token: str, ttl_seconds: int
) -> None:
    """Queue the attempt's token on ``pipe`` (its dispatch) for the host Mother chose, expiring after
    ``ttl_seconds``."""
    pipe.set(keys.host_token_key(host, run_id, phase_index, attempt), token, ex=ttl_seconds)


def queue_token_claim(pipe: Any, host: str, run_id: str, phase_index: int, attempt: int) -> None:
    """Queue the claim of the attempt's token by ``host`` on ``pipe`` (GETDEL: its reply is the token,
    once; then None)."""
    pipe.getdel(keys.host_token_key(host, run_id, phase_index, attempt))


def digest(token: str | None) -> str:
    """What Mother stores of a token (and compares): its SHA-256 in hex; '-' for no token at all, which
    no digest equals."""
    return hashlib.sha256(token.encode()).hexdigest() if token else "-"


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
    **data: Any,
) -> None:
    """Append a violation to ``security:violations`` and (``activity``) the activity stream, in one round
    trip (``client`` may be a pipeline: then the caller executes it). Appending is all a worker may do
    there (LPUSH: it cannot trim, delete or rewrite what is recorded); Mother caps the list
    (:func:`cap_violations`). A worker holding no attempt may not append activity: ``activity=False``."""
    entry = {"kind": kind, "at": at, "run_id": run_id, **data}
    pipe = client if hasattr(client, "command_stack") else client.pipeline(transaction=False)
    pipe.lpush(keys.SECURITY_VIOLATIONS, orjson.dumps(entry))
    if activity:
        emit(pipe, "security_violation", at=at, run_id=run_id, maxlen=maxlen, kind=kind, **data)
    if pipe is not client:
        pipe.execute()
