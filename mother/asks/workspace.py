"""A run's workspace between its phases' hosts: ``workspace`` (its manifest), ``blobs`` (contents by their
SHA-256) and ``store`` (contents, the names of contents put in the object store, the new manifest), each
for the run of an attempt the host holds. Mother writes the run's keys (``workspace:{run}``,
``workspace_blob:{run}:{sha256}``, ``workspace_blobs:{run}``); no host reads or writes them. A content is
checked by the host that restores it (its hash), not here."""

from __future__ import annotations

import base64
import binascii
import re
from typing import Any

import orjson
from redis.client import NEVER_DECODE

from mother import keys
from mother.asks.answer import Answer
from mother.asks.wire import Ask
from mother.errors import InvalidSpec
from mother.runtime import Runtime

__all__ = ["blobs", "store", "workspace"]

_SHA = re.compile(r"[0-9a-f]{64}")
# contents in one reply at most (a host asks for the rest in its next ask)
REPLY_BYTES = 16 * 2**20


def _shas(value: Any, most: int = 10_000) -> list[str]:
    if (
        not isinstance(value, list)
        or len(value) > most
        or not all(isinstance(s, str) and _SHA.fullmatch(s) for s in value)
    ):
        raise InvalidSpec(f"shas must be a list of at most {most} SHA-256 digests in hex")
    return value


def workspace(rt: Runtime, ask: Ask) -> Answer:
    """The run's workspace manifest as its last phase left it (None: none was stored)."""
    raw = rt.redis.get(keys.workspace_key(ask.run_id))
    return Answer({"ok": True, "manifest": orjson.Fragment(raw) if raw else None}, held=True)


def blobs(rt: Runtime, ask: Ask) -> Answer:
    """Contents of the run's workspace (compressed, base64), up to ``REPLY_BYTES``: ``more`` lists the
    ones left for the next ask."""
    shas = _shas(ask.body.get("shas"), 1000)
    found: list[bytes | None] = (
        rt.redis.execute_command(
            "MGET", *(keys.workspace_blob_key(ask.run_id, s) for s in shas), **{NEVER_DECODE: True}
        )
        if shas
        else []
    )
    out: dict[str, str | None] = {}
    size = 0
    for at, (sha, blob) in enumerate(zip(shas, found, strict=True)):
        if blob is not None and out and size + len(blob) > REPLY_BYTES:
            return Answer({"ok": True, "blobs": out, "more": shas[at:]}, held=True)
        out[sha] = base64.b64encode(blob).decode() if blob is not None else None
        size += len(blob or b"")
    return Answer({"ok": True, "blobs": out, "more": []}, held=True)


def store(rt: Runtime, ask: Ask) -> Answer:
    """Contents (``blobs``: SHA-256 -> compressed, base64; ``listed``: ones the host put in the object
    store), then the manifest (``manifest``, last: a reader sees the old one or all of the new one)."""
    run_id = ask.run_id
    given = ask.body.get("blobs") or {}
    if not isinstance(given, dict):
        raise InvalidSpec("blobs must map SHA-256 digests to base64 contents")
    _shas(list(given))
    try:
        packed = {sha: base64.b64decode(text, validate=True) for sha, text in given.items()}
    except (binascii.Error, TypeError, ValueError):
        raise InvalidSpec("a content is not base64") from None
    listed = _shas(ask.body.get("listed") or [])
    manifest = ask.body.get("manifest")
    if manifest is not None and (
        not isinstance(manifest, dict)
        or not isinstance(manifest.get("files"), dict)
        or manifest.get("run_id") != run_id
    ):
        raise InvalidSpec("manifest must be this run's workspace manifest (files, run_id)")

    def writes(pipe: Any) -> None:
        for sha, content in packed.items():
            pipe.set(keys.workspace_blob_key(run_id, sha), content, nx=True)
        if packed or listed:
            pipe.sadd(keys.workspace_blobs_key(run_id), *packed, *listed)
        if manifest is not None:
            pipe.set(keys.workspace_key(run_id), orjson.dumps(manifest))

    return Answer({"ok": True}, writes, held=True)
