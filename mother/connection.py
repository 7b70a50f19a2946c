"""Connecting to Redis, and the check every process makes before it trusts it.

Mother, the workers and the CLI call :func:`connect`; it refuses a server that
lacks the JSON module with one line that says what to do. The search module is
optional: :func:`server_info` detects it and ``mother doctor`` reports it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit, urlunsplit

import redis
from redis.maint_notifications import MaintNotificationsConfig
from redis.sentinel import (
    Sentinel,
    SentinelConnectionPool,
    SentinelManagedConnection,
    SentinelManagedSSLConnection,
)
from redis.utils import str_if_bytes

from mother.errors import MissingJSONModule, MotherError, PolicyViolation, RedisUnavailable
from mother.keys import PROBE_KEY

__all__ = [
    "CONNECTION_OPTIONS",
    "REDIS_DOWN",
    "ForkHandoffPool",
    "Outage",
    "ServerInfo",
    "authenticate_as",
    "check_durable",
    "client_for",
    "connect",
    "connect_waiting",
    "mother_error",
    "queue_durable",
    "redact_url",
    "redis_down",
    "require_json",
    "sentinel_parts",
    "sentinel_pool",
    "server_info",
    "sleep_unless",
    "unless_redis_down",
]

# A new connection needs no handshake round trip at all: RESP2 (no HELLO), and none of what
# redis-py would otherwise add - looking its own version up in the package metadata, CLIENT SETINFO
# twice and CLIENT MAINT_NOTIFICATIONS (a managed-cloud feature). Every RQ job runs on new
# connections (the worker opens them for its work-horse, see ForkHandoffPool), so each of those
# round trips would be paid per phase. (RESP2 also means FT.SEARCH replies come as [total, id, ...],
# not redis-py's RESP3 mapping.)
CONNECTION_OPTIONS: dict[str, object] = {
    "protocol": 2,
    "driver_info": None,
    "maint_notifications_config": MaintNotificationsConfig(enabled=False),
}


# Redis cannot serve us now, and will again without us doing anything: it is restarting or loading
# (ConnectionError, BusyLoadingError), unreachable (TimeoutError), at maxmemory with noeviction
# (OutOfMemoryError), or a replica after a failover (ReadOnlyError, MasterDownError). Long-running
# processes wait such a state out (:class:`Outage`) instead of exiting.
REDIS_DOWN: tuple[type[Exception], ...] = (
    redis.ConnectionError,
    redis.TimeoutError,
    redis.exceptions.OutOfMemoryError,
    redis.exceptions.ReadOnlyError,
    redis.exceptions.MasterDownError,
)
# the same states, as errors redis-py gives no class of their own: a blocking read cut short by the
# switch to replica, and writes refused while snapshots or the AOF cannot be written
_DOWN_REPLIES = ("UNBLOCKED", "MISCONF")


def redis_down(exc: BaseException) -> bool:
    """Whether ``exc`` says Redis cannot serve for now (see :data:`REDIS_DOWN`), not that a request was
    wrong; :func:`mother_error` keeps that as ``RedisUnavailable.unreachable``."""
    if isinstance(exc, RedisUnavailable):
        return exc.unreachable
    return isinstance(exc, REDIS_DOWN) or (
        isinstance(exc, redis.ResponseError) and str(exc).startswith(_DOWN_REPLIES)
    )


def _first_line(exc: BaseException, limit: int = 300) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:limit]


def mother_error(exc: redis.RedisError) -> MotherError:
    """What a redis-py error means to a caller, as a one-line Mother error: Redis unreachable or too slow,
    out of memory, read-only, a permission this user lacks, or a refusal (its first line, never the
    request it refused: a spec may hold anything)."""
    if isinstance(exc, redis.exceptions.NoPermissionError):
        return PolicyViolation(
            f"this connection's Redis user may not do that ({_first_line(exc, 200)}); connect as the "
            "user whose job this is, or grant it (`mother doctor` names what this user lacks)"
        )
    if isinstance(exc, redis.TimeoutError):
        why = "Redis did not answer in time (a busy or slow server, or a network in the way)"
        after = "try again; a write may have gone through (`mother status RUN` tells)"
    elif isinstance(exc, redis.ConnectionError):
        why, after = f"cannot reach Redis ({_first_line(exc, 200)})", "try again once it is back"
    elif isinstance(exc, redis.exceptions.OutOfMemoryError):
        why = "Redis refused the write: it is at its memory limit (maxmemory, noeviction)"
        after = "free memory or raise maxmemory, then try again"
    elif isinstance(exc, redis.exceptions.ReadOnlyError | redis.exceptions.MasterDownError):
        why = "Redis is a read-only replica now (a failover under way?)"
        after = "try again in a moment"
    elif redis_down(exc):
        why, after = f"Redis cannot serve now ({_first_line(exc, 200)})", "try again in a moment"
    else:
        return RedisUnavailable(f"Redis refused the request: {_first_line(exc)}")
    return RedisUnavailable(f"{why}; {after}", unreachable=True)


def unless_redis_down(
    log: Any, event: str, func: Callable[..., Any], *args: Any, **fields: Any
) -> bool:
    """``func(*args)`` where one failure must not stop the loop around it: what it raises is logged as
    ``event`` with ``fields`` (a deliberate error in one line, anything else with its traceback) and
    False returned; only Redis going away (:func:`redis_down`) is raised, for the loop to wait out."""
    try:
        func(*args)
        return True
    except Exception as exc:
        if redis_down(exc):
            raise
        if isinstance(exc, MotherError):
            log.error(event, error=exc.message, **fields)
        else:
            log.exception(event, error=str(exc), **fields)
        return False


def sleep_unless(stop: Callable[[], bool], seconds: float) -> None:
    """Sleep ``seconds`` in short steps, returning early once ``stop()`` is true."""
    end = time.monotonic() + seconds
    while not stop() and (left := end - time.monotonic()) > 0:
        time.sleep(min(left, 0.1))


# how often a connection whose credentials the server refuses tries again (see Outage.failed)
AUTH_RETRY_SECONDS = 0.5


def credentials_refused(exc: BaseException) -> bool:
    """Whether the server answered and refused the credentials (no such user, a wrong password: WRONGPASS),
    as against not answering."""
    return isinstance(exc, redis.AuthenticationError) or "WRONGPASS" in str(exc)


class Outage:
    """Waiting out a Redis that cannot serve (:data:`REDIS_DOWN`): call :meth:`failed` after each failed
    try (it logs the first, then every ``every`` seconds, and sleeps 0.2 s doubling to 5 s, cut short when
    ``stop()`` turns true) and :meth:`recovered` after a try that worked (it logs ``redis_back`` once).
    ``context``: more fields for those log lines."""

    def __init__(
        self,
        log: Any,
        during: str,
        stop: Callable[[], bool] = lambda: False,
        *,
        every: float = 30,
        **context: Any,
    ) -> None:
        self.log, self.during, self.stop = log, during, stop
        self.every, self.context = every, context
        self.since: float | None = None
        self._reported = 0.0
        self._delay = 0.2

    @property
    def active(self) -> bool:
        return self.since is not None

    def failed(self, exc: Exception) -> None:
        now = time.monotonic()
        if self.since is None:
            self.since = self._reported = now
            self.log.warning(
                "redis_unavailable",
                during=self.during,
                error=str(exc),
                retrying=True,
                **self.context,
            )
        elif now - self._reported >= self.every:
            self._reported = now
            self.log.warning(
                "redis_still_unavailable",
                during=self.during,
                seconds=round(now - self.since),
                error=str(exc),
                **self.context,
            )
        sleep_unless(self.stop, self._delay)
        # a server that answers and refuses the credentials has lost the ACL user Mother made (a restart,
        # a failover: ACL users are not replicated), which the leading Mother makes again within a tick:
        # tried again soon, not after a growing wait
        self._delay = min(self._delay * 2, AUTH_RETRY_SECONDS if credentials_refused(exc) else 5.0)

    def recovered(self) -> None:
        if self.since is not None:
            self.log.info(
                "redis_back",
                during=self.during,
                after_seconds=round(time.monotonic() - self.since, 1),
                **self.context,
            )
            self.since, self._delay = None, 0.2


class ForkHandoffPool(redis.ConnectionPool):
    """redis-py's connection pool, plus a connection a parent opens for the child it is about to fork.

    A forked process cannot use its parent's pooled connections (redis-py resets the pool in the
    child), so an RQ work-horse would connect anew for every job, with a TCP handshake on the phase's
    path (its cost: docs/benchmarks.md, "What a work-horse is spared"). :meth:`open_for_child`
    connects in the parent just before the fork; the child's first new connection is that one (its socket inherited, already connected);
    the parent never uses it, and :meth:`close_handoff` closes it once the child has ended.
    Without a handoff the pool behaves exactly like redis-py's.
    """

    def __init__(self, *args: object, **kwargs: object) -> None:
        # (connection, parent pid)
        self._handoff: tuple[redis.connection.AbstractConnection, int] | None = None
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]

    def open_for_child(self) -> None:
        """In the parent, just before a fork: connect the connection the next child will start with."""
        self.close_handoff()
        conn = self.connection_class(**self.connection_kwargs)
        conn.connect()
        self._handoff = (conn, os.getpid())

    def close_handoff(self) -> None:
        """In the parent, once the child has ended: close the connection opened for it (if any)."""
        handoff, self._handoff = self._handoff, None
        if handoff is not None and handoff[1] == os.getpid():
            handoff[0].disconnect()

    def make_connection(self) -> redis.connection.ConnectionInterface:
        handoff = self._handoff
        # no handoff, or we are the parent: a new one
        if handoff is None or handoff[1] == os.getpid():
            return super().make_connection()
        # the child takes it, once
        self._handoff = None
        conn = handoff[0]
        # the pool keeps only its own process's connections
        conn.pid = os.getpid()
        self._created_connections += 1
        return conn


def queue_durable(pipe: Any, service: Any) -> bool:
    """Queue on ``pipe``, after the writes it acknowledges, the wait for ``service.wait_replicas``
    replicas (``WAIT``, or ``WAITAOF`` with ``wait_fsync``); False when none is asked for. Pass the
    reply to :func:`check_durable`."""
    if service.wait_replicas <= 0:
        return False
    if service.wait_fsync:
        pipe.execute_command("WAITAOF", 1, service.wait_replicas, service.wait_replicas_ms)
    else:
        pipe.execute_command("WAIT", service.wait_replicas, service.wait_replicas_ms)
    return True


def check_durable(reply: Any, service: Any, what: str, log: Any) -> bool:
    """Whether the replicas asked for had ``what`` in time; a warning when not (it is written on the
    primary all the same: a failover before the replicas catch up may lose it)."""
    if isinstance(reply, Exception):
        log.warning("durability_wait_failed", what=what, error=str(reply))
        return False
    got = int(reply[1] if isinstance(reply, list) else reply)
    if got >= service.wait_replicas:
        return True
    log.warning(
        "durability_not_confirmed",
        what=what,
        replicas=got,
        wanted=service.wait_replicas,
        within_ms=service.wait_replicas_ms,
    )
    return False


def authenticate_as(client: redis.Redis, username: str, password: str) -> Callable[[], None]:
    """From now on every connection of ``client``'s pool is ``username``'s: the one it holds (or makes,
    which may be a :class:`ForkHandoffPool` handoff) sends ``AUTH`` at once, so wrong credentials raise
    here (``redis.AuthenticationError``), and any it makes later connects as that user. Any other idle
    connection is closed. Returns what undoes it (the pool's own credentials for later connections; the
    connections open now are closed)."""
    pool = client.connection_pool
    before = {name: pool.connection_kwargs.get(name) for name in ("username", "password")}
    conn = pool.get_connection()
    try:
        # idle ones would still be the old user's
        pool.disconnect(inuse_connections=False)
        pool.connection_kwargs.update(username=username, password=password)
        conn.username, conn.password = username, password
        if getattr(conn, "_sock", None) is None:
            conn.connect()
        else:
            conn.send_command("AUTH", username, password, check_health=False)
            if str_if_bytes(conn.read_response()) != "OK":
                raise redis.AuthenticationError(f"AUTH as {username} was not accepted")
    except BaseException:
        pool.connection_kwargs.update(before)
        conn.username, conn.password = before["username"], before["password"]
        conn.disconnect()
        raise
    finally:
        pool.release(conn)

    def undo() -> None:
        pool.connection_kwargs.update(before)
        pool.disconnect(inuse_connections=True)

    return undo


@dataclass(frozen=True)
class ServerInfo:
    """What the server at a URL is and which modules it offers."""

    url: str
    server: str
    version: str
    modules: dict[str, str] = field(default_factory=dict)
    has_json: bool = False
    has_search: bool = False


def redact_url(url: str) -> str:
    """The URL with any password replaced by ``***``, safe to print."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)[1]
    user = parts.username or ""
    return urlunsplit(parts._replace(netloc=f"{user}:***@{netloc}"))


def _format_version(raw: object) -> str:
    if not isinstance(raw, int | str | bytes):
        return str(raw)
    try:
        # modules report e.g. 20803 for 2.8.3
        num = int(raw)
    except (TypeError, ValueError):
        return str(raw)
    return f"{num // 10000}.{num // 100 % 100}.{num % 100}"


def server_info(client: redis.Redis, url: str) -> ServerInfo:
    """Ask the server what it is: name, version, modules, JSON and search support."""
    with _reaching(url):
        info = client.info("server")
        probe = client.pipeline(transaction=False)
        # nil when the module is there
        probe.execute_command("JSON.TYPE", PROBE_KEY)
        probe.execute_command("FT._LIST")
        found = probe.execute(raise_on_error=False)
    return _described(client, url, info, found)


@contextmanager
def _reaching(url: str) -> Iterator[None]:
    """Redis-py's errors of a first contact, as one line each (RedisUnavailable)."""
    try:
        yield
    # a ConnectionError to redis-py: it must come first
    except redis.AuthenticationError as exc:
        raise RedisUnavailable(
            f"Redis at {redact_url(url)} refused our credentials ({exc}); fix the URL",
            url=redact_url(url),
            refused=True,
        ) from None
    # refused, timed out, or loading its data
    except (redis.ConnectionError, redis.TimeoutError) as exc:
        raise RedisUnavailable(
            f"cannot reach Redis at {redact_url(url)} ({exc}); start one with `mother server` "
            "or set MOTHER_REDIS_URL",
            url=redact_url(url),
            unreachable=True,
        ) from None


def _described(client: redis.Redis, url: str, info: Any, found: list[Any]) -> ServerInfo:
    modules: dict[str, str] = {}
    try:
        for mod in client.execute_command("MODULE", "LIST") or []:
            item = {
                _text(k): v
                for k, v in (
                    mod.items() if isinstance(mod, dict) else zip(mod[::2], mod[1::2], strict=False)
                )
            }
            modules[_text(item.get("name"))] = _format_version(item.get("ver"))
    except redis.ResponseError:
        # MODULE LIST may be denied by an ACL; COMMAND INFO below still tells us what we need
        pass
    # Only "unknown command" means a module is absent; NOPERM (an ACL) means it is there.
    present = [
        not (isinstance(reply, redis.ResponseError) and "unknown command" in str(reply).lower())
        for reply in found
    ]
    name = "valkey" if "valkey_version" in info else "redis"
    version = str(info.get("valkey_version") or info.get("redis_version", "unknown"))
    return ServerInfo(
        url=redact_url(url),
        server=name,
        version=version,
        modules=modules,
        has_json=present[0],
        has_search=present[1],
    )


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def require_json(info: ServerInfo) -> ServerInfo:
    """Refuse a server without the JSON module, with the one line that says what to do."""
    if not info.has_json:
        raise MissingJSONModule(
            f"Redis at {info.url} has no JSON module: use Redis Stack / Redis 8, or `mother server`",
            url=info.url,
        )
    return info


def connect_waiting(
    url: str, wait_seconds: float, log: Any, *, modules: bool = True, user_may_come: bool = False
) -> redis.Redis:
    """:func:`connect` for a long-running process that is starting (Mother, a worker): a server that
    cannot be reached yet (starting, restarting, loading its data) is waited for up to ``wait_seconds``,
    trying again 0.2 s doubling to 5 s apart and logging the first failed try, then every 5 s. A server
    that answers but is refused (no JSON module, wrong credentials) and a URL that is not one stop at
    once; so does a wait that runs out, with the last error and how long it waited. With
    ``user_may_come`` (a worker host) refused credentials are waited for too: the host's ACL user may
    not be made yet (a server restarted without its ACL users, until Mother makes them again; a host
    enrolled once the server is up)."""
    deadline = time.monotonic() + wait_seconds
    outage = Outage(
        log,
        "startup",
        lambda: time.monotonic() >= deadline,
        every=5,
        url=redact_url(url),
        waiting_up_to_seconds=wait_seconds,
    )
    while True:
        try:
            client = connect(url, modules=modules)
        except RedisUnavailable as exc:
            waits = exc.unreachable or (user_may_come and exc.refused)
            if not waits or time.monotonic() >= deadline:
                if outage.active:
                    raise RedisUnavailable(
                        f"{exc.message} (waited {wait_seconds:g} s; MOTHER_REDIS_WAIT_SECONDS sets how long)",
                        url=exc.url,
                        unreachable=exc.unreachable,
                        refused=exc.refused,
                    ) from None
                raise
            outage.failed(exc)
            continue
        outage.recovered()
        return client


def _keys_of(args: tuple[Any, ...]) -> list[str]:
    """The keys a command names (its first word after the name; FCALL's KEYS), as text."""
    if len(args) < 2:
        return []
    name = str(args[0]).upper()
    if name in ("FCALL", "FCALL_RO", "EVAL", "EVALSHA") and len(args) > 2:
        try:
            count = int(args[2])
        except (TypeError, ValueError):
            return []
        return [str(k) for k in args[3 : 3 + count]]
    if name in ("PING", "INFO", "TIME", "HELLO", "CLIENT", "ACL", "FUNCTION", "MULTI", "EXEC"):
        return []
    first = args[1]
    return [first.decode("utf-8", "replace") if isinstance(first, bytes) else str(first)]


class NamedRedis(redis.Redis):
    """A client whose permission errors name the command, the keys and the ACL user (the server's
    "No permissions to access a key" names none of them)."""

    def execute_command(self, *args: Any, **options: Any) -> Any:
        try:
            return super().execute_command(*args, **options)
        except redis.exceptions.NoPermissionError as exc:
            user = self.connection_pool.connection_kwargs.get("username") or "default"
            keys_ = _keys_of(args)
            what = f"{str(args[0]).upper()}" + (f" on {', '.join(keys_[:5])}" if keys_ else "")
            raise redis.exceptions.NoPermissionError(
                f"{exc}: {what} as ACL user {user!r}; connect as the user whose job this is "
                "(deploy/users.acl) or grant it; `mother doctor` names what this user lacks"
            ) from None


SENTINEL_SCHEME = "redis+sentinel"
SENTINEL_PORT = 26379
_SENTINEL_FORM = "redis+sentinel://[user:password@]host[:port][,host[:port]...]/service[/db]"


def sentinel_parts(url: str) -> dict[str, Any]:
    """A ``redis+sentinel://`` URL's parts: the sentinels' (host, port), the service (the name the
    sentinels monitor), the database, the Redis user and password, and ``sentinel_password`` (a query
    parameter: the sentinels' own). Raises RedisUnavailable, in one line, for what is not one."""

    def bad(why: str) -> RedisUnavailable:
        return RedisUnavailable(
            f"MOTHER_REDIS_URL {redact_url(url)!r} {why}; use {_SENTINEL_FORM}", url=redact_url(url)
        )

    parts = urlsplit(url)
    auth, _, hosts = parts.netloc.rpartition("@")
    sentinels: list[tuple[str, int]] = []
    for item in filter(None, hosts.split(",")):
        host, colon, port = item.rpartition(":") if item.count(":") == 1 else (item, "", "")
        if colon and not port.isdigit():
            raise bad(f"names {item!r}, whose {port!r} is not a port")
        sentinels.append((host or item, int(port) if colon else SENTINEL_PORT))
    if not sentinels:
        raise bad("names no sentinel")
    path = [p for p in parts.path.split("/") if p]
    if not path:
        raise bad("names no service (the name the sentinels monitor)")
    if len(path) > 1 and not path[1].isdigit():
        raise bad(f"names {path[1]!r}, which is not a database number")
    user, _, password = auth.partition(":")
    query = dict(parse_qsl(parts.query))
    return {
        "sentinels": sentinels,
        "service": unquote(path[0]),
        "db": int(path[1]) if len(path) > 1 else 0,
        "username": unquote(user) or None,
        "password": unquote(password) or None,
        "sentinel_password": query.get("sentinel_password"),
    }


class _ClosesOnCutRead:
    """A Sentinel-managed connection that closes itself when a read is cut short, as redis-py's plain
    connection does: its Sentinel class keeps the connection by default, with the reply still pending,
    so after RQ's warm shutdown raises out of a blocking ``BLPOP`` the worker's last writes (its
    ``register_death``) would wait behind that reply until a second signal."""

    def read_response(
        self, *args: Any, disconnect_on_error: bool | None = True, **kwargs: Any
    ) -> Any:
        return super().read_response(  # type: ignore[misc]
            *args, disconnect_on_error=disconnect_on_error, **kwargs
        )


class _ClosingSentinelConnection(_ClosesOnCutRead, SentinelManagedConnection):
    """The Sentinel-managed connection of a ``redis+sentinel://`` URL."""


class _ClosingSentinelSSLConnection(_ClosesOnCutRead, SentinelManagedSSLConnection):
    """The Sentinel-managed connection of a ``rediss+sentinel://`` URL (TLS)."""


def sentinel_pool(url: str, **kwargs: Any) -> SentinelConnectionPool:
    """A pool whose connections go to the primary the sentinels of ``url`` name now (asked again after a
    connection fails: a failover is followed). ``kwargs`` (a user and password among them) win over the
    URL's."""
    found = sentinel_parts(url)
    timeouts = {"socket_timeout": 2, "socket_connect_timeout": 2}
    manager = Sentinel(
        found["sentinels"],
        sentinel_kwargs={
            **timeouts,
            **({"password": found["sentinel_password"]} if found["sentinel_password"] else {}),
        },
    )
    options = {
        **CONNECTION_OPTIONS,
        "db": found["db"],
        "username": found["username"],
        "password": found["password"],
        **kwargs,
    }
    options["connection_class"] = (
        _ClosingSentinelSSLConnection if options.pop("ssl", False) else _ClosingSentinelConnection
    )
    return SentinelConnectionPool(found["service"], manager, **options)


def client_for(url: str, *, single_connection_client: bool = False, **kwargs: Any) -> redis.Redis:
    """A plain redis-py client for ``url`` (``redis://``, ``rediss://``, ``unix://`` or
    ``redis+sentinel://``), ``kwargs`` over the URL's options; nothing is checked."""
    if urlsplit(url).scheme == SENTINEL_SCHEME:
        client = redis.Redis(
            connection_pool=sentinel_pool(url, **kwargs),
            single_connection_client=single_connection_client,
        )
        client.auto_close_connection_pool = True
        return client
    return redis.Redis.from_url(url, single_connection_client=single_connection_client, **kwargs)


def connect(
    url: str,
    *,
    check: bool = True,
    decode_responses: bool = True,
    modules: bool = True,
    **kwargs: object,
) -> redis.Redis:
    """A client for ``url``; with ``check`` the server must answer and (``modules``) have RedisJSON (a
    worker host's user, which reads no module's keys, is only checked to reach it). A
    ``redis+sentinel://`` URL connects to the primary its sentinels name (and follows a failover)."""
    try:
        if urlsplit(url).scheme == SENTINEL_SCHEME:
            pool: redis.ConnectionPool = sentinel_pool(
                url, decode_responses=decode_responses, **kwargs
            )
        else:
            pool = ForkHandoffPool.from_url(
                url, decode_responses=decode_responses, **{**CONNECTION_OPTIONS, **kwargs}
            )
    except ValueError as exc:
        raise RedisUnavailable(
            f"MOTHER_REDIS_URL {redact_url(url)!r} is not a Redis URL ({exc}); use redis://host:port/db, "
            f"unix:///path or {_SENTINEL_FORM}"
        ) from None
    client = NamedRedis(connection_pool=pool)
    # the client owns its pool, as with Redis.from_url
    client.auto_close_connection_pool = True
    if check and modules:
        require_json(server_info(client, url))
    elif check:
        with _reaching(url):
            client.ping()
    return client
