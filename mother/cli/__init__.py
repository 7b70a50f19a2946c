"""The ``mother`` command line.

The commands load on demand: ``mother --help`` imports none of them (their one-line help is listed in
:data:`COMMANDS`, checked against each command's own by the tests), ``mother status RUN`` only what
``status`` needs. A CLI that imported every command and what each stands on took ~0.6 s to start.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

import typer
from typer.core import TyperCommand, TyperGroup

__all__ = ["COMMANDS", "app", "main"]

# name -> (module, attribute: a command function or a Typer of subcommands, its help's first paragraph)
COMMANDS: dict[str, tuple[str, str, str]] = {
    "server": ("mother.cli.admin", "server", "Start the embedded Redis (Valkey + RedisJSON + RediSearch, AOF on) until Ctrl-C."),
    "up": ("mother.cli.services", "up", "Embedded Redis + Mother + N workers in one command; one that exits is started again; Ctrl-C stops them all."),
    "run": ("mother.cli.services", "run", "Run the Mother service (leader when it holds the lease, standby otherwise)."),
    "worker": ("mother.cli.services", "worker", "Run an enrolled worker host's RQ workers (forking: each job in a work-horse) under one parent that warms up once, beats for their phases and replaces a worker that dies. MOTHER_REDIS_URL is the host's (`mother hosts add NAME` prints it)."),
    "cron": ("mother.cli.services", "cron", "Run the scheduler of the daily artifact GC (RQ's CronScheduler, retention.gc_cron, UTC): it enqueues workers.gc.scheduled on the maintenance queue, and at start one for a missed day. Run one or more; a SET NX per day lets only one GC a day through."),
    "dashboard": ("mother.cli.services", "dashboard", "Serve the dashboard (why runs stopped, runs, a run, runs waiting for a person, gauges) and Prometheus /metrics; read-only. Beyond 127.0.0.1 it needs dashboard.token."),
    "submit": ("mother.cli.runs", "submit", "Submit a run; print its run_id. With --wait exit 0 only if it ends in success."),
    "status": ("mother.cli.runs", "status", "Where a run is: status, phase, attempt (or its place in the admission queue), and its history."),
    "wait": ("mother.cli.runs", "wait", "Wait for a run to end; print its ResultEnvelope. Exit 0 only for success."),
    "cancel": ("mother.cli.runs", "cancel", "End a run as user_cancelled (Mother writes the record); or, with --user / --status / --hours and no run, every run not yet ended that they select (the count shown and asked for first)."),
    "costs": ("mother.cli.costs", "costs", "What the runs created in a period cost, by user and by day (UTC), the most expensive of them, and spend by model (every settled model call since the counters began)."),
    "runs": ("mother.cli.runs", "runs", "Runs and why each stopped, newest first, from the index over every stored run: filter, sort and page through them. Times are UTC."),
    "logs": ("mother.cli.runs", "logs", "The run's activity entries (what Mother, the workers and people did with it), oldest first; with -f followed live until the run ends (Ctrl-C stops following, not the run)."),
    "resubmit": ("mother.cli.runs", "resubmit", "Submit a run's spec again as a new run (a new run id; ``metadata.resubmitted_from`` names the old one). Any run, whatever its end: a retry after fixing what stopped it."),
    "approve": ("mother.cli.gates", "approve", "Approve what a run waits for: a phase to start, a tool call, a conflict's work."),
    "deny": ("mother.cli.gates", "deny", "Deny what a run waits for: the run ends approval_denied."),
    "answer": ("mother.cli.gates", "answer", "Answer the question a run waits on: the work is accepted and the answer joins every later phase's context."),
    "doctor": ("mother.cli.admin", "doctor", "Check Redis, its modules and the config, and whether a Mother and workers serve it; say what is missing and how to fix it."),
    "inspect": ("mother.cli.inspect", "inspect_key", "A run's summary (why it stopped, its timeline and cost, per phase and attempt), or with --json everything about it; any other key as JSON."),
    "version": ("mother.cli.admin", "version", "Print the versions of mother-harness and what it stands on."),
    "sign": ("mother.cli.signing", "sign", "Sign FILE with an Ed25519 key; writes FILE.sig next to it."),
    "verify": ("mother.cli.signing", "verify", "Verify FILE against FILE.sig and harness.trusted_keys."),
    "schema": ("mother.cli.admin", "schema_app", "JSON Schema of the records."),
    "budget": ("mother.cli.budget", "app", "Budgets: show usage, override a limit, emergency stop and reset."),
    "config": ("mother.cli.config", "app", "The configuration in force."),
    "tools": ("mother.cli.tools", "app", "The deterministic tool registry: sync manifests, list and show tools, export them."),
    "artifacts": ("mother.cli.artifacts", "artifacts_app", "Artifacts: list a run's, show one, star, protect, delete early, restore from the archive."),
    "gc": ("mother.cli.artifacts", "gc_app", "The artifact garbage collector: run it, read its reports."),
    "library": ("mother.cli.library", "app", "Libraries: create one with its policy, ingest documents, search, read the access report."),
    "replay": ("mother.cli.replay", "app", "Replay bundles: export a run whole, read its story, run it again."),
    "principals": ("mother.cli.identities", "principals_app", "Principals: each person or service its own Redis ACL user, with exactly what its grants need. Run these with an administrator's MOTHER_REDIS_URL."),
    "hosts": ("mother.cli.identities", "hosts_app", "Worker hosts: each enrolled here, its own Redis ACL user that may touch only its own queues and ask Mother on its own stream. Run these with an administrator's MOTHER_REDIS_URL."),
    "acl": ("mother.cli.identities", "acl_app", "The deployment's Redis ACL users, for servers that take them from a file or a console."),
    "keys": ("mother.cli.signing", "keys_app", "Ed25519 keys for signing role files."),
    "mcp": ("mother.cli.mcp", "app", "Mother as an MCP server: MCP clients submit runs, follow them and decide their gates as a principal."),
}  # fmt: skip


def load_command(name: str) -> Any:
    """The click command ``name`` (a command, or a group of subcommands), its module imported now."""
    module, attribute, _help = COMMANDS[name]
    found = getattr(importlib.import_module(module), attribute)
    command: Any
    if isinstance(found, typer.Typer):
        command = typer.main.get_group(found)
    else:
        single = typer.Typer(pretty_exceptions_enable=False, add_completion=False)
        single.command(name)(found)
        command = typer.main.get_command(single)
    command.name = name
    return command


class LazyGroup(TyperGroup):
    """The top-level group: lists :data:`COMMANDS` from the table and loads one when it is run."""

    listing = False

    def list_commands(self, ctx: Any) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        if cmd_name not in COMMANDS:
            return None
        if self.listing:  # the help's table: the name and its line, nothing imported
            return TyperCommand(cmd_name, help=COMMANDS[cmd_name][2])
        return load_command(cmd_name)

    def format_help(self, ctx: Any, formatter: Any) -> None:
        self.listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self.listing = False


app = typer.Typer(
    name="mother",
    help="Mother-Harness: run LLM-agent work inside hard, observable limits.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=True,
    cls=LazyGroup,
)


@app.callback()
def _root() -> None:
    """Mother-Harness: run LLM-agent work inside hard, observable limits."""


def main() -> None:
    """Run the CLI. A usage mistake (an unknown option or command, a bad value, a missing argument) is
    one line on stderr naming the --help to read, exit 2, like every other error (click drew a box)."""
    try:
        code = app(standalone_mode=False)
    except BrokenPipeError:
        from mother.cli._common import pipe_closed

        pipe_closed()
    # typer's click exceptions: UsageError, BadParameter, NoSuchOption...
    except typer.TyperException as exc:
        # `mother` or `mother budget` alone: show the help
        if type(exc).__name__ == "NoArgsIsHelpError":
            exc.show()  # type: ignore[attr-defined]
            sys.exit(exc.exit_code)
        ctx = getattr(exc, "ctx", None)
        hint = f"; see `{ctx.command_path} --help`" if ctx is not None else ""
        _fail(" ".join(exc.format_message().split()).rstrip(".") + hint, "usage", exc.exit_code)
    except typer.Abort:
        _fail("aborted", "interrupted", 1)
    sys.exit(code if isinstance(code, int) else 0)


def _fail(message: str, code: str, exit_code: int) -> Any:
    from mother.cli._common import fail

    return fail(message, code, exit_code)
