"""``search_library``: an agent's retrieval from one of its run's libraries, answered by Mother under the
library's policy (:mod:`mother.asks.library`: access decision, the guard's ``retrieval_queries``, the
policy's caps, BM25, redaction, audit). A registry tool (its manifest is shipped, it is listed in
``registry:tools`` and counted in ``tool_stats:search_library``) that is run-bound: the executor hands
it the calling phase's :class:`~workers.tools.executor.ToolContext`, so a ``tool_only`` plan cannot run
it. A refusal is a tool error the agent sees (Mother records the audit, the activity entry and the
``security:violations`` entry); the run's ``libraries.violations_to_end``-th refusal is a
PolicyViolation, which ends the phase and the run ``policyViolation``. No host reads a library."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mother.errors import AskRefused, PolicyViolation, ToolError
from workers.tools.executor import ToolContext

__all__ = ["search_library"]


def search_library(
    workspace: Path, inputs: dict[str, Any], *, context: ToolContext
) -> dict[str, Any]:
    try:
        reply = context.asks.ask(
            "library",
            {
                "library_id": inputs.get("library_id"),
                "query": inputs.get("query"),
                "k": inputs.get("k"),
                "justification": inputs.get("justification"),
            },
        )
    except AskRefused as exc:
        message = exc.message
        if exc.why == "policy_violation":
            raise PolicyViolation(message) from None
        if exc.why == "retrieval_refused":
            raise ToolError(f"policyViolation: {message}") from None
        raise ToolError(message) from None
    return {
        "library_id": inputs.get("library_id"),
        "hits": reply.get("hits", []),
        "redactions_applied": reply.get("redactions_applied", 0),
    }
