"""``mother mcp serve``: Mother as an MCP server, for an MCP client acting as a principal."""

from __future__ import annotations

from typing import Annotated

import typer

from mother.cli._common import handle_errors, settings

__all__ = ["app"]

app = typer.Typer(
    help="Mother as an MCP server: MCP clients submit runs, follow them and decide their gates as a principal.",
    no_args_is_help=True,
)


@app.command("serve")
@handle_errors
def serve(
    http: Annotated[
        bool,
        typer.Option(
            "--http",
            help="streamable HTTP at /mcp, each request as the principal its Basic credentials name "
            "(default: stdio, as MOTHER_REDIS_URL's principal)",
        ),
    ] = False,
    host: Annotated[str, typer.Option(help="with --http: the address")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="with --http: the port", min=1, max=65535)] = 8765,
) -> None:
    """Serve the MCP tools submit_run, run_status, run_timeline, list_waiting, approve, deny and answer:
    over stdio as MOTHER_REDIS_URL's principal, or with --http as the principal each request names."""
    from mother.mcpserver import serve_http, serve_stdio

    cfg = settings()
    if http:
        serve_http(cfg, host, port)
    else:
        serve_stdio(cfg)
