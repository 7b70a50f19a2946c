"""Artifacts: what a phase produced (``artifact:{id}``) and its lifecycle metadata (``artifact_meta:{id}``)."""

from __future__ import annotations

from typing import Annotated

from pydantic import StringConstraints

from schemas._base import Id, Record, Timestamp
from schemas.results import MAX_OUTPUT_CHARS

__all__ = ["Artifact", "ArtifactMeta"]


class Artifact(Record):
    """``artifact:{artifact_id}``: the content."""

    artifact_id: Id
    run_id: Id
    phase: str
    attempt: int
    kind: str
    content: Annotated[str, StringConstraints(max_length=MAX_OUTPUT_CHARS)]


class ArtifactMeta(Record):
    """``artifact_meta:{artifact_id}``: what it is, for whom, how big (the lifecycle fields come with the GC)."""

    artifact_id: Id
    run_id: Id
    phase: str
    kind: str
    created_at: Timestamp
    size_bytes: int
    content_type: str = "text/plain"
