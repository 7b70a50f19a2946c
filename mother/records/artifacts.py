"""``artifact:{artifact_id}`` and ``artifact_meta:{artifact_id}``: what a phase produced, and what it is."""

from __future__ import annotations

from typing import Any

import orjson

from mother import keys
from schemas.artifact import Artifact, ArtifactMeta

__all__ = ["read_artifact_meta", "store_artifact"]


def store_artifact(
    pipe: Any, artifact: Artifact, created_at: str, content_type: str = "text/plain"
) -> None:
    """Queue the artifact and its metadata on ``pipe`` (a phase's last write)."""
    meta = ArtifactMeta(
        artifact_id=artifact.artifact_id,
        run_id=artifact.run_id,
        phase=artifact.phase,
        kind=artifact.kind,
        created_at=created_at,
        size_bytes=len(artifact.content.encode()),
        content_type=content_type,
    )
    pipe.execute_command(
        "JSON.SET", keys.artifact_key(artifact.artifact_id), "$", artifact.to_json()
    )
    pipe.execute_command(
        "JSON.SET", keys.artifact_meta_key(artifact.artifact_id), "$", meta.to_json()
    )


def read_artifact_meta(client: Any, artifact_ids: list[str]) -> list[dict[str, Any]]:
    """Each artifact's metadata as stored (one round trip); a missing one as ``{artifact_id, missing: true}``."""
    pipe = client.pipeline(transaction=False)
    for artifact_id in artifact_ids:
        pipe.execute_command("JSON.GET", keys.artifact_meta_key(artifact_id))
    found = pipe.execute() if artifact_ids else []
    return [
        orjson.loads(raw) if raw else {"artifact_id": artifact_id, "missing": True}
        for artifact_id, raw in zip(artifact_ids, found, strict=True)
    ]
