"""One typed Python function per server function of the ``mother`` library (``mother/lua/mother.lua``):
named parameters, the keys built here from them, the reply read. Each takes a client or a pipeline (queued:
its reply comes from :func:`mother.functions.execute`). The budget library's functions are wrapped in
:mod:`mother.budget` (the guard, admission, submission, rate limit, stop, override, reservations) and the
ledger's in :mod:`mother.ledger`.
"""

from __future__ import annotations

from typing import Any

import orjson

from mother import keys
from mother.errors import GateRefused
from mother.functions import call
from mother.records.metrics import observe_follow_ups

__all__ = [
    "create_run",
    "due",
    "ended",
    "forget_rejection",
    "gate_refusal",
    "lease",
    "release_lease",
    "server_times",
    "terminate",
    "transition",
    "trim_stream",
]


def transition(
    client: Any,
    *,
    run_id: str,
    expected: tuple[int, int],
    to: tuple[int, int],
    phase: str,
    phase_timeout_ms: int,
    run_duration_ms: int,
    at: str,
    history: bytes,
    result: bytes | str,
    artifacts: list[str],
    host: str = "",
    gate: str = "",
    follow_ups: tuple[list[Any], list[Any]] = ([], []),
    observed: dict[str, int] | None = None,
) -> Any:
    """``mh_transition``: move the run from attempt ``expected`` to ``to`` (phase index, attempt) if
    ``expected`` is still current (and ``host``, when given, is the attempt's), setting the
    phase deadline (and, with ``run_duration_ms``, the run's) and making the ``follow_ups`` (keys,
    words: :func:`mother.functions.follow_ups`) in the same call. ``gate``: a gate op (JSON: open one
    after the move, or close the one the run waits on before it; :mod:`mother.gates`). Replies 1
    applied, 0 not current, -1 current but another host's, -2..-5 the gate may not be closed
    (:func:`gate_refusal`). ``observed``: histogram name -> ms, counted with the move (an accepted result's
    duration and queue wait)."""
    more_keys, words = follow_ups
    for name, ms in (observed or {}).items():
        counted_keys, counted = observe_follow_ups(name, ms)
        more_keys, words = [*more_keys, *counted_keys], [*words, *counted]
    return call(
        client,
        "mh_transition",
        [
            keys.run_key(run_id),
            keys.PHASE_DEADLINES,
            keys.RUN_DEADLINES,
            keys.GATE_DEADLINES,
            keys.GATE_WARNINGS,
            keys.RUNS_WAITING,
            keys.RUN_WARNINGS,
            keys.run_limits_key(run_id),
            keys.METRICS_COUNTERS,
            *more_keys,
        ],
        [
            run_id,
            expected[0],
            expected[1],
            to[0],
            to[1],
            phase,
            phase_timeout_ms,
            run_duration_ms,
            at,
            history,
            result,
            orjson.dumps(artifacts).decode(),
            host,
            gate,
            *words,
        ],
    )


def terminate(
    client: Any,
    *,
    run_id: str,
    reason: str,
    record: bytes,
    envelope: bytes,
    at: str,
    history: bytes,
    ending: str = keys.RUNS_ENDING,
    gate: str = "",
) -> Any:
    """``mh_terminate``: write the run's one termination record (NX) and everything that goes with it.
    ``gate``: a close op (a denial, an expiry): the run ends only while it still waits on that gate.
    Replies [1, record] when this call won, [0, the first record] otherwise, [-2..-5, None] when the
    gate op was refused (:func:`gate_refusal`)."""
    return call(
        client,
        "mh_terminate",
        [
            keys.termination_key(run_id),
            keys.termination_reason_index_key(reason),
            keys.run_key(run_id),
            keys.result_key(run_id),
            keys.PHASE_DEADLINES,
            keys.RUN_DEADLINES,
            keys.run_limits_key(run_id),
            ending,
            keys.GLOBAL_BUDGET,
            keys.ADMISSION_WAITING,
            keys.RUN_WARNINGS,
            keys.GATE_DEADLINES,
            keys.GATE_WARNINGS,
            keys.RUNS_WAITING,
            keys.METRICS_COUNTERS,
            keys.run_budget_key(run_id),
        ],
        [record, run_id, envelope, at, reason, history, gate],
    )


# what mh_transition and mh_terminate reply when a gate may not be closed
_GATE_REFUSALS = {
    -2: (
        "not_waiting",
        "does not wait on gate {gate}: it was decided already, or it waits on another",
    ),
    -3: ("expired", "gate {gate}'s deadline has passed; the run ends blocked"),
    -4: ("not_allowed", "{actor} may not decide gate {gate} (see its approvers)"),
    -5: ("digest_mismatch", "gate {gate} asks approval of other content than the digest given"),
}


def gate_refusal(code: int, *, run_id: str, gate_id: str, actor: str) -> GateRefused | None:
    """The one-line error for a gate op's refusal code; None for a code that is not one."""
    found = _GATE_REFUSALS.get(code)
    if found is None:
        return None
    why, text = found
    return GateRefused(
        f"run {run_id} " + text.format(gate=gate_id, actor=actor)
        if why == "not_waiting"
        else text.format(gate=gate_id, actor=actor),
        why=why,
    )


def ended(
    client: Any,
    *,
    run_id: str,
    activity_maxlen: int,
    entries: list[list[str]],
    parent: str | None = None,
) -> Any:
    """``mh_ended``: the last step of a run's end, once: out of ``mother:ending``, its activity ``entries``
    (each a flat list of fields) appended, a spawned child's ``parent`` given its slot back. Replies 1 when
    this call applied it."""
    return call(
        client,
        "mh_ended",
        [
            keys.RUNS_ENDING,
            keys.ACTIVITY_STREAM,
            keys.run_activity_key(run_id),
            *([keys.run_budget_key(parent)] if parent else []),
        ],
        [run_id, activity_maxlen, orjson.dumps(entries)],
    )


def create_run(
    client: Any,
    *,
    run_id: str,
    user_id: str,
    entry_id: str,
    record: bytes,
    created_ms: int,
    activity_maxlen: int,
    announced: list[str],
) -> int:
    """``mh_create_run``: claim the run_id for ``entry_id``, create the record (NX), index it and append its
    ``announced`` entry (flat fields). Replies 1 created, 0 it exists, -1 another entry claimed the id."""
    return int(
        call(
            client,
            "mh_create_run",
            [
                keys.run_key(run_id),
                keys.RUN_CLAIMS,
                keys.RUNS_INDEX,
                keys.user_runs_key(user_id),
                keys.ACTIVITY_STREAM,
                keys.METRICS_COUNTERS,
                keys.run_activity_key(run_id),
            ],
            [record, run_id, entry_id, created_ms, activity_maxlen, orjson.dumps(announced)],
        )
    )


def due(client: Any, zset: str, *, slack_ms: int = 0, limit: int) -> list[tuple[str, float]]:
    """``mh_due``: the members of ``zset`` scored at or before the server's now minus ``slack_ms`` (at most
    ``limit``), with their scores."""
    found = call(client, "mh_due", [zset], [slack_ms, limit])
    return [(found[i], float(found[i + 1])) for i in range(0, len(found), 2)]


def lease(client: Any, *, instance: str, ttl_ms: int) -> int:
    """``mh_lease``: take or renew the leader lease. Replies 2 taken, 1 renewed, 0 another holds it."""
    return int(call(client, "mh_lease", [keys.LEADER_LEASE], [instance, ttl_ms]))


def release_lease(client: Any, *, instance: str) -> int:
    """``mh_release_lease``: give the lease up if ``instance`` still holds it (compare-and-delete)."""
    return int(call(client, "mh_release_lease", [keys.LEADER_LEASE], [instance]))


def trim_stream(client: Any, stream: str, *, retention_ms: int) -> int:
    """``mh_trim_stream``: trim a stream Mother consumes below what a consumer group still needs."""
    return int(call(client, "mh_trim_stream", [stream], [retention_ms]))


def forget_rejection(client: Any, *, entry_id: str, run_id: str | None) -> Any:
    """``mh_forget_rejection``: drop a rejection, its index entry, and its run's by-run entry while it names it."""
    return call(
        client,
        "mh_forget_rejection",
        [keys.rejection_key(entry_id), keys.REJECTIONS_INDEX, keys.REJECTIONS_BY_RUN],
        [entry_id, run_id or ""],
    )


def server_times(client: Any, *ms: int) -> Any:
    """``mh_now``: the server's clock in ms; given times in ms, their ISO texts as the libraries write them."""
    return call(client, "mh_now", [], list(ms))
