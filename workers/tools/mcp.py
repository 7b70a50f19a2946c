"""A call of an MCP server's tool (a registry tool with ``mcp``), run inside the tool sandbox like every
tool: the server is started there (stdio: its command, in the run's workspace, with the sandbox's
limits, no network, only the workspace writable) or reached at its URL (a tool with the network),
through the official ``mcp`` client. The output is the content's text and the structured content; a
call the server says failed is a ToolError (the model is told)."""

from __future__ import annotations

import asyncio
import os
import tempfile
from pathlib import Path
from typing import Any

from mother.errors import ConfigError, ToolError
from mother.tools.mcp import client_class, failure, said, transport

__all__ = ["call"]

# the most text a call returns (the executor cuts what the model sees further)
MAX_TEXT = 1_000_000


def call(workspace: Path, inputs: dict[str, Any]) -> dict[str, Any]:
    """``inputs``: ``server`` (the tool's McpCall: command or url, tool), ``arguments`` (the model's,
    checked against the tool's input schema)."""
    server, arguments = inputs["server"], inputs.get("arguments") or {}
    with tempfile.TemporaryFile("w+") as errlog:
        try:
            return asyncio.run(_call(workspace, server, arguments, errlog))
        except ToolError:
            raise
        except ConfigError as exc:
            raise ToolError(exc.message) from None
        except Exception as exc:  # noqa: BLE001
            raise ToolError(
                f"MCP server {server.get('server')}: {failure(exc)}{said(errlog)}"
            ) from None


async def _call(
    workspace: Path, server: dict[str, Any], arguments: dict[str, Any], errlog: Any
) -> dict[str, Any]:
    Client = client_class()
    # a stdio server starts in the run's workspace
    os.chdir(workspace)
    async with Client(transport(server.get("command"), server.get("url"), errlog)) as client:
        result = await client.call_tool(server["tool"], arguments)
    text = "\n".join(
        str(getattr(part, "text", "") or "")
        for part in result.content
        if getattr(part, "type", "") == "text"
    )[:MAX_TEXT]
    if result.is_error:
        raise ToolError(f"MCP tool {server['tool']} failed: {text[:2000] or 'no detail'}")
    structured = result.structured_content
    return {"content": text, "structured": structured if isinstance(structured, dict) else None}
