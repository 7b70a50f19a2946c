"""``mother artifacts list | show | star | unstar | protect | unprotect | delete | restore`` and
``mother gc run | reports``: people's controls of artifacts and the garbage collector."""

from __future__ import annotations

import getpass
from pathlib import Path
from typing import Annotated, Literal

import orjson
import typer
from rich.table import Table

from mother.artifacts import controls
from mother.cli._common import console, data_console, handle_errors, redis_client, settings
from mother.clock import ServerClock
from mother.errors import InvalidSpec
from mother.runtime import Runtime
from schemas.artifact import GCReport

__all__ = ["artifacts_app", "gc_app"]

artifacts_app = typer.Typer(
    help="Artifacts: list a run's, show one, star, protect, delete early, restore from the archive.",
    no_args_is_help=True,
)
gc_app = typer.Typer(
    help="The artifact garbage collector: run it, read its reports.", no_args_is_help=True
)

IdArg = Annotated[str, typer.Argument(help="the artifact (art-...)")]


def _actor_default() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "cli"


ActorOpt = Annotated[str | None, typer.Option(help="who does it (default: your login name)")]


def _apply(op: str, artifact_id: str, actor: str | None, reason: str = "") -> None:
    cfg = settings()
    client = redis_client(cfg)
    meta = controls.control(
        client,
        cfg,
        op,
        artifact_id,
        actor=actor or _actor_default(),
        now_ms=ServerClock(client).now_ms(),
        reason=reason,
    )
    if meta is None:
        console.print(f"deleted {artifact_id}")
        return
    console.print(
        f"{artifact_id}: status {meta['status']}, starred {meta['user_starred']}, protected "
        f"{meta['protected']}"
        + (f" ({meta['protection_reason']})" if meta.get("protection_reason") else "")
        + f", expires {meta.get('expires_at') or 'never (protected)'}"
    )


@artifacts_app.command("list")
@handle_errors
def list_command(run_id: Annotated[str, typer.Argument(help="the run")]) -> None:
    """A run's artifacts with their lifecycle."""
    rows = controls.list_for_run(redis_client(settings()), run_id)
    table = Table(title=f"artifacts of {run_id}")
    for col in (
        "artifact",
        "phase",
        "bytes",
        "status",
        "class",
        "expires",
        "archive due",
        "starred",
        "protected",
    ):
        table.add_column(col)
    for row in rows:
        if row.get("missing"):
            table.add_row(row["artifact_id"], "", "", "deleted", "", "", "", "", "")
            continue
        table.add_row(
            row["artifact_id"],
            row["phase"],
            str(row["size_bytes"]),
            row.get("status", "active"),
            row.get("retention_class", ""),
            row.get("expires_at") or "never",
            row.get("archive_due_at") or "",
            "yes" if row.get("user_starred") else "",
            row.get("protection_reason") or ("yes" if row.get("protected") else ""),
        )
    console.print(table)


@artifacts_app.command("show")
@handle_errors
def show_command(artifact_id: IdArg) -> None:
    """An artifact's metadata and the start of its content (or its archive's size), as JSON."""
    shown = controls.show(redis_client(settings()), artifact_id)
    data_console().print_json(orjson.dumps(shown).decode())


@artifacts_app.command("star")
@handle_errors
def star(artifact_id: IdArg, actor: ActorOpt = None) -> None:
    """Star it: kept forever (retention.exceptions.user_starred), else its owner is told before deletion."""
    _apply("star", artifact_id, actor)


@artifacts_app.command("unstar")
@handle_errors
def unstar(artifact_id: IdArg, actor: ActorOpt = None) -> None:
    """Unstar it (a star's protection goes with it)."""
    _apply("unstar", artifact_id, actor)


@artifacts_app.command("protect")
@handle_errors
def protect(
    artifact_id: IdArg,
    reason: Annotated[
        Literal["approved", "golden_task", "compliance"],
        typer.Option(help="why it is kept forever"),
    ],
    actor: ActorOpt = None,
) -> None:
    """Protect it: never archived or deleted, nor the run records it needs."""
    _apply("protect", artifact_id, actor, reason)


@artifacts_app.command("unprotect")
@handle_errors
def unprotect(artifact_id: IdArg, actor: ActorOpt = None) -> None:
    """Lift its protection: it expires again by its retention."""
    _apply("unprotect", artifact_id, actor)


@artifacts_app.command("delete")
@handle_errors
def delete(artifact_id: IdArg, actor: ActorOpt = None) -> None:
    """Delete it now (refused for a protected one)."""
    _apply("delete", artifact_id, actor)


@artifacts_app.command("export")
@handle_errors
def export(
    artifact_id: IdArg,
    directory: Annotated[
        Path, typer.Argument(help="a new or empty directory to write the files into")
    ],
) -> None:
    """Write a run's workspace artifact (kind workspace) out as files: each content checked against its
    SHA-256, modes and times as stored."""
    from workers.workspaces import RedisPlace, blobs_for
    from workers.workspaces import restore as restore_workspace

    cfg = settings()
    client = redis_client(cfg)
    run_id = controls.workspace_of(client, artifact_id)
    if directory.exists() and (not directory.is_dir() or any(directory.iterdir())):
        raise InvalidSpec(
            f"{directory} is not a new or empty directory: export writes only there (it would remove "
            "what the workspace does not have)"
        )
    moved = restore_workspace(RedisPlace(client, run_id, blobs_for(cfg, client)), run_id, directory)
    console.print(
        f"wrote run {run_id}'s workspace to {directory}: {moved.files} files, {moved.bytes:,} bytes"
    )


@artifacts_app.command("restore")
@handle_errors
def restore(artifact_id: IdArg, actor: ActorOpt = None) -> None:
    """Put an archived artifact back from its archive, byte for byte."""
    cfg = settings()
    client = redis_client(cfg)
    meta = controls.restore_artifact(
        client,
        cfg,
        artifact_id,
        actor=actor or _actor_default(),
        now_ms=ServerClock(client).now_ms(),
    )
    console.print(f"restored {artifact_id}: status {meta['status']}")


def report_table(report: GCReport, title: str) -> Table:
    table = Table(title=title)
    table.add_column("field")
    table.add_column("value", justify="right")
    for name, value in report.model_dump(mode="json", exclude={"errors"}).items():
        table.add_row(name, str(value))
    table.add_row("errors", str(len(report.errors)))
    return table


@gc_app.command("run")
@handle_errors
def gc_run(
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="count what it would do; change nothing")
    ] = False,
    now: Annotated[
        str | None,
        typer.Option(help="collect as of this time (ISO-8601 UTC; default the server's clock)"),
    ] = None,
) -> None:
    """Run the garbage collector now, here (with Mother's URL: it applies each batch itself), and print
    its report."""
    from mother.artifacts.collect import collect_here, parse_now

    cfg = settings()
    rt = Runtime(settings=cfg, redis=redis_client(cfg))
    now_ms = parse_now(now) if now is not None else rt.clock.now_ms()
    from workers.workspaces import blobs_for

    report = collect_here(
        rt,
        now_ms=now_ms,
        dry_run=dry_run,
        outside=lambda run_id, shas: blobs_for(cfg, rt.redis).delete(run_id, shas),
    )
    assert report is not None
    console.print(report_table(report, "GC (dry run: nothing changed)" if dry_run else "GC report"))
    for error in report.errors[:20]:
        console.print(f"error: {error.artifact_id}: {error.error}")


@gc_app.command("reports")
@handle_errors
def gc_reports(
    limit: Annotated[int, typer.Option(min=1, max=1000, help="how many, newest first")] = 10,
    json_out: Annotated[bool, typer.Option("--json", help="as JSON")] = False,
) -> None:
    """The newest GC reports (gc_report:{timestamp})."""
    found = controls.reports(redis_client(settings()), limit)
    if json_out:
        data_console().print_json(orjson.dumps([r.model_dump(mode="json") for r in found]).decode())
        return
    table = Table(title="GC reports, newest first")
    for col in (
        "started",
        "scanned",
        "deleted",
        "archived",
        "protected",
        "deferred",
        "runs removed",
        "MB freed",
        "ms",
        "errors",
    ):
        table.add_column(col, justify="left" if col == "started" else "right")
    for r in found:
        table.add_row(
            r.started_at,
            str(r.scanned_count),
            str(r.scheduled_deletion),
            str(r.archived),
            str(r.protected),
            str(r.deferred),
            str(r.runs_removed),
            f"{r.bytes_freed / 1e6:.2f}",
            str(r.duration_ms),
            str(len(r.errors)),
        )
    console.print(table)
    if not found:
        console.print("no GC has run yet: `mother gc run`, or `mother cron` runs it daily")
