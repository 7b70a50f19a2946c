"""Artifact lifecycle and retention: each retention class with the clock moved (the GC collects as of a
time it is given), starred deferral, protection, archive and restore byte for byte, a GC killed half
way and run again, the daily schedule (two schedulers, one GC a day; a missed day caught up), the
records of ended runs, the user controls, and Mother setting retention at a real run's end."""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
import redis
from rq import Queue
from rq.job import JobStatus
from rq.serializers import JSONSerializer

from mother import keys
from mother.artifacts import retention_for
from mother.artifacts.collect import collect_here as collect
from mother.artifacts.controls import control, list_for_run, reports, restore_artifact
from mother.artifacts.policy import DAY_MS, REASON_CLASS
from mother.artifacts.schedule import JsonCronJob, catch_up
from mother.config import Settings
from mother.errors import InvalidSpec
from mother.functions import load_functions
from mother.records.artifacts import queue_retain, read_meta, store_artifact
from mother.runtime import Runtime
from schemas import iso_from_ms
from schemas.artifact import Artifact
from schemas.termination import TERMINATION_REASONS
from tests.conftest import Pipeline, live_host, run_cli, start_pipeline, stop_pipeline
from tests.test_pipeline import example, wait_until

T0 = 1_795_000_000_000  # 2026-11-18T...


def _rt(r: redis.Redis, **retention: Any) -> Runtime:
    load_functions(r)
    return Runtime(settings=Settings(retention=retention) if retention else Settings(), redis=r)


def _run(
    rt: Runtime, run_id: str, reason: str, end_ms: int, n: int = 2, *, user: str = "alice"
) -> list[str]:
    """A run that ended ``reason`` at ``end_ms`` with ``n`` artifacts, its records, and its retention
    set as Mother sets it at the end."""
    ids = [f"art-{run_id}-{i}" for i in range(n)]
    pipe = rt.redis.pipeline(transaction=False)
    for i, artifact_id in enumerate(ids):
        store_artifact(
            pipe,
            Artifact(
                artifact_id=artifact_id,
                run_id=run_id,
                phase=f"p{i}",
                attempt=1,
                kind="phase_output",
                content=f"output {i} of {run_id} " + "x" * 200,
            ),
            iso_from_ms(end_ms - 1000),
            expires_ms=end_ms - 1000 + int(90 * DAY_MS),
            expires_at=iso_from_ms(end_ms - 1000 + int(90 * DAY_MS)),
        )
    run = {
        "run_id": run_id,
        "user_id": user,
        "reason": reason,
        "spec": {"pipeline": [{"name": f"p{i}"} for i in range(n)]},
        "artifacts": ids,
        "conflicts": [f"cf-{run_id}"],
    }
    pipe.execute_command("JSON.SET", keys.run_key(run_id), "$", orjson.dumps(run))
    pipe.execute_command(
        "JSON.SET", keys.termination_key(run_id), "$", orjson.dumps({"reason": reason})
    )
    for key in (
        keys.result_key(run_id),
        keys.run_budget_key(run_id),
        keys.conflict_key(f"cf-{run_id}"),
    ):
        pipe.execute_command("JSON.SET", key, "$", "{}")
    for i in range(n):
        pipe.execute_command("JSON.SET", keys.context_key(run_id, i), "$", "{}")
    pipe.zadd(keys.RUNS_INDEX, {run_id: end_ms})
    pipe.zadd(keys.user_runs_key(user), {run_id: end_ms})
    pipe.zadd(keys.termination_reason_index_key(reason), {run_id: end_ms})
    retention = retention_for(rt.settings, reason, end_ms)
    queue_retain(
        pipe,
        run_id,
        ids,
        retention_class=retention.retention_class,
        expires_ms=retention.expires_ms,
        archive_ms=retention.archive_ms,
        records_ms=retention.records_ms,
    )
    pipe.execute()
    return ids


def _exists(r: redis.Redis, artifact_id: str) -> tuple[bool, bool, bool]:
    return (
        bool(r.exists(keys.artifact_key(artifact_id))),
        bool(r.exists(keys.archive_artifact_key(artifact_id))),
        bool(r.exists(keys.artifact_meta_key(artifact_id))),
    )


def test_every_termination_reason_has_a_class() -> None:
    assert set(REASON_CLASS) == set(TERMINATION_REASONS)
    assert {REASON_CLASS[r] for r in ("timeout", "catastrophic_error", "budget_exhausted")} == {
        "failed"
    }
    assert (REASON_CLASS["user_cancelled"], REASON_CLASS["approval_denied"]) == (
        "cancelled",
        "blocked",
    )


@pytest.mark.parametrize(
    ("reason", "keep_days", "archive_days"),
    [
        ("success", 180, 90),
        ("retries_exhausted", 30, None),
        ("user_cancelled", 7, None),
        ("blocked", 60, None),
    ],
)
def test_each_retention_class_with_the_clock_moved(
    r: redis.Redis, reason: str, keep_days: int, archive_days: int | None
) -> None:
    rt = _rt(r)
    end = T0
    ids = _run(rt, "run-a", reason, end)
    meta = read_meta(r, ids[0])
    assert meta.retention_class == REASON_CLASS[reason]
    assert meta.expires_at == iso_from_ms(end + keep_days * DAY_MS)
    # a day before: nothing goes
    before = collect(rt, now_ms=end + (keep_days - 1) * DAY_MS - 1)
    assert before.scheduled_deletion == 0
    if archive_days is not None:
        assert before.archived == 2 and _exists(r, ids[0]) == (False, True, True)
        assert read_meta(r, ids[0]).status == "archived"
    else:
        assert before.archived == 0 and _exists(r, ids[0]) == (True, False, True)
    after = collect(rt, now_ms=end + keep_days * DAY_MS + 1)
    assert after.scheduled_deletion == 2 and all(
        _exists(r, a) == (False, False, False) for a in ids
    )
    assert after.bytes_freed > 0
    if after.runs_removed == 0:
        # two keys of each artifact (content and metadata, or archive and metadata)
        assert after.keys_removed == 4
    # records: never shorter than the artifacts (max(90, keep_days) days)
    records_day = max(90, keep_days)
    assert r.exists(keys.run_key("run-a")) == (1 if records_day > keep_days else 0)
    done = collect(rt, now_ms=end + records_day * DAY_MS + 1)
    assert (
        r.exists(keys.run_key("run-a"), keys.termination_key("run-a"), keys.result_key("run-a"))
        == 0
    )
    assert r.exists(keys.context_key("run-a", 0), keys.conflict_key("cf-run-a")) == 0
    for index in (
        keys.RUNS_INDEX,
        keys.user_runs_key("alice"),
        keys.termination_reason_index_key(reason),
    ):
        assert r.zscore(index, "run-a") is None
    assert done.runs_removed + after.runs_removed == 1
    entries = [f for _, f in r.xrange(keys.ACTIVITY_STREAM)]
    kinds = [f["type"] for f in entries]
    # one entry for the batch, not one per artifact
    assert kinds.count("artifacts_deleted") == 1 and "artifact_deleted" not in kinds
    batch = orjson.loads(next(f["data"] for f in entries if f["type"] == "artifacts_deleted"))
    assert batch["count"] == 2 and sorted(batch["ids"]) == sorted(ids)
    assert "run_records_removed" in kinds and "garbage_collection" in kinds


def test_the_gc_reads_only_what_is_due(r: redis.Redis) -> None:
    """Its scanned count is what expired, not what is stored."""
    rt = _rt(r)
    for i in range(30):
        _run(rt, f"old-{i}", "user_cancelled", T0, n=1)
    for i in range(200):
        _run(rt, f"new-{i}", "success", T0 + 100 * DAY_MS, n=1)
    report = collect(rt, now_ms=T0 + 7 * DAY_MS + 1)
    assert (report.scanned_count, report.scheduled_deletion) == (30, 30)
    assert r.zcard(keys.ARTIFACT_EXPIRY) == 200


def test_starred_deferral_and_protection(r: redis.Redis) -> None:
    """With exceptions.user_starred off, a starred artifact is deferred 7 days with a notice, then
    deleted; a protected one is never deleted (nor is its run's record); by default a star protects."""
    rt = _rt(r, exceptions={"user_starred": False})
    starred, protected = _run(rt, "run-s", "retries_exhausted", T0)
    control(r, rt.settings, "star", starred, actor="bob", now_ms=T0)
    control(r, rt.settings, "protect", protected, actor="bob", now_ms=T0, reason="golden_task")
    assert r.zscore(keys.ARTIFACT_EXPIRY, protected) is None
    due = T0 + 30 * DAY_MS + 1
    first = collect(rt, now_ms=due)
    assert (first.deferred, first.scheduled_deletion) == (1, 0)
    meta = read_meta(r, starred)
    assert meta.status == "scheduled_deletion" and meta.expires_at == iso_from_ms(due + 7 * DAY_MS)
    notice = [
        orjson.loads(f["data"])
        for _, f in r.xrange(keys.ACTIVITY_STREAM)
        if f["type"] == "artifact_deletion_scheduled"
    ]
    assert notice and notice[0]["artifact_id"] == starred
    assert collect(rt, now_ms=due + 7 * DAY_MS - 1).scheduled_deletion == 0
    assert collect(rt, now_ms=due + 7 * DAY_MS + 1).scheduled_deletion == 1
    assert _exists(r, starred) == (False, False, False)
    # the protected one stays, and so does its run's record, far past every retention
    far = collect(rt, now_ms=T0 + 3650 * DAY_MS)
    assert _exists(r, protected) == (True, False, True) and far.runs_kept == 1
    assert r.exists(keys.run_key("run-s")) == 1
    with pytest.raises(InvalidSpec, match="is protected \\(golden_task\\): unprotect it first"):
        control(r, rt.settings, "delete", protected, actor="bob", now_ms=T0)
    # the default: a star protects
    default = _rt(r)
    (kept,) = _run(default, "run-d", "user_cancelled", T0, n=1)
    after_star = control(r, default.settings, "star", kept, actor="bob", now_ms=T0)
    assert after_star is not None and after_star["protection_reason"] == "user_starred"
    assert collect(default, now_ms=T0 + 8 * DAY_MS).scheduled_deletion == 0
    # unstarred: back on the index by the time it carries
    control(r, default.settings, "unstar", kept, actor="bob", now_ms=T0)
    assert r.zscore(keys.ARTIFACT_EXPIRY, kept) == T0 + 7 * DAY_MS
    assert collect(default, now_ms=T0 + 8 * DAY_MS).scheduled_deletion == 1


def test_an_unprotected_starred_artifact_the_gc_kept_is_deleted_once_unstarred(
    r: redis.Redis,
) -> None:
    """star (which protects), unprotect, GC, unstar: the GC took the starred artifact off the expiry
    index, and unstar used to leave it off for good; it is back on the index and the next GC deletes it."""
    rt = _rt(r)
    (kept,) = _run(rt, "run-u", "user_cancelled", T0, n=1)
    control(r, rt.settings, "star", kept, actor="bob", now_ms=T0)
    control(r, rt.settings, "unprotect", kept, actor="bob", now_ms=T0)
    # the star still protects it: the GC leaves it (and nothing has it on the index)
    assert collect(rt, now_ms=T0 + 8 * DAY_MS).scheduled_deletion == 0
    assert r.zscore(keys.ARTIFACT_EXPIRY, kept) is None
    control(r, rt.settings, "unstar", kept, actor="bob", now_ms=T0)
    assert r.zscore(keys.ARTIFACT_EXPIRY, kept) == T0 + 7 * DAY_MS
    assert collect(rt, now_ms=T0 + 8 * DAY_MS).scheduled_deletion == 1
    assert _exists(r, kept) == (False, False, False)


def test_what_a_run_leaves_has_a_retention_too(r: redis.Redis, tmp_path: Any) -> None:
    """A forgotten run's run-id claim, its own activity stream and workspace files go with its records (runs:claimed grew by one
    a run and workspaces were never deleted); a GC report expires after gc_reports_keep_days."""
    rt = Runtime(
        settings=Settings(
            worker={"workspace_root": tmp_path}, retention={"gc_reports_keep_days": 3}
        ),
        redis=r,
    )
    load_functions(r)
    _run(rt, "run-w", "success", T0)
    r.hset(keys.RUN_CLAIMS, mapping={"run-w": "1-0", "run-other": "2-0"})
    (tmp_path / "run-w" / "sub").mkdir(parents=True)
    (tmp_path / "run-w" / "sub" / "f.txt").write_text("x")
    rt.emit(r, "note", run_id="run-w")  # its own activity stream goes with it too
    assert r.xlen(keys.run_activity_key("run-w")) == 1
    report = collect(rt, now_ms=T0 + 181 * DAY_MS)
    assert report.runs_removed == 1 and report.workspaces_removed == 1
    assert not (tmp_path / "run-w").exists()
    assert not r.exists(keys.run_activity_key("run-w"))
    assert r.hgetall(keys.RUN_CLAIMS) == {"run-other": "2-0"}
    (key,) = r.zrange(keys.GC_REPORTS, 0, -1)
    assert 0 < r.ttl(key) <= 3 * 86_400


# the daily GC driven in a process of its own, with Mother's credentials (as `mother gc run` does)
SCHEDULED_HERE = (
    "from mother.artifacts.collect import collect_here; from mother.config import load_settings; "
    "from mother.runtime import Runtime; rt = Runtime.create(load_settings()); "
    "report = collect_here(rt, now_ms=rt.clock.now_ms(), scheduled=True); "
    "print(report.model_dump() if report else None)"
)


def test_a_killed_gc_leaves_its_report_and_frees_its_day(r: redis.Redis, redis_url: str) -> None:
    """A scheduled GC killed half way (kill -9, in a process of its own): its report so far is there
    (status running, what its finished steps did), and its day is only leased, so once the lease lapses
    the job's retry collects the same day, finishing the work and marking the day done."""
    rt = _rt(r, gc_batch_size=5)
    for n in range(600):
        _run(rt, f"run-k{n}", "user_cancelled", T0 - 30 * DAY_MS, n=1)
    env = {
        **os.environ,
        "MOTHER_REDIS_URL": redis_url,
        "MOTHER_RETENTION__GC_BATCH_SIZE": "5",
        "MOTHER_RETENTION__GC_LEASE_SECONDS": "2",
    }
    proc = subprocess.Popen(
        [sys.executable, "-c", SCHEDULED_HERE],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    day = keys.gc_day_key(rt.clock.today())
    # killed while it deletes, after its first step's report is written
    assert wait_until(
        lambda: r.zcard(keys.GC_REPORTS) >= 1 and r.zcard(keys.ARTIFACT_EXPIRY) < 500,
        timeout=60,
        step=0.001,
    )
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    left = r.zcard(keys.ARTIFACT_EXPIRY)
    (key,) = r.zrange(keys.GC_REPORTS, 0, -1)
    partial = orjson.loads(r.execute_command("JSON.GET", key))
    assert partial["status"] == "running"
    # what it deleted, to its last batch (a batch deleted but not yet written is at most 5)
    assert 600 - left - 5 <= partial["scheduled_deletion"] <= 600 - left
    assert partial["scheduled_deletion"] > 0 and partial["updated_at"] is not None
    assert str(r.get(day)).startswith("running") and 0 < r.ttl(day) <= 2
    assert wait_until(lambda: not r.exists(day), timeout=10)
    # the retry, the same day
    done = subprocess.run(
        [sys.executable, "-c", SCHEDULED_HERE], env=env, capture_output=True, text=True, check=True
    )
    assert "'status': 'completed'" in done.stdout
    # the killed GC's report: interrupted, with what it had done
    assert orjson.loads(r.execute_command("JSON.GET", key, "$.status")) == ["interrupted"]
    assert str(r.get(day)).startswith("done") and r.ttl(day) > 86_400
    assert r.zcard(keys.ARTIFACT_EXPIRY) == 0
    # every deletion is in exactly one batch's entry, the killed GC's too
    named = [
        orjson.loads(f["data"])
        for _, f in r.xrange(keys.ACTIVITY_STREAM, count=100_000)
        if f["type"] == "artifacts_deleted"
    ]
    assert sum(b["count"] for b in named) == 600


def test_archive_and_restore_give_back_the_exact_bytes(r: redis.Redis) -> None:
    rt = _rt(r)
    (artifact_id,) = _run(rt, "run-z", "success", T0, n=1)
    before = r.execute_command("JSON.GET", keys.artifact_key(artifact_id))
    report = collect(rt, now_ms=T0 + 91 * DAY_MS)
    assert report.archived == 1 and report.bytes_freed > 0
    assert r.strlen(keys.archive_artifact_key(artifact_id)) > 0
    meta = read_meta(r, artifact_id)
    assert meta.status == "archived" and meta.archived_at is not None
    restored = restore_artifact(r, rt.settings, artifact_id, actor="bob", now_ms=T0 + 92 * DAY_MS)
    assert restored["status"] == "active"
    assert r.execute_command("JSON.GET", keys.artifact_key(artifact_id)) == before
    assert r.exists(keys.archive_artifact_key(artifact_id)) == 0
    with pytest.raises(InvalidSpec, match="is not archived"):
        restore_artifact(r, rt.settings, artifact_id, actor="bob", now_ms=T0)


def _collect_forever(url: str, now_ms: int) -> None:
    client = redis.Redis.from_url(url, decode_responses=True)
    rt = Runtime(settings=Settings(retention={"gc_batch_size": 5}), redis=client)
    collect(rt, now_ms=now_ms)


def test_a_gc_killed_half_way_is_finished_by_the_next_and_removes_nothing_twice(
    r: redis.Redis, redis_url: str
) -> None:
    rt = _rt(r, gc_batch_size=5)
    all_ids = [a for i in range(400) for a in _run(rt, f"k-{i}", "user_cancelled", T0, n=1)]
    now = T0 + 8 * DAY_MS
    proc = multiprocessing.get_context("fork").Process(
        target=_collect_forever, args=(redis_url, now)
    )
    proc.start()
    wait_until(lambda: r.zcard(keys.ARTIFACT_EXPIRY) < 300, timeout=60, step=0.001)
    os.kill(proc.pid, signal.SIGKILL)
    proc.join()
    left = r.zcard(keys.ARTIFACT_EXPIRY)
    assert 0 < left < 400, "the first GC was killed before it finished"
    report = collect(rt, now_ms=now)
    assert report.scheduled_deletion == left and report.errors == []
    assert all(_exists(r, a) == (False, False, False) for a in all_ids)
    batches = [
        orjson.loads(f["data"])
        for _, f in r.xrange(keys.ACTIVITY_STREAM, count=100_000)
        if f["type"] == "artifacts_deleted"
    ]
    # each once: a batch's entry names its artifacts (5 a batch here)
    deleted = [a for b in batches for a in b["ids"]]
    assert sorted(deleted) == sorted(all_ids) and all(b["count"] <= 5 for b in batches)


def test_dry_run_changes_nothing(r: redis.Redis) -> None:
    rt = _rt(r)
    ids = _run(rt, "run-y", "user_cancelled", T0)
    snapshot = {a: _exists(r, a) for a in ids}
    report = collect(rt, now_ms=T0 + 100 * DAY_MS, dry_run=True)
    assert (report.scheduled_deletion, report.runs_removed, report.dry_run) == (2, 1, True)
    assert {a: _exists(r, a) for a in ids} == snapshot and r.zcard(keys.GC_REPORTS) == 0


def test_controls_refuse_what_is_wrong(r: redis.Redis) -> None:
    rt = _rt(r)
    (artifact_id,) = _run(rt, "run-c", "success", T0, n=1)
    for op, reason, says in (
        ("protect", "whim", "protect needs --reason"),
        ("explode", "", "unknown artifact op"),
    ):
        with pytest.raises(InvalidSpec, match=says):
            control(r, rt.settings, op, artifact_id, actor="bob", now_ms=T0, reason=reason)
    off = _rt(r, exceptions={"compliance_required": False})
    with pytest.raises(InvalidSpec, match="compliance_required is off"):
        control(
            r, off.settings, "protect", artifact_id, actor="bob", now_ms=T0, reason="compliance"
        )
    with pytest.raises(Exception, match="no artifact 'art-nope'"):
        control(r, rt.settings, "star", "art-nope", actor="bob", now_ms=T0)
    assert [m["artifact_id"] for m in list_for_run(r, "run-c")] == [artifact_id]


def test_two_schedulers_one_gc_a_day_and_a_missed_day_caught_up(r: redis.Redis) -> None:
    """The cron job takes its day with SET NX: a second scheduler's job that day does nothing. A
    scheduler starting after a day whose 02:00 passed with no GC enqueues one; after one ran, none."""
    rt = _rt(r)
    live_host(r, "gc-host", queues=["maintenance"])
    queue = Queue(
        keys.host_queue("gc-host", "maintenance"),
        connection=redis.Redis(**_plain(r)),
        serializer=JSONSerializer,
    )
    assert catch_up(rt, "0 2 * * *", queue) is True
    assert queue.count == 1
    job = queue.jobs[0]
    assert job.func_name == "workers.gc.scheduled"
    # the day's GC ran: a second scheduler starting now enqueues nothing
    from datetime import UTC, datetime

    from croniter import croniter

    now = datetime.fromtimestamp(rt.clock.now_ms() / 1000, UTC).replace(tzinfo=None)
    day = croniter("0 2 * * *", now).get_prev(datetime).strftime("%Y-%m-%d")
    assert r.set(keys.gc_day_key(day), "x", nx=True)
    assert catch_up(rt, "0 2 * * *", queue) is False and queue.count == 1
    # RQ's cron job enqueues JSON our workers read
    cron_job = JsonCronJob(
        queue_name="maintenance", func_name="workers.gc.scheduled", cron="0 2 * * *"
    )
    enqueued = cron_job.enqueue(redis.Redis(**_plain(r)))
    assert enqueued.func_name == "workers.gc.scheduled" and queue.count == 2


def test_a_days_gc_whose_job_died_is_enqueued_again_by_the_crons_next_tick(r: redis.Redis) -> None:
    """The day's GC held by a job that failed (its work-horse killed) or is gone: the cron's catch-up
    (run at every tick) frees the day and enqueues the GC again, without RQ's scheduler; a job still
    waiting on the queue, or a GC running or done, is left alone."""
    from datetime import UTC, datetime

    from croniter import croniter

    rt = _rt(r)
    rq_redis = redis.Redis(**_plain(r))
    queue = Queue(
        keys.host_queue("gc-host", "maintenance"), connection=rq_redis, serializer=JSONSerializer
    )
    now = datetime.fromtimestamp(rt.clock.now_ms() / 1000, UTC).replace(tzinfo=None)
    day = croniter("0 2 * * *", now).get_prev(datetime).strftime("%Y-%m-%d")
    day_key = keys.gc_day_key(day)
    # a GC whose job is gone (its horse killed, its hash expired) holds the day
    r.set(day_key, "running 0f0f-gone 2026-11-28T02:00:00.000Z", ex=300)
    assert catch_up(rt, "0 2 * * *", queue) is True
    assert queue.count == 1 and not r.exists(day_key)
    # that job waits on the queue: the next tick enqueues nothing more
    assert catch_up(rt, "0 2 * * *", queue) is False and queue.count == 1
    # it started and its horse was killed (RQ marks it failed): the day is freed, the GC enqueued
    job = queue.jobs[0]
    queue.remove(job)
    job.set_status(JobStatus.FAILED)
    r.set(day_key, f"running {job.id} 2026-11-28T02:00:01.000Z", ex=300)
    assert catch_up(rt, "0 2 * * *", queue) is True and queue.count == 1
    # a GC running (its job started) or done: nothing
    running = queue.jobs[0]
    queue.remove(running)
    running.set_status(JobStatus.STARTED)
    r.set(day_key, f"running {running.id} 2026-11-28T02:00:02.000Z", ex=300)
    assert catch_up(rt, "0 2 * * *", queue) is False
    r.set(day_key, "done 2026-11-28T02:10:00.000Z")
    assert catch_up(rt, "0 2 * * *", queue) is False and queue.count == 0


def _plain(r: redis.Redis) -> dict[str, Any]:
    kwargs = r.connection_pool.connection_kwargs
    return {"host": kwargs["host"], "port": kwargs["port"], "db": kwargs.get("db", 0)}


# -- with real Mother and workers ------------------------------------------------------------------


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pipeline]:
    p = start_pipeline(tmp_path_factory.mktemp("gc"))
    yield p
    stop_pipeline(p)


def test_mother_sets_retention_at_a_runs_end_and_the_gc_job_runs_once_a_day(
    stack: Pipeline,
) -> None:
    run_id = stack.client.submit(example("three-phase"))
    envelope = stack.wait(run_id)
    end_ms = envelope.termination.timestamp_ms
    assert end_ms is not None
    for artifact_id in envelope.artifacts:
        meta = read_meta(stack.redis, artifact_id)
        assert meta.retention_class == "success"
        assert meta.expires_at == iso_from_ms(end_ms + 180 * DAY_MS)
        assert meta.archive_due_at == iso_from_ms(end_ms + 90 * DAY_MS)
        assert stack.redis.zscore(keys.ARTIFACT_EXPIRY, artifact_id) == end_ms + 180 * DAY_MS
    assert stack.redis.zscore(keys.RUN_RETENTION, run_id) == end_ms + 180 * DAY_MS
    # the scheduled job on a real worker: the first of the day collects, the second does nothing
    queue = Queue(
        keys.host_queue("local-0", "maintenance"),
        connection=redis.Redis.from_url(stack.url),
        serializer=JSONSerializer,
    )
    first = queue.enqueue_call("workers.gc.scheduled", job_id=keys.host_job_id("local-0", "gc-1"))
    second = queue.enqueue_call("workers.gc.scheduled", job_id=keys.host_job_id("local-0", "gc-2"))
    wait_until(
        lambda: (
            first.get_status(refresh=True) == "finished"
            and second.get_status(refresh=True) == "finished"
        ),
        timeout=60,
    )
    results = sorted([first.return_value(), second.return_value()], key=lambda x: "skipped" in x)
    assert "scanned_count" in results[0] and results[1]["skipped"] is True
    assert len(reports(stack.redis)) == 1


def test_gc_and_artifacts_cli(stack: Pipeline) -> None:
    env = {"MOTHER_REDIS_URL": stack.url}
    run_id = stack.client.submit(example("three-phase"))
    artifact_id = stack.wait(run_id).artifacts[0]
    listed = run_cli("artifacts", "list", run_id, env=env)
    assert listed.returncode == 0 and artifact_id in listed.stdout and "success" in listed.stdout
    starred = run_cli("artifacts", "star", artifact_id, "--actor", "bob", env=env)
    assert starred.returncode == 0 and "protected True (user_starred)" in starred.stdout
    refused = run_cli("artifacts", "delete", artifact_id, env=env)
    assert refused.returncode != 0 and "is protected" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    shown = orjson.loads(run_cli("artifacts", "show", artifact_id, env=env).stdout)
    assert shown["metadata"]["user_starred"] is True and "content_preview" in shown
    dry = run_cli("gc", "run", "--dry-run", "--now", "2099-01-01T00:00:00.000Z", env=env)
    assert dry.returncode == 0 and "dry run" in dry.stdout
    assert read_meta(stack.redis, artifact_id).status == "active"
    ran = run_cli("gc", "run", "--now", "2099-01-01T00:00:00.000Z", env=env)
    assert ran.returncode == 0, ran.stderr
    assert _exists(stack.redis, artifact_id) == (True, False, True)  # starred: kept
    assert stack.redis.exists(keys.run_key(run_id)) == 1  # its run explains it
    shown_reports = run_cli("gc", "reports", env=env)
    assert shown_reports.returncode == 0 and "GC reports" in shown_reports.stdout
    bad = run_cli("gc", "run", "--now", "yesterday", env=env)
    assert bad.returncode != 0 and "is not a time" in bad.stderr
    unknown = run_cli("artifacts", "show", "art-nope", env=env)
    assert unknown.returncode != 0 and "no artifact 'art-nope'" in unknown.stderr


def test_mother_cron_catches_a_missed_day_up(stack: Pipeline) -> None:
    """`mother cron` at start: the last 02:00 passed with no GC that day, so it enqueues one, which a
    worker runs (a report appears); it keeps running as RQ's cron scheduler until stopped."""
    from mother.clock import ServerClock

    for key in stack.redis.scan_iter(match="gc:day:*"):
        stack.redis.delete(key)
    before = stack.redis.zcard(keys.GC_REPORTS)
    proc = stack.stack.spawn("cron", "cron")
    try:
        wait_until(lambda: stack.redis.zcard(keys.GC_REPORTS) > before, timeout=60)
        assert proc.poll() is None, "mother cron exited"
        assert stack.redis.exists(keys.gc_day_key(ServerClock(stack.redis).today())) or any(
            stack.redis.scan_iter(match="gc:day:*")
        )
    finally:
        proc.terminate()
        proc.wait(10)
