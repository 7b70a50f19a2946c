"""The ``mother`` Redis Functions library and the one Python wrapper per function.

The libraries live in ``mother/lua/`` (mother, budget, ledger), each with the shared
helpers of ``mother/lua/prelude.lua`` inserted after its ``#!lua`` line (and the budget
library's reason codes rendered from ``mother.budget``). :func:`load_functions` installs it
(``FUNCTION LOAD REPLACE``); every process calls it once at start. A wrapper that
finds the library missing (a server restarted without persistence, a flushed
function set) loads it again and retries once.
"""

from __future__ import annotations

import time
from functools import cache
from importlib import resources
from typing import Any

import orjson
import redis

from mother import keys
from mother.codes import CODES, COUNTED, SEQ_SPAN, USER_CODES
from mother.errors import ConfigError, RedisUnavailable
from mother.records.metrics import LONG_BOUNDS, bound_text

__all__ = [
    "FUNCTIONS_PROBE",
    "call",
    "call_ro",
    "ensure_loaded",
    "execute",
    "fcall_command",
    "follow_ups",
    "load_functions",
    "send",
    "server_now_ms",
]

# a function that writes nothing and ignores its keys: FCALL of it tests an ACL's keys
FUNCTIONS_PROBE = "mh_now"


def _read(file: str) -> str:
    return resources.files("mother").joinpath(f"lua/{file}").read_text(encoding="utf-8")


def _with_prelude(source: str) -> str:
    """The library with the shared helpers (lua/prelude.lua) inserted after its ``#!lua`` line."""
    shebang, body = source.split("\n", 1)
    prelude = (
        _read("prelude.lua")
        .replace("__RUN_ACTIVITY_PREFIX__", keys.RUN_ACTIVITY_PREFIX)
        .replace("__RUN_ACTIVITY_MAXLEN__", str(keys.RUN_ACTIVITY_MAXLEN))
        .replace("__LONG_BOUNDS__", ", ".join(f"{{{b}, '{bound_text(b)}'}}" for b in LONG_BOUNDS))
    )
    return f"{shebang}\n{prelude}\n{body}"


def _guard_codes() -> str:
    """mh_guard's reason codes as the JSON text the budget library decodes (one source: mother.codes)."""
    text = orjson.dumps({"run": CODES, "user": USER_CODES, "counted": COUNTED}).decode()
    if "'" in text or "\\" in text:
        raise ValueError(
            "reason codes must not contain quotes or backslashes (they are rendered into a Lua string)"
        )
    return text


@cache
def libraries() -> dict[str, str]:
    """Each library's source as loaded: the prelude inserted, the budget library's reason codes rendered."""
    return {
        keys.FUNCTIONS_LIBRARY: _with_prelude(_read("mother.lua")),
        keys.BUDGET_LIBRARY: _with_prelude(_read("budget.lua"))
        .replace("__GUARD_CODES__", _guard_codes())
        .replace("__SEQ_SPAN__", str(SEQ_SPAN)),
        keys.LEDGER_LIBRARY: _with_prelude(_read("ledger.lua")),
        keys.GC_LIBRARY: _with_prelude(_read("gc.lua")),
    }


def load_functions(client: redis.Redis) -> None:
    """Install (or replace) the libraries on the server."""
    for source in libraries().values():
        client.execute_command("FUNCTION", "LOAD", "REPLACE", source)


def call(
    client: redis.Redis | redis.client.Pipeline, name: str, keys_: list[str], args: list[Any]
) -> Any:
    """FCALL ``name`` with ``keys_`` and ``args``; reload the library once if it is missing.

    With a pipeline the call is queued and its reply comes from ``execute()``.
    """
    return send(client, fcall_command(name, keys_, args))


def call_ro(client: redis.Redis, name: str, keys_: list[str], args: list[Any]) -> Any:
    """FCALL_RO ``name`` (a function flagged no-writes): what a user allowed only to read may call."""
    return send(client, ("FCALL_RO", name, len(keys_), *keys_, *args))


def execute(pipe: redis.client.Pipeline, *, raise_on_error: bool = True) -> list[Any]:
    """Execute ``pipe``; an FCALL that found its library missing (a server restarted without persistence,
    a flushed function set) is sent again once the libraries are loaded, as redis-py's Script does for a
    pipeline. The function did nothing the first time, so sending it again cannot apply it twice; it is
    sent after the pipeline's other commands (in a MULTI, outside the transaction). Raises the first other
    error, unless ``raise_on_error`` is off (errors are then replies)."""
    stack = [args for args, _options in pipe.command_stack]
    replies = pipe.execute(raise_on_error=False)
    missing = [
        i
        for i, reply in enumerate(replies)
        if _function_missing(reply) and str(stack[i][0]).upper() == "FCALL"
    ]
    if missing:
        client = redis.Redis(connection_pool=pipe.connection_pool)
        load_functions(client)
        for i in missing:
            try:
                replies[i] = client.execute_command(*stack[i])
            except redis.ResponseError as exc:
                replies[i] = exc
    if raise_on_error:
        for reply in replies:
            if isinstance(reply, redis.ResponseError):
                raise reply
    return replies


def _function_missing(reply: Any) -> bool:
    return isinstance(reply, redis.ResponseError) and "function not found" in str(reply).lower()


def fcall_command(name: str, keys_: list[str], args: list[Any]) -> tuple[Any, ...]:
    """The FCALL command's words, for :func:`send` (a caller that repeats a call can keep them)."""
    return ("FCALL", name, len(keys_), *keys_, *args)


def send(client: redis.Redis | redis.client.Pipeline, command: tuple[Any, ...]) -> Any:
    """Send an FCALL built by :func:`fcall_command`; reload the library once if it is missing."""
    # execute_command itself: fcall() only adds two calls
    try:
        return client.execute_command(*command)
    except redis.ResponseError as exc:
        if "function not found" not in str(exc).lower() or isinstance(
            client, redis.client.Pipeline
        ):
            raise
        try:
            load_functions(client)
        except redis.exceptions.NoPermissionError:
            raise RedisUnavailable(
                f"the server functions ({command[1]}) are not loaded yet and this ACL user may not "
                "load them: start Mother first (it loads them), or wait for it"
            ) from None
        return client.execute_command(*command)


# commands whose one key is their first word after the name: what a follow-up may be
KEY_FIRST = frozenset(
    {
        "SADD",
        "SREM",
        "DEL",
        "HSET",
        "HINCRBY",
        "HDEL",
        "RPUSH",
        "LPUSH",
        "LTRIM",
        "EXPIRE",
        "PEXPIRE",
        "PERSIST",
        "XADD",
        "XACK",
        "XDEL",
        "ZADD",
        "ZREM",
        "SET",
        "JSON.SET",
        "JSON.MERGE",
        "JSON.NUMINCRBY",
        "JSON.ARRAPPEND",
        "JSON.DEL",
    }
)


def follow_ups(pipe: redis.client.Pipeline) -> tuple[list[Any], list[Any]]:
    """The commands queued on ``pipe`` (never executed) as a function's follow-up writes: their keys
    (one each, for KEYS) and their words (for ARGV: each as its word count n, its name, its n - 1
    words after the key). This is how a library such as RQ builds the writes (RQ's own enqueue,
    into a pipeline) and the server makes them only if a check passes (``mh_transition``)."""
    keys_: list[Any] = []
    words: list[Any] = []
    for args, _options in pipe.command_stack:
        name = str(args[0]).upper()
        # a DEL of one key only: its other words would be keys
        if name not in KEY_FIRST or len(args) < 2 or (name == "DEL" and len(args) != 2):
            raise RuntimeError(
                f"{name} cannot be a follow-up write: only commands whose one key comes first "
                f"({', '.join(sorted(KEY_FIRST))})"
            )
        keys_.append(args[1])
        words += [len(args) - 1, args[0], *args[2:]]
    return keys_, words


def server_now_ms(client: redis.Redis) -> int:
    """The server's clock in milliseconds (one round trip)."""
    seconds, micros = client.time()
    return int(seconds) * 1000 + int(micros) // 1000


def ensure_loaded(client: redis.Redis, *, wait_seconds: float = 0.0, log: Any = None) -> None:
    """Load each library unless the server already has exactly this code. A user whose ACL may not load
    functions (the workers') waits up to ``wait_seconds`` for a Mother to load them (they start together),
    then fails naming the fix."""
    deadline = time.monotonic() + wait_seconds
    for name, source in libraries().items():
        while source not in _loaded_codes(client, name):
            try:
                client.execute_command("FUNCTION", "LOAD", "REPLACE", source)
            except redis.exceptions.NoPermissionError:
                if time.monotonic() >= deadline:
                    raise ConfigError(
                        f"the server functions ({name}) are not loaded, or another version of them is, and this ACL "
                        "user may not load them: start Mother (its user loads them), or run the same version "
                        "of Mother-Harness everywhere"
                    ) from None
                if log is not None:
                    log.info(
                        "waiting_for_server_functions",
                        library=name,
                        why="this ACL user may not load them",
                    )
                time.sleep(0.5)


def _loaded_codes(client: redis.Redis, name: str) -> list[str]:
    """The code of each library named ``name`` on the server (none or one)."""
    codes: list[str] = []
    for lib in client.execute_command("FUNCTION", "LIST", "LIBRARYNAME", name, "WITHCODE") or []:
        entry = lib if isinstance(lib, dict) else dict(zip(lib[::2], lib[1::2], strict=False))
        code = entry.get("library_code") or entry.get(b"library_code")
        if code is not None:
            codes.append(code.decode() if isinstance(code, bytes) else str(code))
    return codes
