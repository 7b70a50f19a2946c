"""The MCP server's tools, each a call of the principal's own client (its credentials, its streams:
Mother decides as for any principal): ``submit_run``, ``run_status``, ``run_timeline``, ``list_waiting``,
``approve``, ``deny``, ``answer``.

Over stdio the principal is the one ``MOTHER_REDIS_URL`` names. Over streamable HTTP every request
carries a principal's name and password (HTTP Basic), checked by authenticating to Redis as it: no
credentials, no tool."""

from __future__ import annotations

import base64
import binascii
import contextvars
import hashlib
import threading
from collections.abc import Callable
from typing import Any

import anyio

from mother.client import MotherClient
from mother.config import Settings
from mother.errors import ConfigError, MotherError

__all__ = ["build", "serve_http", "serve_stdio"]

# the client of the principal the current request is from (HTTP), or the process's (stdio)
_current: contextvars.ContextVar[MotherClient] = contextvars.ContextVar("mother_mcp_client")


def _said(error: MotherError) -> dict[str, Any]:
    """A refusal as a tool's result: Mother's one line and its code."""
    return {"ok": False, "code": error.code, "error": error.message}


def build(client_of: Callable[[], MotherClient]) -> Any:
    """The MCP server: its tools call ``client_of()``'s (the principal's) client."""
    try:
        from mcp.server.mcpserver import MCPServer
    except ImportError:
        raise ConfigError(
            "the MCP SDK is not installed: pip install 'mother-harness[mcp]'"
        ) from None

    server = MCPServer(
        "mother-harness",
        instructions="Submit Mother-Harness runs, follow them and decide what they wait for, as the "
        "principal whose credentials this server holds.",
    )

    async def call(fn: Callable[[MotherClient], Any]) -> Any:
        client = client_of()
        try:
            return await anyio.to_thread.run_sync(fn, client)
        except MotherError as exc:
            return _said(exc)

    @server.tool(
        description="Submit a run (a RunSpec as JSON: user_id, task, pipeline, ...); its run_id."
    )
    async def submit_run(spec: dict[str, Any]) -> dict[str, Any]:
        return await call(lambda c: {"ok": True, "run_id": c.submit(spec)})

    @server.tool(
        description="Where a run is: its status, phase, attempt, why it stopped, what it waits for."
    )
    async def run_status(run_id: str) -> dict[str, Any]:
        def status(c: MotherClient) -> dict[str, Any]:
            state = c.status(run_id)
            return {
                "ok": True,
                "run_id": state.run_id,
                "status": state.status,
                "phase": state.phase,
                "attempt": state.attempt,
                "reason": state.reason,
                "waits_for": state.gate.subject if state.gate is not None else None,
                "gate_id": state.gate.gate_id if state.gate is not None else None,
            }

        return await call(status)

    @server.tool(
        description="A run's timeline: every phase attempt's times, waits, tokens and cost."
    )
    async def run_timeline(run_id: str) -> dict[str, Any]:
        return await call(lambda c: {"ok": True, **c.timeline(run_id)})

    @server.tool(
        description="The runs that wait for a person, oldest first, with what each waits for."
    )
    async def list_waiting() -> dict[str, Any]:
        return await call(lambda c: {"ok": True, "waiting": c.waiting(limit=200)})

    @server.tool(
        description="Approve what a run waits for (a phase to start, a tool call); the run goes on."
    )
    async def approve(run_id: str, reason: str, gate_id: str | None = None) -> dict[str, Any]:
        return await call(
            lambda c: {"ok": True, **c.approve(run_id, reason=reason, gate_id=gate_id)}
        )

    @server.tool(description="Deny what a run waits for: it ends approval_denied.")
    async def deny(run_id: str, reason: str, gate_id: str | None = None) -> dict[str, Any]:
        return await call(lambda c: {"ok": True, **c.deny(run_id, reason=reason, gate_id=gate_id)})

    @server.tool(
        description="Answer the question a run waits on; the answer joins its later phases."
    )
    async def answer(run_id: str, answer: str, reason: str = "") -> dict[str, Any]:
        return await call(lambda c: {"ok": True, **c.answer(run_id, answer, reason=reason)})

    return server


def serve_stdio(settings: Settings) -> None:
    """Serve MCP over stdin/stdout as the principal of ``settings.redis_url``."""
    client = MotherClient(settings=settings)
    build(lambda: client).run("stdio")


class _Principals:
    """The clients of the principals that asked over HTTP, by name and password digest (a wrong
    password is refused by Redis, once per request)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._clients: dict[tuple[str, str], MotherClient] = {}
        self._lock = threading.Lock()

    def client(self, header: str | None) -> MotherClient | None:
        if not header or not header.lower().startswith("basic "):
            return None
        try:
            name, _, password = base64.b64decode(header[6:]).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return None
        key = (name, hashlib.sha256(password.encode()).hexdigest())
        with self._lock:
            found = self._clients.get(key)
        if found is not None:
            return found
        try:
            made = MotherClient.signed_in(self.settings, name, password)
        except MotherError:
            return None
        with self._lock:
            self._clients[key] = made
        return made


def serve_http(settings: Settings, host: str, port: int) -> None:
    """Serve MCP over streamable HTTP at ``/mcp``, each request as the principal its Basic credentials
    name (401 without valid ones)."""
    import uvicorn
    from starlette.middleware.base import BaseHTTPMiddleware
    from starlette.responses import PlainTextResponse

    principals = _Principals(settings)
    server = build(_current.get)
    # each request its own transport, in its own context: its tools see its principal
    app = server.streamable_http_app(host=host, stateless_http=True, json_response=True)

    class Credentials(BaseHTTPMiddleware):
        async def dispatch(self, request: Any, call_next: Any) -> Any:
            client = await anyio.to_thread.run_sync(
                principals.client, request.headers.get("authorization")
            )
            if client is None:
                return PlainTextResponse(
                    "a principal's name and password are needed (HTTP Basic)\n",
                    status_code=401,
                    headers={"www-authenticate": 'Basic realm="mother-harness"'},
                )
            token = _current.set(client)
            try:
                return await call_next(request)
            finally:
                _current.reset(token)

    app.add_middleware(Credentials)
    uvicorn.run(app, host=host, port=port, log_level="warning")
