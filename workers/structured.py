"""Structured replies from real models: where the catalogue says a model takes a JSON schema for its reply
(``structured_output: json_schema``: OpenAI, vLLM, llama.cpp's server, Ollama), a phase asks for what it
must state in one (``response_format``): a reviewing phase its verdict, an arbiter its winner, any phase
its confidence, evidence and findings; the reply's text is the schema's ``summary`` (or ``answer``).

A server that ignores ``response_format`` answers in prose: the reply is read as text, as before
(``workers.verdict``: a ``VERDICT: ACCEPT`` line). Nothing here trusts the reply's JSON: a value of the
wrong type or out of range is left out, as if not stated."""

from __future__ import annotations

import math
from typing import Any

import orjson

from schemas.conflict import RoleKind

__all__ = ["response_format", "structured_fields"]

_FINDINGS = {"type": "array", "items": {"type": "string", "enum": ["contradiction", "ambiguity"]}}
_COMMON = {
    "confidence": {"type": "number", "minimum": 0, "maximum": 1},
    "evidence_count": {"type": "integer", "minimum": 0},
    "findings": _FINDINGS,
}


def response_format(kind: RoleKind, arbiter: bool) -> dict[str, Any]:
    """The ``response_format`` a phase of ``kind`` sends (an ``arbiter`` also names the winning
    proposal): a strict JSON schema, every property required (what OpenAI's strict mode needs)."""
    text: dict[str, Any]
    if kind == "work" and not arbiter:
        text = {"answer": {"type": "string", "description": "the phase's answer, in full"}}
        name = "phase_answer"
    else:
        text = {
            "verdict": {"type": "string", "enum": ["accept", "reject"]},
            "summary": {"type": "string", "description": "the review, in prose"},
        }
        name = "review_verdict"
    properties: dict[str, Any] = {**text, **_COMMON}
    if arbiter:
        properties["winner"] = {
            "type": "string",
            "description": "the name of the phase whose proposal wins",
        }
        name = "arbiter_decision"
    schema = {
        "type": "object",
        "properties": properties,
        "required": list(properties),
        "additionalProperties": False,
    }
    return {"type": "json_schema", "json_schema": {"name": name, "strict": True, "schema": schema}}


def structured_fields(content: str | None) -> dict[str, Any] | None:
    """What a reply to a ``response_format`` states, read from its content: ``text`` (its summary or
    answer), and those of ``verdict``, ``confidence``, ``evidence_count``, ``findings``, ``winner`` that
    are well formed; None when the content is not such a JSON object (the server ignored the schema)."""
    if not content or not content.lstrip().startswith("{"):
        return None
    try:
        found = orjson.loads(content)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(found, dict):
        return None
    text = found.get("summary", found.get("answer"))
    if not isinstance(text, str):
        return None
    got: dict[str, Any] = {"text": text}
    verdict = found.get("verdict")
    if isinstance(verdict, str) and verdict.lower() in ("accept", "reject"):
        got["verdict"] = verdict.lower()
    confidence: Any = found.get("confidence")
    number = isinstance(confidence, (int, float)) and not isinstance(confidence, bool)
    if number and math.isfinite(confidence) and 0 <= confidence <= 1:
        got["confidence"] = float(confidence)
    evidence = found.get("evidence_count")
    if isinstance(evidence, int) and not isinstance(evidence, bool) and evidence >= 0:
        got["evidence_count"] = evidence
    findings = found.get("findings")
    if isinstance(findings, list):
        got["findings"] = [f for f in findings if f in ("contradiction", "ambiguity")][:2]
    winner = found.get("winner")
    if isinstance(winner, str) and 0 < len(winner) <= 128:
        got["winner"] = winner
    return got
