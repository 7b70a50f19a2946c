"""``search_library``: an agent's retrieval from one of its run's libraries, under the library's policy
(:func:`mother.libraries.retrieval.retrieve`: access decision, the guard's ``retrieval_queries``, the
policy's caps, BM25, redaction, audit). A registry tool (its manifest is shipped, it is listed in
``registry:tools`` and counted in ``tool_stats:search_library``) that is run-bound: the executor hands
it the calling phase's :class:`~workers.tools.executor.ToolContext`, so a ``tool_only`` plan cannot run
it. A refusal is a tool error the agent sees (and an audit record, an activity entry and a
``security:violations`` entry); the run's ``libraries.violations_to_end``-th refusal raises a
PolicyViolation, which ends the phase and the run ``policyViolation``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mother.errors import PolicyViolation, ToolError
from mother.libraries.retrieval import RetrievalRefused, retrieve
from mother.records.libraries import count_violations
from workers.tools.executor import ToolContext

__all__ = ["search_library"]


def search_library(
    workspace: Path, inputs: dict[str, Any], *, context: ToolContext
) -> dict[str, Any]:
    state, rt = context.state, context.rt
    library_id = inputs["library_id"]
    if library_id not in state.spec.libraries:
        raise ToolError(
            "library_id must be one of the run's libraries: "
            f"{', '.join(state.spec.libraries) or 'none'}"
        )
    query = inputs["query"]
    if not query.strip():
        raise ToolError("query must not be blank")
    justification = inputs.get("justification") or state.spec.justification
    try:
        got = retrieve(
            rt,
            run_id=state.run_id,
            user_id=state.user_id,
            role=state.spec.pipeline[context.phase_index].role,
            model=context.model,
            library_id=library_id,
            query=query,
            k=inputs.get("k"),
            justification=justification,
            charge=lambda: context.guard.charge("retrieval_queries"),
        )
    except RetrievalRefused as exc:
        count = count_violations(rt.redis, state.run_id, 1)
        limit = rt.settings.libraries.violations_to_end
        if limit and count >= limit:
            raise PolicyViolation(
                f"library access refused {count} times in this run "
                f"(libraries.violations_to_end is {limit}): {exc.message}"
            ) from None
        raise ToolError(f"policyViolation: {exc.message}") from None
    return {
        "library_id": library_id,
        "hits": [
            {
                "chunk_id": h.chunk_id,
                "document_id": h.document_id,
                "score": round(h.score, 4),
                "text": h.text,
            }
            for h in got.hits
        ],
        "redactions_applied": got.redactions,
    }
