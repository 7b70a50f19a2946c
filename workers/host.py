"""A worker host's side of Mother-addressed dispatch (:mod:`mother.hosts`).

At start the pool makes a random host id and password, pushes its hello (the id, the password's SHA-256,
its name and concurrency) on ``hosts:hello`` with the shared worker credentials, and waits until the
leading Mother has made its ACL user (it tries ``AUTH`` as it every 50 ms, after 5 s every 500 ms, and
says every 10 s that it waits). From then on every connection of the host (its pool, workers and their horses) is its
own user's: the only one that may take the tokens of the attempts Mother queued for it, on its own
queues (``agents.{id}``, ``tools.{id}``). The password never leaves the host's memory.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from dataclasses import dataclass
from typing import Any

import redis

from mother import keys
from mother.connection import authenticate_as, credentials_refused, redis_down
from mother.hosts.registry import Hello
from mother.hosts.table import HOST_QUEUES
from mother.logs import get_logger

__all__ = ["WAIT_NOTICE_SECONDS", "Host", "current", "register"]

log = get_logger("host")

# how often a host waiting for Mother to register it says so
WAIT_NOTICE_SECONDS = 10.0

_current: Host | None = None


@dataclass(frozen=True)
class Host:
    host_id: str
    password: str

    @property
    def user(self) -> str:
        return keys.host_user(self.host_id)

    def queues(self, names: list[str] | tuple[str, ...]) -> list[str]:
        """The queues this host's workers listen on for ``names``: first its own for the phase queues
        Mother addresses to it (agents, tools), then ``names`` themselves (shared: other jobs the
        project's workers run, the GC's maintenance queue)."""
        own = [keys.host_queue(n, self.host_id) for n in names if n in HOST_QUEUES]
        return [*own, *names]

    def __repr__(self) -> str:
        # never the password
        return f"Host({self.host_id!r})"


def current() -> Host | None:
    """This process's host, once registered (a pool's workers and horses inherit it)."""
    return _current


def register(
    clients: list[redis.Redis], *, name: str, concurrency: int, give_up_after: float | None = None
) -> Host | None:
    """Register this host and make each of ``clients`` its user's; waits for Mother as long as it takes
    (with a notice every ``WAIT_NOTICE_SECONDS``), Redis going away included, or ``give_up_after``
    seconds (then None: a burst worker with no Mother serving takes no phase job)."""
    global _current
    host = Host(secrets.token_hex(8), secrets.token_urlsafe(32))
    hello = Hello(
        host.host_id,
        hashlib.sha256(host.password.encode()).hexdigest(),
        name[:200] if name.isprintable() and name else "host",
        concurrency,
    )
    client = clients[0]
    started = time.monotonic()
    noticed = started
    pause = 0.05
    said = False
    while True:
        try:
            if not said:
                client.rpush(keys.HOST_HELLOS, hello.to_json())
                said = True
                log.info("host_hello_sent", host=host.host_id, name=hello.name)
            _try_auth(client, host)
            break
        # the host's user not made yet
        except (redis.AuthenticationError, redis.ResponseError) as exc:
            if not credentials_refused(exc):
                raise
        except redis.RedisError as exc:
            if not redis_down(exc):
                raise
        now = time.monotonic()
        if give_up_after is not None and now - started >= give_up_after:
            log.warning(
                "host_not_registered",
                host=host.host_id,
                waited_seconds=round(now - started, 1),
                why="no leading Mother registered this host: it takes no phase job, only what the "
                "shared queues hold",
            )
            return None
        if now - noticed >= WAIT_NOTICE_SECONDS:
            noticed = now
            log.warning(
                "host_waits_for_mother",
                host=host.host_id,
                waited_seconds=round(now - started),
                why="no leading Mother has registered this host yet: is `mother run` running, on "
                "this server, with the mother user's ACL (acl|getuser, acl|setuser)?",
            )
        time.sleep(pause)
        # Mother looks at hellos every 100 ms: tried often at first, then every half second
        pause = 0.05 if now - started < 5.0 else 0.5
    for each in clients:
        authenticate_as(each, host.user, host.password)
    _current = host
    log.info(
        "host_registered", host=host.host_id, waited_ms=round((time.monotonic() - started) * 1000)
    )
    return host


def _try_auth(client: redis.Redis, host: Host) -> None:
    """AUTH as the host's user on a connection of its own (raises while Mother has not made it)."""
    conn: Any = client.connection_pool.make_connection()
    try:
        conn.connect()
        conn.send_command("AUTH", host.user, host.password, check_health=False)
        conn.read_response()
    finally:
        conn.disconnect()
