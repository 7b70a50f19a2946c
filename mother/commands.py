"""People's commands, as Mother takes them from ``mother:commands`` and each principal's
``mother:commands:{name}``: cancel, approve, deny, answer, and (with ``operate``) a run's budget
override, emergency stop and reset.

On a principal's stream the actor is the principal, proven by the stream (its ACL user alone may
write it): a payload naming another actor is refused, as is a command its grants do not cover, or a
cancel of a run it neither submits for nor operates. On Mother's own stream (service credentials,
which no person should hold) the actor is what the entry says. A decision on a gate must name the
gate and its digest on every path, so an approval given for one gate can never approve another.
Every command from a principal gets Mother's reply (done, or the one-line error) on its own reply key.
"""

from __future__ import annotations

from typing import Any

import orjson

from mother import keys
from mother.budget import emergency_stop, override, reset_stop
from mother.client import COMMAND_CANCEL, GATE_COMMANDS, REPLY_TTL_SECONDS
from mother.errors import (
    GateRefused,
    InvalidSpec,
    MotherError,
    NotFound,
    PolicyViolation,
    RecordInvalid,
    RedisUnavailable,
)
from mother.gates.decide import decide
from mother.identities.rules import COMMAND_GRANTS
from mother.identities.streams import Source
from mother.identities.who import may_act_on, why_not
from mother.lifecycle import end_run
from mother.logs import get_logger
from mother.runtime import Runtime
from mother.streams import Delivery

__all__ = ["BUDGET_COMMANDS", "handle_command"]

log = get_logger("commands")
BUDGET_COMMANDS = ("budget_override", "budget_stop", "budget_reset")


def handle_command(
    rt: Runtime, delivery: Delivery, kind: Any, payload: dict[str, Any], source: Source
) -> None:
    """Take one command (or refuse it, changing nothing); reply where the sender waits."""
    try:
        actor = _actor(kind, payload, source)
        done = _apply(rt, str(kind), payload, actor, source, delivery)
        reply: dict[str, Any] | None = {"ok": True, **done} if done is not None else None
    # not the sender's doing: the entry stays pending, is tried again and dead-lettered
    except (RecordInvalid, RedisUnavailable):
        raise
    except MotherError as exc:
        reply = {"ok": False, **exc.to_dict()}
        run_id = payload.get("run_id")
        log.warning(
            "command_refused",
            entry_id=delivery.entry_id,
            stream=source.stream,
            run_id=run_id,
            error=exc.message,
        )
        rt.emit(
            rt.redis,
            "gate_decision_refused" if kind in GATE_COMMANDS else "command_refused",
            run_id=run_id if keys.is_id(run_id) else None,
            entry_id=source.ref(delivery.entry_id),
            decision=str(kind)[:64],
            actor=(source.principal.name if source.principal else str(payload.get("actor")))[:128],
            error=exc.message[:1000],
        )
    # Mother's own stream replies to gate and budget commands (the CLI waits on those); a principal
    # hears back on every command
    if reply is not None and (source.principal is not None or kind not in (COMMAND_CANCEL,)):
        send_reply(rt, source, delivery.entry_id, reply)


def send_reply(rt: Runtime, source: Source, entry_id: str, reply: dict[str, Any]) -> None:
    """Put Mother's reply to command ``entry_id`` where its sender waits (kept a short while)."""
    pipe = rt.redis.pipeline(transaction=True)
    key = source.reply_key(entry_id)
    pipe.rpush(key, orjson.dumps(reply))
    pipe.expire(key, REPLY_TTL_SECONDS)
    pipe.execute()


def failure_reply(exc: Exception, *, recorded: bool, run_id: str | None) -> dict[str, Any]:
    """The reply to a command Mother failed to apply (not a refusal: its own failure), so its sender
    hears at once instead of waiting out its timeout."""
    what = f"{type(exc).__name__}: {exc}"[:500]
    if recorded and run_id is not None:
        after = f"run {run_id} ended catastrophic_error (`mother status {run_id}`)"
    elif recorded:
        after = "nothing was changed"
    else:
        after = "the command stays queued and is tried again"
    return {
        "ok": False,
        "code": "mother_failed",
        "message": f"Mother failed applying it ({what}); {after}",
    }


def _actor(kind: Any, payload: dict[str, Any], source: Source) -> str:
    """Who acts: the principal whose stream it came by (granted the command), else the entry's word."""
    if source.origin != "principal":
        return str(payload.get("actor", "user"))[:128]
    principal = source.principal
    if principal is None:
        raise PolicyViolation(
            f"{source.stream} belongs to no principal any more; its commands are not taken"
        )
    grant = COMMAND_GRANTS.get(str(kind))
    if grant is None:
        raise InvalidSpec(
            f"unknown command {str(kind)[:64]!r}; one of {', '.join(COMMAND_GRANTS)}", field="type"
        )
    if not principal.may(grant):
        raise PolicyViolation(
            f"principal {principal.name} may not {kind} (its grants: {', '.join(principal.grants)}; "
            f"{kind} needs {grant})"
        )
    said = payload.get("actor")
    if said not in (None, "", principal.name):
        raise PolicyViolation(
            f"actor {str(said)[:128]!r} is not who sent this (principal {principal.name}): the "
            "actor is the principal; leave it out"
        )
    return principal.name


def _apply(
    rt: Runtime, kind: str, payload: dict[str, Any], actor: str, source: Source, delivery: Delivery
) -> dict[str, Any] | None:
    run_id = payload.get("run_id")
    if not isinstance(run_id, str) or not keys.is_id(run_id):
        raise InvalidSpec(f"{kind} names no valid run_id: {run_id!r}"[:300], field="run_id")
    if kind == COMMAND_CANCEL:
        return _cancel(rt, run_id, payload, actor, source, delivery)
    if kind in GATE_COMMANDS:
        _scoped(rt, run_id, kind, source)
        for field in ("gate_id", "digest"):
            if not isinstance(payload.get(field), str) or not payload[field]:
                raise GateRefused(
                    f"a {kind} must name the gate it decides and its digest ({field} is missing): "
                    f"`mother waiting` shows both for run {run_id}",
                    why="unnamed_gate",
                )
        return decide(
            rt,
            run_id,
            kind,
            actor=actor,
            reason=payload.get("reason", ""),
            gate_id=payload["gate_id"],
            digest=payload["digest"],
            answer=payload.get("text"),
            delivery=delivery,
        )
    if kind in BUDGET_COMMANDS:
        return _budget(rt, kind, run_id, payload, actor)
    raise InvalidSpec(f"unknown command {kind[:64]!r}", field="type")


def _scoped(rt: Runtime, run_id: str, kind: str, source: Source) -> Any:
    """The run a command acts on, when its principal may act on it (:func:`may_act_on`): else refused
    in one line, changing nothing. Mother's own stream acts on any run."""
    state = rt.load_run(run_id)
    if state is None:
        raise NotFound(f"no run {run_id!r}")
    principal = source.principal
    if principal is not None and not may_act_on(principal, state):
        refused = why_not(principal, state, kind)
        if kind in GATE_COMMANDS:
            raise GateRefused(refused, why="not_allowed")
        raise PolicyViolation(refused)
    return state


def _cancel(
    rt: Runtime,
    run_id: str,
    payload: dict[str, Any],
    actor: str,
    source: Source,
    delivery: Delivery,
) -> dict[str, Any]:
    state = _scoped(rt, run_id, COMMAND_CANCEL, source)
    if state.status == "terminated":
        return {"run_id": run_id, "status": "terminated", "reason": state.reason}
    reason = str(payload.get("reason", "cancelled by user"))[:1000]
    end_run(
        rt,
        state,
        "user_cancelled",
        f"Cancelled by {actor}: {reason}",
        contributing_factors=[f"cancel requested during phase {state.phase or 'intake'}"],
        delivery=delivery,
    )
    return {"run_id": run_id, "status": "cancelled", "actor": actor}


def _budget(
    rt: Runtime, kind: str, run_id: str, payload: dict[str, Any], actor: str
) -> dict[str, Any]:
    """An operator's budget command (a principal with ``operate``), done with Mother's rights."""
    maxlen = rt.settings.service.activity_maxlen
    reason = payload.get("reason", "")
    if kind == "budget_override":
        try:
            delta, expires = int(payload["delta"]), float(payload["expires_in_s"])
        except (KeyError, TypeError, ValueError):
            raise InvalidSpec(
                "budget_override needs dimension, delta (a whole number) and expires_in_s",
                field="delta",
            ) from None
        record = override(
            rt.redis,
            run_id,
            dimension=str(payload.get("dimension")),
            delta=delta,
            expires_in_s=expires,
            actor=actor,
            reason=reason,
            maxlen=maxlen,
        )
        return {"run_id": run_id, "override": record}
    act = emergency_stop if kind == "budget_stop" else reset_stop
    return {"run_id": run_id, "event": act(rt.redis, run_id, actor, reason, maxlen)}
