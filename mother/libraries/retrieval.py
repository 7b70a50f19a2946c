"""Retrieval from a library, with its policy enforced in the spec's order: the controller's decision
(agent, model, justification), the run's ``retrieval_queries`` charged through the guard, the policy's
per-run and per-user daily caps counted on the server (``mh_library_take``), then the search (BM25 over
``idx:chunks``, at most ``max_chunks_per_query`` hits), each hit redacted before it goes anywhere, and
the access written to the audit trail (granted or not). A refusal is a ``PolicyViolation`` carrying the
decision; it is also an activity entry and a ``security:violations`` entry."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import redis

from mother import keys
from mother.errors import InvalidSpec, MotherError, PolicyViolation
from mother.libraries.access import decide
from mother.libraries.redaction import RedactionEngine, library_key
from mother.records._json import search_rows, tag
from mother.records.libraries import queue_access_log, read_policy, take_query
from mother.runtime import Runtime
from mother.security import record_violation
from schemas.library import AccessDecision, AccessLog

__all__ = [
    "Hit",
    "RetrievalFailed",
    "RetrievalRefused",
    "Retrieved",
    "query_text",
    "retrieve",
    "search_command",
]

# a word of any script ("Gehälter" is one word, not "geh" and "lter")
_WORD = re.compile(r"[^\W_]+", re.UNICODE)
# RediSearch's default stop words: left out of the query (a stop word in a union with stemmed terms
# made the search module find nothing)
STOP_WORDS = frozenset(
    [
        "a",
        "is",
        "the",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "but",
        "by",
        "for",
        "if",
        "in",
        "into",
        "it",
        "no",
        "not",
        "of",
        "on",
        "or",
        "such",
        "that",
        "their",
        "then",
        "there",
        "these",
        "they",
        "this",
        "to",
        "was",
        "will",
        "with",
    ]
)


class RetrievalFailed(MotherError):
    """The search itself failed (the server refused it, the index is missing): audited, nothing
    charged; the agent sees a tool error."""

    code = "retrieval_failed"


class RetrievalRefused(PolicyViolation):
    """The library's policy refused the access (``decision`` says which rule)."""

    def __init__(self, message: str, *, decision: AccessDecision) -> None:
        super().__init__(message)
        self.decision = decision


@dataclass(frozen=True)
class Hit:
    chunk_id: str
    document_id: str
    score: float
    text: str
    redactions: int


@dataclass
class Retrieved:
    library_id: str
    hits: list[Hit] = field(default_factory=list)
    log_id: str = ""

    @property
    def redactions(self) -> int:
        return sum(h.redactions for h in self.hits)


def _cases(word: str) -> list[str]:
    """The ways ``word`` may be written: the search module folds only ASCII letters to lower case, so
    a word with another letter ("Überstunden", "ÉCOLE") is looked for lower-case, capitalised and
    upper-case, as text writes it."""
    if word.isascii():
        return [word]
    return list(dict.fromkeys((word, word.capitalize(), word.upper())))


def query_text(library_id: str, text: str) -> str:
    """The search query for ``text`` in the library: its words (less stop words), any of them."""
    words = [w for w in (w.lower() for w in _WORD.findall(text)) if w not in STOP_WORDS][:32]
    terms = "|".join(case for w in words for case in _cases(w)) if words else "*"
    return (
        f"@library_id:{tag(library_id)} @text:({terms})"
        if words
        else f"@library_id:{tag(library_id)}"
    )


def retrieve(
    rt: Runtime,
    *,
    run_id: str,
    user_id: str,
    role: str,
    model: str,
    library_id: str,
    query: str,
    k: int | None = None,
    justification: str | None = None,
    charge: Callable[[], None] | None = None,
    run_ttl_seconds: int = 86_400,
) -> Retrieved:
    """The top hits of ``query`` in the library, redacted; raises RetrievalRefused (and logs it)."""
    keys.check_id(library_id, "library_id")
    model_config = rt.settings.models.get(model)
    if model_config is None:
        # an unknown model is neither local nor cloud: whether the policy lets hits go to it is unknown
        raise InvalidSpec(
            f"model {model!r} is not in the catalogue (models.*); one of "
            f"{', '.join(sorted(rt.settings.models))}",
            field="model",
        )
    policy = read_policy(rt.redis, library_id)
    decision = decide(
        policy, role=role, model=model, cloud=model_config.cloud, justification=justification
    )
    now_ms = rt.clock.now_ms()
    log = AccessLog(
        log_id=f"{keys.access_log_id_prefix(run_id)}{uuid.uuid4().hex[:12]}",
        timestamp=rt.clock.iso(now_ms),
        timestamp_ms=now_ms,
        run_id=run_id,
        user_id=user_id,
        agent_role=role,
        library_id=library_id,
        query=query[:4000],
        model_id=model,
        justification=justification or None,
        access_granted=False,
    )
    limit = min(
        k or policy.retrieval_limits.max_chunks_per_query,
        policy.retrieval_limits.max_chunks_per_query,
    )
    rows: list[tuple[float, dict[str, str]]] = []
    if decision.allowed:
        # searched before the quota is taken: a search that fails costs the run nothing
        try:
            rows = _search(rt.redis, query_text(library_id, query), limit)
        except redis.RedisError as exc:
            log.policy_violations = [f"searchFailed: {exc}"[:1000]]
            _audit(rt, log, policy.audit.retention_days, violation=False)
            raise RetrievalFailed(
                f"the search of library {library_id} failed ({exc}); nothing was charged"
            ) from None
    if decision.allowed:
        taken, why = take_query(
            rt.redis,
            run_id=run_id,
            user_id=user_id,
            day=rt.clock.today(),
            library_id=library_id,
            max_run=policy.retrieval_limits.max_queries_per_run,
            max_daily=policy.retrieval_limits.max_queries_per_user_daily,
            run_ttl_seconds=run_ttl_seconds,
        )
        if not taken:
            decision = AccessDecision(
                allowed=False,
                reason="rateLimitExceeded",
                details=f"Exceeded retrieval limits for library {library_id}: {why}",
            )
    if decision.allowed and charge is not None:
        try:
            charge()
        except MotherError as exc:
            decision = AccessDecision(
                allowed=False, reason="rateLimitExceeded", details=f"{exc.code}: {exc.message}"
            )
    if not decision.allowed:
        log.policy_violations = [f"{decision.reason}: {decision.details}"]
        _audit(rt, log, policy.audit.retention_days, violation=True)
        raise RetrievalRefused(f"{decision.reason}: {decision.details}", decision=decision)
    secret = rt.settings.libraries.hash_key
    engine = RedactionEngine(policy, library_key(secret.encode(), library_id) if secret else b"")
    hits = [_hit(engine, row) for row in rows]
    log.access_granted = True
    log.retrieval_count = len(hits)
    log.chunk_ids = [h.chunk_id for h in hits]
    log.document_ids = sorted({h.document_id for h in hits})
    log.redactions_applied = sum(h.redactions for h in hits)
    if policy.audit.log_all_access:
        _audit(rt, log, policy.audit.retention_days, violation=False)
    return Retrieved(library_id, hits, log.log_id if policy.audit.log_all_access else "")


def search_command(query: str, limit: int) -> tuple[str, ...]:
    """The FT.SEARCH a retrieval sends (BM25, scores, the chunk's id, document and text)."""
    return (
        "FT.SEARCH",
        keys.CHUNK_INDEX,
        query,
        "SCORER",
        "BM25",
        "WITHSCORES",
        "RETURN",
        "3",
        "$.chunk_id",
        "$.document_id",
        "$.text",
        "LIMIT",
        "0",
        str(limit),
        "DIALECT",
        "2",
    )


def _search(client: Any, query: str, limit: int) -> list[tuple[float, dict[str, str]]]:
    reply = client.execute_command(*search_command(query, limit))
    return [(score, fields) for _key, score, fields in search_rows(reply)]


def _hit(engine: RedactionEngine, row: tuple[float, dict[str, str]]) -> Hit:
    score, fields = row
    redacted = engine.apply(fields.get("$.text", ""))
    return Hit(
        chunk_id=fields.get("$.chunk_id", ""),
        document_id=fields.get("$.document_id", ""),
        score=score,
        text=redacted.text,
        redactions=redacted.redaction_count,
    )


def _audit(rt: Runtime, log: AccessLog, retention_days: int, *, violation: bool) -> None:
    pipe = rt.redis.pipeline(transaction=True)
    queue_access_log(pipe, log, retention_days)
    rt.emit(
        pipe,
        "policy_violation" if violation else "library_access",
        run_id=log.run_id,
        library_id=log.library_id,
        agent_role=log.agent_role,
        model_id=log.model_id,
        log_id=log.log_id,
        retrieval_count=log.retrieval_count,
        redactions_applied=log.redactions_applied,
        **({"violations": log.policy_violations} if violation else {}),
    )
    pipe.execute()
    if violation:
        record_violation(
            rt.redis,
            "library_access_refused",
            at=log.timestamp,
            maxlen=rt.settings.service.activity_maxlen,
            run_id=log.run_id,
            library_id=log.library_id,
            agent_role=log.agent_role,
            model_id=log.model_id,
            log_id=log.log_id,
            why="; ".join(log.policy_violations),
        )
