"""A run's workspace travels with the run (issue 54): stored when a phase ends, restored on the next
phase's host, against a real server and real workers with workspace roots of their own."""

from __future__ import annotations

import os
import signal
import time
import zlib
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis

from mother import keys
from mother.errors import WorkspaceCorrupt, WorkspaceTooLarge
from tests.conftest import Pipeline, cli, run_cli, start_pipeline, stop_pipeline, tool_calls_counted
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
    first = workspaces.store(r, "run-ws", a, cap_bytes=10 * 2**20)
    # five files, four contents (main.py and copy.py are the same)
    assert (first.files, first.sent_files) == (5, 4)
    assert r.scard(keys.workspace_blobs_key("run-ws")) == 4
    again = workspaces.store(r, "run-ws", a, cap_bytes=10 * 2**20)
    assert again.sent_files == 0
    got = workspaces.restore(r, "run-ws", b)
    assert _tree(b) == _tree(a) and got.sent_files == 5
    assert (b / "run.sh").stat().st_mode & 0o777 == 0o755
    (b / "notes.txt").write_text("changed on b\n")
    (b / "src" / "copy.py").unlink()
    (b / "added.md").write_text("# new\n")
    second = workspaces.store(r, "run-ws", b, cap_bytes=10 * 2**20)
    assert second.sent_files == 2
    back = workspaces.restore(r, "run-ws", a)
    assert _tree(a) == _tree(b) and back.removed == 1 and back.sent_files == 2
    # a root already equal needs nothing
    assert workspaces.restore(r, "run-ws", a).sent_files == 0


def test_a_workspace_over_its_cap_fails_in_one_line_and_writes_nothing(
    r: redis.Redis, tmp_path: Path
) -> None:
    (tmp_path / "big.bin").write_bytes(b"x" * 3 * 2**20)
    with pytest.raises(WorkspaceTooLarge) as caught:
        workspaces.store(r, "run-big", tmp_path, cap_bytes=2 * 2**20)
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
    workspaces.store(r, "run-t", src, cap_bytes=2**20)
    sha = next(iter(r.smembers(keys.workspace_blobs_key("run-t"))))
    r.set(keys.workspace_blob_key("run-t", sha), zlib.compress(b"forged"))
    with pytest.raises(WorkspaceCorrupt, match="does not match its hash"):
        workspaces.restore(r, "run-t", tmp_path / "dst")
    r.delete(keys.workspace_blob_key("run-t", sha))
    with pytest.raises(WorkspaceCorrupt, match=r"lacks the content of a\.txt"):
        workspaces.restore(r, "run-t", tmp_path / "dst2")
    doc = orjson.loads(r.get(keys.workspace_key("run-t")))
    for bad in ("../escaped.txt", "/etc/escaped.txt", "x/../../escaped.txt"):
        r.set(
            keys.workspace_key("run-t"),
            orjson.dumps({**doc, "files": {bad: doc["files"]["a.txt"]}}),
        )
        with pytest.raises(WorkspaceCorrupt, match="outside it"):
            workspaces.restore(r, "run-t", tmp_path / "dst3")
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


def _host(p: Pipeline, name: str, root: Path, store: str) -> None:
    p.stack.spawn(
        name,
        "worker",
        "--queues",
        p.stack.queues,
        "--name",
        f"{name}-{os.getpid()}-{time.monotonic_ns() % 10**6}",
        env={"MOTHER_WORKER__WORKSPACE_ROOT": str(root), "MOTHER_WORKER__WORKSPACE_STORE": store},
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


@pytest.mark.parametrize("store", ["redis", "shared"])
def test_phases_on_two_hosts_read_each_others_files(tmp_path: Path, store: str) -> None:
    """Host a (its own workspace root) runs the planner, which writes notes.txt, and is stopped (warmly:
    it finishes the phase); host b (another root) runs the coder and the critic, which read it and what
    the coder wrote. Through Redis every read finds its file; with nothing copied (``shared``, and the
    roots not shared) the reads fail: what a second host saw before workspaces travelled. Then the stored
    workspace is an artifact of the run (:func:`_the_workspace_is_an_artifact_of_the_run`)."""
    p = start_pipeline(tmp_path, workers=0)
    try:
        root_a, root_b = tmp_path / "host-a", tmp_path / "host-b"
        _host(p, "host-a", root_a, store)
        run_id = p.client.submit(_spec())
        beat = keys.attempt_heartbeat_key(run_id, 0, 1)
        wait_until(lambda: p.redis.get(beat) not in (None, "dispatched"), timeout=30)
        os.kill(p.stack.procs["host-a"].pid, signal.SIGTERM)
        _host(p, "host-b", root_b, store)
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
        else:
            # the coder's read of notes.txt failed on b; the critic's, of what b wrote, did not
            assert (stats["success_count"], stats["failure_count"]) == (1, 1)
            assert not (root_b / run_id / "notes.txt").exists()
            assert not p.redis.exists(keys.workspace_key(run_id))
    finally:
        stop_pipeline(p)
