"""Mother as an MCP server (``mother mcp serve``): an MCP client (an IDE, a desktop assistant, another
agent) submits runs, follows them and decides what they wait for, as the principal whose credentials it
holds (:mod:`mother.mcpserver.server`)."""

from mother.mcpserver.server import build, serve_http, serve_stdio

__all__ = ["build", "serve_http", "serve_stdio"]
