"""``mother library create | ingest | list | show | policy | search | report | check | redact``: libraries,
their documents and policies, a retrieval as an agent would make it, and the access report."""

from __future__ import annotations

import sys
import uuid
from pathlib import Path
from typing import Annotated

import orjson
import typer
from rich.table import Table

from mother import keys
from mother.cli._common import console, data_console, fail, handle_errors, redis_client, settings
from mother.libraries import RedactionEngine, load_policy
from mother.libraries.ingest import ingest
from mother.libraries.purge import remove_document, remove_library
from mother.libraries.redaction import library_key, policy_patterns
from mother.libraries.report import access_report
from mother.libraries.retrieval import retrieve
from mother.records.libraries import ensure_indexes, read_library, read_policy, write_policy
from mother.runtime import Runtime
from schemas import ms_from_iso

__all__ = ["app"]

app = typer.Typer(
    help="Libraries: create one with its policy, ingest documents, search, read the access report.",
    no_args_is_help=True,
)
LibArg = Annotated[str, typer.Argument(help="the library id")]


def _rt() -> Runtime:
    cfg = settings()
    return Runtime(settings=cfg, redis=redis_client(cfg))


@app.command("create")
@handle_errors
def create(
    library_id: LibArg,
    policy: Annotated[Path, typer.Option("--policy", help="its policy file (YAML)")],
) -> None:
    """Create a library (or replace its policy, keeping its documents)."""
    loaded = load_policy(policy)
    if loaded.library_id != library_id:
        fail(
            f"{policy} is the policy of library {loaded.library_id!r}, not {library_id!r}", "usage"
        )
    rt = _rt()
    # the chunk and access-log indexes (Mother makes them too, when it leads)
    ensure_indexes(rt.redis)
    write_policy(rt.redis, loaded, rt.clock.now_iso())
    console.print(
        f"library {library_id} ({loaded.sensitivity}) created; policy:library:{library_id} set"
    )


@app.command("ingest")
@handle_errors
def ingest_command(
    library_id: LibArg,
    paths: Annotated[
        list[Path], typer.Argument(help="text, Markdown or PDF files, or directories of them")
    ],
) -> None:
    """Put documents into a library (chunked, indexed for BM25 search)."""
    rt = _rt()
    files = [
        f
        for p in paths
        for f in (sorted(x for x in p.rglob("*") if x.is_file()) if p.is_dir() else [p])
    ]
    for path in files:
        got = ingest(rt.redis, library_id, path, rt.clock.now_iso())
        console.print(
            f"{path}: {got.document_id}, {got.chunks} chunk(s), {got.characters:,} characters"
        )


@app.command("list")
@handle_errors
def list_command() -> None:
    """Every library, with its sensitivity, documents and chunks."""
    rt = _rt()
    table = Table(title="libraries")
    for col in ("library", "name", "sensitivity", "documents", "chunks"):
        table.add_column(col)
    for member in sorted(rt.redis.smembers(keys.LIBRARIES_INDEX)):
        library_id = member.decode() if isinstance(member, bytes) else str(member)
        lib = read_library(rt.redis, library_id)
        pol = read_policy(rt.redis, library_id)
        table.add_row(
            library_id,
            lib["library_name"],
            pol.sensitivity,
            str(len(lib["documents"])),
            str(lib["chunk_count"]),
        )
    console.print(table)


@app.command("show")
@handle_errors
def show(library_id: LibArg) -> None:
    """A library's record: its documents and their chunks (JSON)."""
    data_console().print_json(orjson.dumps(read_library(_rt().redis, library_id)).decode())


@app.command("policy")
@handle_errors
def policy_command(library_id: LibArg) -> None:
    """A library's policy (JSON)."""
    data_console().print_json(read_policy(_rt().redis, library_id).model_dump_json())


@app.command("remove-document")
@handle_errors
def remove_document_command(
    library_id: LibArg,
    document_id: Annotated[
        str, typer.Argument(help="the document (`mother library show` lists them)")
    ],
    reason: Annotated[str, typer.Option(help="why (kept in the activity stream)")],
    actor: Annotated[str, typer.Option(help="who removes it")] = "cli",
) -> None:
    """Remove a document and its chunks for good (its access logs stay, as the audit trail)."""
    removed = remove_document(_rt(), library_id, document_id, actor=actor, reason=reason)
    console.print(f"removed document {document_id} from {library_id}: {removed} chunk(s)")


@app.command("remove")
@handle_errors
def remove_command(
    library_id: LibArg,
    reason: Annotated[str, typer.Option(help="why (kept in the activity stream)")],
    actor: Annotated[str, typer.Option(help="who removes it")] = "cli",
    yes: Annotated[bool, typer.Option("--yes", help="yes, remove every document of it")] = False,
) -> None:
    """Remove a library: every document and chunk, its policy and record (its access logs stay)."""
    if not yes:
        fail(f"removing library {library_id} deletes every document of it: add --yes", "usage")
    removed = remove_library(_rt(), library_id, actor=actor, reason=reason)
    console.print(f"removed library {library_id}: {removed} chunk(s)")


@app.command("search")
@handle_errors
def search(
    library_id: LibArg,
    query: Annotated[str, typer.Argument(help="what to look for")],
    role: Annotated[str, typer.Option(help="the agent role to search as")],
    model: Annotated[str, typer.Option(help="the model the hits would go to")] = "scripted",
    user: Annotated[str, typer.Option(help="the user (daily caps)")] = "cli",
    justification: Annotated[
        str | None, typer.Option(help="why (when the policy requires one)")
    ] = None,
    k: Annotated[
        int | None, typer.Option(min=1, help="hits (at most max_chunks_per_query)")
    ] = None,
) -> None:
    """Search as an agent would: the policy decides, caps count, hits are redacted, the access is audited."""
    rt = _rt()
    got = retrieve(
        rt,
        run_id=f"cli-{uuid.uuid4().hex[:12]}",
        user_id=user,
        role=role,
        model=model,
        library_id=library_id,
        query=query,
        k=k,
        justification=justification,
    )
    data_console().print_json(
        orjson.dumps(
            {
                "hits": [h.__dict__ for h in got.hits],
                "redactions_applied": got.redactions,
                "access_log": got.log_id or None,
            }
        ).decode()
    )


@app.command("report")
@handle_errors
def report(
    library_id: LibArg,
    from_: Annotated[
        str | None, typer.Option("--from", help="ISO-8601 UTC (default: 30 days ago)")
    ] = None,
    to: Annotated[str | None, typer.Option(help="ISO-8601 UTC (default: now)")] = None,
) -> None:
    """The access report: totals, unique users, by agent, violations, redactions (FT.AGGREGATE)."""
    rt = _rt()
    now = rt.clock.now_ms()
    try:
        start = ms_from_iso(from_) if from_ else now - 30 * 86_400_000
        end = ms_from_iso(to) if to else now
    except ValueError as exc:
        fail(f"--from/--to: {exc}; use e.g. 2026-11-01T00:00:00.000Z", "usage")
    read_policy(rt.redis, library_id)
    data_console().print_json(
        orjson.dumps(access_report(rt.redis, library_id, start, end)).decode()
    )


PolicyArg = Annotated[Path, typer.Argument(help="a policy file (YAML, LibraryAccessPolicy)")]


@app.command("check")
@handle_errors
def check(policy: PolicyArg) -> None:
    """Check a policy file: its fields, and each redaction pattern compiled with RE2."""
    loaded = load_policy(policy)
    patterns = ", ".join(p.pattern_id for p in policy_patterns(loaded)) or "none"
    console.print(
        f"{policy}: library {loaded.library_id} ({loaded.sensitivity}) is valid; redaction "
        f"{loaded.redaction_rules.redaction_method} with {patterns}"
    )


@app.command("redact")
@handle_errors
def redact(
    policy: PolicyArg,
    text: Annotated[str | None, typer.Option(help="the text (default: standard input)")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="the redactions too, as JSON")] = False,
) -> None:
    """Apply a policy's redaction to a text, as retrieval will before a chunk reaches a model (hash
    uses a throwaway key here)."""
    loaded = load_policy(policy)
    engine = RedactionEngine(loaded, library_key(b"mother library redact", loaded.library_id))
    redacted = engine.apply(text if text is not None else sys.stdin.read())
    if as_json:
        data_console().print_json(
            orjson.dumps(
                {
                    "text": redacted.text,
                    "redactions": [r.model_dump(mode="json") for r in redacted.redactions],
                }
            ).decode()
        )
    else:
        data_console().print(redacted.text)
