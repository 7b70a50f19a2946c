"""A run's workspace travels with the run (issue 54): stored when a phase ends, restored on the next
phase's host, against a real server and real workers with workspace roots of their own."""

from __future__ import annotations

import os
import signal
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis

from mother import keys
from mother.errors import WorkspaceCorrupt, WorkspaceTooLarge
from tests.conftest import (
    Pipeline,
    beating,
    cli,
    need,
    run_cli,
    start_pipeline,
    stop_pipeline,
    tool_calls_counted,
)
from tests.s3_server import CephS3, shared, unavailable
from tests.test_pipeline import example, wait_until
from workers import workspaces


def _tree(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.is_symlink()
    }


def test_a_workspace_moves_between_two_roots_changes_deletions_and_all(
    r: redis.Redis, tmp_path: Path
) -> None:
    """Stored from one root and restored into another: every file, byte for byte, with its mode; then
    changed there (one edited, one deleted, one added) and restored into the first root, which had the
    old state: it ends equal, the deleted file gone. A content stored once is not sent again, and an
    unchanged workspace sends nothing."""
    a, b = tmp_path / "a", tmp_path / "b"
    (a / "src" / "deep").mkdir(parents=True)
    (a / "notes.txt").write_text("hello from a\n")
    (a / "src" / "main.py").write_text("print('hi')\n")
    (a / "src" / "deep" / "blob.bin").write_bytes(os.urandom(200_000))
    (a / "src" / "copy.py").write_text("print('hi')\n")
    (a / "run.sh").write_text("#!/bin/sh\necho ok\n")
    (a / "run.sh").chmod(0o755)
    first = workspaces.store(workspaces.RedisPlace(r, "run-ws"), "run-ws", a, cap_bytes=10 * 2**20)
    # five files, four contents (main.py and copy.py are the same)
    assert (first.files, first.sent_files) == (5, 4)
    assert r.scard(keys.workspace_blobs_key("run-ws")) == 4
    again = workspaces.store(workspaces.RedisPlace(r, "run-ws"), "run-ws", a, cap_bytes=10 * 2**20)
    assert again.sent_files == 0
    got = workspaces.restore(workspaces.RedisPlace(r, "run-ws"), "run-ws", b)
    assert _tree(b) == _tree(a) and got.sent_files == 5
    assert (b / "run.sh").stat().st_mode & 0o777 == 0o755
    (b / "notes.txt").write_text("changed on b\n")
    (b / "src" / "copy.py").unlink()
    (b / "added.md").write_text("# new\n")
    second = workspaces.store(workspaces.RedisPlace(r, "run-ws"), "run-ws", b, cap_bytes=10 * 2**20)
    assert second.sent_files == 2
    back = workspaces.restore(workspaces.RedisPlace(r, "run-ws"), "run-ws", a)
    assert _tree(a) == _tree(b) and back.removed == 1 and back.sent_files == 2
    # a root already equal needs nothing
    assert workspaces.restore(workspaces.RedisPlace(r, "run-ws"), "run-ws", a).sent_files == 0


def test_a_workspace_over_its_cap_fails_in_one_line_and_writes_nothing(
    r: redis.Redis, tmp_path: Path
) -> None:
    (tmp_path / "big.bin").write_bytes(b"x" * 3 * 2**20)
    with pytest.raises(WorkspaceTooLarge) as caught:
        workspaces.store(
            workspaces.RedisPlace(r, "run-big"), "run-big", tmp_path, cap_bytes=2 * 2**20
        )
    assert "3.0 MB, over its cap of 2.0 MB (worker.workspace_max_mb)" in caught.value.message
    assert "\n" not in caught.value.message
    assert not r.exists(keys.workspace_key("run-big"), keys.workspace_blobs_key("run-big"))


def test_a_tampered_or_escaping_workspace_is_refused(r: redis.Redis, tmp_path: Path) -> None:
    """What the restorer reads it checks: content changed after it was stored, a path that leaves the
    workspace, a content that is gone: each stops the restore with the file named, nothing written
    outside the workspace."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.txt").write_text("the real content")
    workspaces.store(workspaces.RedisPlace(r, "run-t"), "run-t", src, cap_bytes=2**20)
    sha = next(iter(r.smembers(keys.workspace_blobs_key("run-t"))))
    r.set(keys.workspace_blob_key("run-t", sha), zlib.compress(b"forged"))
    with pytest.raises(WorkspaceCorrupt, match="does not match its hash"):
        workspaces.restore(workspaces.RedisPlace(r, "run-t"), "run-t", tmp_path / "dst")
    r.delete(keys.workspace_blob_key("run-t", sha))
    with pytest.raises(WorkspaceCorrupt, match=r"lacks the content of a\.txt"):
        workspaces.restore(workspaces.RedisPlace(r, "run-t"), "run-t", tmp_path / "dst2")
    doc = orjson.loads(r.get(keys.workspace_key("run-t")))
    for bad in ("../escaped.txt", "/etc/escaped.txt", "x/../../escaped.txt"):
        r.set(
            keys.workspace_key("run-t"),
            orjson.dumps({**doc, "files": {bad: doc["files"]["a.txt"]}}),
        )
        with pytest.raises(WorkspaceCorrupt, match="outside it"):
            workspaces.restore(workspaces.RedisPlace(r, "run-t"), "run-t", tmp_path / "dst3")
    assert not (tmp_path / "escaped.txt").exists()


def _spec() -> dict:
    """Three phases: the planner writes notes.txt, the coder reads it and writes from_b.txt, the critic
    reads that; each read_file fails (a tool failure, counted) when the file is not in the workspace."""
    return example(
        "three-phase",
        scripts={
            "planner": [
                {
                    "tool_calls": [
                        {
                            "name": "write_file",
                            "arguments": {"path": "notes.txt", "content": "hello from host a"},
                        }
                    ]
                },
                {"text": "planned", "delay_seconds": 2},
            ],
            "coder": [
                {
                    "tool_calls": [
                        {"name": "read_file", "arguments": {"path": "notes.txt"}},
                        {
                            "name": "write_file",
                            "arguments": {"path": "out/from_b.txt", "content": "written on b"},
                        },
                    ]
                },
                {"text": "coded"},
            ],
            "critic": [
                {"tool_calls": [{"name": "read_file", "arguments": {"path": "out/from_b.txt"}}]},
                {"text": "ok"},
            ],
        },
    )


@pytest.fixture(scope="module")
def s3_store() -> Iterator[CephS3]:
    """A real S3-compatible store (Ceph's gateway, tests/s3_server.py: the session's, started in the
    background when the session starts) with the default bucket; skipped with the reason where it cannot
    run."""
    need(unavailable())
    server = shared()
    _s3(server).create_bucket(Bucket="mother-workspaces")
    yield server


def _s3(server: CephS3) -> Any:
    return server.client()


def _s3_env(server: CephS3) -> dict[str, str]:
    """A worker's (or the GC's) settings for the store: where it is; its credentials as boto3 reads them."""
    return {
        "MOTHER_WORKER__WORKSPACE_STORE": "s3",
        "MOTHER_WORKER__WORKSPACE_S3_ENDPOINT": server.endpoint,
        "AWS_ACCESS_KEY_ID": server.access_key,
        "AWS_SECRET_ACCESS_KEY": server.secret_key,
    }


def _objects(server: CephS3, run_id: str) -> list[str]:
    listed = _s3(server).list_objects_v2(Bucket="mother-workspaces", Prefix=f"workspaces/{run_id}/")
    return sorted(o["Key"] for o in listed.get("Contents", []))


def test_a_workspace_travels_through_an_s3_compatible_store(
    r: redis.Redis, tmp_path: Path, s3_store: CephS3, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``worker.workspace_store: s3``: the contents go to the object store (one object per content under
    ``workspaces/{run}/{sha256}``), the manifest and the list of contents stay in Redis; another root
    restores it byte for byte. A host on the Redis store refuses the manifest in one line; an object
    changed or deleted in the store is refused (the manifest's hash); a bucket that does not exist is a
    one-line configuration error."""
    from mother.config import Settings
    from mother.errors import ConfigError

    for name, value in _s3_env(s3_store).items():
        monkeypatch.setenv(name, value)
    settings = Settings.model_validate(
        {"worker": {"workspace_store": "s3", "workspace_s3_endpoint": s3_store.endpoint}}
    )
    blobs = workspaces.blobs_for(settings, r)
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    (a / "src").mkdir(parents=True)
    (a / "notes.txt").write_text("hello through s3\n")
    (a / "src" / "data.bin").write_bytes(os.urandom(300_000))
    first = workspaces.store(
        workspaces.RedisPlace(r, "run-s3", blobs), "run-s3", a, cap_bytes=10 * 2**20
    )
    assert (first.files, first.sent_files) == (2, 2)
    shas = sorted(r.smembers(keys.workspace_blobs_key("run-s3")))
    assert _objects(s3_store, "run-s3") == [f"workspaces/run-s3/{sha}" for sha in shas]
    assert not r.exists(*(keys.workspace_blob_key("run-s3", sha) for sha in shas))
    assert orjson.loads(r.get(keys.workspace_key("run-s3")))["store"] == "s3"
    assert workspaces.restore(
        workspaces.RedisPlace(r, "run-s3", blobs), "run-s3", b
    ).sent_files == 2 and _tree(b) == _tree(a)
    with pytest.raises(WorkspaceCorrupt, match=r"contents are in 's3'.*workspace_store is 'redis'"):
        workspaces.restore(workspaces.RedisPlace(r, "run-s3"), "run-s3", c)
    notes = next(s for s in shas if _tree(a)["notes.txt"] == _content(s3_store, "run-s3", s))
    _s3(s3_store).put_object(
        Bucket="mother-workspaces",
        Key=f"workspaces/run-s3/{notes}",
        Body=zlib.compress(b"changed in the store"),
    )
    with pytest.raises(WorkspaceCorrupt, match="does not match its hash"):
        workspaces.restore(workspaces.RedisPlace(r, "run-s3", blobs), "run-s3", c)
    assert blobs.delete("run-s3", shas) == 2 and _objects(s3_store, "run-s3") == []
    with pytest.raises(WorkspaceCorrupt, match="lacks the content"):
        workspaces.restore(workspaces.RedisPlace(r, "run-s3", blobs), "run-s3", tmp_path / "d")
    missing = Settings.model_validate(
        {
            "worker": {
                "workspace_store": "s3",
                "workspace_s3_endpoint": s3_store.endpoint,
                "workspace_s3_bucket": "no-such-bucket",
            }
        }
    )
    with pytest.raises(
        ConfigError, match=r"bucket 'no-such-bucket' at http://127\.0\.0\.1:.* cannot be"
    ):
        workspaces.blobs_for(missing, r)


def _content(server: CephS3, run_id: str, sha: str) -> bytes:
    body = _s3(server).get_object(Bucket="mother-workspaces", Key=f"workspaces/{run_id}/{sha}")
    return zlib.decompress(body["Body"].read())


def _host(
    p: Pipeline, name: str, root: Path, store: str, env: dict[str, str] | None = None
) -> None:
    p.stack.spawn(
        name,
        "worker",
        "--queues",
        p.stack.queues,
        "--name",
        f"{name}-{os.getpid()}-{time.monotonic_ns() % 10**6}",
        env={
            "MOTHER_REDIS_URL": p.stack.enroll(name),
            "MOTHER_WORKER__WORKSPACE_ROOT": str(root),
            "MOTHER_WORKER__WORKSPACE_STORE": store,
            **(env or {}),
        },
    )


def _the_workspace_is_an_artifact_of_the_run(
    p: Pipeline, tmp_path: Path, run_id: str, stored: dict[str, Any], blob_keys: list[str]
) -> None:
    """At the run's end its stored workspace became one of its artifacts (kind workspace, its content the
    manifest, its size the files' bytes, its run's retention); `mother artifacts export` writes the files
    out (into a new or empty directory only). The artifact keeps the contents past the run's records;
    when it expires the GC removes them (manifest, set of contents, every content)."""
    from mother.artifacts.controls import list_for_run

    ws = keys.workspace_artifact_id(run_id)
    listed = {m["artifact_id"]: m for m in list_for_run(p.redis, run_id)}
    assert listed[ws]["kind"] == "workspace" and listed[ws]["size_bytes"] == stored["bytes"]
    assert listed[ws]["retention_class"] == "success" and listed[ws]["expires_at"]
    # every lifecycle field of an artifact's metadata, and people's controls work on it
    stored_meta = orjson.loads(p.redis.execute_command("JSON.GET", keys.artifact_meta_key(ws)))
    assert {k: stored_meta.get(k) for k in ("status", "protected", "user_starred")} == {
        "status": "active",
        "protected": False,
        "user_starred": False,
    }
    starred = cli("artifacts", "star", ws, "--actor", "alice", url=p.url)
    assert starred.exit_code == 0, starred.output
    assert f"{ws}: status active, starred True" in starred.stdout
    # a workspace artifact made before those fields were set: its controls read it with their defaults
    for field in ("status", "protected"):
        p.redis.execute_command("JSON.DEL", keys.artifact_meta_key(ws), f"$.{field}")
    unstarred = cli("artifacts", "unstar", ws, "--actor", "alice", url=p.url)
    assert unstarred.exit_code == 0, unstarred.output
    assert "starred False, protected False" in unstarred.stdout
    raw = p.redis.execute_command("JSON.GET", keys.artifact_key(ws), "$.content")
    assert orjson.loads(orjson.loads(raw)[0])["files"] == stored["files"]
    out = tmp_path / "exported"
    got = cli("artifacts", "export", ws, str(out), url=p.url)
    assert got.exit_code == 0, got.output
    assert (out / "notes.txt").read_text() == "hello from host a"
    assert (out / "out" / "from_b.txt").read_text() == "written on b"
    again = cli("artifacts", "export", ws, str(out), url=p.url)
    assert again.exit_code != 0 and "not a new or empty directory" in again.output
    # the run's records due now, its workspace artifact not: the records go, the contents stay
    p.redis.zadd(keys.RUN_RETENTION, {run_id: 0})
    gc = run_cli("gc", "run", env={"MOTHER_REDIS_URL": p.url})
    assert gc.returncode == 0, gc.stderr
    assert not p.redis.exists(keys.run_key(run_id))
    assert p.redis.exists(keys.workspace_key(run_id), *blob_keys) == 3
    assert cli("artifacts", "export", ws, str(tmp_path / "again"), url=p.url).exit_code == 0
    # the artifact expired: it goes, and the contents with it
    gc = run_cli("gc", "run", "--now", "2099-01-01T00:00:00.000Z", env={"MOTHER_REDIS_URL": p.url})
    assert gc.returncode == 0, gc.stderr
    assert not p.redis.exists(
        keys.artifact_meta_key(ws),
        keys.workspace_key(run_id),
        keys.workspace_blobs_key(run_id),
        *blob_keys,
    )


@pytest.mark.parametrize("store", ["redis", "shared", "s3"])
def test_phases_on_two_hosts_read_each_others_files(
    tmp_path: Path, store: str, request: pytest.FixtureRequest
) -> None:
    """Host a (its own workspace root) runs the planner, which writes notes.txt, and is stopped (warmly:
    it finishes the phase); host b (another root) runs the coder and the critic, which read it and what
    the coder wrote. Through Redis every read finds its file; with nothing copied (``shared``, and the
    roots not shared) the reads fail: what a second host saw before workspaces travelled. Then the stored
    workspace is an artifact of the run (:func:`_the_workspace_is_an_artifact_of_the_run`). Through an
    S3-compatible store (``s3``) the same: the contents in the store, deleted by the GC with the run's
    workspace artifact."""
    server = request.getfixturevalue("s3_store") if store == "s3" else None
    env = _s3_env(server) if server is not None else {}
    p = start_pipeline(tmp_path, workers=0)
    try:
        root_a, root_b = tmp_path / "host-a", tmp_path / "host-b"
        _host(p, "host-a", root_a, store, env)
        run_id = p.client.submit(_spec())
        beat = keys.attempt_heartbeat_key(run_id, 0, 1)
        wait_until(lambda: beating(p.redis.get(beat)), timeout=30)
        os.kill(p.stack.procs["host-a"].pid, signal.SIGTERM)
        _host(p, "host-b", root_b, store, env)
        done = p.wait(run_id, 90)
        assert done.termination.reason == "success"
        stats = tool_calls_counted(p.redis, "read_file", 2)
        assert p.stack.procs["host-a"].wait(timeout=30) is not None
        assert (root_a / run_id / "notes.txt").exists()
        if store == "redis":
            assert (stats["success_count"], stats["failure_count"]) == (2, 0)
            assert (root_b / run_id / "notes.txt").read_text() == "hello from host a"
            assert (root_b / run_id / "out" / "from_b.txt").read_text() == "written on b"
            stored = orjson.loads(p.redis.get(keys.workspace_key(run_id)))
            assert sorted(stored["files"]) == ["notes.txt", "out/from_b.txt"]
            shas = p.redis.smembers(keys.workspace_blobs_key(run_id))
            blob_keys = [keys.workspace_blob_key(run_id, sha) for sha in shas]
            assert len(shas) == 2 and p.redis.exists(*blob_keys) == 2
            _the_workspace_is_an_artifact_of_the_run(p, tmp_path, run_id, stored, blob_keys)
        elif server is not None:
            assert (stats["success_count"], stats["failure_count"]) == (2, 0)
            assert (root_b / run_id / "out" / "from_b.txt").read_text() == "written on b"
            shas = p.redis.smembers(keys.workspace_blobs_key(run_id))
            assert _objects(server, run_id) == sorted(f"workspaces/{run_id}/{s}" for s in shas)
            assert len(shas) == 2 and not p.redis.keys("workspace_blob:*")
            # the workspace artifact expired: the GC deletes its contents from the store
            gc = run_cli(
                "gc",
                "run",
                "--now",
                "2099-01-01T00:00:00.000Z",
                env={"MOTHER_REDIS_URL": p.url, **env},
            )
            assert gc.returncode == 0, gc.stderr
            assert _objects(server, run_id) == []
            assert not p.redis.exists(keys.workspace_key(run_id))
        else:
            # the coder's read of notes.txt failed on b; the critic's, of what b wrote, did not
            assert (stats["success_count"], stats["failure_count"]) == (1, 1)
            assert not (root_b / run_id / "notes.txt").exists()
            assert not p.redis.exists(keys.workspace_key(run_id))
    finally:
        stop_pipeline(p)
