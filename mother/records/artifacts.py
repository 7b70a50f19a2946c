"""``artifact:{artifact_id}``, ``artifact_meta:{artifact_id}`` (the spec's ArtifactMetadata) and
``archive:artifact:{id}``: what a phase produced, its lifecycle, its compressed archive; and the
indexes the GC reads (``artifacts:expiry``, ``artifacts:archive_due``, ``retention:runs``). The server
functions in ``mother/lua/gc.lua`` change an artifact's lifecycle; everything the Python side reads or
writes is here."""

from __future__ import annotations

from typing import Any

import orjson

from mother import keys
from mother.errors import NotFound
from mother.functions import call
from schemas.artifact import Artifact, ArtifactMetadata

__all__ = [
    "artifact_control",
    "due",
    "queue_retain",
    "read_artifact_meta",
    "read_meta",
    "restore",
    "store_artifact",
]


def store_artifact(
    pipe: Any,
    artifact: Artifact,
    created_at: str,
    content_type: str = "text/plain",
    *,
    expires_ms: int | None = None,
    expires_at: str | None = None,
) -> None:
    """Queue the artifact, its metadata and (with ``expires_ms``) its place in the expiry index on
    ``pipe`` (a phase's last write): an artifact expires by the default retention until its run's end
    moves it to its class, so one whose run never ends still goes."""
    meta = ArtifactMetadata(
        artifact_id=artifact.artifact_id,
        run_id=artifact.run_id,
        phase=artifact.phase,
        kind=artifact.kind,
        created_at=created_at,
        size_bytes=len(artifact.content.encode()),
        content_type=content_type,
        expires_at=expires_at,
    )
    pipe.execute_command(
        "JSON.SET", keys.artifact_key(artifact.artifact_id), "$", artifact.to_json()
    )
    pipe.execute_command(
        "JSON.SET", keys.artifact_meta_key(artifact.artifact_id), "$", meta.to_json()
    )
    if expires_ms is not None:
        pipe.zadd(keys.ARTIFACT_EXPIRY, {artifact.artifact_id: expires_ms})


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


def read_meta(client: Any, artifact_id: str) -> ArtifactMetadata:
    raw = client.execute_command("JSON.GET", keys.artifact_meta_key(artifact_id))
    if raw is None:
        raise NotFound(f"no artifact {artifact_id!r}: `mother artifacts list RUN` lists a run's")
    return ArtifactMetadata.model_validate_json(raw)


def queue_retain(
    pipe: Any,
    run_id: str,
    artifact_ids: list[str],
    *,
    retention_class: str,
    expires_ms: int,
    archive_ms: int | None,
    records_ms: int,
) -> None:
    """Queue ``mh_retain``: the ended run's stored workspace made an artifact (once), its artifacts to
    their class, its records on ``retention:runs``."""
    workspace = keys.workspace_artifact_id(run_id)
    call(
        pipe,
        "mh_retain",
        [
            keys.ARTIFACT_EXPIRY,
            keys.ARTIFACT_ARCHIVE_DUE,
            keys.RUN_RETENTION,
            keys.workspace_key(run_id),
            keys.artifact_key(workspace),
            keys.artifact_meta_key(workspace),
            keys.run_key(run_id),
            *(keys.artifact_meta_key(a) for a in artifact_ids if a != workspace),
        ],
        [
            run_id,
            retention_class,
            expires_ms,
            "" if archive_ms is None else archive_ms,
            records_ms,
            workspace,
            *(a for a in artifact_ids if a != workspace),
        ],
    )


def artifact_keys(artifact_id: str) -> list[str]:
    return [
        keys.artifact_meta_key(artifact_id),
        keys.artifact_key(artifact_id),
        keys.archive_artifact_key(artifact_id),
    ]


def artifact_control(
    client: Any,
    op: str,
    artifact_id: str,
    *,
    run_id: str,
    now_ms: int,
    actor: str,
    reason: str = "",
    star_protects: bool,
    maxlen: int,
) -> dict[str, Any] | None:
    """A person's control of one artifact (star, unstar, protect, unprotect, delete), in one server call;
    the metadata after it (None after delete)."""
    raw = call(
        client,
        "mh_artifact_control",
        [
            *artifact_keys(artifact_id),
            keys.ARTIFACT_EXPIRY,
            keys.ARTIFACT_ARCHIVE_DUE,
            keys.ACTIVITY_STREAM,
            keys.run_activity_key(run_id),
        ],
        [op, artifact_id, now_ms, actor, reason, "1" if star_protects else "0", maxlen],
    )
    return orjson.loads(raw) if raw else None


def restore(
    client: Any,
    artifact_id: str,
    content: str,
    archive_sha1: str,
    *,
    run_id: str,
    now_ms: int,
    actor: str,
    maxlen: int,
) -> dict[str, Any]:
    raw = call(
        client,
        "mh_artifact_restore",
        [*artifact_keys(artifact_id), keys.ACTIVITY_STREAM, keys.run_activity_key(run_id)],
        [artifact_id, content, now_ms, actor, maxlen, archive_sha1],
    )
    return dict(orjson.loads(raw))


def due(client: Any, index: str, now_ms: int, count: int, start: int = 0) -> list[str]:
    """Up to ``count`` members of ``index`` due at ``now_ms`` (lowest score first), past the first
    ``start`` of them."""
    return [
        m.decode() if isinstance(m, bytes) else m
        for m in client.zrangebyscore(index, "-inf", now_ms, start=start, num=count)
    ]
