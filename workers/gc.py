"""The artifact GC's jobs on a worker host enrolled for ``maintenance``: ``workers.gc.run`` (collect now) and
``workers.gc.scheduled`` (the daily cron's: one per day). The host reads which ids are due (the three
indexes by time, the only keys of Mother's its ACL user may read) and asks Mother to apply each batch
(``gc`` asks): Mother checks each item again, so nothing protected or live goes whatever the host asks
(:mod:`mother.artifacts.collect`). What the host removes itself is the workspace directories of the runs
Mother forgot, on its own disk."""

from __future__ import annotations

from typing import Any

from rq import get_current_job

from mother.artifacts.collect import collect, parse_now, remove_workspace
from mother.errors import ConfigError
from mother.logs import get_logger
from workers.host import current as current_host
from workers.workspaces import blobs_for

__all__ = ["run", "scheduled"]

log = get_logger("gc")


def _collect(now: str | None, dry_run: bool, scheduled: bool) -> dict[str, Any]:
    from workers.phase import runtime

    rt = runtime()
    host = current_host()
    if host is None:
        raise ConfigError("the GC job runs on an enrolled maintenance host (`mother worker`)")
    asker = host.asker(rt.redis, rt.settings.retention.gc_lease_seconds)
    job = get_current_job()

    def asked(op: str, body: dict[str, Any]) -> dict[str, Any]:
        return asker.ask("gc", {**body, "op": op})

    report = collect(
        rt,
        asked,
        rt.redis,
        now_ms=parse_now(now) if now is not None else rt.clock.now_ms(),
        dry_run=dry_run,
        scheduled=scheduled,
        job=job.id if job is not None else "-",
        forgotten=lambda run_ids: sum(remove_workspace(rt.settings, r) for r in run_ids),
        outside=lambda run_id, shas: blobs_for(rt.settings, rt.redis).delete(run_id, shas),
    )
    if report is None:
        return {"skipped": True}
    return report.model_dump(mode="json")


def run(now: str | None = None, dry_run: bool = False) -> dict[str, Any]:
    """The job: collect as of ``now`` (ISO-8601; default the server's clock). Returns the report."""
    return _collect(now, dry_run, False)


def scheduled() -> dict[str, Any]:
    """The daily cron's job: the first scheduler's job of a (server, UTC) day collects; another that day
    finds the day taken (done, or being collected) and does nothing. Mother holds the day on a lease
    while the GC runs and marks it done at its end: a GC killed half way frees the day, and ``mother
    cron`` enqueues the day's GC again (:func:`mother.artifacts.schedule.catch_up`); the GC is
    idempotent: it finishes what the first began."""
    return _collect(None, False, True)
