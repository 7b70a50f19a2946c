"""Artifacts: what a phase produced (``artifact:{id}``), its lifecycle metadata (``artifact_meta:{id}``,
the spec's ArtifactMetadata) and the garbage collector's report (``gc_report:{timestamp}``)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, StringConstraints

from schemas._base import Id, Record, ShortText, Timestamp
from schemas.results import MAX_OUTPUT_CHARS

__all__ = [
    "PROTECTION_REASONS",
    "RETENTION_CLASSES",
    "Artifact",
    "ArtifactMetadata",
    "ArtifactStatus",
    "GCError",
    "GCReport",
    "ProtectionReason",
    "RetentionClass",
]

ArtifactStatus = Literal["active", "archived", "scheduled_deletion"]
ProtectionReason = Literal["approved", "golden_task", "user_starred", "compliance"]
PROTECTION_REASONS: tuple[str, ...] = ("approved", "golden_task", "user_starred", "compliance")
# the retention policy's run statuses (each termination reason maps to one: mother.artifacts.policy)
RetentionClass = Literal["success", "failed", "cancelled", "blocked", "default"]
RETENTION_CLASSES: tuple[str, ...] = ("success", "failed", "cancelled", "blocked", "default")


class Artifact(Record):
    """``artifact:{artifact_id}``: the content."""

    artifact_id: Id
    run_id: Id
    phase: str
    attempt: int
    kind: str
    content: Annotated[str, StringConstraints(max_length=MAX_OUTPUT_CHARS)]


class ArtifactMetadata(Record):
    """``artifact_meta:{artifact_id}``: what it is, and its lifecycle (every field of the spec's
    ArtifactMetadata, and what the GC and the CLI need besides)."""

    artifact_id: Id
    run_id: Id
    phase: str
    kind: str
    created_at: Timestamp
    size_bytes: int
    content_type: str = "text/plain"
    # lifecycle
    status: ArtifactStatus = "active"
    expires_at: Timestamp | None = Field(
        None, description="when the GC deletes it (None: kept, it is protected)"
    )
    archived_at: Timestamp | None = None
    archive_due_at: Timestamp | None = Field(
        None, description="when the GC archives it (compressed, the active copy removed)"
    )
    retention_class: RetentionClass = Field(
        "default", description="the policy's class: its run's final status (default while it runs)"
    )
    # protection and user controls
    protected: bool = False
    protection_reason: ProtectionReason | None = None
    user_starred: bool = False
    user_notes: ShortText | None = None
    deletion_notified_at: Timestamp | None = Field(
        None, description="when a starred artifact's owner was told it will be deleted"
    )


class GCError(Record):
    artifact_id: str
    error: ShortText


class GCReport(Record):
    """``gc_report:{timestamp}``: what one GC did (the spec's GCScanReport, with its time and bytes)."""

    started_at: Timestamp
    finished_at: Timestamp
    now: Timestamp = Field(description="the time the GC collected as of (the server's, or given)")
    dry_run: bool = False
    scanned_count: int = Field(0, ge=0, description="index entries the GC read (what was due)")
    scheduled_deletion: int = Field(0, ge=0, description="artifacts deleted")
    archived: int = Field(0, ge=0)
    protected: int = Field(0, ge=0, description="due but protected: skipped, taken off the index")
    deferred: int = Field(
        0, ge=0, description="starred artifacts whose owner was notified (deleted 7 days later)"
    )
    runs_removed: int = Field(0, ge=0, description="ended runs whose records were removed")
    runs_kept: int = Field(0, ge=0, description="runs kept for a starred or protected artifact")
    workspaces_removed: int = Field(
        0, ge=0, description="removed runs' workspace directories deleted on the GC's host"
    )
    status: Literal["running", "completed", "interrupted"] = Field(
        "completed",
        description="running: written after each batch; interrupted: a GC killed half way, so "
        "marked by the next GC once its lease lapsed (its counts are what it had done)",
    )
    updated_at: Timestamp | None = Field(None, description="when the report was last written")
    keys_removed: int = Field(0, ge=0)
    access_logs_pruned: int = Field(
        0, ge=0, description="access-log timeline entries past their library's retention_days"
    )
    bytes_freed: int = Field(0, ge=0, description="MEMORY USAGE of what was removed or archived")
    batches: int = Field(0, ge=0)
    duration_ms: int = Field(0, ge=0)
    errors: list[GCError] = Field(default_factory=list)
