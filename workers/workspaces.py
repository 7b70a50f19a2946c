"""A run's workspace travels with the run (issue 54): the next phase may run on another host.

When a phase that used its workspace ends, :func:`store` puts the workspace where every host reaches it:
each file's content once per run, compressed, under its SHA-256 (``workspace_blob:{run}:{sha256}``, the
run's set of them ``workspace_blobs:{run}``), and the workspace's manifest last (``workspace:{run}``:
path -> sha256, size, mode, mtime), so a reader sees the old manifest or the whole new one. A file
unchanged since the manifest it started from (same size and mtime) is not hashed again, and content the
run stored already is not sent again. The first time a phase's tools need the workspace,
:func:`restore` makes its directory equal to the manifest: files another host changed are fetched and
checked against their hash, files the manifest does not have are removed, files already right stay.

The keys are the run's: only the run's current attempt writes them (its ACL user), and the GC deletes
them with the run's records. The restorer trusts nothing it reads: a path that would leave the workspace
or content that does not match its hash stops the phase (``workspace_corrupt``). With
``worker.workspace_store: shared`` (a filesystem every worker host mounts) nothing is copied.
"""

from __future__ import annotations

import hashlib
import os
import stat
import time
import zlib
from dataclasses import asdict, dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import orjson
from redis.client import NEVER_DECODE

from mother import keys
from mother.errors import WorkspaceCorrupt, WorkspaceTooLarge
from mother.logs import get_logger

__all__ = ["Moved", "manifest", "restore", "store"]

log = get_logger(__name__)
# content sent or fetched per round trip (a pipeline of blobs up to about this many bytes)
BATCH_BYTES = 8 * 1024 * 1024
# zlib's fastest level: the workspace is mostly source text, where it still gets 3-4x
LEVEL = 1


@dataclass
class Moved:
    """What one store or restore did: files in the workspace, their bytes, the files and compressed
    bytes that crossed the network, files removed, and how long it took."""

    files: int = 0
    bytes: int = 0
    sent_files: int = 0
    sent_bytes: int = 0
    removed: int = 0
    ms: float = 0.0

    def fields(self) -> dict[str, Any]:
        """What a log line says of it."""
        return {**asdict(self), "ms": round(self.ms, 1)}


def manifest(client: Any, run_id: str) -> dict[str, dict[str, Any]] | None:
    """The run's workspace as last stored (path -> its entry), or None when no phase stored one."""
    raw = client.get(keys.workspace_key(run_id))
    if raw is None:
        return None
    doc = orjson.loads(raw)
    files = doc.get("files") if isinstance(doc, dict) else None
    if not isinstance(files, dict):
        raise WorkspaceCorrupt(f"the workspace manifest of run {run_id} is not one (no files)")
    return files


def _walk(root: Path) -> dict[str, os.stat_result]:
    """Every regular file under ``root`` (its path relative to it, POSIX style) and its stat; symlinks
    are not followed and not kept (a link could point anywhere on another host)."""
    found: dict[str, os.stat_result] = {}
    for folder, dirs, files in os.walk(root):
        base = Path(folder)
        dirs[:] = [d for d in dirs if not (base / d).is_symlink()]
        for name in files:
            path = base / name
            st = path.lstat()
            if stat.S_ISREG(st.st_mode):
                found[path.relative_to(root).as_posix()] = st
            else:
                log.info("workspace_entry_not_kept", path=str(path), why="not a regular file")
    return found


def _sha256(path: Path) -> str:
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def store(client: Any, run_id: str, root: Path, *, cap_bytes: int) -> Moved:
    """Put the workspace at ``root`` where every host reaches it (see the module); raises
    WorkspaceTooLarge (nothing written) when it holds more than ``cap_bytes``."""
    started = time.monotonic()
    base = manifest(client, run_id) or {}
    found = _walk(root)
    total = sum(st.st_size for st in found.values())
    if total > cap_bytes:
        raise WorkspaceTooLarge(
            f"the workspace of run {run_id} holds {total / 2**20:.1f} MB, over its cap of "
            f"{cap_bytes / 2**20:.1f} MB (worker.workspace_max_mb): raise it, or have the phase "
            "leave less behind"
        )
    files: dict[str, dict[str, Any]] = {}
    for rel, st in sorted(found.items()):
        before = base.get(rel)
        same = (
            isinstance(before, dict)
            and before.get("size") == st.st_size
            and before.get("mtime_ns") == st.st_mtime_ns
        )
        files[rel] = {
            "sha256": before["sha256"] if same and before else _sha256(root / rel),
            "size": st.st_size,
            "mode": stat.S_IMODE(st.st_mode),
            "mtime_ns": st.st_mtime_ns,
        }
    moved = Moved(files=len(files), bytes=total)
    if files == base:
        moved.ms = (time.monotonic() - started) * 1000
        return moved
    stored = {e["sha256"] for e in base.values() if isinstance(e, dict)}
    wanted: dict[str, str] = {}
    for rel, entry in files.items():
        if entry["sha256"] not in stored:
            wanted.setdefault(entry["sha256"], rel)
    blobs = keys.workspace_blobs_key(run_id)
    pipe, pending = client.pipeline(transaction=False), 0
    for sha, rel in wanted.items():
        packed = zlib.compress((root / rel).read_bytes(), LEVEL)
        pipe.set(keys.workspace_blob_key(run_id, sha), packed, nx=True)
        pipe.sadd(blobs, sha)
        moved.sent_files += 1
        moved.sent_bytes += len(packed)
        pending += len(packed)
        if pending >= BATCH_BYTES:
            pipe.execute()
            pipe, pending = client.pipeline(transaction=False), 0
    # the manifest last: a reader sees the old one or all of this one
    pipe.set(
        keys.workspace_key(run_id), orjson.dumps({"files": files, "bytes": total, "run_id": run_id})
    )
    pipe.execute()
    moved.ms = (time.monotonic() - started) * 1000
    return moved


def _inside(root: Path, rel: str) -> Path:
    """``rel`` as a path under ``root``, or WorkspaceCorrupt: a manifest is the run's own writing, and a
    hostile phase could have named a path that leaves the workspace."""
    parts = PurePosixPath(rel).parts
    if not rel or PurePosixPath(rel).is_absolute() or ".." in parts or "" in parts:
        raise WorkspaceCorrupt(f"the workspace manifest names a path outside it: {rel[:200]!r}")
    path = root.joinpath(*parts)
    real_root = os.path.realpath(root)
    if (
        not os.path.realpath(path.parent).startswith(real_root + os.sep)
        and os.path.realpath(path.parent) != real_root
    ):
        raise WorkspaceCorrupt(f"the workspace path {rel[:200]!r} leads outside it (a symlink)")
    return path


def restore(client: Any, run_id: str, root: Path) -> Moved:
    """Make the directory ``root`` equal to the run's stored workspace (see the module); nothing is done
    when no phase stored one. Raises WorkspaceCorrupt for a path that leaves the workspace, a missing blob
    or content that does not match its hash."""
    started = time.monotonic()
    files = manifest(client, run_id)
    if files is None:
        return Moved()
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    local = _walk(root)
    moved = Moved(files=len(files), bytes=sum(int(e.get("size", 0)) for e in files.values()))
    for rel in sorted(set(local) - set(files)):
        (root / rel).unlink()
        moved.removed += 1
    needed: dict[str, list[tuple[Path, dict[str, Any]]]] = {}
    for rel, entry in files.items():
        path = _inside(root, rel)
        st = local.get(rel)
        already = (
            st is not None
            and st.st_size == entry.get("size")
            and (st.st_mtime_ns == entry.get("mtime_ns") or _sha256(path) == entry.get("sha256"))
        )
        if already:
            _finish(path, entry)
            continue
        needed.setdefault(str(entry.get("sha256")), []).append((path, entry))
    shas = list(needed)
    for start in range(0, len(shas), 64):
        chunk = shas[start : start + 64]
        packed = client.execute_command(
            "MGET", *(keys.workspace_blob_key(run_id, sha) for sha in chunk), **{NEVER_DECODE: True}
        )
        for sha, blob in zip(chunk, packed, strict=True):
            if blob is None:
                raise WorkspaceCorrupt(
                    f"the workspace of run {run_id} lacks the content of {needed[sha][0][0].name} "
                    f"(blob {sha[:12]}…): it was deleted, or never stored"
                )
            data = zlib.decompress(blob)
            if hashlib.sha256(data).hexdigest() != sha:
                raise WorkspaceCorrupt(
                    f"the stored content of {needed[sha][0][0].name} in run {run_id}'s workspace does "
                    "not match its hash: it was changed after it was stored"
                )
            moved.sent_bytes += len(blob)
            for path, entry in needed[sha]:
                path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
                partial = path.with_name(f".{path.name}.restoring")
                # a link left there is replaced, never followed
                partial.unlink(missing_ok=True)
                partial.write_bytes(data)
                os.replace(partial, path)
                _finish(path, entry)
                moved.sent_files += 1
    moved.ms = (time.monotonic() - started) * 1000
    return moved


def _finish(path: Path, entry: dict[str, Any]) -> None:
    """The file's mode and mtime as stored: the next store sees it unchanged without hashing it."""
    mode, mtime = entry.get("mode"), entry.get("mtime_ns")
    if isinstance(mode, int):
        path.chmod(mode & 0o777)
    if isinstance(mtime, int):
        os.utime(path, ns=(mtime, mtime))
