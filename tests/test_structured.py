"""Structured replies from real models (issue 67): a model whose catalogue entry takes a JSON schema is
asked for what its phase must state in one (``response_format``); a server that ignores it is read as
prose; a reply that states no verdict is a rejection the conflict policy decides on, not a failed attempt.
Against the local chat-completions server (the one allowed model double), through Mother and a worker."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

from mother import keys
from mother.client import MotherClient
from mother.config import load_settings
from mother.errors import NotFound
from tests.chat_server import ChatServer
from tests.conftest import start_pipeline, stop_pipeline
from tests.test_pipeline import wait_until

ANSWER = {
    "answer": "def add(a, b):\n    return a + b",
    "confidence": 0.8,
    "evidence_count": 1,
    "findings": [],
}
REVIEW = {"verdict": "accept", "summary": "Correct and tested.", "confidence": 0.9, "evidence_count": 2, "findings": []}  # fmt: skip


def _run(
    tmp_path: Path, replies: list[dict[str, Any]], honours: bool, wait: bool = True
) -> tuple[Any, Any, ChatServer, Any]:
    """A coder → critic run on model local-llm (structured_output: json_schema) served by a ChatServer
    that honours response_format or not: (its envelope or None, its state, the server, the pipeline)."""
    chat = ChatServer(replies, honours_response_format=honours).__enter__()
    models = {
        "scripted": {"provider": "scripted"},
        "local-llm": {
            "provider": "openai",
            "base_url": chat.url,
            "structured_output": "json_schema",
        },
    }
    p = start_pipeline(tmp_path, workers=1, env={"MOTHER_MODELS": json.dumps(models)})
    client = MotherClient(settings=load_settings(redis_url=p.url, models=models))
    run_id = client.submit(
        {
            "run_id": f"structured-{uuid.uuid4().hex[:6]}",
            "user_id": "u1",
            "task": "Write add(a, b)",
            "pipeline": [
                {"name": "code", "role": "coder", "model": "local-llm", "max_retries": 0},
                {
                    "name": "review",
                    "role": "critic",
                    "model": "local-llm",
                    "reviews": "code",
                    "max_retries": 0,
                },
            ],
        }
    )
    envelope = client.wait(run_id, timeout=60) if wait else None
    return envelope, client.status(run_id) if wait else run_id, chat, (p, client)


def test_a_model_that_honours_a_json_schema_states_its_verdict_in_it(tmp_path: Path) -> None:
    """The coder is asked for its answer, confidence and evidence (`phase_answer`), the critic for its
    verdict (`review_verdict`), each a strict JSON schema; the replies in them are read as what they
    state: the critic's verdict accepts with its confidence, the output is the answer's text."""
    replies = [{"text": "ignored", "structured": ANSWER}, {"text": "ignored", "structured": REVIEW}]
    envelope, state, chat, (p, _client) = _run(tmp_path, replies, honours=True)
    try:
        assert envelope.termination.reason == "success"
        names = [r["body"]["response_format"]["json_schema"]["name"] for r in chat.requests]
        assert names == ["phase_answer", "review_verdict"]
        schema = chat.requests[1]["body"]["response_format"]["json_schema"]["schema"]
        assert schema["properties"]["verdict"]["enum"] == ["accept", "reject"]
        assert schema["additionalProperties"] is False and set(schema["required"]) == set(
            schema["properties"]
        )
        code, review = state.results
        assert code.output.startswith("def add(a, b)") and code.confidence == 0.8
        assert review.verdict is not None
        assert (review.verdict.decision, review.verdict.confidence) == ("accept", 0.9)
        assert review.output == "Correct and tested."
    finally:
        stop_pipeline(p)
        chat.__exit__()


def test_a_server_that_ignores_the_schema_is_read_as_prose(tmp_path: Path) -> None:
    """The same run on a server that ignores response_format: the replies are prose, and the critic's
    `VERDICT: ACCEPT` line is its verdict."""
    replies = [
        {"text": "def add(a, b):\n    return a + b", "structured": ANSWER},
        {"text": "Correct and tested.\nVERDICT: ACCEPT", "structured": REVIEW},
    ]
    envelope, state, chat, (p, _client) = _run(tmp_path, replies, honours=False)
    try:
        assert envelope.termination.reason == "success"
        assert all("response_format" in r["body"] for r in chat.requests)
        review = state.results[1]
        assert review.verdict is not None and review.verdict.decision == "accept"
        assert review.output == "Correct and tested.\nVERDICT: ACCEPT"
    finally:
        stop_pipeline(p)
        chat.__exit__()


def test_a_reply_that_states_no_verdict_goes_to_the_conflict_policy(tmp_path: Path) -> None:
    """A critic that states no verdict anywhere (the server ignores the schema, its prose says none)
    is a rejection of confidence 0 (conflicts.missing_verdict: reject): the run reaches the conflict
    logic (critic_vs_coder) instead of failing the attempt verdict_missing until its retries run out."""
    replies = [
        {"text": "def add(a, b):\n    return a + b"},
        {"text": "I looked at it."},
        # the arbiter the policy runs first, and what follows
        *({"text": "WINNER: code\nVERDICT: ACCEPT"} for _ in range(6)),
    ]
    _envelope, run_id, chat, (p, client) = _run(tmp_path, replies, honours=False, wait=False)
    try:

        def conflicted() -> Any:
            try:
                found = client.status(run_id)
            except NotFound:
                return None
            return found if found.conflicts else None

        state = wait_until(conflicted, timeout=60)
        assert not [h for h in state.history if "verdict_missing" in h.detail]
        conflict = json.loads(
            client.redis.execute_command("JSON.GET", keys.conflict_key(state.conflicts[0]))
        )
        assert conflict["conflict_type"] == "critic_vs_coder"
        critic = next(o for o in conflict["their_outputs"] if o["agent_id"] == "critic")
        assert (critic["stance"], critic["confidence"]) == ("reject", 0.0)
        assert conflict["strategy_applied"] == "run_arbiter"
    finally:
        client.cancel(run_id, reason="done")
        stop_pipeline(p)
        chat.__exit__()
