"""The ``mother`` command line."""

from __future__ import annotations

import sys

import typer

from mother.cli import (
    admin,
    artifacts,
    budget,
    config,
    gates,
    inspect,
    library,
    principals,
    replay,
    runs,
    services,
    signing,
    tools,
)
from mother.cli._common import fail

__all__ = ["app", "main"]

app = typer.Typer(
    name="mother",
    help="Mother-Harness: run LLM-agent work inside hard, observable limits.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=True,
)
schema_app = typer.Typer(help="JSON Schema of the records.", no_args_is_help=True)

app.command()(admin.server)
app.command()(services.up)
app.command("run")(services.run)
app.command()(services.worker)
app.command()(services.cron)
app.command()(services.dashboard)
app.command()(runs.submit)
app.command()(runs.status)
app.command()(runs.wait)
app.command()(runs.cancel)
app.command("runs")(runs.runs)
app.command()(runs.logs)
app.command()(runs.resubmit)
app.command()(gates.approve)
app.command()(gates.deny)
app.command()(gates.answer)
app.command()(admin.doctor)
app.command("inspect")(inspect.inspect_key)
app.command()(admin.version)
schema_app.command("export")(admin.schema_export)
app.add_typer(schema_app, name="schema")
app.add_typer(budget.app, name="budget")
app.add_typer(config.app, name="config")
app.add_typer(tools.app, name="tools")
app.add_typer(artifacts.artifacts_app, name="artifacts")
app.add_typer(artifacts.gc_app, name="gc")
app.add_typer(library.app, name="library")
app.add_typer(replay.app, name="replay")
app.add_typer(principals.app, name="principals")
app.add_typer(signing.keys_app, name="keys")
app.command()(signing.sign)
app.command()(signing.verify)


def main() -> None:
    """Run the CLI. A usage mistake (an unknown option or command, a bad value, a missing argument) is
    one line on stderr naming the --help to read, exit 2, like every other error (click drew a box)."""
    try:
        code = app(standalone_mode=False)
    # typer's click exceptions: UsageError, BadParameter, NoSuchOption...
    except typer.TyperException as exc:
        # `mother` or `mother budget` alone: show the help
        if type(exc).__name__ == "NoArgsIsHelpError":
            exc.show()  # type: ignore[attr-defined]
            sys.exit(exc.exit_code)
        ctx = getattr(exc, "ctx", None)
        hint = f"; see `{ctx.command_path} --help`" if ctx is not None else ""
        fail(" ".join(exc.format_message().split()).rstrip(".") + hint, "usage", exc.exit_code)
    except typer.Abort:
        fail("aborted", "interrupted", 1)
    sys.exit(code if isinstance(code, int) else 0)
