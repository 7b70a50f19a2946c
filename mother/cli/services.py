"""``mother run`` (the Mother service), ``mother worker``, ``mother up`` (everything at once)."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.text import Text

from mother import keys
from mother.cli._common import console, fail, handle_errors, sandbox_notice, settings, stop_signals
from mother.config import check_queues
from mother.logs import route_rq_logs
from mother.server import EmbeddedRedis
from mother.stack import DEV_ENV, Exited, LocalStack

__all__ = ["run", "up", "worker"]


@handle_errors
def run() -> None:
    """Run the Mother service (leader when it holds the lease, standby otherwise)."""
    from mother import secrets
    from mother.service import Mother
    from workers.providers import make_provider

    cfg = settings()
    mother = Mother(cfg, make_provider=make_provider)
    secrets.take(cfg)
    mother.install_signal_handlers()
    mother.run_forever()


@handle_errors
def worker(
    queues: Annotated[
        str | None,
        typer.Option(
            help="comma-separated RQ queues, in priority order "
            "(default: worker.queues, i.e. agents,tools,maintenance)"
        ),
    ] = None,
    burst: Annotated[bool, typer.Option(help="exit when the queues are empty")] = False,
    name: Annotated[
        str | None,
        typer.Option(
            help="worker name prefix: each RQ worker is PREFIX.INDEX.PID (default HOST.PID)"
        ),
    ] = None,
    concurrency: Annotated[
        int | None,
        typer.Option(
            min=1,
            max=4096,
            help="RQ workers to run (default worker.concurrency, 1): more than one are forked by one "
            "parent that warms up once and beats for their phases",
        ),
    ] = None,
) -> None:
    """Run an enrolled worker host's RQ workers (forking: each job in a work-horse) under one parent that
    warms up once, beats for their phases and replaces a worker that dies. MOTHER_REDIS_URL is the host's
    (`mother hosts add NAME` prints it)."""
    from rq.serializers import JSONSerializer

    from mother import secrets
    from mother.connection import redact_url
    from workers.host import identify, set_current
    from workers.phase import runtime
    from workers.sandbox.state import prepare as prepare_sandbox
    from workers.worker import PhaseWorker, log_sandbox, warm_up

    cfg = settings()
    if queues is None:
        names = cfg.worker.queues
    else:
        try:
            names = check_queues([q.strip() for q in queues.split(",") if q.strip()])
        except ValueError as exc:
            fail(f"--queues: {exc}", "usage")
    count = concurrency or cfg.worker.concurrency
    _check_memory(cfg, count)
    rt = runtime()
    # refuses to start where the sandbox is required and cannot be made (ConfigError, one line); a
    # worker of the maintenance queue alone (the GC) runs no tool
    if {"agents", "tools"} & set(names):
        log_sandbox(prepare_sandbox(cfg))
    host = identify(rt.redis, redact_url(cfg.redis_url))
    set_current(host)
    warm_up(cfg)
    # nothing the worker starts inherits its credentials (its settings are loaded)
    secrets.take(cfg)
    from workers.pool import Pool, PoolLink

    prefix = name or f"{socket.gethostname().replace('.', '-')}-{os.getpid()}"

    # each worker a child of one parent that beats for its attempts (a pool of one too: the attempt
    # stays alive while its worker sets it up, however slowly)
    def run_one(index: int, link: PoolLink) -> int:
        one = PhaseWorker(
            host.queues(names),
            connection=rt.rq_redis,
            serializer=JSONSerializer,
            name=keys.host_worker_name(host.name, f"{prefix}-{index}-{os.getpid()}"),
            pool=link,
        )
        # RQ's own lines as ours (JSON where the process logs JSON)
        route_rq_logs(cfg.log_level, failed=one.attempt_failed)
        one.work(burst=burst, logging_level=cfg.log_level)
        return 0

    log_host(host.name, host.queues(names))
    pool = Pool(
        cfg,
        count,
        rt.rq_redis,
        run_one,
        warm=lambda: warm_pool(rt),
        asker=host.asker(rt.redis, cfg.worker.ask_timeout_seconds),
        burst=burst,
    )
    raise typer.Exit(pool.run())


def log_host(name: str, queues: list[str]) -> None:
    from mother.logs import get_logger

    get_logger("worker").info("host_serving", host=name, queues=queues)


def warm_pool(rt: Any) -> None:
    """What a pool's workers and horses inherit instead of each making it: the project's modules, the
    model SDK (warmed), a client per configured HTTP model, and what a first connection to Redis loads
    (the resolver's libraries, the parser): each child then connects on warm memory. The connections
    themselves are closed: a child makes its own."""
    from mother import secrets
    from workers import agent, phase  # noqa: F401 - imported to be inherited
    from workers.providers import sdk_client, warm_up_sdk
    from workers.tools import shipped_tools

    shipped_tools()
    warm_up_sdk()
    # the records' and settings' validators (built at first use otherwise: in every child, unshared)
    import schemas  # noqa: F401 - every record module, for build_models to find
    from mother.config import _Section
    from schemas._base import build_models

    build_models()
    build_models(_Section)
    for model in rt.settings.models.values():
        if model.provider == "openai":
            api_key = secrets.get(model.api_key_env) if model.api_key_env else ""
            sdk_client(model.base_url, api_key or "not-needed", model.request_timeout_seconds)
    for client in (rt.redis, rt.rq_redis):
        client.ping()
        client.connection_pool.disconnect()


def _check_memory(cfg: Any, count: int) -> None:
    """Refuse a concurrency this host's memory cannot hold; warn when it would use most of it."""
    from workers.pool import memory_plan

    plan = memory_plan(cfg, count)
    if plan.refused:
        fail(
            f"--concurrency {count}: {plan.line()}; run fewer, or more hosts "
            "(worker.phase_memory_mb if your phases measure less)",
            "config",
        )
    if plan.tight:
        console.print(
            Text(f"warning: {plan.line()}; more than 80% of it", style="yellow"), soft_wrap=True
        )


@handle_errors
def cron() -> None:
    """Run the scheduler of the daily artifact GC (RQ's CronScheduler, retention.gc_cron, UTC): it
    enqueues workers.gc.scheduled on the maintenance queue, and at start one for a missed day. Run one
    or more; a SET NX per day lets only one GC a day through."""
    from mother.artifacts.schedule import start_cron

    start_cron(settings())


@handle_errors
def dashboard(
    port: Annotated[
        int | None, typer.Option(min=1, max=65535, help="the port (default dashboard.port, 8080)")
    ] = None,
    host: Annotated[
        str | None, typer.Option(help="the address (default dashboard.host, 127.0.0.1)")
    ] = None,
) -> None:
    """Serve the dashboard (why runs stopped, runs, a run, runs waiting for a person, gauges) and
    Prometheus /metrics; read-only. Beyond 127.0.0.1 it needs dashboard.token."""
    import uvicorn

    from mother.web import check_exposure, create_app

    cfg = settings()
    if port is not None or host is not None:
        cfg = cfg.model_copy(
            update={
                "dashboard": cfg.dashboard.model_copy(
                    update={k: v for k, v in (("port", port), ("host", host)) if v is not None}
                )
            }
        )
    check_exposure(cfg)
    app = create_app(cfg)
    console.print(
        f"dashboard: http://{cfg.dashboard.host}:{cfg.dashboard.port}/ (metrics at /metrics)",
        soft_wrap=True,
    )
    uvicorn.run(app, host=cfg.dashboard.host, port=cfg.dashboard.port, log_level="warning")


@handle_errors
def up(
    port: Annotated[
        int | None, typer.Option(min=1, max=65535, help="embedded Redis port (default from config)")
    ] = None,
    dir: Annotated[Path | None, typer.Option("--dir", help="embedded Redis data dir")] = None,
    workers: Annotated[
        int,
        typer.Option(
            min=0,
            max=4096,
            help="RQ workers (more than one: one pooled worker process that forks them; refused past "
            "what this host's memory holds)",
        ),
    ] = 2,
    dashboard_port: Annotated[
        int,
        typer.Option(
            "--dashboard-port", min=0, max=65535, help="the dashboard's port (0: no dashboard)"
        ),
    ] = 8080,
    dev: Annotated[
        bool,
        typer.Option(
            "--dev",
            help="development: let the scripted model inject faults (kill, "
            "hang, raise), as the examples do, and run tools unsandboxed (with a warning) where "
            "bubblewrap is missing; never in production",
        ),
    ] = False,
) -> None:
    """Embedded Redis + Mother + N workers in one command; one that exits is started again; Ctrl-C stops them all."""
    stopping = stop_signals()
    cfg = settings()
    sandbox_notice(cfg, dev=dev)
    if workers > 1:
        _check_memory(cfg, workers)
    server = EmbeddedRedis(
        port=port or cfg.server.port,
        dir=dir or cfg.server.dir,
        appendfsync=cfg.server.appendfsync,
        start_timeout=cfg.server.start_timeout_seconds,
    )
    # a process that kept exiting: up stops everything and exits 1
    gave_up: list[Exited] = []
    with server:
        stack = LocalStack(
            server.url,
            # one worker process: itself, or a pool of `workers`
            workers=min(workers, 1),
            concurrency=max(workers, 1),
            log_dir=server.dir / "logs",
            env=DEV_ENV if dev else {},
            cron=True,
            dashboard_port=dashboard_port,
        )
        try:
            stack.start()
            # soft_wrap: a path or the export line folded at the terminal's width could not be pasted
            console.print(
                f"up: Redis {server.url}, Mother, {workers} worker(s); logs in {stack.log_dir}",
                soft_wrap=True,
            )
            if dev:
                console.print(
                    "dev principal (may do everything, for any user): "
                    f"export MOTHER_REDIS_URL={_dev_principal(server.url)}",
                    soft_wrap=True,
                )
                made = _dev_libraries(server.url)
                if made:
                    console.print(
                        f"example libraries (the library examples use them): {', '.join(made)}",
                        soft_wrap=True,
                    )
                console.print(
                    f"Mother's own credentials (the embedded server's default user): {server.url}",
                    style="dim",
                    soft_wrap=True,
                )
            else:
                console.print(f"export MOTHER_REDIS_URL={server.url}", soft_wrap=True)
            if dashboard_port:
                console.print(
                    f"dashboard: http://127.0.0.1:{dashboard_port}/ (metrics at /metrics)",
                    soft_wrap=True,
                )
            console.print("Ctrl-C stops everything.", style="dim")
            while not stopping and not gave_up:
                for exited in stack.respawn_dead():
                    if not exited.gave_up:
                        console.print(Text(str(exited)), style="yellow", soft_wrap=True)
                        continue
                    if exited.name == "dashboard":
                        # runs go on without it (its port taken, say): say so and why
                        last = exited.last_log_line()
                        console.print(
                            Text(
                                f"{exited}; runs go on without the dashboard (its log: "
                                f"{exited.log}{'; its last line: ' + last[:300] if last else ''}); "
                                "choose another port with --dashboard-port"
                            ),
                            style="yellow",
                            soft_wrap=True,
                        )
                        continue
                    gave_up.append(exited)
                    console.print(
                        Text(f"{exited}, stopping everything; its log: {exited.log}"),
                        style="red",
                        soft_wrap=True,
                    )
                    if last := exited.last_log_line():
                        console.print(Text(f"  its last line: {last[:500]}"), soft_wrap=True)
                time.sleep(0.5)
        finally:
            stack.stop()
    console.print("stopped.")
    if gave_up:
        raise typer.Exit(1)


def _dev_principal(url: str) -> str:
    """``mother up --dev``'s principal ``dev``: every grant, for every user (made again at each start:
    the embedded server keeps no ACL file). Its URL."""
    from mother.cli.identities import principal_url
    from mother.clock import ServerClock
    from mother.connection import connect
    from mother.functions import load_functions
    from mother.identities import principals
    from schemas.principal import GRANTS

    client = connect(url)
    # what a principal's client calls at once (Mother loads them too, a moment later)
    load_functions(client)
    if principals.load(client, "dev") is not None:
        principals.remove(client, "dev")
    _, password = principals.add(client, "dev", list(GRANTS), ["*"], ServerClock(client).now_iso())
    return principal_url(url, "dev", password)


def _dev_libraries(url: str) -> list[str]:
    """``mother up --dev`` makes the example libraries of a source checkout, so every example in
    ``examples/`` runs as its header says."""
    from mother.clock import ServerClock
    from mother.connection import connect
    from mother.libraries.ingest import create_example_libraries

    client = connect(url)
    return list(create_example_libraries(client, ServerClock(client).now_iso()))
