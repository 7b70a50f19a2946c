"""``search_library``: an agent's retrieval from one of its run's libraries, under the library's policy
(:func:`mother.libraries.retrieval.retrieve`: access decision, the guard's ``retrieval_queries``, the
policy's caps, BM25, redaction, audit). It runs in the phase's own process (it needs the run's guard),
beside ``spawn_run``. A refusal is a tool error the agent sees (and an audit record, an activity entry
and a ``security:violations`` entry); the run's ``libraries.violations_to_end``-th refusal ends the
phase with a PolicyViolation, which ends the run ``policyViolation``."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import orjson

from mother.budget import Guard
from mother.errors import PolicyViolation, ToolError
from mother.libraries.retrieval import RetrievalRefused, retrieve
from mother.records.libraries import count_violations
from mother.runtime import Runtime
from schemas import RunState

__all__ = ["SearchLibrary"]


class SearchLibrary:
    name = "search_library"
    description = (
        "Search one of the run's libraries (BM25 over its documents); returns the best chunks, "
        "redacted by the library's policy. Arguments: library_id, query, k (optional), "
        "justification (when the library requires one)."
    )
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "library_id": {"type": "string"},
            "query": {"type": "string"},
            "k": {"type": "integer", "minimum": 1},
            "justification": {"type": "string"},
        },
        "required": ["library_id", "query"],
    }
    read_only = True

    def __init__(
        self, rt: Runtime, state: RunState, phase_index: int, model: str, guard: Guard
    ) -> None:
        self.rt, self.state, self.guard, self.model = rt, state, guard, model
        self.phase = state.spec.pipeline[phase_index]

    def run(self, workspace: Path, arguments: dict[str, Any]) -> str:
        library_id = arguments.get("library_id")
        query = arguments.get("query")
        if not isinstance(library_id, str) or library_id not in self.state.spec.libraries:
            raise ToolError(
                f"library_id must be one of the run's libraries: {', '.join(self.state.spec.libraries) or 'none'}"
            )
        if not isinstance(query, str) or not query.strip():
            raise ToolError("query must be a non-empty string")
        k = arguments.get("k")
        justification = arguments.get("justification") or self.state.spec.justification
        try:
            got = retrieve(
                self.rt,
                run_id=self.state.run_id,
                user_id=self.state.user_id,
                role=self.phase.role,
                model=self.model,
                library_id=library_id,
                query=query,
                k=k if isinstance(k, int) and k > 0 else None,
                justification=justification if isinstance(justification, str) else None,
                charge=lambda: self.guard.charge("retrieval_queries"),
            )
        except RetrievalRefused as exc:
            count = count_violations(self.rt.redis, self.state.run_id, 1)
            limit = self.rt.settings.libraries.violations_to_end
            if limit and count >= limit:
                raise PolicyViolation(
                    f"library access refused {count} times in this run "
                    f"(libraries.violations_to_end is {limit}): {exc.message}"
                ) from None
            raise ToolError(f"policyViolation: {exc.message}") from None
        return orjson.dumps(
            {
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
        ).decode()
