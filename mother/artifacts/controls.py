"""People's controls of artifacts (seed 003 §6, User Controls): list a run's, show one, star, unstar,
protect, unprotect, delete early, restore from the archive; and the GC's reports. Each change is one
server call (``mh_artifact_control``, ``mh_artifact_restore``) that checks and applies it."""

from __future__ import annotations

import gzip
import hashlib
from typing import Any

import orjson
from redis.client import NEVER_DECODE

from mother import keys
from mother.config import Settings
from mother.errors import InvalidSpec, NotFound
from mother.records.artifacts import artifact_control, read_artifact_meta, read_meta, restore
from schemas.artifact import ArtifactMetadata, GCReport

__all__ = [
    "OPS",
    "PROTECT_REASONS",
    "control",
    "list_for_run",
    "reports",
    "restore_artifact",
    "show",
    "workspace_of",
]

OPS = ("star", "unstar", "protect", "unprotect", "delete")
# protect --reason -> the exception that must be on for it to keep an artifact
PROTECT_REASONS = {
    "approved": "approved_artifacts",
    "golden_task": "golden_tasks",
    "compliance": "compliance_required",
}


def list_for_run(client: Any, run_id: str) -> list[dict[str, Any]]:
    """The run's artifacts' metadata (those its record lists: its accepted phase outputs)."""
    raw = client.execute_command("JSON.GET", keys.run_key(run_id), "$.artifacts")
    if raw is None:
        raise NotFound(f"no run {run_id!r} (or its records passed their retention)")
    found = orjson.loads(raw)
    return read_artifact_meta(client, list(found[0]) if found else [])


def workspace_of(client: Any, artifact_id: str) -> str:
    """The run whose stored workspace the artifact ``artifact_id`` is (kind ``workspace``, made at the run's
    end), to write out; NotFound for another kind or one whose contents are gone."""
    meta = read_meta(client, artifact_id)
    if meta.kind != "workspace" or keys.workspace_artifact_id(meta.run_id) != artifact_id:
        raise NotFound(
            f"artifact {artifact_id} is a {meta.kind} artifact, not a run's workspace: "
            "`mother artifacts show` prints its content"
        )
    if not client.exists(keys.workspace_key(meta.run_id)):
        raise NotFound(f"the stored workspace of run {meta.run_id} is gone (deleted by the GC)")
    return meta.run_id


def show(client: Any, artifact_id: str, preview_chars: int = 2000) -> dict[str, Any]:
    """The metadata, a preview of the content (or the archive's size) and where it lives."""
    meta = read_meta(client, artifact_id)
    out: dict[str, Any] = {"metadata": meta.model_dump(mode="json")}
    raw = client.execute_command("JSON.GET", keys.artifact_key(artifact_id), "$.content")
    if raw is not None:
        content = orjson.loads(raw)[0]
        out["content_preview"] = content[:preview_chars]
        out["content_chars"] = len(content)
    archived = client.strlen(keys.archive_artifact_key(artifact_id))
    if archived:
        out["archive_bytes"] = archived
    return out


def control(
    client: Any,
    settings: Settings,
    op: str,
    artifact_id: str,
    *,
    actor: str,
    now_ms: int,
    reason: str = "",
) -> dict[str, Any] | None:
    """Apply ``op`` to the artifact; the metadata after it (None after delete)."""
    if op not in OPS:
        raise InvalidSpec(f"unknown artifact op {op!r}; one of {', '.join(OPS)}")
    keys.check_id(actor, "actor")
    if op == "protect":
        exception = PROTECT_REASONS.get(reason)
        if exception is None:
            raise InvalidSpec(
                f"protect needs --reason {'|'.join(PROTECT_REASONS)} (user_starred: use star)"
            )
        if not getattr(settings.retention.exceptions, exception):
            raise InvalidSpec(
                f"retention.exceptions.{exception} is off: {reason} artifacts are not kept forever here"
            )
    meta = read_meta(client, artifact_id)
    try:
        after = artifact_control(
            client,
            op,
            artifact_id,
            run_id=meta.run_id,
            now_ms=now_ms,
            actor=actor,
            reason=reason,
            star_protects=settings.retention.exceptions.user_starred,
            maxlen=settings.service.activity_maxlen,
        )
    except Exception as exc:
        text = str(exc)
        if "is protected" in text or "no artifact" in text:
            raise InvalidSpec(text.removeprefix("ERR ").strip()) from None
        raise
    # every field, a record written without some (a workspace artifact made before they were set)
    # read with its defaults
    return None if after is None else ArtifactMetadata.model_validate(after).to_dict()


def restore_artifact(
    client: Any, settings: Settings, artifact_id: str, *, actor: str, now_ms: int
) -> dict[str, Any]:
    """Put an archived artifact back, byte for byte, from ``archive:artifact:{id}``."""
    keys.check_id(actor, "actor")
    meta = read_meta(client, artifact_id)
    blob = client.execute_command(
        "GET", keys.archive_artifact_key(artifact_id), **{NEVER_DECODE: True}
    )
    if meta.status != "archived" or blob is None:
        raise InvalidSpec(f"artifact {artifact_id} is not archived (status {meta.status})")
    data = gzip.decompress(blob) if blob[:2] == b"\x1f\x8b" else blob
    try:
        orjson.loads(data)
    except orjson.JSONDecodeError:
        raise InvalidSpec(f"the archive of {artifact_id} is not a JSON document") from None
    try:
        restored = restore(
            client,
            artifact_id,
            data.decode(),
            hashlib.sha1(blob).hexdigest(),
            run_id=meta.run_id,
            now_ms=now_ms,
            actor=actor,
            maxlen=settings.service.activity_maxlen,
        )
    except Exception as exc:
        if "not archived" in str(exc) or "changed while" in str(exc):
            raise InvalidSpec(str(exc).removeprefix("ERR ").strip()) from None
        raise
    return ArtifactMetadata.model_validate(restored).to_dict()


def reports(client: Any, limit: int = 10) -> list[GCReport]:
    """The newest GC reports, newest first."""
    names = client.zrevrange(keys.GC_REPORTS, 0, limit - 1)
    if not names:
        return []
    raws = client.execute_command("JSON.MGET", *names, "$")
    return [GCReport.model_validate(orjson.loads(r)[0]) for r in raws if r]
