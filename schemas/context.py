"""Context budget ownership records: what a run brings, what an agent receives.

- ``ContextInput``: the optional material a run's spec carries beside its task
  (recent messages, retrieval hits, session summaries, project knowledge).
- ``ContextSummary``: the spec's record of one summarization, at ``context_summary:{summary_id}``.
- ``ComposedSection`` / ``ComposedContext``: what Mother composed for one phase, stored
  for the worker, with a hash the worker re-checks before it runs.
- ``ContextManifest``: the same without the text, kept with the PhaseResult.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, PrivateAttr, StringConstraints

from schemas._base import Id, ModelName, Record, Timestamp
from schemas.tool import ToolCandidate

__all__ = [
    "SECTION_ORDER",
    "ComposedContext",
    "ComposedSection",
    "ContextInput",
    "ContextManifest",
    "ContextSummary",
    "ManifestSection",
    "SectionName",
    "SummaryMethod",
]

SummaryMethod = Literal["extractive", "llm_generated", "hybrid"]

SectionName = Literal[
    "task_definition",
    "current_phase",
    "recent_messages",
    "retrieval_hits",
    "session_summaries",
    "project_knowledge",
    "previous_artifacts",
]

# The spec's ContextCompositionOrder: (section, priority, required).
SECTION_ORDER: tuple[tuple[SectionName, int, bool], ...] = (
    ("task_definition", 100, True),
    ("current_phase", 95, True),
    ("recent_messages", 90, False),
    ("retrieval_hits", 85, False),
    ("session_summaries", 80, False),
    ("project_knowledge", 75, False),
    ("previous_artifacts", 70, False),
)

Chunk = Annotated[str, StringConstraints(min_length=1, max_length=1_000_000)]
ChunkList = Annotated[list[Chunk], Field(max_length=10_000)]


class ContextInput(Record):
    """Material beside the task; every entry is one chunk (a message, a hit, a summary, a document)."""

    goals: ChunkList = Field(
        default_factory=list, description="goals added to the task_definition section"
    )
    recent_messages: ChunkList = Field(
        default_factory=list,
        description="conversation messages, oldest first (the last N are used)",
    )
    retrieval_hits: ChunkList = Field(default_factory=list, description="RAG results, best first")
    session_summaries: ChunkList = Field(
        default_factory=list, description="past session summaries (tier 2 memory)"
    )
    project_knowledge: ChunkList = Field(
        default_factory=list, description="project-specific context"
    )


class ContextSummary(Record):
    """The spec's ContextSummary: one explicit, versioned, hashed summarization."""

    summary_id: Id
    run_id: Id
    created_at: Timestamp
    source_sections: list[str]
    source_token_count: int = Field(ge=0)
    summary_token_count: int = Field(ge=0)
    compression_ratio: float = Field(ge=0)
    summary_text: str
    summarization_method: SummaryMethod
    model_used: str | None = None
    information_preserved: list[str] = Field(default_factory=list)
    information_lost: list[str] = Field(default_factory=list)
    summary_version: str = "summary:v1"
    content_hash: Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]


class ManifestSection(Record):
    """One section as it went into the model call."""

    section: SectionName
    priority: int
    required: bool
    tokens: int = Field(ge=0, description="tokens of the content the agent received")
    source_tokens: int = Field(ge=0, description="tokens before summarization")
    summary_id: Id | None = None


class ComposedSection(ManifestSection):
    content: str


class ContextManifest(Record):
    """What went into a phase's model calls: sections, token counts, summary ids, model."""

    run_id: Id
    phase_index: int = Field(ge=0)
    model: ModelName
    requested_model: ModelName
    escalation_reason: str | None = None
    counter: str = Field(
        description="how tokens were counted: tokenizer:PATH, estimate, or estimate(calibrated xR)"
    )
    available_for_context: int = Field(ge=0)
    total_tokens: int = Field(ge=0)
    sections: list[ManifestSection]
    summary_ids: list[Id] = Field(default_factory=list)
    content_hash: Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]
    composed_at: Timestamp
    tool_plan: list[ToolCandidate] = Field(
        default_factory=list,
        description="registry tools Mother's router found for the phase's task, tried in order before "
        "the model (a tool_only plan); empty: the phase goes to the model",
    )
    retrieval_ambiguity: Annotated[str, StringConstraints(max_length=2000)] | None = Field(
        None,
        description="why the phase's retrieval hits contradict each other (the phase then reports "
        "the finding ambiguity, and Mother raises the retrieval_ambiguity conflict)",
    )


class ComposedContext(ContextManifest):
    """``context:{run_id}:{phase_index}``: the manifest plus the text of every section."""

    sections: list[ComposedSection]  # type: ignore[assignment]
    _manifest: ContextManifest | None = PrivateAttr(default=None)

    def manifest(self) -> ContextManifest:
        """The context without its texts (made once: a worker makes it before forking, see workers.phase.prefetch)."""
        if self._manifest is None:
            data = self.model_dump(mode="json")
            for section in data["sections"]:
                section.pop("content")
            self._manifest = ContextManifest.model_validate(data)
        return self._manifest
