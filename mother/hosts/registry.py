"""Worker hosts' registration, their ACL users, and forgetting hosts that stopped (Mother's side).

A host's hello is ``{"host": id, "digest": sha256(password), "name": ..., "concurrency": n}`` on
``hosts:hello``. The leading Mother takes up to ``ADMIT_BATCH`` at a time (every 100 ms): a hello that is
not one, that names a host already registered (someone else's id: its digest would become a second
password of that host's user) or that comes when ``MAX_HOSTS`` are registered is refused and recorded as
``host_hello_refused``. An admitted host is written to ``hosts:registered`` first and its user made
second: a Mother that dies between leaves a registered host without its user, which :func:`check` makes
again (as after a Redis restart, which keeps no user Mother made).
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

from mother import keys
from mother.errors import ConfigError, InvalidSpec
from mother.hosts.table import STOPPED
from mother.logs import get_logger

if TYPE_CHECKING:
    from mother.runtime import Runtime

__all__ = [
    "ADMIT_BATCH",
    "FORGET_SECONDS",
    "HELLO_MAX_BYTES",
    "MAX_HOSTS",
    "STOPPED",
    "TEMPLATE_USER",
    "Hello",
    "admit",
    "check",
    "forget",
    "host_rules",
    "look",
    "mint",
    "parse_hello",
]

log = get_logger("hosts")

# hellos taken per look (every 100 ms): a flood of them costs Mother this many ACL SETUSERs at most
ADMIT_BATCH = 16
# registered hosts at most (a flood of hellos cannot make users without end)
MAX_HOSTS = 1000
HELLO_MAX_BYTES = 2048
MAX_CONCURRENCY = 4096
# the user whose rules every host's user starts from (deploy/users.acl); without one, ``default``'s
TEMPLATE_USER = "worker"
# a host whose line has been gone this long is forgotten (its user deleted): a pool held up (SIGSTOP, a
# starved machine) for less comes back as it was
FORGET_SECONDS = 600.0
_DIGEST_RE = re.compile(r"[0-9a-f]{64}")
_HELLO_FIELDS = {"host", "digest", "name", "concurrency"}


@dataclass(frozen=True)
class Hello:
    host_id: str
    digest: str
    name: str
    concurrency: int

    def to_json(self) -> bytes:
        return orjson.dumps(
            {
                "host": self.host_id,
                "digest": self.digest,
                "name": self.name,
                "concurrency": self.concurrency,
            }
        )


def parse_hello(raw: str | bytes) -> Hello:
    """A host's hello, checked; InvalidSpec (one line) for anything else."""
    if len(raw) > HELLO_MAX_BYTES:
        raise InvalidSpec(f"a host's hello is {len(raw)} bytes; at most {HELLO_MAX_BYTES}")
    try:
        got = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise InvalidSpec("a host's hello is not JSON") from None
    if not isinstance(got, dict) or set(got) != _HELLO_FIELDS:
        raise InvalidSpec(f"a host's hello is an object with exactly {sorted(_HELLO_FIELDS)}")
    host, digest, name, concurrency = (got[f] for f in ("host", "digest", "name", "concurrency"))
    if not keys.is_host_id(host):
        raise InvalidSpec("a host's id is 16 lowercase hexadecimal digits")
    if not isinstance(digest, str) or not _DIGEST_RE.fullmatch(digest):
        raise InvalidSpec("a host's digest is the SHA-256 of its password, 64 lowercase hex digits")
    if not isinstance(name, str) or not 0 < len(name) <= 200 or not name.isprintable():
        raise InvalidSpec("a host's name is 1-200 printable characters")
    if (
        not isinstance(concurrency, int)
        or isinstance(concurrency, bool)
        or not 0 < concurrency <= MAX_CONCURRENCY
    ):
        raise InvalidSpec(f"a host's concurrency is a whole number from 1 to {MAX_CONCURRENCY}")
    return Hello(host, digest, name, concurrency)


def _as_map(raw: Any) -> dict[str, Any]:
    """A reply of ``ACL GETUSER`` as a mapping (RESP3 gives one; RESP2 a flat list)."""
    if isinstance(raw, dict):
        return {str(k): v for k, v in raw.items()}
    if isinstance(raw, list):
        return {str(k): v for k, v in zip(raw[::2], raw[1::2], strict=False)}
    return {}


def _words(value: Any) -> list[str]:
    if isinstance(value, bytes):
        value = value.decode()
    if isinstance(value, list):
        return [str(v.decode() if isinstance(v, bytes) else v) for v in value]
    return str(value or "").split()


def host_rules(client: Any, host_id: str, digest: str) -> list[str]:
    """The ``ACL SETUSER`` rules of a host's user: the template user's keys, channels, commands and
    selectors as the server describes them (``ACL GETUSER``), none of its passwords or flags, the host's
    password digest, and two selectors of its own: taking its tokens and writing its line."""
    got = client.execute_command("ACL", "GETUSER", TEMPLATE_USER)
    if not got:
        got = client.execute_command("ACL", "GETUSER", "default")
    if not got:
        raise ConfigError(
            f"there is no {TEMPLATE_USER!r} ACL user (nor 'default') to make worker hosts' users from: "
            "load deploy/users.acl"
        )
    template = _as_map(got)
    rules = ["reset", "on", f"#{digest}"]
    rules += _words(template.get("keys"))
    rules += ["resetchannels", *_words(template.get("channels"))]
    rules += _words(template.get("commands"))
    for raw in template.get("selectors") or []:
        selector = _as_map(raw)
        parts = [
            *_words(selector.get("keys")),
            "resetchannels",
            *_words(selector.get("channels")),
            *_words(selector.get("commands")),
        ]
        rules.append("(" + " ".join(parts) + ")")
    token_pattern = keys.host_token_key(host_id, "x", 0, 0).removesuffix("x:0:0") + "*"
    rules.append(f"(~{token_pattern} resetchannels -@all +getdel)")
    rules.append(f"(~{keys.host_alive_key(host_id)} resetchannels -@all +set)")
    return rules


def mint(client: Any, host_id: str, digest: str) -> None:
    """Make (or make again) the host's ACL user."""
    client.execute_command(
        "ACL", "SETUSER", keys.host_user(host_id), *host_rules(client, host_id, digest)
    )


def look(rt: Runtime) -> tuple[int, bool]:
    """The leader's look every 100 ms, one round trip: take the hellos waiting (up to ``ADMIT_BATCH``)
    and register each host that may be; returns how many were, and whether attempts await a host."""
    pipe = rt.redis.pipeline(transaction=False)
    pipe.lpop(keys.HOST_HELLOS, ADMIT_BATCH)
    pipe.exists(keys.HOSTS_AWAITED)
    raws, awaited = pipe.execute()
    return (admit(rt, raws) if raws else 0), bool(awaited)


def admit(rt: Runtime, raws: list[Any]) -> int:
    """Register each host whose hello (of ``raws``) may be: returns how many were."""
    registered = set(rt.redis.hkeys(keys.HOSTS_REGISTERED))
    admitted = 0
    for raw in raws:
        try:
            hello = parse_hello(raw)
            if hello.host_id in registered:
                raise InvalidSpec(f"host {hello.host_id} is registered already")
            if len(registered) >= MAX_HOSTS:
                raise InvalidSpec(f"{MAX_HOSTS} hosts are registered: no more")
        except InvalidSpec as exc:
            log.warning("host_hello_refused", error=exc.message)
            rt.violation("host_hello_refused", why=exc.message)
            continue
        record = {
            "digest": hello.digest,
            "name": hello.name,
            "concurrency": hello.concurrency,
            "registered_at": rt.clock.now_iso(),
        }
        rt.redis.hset(keys.HOSTS_REGISTERED, hello.host_id, orjson.dumps(record))
        mint(rt.redis, hello.host_id, hello.digest)
        registered.add(hello.host_id)
        admitted += 1
        log.info(
            "host_registered", host=hello.host_id, name=hello.name, concurrency=hello.concurrency
        )
    return admitted


def forget(client: Any, host_ids: list[str]) -> None:
    """Delete the hosts' users, registrations and lines."""
    if not host_ids:
        return
    pipe = client.pipeline(transaction=False)
    pipe.execute_command("ACL", "DELUSER", *(keys.host_user(h) for h in host_ids))
    pipe.hdel(keys.HOSTS_REGISTERED, *host_ids)
    pipe.delete(*(keys.host_alive_key(h) for h in host_ids))
    pipe.execute()


def check(rt: Runtime, lost_since: dict[str, float], *, users: bool = False) -> None:
    """The watchdog's look at the hosts (the table just refreshed): forget a host that stopped, or whose
    line has been gone ``FORGET_SECONDS``; with ``users``, make again the user of a registered host that
    has none (a Redis restart or a failover keeps none: its pool waits for it)."""
    table = rt.hosts
    now = time.monotonic()
    for host_id in table.live:
        lost_since.pop(host_id, None)
    for host_id in table.missing:
        lost_since.setdefault(host_id, now)
    gone = sorted(
        set(table.stopped) | {h for h in table.missing if now - lost_since[h] >= FORGET_SECONDS}
    )
    if gone:
        forget(rt.redis, gone)
        for host_id in gone:
            lost_since.pop(host_id, None)
            log.info("host_forgotten", host=host_id, stopped=host_id in table.stopped)
        table.refresh()
    if users and table.registered:
        there = set(rt.redis.execute_command("ACL", "USERS"))
        for host_id, record in table.registered.items():
            if keys.host_user(host_id) in there:
                continue
            digest = record.get("digest")
            if isinstance(digest, str) and _DIGEST_RE.fullmatch(digest):
                mint(rt.redis, host_id, digest)
                log.info("host_user_made_again", host=host_id)
