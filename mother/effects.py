"""What a phase attempt adds to keys every run shares: the metrics, each tool's call statistics, a model's
token calibration and a library's access-log timeline.

An attempt's ACL user may not write those keys (``HINCRBY`` by a negative amount, ``JSON.SET`` or
``ZADD`` of an existing member would rewrite what other runs counted or logged). It counts into its own
``attempt_effects:{run}:{index}:{attempt}`` hash instead, and Mother adds that hash to the shared keys
when the attempt is over (its user deleted, so nothing more comes): ``mh_fold``, on the server, which
takes additions only and names what it refuses.

The work-horse that runs an attempt says so once (:func:`begin`, from
:func:`mother.attempt_users.act_as`); the writers below then count into the attempt's hash. A process
that holds no attempt (Mother, the CLI, the GC) writes the shared keys as before.
"""

from __future__ import annotations

from typing import Any

import redis

from mother import keys
from mother.errors import InvalidSpec
from mother.functions import call

__all__ = [
    "CALL_TOKENS",
    "MOST",
    "begin",
    "current",
    "end",
    "fold",
    "queue_calibration",
    "queue_timeline",
    "queue_tool_call",
]

# the largest single count mh_fold takes (a phase's whole tool time in ms fits with room to spare)
MOST = 10**15
# the most tokens one model call's calibration sample may have (estimated or reported): past any context
CALL_TOKENS = 10_000_000

_current: str | None = None


def begin(run_id: str, index: int, attempt: int) -> None:
    """This process now runs the attempt: what it adds to shared keys goes to the attempt's hash."""
    global _current
    _current = keys.attempt_effects_key(run_id, index, attempt)


def end() -> None:
    """This process runs no attempt any more."""
    global _current
    _current = None


def current() -> str | None:
    """The attempt's effects key while this process runs one, else None."""
    return _current


def queue_tool_call(
    pipe: Any, effects: str, tool_id: str, *, ok: bool, execution_ms: float
) -> None:
    """One call of ``tool_id`` counted in the attempt's hash (``t|{tool}|s|f|ms``)."""
    keys.check_id(tool_id, "tool_id")
    pipe.hincrby(effects, f"t|{tool_id}|{'s' if ok else 'f'}", 1)
    pipe.hincrby(effects, f"t|{tool_id}|ms", max(0, round(execution_ms)))


def queue_calibration(pipe: Any, effects: str, model: str, estimated: int, reported: int) -> None:
    """One call's raw estimate and reported prompt tokens, counted in the attempt's hash."""
    keys.token_calibration_key(model)  # the model's name is checked like the key's
    pipe.hincrby(effects, f"c|{model}|estimated", estimated)
    pipe.hincrby(effects, f"c|{model}|reported", reported)
    pipe.hincrby(effects, f"c|{model}|samples", 1)


def queue_timeline(pipe: Any, effects: str, library_id: str, log_id: str, at_ms: int) -> None:
    """A library access log's place on its library's timeline, for Mother to add (``ZADD NX``)."""
    keys.check_id(library_id, "library_id")
    pipe.hset(effects, f"z|{library_id}|{log_id}", int(at_ms))


def _targets(fields: list[str]) -> list[str]:
    """The shared keys an effects hash's fields name (``mh_fold`` adds only to keys passed in KEYS)."""
    out: set[str] = set()
    for field in fields:
        family, _, rest = field.partition("|")
        try:
            if family == "t":
                out.add(keys.tool_stats_key(rest.rpartition("|")[0]))
            elif family == "c":
                out.add(keys.token_calibration_key(rest.rpartition("|")[0]))
            elif family == "z":
                out.add(keys.access_logs_key(rest.partition("|")[0]))
        except InvalidSpec:  # a field no writer of ours makes: mh_fold refuses it and names it
            continue
    return sorted(out)


def fold(client: redis.Redis, attempts: list[tuple[str, int, int]]) -> list[tuple[str, str, str]]:
    """Add what each attempt (over: its user deleted) counted to the shared keys, and delete its hash:
        two round trips for all of them. Returns what ``mh_fold`` refused, as (effects key, field, why); a call
    that failed as a whole is (key, ``*``, the error), its hash left as it was."""
    if not attempts:
        return []
    effect_keys = [keys.attempt_effects_key(*ids) for ids in attempts]
    read = client.pipeline(transaction=False)
    for key in effect_keys:
        read.hkeys(key)
    fields = read.execute()
    pipe = client.pipeline(transaction=False)
    folded = []
    for (run_id, _index, _attempt), key, names in zip(attempts, effect_keys, fields, strict=True):
        if not names:
            continue
        folded.append(key)
        call(
            pipe,
            "mh_fold",
            [key, keys.METRICS_COUNTERS, *_targets([str(n) for n in names])],
            [keys.access_log_id_prefix(run_id), CALL_TOKENS, MOST],
        )
    refused: list[tuple[str, str, str]] = []
    for key, reply in zip(folded, pipe.execute(raise_on_error=False), strict=True):
        if isinstance(reply, Exception):
            # kept for the next sweep: the hash is deleted only by the call that added it
            refused.append((key, "*", f"not folded: {reply}"))
            continue
        words = reply[1] if isinstance(reply, list) and len(reply) > 1 else []
        refused += [(key, str(words[i]), str(words[i + 1])) for i in range(0, len(words) - 1, 2)]
    return refused
