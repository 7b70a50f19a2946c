"""What a worker host asks of Mother, and what Mother replies: the wire format both sides share.

A host appends each ask to its own stream ``mother:asks:{host}`` (only its ACL user may: the stream is who
asks) with the fields ``k`` (its kind), ``id`` (16 hex digits the host chose: where the reply goes),
``run``/``i``/``a`` (the attempt it is about, empty for a host's own asks) and ``b`` (its body, JSON).
Mother replies on ``host_reply:{host}:{id}`` (a list, expiring), which only that host may read: JSON
``{"ok": true, ...}``, or ``{"ok": false, "code": ..., "error": ...}``.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any

import orjson

from mother import keys

__all__ = [
    "ATTEMPT_KINDS",
    "HOST_KINDS",
    "MAX_ASK_BYTES",
    "REPLY_TTL_MS",
    "Ask",
    "AskInvalid",
    "ask_fields",
    "new_ask_id",
    "parse_ask",
    "refused",
]

# asks about one attempt the host holds, and the host's own (liveness, the GC's)
ATTEMPT_KINDS = frozenset(
    {
        "begin",
        "alive",
        "charge",
        "emit",
        "violation",
        "tool_stat",
        "calibrate",
        "library",
        "spawn",
        "child",
        "workspace",
        "blobs",
        "store",
        "result",
    }
)
HOST_KINDS = frozenset({"beat", "gc"})
# an ask longer than this is refused unread (a workspace's contents go in several)
MAX_ASK_BYTES = 64 * 2**20
# a reply nobody took is gone after this
REPLY_TTL_MS = 120_000


class AskInvalid(ValueError):
    """An entry on a host's stream that is not an ask: refused with its reason (no reply when it names
    no reply id)."""

    def __init__(self, why: str, ask_id: str | None = None) -> None:
        super().__init__(why)
        self.why, self.ask_id = why, ask_id


@dataclass(frozen=True)
class Ask:
    """One ask, as Mother read it: ``host`` is its stream's, never the entry's word."""

    host: str
    entry_id: str
    kind: str
    ask_id: str | None
    attempt: tuple[str, int, int] | None
    body: dict[str, Any]

    @property
    def reply_key(self) -> str | None:
        return keys.host_reply_key(self.host, self.ask_id) if self.ask_id else None

    @property
    def run_id(self) -> str:
        assert self.attempt is not None
        return self.attempt[0]


def new_ask_id() -> str:
    return secrets.token_hex(8)


def ask_fields(
    kind: str, ask_id: str | None, attempt: tuple[str, int, int] | None, body: Any
) -> dict[str, Any]:
    """The stream entry's fields of an ask."""
    run, index, number = attempt if attempt is not None else ("", "", "")
    return {
        "k": kind,
        "id": ask_id or "",
        "run": run,
        "i": index,
        "a": number,
        "b": orjson.dumps(body),
    }


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def parse_ask(host: str, entry_id: str, fields: dict[Any, Any]) -> Ask:
    """The ask an entry of ``host``'s stream is, or AskInvalid naming what is wrong."""
    got = {_text(k): v for k, v in fields.items()}
    ask_id = _text(got.get("id", "")) or None
    if ask_id is not None and not (
        16 <= len(ask_id) <= 32 and all(c in "0123456789abcdef" for c in ask_id)
    ):
        raise AskInvalid("its id is not 16-32 hexadecimal digits")
    kind = _text(got.get("k", ""))
    if kind not in ATTEMPT_KINDS | HOST_KINDS:
        raise AskInvalid(f"unknown kind {kind[:40]!r}", ask_id)
    size = sum(len(v) if isinstance(v, (bytes, str)) else 8 for v in got.values())
    if size > MAX_ASK_BYTES:
        raise AskInvalid(f"{size} bytes, over the {MAX_ASK_BYTES} an ask may have", ask_id)
    attempt = None
    run, index, number = (_text(got.get(f, "")) for f in ("run", "i", "a"))
    # a violation may be the host's own (a job refused on its queue), not an attempt's
    if kind in ATTEMPT_KINDS and (run or kind != "violation"):
        if not (keys.is_id(run) and index.isdigit() and number.isdigit()):
            raise AskInvalid("it names no attempt (run, i, a)", ask_id)
        attempt = (run, int(index), int(number))
    try:
        body = orjson.loads(got.get("b") or b"{}")
    except orjson.JSONDecodeError:
        raise AskInvalid("its body is not JSON", ask_id) from None
    if not isinstance(body, dict):
        raise AskInvalid("its body is not a JSON object", ask_id)
    return Ask(host, entry_id, kind, ask_id, attempt, body)


def refused(code: str, error: str) -> dict[str, Any]:
    return {"ok": False, "code": code, "error": error[:1000]}
