"""MCP both ways (issue 67), with the official `mcp` SDK and real servers from the package index:
mcp-server-time and mcp-server-git registered as tool sources and called in a real run, each call
started inside the tool sandbox over stdio; and the official client driving `mother mcp serve` as a
principal (submit, status, approve), over stdio and over streamable HTTP with the principal's
credentials."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mother import keys
from mother.identities import party_url, principals
from mother.server import free_port
from schemas.journal import Step
from tests.conftest import (
    MOTHER_BIN,
    Pipeline,
    cli,
    gated_spec,
    start_pipeline,
    stop_pipeline,
    tool_calls_counted,
)
from tests.test_pipeline import wait_until

NOW = "2026-12-06T00:00:00.000Z"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pipeline]:
    """A pipeline whose roles may call the two MCP servers' tools."""
    permissions = ["tool.time__*", "tool.git__*", "tool.write_file", "model.*"]
    p = start_pipeline(
        tmp_path_factory.mktemp("mcp"),
        workers=1,
        env={
            "MOTHER_TOOLS__REFRESH_SECONDS": "0.5",
            "MOTHER_HARNESS__DEFAULT_PERMISSIONS": json.dumps(permissions),
        },
    )
    wait_until(
        lambda: p.redis.execute_command("FUNCTION", "LIST", "LIBRARYNAME", "mother"), timeout=30
    )
    try:
        yield p
    finally:
        stop_pipeline(p)


def test_mcp_servers_are_tools_of_a_real_run(served: Pipeline) -> None:
    """`mother tools mcp add` asks each server for its tools (the official client): they join the registry
    with their input schemas as contracts and their annotations as side effects (git_status read_only,
    git_add idempotent_write, git_commit and git_reset destructive). A run's model calls
    time__get_current_time and git__git_status: each call starts its server over stdio inside the tool
    sandbox, in the run's workspace; the results come back to the model and into the journal, and the
    calls are charged and counted like any tool's."""
    p = served
    time_cmd = f"{sys.executable} -m mcp_server_time --local-timezone UTC"
    added = cli("tools", "mcp", "add", "time", "--command", time_cmd, url=p.url)
    assert added.exit_code == 0, added.output
    assert "time__get_current_time: read_only" in added.output
    added = cli(
        "tools", "mcp", "add", "git", "--command", f"{sys.executable} -m mcp_server_git", url=p.url
    )
    assert added.exit_code == 0, added.output
    for tool, effects in (
        ("git__git_status", "read_only"),
        ("git__git_add", "idempotent_write"),
        ("git__git_commit", "destructive"),
        ("git__git_reset", "destructive"),
    ):
        assert f"{tool}: {effects}" in added.output
    shown = cli("tools", "show", "time__get_current_time", url=p.url)
    assert json.loads(shown.stdout)["input_schema"]["properties"]["timezone"]["type"] == "string"
    listed = cli("tools", "mcp", "list", url=p.url)
    assert "get_current_time" in listed.output and "git_status" in listed.output

    run_id = "mcp-run-1"
    workspace = p.workspace / run_id
    workspace.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(workspace)], check=True)
    (workspace / "hello.txt").write_text("hi\n")
    wait_until(
        lambda: p.redis.execute_command("JSON.GET", keys.TOOLS_REGISTRY, "$.routing_order") and True
    )
    spec = {
        "run_id": run_id,
        "user_id": "u",
        "task": "Tell the time and the repository's state",
        "pipeline": [{"name": "look", "role": "coder", "model": "scripted"}],
        "scripts": {
            "coder": [
                {
                    "tool_calls": [
                        {"name": "time__get_current_time", "arguments": {"timezone": "UTC"}}
                    ]
                },
                {"tool_calls": [{"name": "git__git_status", "arguments": {"repo_path": "."}}]},
                {"tool_calls": [{"name": "time__get_current_time", "arguments": {"timezone": 7}}]},
                {"text": "done"},
            ]
        },
    }
    p.client.submit(spec)
    assert p.wait(run_id, 90).termination.reason == "success"
    done = [
        Step.model_validate_json(s)
        for s in p.redis.lrange(keys.journal_key(run_id, 0), 0, -1)
        if '"kind":"tool"' in s and '"state":"done"' in s
    ]
    first, second = (json.loads(s.output or "{}") for s in done[:2])
    assert first["structured"]["timezone"] == "UTC" and first["structured"]["datetime"]
    assert "hello.txt" in second["content"] and "No commits yet" in second["content"]
    # a call its input schema refuses never reaches the server: the model is told, nothing is charged
    assert len(done) == 2
    budget = json.loads(p.redis.execute_command("JSON.GET", keys.run_budget_key(run_id)))
    assert budget["tool_calls"] == 2
    stats = tool_calls_counted(p.redis, "time__get_current_time", 1)
    assert stats["success_count"] == 1
    removed = cli("tools", "mcp", "remove", "git", url=p.url)
    assert removed.exit_code == 0
    registry = json.loads(p.redis.execute_command("JSON.GET", keys.TOOLS_REGISTRY))
    assert not [t for t in registry["tools"] if t["tool_id"].startswith("git__")]
    bad = cli("tools", "mcp", "add", "nothing", "--command", f"{sys.executable} -c pass", url=p.url)
    assert bad.exit_code != 0 and "could not be asked for its tools" in bad.output


def _principal(p: Pipeline, name: str, user: str) -> tuple[str, str]:
    if principals.load(p.redis, name) is not None:
        principals.remove(p.redis, name)
    _, password = principals.add(
        p.redis, name, ["submit", "approve", "answer", "cancel"], [user], NOW
    )
    return party_url(p.url, name, password), password


async def _drive(client: Any, user: str) -> dict[str, Any]:
    """Submit a gated run, see it wait, approve it, see it end; and one refusal."""
    tools = {t.name for t in (await client.list_tools()).tools}
    assert tools >= {
        "submit_run",
        "run_status",
        "run_timeline",
        "list_waiting",
        "approve",
        "deny",
        "answer",
    }
    submitted = (
        await client.call_tool("submit_run", {"spec": gated_spec(user)})
    ).structured_content
    run_id = submitted["run_id"]
    for _ in range(300):
        status = (await client.call_tool("run_status", {"run_id": run_id})).structured_content
        if status.get("status") == "waiting":
            break
        await asyncio.sleep(0.1)
    assert status["waits_for"], status
    waiting = (await client.call_tool("list_waiting", {})).structured_content
    assert run_id in [w["run_id"] for w in waiting["waiting"]]
    approved = (
        await client.call_tool("approve", {"run_id": run_id, "reason": "ship it"})
    ).structured_content
    assert approved["ok"], approved
    for _ in range(300):
        status = (await client.call_tool("run_status", {"run_id": run_id})).structured_content
        if status.get("status") == "terminated":
            break
        await asyncio.sleep(0.1)
    refused = (
        await client.call_tool("deny", {"run_id": run_id, "reason": "late"})
    ).structured_content
    timeline = (await client.call_tool("run_timeline", {"run_id": run_id})).structured_content
    return {"run_id": run_id, "status": status, "refused": refused, "timeline": timeline}


def test_mother_mcp_serve_over_stdio_acts_as_the_principal(
    served: Pipeline, tmp_path: Path
) -> None:
    """The official MCP client starts `mother mcp serve` (stdio) with alice-svc's URL: it submits a run,
    sees it wait, approves it (the decision's actor is alice-svc), sees it succeed; a decision Mother
    refuses comes back as its one line."""
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    p = served
    url, _password = _principal(p, "alice-svc", "alice")
    env = {**os.environ, "MOTHER_REDIS_URL": url}
    params = StdioServerParameters(command=str(MOTHER_BIN), args=["mcp", "serve"], env=env)

    async def run() -> dict[str, Any]:
        with (tmp_path / "stderr.txt").open("w") as errlog:
            from mcp.client.stdio import stdio_client

            async with Client(stdio_client(params, errlog=errlog)) as client:
                return await _drive(client, "alice")

    got = asyncio.run(run())
    assert got["status"]["status"] == "terminated" and got["status"]["reason"] == "success"
    assert got["refused"]["ok"] is False and "not waiting" in got["refused"]["error"]
    assert got["timeline"]["attempts"]
    (gate,) = p.client.status(got["run_id"]).gates
    assert (gate.decision.decision, gate.decision.actor) == ("approve", "alice-svc")


def test_mother_mcp_serve_over_http_needs_a_principals_credentials(served: Pipeline) -> None:
    """`mother mcp serve --http`: a request without a principal's name and password is refused (401);
    with bob-svc's (HTTP Basic) the official client submits and approves as bob-svc."""
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    p = served
    _url, password = _principal(p, "bob-svc", "bob")
    port = free_port()
    env = {**os.environ, "MOTHER_REDIS_URL": p.url}
    server = subprocess.Popen(
        [str(MOTHER_BIN), "mcp", "serve", "--http", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    endpoint = f"http://127.0.0.1:{port}/mcp"
    try:

        def up() -> bool:
            try:
                return httpx2.post(endpoint, json={}).status_code == 401
            except httpx2.HTTPError:
                return False

        wait_until(up, timeout=30)
        wrong = httpx2.post(endpoint, json={}, auth=("bob-svc", "not-its-password"))
        assert wrong.status_code == 401

        async def run() -> dict[str, Any]:
            async with (
                httpx2.AsyncClient(auth=("bob-svc", password), timeout=30) as http,
                Client(streamable_http_client(endpoint, http_client=http)) as client,
            ):
                return await _drive(client, "bob")

        got = asyncio.run(run())
        assert got["status"]["reason"] == "success"
        (gate,) = p.client.status(got["run_id"]).gates
        assert gate.decision.actor == "bob-svc"
    finally:
        server.terminate()
        server.wait(10)
