"""``mother config show``: the effective configuration, every setting with the source that set it."""

from __future__ import annotations

import os
from typing import Annotated, Any

import orjson
import typer
from rich.table import Table

from mother.cli._common import console, data_console, fail, handle_errors, settings
from mother.config import ENV_PREFIX, Settings, config_path
from mother.connection import redact_url
from mother.yamlfile import read_yaml

__all__ = ["app", "effective"]

app = typer.Typer(help="The configuration in force.", no_args_is_help=True)

# settings never printed as they are
SECRETS = {"dashboard.token", "libraries.hash_key"}


def _flat(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict) and value:
        out: dict[str, Any] = {}
        for key, item in value.items():
            out.update(_flat(item, f"{prefix}.{key}" if prefix else str(key)))
        return out
    return {prefix: value}


def _in_env(key: str) -> str | None:
    """The MOTHER_* variable that set ``key`` (itself, or one that holds a part of the tree above it)."""
    parts = key.split(".")
    for n in range(len(parts), 0, -1):
        name = ENV_PREFIX + "__".join(p.upper() for p in parts[:n])
        if name in os.environ:
            return name
    return None


def effective(cfg: Settings) -> dict[str, dict[str, Any]]:
    """Every setting: its value in force (secrets masked) and its source: ``env MOTHER_…``, ``file
    PATH``, or ``default``."""
    path = config_path()
    in_file = _flat(read_yaml(path) or {}) if path is not None else {}
    out: dict[str, dict[str, Any]] = {}
    for key, value in _flat(cfg.model_dump(mode="json", by_alias=True)).items():
        variable = _in_env(key)
        if variable is not None:
            source = f"env {variable}"
        elif any(key == k or key.startswith(f"{k}.") for k in in_file):
            source = f"file {path}"
        elif key.startswith(("server.dir", "worker.workspace_root")):
            source = "default (under data_dir)"
        else:
            source = "default"
        if key in SECRETS and value:
            value = "***"
        elif key == "redis_url":
            value = redact_url(str(value))
        out[key] = {"value": value, "source": source}
    return out


@app.command("show")
@handle_errors
def show(
    as_json: Annotated[bool, typer.Option("--json", help="one JSON object")] = False,
    only: Annotated[
        str | None, typer.Argument(help="only settings under this prefix, e.g. budget.per_run")
    ] = None,
) -> None:
    """Every setting in force and where it came from (a MOTHER_* variable, the YAML file, or the
    default); secrets masked."""
    cfg = settings()
    rows = {
        k: v
        for k, v in effective(cfg).items()
        if only is None or k == only or k.startswith(f"{only}.")
    }
    if not rows:
        fail(f"no setting is named {only!r} or starts with it; see `mother config show`", "usage")
    if as_json:
        data_console().print_json(orjson.dumps(rows).decode())
        return
    table = Table(title=f"configuration ({config_path() or 'no file'})")
    for col in ("setting", "value", "source"):
        table.add_column(col, overflow="fold")
    for key, row in rows.items():
        table.add_row(key, str(row["value"]), row["source"])
    console.print(table)
