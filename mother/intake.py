"""Intake: turn a submission entry into a run, or record why not.

Entries come by three kinds of stream (:class:`mother.principals.Source`): a principal's own
(``mother:submissions:{name}``: the principal is who its ACL user proves it is, and the spec's user
must be it or one it acts for), Mother's (``mother:submissions``: service credentials), and the
workers' ``mother:spawns`` (only a spawn_run child of a run that has not ended, for the parent's user).
Whatever the path, intake decides on the server what no submitter can skip: the user's rate limit
(Mother's window and limit, ``rate_limited`` with retry_after), the queue's depth (``queue_full``),
and the run_id's claim (first come, in arrival order).

Idempotent by run_id: a re-delivered entry finds its own run and only makes sure
it started. An invalid or refused entry (no ``spec`` field, bad JSON, wrong fields, too
large, unknown model, a run_id already used, another user's run, past the rate limit) becomes
``rejection:{entry}`` with the error, its code and the time, an activity entry, and is acknowledged.
"""

from __future__ import annotations

import contextlib
import hashlib
from dataclasses import dataclass
from typing import Any

import orjson

from mother import calls, keys, telemetry
from mother.activity import flat_fields, make_event
from mother.budget import Admission, Guard, admission, admit, rate_check
from mother.capabilities import assess_risk, denial, granted_for, load_risk_policy
from mother.client import parse_spec
from mother.errors import (
    ConfigError,
    DepthExhausted,
    InsufficientBudget,
    InvalidSpec,
    LedgerError,
    RateLimited,
    SignatureInvalid,
)
from mother.functions import execute
from mother.identities.streams import Source
from mother.ledger import checked
from mother.lifecycle import end_run, start_run
from mother.limits import resolve_for_spec
from mother.logs import get_logger
from mother.records.rejections import write_rejection
from mother.roles import role_settings
from mother.runtime import Runtime
from mother.specs import check_libraries, check_spec
from mother.streams import Delivery
from schemas import MAX_SPEC_BYTES, SPAWNED_BY, HistoryEntry, RunSpec, RunState, TerminationReason
from schemas.rejection import Rejection

__all__ = ["handle_submission", "reject"]

log = get_logger("intake")
PREVIEW_CHARS = 500
# Mother's own submissions stream (service credentials)
SERVICE = Source(keys.SUBMISSIONS_STREAM, "submissions")


def handle_submission(
    rt: Runtime,
    entry_id: str,
    fields: dict[str, Any],
    *,
    delivery: Delivery | None = None,
    source: Source = SERVICE,
) -> RunState | None:
    """Validate and create the run (then start it); reject the entry otherwise. ``delivery``: the entry,
    acknowledged with the write that starts or ends the run; ``source``: the stream it came by."""
    spec = _read_spec(rt, entry_id, fields, source)
    if spec is None:
        return None
    refused = _refusal(rt, spec, source)
    if refused is not None:
        code, error, retry_after = refused
        reject(rt, entry_id, fields, error, source=source, code=code, retry_after=retry_after)
        _give_back(rt, spec, source)
        return None
    try:
        decision = _decide(rt, spec)
    except InvalidSpec as exc:
        reject(rt, entry_id, fields, exc.message, source=source)
        return None
    state = _create(rt, source, entry_id, spec, fields, decision.limits, decision.granted)
    # refused, or a re-delivery of a run already under way
    if state is None or state.status != "queued":
        return state
    if decision.verdict is not None:
        reason, details, factors = decision.verdict
        end_run(
            rt,
            state,
            reason,
            details,
            phase="intake",
            contributing_factors=factors,
            delivery=delivery,
        )
        return state
    _start_or_queue(rt, state, decision.limits, delivery)
    return state


def _read_spec(
    rt: Runtime, entry_id: str, fields: dict[str, Any], source: Source
) -> RunSpec | None:
    """The entry's spec, valid and named (``run-{entry}`` when it names no run_id, ``run-{principal}-{entry}``
    on a principal's stream: run ids hold no ``:``); None when the entry was rejected instead."""
    raw = fields.get("spec")
    if raw is None:
        reject(
            rt,
            entry_id,
            fields,
            f"the entry has no 'spec' field; use XADD {source.stream} '*' spec '<RunSpec JSON>'",
            source=source,
        )
        return None
    if len(raw) > MAX_SPEC_BYTES:
        reject(
            rt,
            entry_id,
            fields,
            f"spec is {len(raw)} bytes; the limit is {MAX_SPEC_BYTES} bytes",
            drop=True,
            source=source,
        )
        return None
    try:
        spec = parse_spec(raw)
        check_spec(rt.settings, spec)
        check_libraries(rt.redis, spec)
    except InvalidSpec as exc:
        reject(rt, entry_id, fields, exc.message, source=source)
        return None
    name = spec.run_id or f"run-{source.ref(entry_id).replace(':', '-')}"
    return spec.model_copy(update={"run_id": name})


# (rejection code, error, retry_after)
Refusal = tuple[str, str, float | None]


def _refusal(rt: Runtime, spec: RunSpec, source: Source) -> Refusal | None:
    """Why a valid spec may not become a run, decided here for every path: who sent it may not submit
    it (a principal for another user, a worker for no running parent), the user's rate window is full,
    or the queue is. None: go on."""
    who = _identity(rt, spec, source)
    if who is not None:
        return "identity_refused", who, None
    if source.origin == "spawn":
        # a spawn_run child is bounded by its parent's spawns and budget, not the user's rate
        return None
    try:
        rate_check(rt.redis, rt.settings, spec.user_id)
    except RateLimited as exc:
        return "rate_limited", exc.message, exc.retry_after
    if spec.parent_run_id is None:
        waiting = rt.redis.zcard(keys.ADMISSION_WAITING)
        most = rt.settings.budget.global_.max_queue_depth
        if waiting >= most:
            return (
                "queue_full",
                f"the submission queue is full ({waiting}/{most} runs waiting to start); try "
                "again later",
                None,
            )
    return None


def _identity(rt: Runtime, spec: RunSpec, source: Source) -> str | None:
    """Why the stream this spec came by may not submit it, or None."""
    if source.origin == "principal":
        principal = source.principal
        if principal is None:
            return (
                f"{source.stream} belongs to no principal any more; its submissions are not taken"
            )
        if not principal.may("submit"):
            return f"principal {principal.name} may not submit runs (its grants: {', '.join(principal.grants)})"
        if not principal.submits_for(spec.user_id):
            return (
                f"principal {principal.name} may not submit for user {spec.user_id}: it submits for "
                f"{', '.join([principal.name, *principal.acts_for])} (`mother principals add NAME "
                "--acts-for USER` makes a service that submits for its users)"
            )
    if spec.parent_run_id is None:
        if source.origin == "spawn":
            return f"{keys.SPAWNS_STREAM} takes only spawn_run children (parent_run_id is missing)"
        return None
    parent = rt.load_run(spec.parent_run_id)
    if source.origin == "service" and parent is None:
        # InvalidSpec from _parent, as ever
        return None
    if parent is None or (source.origin == "spawn" and parent.status == "terminated"):
        return f"parent run {spec.parent_run_id} does not exist or has ended"
    if parent.user_id != spec.user_id:
        return (
            f"a child run is its parent's user's: parent {parent.run_id} is {parent.user_id}'s, the "
            f"child names {spec.user_id}"
        )
    if source.principal is not None and not source.principal.submits_for(parent.user_id):
        return f"principal {source.principal.name} may not add runs under {parent.user_id}'s run {parent.run_id}"
    return None


def _give_back(rt: Runtime, spec: RunSpec, source: Source) -> None:
    """A spawn_run child refused here: its parent gets back the parallel_agents slot and the budget
    the tool took for it (the tool sees the rejection and says why)."""
    if source.origin != "spawn" or spec.parent_run_id is None or spec.run_id is None:
        return
    if spec.metadata.get(SPAWNED_BY) is None or not rt.redis.exists(keys.ledger_key(spec.run_id)):
        return
    parent = rt.load_run(spec.parent_run_id)
    if parent is not None:
        Guard(rt.redis, rt.settings, parent.run_id, parent.user_id, rt.clock.today).release(
            "parallel_agents"
        )
    with contextlib.suppress(LedgerError):
        rt.ledger.release(spec.run_id, "not_submitted")


@dataclass(frozen=True)
class _Decision:
    """What intake gives a run, decided before it is created: its resolved limits and capabilities,
    and why it must end at once (reason, details, factors), or None to go on."""

    limits: dict[str, Any]
    granted: list[str]
    verdict: tuple[TerminationReason, str, list[str]] | None = None


def _decide(rt: Runtime, spec: RunSpec) -> _Decision:
    """The run's limits, capabilities and verdict; InvalidSpec when its parent is no run or its
    limits cannot be resolved."""
    policy_error = _verify_roles(rt, spec)
    if policy_error:
        return _Decision({}, [], ("policyViolation", policy_error, [policy_error]))
    parent = _parent(rt, spec)
    depth_error: str | None = None
    try:
        limits = resolve_for_spec(rt.settings, spec, dict(parent.limits) if parent else None)
    except DepthExhausted as exc:
        limits, depth_error = {}, exc.message
    granted = granted_for(
        rt.settings, spec.pipeline[0].role, list(parent.capabilities) if parent else None
    )
    if depth_error:
        factors = [f"parent run {spec.parent_run_id} has no depth left"]
        return _Decision(limits, granted, ("budget_exhausted", depth_error, factors))
    blocked = _assess(rt, spec, granted)
    return _Decision(limits, granted, ("policyViolation", blocked[0], blocked) if blocked else None)


def _start_or_queue(
    rt: Runtime, state: RunState, limits: dict[str, Any], delivery: Delivery | None
) -> None:
    """Start the run now, or leave it queued until a slot frees (admit_waiting starts it)."""
    # not decided yet (a re-delivered entry keeps the first decision)
    if state.admission is None:
        admitted = _admit(rt, state, limits, delivery)
        # None: ended instead (a refused reservation or admission)
        if admitted is None:
            return
        if admitted.waiting:
            log.info("run_queued", run_id=state.run_id, position=admitted.position)
            return
    elif state.admission == "waiting":
        return
    start_run(rt, state, delivery=delivery)


def _admit(
    rt: Runtime, state: RunState, limits: dict[str, Any], delivery: Delivery | None
) -> Admission | None:
    """The ledger entry (a root's ceiling, or a child's reservation from its parent) and the admission
    decision, in one round trip for a root run. None when the run was ended instead (a refused
    reservation or admission)."""
    spec = state.spec
    run_id = state.run_id
    root = spec.parent_run_id is None
    pipe = rt.redis.pipeline(transaction=False)
    if root:
        rt.ledger.register(
            run_id, limits.get("spend", rt.settings.budget.per_run.max_spend_usd), pipe=pipe
        )
    else:
        # asked before admission counts the run
        refused = _reserve_for_child(rt, spec, limits)
        if refused:
            end_run(
                rt,
                state,
                "budget_exhausted",
                refused,
                phase="intake",
                contributing_factors=[refused],
                delivery=delivery,
            )
            return None
    maxlen = rt.settings.service.activity_maxlen
    admit(pipe, rt.settings, run_id, spec.user_id, rt.clock.today(), maxlen, child=not root)
    replies = execute(pipe)
    if root:
        checked(replies[-2])
    admitted = admission(
        rt.redis, rt.settings, run_id, spec.user_id, maxlen, replies[-1], child=not root
    )
    if not admitted.ok:
        end_run(
            rt,
            state,
            "budget_exhausted",
            admitted.details,
            phase="intake",
            contributing_factors=admitted.factors,
            delivery=delivery,
        )
        return None
    return admitted


def _reserve_for_child(rt: Runtime, spec: RunSpec, limits: dict[str, Any]) -> str | None:
    """A child without a reservation (a raw submission with parent_run_id, not via spawn_run)
    reserves its own from the parent. Returns a refusal, if any."""
    assert spec.run_id is not None and spec.parent_run_id is not None
    if rt.redis.exists(keys.ledger_key(spec.run_id)):
        return None
    try:
        rt.ledger.reserve(
            spec.run_id,
            limits.get("spend", rt.settings.budget.per_run.max_spend_usd),
            spec.parent_run_id,
        )
    except (InsufficientBudget, LedgerError) as exc:
        return exc.message
    return None


def _parent(rt: Runtime, spec: RunSpec) -> RunState | None:
    """The parent run (read once: its limits cap the child's, its token bounds the child's)."""
    if spec.parent_run_id is None:
        return None
    parent = rt.load_run(spec.parent_run_id)
    if parent is None:
        raise InvalidSpec(f"parent_run_id {spec.parent_run_id!r} names no run")
    return parent


def _verify_roles(rt: Runtime, spec: RunSpec) -> str | None:
    """Load every role the pipeline names (verifying signatures when required); the first failure."""
    for role in dict.fromkeys(p.role for p in spec.pipeline):
        try:
            role_settings(rt.settings, role)
        except (SignatureInvalid, ConfigError) as exc:
            return f"role {role}: {exc.message}"
    return None


# (role, warning) pairs already logged at warning level by this process
_RISK_WARNED: set[tuple[str, str]] = set()


def _assess(rt: Runtime, spec: RunSpec, granted: list[str]) -> list[str]:
    """Risk tiers, once at setup: blocked capabilities (ending the run) and logged warnings;
    the phases' models must be granted too."""
    role = role_settings(rt.settings, spec.pipeline[0].role)
    report = assess_risk(
        load_risk_policy(rt.settings.harness.capability_risk_file),
        granted,
        list(role.acknowledge) if role else [],
    )
    for warning in report.warnings:
        # the same grant warns the same way for every run of the role: logged once per role and
        # warning in this process (at debug after that)
        seen = (spec.pipeline[0].role, warning)
        if seen in _RISK_WARNED:
            log.debug("capability_risk", run_id=spec.run_id, warning=warning)
            continue
        _RISK_WARNED.add(seen)
        log.warning(
            "capability_risk",
            run_id=spec.run_id,
            role=spec.pipeline[0].role,
            warning=warning,
            note="logged once per role; later runs of it at debug",
        )
    blocked = list(report.blocked)
    for phase in spec.pipeline:
        denied = denial(granted, [f"model.{phase.model}"])
        if denied:
            blocked.append(
                f"phase {phase.name}: model {phase.model} is not among the role's capabilities "
                f"(missing {denied['detail']['missing'][0]})"
            )
    return blocked


def _create(
    rt: Runtime,
    source: Source,
    entry_id: str,
    spec: RunSpec,
    fields: dict[str, Any],
    limits: dict[str, Any],
    granted: list[str],
) -> RunState | None:
    """Create and announce ``run:{id}`` in one server call (``mh_create_run``): the run_id claimed for this
    entry, the record made (NX) and indexed, its ``run_submitted`` entry appended. Returns the run (the one
    made, or the existing one when this entry is re-delivered), or None when the run_id belongs to another
    submission (the entry is rejected)."""
    assert spec.run_id is not None
    score = rt.clock.now_ms()
    at = rt.clock.iso(score)
    stored = {k: (str(v) if k == "spend" else v) for k, v in limits.items()}
    ref = source.ref(entry_id)
    state = RunState(
        run_id=spec.run_id,
        user_id=spec.user_id,
        spec=spec,
        created_at=at,
        created_ms=score,
        updated_at=at,
        entry_id=ref,
        submitted_by=source.principal.name if source.principal is not None else None,
        limits=stored,
        capabilities=granted,
        history=[HistoryEntry(at=at, event="submitted", detail=f"entry {ref}")],
        trace=telemetry.new_trace() if telemetry.enabled(rt.settings) else None,
    )
    announced = make_event(
        "run_submitted",
        at=at,
        run_id=spec.run_id,
        user_id=spec.user_id,
        entry_id=ref,
        principal=state.submitted_by,
        phases=[p.name for p in spec.pipeline],
    )
    created = calls.create_run(
        rt.redis,
        run_id=spec.run_id,
        user_id=spec.user_id,
        entry_id=ref,
        record=state.to_json(),
        created_ms=score,
        activity_maxlen=rt.settings.service.activity_maxlen,
        announced=flat_fields(announced),
    )
    if created != 1:
        existing = rt.load_run(spec.run_id) if created == 0 else None
        if existing is None or existing.entry_id != ref:
            reject(
                rt,
                entry_id,
                fields,
                f"run_id {spec.run_id!r} is already used by another submission",
                source=source,
            )
            return None
        # a re-delivery of the entry that created it
        state = existing
    else:
        # from the submission's entry (its id is the server's time) to the run's record
        with telemetry.span(
            rt.settings,
            state.trace,
            "intake",
            {"mother.run_id": spec.run_id, "mother.entry_id": ref},
            start_ms=_entry_ms(entry_id, score),
        ):
            pass
    rt.remember_spec(spec.run_id, state.spec)
    return state


def _entry_ms(entry_id: str, fallback: int) -> int:
    """When a stream entry was appended: its id's first part (the server's ms)."""
    head = entry_id.split("-", 1)[0]
    return int(head) if head.isdigit() else fallback


def reject(
    rt: Runtime,
    entry_id: str,
    fields: dict[str, Any],
    error: str,
    *,
    drop: bool = False,
    source: Source = SERVICE,
    code: str = "invalid_spec",
    retry_after: float | None = None,
) -> None:
    """Record why the entry was refused (``rejection:{entry}``, the entry named across streams); with
    ``drop`` also delete its (oversized) payload."""
    raw = str(fields.get("spec", ""))
    guess = _guess_ids(raw)
    at_ms = rt.clock.now_ms()
    ref = source.ref(entry_id)
    party = source.principal.name if source.principal is not None else None
    if party is not None and _counted(rt, party, code, error, guess.get("run_id"), at_ms):
        if drop:
            rt.redis.xdel(source.stream, entry_id)
        log.debug("submission_rejected_counted", entry_id=ref, code=code, principal=party)
        return
    rejection = Rejection(
        entry_id=ref,
        error=error,
        code=code,  # type: ignore[arg-type]
        retry_after=retry_after,
        principal=source.principal.name if source.principal is not None else None,
        at=rt.clock.iso(at_ms),
        size_bytes=len(raw),
        preview=raw[:PREVIEW_CHARS],
        run_id=guess.get("run_id"),
        user_id=guess.get("user_id"),
    )
    pipe = rt.redis.pipeline(transaction=False)
    write_rejection(pipe, rejection, at_ms)
    if party is not None:
        pipe.zadd(keys.party_rejections_key(party), {ref: at_ms})
    rt.emit(
        pipe,
        "run_rejected",
        run_id=guess.get("run_id"),
        entry_id=ref,
        code=code,
        principal=rejection.principal,
        error=error[:1000],
    )
    if drop:
        pipe.xdel(source.stream, entry_id)
    pipe.execute()
    log.warning("submission_rejected", entry_id=ref, code=code, error=error)


def _counted(
    rt: Runtime, party: str, code: str, error: str, run_id: str | None, at_ms: int
) -> bool:
    """Whether a principal's refused submission is counted instead of stored (one round trip to
    decide): junk naming no run that repeats an error the party already has a record of, or any
    refusal past ``service.max_rejections_per_party`` records within the retention. A party that
    floods its own stream then costs Redis a counter, not a record (and an activity entry) each."""
    signature = f"{code}|{hashlib.sha256(error.encode()).hexdigest()[:16]}"
    kept = keys.party_rejections_key(party)
    counted = keys.party_refusals_key(party)
    retention_ms = int(rt.settings.service.rejection_retention_seconds * 1000)
    pipe = rt.redis.pipeline(transaction=False)
    pipe.zremrangebyscore(kept, "-inf", at_ms - retention_ms)
    pipe.zcard(kept)
    pipe.hexists(counted, signature)
    _, stored, seen = pipe.execute()
    repeat = run_id is None and bool(seen)
    full = int(stored) >= rt.settings.service.max_rejections_per_party
    pipe = rt.redis.pipeline(transaction=False)
    if repeat or full:
        pipe.hincrby(counted, signature if repeat else "dropped", 1)
    else:
        pipe.hsetnx(counted, signature, 0)
        pipe.hsetnx(counted, f"{signature}|said", error[:300])
    pipe.pexpire(counted, max(retention_ms, 1000))
    pipe.execute()
    return repeat or full


def _guess_ids(raw: str) -> dict[str, str]:
    """run_id / user_id from a rejected spec when they are readable and valid, for lookups."""
    if len(raw) > MAX_SPEC_BYTES:
        return {}
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return {}
    found = {}
    if isinstance(data, dict):
        for name in ("run_id", "user_id"):
            value = data.get(name)
            if isinstance(value, str):
                with contextlib.suppress(InvalidSpec):
                    found[name] = keys.check_id(value, name)
    return found
