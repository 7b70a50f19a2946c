"""``mother tools sync | list | show | export``: the deterministic tool registry (``registry:tools``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import orjson
import typer
from rich.table import Table

from mother import keys
from mother.cli._common import console, data_console, fail, handle_errors, redis_client, settings
from mother.clock import ServerClock
from mother.records.tools import read_stats
from mother.tools import registry_with_rates, sync
from mother.tools.registry import build_registry, load_manifests
from schemas.tool import ToolRegistry

__all__ = ["app"]

app = typer.Typer(
    help="The deterministic tool registry: sync manifests, list and show tools, export them.",
    no_args_is_help=True,
)


def _registry() -> ToolRegistry:
    registry = registry_with_rates(redis_client(settings()))
    if registry is None:
        fail("no tool registry in Redis yet: run `mother tools sync`", "not_found")
    return registry


@app.command("sync")
@handle_errors
def sync_command(
    paths: Annotated[
        list[Path] | None,
        typer.Argument(
            help="more manifests: directories of *.yaml or files (beside the shipped ones "
            "and tools.manifests_dir)"
        ),
    ] = None,
    check: Annotated[
        bool, typer.Option("--check", help="check the manifests only; write nothing")
    ] = False,
) -> None:
    """Check every tool manifest and replace registry:tools with them (nothing written if one is wrong)."""
    cfg = settings()
    if check:
        registry = build_registry(cfg, load_manifests(cfg, paths or ()), "1970-01-01T00:00:00.000Z")
        console.print(
            f"{len(registry.tools)} manifests are valid: {', '.join(registry.routing_order)}"
        )
        return
    client = redis_client(cfg)
    registry = sync(client, cfg, ServerClock(client).now_iso(), paths or ())
    console.print(
        f"{keys.TOOLS_REGISTRY} synced ({registry.registry_version}, {len(registry.tools)} tools): "
        f"{', '.join(registry.routing_order)}"
    )


@app.command("list")
@handle_errors
def list_command(
    role: Annotated[str | None, typer.Option(help="only the tools this role may use")] = None,
) -> None:
    """The registry's tools in routing order, with their measured success rates."""
    registry = _registry()
    table = Table(
        title=f"{keys.TOOLS_REGISTRY} ({registry.registry_version}, updated {registry.updated_at})"
    )
    for col in ("tool_id", "priority", "category", "side_effects", "roles", "approval", "success"):
        table.add_column(col, justify="right" if col in ("priority", "success") else "left")
    for tool in registry.tools:
        if role is not None and not tool.allows(role):
            continue
        rate = registry.tool_success_rates.get(tool.tool_id)
        table.add_row(
            tool.tool_id,
            str(tool.priority),
            tool.category,
            tool.side_effects,
            ", ".join(tool.allowed_roles),
            "yes" if tool.approval_required else "",
            f"{rate:.1%}" if rate is not None else "-",
        )
    console.print(table)
    console.print(
        f"fallback to the model when tools fail: {'on' if registry.allow_fallback_to_llm else 'off'}"
        f"; default timeout {registry.default_timeout_ms} ms"
    )


@app.command("show")
@handle_errors
def show_command(tool_id: Annotated[str, typer.Argument(help="the tool")]) -> None:
    """A tool's manifest, its MCP annotations and its statistics (tool_stats:{tool_id}), as JSON."""
    registry = _registry()
    tool = registry.tool(tool_id)
    if tool is None:
        fail(
            f"no tool {tool_id!r} in registry:tools; tools: {', '.join(registry.routing_order)}",
            "not_found",
        )
    stats = read_stats(redis_client(settings()), [tool_id]).get(tool_id)
    shown = {
        **tool.model_dump(mode="json"),
        "timeout_ms": registry.timeout_ms(tool),
        "annotations": tool.annotations(),
        "stats": stats.model_dump(mode="json") if stats is not None else None,
    }
    data_console().print_json(orjson.dumps(shown).decode())


@app.command("export")
@handle_errors
def export_command(
    fmt: Annotated[
        Literal["openai", "mcp"],
        typer.Option(
            "--format", help="openai: chat-completions function definitions; mcp: MCP tools"
        ),
    ] = "openai",
) -> None:
    """Every tool as the model sees it: OpenAI function definitions, or Model Context Protocol tools."""
    registry = _registry()
    if fmt == "openai":
        out = [tool.openai_function() for tool in registry.tools]
    else:
        out = [
            {
                "name": tool.tool_id,
                "description": tool.description or tool.tool_name,
                "inputSchema": tool.input_schema,
                "outputSchema": tool.output_schema,
                "annotations": tool.annotations(),
            }
            for tool in registry.tools
        ]
    data_console().print_json(orjson.dumps(out).decode())


mcp_app = typer.Typer(
    help="MCP servers as tools: register one (its tools join the registry), list them, remove one.",
    no_args_is_help=True,
)
app.add_typer(mcp_app, name="mcp")


@mcp_app.command("add")
@handle_errors
def mcp_add(
    name: Annotated[str, typer.Argument(help="the server's name (its tools are NAME__TOOL)")],
    command: Annotated[
        str | None,
        typer.Option(
            help="start it over stdio, inside the tool sandbox at each call (e.g. "
            "'python -m mcp_server_time')"
        ),
    ] = None,
    url: Annotated[
        str | None,
        typer.Option(
            help="its streamable HTTP endpoint (its tools get the network: list them in "
            "tools.sandbox_network_tools)"
        ),
    ] = None,
    roles: Annotated[
        str, typer.Option(help="the roles its tools are offered to, comma-separated ('*': every)")
    ] = "*",
) -> None:
    """Register an MCP server: it is asked for its tools now (through the official MCP client), and they
    join registry:tools (synced again) with their input schemas as contracts and their annotations as
    side effects."""
    from mother.tools import mcp

    cfg = settings()
    client = redis_client(cfg)
    server = mcp.server_of(name, command, url, [r.strip() for r in roles.split(",") if r.strip()])
    now = ServerClock(client).now_iso()
    added = mcp.add(client, server, now)
    registry = sync(client, cfg, now)
    tools = mcp.tools_of(added)
    console.print(
        f"MCP server {name}: {len(tools)} tools joined {keys.TOOLS_REGISTRY} "
        f"({len(registry.tools)} in all)"
    )
    for tool in tools:
        console.print(f"  {tool.tool_id}: {tool.side_effects}", soft_wrap=True)


@mcp_app.command("list")
@handle_errors
def mcp_list() -> None:
    """The registered MCP servers and their tools."""
    from mother.tools import mcp

    servers = mcp.read_servers(redis_client(settings()))
    table = Table(title=f"MCP servers ({len(servers)})")
    for column in ("name", "reached by", "roles", "tools", "added"):
        table.add_column(column)
    for server in servers.values():
        table.add_row(
            server.name,
            " ".join(server.command) if server.command else str(server.url),
            ", ".join(server.allowed_roles),
            ", ".join(str(t.get("name")) for t in server.tools),
            server.added_at or "",
        )
    data_console().print(table)


@mcp_app.command("remove")
@handle_errors
def mcp_remove(name: Annotated[str, typer.Argument()]) -> None:
    """Remove an MCP server and its tools from the registry."""
    from mother.tools import mcp

    cfg = settings()
    client = redis_client(cfg)
    mcp.remove(client, name)
    sync(client, cfg, ServerClock(client).now_iso())
    console.print(f"MCP server {name} removed; {keys.TOOLS_REGISTRY} synced without its tools")
