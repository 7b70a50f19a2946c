"""Signing in to the dashboard as a principal: its name and password are checked by authenticating to
Redis as that principal, and what it does from the pages goes on its own commands stream, with its own
credentials, so Mother sees the principal, never the dashboard.

Sessions live in this process (a random id in an HttpOnly, SameSite=Strict cookie; the principal's
connection is kept here, never its password in a cookie) and end ``dashboard.session_minutes`` after
signing in, or at sign-out. Each carries a CSRF token every form must send back. Failed sign-ins are
limited per name (``MAX_FAILURES`` a minute)."""

from __future__ import annotations

import hmac
import secrets
import threading
import time
from dataclasses import dataclass, field

from mother import keys
from mother.client import MotherClient
from mother.config import Settings
from mother.errors import InvalidSpec, PolicyViolation

__all__ = ["COOKIE", "MAX_SESSIONS", "Session", "Sessions"]

COOKIE = "mother_session"
# sessions one dashboard process keeps at most (the oldest go first)
MAX_SESSIONS = 1000
# failed sign-ins of one name a minute before the next is refused without trying
MAX_FAILURES = 5


@dataclass
class Session:
    sid: str
    principal: str
    client: MotherClient
    csrf: str
    expires_at: float

    def csrf_ok(self, offered: str | None) -> bool:
        return bool(offered) and hmac.compare_digest(str(offered), self.csrf)


@dataclass
class Sessions:
    """The signed-in principals of one dashboard process."""

    settings: Settings
    minutes: float
    _by_id: dict[str, Session] = field(default_factory=dict)
    _failures: dict[str, list[float]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def sign_in(self, name: str, password: str) -> Session:
        """A new session for principal ``name`` once Redis accepts ``password`` for it; a one-line error
        otherwise (the same one for a wrong name and a wrong password)."""
        name = name.strip()
        if not name or not password:
            raise InvalidSpec("give the principal's name and password")
        keys.check_principal(name)
        now = time.monotonic()
        with self._lock:
            recent = [t for t in self._failures.get(name, []) if now - t < 60]
            self._failures[name] = recent
            if len(recent) >= MAX_FAILURES:
                raise PolicyViolation(
                    f"{MAX_FAILURES} failed sign-ins of {name} in the last minute: wait a minute"
                )
        try:
            client = MotherClient.signed_in(self.settings, name, password)
        except PolicyViolation:
            self._failed(name, now)
            raise
        session = Session(
            secrets.token_urlsafe(32),
            name,
            client,
            secrets.token_urlsafe(32),
            now + self.minutes * 60,
        )
        with self._lock:
            self._by_id[session.sid] = session
            while len(self._by_id) > MAX_SESSIONS:
                self._drop(next(iter(self._by_id)))
        return session

    def get(self, sid: str | None) -> Session | None:
        """The live session of cookie value ``sid`` (None: none, or it expired and is gone now)."""
        if not sid:
            return None
        with self._lock:
            session = self._by_id.get(sid)
            if session is not None and time.monotonic() >= session.expires_at:
                self._drop(sid)
                return None
            return session

    def sign_out(self, sid: str) -> None:
        with self._lock:
            self._drop(sid)

    def _drop(self, sid: str) -> None:
        session = self._by_id.pop(sid, None)
        if session is not None:
            session.client.redis.close()

    def _failed(self, name: str, at: float) -> None:
        with self._lock:
            self._failures.setdefault(name, []).append(at)
