"""A library's documents in Redis: its policy (``policy:library:{id}``), its record (``library:{id}``:
name, documents, chunk counts), its chunks (``chunk:{library}:{document}:{n}``, indexed by
``idx:chunks``: full text with BM25, TAG fields for library and document), the retrieval counters
(``budget:library:…``, counted by ``mh_library_take``) and the access logs (``access_log:{id}``, in
``access_logs:{library}`` and ``idx:access_logs``)."""

from __future__ import annotations

from typing import Any

import orjson
from pydantic import ValidationError

from mother import keys
from mother.errors import NotFound, RecordInvalid
from mother.functions import call
from mother.records._json import ensure_json_index
from schemas import describe_validation_error
from schemas.library import AccessLog, LibraryAccessPolicy

__all__ = [
    "count_violations",
    "ensure_indexes",
    "queue_access_log",
    "read_library",
    "read_policy",
    "take_query",
    "write_policy",
]


def ensure_indexes(client: Any) -> bool:
    """``idx:chunks`` and ``idx:access_logs`` (False without the search module)."""
    chunks = ensure_json_index(
        client,
        keys.CHUNK_INDEX,
        keys.CHUNK_PREFIX,
        [
            ("$.library_id", "library_id", "TAG"),
            ("$.document_id", "document_id", "TAG"),
            ("$.text", "text", "TEXT"),
        ],
    )
    logs = ensure_json_index(
        client,
        keys.ACCESS_LOG_INDEX,
        keys.ACCESS_LOG_PREFIX,
        [
            ("$.library_id", "library_id", "TAG"),
            ("$.agent_role", "agent_role", "TAG"),
            ("$.user_id", "user_id", "TAG"),
            ("$.granted", "granted", "TAG"),
            ("$.violation_count", "violations", "NUMERIC"),
            ("$.redactions_applied", "redactions", "NUMERIC"),
            ("$.retrieval_count", "retrieved", "NUMERIC"),
            ("$.timestamp_ms", "timestamp", "NUMERIC"),
        ],
    )
    return chunks and logs


def write_policy(client: Any, policy: LibraryAccessPolicy, created_at: str) -> None:
    """The policy and the library's record (kept: its documents) in one transaction."""
    pipe = client.pipeline(transaction=True)
    pipe.execute_command(
        "JSON.SET", keys.library_policy_key(policy.library_id), "$", policy.to_json()
    )
    pipe.execute_command(
        "JSON.SET",
        keys.library_key(policy.library_id),
        "$",
        orjson.dumps(
            {
                "library_id": policy.library_id,
                "library_name": policy.library_name,
                "created_at": created_at,
                "documents": {},
                "chunk_count": 0,
            }
        ),
        "NX",
    )
    pipe.execute_command(
        "JSON.SET",
        keys.library_key(policy.library_id),
        "$.library_name",
        orjson.dumps(policy.library_name),
    )
    pipe.sadd(keys.LIBRARIES_INDEX, policy.library_id)
    pipe.execute()


def read_policy(client: Any, library_id: str) -> LibraryAccessPolicy:
    raw = client.execute_command("JSON.GET", keys.library_policy_key(library_id))
    if raw is None:
        raise NotFound(
            f"no library {library_id!r}: create it with `mother library create {library_id} --policy FILE`"
        )
    try:
        return LibraryAccessPolicy.model_validate_json(raw)
    except ValidationError as exc:
        raise RecordInvalid(
            f"{keys.library_policy_key(library_id)} is not a library policy ({describe_validation_error(exc)})"
        ) from None


def read_library(client: Any, library_id: str) -> dict[str, Any]:
    raw = client.execute_command("JSON.GET", keys.library_key(library_id))
    if raw is None:
        raise NotFound(f"no library {library_id!r}; `mother library list` lists them")
    return dict(orjson.loads(raw))


def take_query(
    client: Any,
    *,
    run_id: str,
    user_id: str,
    day: str,
    library_id: str,
    max_run: int,
    max_daily: int,
    run_ttl_seconds: int,
) -> tuple[bool, str]:
    """Count one query of the library against its per-run and per-user daily caps, on the server:
    (taken, why not)."""
    reply = call(
        client,
        "mh_library_take",
        [
            keys.library_run_usage_key(run_id, library_id),
            keys.library_user_usage_key(user_id, day, library_id),
        ],
        [max_run, max_daily, max(60, run_ttl_seconds), 2 * 86_400],
    )
    if int(reply[0]) == 1:
        return True, ""
    which = reply[1].decode() if isinstance(reply[1], bytes) else str(reply[1])
    what = "max_queries_per_run" if which == "run" else "max_queries_per_user_daily"
    return False, f"{what} reached ({int(reply[2])}/{int(reply[3])})"


def count_violations(client: Any, run_id: str, refused: int) -> int:
    """Add ``refused`` to the run's count of refused library accesses (kept a week), in one round trip;
    returns the count."""
    key = keys.library_run_violations_key(run_id)
    pipe = client.pipeline(transaction=True)
    pipe.incrby(key, refused)
    pipe.expire(key, 7 * 86_400)
    return int(pipe.execute()[0])


def queue_access_log(pipe: Any, log: AccessLog, retention_days: int) -> None:
    """The access log, in the library's timeline, expiring after the policy's retention."""
    doc = {
        **log.model_dump(mode="json"),
        # TAG and NUMERIC views for idx:access_logs
        "granted": "yes" if log.access_granted else "no",
        "violation_count": len(log.policy_violations),
    }
    key = keys.access_log_key(log.log_id)
    pipe.execute_command("JSON.SET", key, "$", orjson.dumps(doc))
    pipe.expire(key, retention_days * 86_400)
    pipe.zadd(keys.access_logs_key(log.library_id), {log.log_id: log.timestamp_ms})
