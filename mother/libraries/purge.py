"""Taking documents out of a library for good (PII that must go): ``mother library remove-document``
and ``mother library remove``. A document's chunks (which the search index drops with them) and its
entry in the library's record go in one transaction, with a ``library_document_removed`` activity
entry naming who and why; a library's policy, record and listing go after its documents. The access
logs stay: they are the audit trail, and expire by the policy's retention."""

from __future__ import annotations

from typing import Any

from mother import keys
from mother.errors import NotFound
from mother.records.libraries import read_library
from mother.runtime import Runtime

__all__ = ["remove_document", "remove_library"]


def _chunks_of(client: Any, library_id: str, document_id: str, known: int) -> list[str]:
    """The document's chunk keys: those its record counts, and any others under its prefix (an
    ingest cut short)."""
    found = {keys.chunk_key(library_id, document_id, i) for i in range(known)}
    prefix = keys.chunk_key(library_id, document_id, 0).rsplit(":", 1)[0]
    found.update(client.scan_iter(match=f"{prefix}:*", count=1000))
    return sorted(k.decode() if isinstance(k, bytes) else k for k in found)


def remove_document(
    rt: Runtime, library_id: str, document_id: str, *, actor: str, reason: str
) -> int:
    """Delete one document and its chunks; the number of chunks removed."""
    library = read_library(rt.redis, library_id)
    entry = (library.get("documents") or {}).get(document_id)
    if entry is None:
        raise NotFound(
            f"library {library_id} has no document {document_id!r}; `mother library show "
            f"{library_id}` lists its documents"
        )
    chunks = _chunks_of(rt.redis, library_id, document_id, int(entry.get("chunks", 0)))
    pipe = rt.redis.pipeline(transaction=True)
    if chunks:
        pipe.delete(*chunks)
    pipe.execute_command("JSON.DEL", keys.library_key(library_id), f'$.documents["{document_id}"]')
    pipe.execute_command(
        "JSON.NUMINCRBY",
        keys.library_key(library_id),
        "$.chunk_count",
        -int(entry.get("chunks", 0)),
    )
    rt.emit(
        pipe,
        "library_document_removed",
        library_id=library_id,
        document_id=document_id,
        source=entry.get("source"),
        chunks=len(chunks),
        actor=actor[:128],
        reason=reason[:1000],
    )
    pipe.execute()
    return len(chunks)


def remove_library(rt: Runtime, library_id: str, *, actor: str, reason: str) -> int:
    """Delete a library: every document and chunk, its policy, record and listing; the chunks removed."""
    keys.check_id(library_id, "library_id")
    if not rt.redis.exists(keys.library_key(library_id), keys.library_policy_key(library_id)):
        raise NotFound(f"no library {library_id!r}; `mother library list` lists them")
    removed = 0
    if rt.redis.exists(keys.library_key(library_id)):
        for document_id in list(read_library(rt.redis, library_id).get("documents") or {}):
            removed += remove_document(
                rt, library_id, document_id, actor=actor, reason=f"library removed: {reason}"
            )
    pipe = rt.redis.pipeline(transaction=True)
    pipe.delete(keys.library_key(library_id), keys.library_policy_key(library_id))
    pipe.srem(keys.LIBRARIES_INDEX, library_id)
    rt.emit(
        pipe,
        "library_removed",
        library_id=library_id,
        chunks=removed,
        actor=actor[:128],
        reason=reason[:1000],
    )
    pipe.execute()
    return removed
