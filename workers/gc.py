"""The artifact garbage collector (seed 003 §6), an RQ job on the ``maintenance`` queue:
``workers.gc.run`` (collect now) and ``workers.gc.scheduled`` (the daily cron's job: one per day).

It reads only what is due, from three sorted sets scored by time (``artifacts:archive_due``,
``artifacts:expiry``, ``retention:runs``), never every artifact: its cost grows with what expired, not
with what is stored. It works in batches of ``retention.gc_batch_size``; each item is one server call
that checks the item is still due before changing it (``mother/lua/gc.lua``), so a GC killed half way
and run again finishes the first's work and removes nothing twice, and no call holds Redis for long.

1. archive: each due artifact's content is compressed (gzip) into ``archive:artifact:{id}`` and its
   active copy removed; metadata ``archived``, ``archived_at``;
2. expire: each expired artifact is deleted (content, archive, metadata), unless protected (taken off
   the index) or starred without protection (its owner told, deleted ``notify_before_delete_days``
   later);
3. runs: each ended run whose retention passed loses its own records (run, termination, result,
   budgets, contexts, conflicts, ledger entry) and its entries in the run indexes, unless one of its
   artifacts is starred or protected (then it is kept another ``records_keep_days``).

The report goes to ``gc_report:{timestamp}`` (listed in ``gc:reports``) and a ``garbage_collection``
activity entry. The maintenance worker's ACL user must be allowed to delete run records
(``deploy/users.acl``: ``maintenance``); without it the run step's refusals are the report's errors.
"""

from __future__ import annotations

import gzip
import hashlib
import shutil
import time
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

import orjson
import redis
from rq import get_current_job

from mother import activity, keys
from mother.acl import role_of, whoami
from mother.artifacts.policy import DAY_MS
from mother.errors import ConfigError, InvalidSpec
from mother.functions import call, execute
from mother.logs import get_logger
from mother.records.artifacts import artifact_keys, due
from mother.records.metrics import queue_count
from mother.runtime import Runtime
from schemas import ms_from_iso
from schemas.artifact import GCError, GCReport
from workers.workspaces import blobs_for

__all__ = ["collect", "parse_now", "run", "scheduled"]

log = get_logger("gc")


def _runtime() -> Runtime:
    """The job's runtime. The GC's own ACL user (``maintenance``) may not append to Mother's activity
    stream: its entries go through the inbox, which Mother moves onto the stream."""
    from workers.phase import runtime

    rt = runtime()
    if role_of(whoami(rt.redis)) == "maintenance":
        activity.append_through_inbox()
    return rt


def run(now: str | None = None, dry_run: bool = False) -> dict[str, Any]:
    """The job: collect as of ``now`` (ISO-8601; default the server's clock). Returns the report."""
    rt = _runtime()
    now_ms = parse_now(now) if now is not None else rt.clock.now_ms()
    return collect(rt, now_ms=now_ms, dry_run=dry_run).model_dump(mode="json")


def scheduled() -> dict[str, Any]:
    """The daily cron's job: the first scheduler's job of a (server, UTC) day collects; another
    scheduler's job that day finds the day taken (done, or being collected) and does nothing. The day
    is held on a lease (naming this job) while the GC runs and marked done when it finishes: a GC
    killed half way (its work-horse killed, the machine gone) frees the day, and ``mother cron``
    enqueues the day's GC again (``mother.artifacts.schedule.catch_up``); the GC is idempotent: it
    finishes what the first began."""
    rt = _runtime()
    day = rt.clock.today()
    key = keys.gc_day_key(day)
    lease = rt.settings.retention.gc_lease_seconds
    job = get_current_job()
    holder = f"running {job.id if job is not None else '-'} {rt.clock.now_iso()}"
    if not rt.redis.set(key, holder, nx=True, ex=lease):
        held = rt.redis.get(key)
        held = held.decode() if isinstance(held, bytes) else held
        log.info("gc_skipped", day=day, why=f"today's GC is taken ({held})")
        return {"skipped": True, "day": day}
    report = collect(rt, now_ms=rt.clock.now_ms(), renew=lambda: rt.redis.expire(key, lease))
    rt.redis.set(key, f"done {report.finished_at}", ex=3 * 86_400)
    return report.model_dump(mode="json")


def parse_now(text: str) -> int:
    try:
        return ms_from_iso(text)
    except ValueError:
        raise InvalidSpec(
            f"now {text!r} is not a time: use ISO-8601 UTC, e.g. 2026-11-24T02:00:00.000Z"
        ) from None


@dataclass
class _Step:
    """Going through one index: what it found, and how many stayed on it (changed meanwhile)."""

    stuck: int = 0


@dataclass
class _Collection:
    """One GC under way: what it collects as of, in what batches, and its report, written (``save``)
    after each batch so a GC killed half way leaves what it did."""

    rt: Runtime
    report: GCReport
    now_ms: int
    batch: int
    dry_run: bool
    key: str
    started_ms: int
    keep_s: int
    renew: Any = None

    def save(self) -> None:
        """Write the report as it stands (``status: running``) and renew the day's lease."""
        if not self.dry_run:
            self.report.updated_at = self.rt.clock.now_iso()
            pipe = self.rt.redis.pipeline(transaction=True)
            _queue_save(pipe, self.key, self.report, self.started_ms, self.keep_s)
            pipe.execute()
        if self.renew is not None:
            self.renew()


def collect(rt: Runtime, *, now_ms: int, dry_run: bool = False, renew: Any = None) -> GCReport:
    """One GC as of ``now_ms``. Its report is written after each batch (``status: running``), so a GC
    killed half way leaves what it did (the next GC marks it ``interrupted``); ``renew`` is called
    after each batch (its day's lease)."""
    started_ms = rt.clock.now_ms()
    t0 = time.monotonic()
    report = GCReport(
        started_at=rt.clock.iso(started_ms),
        finished_at=rt.clock.iso(started_ms),
        now=rt.clock.iso(now_ms),
        dry_run=dry_run,
        status="running",
    )
    keep_s = int(rt.settings.retention.gc_reports_keep_days * 86_400)
    c = _Collection(
        rt,
        report,
        now_ms,
        rt.settings.retention.gc_batch_size,
        dry_run,
        keys.gc_report_key(report.started_at),
        started_ms,
        keep_s,
        renew,
    )
    try:
        if not dry_run:
            _mark_interrupted(rt)
        for step in (_archive, _expire, _runs):
            step(c)
            c.save()
        _access_logs(rt, report, now_ms, dry_run)
    except redis.exceptions.NoPermissionError as exc:
        raise ConfigError(
            f"the GC's ACL user may not read or change what it collects ({exc}): run the maintenance "
            "worker as the ACL user `maintenance` (deploy/users.acl)"
        ) from None
    report.duration_ms = int((time.monotonic() - t0) * 1000)
    report.finished_at = report.updated_at = rt.clock.now_iso()
    report.status = "completed"
    if not dry_run:
        pipe = rt.redis.pipeline(transaction=True)
        _queue_save(pipe, c.key, report, started_ms, keep_s)
        # reports past their retention leave the listing (their keys expire by themselves)
        pipe.zremrangebyscore(keys.GC_REPORTS, "-inf", started_ms - keep_s * 1000)
        queue_count(pipe, "gc_runs")
        rt.emit(
            pipe,
            "garbage_collection",
            agent="system",
            message=f"GC completed: {report.archived} archived, {report.scheduled_deletion} deleted",
            **report.model_dump(mode="json", exclude={"errors"}),
            errors=len(report.errors),
        )
        pipe.execute()
    # a dry run changes nothing: its caller prints the report
    (log.debug if dry_run else log.info)(
        "gc_done", **report.model_dump(mode="json", exclude={"errors"}), errors=len(report.errors)
    )
    return report


# how many of the newest reports a GC looks at for one left running by a GC killed half way
_RECENT_REPORTS = 20


def _mark_interrupted(rt: Runtime) -> None:
    """Reports still ``running`` but not written for longer than the GC's lease were left by a GC killed
    half way: they say ``interrupted`` (their counts stay what that GC had done)."""
    recent = rt.redis.zrevrange(keys.GC_REPORTS, 0, _RECENT_REPORTS - 1)
    if not recent:
        return
    names = [_text(k) for k in recent]
    raws = rt.redis.execute_command("JSON.MGET", *names, "$")
    stale_before = rt.clock.now_ms() - rt.settings.retention.gc_lease_seconds * 1000
    for name, raw in zip(names, raws, strict=True):
        doc = orjson.loads(raw)[0] if raw else None
        if not doc or doc.get("status") != "running":
            continue
        written = doc.get("updated_at") or doc.get("started_at")
        if written and ms_from_iso(written) < stale_before:
            rt.redis.execute_command("JSON.SET", name, "$.status", '"interrupted"', "XX")
            log.warning("gc_report_interrupted", report=name, last_written=written)


def _queue_save(pipe: Any, key: str, report: GCReport, started_ms: int, keep_s: int) -> None:
    """Queue writing the report (listed in gc:reports), to expire after
    ``retention.gc_reports_keep_days``."""
    pipe.execute_command("JSON.SET", key, "$", report.to_json())
    pipe.expire(key, keep_s)
    pipe.zadd(keys.GC_REPORTS, {key: started_ms})


def _batches(c: _Collection, index: str, step: _Step) -> Any:
    """Batches of due members of ``index`` (counted in the report): each run removes what it handled, so
    the next batch starts past those that stayed (a dry run removes nothing, so it pages). The report
    is written once a batch is handled."""
    offset = 0
    while True:
        ids = due(c.rt.redis, index, c.now_ms, c.batch, start=offset if c.dry_run else step.stuck)
        if not ids:
            return
        c.report.batches += 1
        c.report.scanned_count += len(ids)
        yield ids
        offset += len(ids)
        c.save()


def _archive(c: _Collection) -> None:
    rt, report, now_ms, dry_run = c.rt, c.report, c.now_ms, c.dry_run
    step = _Step()
    for ids in _batches(c, keys.ARTIFACT_ARCHIVE_DUE, step):
        read = rt.redis.pipeline(transaction=False)
        for artifact_id in ids:
            read.execute_command("JSON.GET", keys.artifact_key(artifact_id))
            read.execute_command("JSON.GET", keys.artifact_meta_key(artifact_id), "$.protected")
        raws = read.execute()
        if dry_run:
            for i in range(len(ids)):
                protected = raws[2 * i + 1] and orjson.loads(raws[2 * i + 1]) == [True]
                if protected:
                    report.protected += 1
                elif raws[2 * i] is not None:
                    report.archived += 1
            continue
        pipe = rt.redis.pipeline(transaction=False)
        for i, artifact_id in enumerate(ids):
            raw = raws[2 * i]
            text = raw if isinstance(raw, bytes) else (raw or "").encode()
            blob = gzip.compress(text, mtime=0) if rt.settings.retention.archive.compress else text
            call(
                pipe,
                "mh_gc_archive",
                [*artifact_keys(artifact_id)[:3], keys.ARTIFACT_ARCHIVE_DUE],
                [artifact_id, now_ms, hashlib.sha1(text).hexdigest(), blob],
            )
        for artifact_id, reply in zip(ids, execute(pipe, raise_on_error=False), strict=True):
            outcome = _outcome(report, artifact_id, reply)
            if outcome == "archived":
                report.archived += 1
                report.bytes_freed += max(0, int(reply[1]))
            elif outcome == "protected":
                report.protected += 1
            elif outcome in ("changed", "not_due", "error"):
                step.stuck += 1


def _expire(c: _Collection) -> None:
    rt, report, now_ms, dry_run = c.rt, c.report, c.now_ms, c.dry_run
    policy = rt.settings.retention
    # a starred artifact: protected forever (exceptions.user_starred), or deleted after a notice
    notify = (
        "" if policy.exceptions.user_starred else int(policy.notify_before_delete_days * DAY_MS)
    )
    step = _Step()
    for ids in _batches(c, keys.ARTIFACT_EXPIRY, step):
        if dry_run:
            _expire_dry(rt, report, ids, notify == "")
            continue
        # the runs they belong to (a starred one's deletion_scheduled entry goes to its run's stream too)
        owners = rt.redis.execute_command(
            "JSON.MGET", *(keys.artifact_meta_key(a) for a in ids), "$.run_id"
        )
        runs = [_owner(owner) for owner in owners]
        pipe = rt.redis.pipeline(transaction=False)
        for artifact_id, run_id in zip(ids, runs, strict=True):
            call(
                pipe,
                "mh_gc_expire",
                [
                    *artifact_keys(artifact_id),
                    keys.ARTIFACT_EXPIRY,
                    keys.ARTIFACT_ARCHIVE_DUE,
                    activity.global_key(),
                    keys.GC_DELETED,
                    *([keys.run_activity_key(run_id)] if run_id else []),
                ],
                [artifact_id, now_ms, notify, rt.settings.service.activity_maxlen],
            )
        _drain(pipe, rt, keys.GC_DELETED, "artifacts_deleted", now=rt.clock.now_ms())
        replies = execute(pipe, raise_on_error=False)[:-1]
        for artifact_id, run_id, reply in zip(ids, runs, replies, strict=True):
            outcome = _outcome(report, artifact_id, reply)
            if outcome in ("deleted", "gone"):
                report.scheduled_deletion += 1
                report.keys_removed += int(reply[2])
                report.bytes_freed += int(reply[1])
                if run_id is not None and keys.workspace_artifact_id(run_id) == artifact_id:
                    # a workspace artifact's contents go with it
                    report.keys_removed += _drop_stored_workspace(rt, run_id)
            elif outcome == "protected":
                report.protected += 1
            elif outcome == "deferred":
                report.deferred += 1
            else:
                step.stuck += 1


def _expire_dry(rt: Runtime, report: GCReport, ids: list[str], star_protects: bool) -> None:
    metas = rt.redis.execute_command("JSON.MGET", *(keys.artifact_meta_key(a) for a in ids), "$")
    for raw in metas:
        doc = orjson.loads(raw)[0] if raw else {}
        if doc.get("protected") or (doc.get("user_starred") and star_protects):
            report.protected += 1
        elif doc.get("user_starred") and doc.get("status") != "scheduled_deletion":
            report.deferred += 1
        else:
            report.scheduled_deletion += 1


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _workspace_keys(run_id: str, blobs: Collection[Any]) -> list[str]:
    """The run's stored workspace: its manifest, its set of contents and each content (``blobs``: their
    SHA-256)."""
    return [
        keys.workspace_key(run_id),
        keys.workspace_blobs_key(run_id),
        *(keys.workspace_blob_key(run_id, _text(sha)) for sha in blobs),
    ]


def _owner(raw: Any) -> str | None:
    """The run an artifact's ``$.run_id`` (as JSON.MGET read it) names, or None."""
    found = orjson.loads(raw) if raw else []
    return found[0] if found and keys.is_id(found[0]) else None


def _drop_stored_workspace(rt: Runtime, run_id: str) -> int:
    """Delete the stored workspace of ``run_id``, whose workspace artifact was just deleted; returns the
    keys removed."""
    blobs = rt.redis.smembers(keys.workspace_blobs_key(run_id))
    removed = int(rt.redis.delete(*_workspace_keys(run_id, blobs)))
    _delete_contents(rt, run_id, [_text(sha) for sha in blobs])
    return removed


def _delete_contents(rt: Runtime, run_id: str, shas: list[str]) -> None:
    """A removed workspace's contents in the object store (``worker.workspace_store: s3``; in Redis they
    went with its keys)."""
    if shas and rt.settings.worker.workspace_store == "s3":
        blobs_for(rt.settings, rt.redis).delete(run_id, shas)


def _run_keys(
    run_id: str, state: dict[str, Any] | None, blobs: Collection[Any] | None = ()
) -> list[str]:
    """The run's own keys (what its record names, and the rest by its id; ``blobs``: the SHA-256 of its
    stored workspace contents, None while its workspace artifact keeps them)."""
    phases = len((state or {}).get("spec", {}).get("pipeline", [])) or 32
    return [
        keys.run_key(run_id),
        keys.termination_key(run_id),
        keys.result_key(run_id),
        keys.run_budget_key(run_id),
        keys.run_limits_key(run_id),
        keys.run_activity_key(run_id),
        keys.ledger_key(run_id),
        keys.ledger_children_key(run_id),
        *(keys.context_key(run_id, i) for i in range(phases)),
        *(keys.conflict_key(c) for c in (state or {}).get("conflicts", [])),
        *(_workspace_keys(run_id, blobs) if blobs is not None else []),
    ]


def _runs(c: _Collection) -> None:
    rt, report, now_ms, dry_run = c.rt, c.report, c.now_ms, c.dry_run
    keep_ms = int(rt.settings.retention.records_keep_days * DAY_MS)
    step = _Step()
    for ids in _batches(c, keys.RUN_RETENTION, step):
        read = rt.redis.pipeline(transaction=False)
        for run_id in ids:
            read.execute_command("JSON.GET", keys.run_key(run_id))
            read.execute_command("JSON.GET", keys.termination_key(run_id), "$.reason")
            read.smembers(keys.workspace_blobs_key(run_id))
            read.exists(keys.artifact_meta_key(keys.workspace_artifact_id(run_id)))
        raws = read.execute()
        states = [orjson.loads(raws[4 * i]) if raws[4 * i] else None for i in range(len(ids))]
        needed = _needed(rt, states)
        pipe = rt.redis.pipeline(transaction=False)
        planned: list[tuple[str, str]] = []
        contents: dict[str, list[str]] = {}
        for i, run_id in enumerate(ids):
            state = states[i]
            reasons = orjson.loads(raws[4 * i + 1]) if raws[4 * i + 1] else []
            # a workspace artifact still there (its retention, a star, a protection) keeps the contents
            blobs = None if raws[4 * i + 3] else raws[4 * i + 2]
            if blobs:
                contents[run_id] = [_text(sha) for sha in blobs]
            if needed[i]:
                report.runs_kept += 1
                if not dry_run:
                    pipe.zadd(keys.RUN_RETENTION, {run_id: now_ms + keep_ms})
                    planned.append((run_id, "kept"))
                continue
            if dry_run:
                report.runs_removed += 1
                continue
            user = (state or {}).get("user_id")
            reason = reasons[0] if reasons else (state or {}).get("reason")
            call(
                pipe,
                "mh_gc_forget_run",
                [
                    keys.RUN_RETENTION,
                    keys.RUNS_INDEX,
                    keys.user_runs_key(user) if user else keys.RUNS_INDEX,
                    keys.termination_reason_index_key(reason) if reason else keys.RUNS_INDEX,
                    keys.GC_FORGOTTEN,
                    keys.RUN_CLAIMS,
                    *_run_keys(run_id, state, blobs),
                ],
                [run_id, now_ms],
            )
            planned.append((run_id, "forget"))
        if dry_run or not planned:
            continue
        _drain(pipe, rt, keys.GC_FORGOTTEN, "run_records_removed", now=rt.clock.now_ms())
        for (run_id, what), reply in zip(
            planned, execute(pipe, raise_on_error=False)[:-1], strict=True
        ):
            if what == "kept":
                continue
            if _outcome(report, run_id, reply) == "error" or int(reply[0]) < 0:
                step.stuck += 1
            else:
                report.runs_removed += 1
                report.workspaces_removed += _remove_workspace(rt, run_id)
                _delete_contents(rt, run_id, contents.get(run_id, []))
                report.keys_removed += int(reply[0])
                report.bytes_freed += int(reply[1])


# what a batch's activity entry names of its items, at most (the count is whole)
ENTRY_IDS = 50


def _drain(pipe: Any, rt: Runtime, pending: str, kind: str, *, now: int) -> None:
    """Queue the batch's one activity entry (one per item flooded the capped stream and pushed every
    run's history out of it): what the batch's calls listed in ``pending``, and any a GC killed
    before its entry left there, in the same step that empties it."""
    call(
        pipe,
        "mh_gc_drain",
        [pending, activity.global_key()],
        [kind, rt.settings.service.activity_maxlen, now, ENTRY_IDS],
    )


def _remove_workspace(rt: Runtime, run_id: str) -> int:
    """Delete the run's workspace files on this host (``worker.workspace_root/{run_id}``), when there
    are any: 1 when removed. Its symlinks are removed, never followed."""
    root = rt.settings.worker.workspace_root
    target = root / run_id
    if not target.is_dir() or target.is_symlink() or target.resolve().parent != root.resolve():
        return 0
    try:
        shutil.rmtree(target)
    except OSError as exc:
        log.warning("workspace_not_removed", run_id=run_id, error=str(exc))
        return 0
    return 1


def _access_logs(rt: Runtime, report: GCReport, now_ms: int, dry_run: bool) -> None:
    """Each library's access-log timeline loses the entries past its policy's retention_days (the logs
    themselves expire by their TTL)."""
    for member in rt.redis.smembers(keys.LIBRARIES_INDEX):
        library_id = member.decode() if isinstance(member, bytes) else str(member)
        raw = rt.redis.execute_command(
            "JSON.GET", keys.library_policy_key(library_id), "$.audit.retention_days"
        )
        days = orjson.loads(raw)[0] if raw else None
        if not isinstance(days, int):
            continue
        cutoff = now_ms - days * DAY_MS
        timeline = keys.access_logs_key(library_id)
        if not dry_run:
            report.access_logs_pruned += int(rt.redis.zremrangebyscore(timeline, "-inf", cutoff))


def _needed(rt: Runtime, states: list[dict[str, Any] | None]) -> list[bool]:
    """For each run, whether an artifact of it that is still there is starred or protected (its run
    explains it): one round trip for the batch."""
    pipe = rt.redis.pipeline(transaction=False)
    asked = []
    for state in states:
        artifacts = (state or {}).get("artifacts") or []
        if artifacts:
            pipe.execute_command("JSON.MGET", *(keys.artifact_meta_key(a) for a in artifacts), "$")
        asked.append(bool(artifacts))
    replies = iter(pipe.execute() if any(asked) else [])
    out = []
    for has_artifacts in asked:
        docs = [orjson.loads(raw)[0] for raw in next(replies) if raw] if has_artifacts else []
        out.append(any(d and (d.get("protected") or d.get("user_starred")) for d in docs))
    return out


def _outcome(report: GCReport, item: str, reply: Any) -> str:
    """The server call's outcome for ``item`` ('error' when it failed: kept in the report)."""
    if isinstance(reply, Exception):
        why = str(reply)
        if isinstance(reply, redis.exceptions.NoPermissionError):
            why += " (run the maintenance worker as the ACL user `maintenance`: deploy/users.acl)"
        if len(report.errors) < 100:
            report.errors.append(GCError(artifact_id=item, error=why[:4000]))
        return "error"
    outcome = reply[0]
    return outcome.decode() if isinstance(outcome, bytes) else str(outcome)
