"""MCP servers as tools (``mother tools mcp add``): a server is registered in ``registry:mcp`` with the
tools it lists (through the official ``mcp`` SDK), and each of its tools joins ``registry:tools`` at every
sync as a registry tool whose call goes to the server (``workers/tools/mcp.py``, inside the tool sandbox
like every tool: counted, charged, audited). Its input schema is the tool's contract; its annotations
give its side effects (readOnlyHint: read_only; destructiveHint false with idempotentHint:
idempotent_write; otherwise destructive), and the sandbox holds it to them, whatever the server says."""

from __future__ import annotations

import asyncio
import re
import shlex
import tempfile
from typing import Any

import orjson

from mother import keys
from mother.errors import ConfigError, InvalidSpec, NotFound
from schemas.tool import DeterministicTool, McpCall, McpServer

__all__ = [
    "OUTPUT_SCHEMA",
    "add",
    "failure",
    "list_tools",
    "read_servers",
    "remove",
    "said",
    "server_of",
    "side_effects",
    "tools_of",
    "transport",
]

# what a call of an MCP tool returns (the executor checks it): the content's text, the structured
# content the server sent (if any), and whether the server said the call failed
OUTPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"content": {"type": "string"}, "structured": {"type": ["object", "null"]}},
    "required": ["content"],
}
# the sandboxed entrypoint every MCP tool's call runs
ENTRYPOINT = "workers.tools.mcp:call"
# an OpenAI function name: letters, digits, _ and -
_NAME = re.compile(r"[^A-Za-z0-9_-]+")
# how long listing a server's tools may take (a server that starts slowly, or never answers)
LIST_TIMEOUT_SECONDS = 60.0


def server_of(name: str, command: str | None, url: str | None, roles: list[str]) -> McpServer:
    """A server to register: exactly one of ``command`` (split as a shell would) and ``url``."""
    keys.check_id(name, "name")
    if (command is None) == (url is None):
        raise InvalidSpec("give the server's --command (stdio) or its --url (streamable HTTP), one")
    argv = shlex.split(command) if command is not None else None
    if argv is not None and not argv:
        raise InvalidSpec("--command is empty")
    return McpServer(name=name, command=argv, url=url, allowed_roles=roles or ["*"])


def list_tools(server: McpServer, timeout: float = LIST_TIMEOUT_SECONDS) -> list[dict[str, Any]]:
    """The tools ``server`` lists (name, description, inputSchema, annotations), asked through the
    official MCP client; a server that cannot be started or reached is one line."""
    Client = client_class()

    async def listed(errlog: Any) -> list[dict[str, Any]]:
        async with Client(transport(server.command, server.url, errlog)) as client:
            found = await client.list_tools()
        return [
            {
                "name": t.name,
                "description": t.description or "",
                "inputSchema": t.input_schema,
                "annotations": t.annotations.model_dump() if t.annotations is not None else {},
            }
            for t in found.tools
        ]

    with tempfile.TemporaryFile("w+") as errlog:
        try:
            return asyncio.run(asyncio.wait_for(listed(errlog), timeout))
        except TimeoutError:
            raise ConfigError(
                f"MCP server {server.name} listed no tools within {timeout:g}s{said(errlog)}"
            ) from None
        except Exception as exc:  # noqa: BLE001
            raise ConfigError(
                f"MCP server {server.name} could not be asked for its tools ({failure(exc)})"
                f"{said(errlog)}"
            ) from None


def client_class() -> Any:
    """The official MCP SDK's client (the mcp extra)."""
    try:
        from mcp import Client
    except ImportError:
        raise ConfigError(
            "the MCP SDK is not installed: pip install 'mother-harness[mcp]'"
        ) from None
    return Client


def transport(command: list[str] | None, url: str | None, errlog: Any) -> Any:
    """How the MCP client reaches a server: its ``command`` started over stdio (what it writes on
    stderr goes to ``errlog``, a file), or its streamable HTTP ``url``."""
    if url is not None:
        return url
    from mcp.client.stdio import StdioServerParameters, stdio_client

    if not command:
        raise ConfigError("an MCP server is reached by a command or a URL; it has neither")
    return stdio_client(StdioServerParameters(command=command[0], args=command[1:]), errlog=errlog)


def failure(exc: BaseException) -> str:
    """What went wrong talking to a server, in one short line (its first)."""
    return f"{type(exc).__name__}: {exc}".splitlines()[0][:300]


def said(errlog: Any) -> str:
    """The last line a server wrote on stderr, for a one-line error."""
    errlog.seek(0)
    lines = [line.strip() for line in errlog.read().splitlines() if line.strip()]
    return f"; it said: {lines[-1][:300]}" if lines else ""


def side_effects(annotations: dict[str, Any]) -> str:
    """The side-effect class of a tool its server annotates so (the MCP spec's defaults: not read-only,
    destructive, not idempotent)."""
    if annotations.get("read_only_hint", annotations.get("readOnlyHint")) is True:
        return "read_only"
    destructive = annotations.get("destructive_hint", annotations.get("destructiveHint"))
    idempotent = annotations.get("idempotent_hint", annotations.get("idempotentHint"))
    if destructive is False and idempotent is True:
        return "idempotent_write"
    return "destructive"


def tools_of(server: McpServer) -> list[DeterministicTool]:
    """The registry tools of ``server``'s tools: id ``{server}__{tool}`` (an OpenAI function name)."""
    made = []
    for listed in server.tools:
        name = str(listed.get("name") or "")
        schema = listed.get("inputSchema")
        schema = schema if isinstance(schema, dict) and schema.get("type") == "object" else None
        made.append(
            DeterministicTool.model_validate(
                {
                    "tool_id": f"{server.name}__{_NAME.sub('_', name)}"[:128],
                    "tool_name": f"{name} ({server.name})"[:200],
                    "version": "1.0.0",
                    "description": str(listed.get("description") or "")[:2000],
                    "category": "network" if server.url else "compute",
                    "input_schema": schema or {"type": "object"},
                    "output_schema": OUTPUT_SCHEMA,
                    "side_effects": side_effects(_mapping(listed.get("annotations"))),
                    "priority": 10,
                    "allowed_roles": server.allowed_roles,
                    "entrypoint": ENTRYPOINT,
                    "network": server.url is not None,
                    "mcp": McpCall(
                        server=server.name, tool=name, command=server.command, url=server.url
                    ),
                }
            )
        )
    return made


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def read_servers(client: Any) -> dict[str, McpServer]:
    """The registered MCP servers, by name."""
    raw = client.execute_command("JSON.GET", keys.MCP_SERVERS)
    found = orjson.loads(raw) if raw else {}
    return {name: McpServer.model_validate(doc) for name, doc in found.items()}


def add(client: Any, server: McpServer, now: str) -> McpServer:
    """Register ``server`` with the tools it lists now (replacing one of the same name)."""
    listed = server.model_copy(update={"tools": list_tools(server), "added_at": now})
    # its tools as the registry will hold them, checked before anything is written
    tools_of(listed)
    pipe = client.pipeline(transaction=True)
    pipe.execute_command("JSON.SET", keys.MCP_SERVERS, "$", "{}", "NX")
    pipe.execute_command("JSON.SET", keys.MCP_SERVERS, f'$["{server.name}"]', listed.to_json())
    pipe.execute()
    return listed


def remove(client: Any, name: str) -> None:
    if name not in read_servers(client):
        raise NotFound(f"no MCP server {name!r} is registered; `mother tools mcp list` lists them")
    client.execute_command("JSON.DEL", keys.MCP_SERVERS, f'$["{name}"]')
