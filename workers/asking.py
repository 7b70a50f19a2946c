"""A worker host's line to Mother: everything an attempt, a tool job or the GC causes is an ask.

Each ask goes on the host's own stream (``mother:asks:{host}``: its ACL user may ``XADD`` there and to
no other stream) and its reply comes on a key only this host may read; the ``XADD`` and the blocking pop
of the reply go out in one round trip. Mother applies what is asked with its own credentials, after
checking the host holds the attempt it asks about (:mod:`mother.asks`). An ask is never sent twice: a
Mother that died while applying it leaves it pending, and another Mother applies it and replies.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

import orjson
from redis._defaults import DEFAULT_SOCKET_TIMEOUT

from mother import keys
from mother.asks.wire import ask_fields, new_ask_id
from mother.budget import Guard
from mother.errors import AskRefused, PhaseStale

__all__ = ["AskedGuard", "Asker", "AttemptAsks", "b64", "refusal", "unb64"]


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def unb64(text: str) -> bytes:
    return base64.b64decode(text)


@dataclass
class Asker:
    """The host ``host``'s asks, on ``client`` (connected as the host's user)."""

    client: Any
    host: str
    timeout_seconds: float = 60.0

    def ask(
        self,
        kind: str,
        body: dict[str, Any] | None = None,
        attempt: tuple[str, int, int] | None = None,
        *,
        wait: bool = True,
        raising: bool = True,
    ) -> dict[str, Any]:
        """Send one ask; with ``wait``, Mother's reply (a refusal raises, :func:`refusal`, unless not
        ``raising``)."""
        ask_id = new_ask_id() if wait else None
        fields = ask_fields(kind, ask_id, attempt, body or {})
        stream = keys.host_asks_key(self.host)
        if not wait:
            self.client.xadd(stream, fields)
            return {}
        reply_key = keys.host_reply_key(self.host, ask_id)  # type: ignore[arg-type]
        # each wait stays under the connection's read timeout (RQ sets one on a worker's): the reply is
        # waited for in turns until timeout_seconds
        left = self.timeout_seconds
        pipe = self.client.pipeline(transaction=False)
        pipe.xadd(stream, fields)
        pipe.blpop([reply_key], timeout=self._turn(left))
        _entry, got = pipe.execute()
        left -= self._turn(left)
        while got is None and left > 0:
            got = self.client.blpop([reply_key], timeout=self._turn(left))
            left -= self._turn(left)
        if got is None:
            raise AskRefused(
                f"Mother did not answer this host's {kind} ask within {self.timeout_seconds:g}s "
                "(worker.ask_timeout_seconds): is a Mother running on this server?",
                why="no_answer",
            )
        reply: dict[str, Any] = orjson.loads(got[1])
        if raising and not reply.get("ok"):
            raise refusal(kind, reply)
        return reply

    def _turn(self, left: float) -> int:
        """Seconds of one blocking wait: at most ``left``, and 2 s under the connection's read timeout (at
        least 1 s: a read timeout under 3 s is too short for any ask)."""
        kwargs = getattr(getattr(self.client, "connection_pool", None), "connection_kwargs", {})
        # redis-py's own default applies when the client names none
        read = kwargs.get("socket_timeout", DEFAULT_SOCKET_TIMEOUT)
        cap = max(1, int(read) - 2) if isinstance(read, (int, float)) and read else 3600
        return max(1, min(cap, round(left)))


def refusal(kind: str, reply: dict[str, Any]) -> Exception:
    """The error a refused ask raises: a stale attempt's, or Mother's one line."""
    code = str(reply.get("code") or "refused")
    error = str(reply.get("error") or code)
    if code in ("not_held", "phase_stale"):
        return PhaseStale(f"Mother refused this host's {kind} ask: {error}")
    return AskRefused(error, why=code)


@dataclass
class AttemptAsks:
    """The asks of one phase attempt ``attempt`` (run, phase index, attempt) its host holds."""

    asker: Asker
    attempt: tuple[str, int, int]

    @property
    def run_id(self) -> str:
        return self.attempt[0]

    def ask(
        self, kind: str, body: dict[str, Any] | None = None, *, raising: bool = True
    ) -> dict[str, Any]:
        return self.asker.ask(kind, body, self.attempt, raising=raising)

    def alive(self) -> None:
        """PhaseStale unless the host still holds the attempt (the run moved on, or ended)."""
        self.ask("alive")

    def emit(self, event_type: str, **fields: Any) -> None:
        """An activity entry of the attempt's run (Mother names the run and the phase)."""
        self.ask("emit", {"type": event_type, "fields": fields})

    def violation(self, kind: str, **fields: Any) -> None:
        self.ask("violation", {"kind": kind, "fields": fields})


class AskedGuard(Guard):
    """The budget guard of a phase attempt on its host: every action is a ``charge`` ask, which Mother
    charges with ``mh_guard`` only while the host holds the attempt; the reply (a refusal included) is
    read as the guard's own (:meth:`Guard.interpret`)."""

    def __init__(self, asks: AttemptAsks, settings: Any, user_id: str) -> None:
        super().__init__(None, settings, asks.run_id, user_id, lambda: "")  # type: ignore[arg-type]
        self.asks = asks
        self.attempt = f"{asks.attempt[1]}:{asks.attempt[2]}"

    def _fenced(self, action: dict[str, Any]) -> dict[str, Any]:
        # Mother names the attempt and the host, from the ask
        return action

    def _call(
        self,
        action: dict[str, Any],
        cache_as: str | None = None,
        pipe: Any = None,
        day: str | None = None,
    ) -> dict[str, Any]:
        reply = self.asks.ask("charge", {"action": action}, raising=False)
        if not reply.get("ok") and not reply.get("guard"):
            raise refusal("charge", reply)
        if reply.get("step_refused"):
            # charged all the same: the phase goes on, and a resume stops at this step
            self.asks.emit(
                "step_refused", step=action.get("step", {}).get("step"), why=reply["step_refused"]
            )
        return self.interpret(reply)
