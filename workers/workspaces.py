"""A run's workspace travels with the run: the next phase may run on another host.

When a phase that used its workspace ends, :func:`store` puts the workspace where every host reaches it:
each file's content once per run, compressed, under its SHA-256 (``workspace_blob:{run}:{sha256}``, the
run's set of them ``workspace_blobs:{run}``), and the workspace's manifest last (``workspace:{run}``:
path -> sha256, size, mode, mtime), so a reader sees the old manifest or the whole new one. A file
unchanged since the manifest it started from (same size and mtime) is not hashed again, and content the
run stored already is not sent again. The first time a phase's tools need the workspace,
:func:`restore` makes its directory equal to the manifest: files another host changed are fetched and
checked against their hash, files the manifest does not have are removed, files already right stay.

The keys are the run's, and only Mother writes or reads them: a host asks for them while it holds one of
the run's attempts (:class:`AskedPlace`; :mod:`mother.asks.workspace`), and the GC deletes them with the
run's records. The restorer trusts nothing it reads: a path that would leave the workspace or content
that does not match its hash stops the phase (``workspace_corrupt``). With ``worker.workspace_store:
shared`` (a filesystem every worker host mounts) nothing is copied; with ``s3`` a host puts and gets the
contents in the object store itself (its own credentials) and Mother keeps their list and the manifest.
"""

from __future__ import annotations

import base64
import hashlib
import os
import stat
import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Protocol

import orjson
from redis.client import NEVER_DECODE

from mother import keys
from mother.config import Settings
from mother.errors import ConfigError, WorkspaceCorrupt, WorkspaceTooLarge
from mother.logs import get_logger

__all__ = [
    "AskedPlace",
    "Blobs",
    "Moved",
    "Place",
    "RedisBlobs",
    "RedisPlace",
    "S3Blobs",
    "blobs_for",
    "manifest",
    "restore",
    "store",
    "travels",
]

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


def manifest(
    place: Place, run_id: str, store_name: str | None = None
) -> dict[str, dict[str, Any]] | None:
    """The run's workspace as last stored (path -> its entry), or None when no phase stored one. With
    ``store_name``, a manifest whose contents went to another store (``redis``, ``s3``) is refused in one
    line: this host cannot read them."""
    doc = place.read()
    if doc is None:
        return None
    files = doc.get("files") if isinstance(doc, dict) else None
    if not isinstance(files, dict):
        raise WorkspaceCorrupt(f"the workspace manifest of run {run_id} is not one (no files)")
    stored_in = doc.get("store", "redis")
    if store_name is not None and stored_in != store_name:
        raise WorkspaceCorrupt(
            f"run {run_id}'s workspace contents are in {stored_in!r}, and this host's "
            f"worker.workspace_store is {store_name!r}: every worker host needs the same store"
        )
    return files


class Blobs(Protocol):
    """Where a workspace's contents are kept, each under its run and SHA-256 (compressed bytes)."""

    name: str

    def put(self, run_id: str, contents: dict[str, bytes]) -> None: ...

    def get(self, run_id: str, shas: list[str]) -> list[bytes | None]: ...

    def delete(self, run_id: str, shas: list[str]) -> int: ...


class RedisBlobs:
    """The contents in Redis: ``workspace_blob:{run}:{sha256}``, listed in ``workspace_blobs:{run}``."""

    name = "redis"

    def __init__(self, client: Any) -> None:
        self.client = client

    def put(self, run_id: str, contents: dict[str, bytes]) -> None:
        pipe = self.client.pipeline(transaction=False)
        for sha, packed in contents.items():
            pipe.set(keys.workspace_blob_key(run_id, sha), packed, nx=True)
            pipe.sadd(keys.workspace_blobs_key(run_id), sha)
        pipe.execute()

    def get(self, run_id: str, shas: list[str]) -> list[bytes | None]:
        found: list[bytes | None] = self.client.execute_command(
            "MGET", *(keys.workspace_blob_key(run_id, sha) for sha in shas), **{NEVER_DECODE: True}
        )
        return found

    def delete(self, run_id: str, shas: list[str]) -> int:
        blob_keys = [keys.workspace_blob_key(run_id, sha) for sha in shas]
        return int(self.client.delete(*blob_keys)) if blob_keys else 0


class Place(Protocol):
    """Where a run's workspace manifest is read and written, and its contents kept (``blobs``)."""

    blobs: Blobs

    def read(self) -> dict[str, Any] | None: ...

    def write(self, doc: dict[str, Any]) -> None: ...


class RedisPlace:
    """The workspace's keys read and written directly (Mother's, and ``mother artifacts export``)."""

    def __init__(self, client: Any, run_id: str, blobs: Blobs | None = None) -> None:
        self.client, self.run_id = client, run_id
        self.blobs = blobs or RedisBlobs(client)

    def read(self) -> dict[str, Any] | None:
        raw = self.client.get(keys.workspace_key(self.run_id))
        if raw is None:
            return None
        doc: dict[str, Any] = orjson.loads(raw)
        return doc

    def write(self, doc: dict[str, Any]) -> None:
        self.client.set(keys.workspace_key(self.run_id), orjson.dumps(doc))


class AskedBlobs:
    """The contents in Redis, through the asks of the attempt this host holds (Mother reads and writes)."""

    name = "redis"

    def __init__(self, asks: Any) -> None:
        self.asks = asks

    def put(self, run_id: str, contents: dict[str, bytes]) -> None:
        body = {sha: base64.b64encode(blob).decode() for sha, blob in contents.items()}
        self.asks.ask("store", {"blobs": body})

    def get(self, run_id: str, shas: list[str]) -> list[bytes | None]:
        found: dict[str, str | None] = {}
        wanted = list(shas)
        while wanted:
            reply = self.asks.ask("blobs", {"shas": wanted})
            found.update(reply.get("blobs") or {})
            more = reply.get("more") or []
            if len(more) >= len(wanted):
                break
            wanted = more
        return [base64.b64decode(t) if (t := found.get(sha)) else None for sha in shas]

    def delete(self, run_id: str, shas: list[str]) -> int:
        raise ConfigError("a host deletes no workspace contents: the GC asks Mother")


class AskedPlace:
    """The workspace of the attempt ``asks`` is about, through Mother: its manifest and (Redis store) its
    contents by asks; with the s3 store the contents go to the object store directly, and Mother is told
    their names (what the GC deletes by)."""

    def __init__(self, asks: Any, settings: Settings) -> None:
        self.asks = asks
        self.blobs: Blobs = (
            _s3_blobs(settings, lambda _run_id, shas: asks.ask("store", {"listed": shas}))
            if settings.worker.workspace_store == "s3"
            else AskedBlobs(asks)
        )

    def read(self) -> dict[str, Any] | None:
        got = self.asks.ask("workspace").get("manifest")
        return got if isinstance(got, dict) else None

    def write(self, doc: dict[str, Any]) -> None:
        self.asks.ask("store", {"manifest": doc})


class S3Blobs:
    """The contents in an S3-compatible object store (``worker.workspace_store: s3``): one object per
    content, ``{prefix}{run}/{sha256}`` in the bucket; still listed in Redis (``workspace_blobs:{run}``,
    what the GC deletes by). Credentials come from boto3's usual places (``AWS_ACCESS_KEY_ID`` and
    ``AWS_SECRET_ACCESS_KEY``, a profile, an instance role). Anyone with them can change an object: the
    restorer checks every content against the SHA-256 in the manifest, which only the run's attempt
    writes (a changed one fails the phase ``workspace_corrupt``)."""

    name = "s3"

    def __init__(self, s3: Any, bucket: str, prefix: str, listed: Any = None) -> None:
        # ``listed(run_id, shas)``: what lists contents put in the store under the run (Mother's set)
        self.s3, self.bucket, self.prefix, self.listed = s3, bucket, prefix, listed

    def _key(self, run_id: str, sha: str) -> str:
        keys.workspace_blob_key(run_id, sha)  # the run id and the hash checked as for Redis
        return f"{self.prefix}{run_id}/{sha}"

    def put(self, run_id: str, contents: dict[str, bytes]) -> None:
        def one(item: tuple[str, bytes]) -> None:
            self.s3.put_object(Bucket=self.bucket, Key=self._key(run_id, item[0]), Body=item[1])

        # an object a request: S3_CONCURRENCY of them in flight (what one request waits is the store's)
        with ThreadPoolExecutor(S3_CONCURRENCY) as pool:
            list(pool.map(one, contents.items()))
        if contents and self.listed is not None:
            self.listed(run_id, list(contents))

    def get(self, run_id: str, shas: list[str]) -> list[bytes | None]:
        def one(sha: str) -> bytes | None:
            try:
                reply = self.s3.get_object(Bucket=self.bucket, Key=self._key(run_id, sha))
            except self.s3.exceptions.NoSuchKey:
                return None
            body: bytes = reply["Body"].read()
            return body

        with ThreadPoolExecutor(S3_CONCURRENCY) as pool:
            return list(pool.map(one, shas))

    def delete(self, run_id: str, shas: list[str]) -> int:
        gone = 0
        for start in range(0, len(shas), 1000):
            chunk = shas[start : start + 1000]
            reply = self.s3.delete_objects(
                Bucket=self.bucket,
                Delete={"Objects": [{"Key": self._key(run_id, s)} for s in chunk], "Quiet": True},
            )
            failed = reply.get("Errors") or []
            if failed:
                raise WorkspaceCorrupt(
                    f"the object store did not delete {len(failed)} of run {run_id}'s workspace "
                    f"contents: {failed[0].get('Code')} {failed[0].get('Message')}"[:300]
                )
            gone += len(chunk)
        return gone


_S3_CLIENTS: dict[tuple[str | None, str, str], Any] = {}
# requests to the object store in flight at once, per store or restore
S3_CONCURRENCY = 16


def travels(settings: Settings) -> bool:
    """Whether a run's workspace is stored for the next phase's host (not on a filesystem every host
    mounts, ``worker.workspace_store: shared``)."""
    return settings.worker.workspace_store != "shared"


def blobs_for(settings: Settings, client: Any) -> Blobs:
    """The contents store ``worker.workspace_store`` names, read and deleted directly (Mother's GC, and
    ``mother artifacts export``): ``redis`` for ``shared`` too (nothing travels there)."""
    if settings.worker.workspace_store != "s3":
        return RedisBlobs(client)
    return _s3_blobs(
        settings, lambda run_id, shas: client.sadd(keys.workspace_blobs_key(run_id), *shas)
    )


def _s3_blobs(settings: Settings, listed: Any) -> S3Blobs:
    """The object store ``worker.workspace_*`` names: one S3 client per process, endpoint and bucket, the
    bucket checked once (one line when it cannot be reached or does not exist)."""
    worker = settings.worker
    cached = (worker.workspace_s3_endpoint, worker.workspace_s3_region, worker.workspace_s3_bucket)
    s3 = _S3_CLIENTS.get(cached)
    if s3 is None:
        s3 = _s3_client(worker.workspace_s3_endpoint, worker.workspace_s3_region)
        from botocore.exceptions import BotoCoreError, ClientError  # type: ignore[import-untyped]

        try:
            s3.head_bucket(Bucket=worker.workspace_s3_bucket)
        except (BotoCoreError, ClientError) as exc:
            raise ConfigError(
                f"worker.workspace_store s3: bucket {worker.workspace_s3_bucket!r} at "
                f"{worker.workspace_s3_endpoint or 'AWS S3'} cannot be used ({exc}); create it, or "
                "check worker.workspace_s3_endpoint and the AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY "
                "the workers run with"
            ) from None
        _S3_CLIENTS[cached] = s3
    return S3Blobs(s3, worker.workspace_s3_bucket, worker.workspace_s3_prefix, listed)


def _s3_client(endpoint: str | None, region: str) -> Any:
    try:
        import boto3  # type: ignore[import-untyped]
    except ImportError:
        raise ConfigError(
            "worker.workspace_store s3 needs boto3: pip install 'mother-harness[s3]'"
        ) from None
    from botocore.config import Config  # type: ignore[import-untyped]

    pool = Config(max_pool_connections=S3_CONCURRENCY)
    return boto3.client("s3", endpoint_url=endpoint, region_name=region, config=pool)


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


def store(place: Place, run_id: str, root: Path, *, cap_bytes: int) -> Moved:
    """Put the workspace at ``root`` where every host reaches it (see the module): its contents in
    ``place.blobs``, its manifest last; raises WorkspaceTooLarge (nothing written) when it holds more
    than ``cap_bytes``."""
    started = time.monotonic()
    contents = place.blobs
    try:
        base = manifest(place, run_id, contents.name) or {}
    except WorkspaceCorrupt:
        # its contents are in another store (the deployment switched): all of it is stored again
        base = {}
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
    batch: dict[str, bytes] = {}
    pending = 0
    for sha, rel in wanted.items():
        packed = zlib.compress((root / rel).read_bytes(), LEVEL)
        batch[sha] = packed
        moved.sent_files += 1
        moved.sent_bytes += len(packed)
        pending += len(packed)
        if pending >= BATCH_BYTES:
            contents.put(run_id, batch)
            batch, pending = {}, 0
    if batch:
        contents.put(run_id, batch)
    # the manifest last: a reader sees the old one or all of this one
    place.write({"files": files, "bytes": total, "run_id": run_id, "store": contents.name})
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


def restore(place: Place, run_id: str, root: Path) -> Moved:
    """Make the directory ``root`` equal to the run's stored workspace (see the module), its contents read
    from ``place.blobs``; nothing is done when no phase stored one. Raises WorkspaceCorrupt for a path that
    leaves the workspace, a missing blob or content that does not match its hash."""
    started = time.monotonic()
    contents = place.blobs
    files = manifest(place, run_id, contents.name)
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
        for sha, blob in zip(chunk, contents.get(run_id, chunk), strict=True):
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
