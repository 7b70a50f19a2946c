"""The artifact garbage collector (seed 003 §6), applied by Mother: what is due is collected batch by
batch, each batch one call of :func:`apply` (``archive``, ``expire``, ``forget``), between ``begin`` and
``end``. The GC job runs on a worker host enrolled for ``maintenance`` (:mod:`workers.gc`): it reads
which ids are due (``artifacts:archive_due``, ``artifacts:expiry``, ``retention:runs``, the only keys of
Mother's its user may read) and asks Mother to apply each batch; ``mother gc run`` (Mother's URL) drives
the same steps here. Mother checks each item again before it changes it: every item is one server call
that finds it still due and not protected (``mother/lua/gc.lua``), so a GC killed half way and run again
finishes the first's work and removes nothing twice, and whatever ids a host sends, nothing protected or
live goes.

1. archive: each due artifact's content is compressed (gzip) into ``archive:artifact:{id}`` and its
   active copy removed; metadata ``archived``, ``archived_at``;
2. expire: each expired artifact is deleted (content, archive, metadata), unless protected (taken off
   the index) or starred without protection (its owner told, deleted ``notify_before_delete_days``
   later);
3. runs: each ended run whose retention passed loses its own records (run, termination, result,
   budgets, contexts, conflicts, ledger entry) and its entries in the run indexes, unless one of its
   artifacts is starred or protected (then it is kept another ``records_keep_days``).

The report goes to ``gc_report:{timestamp}`` (listed in ``gc:reports``), written after each batch, and
a ``garbage_collection`` activity entry at the end.
"""

from __future__ import annotations

import gzip
import hashlib
import shutil
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

import orjson

from mother import activity, keys
from mother.artifacts.policy import DAY_MS
from mother.errors import InvalidSpec
from mother.functions import call, execute
from mother.logs import get_logger
from mother.records.artifacts import artifact_keys, due
from mother.records.metrics import queue_count
from mother.runtime import Runtime
from schemas import ms_from_iso
from schemas.artifact import GCError, GCReport

__all__ = ["OPS", "apply", "collect", "collect_here", "parse_now", "remove_workspace"]

log = get_logger("gc")
# the steps of a GC, in order: the op that applies a batch, and the index its ids are due in
STEPS = (
    ("archive", keys.ARTIFACT_ARCHIVE_DUE),
    ("expire", keys.ARTIFACT_EXPIRY),
    ("forget", keys.RUN_RETENTION),
)
OPS = frozenset({"begin", "end", *(op for op, _index in STEPS)})
# the counts a batch adds to the report
_COUNTS = (
    "scanned_count",
    "scheduled_deletion",
    "archived",
    "protected",
    "deferred",
    "runs_removed",
    "runs_kept",
    "keys_removed",
    "bytes_freed",
    "batches",
)


def parse_now(text: str) -> int:
    try:
        return ms_from_iso(text)
    except ValueError:
        raise InvalidSpec(
            f"now {text!r} is not a time: use ISO-8601 UTC, e.g. 2026-11-24T02:00:00.000Z"
        ) from None


def collect(
    rt: Runtime,
    asked: Callable[[str, dict[str, Any]], dict[str, Any]],
    reader: Any,
    *,
    now_ms: int,
    dry_run: bool = False,
    scheduled: bool = False,
    job: str = "-",
    forgotten: Callable[[list[str]], int] | None = None,
    outside: Callable[[str, list[str]], Any] | None = None,
) -> GCReport | None:
    """One GC as of ``now_ms``: what is due read on ``reader``, each batch applied by ``asked(op, body)``
    (Mother's :func:`apply`, directly or through a maintenance host's ask). ``scheduled``: the daily
    cron's GC (``job`` names it), which runs only if the day's lease is free (None when another GC has
    the day). ``forgotten(run_ids)``: what the caller removes of runs Mother forgot (their workspace
    directories on its host; returns how many); ``outside(run_id, shas)``: the removed workspaces'
    contents it deletes from the object store (s3: the store's credentials are the GC host's)."""
    begun = asked("begin", {"now": now_ms, "dry_run": dry_run, "scheduled": scheduled, "job": job})
    if begun.get("skipped"):
        log.info("gc_skipped", why=begun.get("why"))
        return None
    report = GCReport.model_validate(begun["report"])
    batch = int(begun["batch"])
    base = {"key": begun["key"], "now": now_ms, "dry_run": dry_run}
    for op, index in STEPS:
        stuck = offset = 0
        while ids := due(reader, index, now_ms, batch, start=offset if dry_run else stuck):
            got = asked(op, {**base, "ids": ids})
            _add(report, got["delta"])
            stuck += int(got["stuck"])
            offset += len(ids)
            if forgotten is not None and got.get("forgotten"):
                report.workspaces_removed += forgotten(list(got["forgotten"]))
            for run_id, shas in (got.get("outside") or {}).items():
                if outside is not None:
                    outside(run_id, list(shas))
    ended = asked("end", {**base, "workspaces_removed": report.workspaces_removed})
    _add(report, ended["delta"])
    return GCReport.model_validate(ended["report"]) if not dry_run else report


def _add(report: GCReport, delta: dict[str, Any]) -> None:
    for name in (*_COUNTS, "access_logs_pruned"):
        setattr(report, name, getattr(report, name) + int(delta.get(name, 0)))
    for error in delta.get("errors", []):
        if len(report.errors) < 100:
            report.errors.append(GCError.model_validate(error))


def apply(rt: Runtime, op: str, body: dict[str, Any]) -> dict[str, Any]:
    """One step of a GC (``op``: begin, archive, expire, forget, end), applied with Mother's credentials;
    what it did comes back as ``delta`` (and for ``forget`` the runs it forgot)."""
    if op not in OPS:
        raise InvalidSpec(f"a GC step is one of {', '.join(sorted(OPS))}, not {str(op)[:40]!r}")
    now_ms, dry_run = body.get("now"), bool(body.get("dry_run"))
    if not isinstance(now_ms, int) or isinstance(now_ms, bool) or now_ms < 0:
        raise InvalidSpec("a GC step names the time it collects as of (now, server ms)")
    if op == "begin":
        return _begin(rt, now_ms, dry_run, bool(body.get("scheduled")), str(body.get("job"))[:100])
    key = body.get("key")
    if not isinstance(key, str) or not key.startswith(keys.GC_REPORT_PREFIX):
        raise InvalidSpec("a GC step names its report (key)")
    if op == "end":
        return _end(rt, key, now_ms, dry_run, int(body.get("workspaces_removed") or 0))
    ids = body.get("ids")
    if not isinstance(ids, list) or len(ids) > 10_000 or not all(keys.is_id(i) for i in ids):
        raise InvalidSpec("a GC batch is a list of at most 10,000 ids")
    delta = GCReport(started_at=_zero, finished_at=_zero, now=_zero)
    delta.batches, delta.scanned_count = 1, len(ids)
    outside: dict[str, list[str]] = {}
    stuck, forgotten = STEP_FUNCTIONS[op](rt, delta, ids, now_ms, dry_run, outside)
    if not dry_run:
        _save_delta(rt, key, delta)
    reply: dict[str, Any] = {"delta": _delta(delta), "stuck": stuck}
    if forgotten:
        reply["forgotten"] = forgotten
    if outside:
        reply["outside"] = outside
    return reply


_zero = "1970-01-01T00:00:00.000Z"


def _delta(report: GCReport) -> dict[str, Any]:
    return {
        **{name: getattr(report, name) for name in (*_COUNTS, "access_logs_pruned")},
        "errors": [e.model_dump(mode="json") for e in report.errors],
    }


def _begin(rt: Runtime, now_ms: int, dry_run: bool, scheduled: bool, job: str) -> dict[str, Any]:
    """A GC starts: the day's lease first for the daily one (another holding it: ``skipped``), the
    reports a GC killed half way left ``running`` marked ``interrupted``, and its own report written."""
    if scheduled:
        day = rt.clock.today()
        held_by = f"running {job} {rt.clock.now_iso()}"
        lease = rt.settings.retention.gc_lease_seconds
        if not rt.redis.set(keys.gc_day_key(day), held_by, nx=True, ex=lease):
            held = rt.redis.get(keys.gc_day_key(day))
            return {"ok": True, "skipped": True, "why": f"today's GC is taken ({held!s})"}
    started_ms = rt.clock.now_ms()
    report = GCReport(
        started_at=rt.clock.iso(started_ms),
        finished_at=rt.clock.iso(started_ms),
        now=rt.clock.iso(now_ms),
        dry_run=dry_run,
        status="running",
        updated_at=rt.clock.iso(started_ms),
    )
    key = keys.gc_report_key(report.started_at)
    if not dry_run:
        _mark_interrupted(rt)
        pipe = rt.redis.pipeline(transaction=True)
        _queue_save(pipe, key, report, started_ms, _keep_s(rt))
        pipe.execute()
    return {
        "ok": True,
        "key": key,
        "report": report.model_dump(mode="json"),
        "batch": rt.settings.retention.gc_batch_size,
        "scheduled": scheduled,
    }


def _keep_s(rt: Runtime) -> int:
    return int(rt.settings.retention.gc_reports_keep_days * 86_400)


def _load(rt: Runtime, key: str) -> GCReport:
    raw = rt.redis.execute_command("JSON.GET", key)
    if raw is None:
        raise InvalidSpec(f"no GC report {key}: a GC step names the report its begin made")
    return GCReport.model_validate_json(raw)


def _save_delta(rt: Runtime, key: str, delta: GCReport) -> None:
    """Add a batch's counts to the stored report (one GC a day runs at a time: its lease) and renew the
    day's lease."""
    report = _load(rt, key)
    _add(report, _delta(delta))
    report.updated_at = rt.clock.now_iso()
    pipe = rt.redis.pipeline(transaction=True)
    _queue_save(pipe, key, report, ms_from_iso(report.started_at), _keep_s(rt))
    day = rt.clock.today()
    held = rt.redis.get(keys.gc_day_key(day))
    if held is not None and str(held).startswith("running"):
        pipe.expire(keys.gc_day_key(day), rt.settings.retention.gc_lease_seconds)
    pipe.execute()


def _end(
    rt: Runtime, key: str, now_ms: int, dry_run: bool, workspaces_removed: int
) -> dict[str, Any]:
    """The GC's last step: the access-log timelines pruned, the report completed, the day marked done."""
    delta = GCReport(started_at=_zero, finished_at=_zero, now=_zero)
    _access_logs(rt, delta, now_ms, dry_run)
    if dry_run:
        return {"ok": True, "delta": _delta(delta), "report": None}
    report = _load(rt, key)
    _add(report, _delta(delta))
    started_ms = ms_from_iso(report.started_at)
    report.workspaces_removed = max(0, workspaces_removed)
    report.duration_ms = max(0, rt.clock.now_ms() - started_ms)
    report.finished_at = report.updated_at = rt.clock.now_iso()
    report.status = "completed"
    pipe = rt.redis.pipeline(transaction=True)
    _queue_save(pipe, key, report, started_ms, _keep_s(rt))
    # reports past their retention leave the listing (their keys expire by themselves)
    pipe.zremrangebyscore(keys.GC_REPORTS, "-inf", started_ms - _keep_s(rt) * 1000)
    queue_count(pipe, "gc_runs")
    day_key = keys.gc_day_key(rt.clock.today())
    held = rt.redis.get(day_key)
    if held is not None and str(held).startswith("running"):
        pipe.set(day_key, f"done {report.finished_at}", ex=3 * 86_400)
    rt.emit(
        pipe,
        "garbage_collection",
        agent="system",
        message=f"GC completed: {report.archived} archived, {report.scheduled_deletion} deleted",
        **report.model_dump(mode="json", exclude={"errors"}),
        errors=len(report.errors),
    )
    pipe.execute()
    log.info(
        "gc_done", **report.model_dump(mode="json", exclude={"errors"}), errors=len(report.errors)
    )
    return {"ok": True, "delta": _delta(delta), "report": report.model_dump(mode="json")}


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


def _archive(
    rt: Runtime,
    report: GCReport,
    ids: list[str],
    now_ms: int,
    dry_run: bool,
    outside: dict[str, list[str]],
) -> tuple[int, list[str]]:
    stuck = 0
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
        return stuck, []
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
            stuck += 1
    return stuck, []


def _expire(
    rt: Runtime,
    report: GCReport,
    ids: list[str],
    now_ms: int,
    dry_run: bool,
    outside: dict[str, list[str]],
) -> tuple[int, list[str]]:
    policy = rt.settings.retention
    # a starred artifact: protected forever (exceptions.user_starred), or deleted after a notice
    notify = (
        "" if policy.exceptions.user_starred else int(policy.notify_before_delete_days * DAY_MS)
    )
    stuck = 0
    if dry_run:
        _expire_dry(rt, report, ids, notify == "")
        return stuck, []
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
                report.keys_removed += _drop_stored_workspace(rt, run_id, outside)
        elif outcome == "protected":
            report.protected += 1
        elif outcome == "deferred":
            report.deferred += 1
        else:
            stuck += 1
    return stuck, []


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


def _drop_stored_workspace(rt: Runtime, run_id: str, outside: dict[str, list[str]]) -> int:
    """Delete the stored workspace of ``run_id``, whose workspace artifact was just deleted; returns the
    keys removed."""
    blobs = rt.redis.smembers(keys.workspace_blobs_key(run_id))
    removed = int(rt.redis.delete(*_workspace_keys(run_id, blobs)))
    _delete_contents(rt, run_id, [_text(sha) for sha in blobs], outside)
    return removed


def _delete_contents(
    rt: Runtime, run_id: str, shas: list[str], outside: dict[str, list[str]]
) -> None:
    """A removed workspace's contents in the object store (``worker.workspace_store: s3``; in Redis they
    went with its keys): named in ``outside``, for the GC's host to delete there (its credentials)."""
    if shas and rt.settings.worker.workspace_store == "s3":
        outside.setdefault(run_id, []).extend(shas)


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
        *(keys.journal_key(run_id, i) for i in range(phases)),
        *(keys.conflict_key(c) for c in (state or {}).get("conflicts", [])),
        *(_workspace_keys(run_id, blobs) if blobs is not None else []),
    ]


def _runs(
    rt: Runtime,
    report: GCReport,
    ids: list[str],
    now_ms: int,
    dry_run: bool,
    outside: dict[str, list[str]],
) -> tuple[int, list[str]]:
    keep_ms = int(rt.settings.retention.records_keep_days * DAY_MS)
    stuck = 0
    forgotten: list[str] = []
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
        return stuck, []
    _drain(pipe, rt, keys.GC_FORGOTTEN, "run_records_removed", now=rt.clock.now_ms())
    for (run_id, what), reply in zip(
        planned, execute(pipe, raise_on_error=False)[:-1], strict=True
    ):
        if what == "kept":
            continue
        if _outcome(report, run_id, reply) == "error" or int(reply[0]) < 0:
            stuck += 1
        else:
            report.runs_removed += 1
            forgotten.append(run_id)
            _delete_contents(rt, run_id, contents.get(run_id, []), outside)
            report.keys_removed += int(reply[0])
            report.bytes_freed += int(reply[1])
    return stuck, forgotten


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


STEP_FUNCTIONS: dict[
    str,
    Callable[
        [Runtime, GCReport, list[str], int, bool, dict[str, list[str]]], tuple[int, list[str]]
    ],
] = {"archive": _archive, "expire": _expire, "forget": _runs}


def _outcome(report: GCReport, item: str, reply: Any) -> str:
    """The server call's outcome for ``item`` ('error' when it failed: kept in the report)."""
    if isinstance(reply, Exception):
        why = str(reply)
        if len(report.errors) < 100:
            report.errors.append(GCError(artifact_id=item, error=why[:4000]))
        return "error"
    outcome = reply[0]
    return outcome.decode() if isinstance(outcome, bytes) else str(outcome)


def collect_here(
    rt: Runtime,
    *,
    now_ms: int,
    dry_run: bool = False,
    scheduled: bool = False,
    job: str = "-",
    outside: Callable[[str, list[str]], Any] | None = None,
) -> GCReport | None:
    """A GC driven and applied in this process, with Mother's credentials (``mother gc run``); the runs it
    forgets lose their workspace directories on this machine too."""
    return collect(
        rt,
        lambda op, body: apply(rt, op, body),
        rt.redis,
        now_ms=now_ms,
        dry_run=dry_run,
        scheduled=scheduled,
        job=job,
        forgotten=lambda run_ids: sum(remove_workspace(rt.settings, r) for r in run_ids),
        outside=outside,
    )


def remove_workspace(settings: Any, run_id: str) -> int:
    """Delete the run's workspace files on this machine (``worker.workspace_root/{run_id}``), when there
    are any: 1 when removed. Its symlinks are removed, never followed."""
    root: Path = settings.worker.workspace_root
    target = root / run_id
    if not target.is_dir() or target.is_symlink() or target.resolve().parent != root.resolve():
        return 0
    try:
        shutil.rmtree(target)
    except OSError as exc:
        log.warning("workspace_not_removed", run_id=run_id, error=str(exc))
        return 0
    return 1
