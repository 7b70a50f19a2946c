"""Model providers and the loop's file tools, against a real chat-completions HTTP server."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from mother import keys
from mother.config import ModelConfig
from mother.errors import ProviderError, ScriptExhausted
from schemas import ScriptedReply
from tests.chat_server import ChatServer
from tests.conftest import start_pipeline, stop_pipeline
from tests.test_pipeline import wait_until
from workers.agent import run_loop
from workers.providers import OpenAIProvider, ScriptedProvider
from workers.tools import ToolBox


def test_openai_provider_runs_the_tool_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through the openai SDK: a tool call is executed, its result sent back, usage summed, final text kept."""
    (tmp_path / "notes.txt").write_text("alpha")
    replies = [
        {
            "tool_calls": [{"name": "read_file", "arguments": {"path": "notes.txt"}}],
            "usage": {"prompt_tokens": 100, "completion_tokens": 7},
        },
        {"text": "The notes say alpha.", "usage": {"prompt_tokens": 130, "completion_tokens": 6}},
    ]
    monkeypatch.setenv("TEST_LLM_KEY", "sk-test")
    with ChatServer(replies) as chat:
        provider = OpenAIProvider(
            "local",
            ModelConfig(
                provider="openai",
                base_url=chat.url,
                api_key_env="TEST_LLM_KEY",
                model="qwen-test",
                max_output_tokens=64,
            ),
        )
        outcome = run_loop(
            provider,
            ToolBox(tmp_path),
            [{"role": "user", "content": "read notes"}],
            max_calls=5,
            check_alive=lambda: None,
        )
    assert outcome.text == "The notes say alpha."
    assert (outcome.usage.model_calls, outcome.usage.tool_calls) == (2, 1)
    assert (outcome.usage.input_tokens, outcome.usage.output_tokens) == (230, 13)
    assert outcome.evidence_count == 1
    first, second = chat.requests
    assert first["auth"] == "Bearer sk-test"
    assert first["body"]["model"] == "qwen-test" and first["body"]["max_tokens"] == 64
    assert {t["function"]["name"] for t in first["body"]["tools"]} == {
        "read_file",
        "list_dir",
        "write_file",
    }
    tool_msg = second["body"]["messages"][-1]
    assert tool_msg == {
        "role": "tool",
        "tool_call_id": "call_0",
        "content": '{"content":"alpha","bytes":5,"truncated":false}',
    }


def test_sdk_client_is_made_once_per_endpoint_and_serves_forked_horses() -> None:
    """Providers for the same endpoint share one SDK client (making one loads the TLS trust store): a worker
    makes it before forking, and each forked work-horse sends its requests on its own connections. The
    first client warmed the SDK up with a call to an in-memory transport, which reached no server."""
    import os

    from workers import providers

    with ChatServer([{"text": "one"}, {"text": "two"}]) as chat:
        config = ModelConfig(provider="openai", base_url=chat.url)
        first, second = OpenAIProvider("local", config), OpenAIProvider("local", config)
        assert first._client is second._client
        assert providers.sdk_warmed is True
        assert (
            OpenAIProvider("other", ModelConfig(provider="openai", base_url=chat.url + "/"))._client
            is not first._client
        )
        # a horse per phase, each on the client the parent made
        for expected in ("one", "two"):
            pid = os.fork()
            if pid == 0:
                try:
                    os._exit(
                        0
                        if first.complete([{"role": "user", "content": "hi"}], []).text == expected
                        else 3
                    )
                except BaseException:  # noqa: BLE001
                    os._exit(4)
            assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
    assert len(chat.requests) == 2


def test_tool_call_with_broken_arguments_is_answered_not_fatal(tmp_path: Path) -> None:
    """Arguments that are not JSON, JSON but not an object, or nested past 32 levels get an error the model
    can act on; the assistant message echoes the model's own text; the loop goes on to the final reply."""
    deep = '{"path": ' + "[" * 300 + "]" * 300 + "}"
    # orjson wrote it back: TypeError
    replies = [
        {
            "tool_calls": [
                {"name": "read_file", "arguments_text": '{"path": "a.txt"'},
                {"name": "read_file", "arguments_text": '["a.txt"]'},
                {"name": "read_file", "arguments_text": deep},
            ]
        },
        {"text": "gave up"},
    ]
    with ChatServer(replies) as chat:
        provider = OpenAIProvider("local", ModelConfig(provider="openai", base_url=chat.url))
        outcome = run_loop(
            provider,
            ToolBox(tmp_path),
            [{"role": "user", "content": "read"}],
            max_calls=5,
            check_alive=lambda: None,
        )
    assert outcome.text == "gave up"
    messages = chat.requests[1]["body"]["messages"]
    assert [c["function"]["arguments"] for c in messages[-4]["tool_calls"]] == [
        '{"path": "a.txt"',
        '["a.txt"]',
        deep,
    ]
    assert [m["content"] for m in messages[-3:]] == [
        'error: the arguments must be a JSON object, got not JSON: \'{"path": "a.txt"\'',
        "error: the arguments must be a JSON object, got a JSON list",
        "error: the arguments are nested more than 32 levels deep; flatten it",
    ]


def test_openai_provider_errors_are_one_line(tmp_path: Path) -> None:
    """An HTTP error or a missing API key becomes a ProviderError naming the model."""
    with ChatServer([]) as chat:
        provider = OpenAIProvider("local", ModelConfig(provider="openai", base_url=chat.url))
        with pytest.raises(ProviderError, match=r"^model local: InternalServerError"):
            provider.complete([{"role": "user", "content": "hi"}], [])
    with pytest.raises(ProviderError, match="environment variable NO_SUCH_KEY_VAR"):
        OpenAIProvider(
            "cloud",
            ModelConfig(
                provider="openai", base_url="http://127.0.0.1:1/v1", api_key_env="NO_SUCH_KEY_VAR"
            ),
        )


@pytest.mark.parametrize(
    "body,error",
    [
        (b"<html>bad gateway</html>", "the reply is not JSON"),
        ([1, 2], "the reply is not a chat completion"),
        ({"choices": []}, "reply has no choices"),
        (
            {"choices": [{"index": 0, "finish_reason": "stop"}]},
            "the reply's first choice has no message",
        ),
    ],
)
def test_openai_provider_refuses_a_malformed_reply_in_one_line(body: object, error: str) -> None:
    """A 200 whose body is not a chat completion is a ProviderError naming the model (it was an
    AttributeError or a JSONDecodeError from deep in the SDK)."""
    with ChatServer([{"body": body}]) as chat:
        provider = OpenAIProvider("local", ModelConfig(provider="openai", base_url=chat.url))
        with pytest.raises(ProviderError, match=f"^model local: {error}") as caught:
            provider.complete([{"role": "user", "content": "hi"}], [])
    assert "\n" not in caught.value.message


def test_openai_provider_takes_what_servers_send_loosely() -> None:
    """Arguments sent as an object (not its JSON text), a call without a name, text beside tool calls, and
    usage that is missing or not counts (negative, text, null) are kept as what they are: the usage is
    marked for the meter to estimate, never charged as 0 or as garbage."""
    call = {
        "id": "c1",
        "type": "function",
        "function": {"name": "read_file", "arguments": {"path": "a.txt"}},
    }
    nameless = {"id": None, "type": "function", "function": {"name": None, "arguments": "{}"}}
    message = {"role": "assistant", "content": "let me look", "tool_calls": [call, nameless]}
    replies = [
        {"body": {"choices": [{"index": 0, "message": message}], "usage": usage}}
        for usage in (
            None,
            {"prompt_tokens": -5, "completion_tokens": 3},
            {"prompt_tokens": "12", "completion_tokens": 3},
            {"prompt_tokens": 12, "completion_tokens": 3},
        )
    ]
    with ChatServer(replies) as chat:
        provider = OpenAIProvider("local", ModelConfig(provider="openai", base_url=chat.url))
        got = [provider.complete([{"role": "user", "content": "hi"}], []) for _ in replies]
    first = got[0]
    assert first.text == "let me look"
    assert [(c.name, c.arguments) for c in first.tool_calls] == [
        ("read_file", {"path": "a.txt"}),
        ("", {}),
    ]
    # an id the tool result can answer to
    assert first.tool_calls[1].id
    assert [(r.input_tokens, r.output_tokens) for r in got] == [(0, 0), (0, 0), (0, 0), (12, 3)]
    assert got[0].usage_note == "the server reported no usage"
    assert (
        got[1].usage_note
        == "the server reported unusable usage: prompt_tokens must not be negative, got -5"
    )
    assert got[2].usage_note.startswith(
        "the server reported unusable usage: prompt_tokens must be a whole number"
    )
    assert got[3].usage_note is None


def _run_on_chat_server(
    tmp_path: Path, replies: list[dict[str, Any]], collect: Callable[[Any, str], Any], **model: Any
) -> tuple[Any, Any, ChatServer]:
    """One run of one phase on model ``local-llm`` (``model``: more of its settings), served by a ChatServer
    replaying ``replies``, through Mother and a worker: (its ResultEnvelope, ``collect(redis, run_id)`` read
    before the stack stops, the server)."""
    from mother.client import MotherClient
    from mother.config import load_settings

    with ChatServer(replies) as chat:
        models = {
            "scripted": {"provider": "scripted"},
            "local-llm": {"provider": "openai", "base_url": chat.url, **model},
        }
        p = start_pipeline(tmp_path, workers=1, env={"MOTHER_MODELS": json.dumps(models)})
        try:
            client = MotherClient(settings=load_settings(redis_url=p.url, models=models))
            run_id = client.submit(
                {
                    "user_id": "u1",
                    "task": "Describe the workspace",
                    "run_id": f"http-{uuid.uuid4().hex[:6]}",
                    "pipeline": [{"name": "look", "role": "analyst", "model": "local-llm"}],
                }
            )
            return client.wait(run_id, timeout=60), collect(p.redis, run_id), chat
        finally:
            stop_pipeline(p)


def _counters_and(*types: str) -> Callable[[Any, str], tuple[dict[str, Any], list[Any]]]:
    """A ``collect`` for :func:`_run_on_chat_server`: the run's budget counters and its activity entries of ``types``."""
    from mother.activity import recent

    def collect(r: Any, run_id: str) -> tuple[dict[str, Any], list[Any]]:
        return (
            json.loads(r.execute_command("JSON.GET", keys.run_budget_key(run_id))),
            [e for e in recent(r, 200, run_id=run_id) if e.type in types],
        )

    return collect


def test_a_model_that_reports_no_usage_is_charged_an_estimate(tmp_path: Path) -> None:
    """Through Mother and a worker: calls whose server reports no usable usage are charged the
    conservative estimate (never 0), each says so as a ``usage_estimated`` activity entry, the reported
    call is charged as reported, and what the model said beside its tool call stays in the conversation."""
    replies = [
        {
            "text": "Let me look first.",
            "tool_calls": [{"name": "list_dir", "arguments": {}}],
            "usage": None,
        },
        {
            "text": "Still looking.",
            "tool_calls": [{"name": "list_dir", "arguments": {}}],
            "usage": {"prompt_tokens": 40, "completion_tokens": 2},
        },
        {"text": "The workspace is empty.", "usage": {"prompt_tokens": -1, "completion_tokens": 9}},
    ]
    envelope, (counters, estimated), chat = _run_on_chat_server(
        tmp_path, replies, _counters_and("usage_estimated")
    )
    assert envelope.termination.reason == "success"
    assert [e.data["why"] for e in estimated] == [
        "the server reported no usage",
        "the server reported unusable usage: prompt_tokens must not be negative, got -1",
    ]
    charged = [(e.data["input_tokens"], e.data["output_tokens"]) for e in estimated]
    # the request's size in tokens, and the reply's
    assert all(i > 20 and o > 0 for i, o in charged)
    assert counters["input_tokens"] == charged[0][0] + 40 + charged[1][0]
    assert counters["output_tokens"] == charged[0][1] + 2 + charged[1][1]
    # every reservation settled
    assert counters["reserved"]["total_tokens"] == 0
    assistant = [m for m in chat.requests[1]["body"]["messages"] if m["role"] == "assistant"]
    assert assistant[0]["content"] == "Let me look first." and assistant[0]["tool_calls"]


def test_a_call_that_fails_after_reaching_the_server_is_charged_its_prompt(tmp_path: Path) -> None:
    """A 2xx reply that is not a chat completion, and a timeout (the request was sent; the server may be
    working on it), are charged the prompt's estimate with a ``usage_estimated`` entry saying why; both were
    charged 0 tokens. A timeout is sent again (``call_retries``: 1) inside its own reservation, so both
    timed-out attempts are charged (the SDK's hidden retry charged them once). The phase's retry then
    succeeds and is charged as reported."""
    replies = [
        {"body": {"choices": []}},
        {"delay": 3, "text": "too late"},
        {"delay": 3, "text": "too late"},
        {"text": "The workspace is empty.", "usage": {"prompt_tokens": 40, "completion_tokens": 6}},
    ]
    envelope, (counters, entries), chat = _run_on_chat_server(
        tmp_path,
        replies,
        _counters_and("usage_estimated", "model_call_retried"),
        request_timeout_seconds=1,
    )
    assert envelope.termination.reason == "success"
    estimated = [e for e in entries if e.type == "usage_estimated"]
    whys = [e.data["why"] for e in estimated]
    estimate = "the call failed after reaching the server (the prompt's conservative estimate)"
    assert whys[0] == f"{estimate}: model local-llm: reply has no choices"
    assert all(w.startswith(f"{estimate}: model local-llm: APITimeoutError") for w in whys[1:])
    charged = [e.data["input_tokens"] for e in estimated]
    assert len(charged) == 3 and all(i > 20 for i in charged)
    assert (counters["input_tokens"], counters["output_tokens"]) == (sum(charged) + 40, 6)
    assert counters["reserved"]["total_tokens"] == 0
    # every request sent went through the guard
    assert counters["model_calls"] == len(chat.requests) == 4
    retried = [e.data for e in entries if e.type == "model_call_retried"]
    assert [(r["retry"], r["wait_seconds"]) for r in retried] == [(1, 0.5)]
    assert "APITimeoutError" in retried[0]["error"]


def test_a_transient_error_status_is_sent_again_after_the_servers_wait(tmp_path: Path) -> None:
    """HTTP 503 with ``retry-after`` and 429 with ``retry-after-ms`` are sent again after the wait the server
    asked for (``call_retries``: 2), in the same phase attempt; a refused request is charged no tokens, and
    a 400 is not sent again (the phase's retry is)."""
    replies = [
        {"status": 503, "headers": {"retry-after": "0.2"}},
        {"status": 429, "headers": {"retry-after-ms": "300"}},
        {"status": 400},
        {"text": "The workspace is empty.", "usage": {"prompt_tokens": 40, "completion_tokens": 6}},
    ]
    envelope, (counters, entries), chat = _run_on_chat_server(
        tmp_path, replies, _counters_and("model_call_retried", "phase_failed"), call_retries=2
    )
    assert envelope.termination.reason == "success"
    assert [e.type for e in entries] == ["model_call_retried", "model_call_retried", "phase_failed"]
    assert [(e.data["retry"], e.data["wait_seconds"]) for e in entries[:2]] == [(1, 0.2), (2, 0.3)]
    assert (
        "InternalServerError" in entries[0].data["error"]
        and "RateLimitError" in entries[1].data["error"]
    )
    assert "BadRequestError" in entries[2].data["error"]
    assert (counters["input_tokens"], counters["output_tokens"]) == (40, 6)
    assert counters["model_calls"] == len(chat.requests) == 4


def test_a_reply_longer_than_a_phase_result_holds_is_cut_and_said(tmp_path: Path) -> None:
    """A final reply past MAX_OUTPUT_CHARS is cut to it with a notice; it failed every attempt (each one
    charged) on the PhaseResult's validation, and the run ended retries_exhausted with pydantic's text."""
    from schemas import MAX_OUTPUT_CHARS

    envelope, _, chat = _run_on_chat_server(
        tmp_path, [{"text": "x" * (MAX_OUTPUT_CHARS + 5)}] * 3, lambda r, run_id: None
    )
    assert envelope.termination.reason == "success" and len(chat.requests) == 1
    assert envelope.output == "x" * MAX_OUTPUT_CHARS
    assert envelope.phases[0].notices == [
        f"output cut to its first {MAX_OUTPUT_CHARS} characters; the reply had {MAX_OUTPUT_CHARS + 5}"
    ]


def test_pipeline_run_on_an_openai_compatible_server(tmp_path: Path) -> None:
    """A run whose model is served over HTTP (as Ollama/vLLM would) succeeds through Mother and a worker."""
    replies = [
        {"tool_calls": [{"name": "list_dir", "arguments": {}}]},
        {"text": "The workspace is empty.", "usage": {"prompt_tokens": 42, "completion_tokens": 9}},
    ]
    # the calibration is added by Mother at the host's calibrate ask
    envelope, calibration, chat = _run_on_chat_server(
        tmp_path,
        replies,
        lambda r, _run_id: wait_until(
            lambda: (c := r.hgetall(keys.token_calibration_key("local-llm"))).get("samples") and c
        ),
    )
    assert envelope.termination.reason == "success"
    assert envelope.output == "The workspace is empty."
    # both calls' reported prompt_tokens (10 + 42) calibrate the model's estimate
    assert (
        calibration["samples"] == "2"
        and calibration["reported"] == "52"
        and int(calibration["estimated"]) > 0
    )
    # 10 default + 42
    assert envelope.phases[0].usage.input_tokens == 52
    assert chat.requests[0]["body"]["messages"][1]["content"].startswith(
        "# Task\nDescribe the workspace"
    )


def test_scripted_provider_follows_attempts_and_runs_out() -> None:
    """Replies limited to other attempts are skipped; asking past the end is ScriptExhausted."""
    replies = [ScriptedReply(fail="raise", attempts=[1]), ScriptedReply(text="second try")]
    with pytest.raises(ProviderError, match="scripted failure"):
        ScriptedProvider("coder", replies, attempt=1).complete([], [])
    provider = ScriptedProvider("coder", replies, attempt=2)
    assert provider.complete([], []).text == "second try"
    with pytest.raises(ScriptExhausted, match="role 'coder'"):
        provider.complete([], [])


def test_read_file_reads_a_huge_file_only_in_part(tmp_path: Path) -> None:
    """A file past MAX_READ_BYTES is read in part (it was read whole into the work-horse's memory, to show
    the model 100,000 characters of it); the output says how big it is and that it was cut."""
    from workers.tools import MAX_READ_BYTES, shipped_tools
    from workers.tools.executor import ToolExecutor

    workspace = tmp_path / "ws"
    workspace.mkdir()
    # sparse: 64 MiB of zero bytes on no disk
    with (workspace / "huge.log").open("wb") as f:
        f.truncate(64 << 20)
    (workspace / "small.txt").write_text("hello")
    outcome = ToolExecutor().run(shipped_tools()["read_file"], workspace, {"path": "huge.log"})
    assert outcome.ok and outcome.output is not None
    assert outcome.output["bytes"] == 64 << 20 and outcome.output["truncated"] is True
    assert len(outcome.output["content"]) == MAX_READ_BYTES
    box = ToolBox(workspace, max_output_chars=1000)
    result = box.run("read_file", {"path": "huge.log"})
    assert result.ok and result.output.startswith('{"content":"\\u0000')
    assert result.output.endswith(" characters in all]") and "[truncated: " in result.output
    assert orjson.loads(box.run("read_file", {"path": "small.txt"}).output)["content"] == "hello"


@pytest.mark.parametrize("path", ["../escape.txt", "/etc/passwd", "a/../../x", "link/inside.txt"])
def test_tools_refuse_paths_outside_the_workspace(tmp_path: Path, path: str) -> None:
    """read/write outside the run's workspace (.., absolute, via a symlink) is refused to the model."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "link").symlink_to(tmp_path)
    box = ToolBox(workspace)
    for name, args in (
        ("read_file", {"path": path}),
        ("write_file", {"path": path, "content": "x"}),
    ):
        result = box.run(name, args)
        assert not result.ok and "outside the run's workspace" in result.output
    assert not (tmp_path / "escape.txt").exists() and not (tmp_path / "x").exists()


def test_tools_inside_the_workspace(tmp_path: Path) -> None:
    """write_file, list_dir and read_file work inside; unknown tools and missing files are errors."""
    box = ToolBox(tmp_path / "ws")
    assert orjson.loads(box.run("write_file", {"path": "d/a.txt", "content": "hi"}).output) == {
        "path": "d/a.txt",
        "bytes": 2,
    }
    assert orjson.loads(box.run("list_dir", {}).output) == {"entries": ["d/"]}
    assert orjson.loads(box.run("read_file", {"path": "d/a.txt"}).output)["content"] == "hi"
    assert box.run("read_file", {"path": "nope"}).output == "error: no file 'nope' in the workspace"
    assert box.run("rm_rf", {}).output.startswith("error: unknown tool 'rm_rf'")
    assert orjson.loads(orjson.dumps(box.specs()))[0]["type"] == "function"


def test_a_timed_out_call_is_charged_its_prompt_as_the_models_tokenizer_counts_it(
    tmp_path: Path,
) -> None:
    """A model whose catalogue entry names its tokenizer: a call that timed out (no usage came back) is
    charged its prompt as that tokenizer counts it, not the conservative estimate (a 119-token prompt
    was charged 874), and the usage_estimated entry says so."""
    from mother.tokens import TokenizerCounter, request_texts
    from tests.conftest import bpe_tokenizer

    tokenizer, _texts = bpe_tokenizer(tmp_path / "tokenizer")
    replies = [
        {"delay": 3, "text": "too late"},
        {"text": "The workspace is empty.", "usage": {"prompt_tokens": 40, "completion_tokens": 6}},
    ]
    envelope, (counters, entries), chat = _run_on_chat_server(
        tmp_path / "run",
        replies,
        _counters_and("usage_estimated"),
        request_timeout_seconds=1,
        call_retries=0,
        tokenizer=str(tokenizer),
    )
    assert envelope.termination.reason == "success"
    (estimated,) = entries
    assert "counted with the model's tokenizer" in estimated.data["why"]
    sent = chat.requests[0]["body"]
    expected = sum(
        TokenizerCounter(tokenizer).count_many(
            request_texts(sent["messages"], sent.get("tools") or [])
        )
    )
    assert estimated.data["input_tokens"] == expected
    assert counters["input_tokens"] == expected + 40
