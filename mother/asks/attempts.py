"""Asks about one phase attempt: its start (``begin``: what it runs with), whether it is still its run's
(``alive``), what it says (``emit``, ``violation``), what it counts (``tool_stat``, ``calibrate``) and its
end (``result``). Each is applied only while the asking host holds the attempt
(:func:`mother.asks.answer.finish`, ``held``)."""

from __future__ import annotations

from typing import Any

import orjson
from pydantic import ValidationError

from mother import keys
from mother.artifacts import artifact_default
from mother.asks.answer import Answer
from mother.asks.wire import Ask, refused
from mother.budget import Guard
from mother.client import EVENT_PHASE_RESULT
from mother.context import queue_load as queue_context_load
from mother.errors import InvalidSpec, PolicyViolation
from mother.hosts.liveness import REPORTED_MARK, REPORTED_MS, started_mark
from mother.journal import check_step
from mother.libraries.context import cloud_escalation
from mother.records import parse_run_record, runs
from mother.records.artifacts import store_artifact
from mother.records.tools import record_call
from mother.runtime import Runtime
from mother.tokens import Calibration
from schemas import ACTIVE_STATUSES, PhaseResult, describe_validation_error
from schemas.artifact import Artifact

__all__ = [
    "PHASE_EVENTS",
    "alive",
    "begin",
    "calibrate",
    "charge",
    "emit",
    "guard_of",
    "result",
    "tool_stat",
    "violation",
]

# what a phase attempt may say in its run's activity (Mother names the run; the host cannot name another)
PHASE_EVENTS = frozenset(
    {
        "turn_limit_hit",
        "tool_blocked",
        "tool_success",
        "tool_failed",
        "tool_fallback",
        "permission_denied",
        "hook_notice",
        "context_limit_reached",
        "usage_estimated",
        "model_call_retried",
        # a resumed attempt's replay of its phase's journal (workers/resume.py)
        "phase_resumed",
        "resume_diverged",
        "journal_malformed",
        "step_not_recorded",
        "step_refused",
    }
)
# the kinds of violation a host of ours reports, counted by kind in the metrics (any other a host names
# is counted as host_reported: a host makes no labels of its own)
HOST_VIOLATION_KINDS = frozenset({"job_refused"})
# violations a host may have recorded in an hour (past it they are counted in its key, not kept)
HOST_VIOLATIONS_PER_HOUR = 200
# a phase's word in the activity stream is short
MAX_EMIT_BYTES = 16_384


def guard_of(rt: Runtime, ask: Ask, user_id: str) -> Guard:
    """The budget guard of the attempt ``ask`` is about, for its host."""
    run_id, index, attempt = ask.attempt  # type: ignore[misc]
    return Guard(
        rt.redis,
        rt.settings,
        run_id,
        user_id,
        rt.clock.today,
        attempt=(index, attempt),
        host=ask.host,
    )


def charge(rt: Runtime, ask: Ask) -> Answer:
    """A phase's charge (a model call's reservation or settle, a tool call, a counted action, a step's
    record), made by ``mh_guard`` only while the host holds the attempt, with the journal step it
    records (:func:`_guarded`). The reply is the guard's, a refusal included."""
    spec = rt.spec(ask.run_id)
    if spec is None:
        return Answer(refused("not_held", f"run {ask.run_id} has no record"))
    reply = _guarded(rt, ask, spec.user_id, ask.body.get("action"))
    return Answer(
        {"ok": True, **reply} if reply.get("ok") else {**reply, "ok": False, "guard": True}
    )


def _guarded(rt: Runtime, ask: Ask, user_id: str, action: Any) -> dict[str, Any]:
    """``action`` of the ask's attempt charged by ``mh_guard``, with the journal step it carries (checked
    here: a step that is not one, or too large, is not recorded, the action is charged all the same, and
    the reply says why in ``step_refused``: the phase goes on, and a resume stops at that step)."""
    step, why = None, None
    if isinstance(action, dict) and "step" in action:
        action = dict(action)
        try:
            step = check_step(action.pop("step"), ask.attempt[2], rt.clock.now_iso())  # type: ignore[index]
        except InvalidSpec as exc:
            why = exc.message
    reply = guard_of(rt, ask, user_id).asked(action, step=step, ask_id=ask.entry_id)
    return {**reply, "step_refused": why} if why is not None else reply


def _fragment(raw: Any) -> Any:
    """A JSON text read from Redis, put into a reply as it is (not parsed and written again)."""
    return None if raw is None else orjson.Fragment(raw)


def begin(rt: Runtime, ask: Ask) -> Answer:
    """The attempt starts: what it runs with (its run's record, counters and composed context, the tool
    registry, and whether its model needs a library's approval), and it is alive from now on (its host's
    beats keep it so)."""
    run_id, index, attempt = ask.attempt  # type: ignore[misc]
    pipe = rt.redis.pipeline(transaction=False)
    runs.queue_read(pipe, run_id)
    pipe.execute_command("JSON.GET", keys.run_budget_key(run_id))
    queue_context_load(pipe, run_id, index)
    pipe.execute_command("JSON.GET", keys.tools_registry_key())
    pipe.lrange(keys.journal_key(run_id, index), 0, -1)
    raw_run, raw_counters, raw_context, raw_tools, journal = pipe.execute()
    if raw_run is None:
        return Answer(refused("not_held", f"run {run_id} has no record"))
    state = parse_run_record(run_id, raw_run)
    cloud: Any = None
    if state.spec.libraries and raw_context is not None and state.status in ACTIVE_STATUSES:
        model = orjson.loads(raw_context).get("model")
        try:
            cloud = cloud_escalation(rt, runs.attempt_view(state), index, model) if model else None
        except PolicyViolation as exc:
            cloud = {"refused": exc.message}
    worker = str(ask.body.get("worker") or "")[:200]
    ttl = int(rt.settings.service.heartbeat_timeout_seconds * 1000)

    def writes(pipe: Any) -> None:
        pipe.set(
            keys.attempt_heartbeat_key(run_id, index, attempt),
            started_mark(ask.host, worker),
            px=ttl,
        )

    reply = {
        "ok": True,
        "run": _fragment(raw_run),
        "counters": _fragment(raw_counters),
        "context": _fragment(raw_context),
        "tools": _fragment(raw_tools),
        "cloud": cloud,
        # the phase's steps so far, as recorded (each a JSON text: a resume parses and checks them)
        "journal": journal,
    }
    return Answer(reply, writes, held=True)


def alive(rt: Runtime, ask: Ask) -> Answer:
    """Whether the host still holds the attempt (refused ``not_held`` when not)."""
    return Answer({"ok": True}, held=True)


def _fields(ask: Ask, body_key: str) -> dict[str, Any]:
    fields = ask.body.get(body_key)
    if not isinstance(fields, dict) or len(orjson.dumps(fields)) > MAX_EMIT_BYTES:
        raise InvalidSpec(f"{body_key} must be a JSON object of at most {MAX_EMIT_BYTES} bytes")
    return {k: v for k, v in fields.items() if k not in ("run_id", "at", "host", "type")}


def emit(rt: Runtime, ask: Ask) -> Answer:
    """An activity entry of the attempt's run, of a kind a phase says (:data:`PHASE_EVENTS`)."""
    event_type = ask.body.get("type")
    if event_type not in PHASE_EVENTS:
        raise InvalidSpec(f"a phase does not say {str(event_type)[:40]!r} in the activity stream")
    fields = _fields(ask, "fields")
    phase = fields.pop("phase", None)

    def writes(pipe: Any) -> None:
        rt.emit(
            pipe,
            event_type,
            run_id=ask.run_id,
            phase=phase if isinstance(phase, str) else None,
            host=ask.host,
            **fields,
        )

    return Answer({"ok": True}, writes, held=True)


def under_cap(rt: Runtime, host: str) -> bool:
    """Whether one more violation of ``host``'s may be kept this hour (``HOST_VIOLATIONS_PER_HOUR``): past
    the cap they are counted, not kept, so no host can push the others' out of the list."""
    counter = keys.host_violations_key(host)
    seen = int(rt.redis.incr(counter))
    if seen == 1:
        rt.redis.expire(counter, 3600)
    return seen <= HOST_VIOLATIONS_PER_HOUR


def foreign(rt: Runtime, ask: Ask) -> None:
    """After ``ask`` was refused ``not_held``: when the attempt it names is its run's current one and
    another host holds it, the host asked about an attempt it was never given (its credentials are in
    the wrong hands, or it is not what it says). That is a violation, in the run's activity too. A stale
    attempt (the run moved on, a job moved off the host before it began) is not."""
    run_id, index, attempt = ask.attempt  # type: ignore[misc]
    position, holder = runs.read_position_and_host(rt.redis, run_id)
    if (
        position is None
        or position[0] not in ACTIVE_STATUSES
        or position[1:] != (index, attempt)
        or holder in (None, ask.host)
        or not under_cap(rt, ask.host)
    ):
        return
    rt.violation(
        "ask_for_another_hosts_attempt",
        run_id=run_id,
        phase_index=index,
        attempt=attempt,
        host=ask.host,
        held_by=holder,
        ask=ask.kind,
        activity=True,
        why="refused: the host does not hold the attempt",
    )


def violation(rt: Runtime, ask: Ask) -> Answer:
    """A security violation the host saw in its attempt (a tool that tried to leave its sandbox), or its
    own (a job refused on its queue): recorded with the host's name, an attempt's only while the host
    holds it, and at most ``HOST_VIOLATIONS_PER_HOUR`` a host an hour (past it they are counted)."""
    kind = ask.body.get("kind")
    if not isinstance(kind, str) or not keys.is_id(kind):
        raise InvalidSpec("a violation's kind is an id")
    fields = _fields(ask, "fields")
    held = ask.attempt is not None
    if not under_cap(rt, ask.host):
        return Answer({"ok": True, "recorded": False}, held=held)
    about: dict[str, Any] = {}
    if ask.attempt is not None:
        run_id, index, attempt = ask.attempt
        about = {"run_id": run_id, "phase_index": index, "attempt": attempt}

    def writes(pipe: Any) -> None:
        # a host's own (no attempt): in the violations list, not in a run's activity
        rt.violation_on(
            pipe,
            kind,
            host=ask.host,
            activity=held,
            counted_as=kind if kind in HOST_VIOLATION_KINDS else "host_reported",
            **about,
            **fields,
        )

    return Answer({"ok": True}, writes, held=held)


def tool_stat(rt: Runtime, ask: Ask) -> Answer:
    """One call of a registry tool, counted in its statistics."""
    tool_id, ok_, ms = ask.body.get("tool_id"), ask.body.get("ok"), ask.body.get("ms")
    rt.tools.current()
    registry = rt.tools.registry
    known = registry is not None and any(t.tool_id == tool_id for t in registry.tools)
    if not known or not isinstance(ok_, bool) or not isinstance(ms, (int, float)) or ms < 0:
        raise InvalidSpec("tool_stat takes a registry tool's id, ok (bool) and ms (>= 0)")
    return Answer(
        {"ok": True},
        held=True,
        after=lambda: record_call(
            rt.redis, str(tool_id), ok=ok_, execution_ms=min(float(ms), 86_400_000)
        ),
    )


def calibrate(rt: Runtime, ask: Ask) -> Answer:
    """One model call's estimated and reported prompt tokens, for the model's calibration."""
    model, estimated, reported = (ask.body.get(k) for k in ("model", "estimated", "reported"))
    config = rt.settings.models.get(model) if isinstance(model, str) else None
    most = config.max_tokens if config is not None else 0
    if not all(isinstance(n, int) and 0 < n <= most for n in (estimated, reported)):
        raise InvalidSpec(
            "calibrate takes a configured model and its call's tokens (1..max_tokens)"
        )
    return Answer(
        {"ok": True},
        lambda pipe: Calibration.queue_record(pipe, str(model), int(estimated), int(reported)),  # type: ignore[arg-type]
        held=True,
    )


def result(rt: Runtime, ask: Ask) -> Answer:
    """The attempt's end: its last model call's settle (deferred to here), its output artifact, and its
    result appended to ``mother:events`` with the host's name (the leader reviews it: ``mh_transition``
    takes it only from the host the attempt was queued on). The attempt's heartbeat then says
    ``reported``: a result on its way is not a lost attempt."""
    run_id, index, attempt = ask.attempt  # type: ignore[misc]
    try:
        got = PhaseResult.model_validate(ask.body.get("result"))
    except ValidationError as exc:
        raise InvalidSpec(
            f"the result is not a PhaseResult: {describe_validation_error(exc)}"
        ) from None
    if (got.run_id, got.phase_index, got.attempt) != (run_id, index, attempt):
        raise InvalidSpec("the result is another attempt's than the ask names")
    # the output's id is the attempt's own: no host names (and overwrites) another run's artifact
    own = keys.phase_artifact_id(run_id, index, attempt)
    if got.artifacts not in ([], [own]):
        raise InvalidSpec(f"a phase attempt's output artifact is {own}, and only it")
    settle = ask.body.get("settle")
    settled: dict[str, Any] = {}
    if isinstance(settle, dict):
        spec = rt.spec(run_id)
        if spec is not None:
            settled = _guarded(rt, ask, spec.user_id, settle)
    dispatched = ask.body.get("dispatched_ms")
    now_ms = rt.clock.now_ms()
    expires = artifact_default(rt.settings, dispatched if isinstance(dispatched, int) else now_ms)

    def writes(pipe: Any) -> None:
        if got.status == "completed" and got.artifacts:
            artifact = Artifact(
                artifact_id=got.artifacts[0],
                run_id=run_id,
                phase=got.phase,
                attempt=attempt,
                kind="phase_output",
                content=got.output,
            )
            store_artifact(pipe, artifact, rt.clock.iso(now_ms), expires_at=rt.clock.iso(expires))
            pipe.zadd(keys.ARTIFACT_EXPIRY, {got.artifacts[0]: expires})
        if got.resumed is not None:
            saved = got.resumed
            pipe.hincrby(keys.METRICS_COUNTERS, "steps_replayed", saved.replayed)
            pipe.hincrby(keys.METRICS_COUNTERS, "tokens_saved", saved.tokens_saved)
            pipe.hincrby(
                keys.METRICS_COUNTERS, "spend_saved_micro_usd", saved.spend_saved_micro_usd
            )
        pipe.xadd(
            keys.EVENTS_STREAM,
            {"type": EVENT_PHASE_RESULT, "payload": got.to_json(), "host": ask.host},
        )
        pipe.set(keys.attempt_heartbeat_key(run_id, index, attempt), REPORTED_MARK, px=REPORTED_MS)

    return Answer({"ok": True, "settled": settled.get("counters")}, writes, held=True)
