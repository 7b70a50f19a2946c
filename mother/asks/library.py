"""``library``: a phase's ``search_library``, answered by Mother. The library's chunks and their index are
Mother's to read: a host gets only the redacted hits its attempt's policy allows. What the query is checked
against is Mother's own knowledge of the attempt, never the host's word: the run's libraries and
justification, the phase's role, and the model its context was composed for."""

from __future__ import annotations

import orjson

from mother import keys
from mother.asks.answer import Answer
from mother.asks.attempts import guard_of
from mother.asks.wire import Ask, refused
from mother.errors import InvalidSpec, PolicyViolation
from mother.libraries.retrieval import RetrievalRefused, retrieve
from mother.records import runs
from mother.records.libraries import count_violations
from mother.runtime import Runtime

__all__ = ["library"]


def library(rt: Runtime, ask: Ask) -> Answer:
    """The hits of ``query`` in one of the run's libraries (``library_id``, ``query``, ``k``,
    ``justification``), or the refusal: ``retrieval_refused`` (a tool error the agent sees), or
    ``policy_violation`` past ``libraries.violations_to_end`` refusals (the phase and run end)."""
    run_id, index, _attempt = ask.attempt  # type: ignore[misc]
    state = rt.load_run(run_id)
    if state is None:
        return Answer(refused("not_held", f"run {run_id} has no record"))
    view = runs.attempt_view(state)
    library_id, query = ask.body.get("library_id"), ask.body.get("query")
    if not isinstance(library_id, str) or library_id not in view.spec.libraries:
        raise InvalidSpec(
            "library_id must be one of the run's libraries: "
            f"{', '.join(view.spec.libraries) or 'none'}"
        )
    if not isinstance(query, str) or not query.strip() or len(query) > 4000:
        raise InvalidSpec("query must be text of 1 to 4000 characters")
    k = ask.body.get("k")
    if k is not None and (not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= 100):
        raise InvalidSpec("k must be a whole number from 1 to 100")
    justification = ask.body.get("justification")
    if not isinstance(justification, str) or not justification.strip():
        justification = view.spec.justification
    raw_model = rt.redis.execute_command("JSON.GET", keys.context_key(run_id, index), "$.model")
    models = orjson.loads(raw_model) if raw_model else []
    model = models[0] if models and isinstance(models[0], str) else view.spec.pipeline[index].model
    guard = guard_of(rt, ask, state.user_id)
    try:
        got = retrieve(
            rt,
            run_id=run_id,
            user_id=state.user_id,
            role=view.spec.pipeline[index].role,
            model=model,
            library_id=library_id,
            query=query,
            k=k,
            justification=justification,
            charge=lambda: guard.charge("retrieval_queries"),
        )
    except RetrievalRefused as exc:
        count = count_violations(rt.redis, run_id, 1)
        limit = rt.settings.libraries.violations_to_end
        if limit and count >= limit:
            raise PolicyViolation(
                f"library access refused {count} times in this run "
                f"(libraries.violations_to_end is {limit}): {exc.message}"
            ) from None
        return Answer(refused("retrieval_refused", exc.message))
    hits = [
        {
            "chunk_id": h.chunk_id,
            "document_id": h.document_id,
            "score": round(h.score, 4),
            "text": h.text,
        }
        for h in got.hits
    ]
    return Answer({"ok": True, "hits": hits, "redactions_applied": got.redactions})
