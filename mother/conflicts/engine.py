"""Conflict resolution: Mother detects a disagreement in a phase's result (:mod:`mother.conflicts.detect`),
records it (``conflict:{id}``), and applies the policy's strategies in order until one succeeds
(``conflicts.policy``, default the spec's table):

    strategy                   what it does                                           succeeds when
    prefer_higher_confidence   picks the side with the highest confidence             one side is strictly highest
    prefer_higher_evidence     picks the side with the most evidence (citations, ...)  one side is strictly highest
    run_arbiter                runs the arbiter role (conflicts.arbiter_role) as the   the arbiter accepts the work
                               reviewing phase's next attempt, on conflicts.arbiter_   (for proposals: names a winner)
                               model (default: the phase model's escalate_to)
    escalate_model             re-runs the work on its model's escalate_to; a          the review of the new work
                               reviewed work is then reviewed again                    accepts it (or the new output
                                                                                      no longer raises the conflict)
    request_user_input         the run waits for a person (an input gate)             the person approves or answers
    fail_safe                  the lowest-risk option: reject the work                always (the run ends
                                                                                      conflicting_agents)
    terminate_blocked          stop: the run ends blocked (insufficient_evidence for  always (unresolved)
                               evidence_contradiction and retrieval_ambiguity)

An extra attempt (arbiter, escalation, second review) is the reviewing phase's next attempt with a
:class:`schemas.Detour` on the run; it is charged to the run's budget like any phase, and its result
comes back here. When every strategy fails the run ends ``conflicting_agents``. Accepted work moves the
run on (the next phase, or success); rejected work ends it ``conflicting_agents``; a person's denial
``approval_denied``. Every step is in the record and the activity stream, and the decision is a note
every later phase's context and the termination record carry.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from mother.capabilities import denial
from mother.conflicts.detect import FINDINGS, Found, detect, may_conflict, party
from mother.gates.build import conflict_gate
from mother.lifecycle import Move, completed_event, end_run, is_current, make, outputs_of
from mother.logs import get_logger
from mother.records import conflicts as records
from mother.records import runs
from mother.records.metrics import queue_count
from mother.records.runs import attempt_view
from mother.review import Outcome, Review, State, end_success
from mother.runtime import Runtime
from mother.streams import Delivery
from schemas import PhaseResult, RunState, TerminationReason
from schemas.conflict import (
    ConflictResolution,
    ConflictStrategy,
    Detour,
    FinalDecision,
    PartyOutput,
    StrategyStep,
)
from schemas.gate import Gate, GateDecision

__all__ = ["Ctx", "on_gate_decision", "review_hook"]

log = get_logger("conflicts")

# the conflicts whose terminate_blocked ends the run insufficient_evidence (else blocked)
EVIDENCE_TYPES = ("evidence_contradiction", "retrieval_ambiguity")
# the conflicts about a reviewer's verdict on work: an escalated work is reviewed again
REVIEW_TYPES = ("critic_vs_coder", "test_vs_review")


@dataclass
class Ctx:
    """One conflict being worked on: the run as read (its spec the pipeline's), the record, the newest
    result of the conflict (the one that raised it, or a strategy's), where the run is, and how the
    next move is made (the host the result came from; the handled entry; a person's gate decision)."""

    rt: Runtime
    state: RunState
    conflict: ConflictResolution
    result: PhaseResult
    position: tuple[int, int]
    host: str = ""
    delivery: Delivery | None = None
    close: str = ""
    decided: GateDecision | None = None
    opened: bool = False
    # closed by this decision (its resolution is counted with the write)
    closed: bool = False
    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    @property
    def run_id(self) -> str:
        return self.state.run_id

    def step(self, strategy: ConflictStrategy, outcome: str, detail: str) -> None:
        at = self.rt.clock.now_iso()
        self.conflict.steps.append(
            StrategyStep.model_validate(
                {"strategy": strategy, "outcome": outcome, "detail": detail[:4000], "at": at}
            )
        )
        self.conflict.strategy_applied = strategy
        self.events.append(
            (
                "conflict_strategy_applied",
                self._fields(strategy=strategy, outcome=outcome, detail=detail[:1000]),
            )
        )

    def _fields(self, **more: Any) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "phase": self.conflict.phase,
            "conflict_id": self.conflict.conflict_id,
            "conflict_type": self.conflict.conflict_type,
            **more,
        }


@dataclass(frozen=True)
class Resolved:
    """A strategy settled the conflict (``accepted`` is the result phase ``r`` is accepted with)."""

    decision: FinalDecision
    winner: str | None
    rationale: str
    accepted: PhaseResult | None = None


@dataclass(frozen=True)
class Failed:
    why: str


@dataclass(frozen=True)
class Act:
    """A strategy that moves the run (an extra attempt, a gate): ``move`` returns whether it applied."""

    detail: str
    move: Callable[[], bool]


Tried = Resolved | Failed | Act


# -- the way in ----------------------------------------------------------------------------------------


def review_hook(rt: Runtime, outcome: Outcome, review: Review) -> Review | None:
    """Mother's review hook (:func:`mother.conflicts.install`): a strategy's attempt's result goes back
    to its conflict; a completed result that raises a conflict opens one. None: nothing to do here."""
    result = outcome.result
    if review.state not in (State.ADVANCE, State.SUCCEED, State.RETRY, State.EXHAUST):
        return None
    # a strategy's attempt is never a phase's first
    detour_possible = result.attempt > 1
    if result.status == "failed" and not detour_possible:
        return None
    if (
        result.status == "completed"
        and not detour_possible
        and not may_conflict(rt.settings, outcome.spec, result)
    ):
        return None
    state = outcome.state or rt.load_run(result.run_id)
    if state is None or not is_current(state, result.phase_index, result.attempt):
        return Review(State.STALE)
    if state.host != outcome.host:
        return Review(State.REFUSED)
    if state.detour is not None:
        return _strategy_result(rt, outcome, state, review)
    if result.status == "failed":
        return None
    found = detect(rt.settings, state, result)
    if found is None:
        return None
    _open(rt, outcome, state, found)
    return Review(State.HANDLED)


def _open(rt: Runtime, outcome: Outcome, state: RunState, found: Found) -> None:
    result = outcome.result
    r, a = result.phase_index, result.attempt
    now = rt.clock.now_ms()
    work = state.spec.pipeline[found.work_index].name if found.work_index is not None else None
    conflict = ConflictResolution.model_validate(
        {
            "conflict_id": _conflict_id(state.run_id, r, a),
            "run_id": state.run_id,
            "conflict_type": found.kind,
            "agents_involved": list(dict.fromkeys(p.agent_id for p in found.parties)),
            "their_outputs": [p.to_dict() for p in found.parties],
            "detected_at": rt.clock.iso(now),
            "detected_ms": now,
            "phase": result.phase,
            "phase_index": r,
            "work_phase": work,
            "policy": list(rt.settings.conflicts.policy[found.kind]),
        }
    )
    ctx = Ctx(rt, state, conflict, result, (r, a), outcome.host, outcome.delivery, opened=True)
    # the attempt that raised it ended (its time and cost on the run's timeline), then the conflict
    kind, fields = completed_event(result)
    ctx.events.append((kind, {**fields, "raised_conflict": conflict.conflict_id}))
    ctx.events.append(
        (
            "conflict_detected",
            ctx._fields(
                agents=conflict.agents_involved,
                sides=[f"{p.agent_id}:{p.stance}:{p.confidence:.2f}" for p in found.parties],
            ),
        )
    )
    log.info(
        "conflict_detected",
        run_id=state.run_id,
        conflict_id=conflict.conflict_id,
        conflict_type=found.kind,
    )
    if len(state.conflicts) >= rt.settings.conflicts.max_conflicts_per_run:
        _unresolved(
            ctx,
            why=f"the run raised {len(state.conflicts)} conflicts already "
            "(conflicts.max_conflicts_per_run): none more is resolved",
            strategy="terminate_blocked",
        )
        return
    _step(ctx)


def _conflict_id(run_id: str, index: int, attempt: int) -> str:
    """Derived from where it was raised: handling the same result again finds the same conflict."""
    return "cf-" + hashlib.sha256(f"{run_id}\0{index}\0{attempt}".encode()).hexdigest()[:24]


# -- the strategies ------------------------------------------------------------------------------------


def _step(ctx: Ctx) -> None:
    """Try the policy's strategies from the next one on, until one settles the conflict or moves the run."""
    conflict = ctx.conflict
    while conflict.next_strategy < len(conflict.policy):
        name = conflict.policy[conflict.next_strategy]
        conflict.next_strategy += 1
        tried = STRATEGIES[name](ctx)
        if isinstance(tried, Failed):
            ctx.step(name, "failed", tried.why)
            continue
        if isinstance(tried, Resolved):
            ctx.step(name, "resolved", tried.rationale)
            _finish(ctx, name, tried)
            return
        ctx.step(name, "pending", tried.detail)
        if not tried.move():
            log.info("conflict_move_not_applied", run_id=ctx.run_id, strategy=name)
        return
    _unresolved(ctx)


def agent_of(side: PartyOutput) -> str:
    """The agent behind a side: its role, and the model it ran on (``role@model``)."""
    return f"{side.agent_id}@{side.model}" if side.model else side.agent_id


def _top(parties: list[PartyOutput], key: Callable[[PartyOutput], float]) -> PartyOutput | None:
    if len(parties) < 2:
        return None
    ranked = sorted(parties, key=key, reverse=True)
    return ranked[0] if key(ranked[0]) > key(ranked[1]) else None


def _prefer(ctx: Ctx, what: str, key: Callable[[PartyOutput], float]) -> Tried:
    parties = ctx.conflict.their_outputs
    winner = _top(parties, key)
    if winner is None:
        return Failed(
            f"no side has the strictly highest {what}"
            if len(parties) > 1
            else f"one side only: nothing to compare its {what} with"
        )
    shown = ", ".join(f"{p.agent_id} {key(p):g}" for p in parties)
    decision: FinalDecision = "rejected" if winner.stance == "reject" else "accepted"
    return Resolved(
        decision,
        agent_of(winner),
        f"{winner.agent_id} has the highest {what} ({shown})",
        _result_of(ctx, winner),
    )


def prefer_higher_confidence(ctx: Ctx) -> Tried:
    return _prefer(ctx, "confidence", lambda p: p.confidence)


def prefer_higher_evidence(ctx: Ctx) -> Tried:
    return _prefer(ctx, "evidence", lambda p: float(p.evidence_count))


def run_arbiter(ctx: Ctx) -> Tried:
    rt, spec = ctx.rt, ctx.state.spec
    r = ctx.position[0]
    reviewing = spec.pipeline[r]
    candidates = (
        [rt.settings.conflicts.arbiter_model]
        if rt.settings.conflicts.arbiter_model
        else [rt.settings.models[reviewing.model].escalate_to, reviewing.model]
    )
    model = next((m for m in candidates if m is not None and _may_use(ctx, m)), None)
    if model is None:
        return Failed(f"no arbiter model among the run's capabilities ({candidates})")
    role = rt.settings.conflicts.arbiter_role
    proposals = ctx.conflict.conflict_type == "competing_proposals"
    ask = (
        "Choose the best proposal: end with a line 'WINNER: <phase name>' and 'VERDICT: ACCEPT' (or "
        "'VERDICT: REJECT' when none is acceptable)."
        if proposals
        else "Decide whether the work should be accepted: end with a line 'VERDICT: ACCEPT' or "
        "'VERDICT: REJECT'."
    )
    detour = Detour(
        conflict_id=ctx.conflict.conflict_id,
        kind="arbiter",
        name=f"{reviewing.name}.arbiter"[:128],
        role=role,
        model=model,
        for_phase=r,
        reviews=ctx.conflict.work_phase or reviewing.name,
        instructions=f"You arbitrate a conflict ({ctx.conflict.conflict_type}). {_sides(ctx)}\n{ask}",
    )
    return Act(
        f"the arbiter ({role} on {model}) decides",
        lambda: _detour(ctx, detour, outputs_of(ctx.state)[:r]),
    )


def escalate_model(ctx: Ctx) -> Tried:
    rt, spec = ctx.rt, ctx.state.spec
    r = ctx.position[0]
    w = _work_index(ctx)
    work_phase = spec.pipeline[w]
    source = _work_result(ctx, w)
    ran_on = (
        source.manifest.model
        if source is not None and source.manifest is not None
        else work_phase.model
    )
    larger = rt.settings.models[ran_on].escalate_to if ran_on in rt.settings.models else None
    if larger is None:
        return Failed(f"model {ran_on} has no escalate_to in the catalogue")
    if not _may_use(ctx, larger):
        return Failed(
            f"escalation to {larger} is not among the run's capabilities (model.{larger})"
        )
    feedback = _feedback(ctx)
    detour = Detour(
        conflict_id=ctx.conflict.conflict_id,
        kind="escalation",
        name=work_phase.name,
        role=work_phase.role,
        model=larger,
        for_phase=w,
        instructions=(work_phase.exit_criteria + "\n" if work_phase.exit_criteria else "")
        + feedback,
    )
    return Act(
        f"{work_phase.role} runs again on {larger} (was {ran_on})",
        lambda: _detour(ctx, detour, outputs_of(ctx.state)[:w] if w < r else None),
    )


def request_user_input(ctx: Ctx) -> Tried:
    r, a = ctx.position
    gate = conflict_gate(ctx.rt.settings, ctx.state.spec, r, a, ctx.conflict)
    return Act(
        f"asks a person (gate {gate.gate_id}, deadline in {gate.timeout_ms // 1000}s)",
        lambda: _wait(ctx, gate),
    )


def fail_safe(ctx: Ctx) -> Tried:
    return Resolved("rejected", None, "fail_safe: the lowest-risk option is to reject the work")


def terminate_blocked(ctx: Ctx) -> Tried:
    return Resolved(
        "blocked",
        None,
        "terminate_blocked: the conflict cannot be resolved here; the run stops for investigation",
    )


STRATEGIES: dict[str, Callable[[Ctx], Tried]] = {
    "prefer_higher_confidence": prefer_higher_confidence,
    "prefer_higher_evidence": prefer_higher_evidence,
    "run_arbiter": run_arbiter,
    "escalate_model": escalate_model,
    "request_user_input": request_user_input,
    "fail_safe": fail_safe,
    "terminate_blocked": terminate_blocked,
}


# -- a strategy's attempt comes back -------------------------------------------------------------------


def _strategy_result(
    rt: Runtime, outcome: Outcome, state: RunState, review: Review
) -> Review | None:
    detour = state.detour
    assert detour is not None
    result = outcome.result
    # a budget, policy or hook ending is the run's, whatever attempt it came from
    if result.status == "failed" and review.state == State.END:
        return None
    conflict = records.read_conflict(rt.redis, detour.conflict_id)
    if conflict is None:
        log.error("conflict_missing", run_id=state.run_id, conflict_id=detour.conflict_id)
        return None
    ctx = Ctx(
        rt,
        state,
        conflict,
        result,
        (result.phase_index, result.attempt),
        outcome.host,
        outcome.delivery,
    )
    strategy: ConflictStrategy = "run_arbiter" if detour.kind == "arbiter" else "escalate_model"
    if result.status == "failed":
        ctx.step(
            strategy, "failed", f"the {detour.kind} attempt failed: {result.error or ''}"[:1000]
        )
        _step(ctx)
        return Review(State.HANDLED)
    me = party(result, detour.role)
    conflict.their_outputs.append(me)
    if me.agent_id not in conflict.agents_involved:
        conflict.agents_involved.append(me.agent_id)
    judged = _judge(ctx, detour)
    if isinstance(judged, Failed):
        ctx.step(strategy, "failed", judged.why)
        _step(ctx)
    elif isinstance(judged, Resolved):
        ctx.step(strategy, "resolved", judged.rationale)
        _finish(ctx, strategy, judged)
    else:
        ctx.step(strategy, "pending", judged.detail)
        judged.move()
    return Review(State.HANDLED)


def _judge(ctx: Ctx, detour: Detour) -> Tried:
    """What a strategy's attempt decided: an arbiter's verdict, an escalated work's outcome, a second
    review's verdict."""
    result, kind = ctx.result, ctx.conflict.conflict_type
    verdict = result.verdict
    if detour.kind in ("arbiter", "review_again"):
        who = f"the {'arbiter' if detour.kind == 'arbiter' else 'second review'} ({detour.role} on {detour.model})"
        if verdict is None or verdict.decision != "accept":
            return Failed(f"{who} rejected the work too")
        if kind == "competing_proposals":
            proposals = {p.phase: p for p in ctx.conflict.their_outputs if p.stance == "proposal"}
            chosen = proposals.get(verdict.winner or "")
            if chosen is None:
                return Failed(f"{who} named no proposal ({sorted(proposals)}) as the winner")
            return Resolved(
                "accepted",
                agent_of(chosen),
                f"{who} chose the proposal of phase {verdict.winner} (confidence {verdict.confidence:.2f})",
                _proposal(ctx, chosen),
            )
        winner = _work_agent(ctx)
        return Resolved(
            "accepted",
            winner,
            f"{who} accepted the work of {winner} (confidence {verdict.confidence:.2f})",
            result if kind in REVIEW_TYPES else ctx.state.pending_result,
        )
    # an escalated re-run of the work
    if kind in REVIEW_TYPES and _work_index(ctx) == ctx.position[0]:
        # nothing apart to review again (a lone test or review phase): its own verdict decides
        if verdict is not None and verdict.decision == "accept":
            return Resolved(
                "accepted",
                f"{detour.role}@{detour.model}",
                f"{detour.role} on {detour.model} accepted on the larger model",
                result,
            )
        return Failed(f"{detour.role} on {detour.model} rejected again")
    if kind in REVIEW_TYPES:
        r = ctx.position[0]
        reviewing = ctx.state.spec.pipeline[r]
        again = Detour(
            conflict_id=ctx.conflict.conflict_id,
            kind="review_again",
            name=reviewing.name,
            role=reviewing.role,
            model=reviewing.model,
            for_phase=r,
        )
        w = _work_index(ctx)
        outputs = outputs_of(ctx.state)[:r]
        outputs[w] = (ctx.state.spec.pipeline[w].name, result.output)
        return Act(
            f"{reviewing.role} reviews the escalated work of {detour.role} on {detour.model}",
            lambda: _detour(ctx, again, outputs, replace=(w, result)),
        )
    if kind == "low_confidence_output":
        threshold = ctx.rt.settings.conflicts.low_confidence_threshold
        if result.confidence >= threshold:
            return Resolved(
                "accepted",
                f"{detour.role}@{detour.model}",
                f"{detour.role} on {detour.model} reached confidence {result.confidence:.2f} "
                f"(threshold {threshold:g})",
                result,
            )
        return Failed(
            f"{detour.role} on {detour.model} reached only {result.confidence:.2f} "
            f"(threshold {threshold:g})"
        )
    finding = next((f for f, t in FINDINGS.items() if t == kind), None)
    if finding is not None and finding in result.findings:
        return Failed(f"{detour.role} on {detour.model} still reports {finding}")
    return Resolved(
        "accepted",
        f"{detour.role}@{detour.model}",
        f"{detour.role} on {detour.model} produced an output without the conflict",
        result,
    )


# -- a person's decision (mother.gates.decide) ----------------------------------------------------------


def on_gate_decision(
    rt: Runtime,
    state: RunState,
    gate: Gate,
    decision: GateDecision,
    close: str,
    delivery: Delivery | None = None,
) -> None:
    """A person decided a conflict's input gate (or its deadline passed): approve or answer accepts the
    work and moves the run on; deny ends it approval_denied; expire ends it blocked, unresolved."""
    assert gate.conflict_id is not None
    conflict = records.read_conflict(rt.redis, gate.conflict_id)
    if conflict is None:
        log.error("conflict_missing", run_id=state.run_id, conflict_id=gate.conflict_id)
        raise RuntimeError(f"conflict {gate.conflict_id} of gate {gate.gate_id} has no record")
    result = state.pending_result or (state.results[-1] if state.results else None)
    if result is None:
        raise RuntimeError(f"run {state.run_id} waits on a conflict with no result to decide")
    ctx = Ctx(
        rt,
        state,
        conflict,
        result,
        (state.phase_index, state.attempt),
        delivery=delivery,
        close=close,
        decided=decision,
    )
    said = decision.answer or decision.reason
    if decision.decision == "expire":
        ctx.step("request_user_input", "failed", "nobody decided before the gate's deadline")
        # the policy goes on (terminate_blocked after it, say); with nothing left, blocked
        if conflict.next_strategy < len(conflict.policy):
            _step(ctx)
        else:
            _unresolved(ctx, reason="blocked", why=f"gate {gate.gate_id}'s deadline passed")
        return
    if decision.decision == "deny":
        ctx.step("request_user_input", "resolved", f"{decision.actor} denied: {said}")
        _finish(
            ctx,
            "request_user_input",
            Resolved("rejected", None, f"{decision.actor} denied the work: {said}"),
        )
        return
    verb = "answered" if decision.decision == "answer" else "approved"
    ctx.step("request_user_input", "resolved", f"{decision.actor} {verb}: {said}")
    # what the person approved is the work: a reviewer's rejection is overruled, the work carries on
    approved = (
        _work_result(ctx, _work_index(ctx))
        if conflict.conflict_type in REVIEW_TYPES and _work_index(ctx) < ctx.position[0]
        else result
    )
    _finish(
        ctx,
        "request_user_input",
        Resolved(
            "accepted",
            _agent_of_result(ctx, approved) if approved is not None else None,
            f"{decision.actor} {verb}: {said}",
            approved or result,
        ),
    )


# -- acting on the outcome -----------------------------------------------------------------------------


def _finish(ctx: Ctx, strategy: ConflictStrategy, resolved: Resolved) -> None:
    conflict = ctx.conflict
    _close(ctx, strategy, resolved.decision, resolved.winner, resolved.rationale, settled=True)
    note = _note(conflict)
    if resolved.decision == "accepted":
        _accept(ctx, resolved.accepted or ctx.result, note)
    elif resolved.decision == "rejected":
        by_person = ctx.decided is not None and ctx.decided.decision == "deny"
        _end(
            ctx,
            "approval_denied" if by_person else "conflicting_agents",
            f"Conflict {conflict.conflict_type} in phase {conflict.phase}: {resolved.rationale}",
            note,
        )
    else:
        reason: TerminationReason = (
            "insufficient_evidence" if conflict.conflict_type in EVIDENCE_TYPES else "blocked"
        )
        _end(
            ctx,
            reason,
            f"Conflict {conflict.conflict_type} in phase {conflict.phase}: {resolved.rationale}",
            _note(conflict),
        )


def _unresolved(
    ctx: Ctx,
    *,
    reason: TerminationReason = "conflicting_agents",
    why: str = "",
    strategy: ConflictStrategy | None = None,
) -> None:
    """End the run on a conflict no strategy settled; ``strategy``: what was applied instead of the
    policy (terminate_blocked, past conflicts.max_conflicts_per_run)."""
    conflict = ctx.conflict
    tried = ", ".join(dict.fromkeys(s.strategy for s in conflict.steps)) or "none"
    rationale = why or f"no strategy resolved it (tried: {tried})"
    if strategy is not None:
        ctx.step(strategy, "resolved", rationale)
    _close(ctx, strategy or conflict.strategy_applied, "blocked", None, rationale, settled=False)
    _end(
        ctx,
        reason,
        f"Conflict {conflict.conflict_type} in phase {conflict.phase}: {rationale}",
        _note(conflict),
    )


def _close(
    ctx: Ctx,
    strategy: ConflictStrategy | None,
    decision: FinalDecision,
    winner: str | None,
    rationale: str,
    *,
    settled: bool,
) -> None:
    conflict = ctx.conflict
    now = ctx.rt.clock.now_ms()
    conflict.strategy_applied = strategy
    conflict.winner_agent = winner
    conflict.rationale = rationale[:4000]
    conflict.resolution_successful = settled and decision in ("accepted", "rejected")
    conflict.final_decision = decision
    conflict.resolved_at = ctx.rt.clock.iso(now)
    conflict.resolution_duration_ms = max(0, now - conflict.detected_ms)
    conflict.status = "closed"
    ctx.closed = True
    ctx.events.append(
        (
            "conflict_resolved",
            ctx._fields(
                strategy=strategy,
                decision=decision,
                winner=winner,
                successful=conflict.resolution_successful,
                duration_ms=conflict.resolution_duration_ms,
            ),
        )
    )
    log.info(
        "conflict_closed",
        run_id=ctx.run_id,
        conflict_id=conflict.conflict_id,
        strategy=strategy,
        decision=decision,
    )


def _note(conflict: ConflictResolution) -> str:
    return (
        f"conflict {conflict.conflict_id} ({conflict.conflict_type}): "
        f"{conflict.strategy_applied or 'nothing'} -> {conflict.final_decision}: {conflict.rationale}"
    )[:1000]


def _new_artifacts(state: RunState, artifacts: list[str]) -> list[str]:
    """Of ``artifacts``, those not yet among the run's superseded ones."""
    return [a for a in dict.fromkeys(artifacts) if a not in state.superseded_artifacts]


def _record_writes(ctx: Ctx, pipe: Any, *, note: str | None = None) -> None:
    """The conflict's record, its id on the run (once), and a note, queued on ``pipe``."""
    records.queue_write(pipe, ctx.conflict)
    if ctx.opened and ctx.conflict.conflict_id not in ctx.state.conflicts:
        runs.queue_conflict_id(pipe, ctx.run_id, ctx.conflict.conflict_id)
        queue_count(pipe, "conflicts", ctx.conflict.conflict_type)
        # the output that raised it (a rejecting review) is kept with the run, whoever wins
        runs.queue_superseded(pipe, ctx.run_id, _new_artifacts(ctx.state, ctx.result.artifacts))
    if ctx.closed:
        conflict = ctx.conflict
        queue_count(
            pipe,
            "conflict_resolutions",
            conflict.conflict_type,
            conflict.strategy_applied or "none",
            conflict.final_decision or "none",
        )
    if note is not None:
        runs.queue_note(pipe, ctx.run_id, note)
        if ctx.decided is not None and ctx.decided.decision == "answer" and ctx.decided.answer:
            runs.queue_note(pipe, ctx.run_id, _answer_note(ctx.decided))


def _answer_note(decided: GateDecision) -> str:
    return f"answer from {decided.actor}: {decided.answer}"[:110_000]


def _new_notes(ctx: Ctx, note: str) -> list[str]:
    added = [note]
    if ctx.decided is not None and ctx.decided.decision == "answer" and ctx.decided.answer:
        added.append(_answer_note(ctx.decided))
    return [*ctx.state.notes, *added]


def _accept(ctx: Ctx, accepted: PhaseResult, note: str) -> None:
    """The work is accepted: phase ``r``'s result is ``accepted`` (under the phase's own name) and the
    run moves on: the next phase, or success."""
    rt, state = ctx.rt, ctx.state
    spec = state.spec
    r, a = ctx.position
    own = accepted.model_copy(update={"phase": spec.pipeline[r].name, "phase_index": r})

    def also(pipe: Any) -> None:
        _record_writes(ctx, pipe, note=note)
        runs.queue_pending_result(pipe, ctx.run_id, None)
        runs.queue_detour(pipe, ctx.run_id, None)

    notes = _new_notes(ctx, note)
    rt.forget(ctx.run_id)
    rt.remember_notes(ctx.run_id, notes)
    if r + 1 < len(spec.pipeline):
        make(
            rt,
            Move(
                ctx.run_id,
                spec,
                frm=(r, a),
                to=(r + 1, 1),
                event="phase_completed",
                detail=f"conflict {ctx.conflict.conflict_id} settled: accepted",
                result=own,
                outputs=[*outputs_of(state)[:r], (own.phase, own.output)],
                activity=[*ctx.events, completed_event(own)],
                also=also,
                host=ctx.host,
                delivery=ctx.delivery,
                close=ctx.close,
            ),
        )
        return
    done = make(
        rt,
        Move(
            ctx.run_id,
            spec,
            frm=(r, a),
            to=(r, a),
            event="phase_completed",
            detail=f"conflict {ctx.conflict.conflict_id} settled: accepted",
            result=own,
            also=also,
            host=ctx.host,
            close=ctx.close,
            then="stay",
        ),
    ).state
    if done is None:
        log.info(
            "conflict_move_not_applied", run_id=ctx.run_id, conflict_id=ctx.conflict.conflict_id
        )
        return
    rt.forget(ctx.run_id)
    end_success(rt, done, own.phase, [*ctx.events, completed_event(own)], ctx.delivery)


def _end(ctx: Ctx, reason: TerminationReason, details: str, note: str) -> None:
    """The run ends: the conflict's record and note first (with a person's gate decision, after the end,
    which may be refused: the run no longer waits on that gate)."""
    rt, state = ctx.rt, ctx.state

    def write() -> None:
        pipe = rt.redis.pipeline(transaction=True)
        _record_writes(ctx, pipe, note=note)
        pipe.execute()

    if not ctx.close:
        write()
    ended = state.model_copy(update={"notes": _new_notes(ctx, note)})
    end_run(
        rt,
        ended,
        reason,
        details,
        phase=state.spec.pipeline[ctx.position[0]].name,
        contributing_factors=[note],
        activity=ctx.events,
        delivery=ctx.delivery,
        gate=ctx.close,
    )
    if ctx.close:
        write()


def _detour(
    ctx: Ctx,
    detour: Detour,
    outputs: list[tuple[str, str]] | None,
    *,
    replace: tuple[int, PhaseResult] | None = None,
) -> bool:
    """Dispatch a strategy's attempt: the reviewing phase's next attempt, run as ``detour`` (the
    conflict's record, the detour and the result under review written with the move)."""
    rt, state = ctx.rt, ctx.state
    r, a = ctx.position
    view = attempt_view(state.model_copy(update={"detour": detour}))

    def also(pipe: Any) -> None:
        _record_writes(ctx, pipe)
        runs.queue_detour(pipe, ctx.run_id, detour)
        if ctx.opened:
            runs.queue_pending_result(pipe, ctx.run_id, ctx.result)
        if replace is not None:
            index, result = replace
            kept = result.model_copy(
                update={"phase": state.spec.pipeline[index].name, "phase_index": index}
            )
            runs.queue_result_replaced(pipe, ctx.run_id, index, kept)
            # the run's artifacts are the escalated work's now, not the rejected original's
            rejected = set(state.results[index].artifacts) if index < len(state.results) else set()
            kept_ids = [a for a in state.artifacts if a not in rejected]
            runs.queue_artifacts(
                pipe, ctx.run_id, kept_ids + [a for a in result.artifacts if a not in kept_ids]
            )
            # the replaced work stays the run's, retained with it
            runs.queue_superseded(
                pipe,
                ctx.run_id,
                _new_artifacts(state, [a for a in state.artifacts if a in rejected]),
            )

    rt.forget(ctx.run_id)
    return make(
        rt,
        Move(
            ctx.run_id,
            view.spec,
            frm=(r, a),
            to=(r, a + 1),
            event="conflict_strategy",
            detail=f"conflict {ctx.conflict.conflict_id}: {detour.kind} ({detour.role} on {detour.model})",
            outputs=outputs,
            activity=ctx.events,
            also=also,
            host=ctx.host,
            delivery=ctx.delivery,
            close=ctx.close,
        ),
    ).applied


def _wait(ctx: Ctx, gate: Gate) -> bool:
    """The run waits for a person on ``gate`` (request_user_input), the result under review kept."""
    rt, state = ctx.rt, ctx.state
    r, a = ctx.position

    def also(pipe: Any) -> None:
        _record_writes(ctx, pipe)
        if ctx.opened:
            runs.queue_pending_result(pipe, ctx.run_id, ctx.result)
        runs.queue_detour(pipe, ctx.run_id, None)

    rt.forget(ctx.run_id)
    return make(
        rt,
        Move(
            ctx.run_id,
            state.spec,
            frm=(r, a),
            to=(r, a),
            event="gate_opened",
            detail=f"conflict {ctx.conflict.conflict_id}: {gate.subject}",
            activity=ctx.events,
            also=also,
            host=ctx.host,
            delivery=ctx.delivery,
            then="wait",
            gate=gate,
        ),
    ).applied


# -- helpers -------------------------------------------------------------------------------------------


def _may_use(ctx: Ctx, model: str) -> bool:
    return denial(list(ctx.state.capabilities), [f"model.{model}"]) is None


def _work_index(ctx: Ctx) -> int:
    """The pipeline index of the phase whose output is in question (the reviewing phase itself when
    there is none apart: low confidence, findings, proposals)."""
    name = ctx.conflict.work_phase
    for i, phase in enumerate(ctx.state.spec.pipeline):
        if phase.name == name:
            return i
    return ctx.position[0]


def _work_result(ctx: Ctx, index: int) -> PhaseResult | None:
    if index < ctx.position[0] and index < len(ctx.state.results):
        return ctx.state.results[index]
    return ctx.state.pending_result or ctx.result


def _work_agent(ctx: Ctx) -> str:
    """The agent of the work in question (role@model of its result, else the phase's role)."""
    index = _work_index(ctx)
    work = _work_result(ctx, index)
    if work is not None and work.phase_index == index:
        return _agent_of_result(ctx, work)
    return ctx.state.spec.pipeline[index].role


def _agent_of_result(ctx: Ctx, result: PhaseResult) -> str:
    """``role@model`` of a result: its phase's role, the model it ran on (its manifest's)."""
    phase = ctx.state.spec.pipeline[min(result.phase_index, len(ctx.state.spec.pipeline) - 1)]
    model = result.manifest.model if result.manifest is not None else phase.model
    return f"{phase.role}@{model}"


def _proposal(ctx: Ctx, side: PartyOutput) -> PhaseResult | None:
    """The result of a competing proposal: the group's last (the result under review) or an earlier
    member's accepted result."""
    for result in (ctx.result, ctx.state.pending_result, *ctx.state.results):
        if result is not None and (result.phase, result.attempt) == (side.phase, side.attempt):
            return result
    return None


def _result_of(ctx: Ctx, winner: PartyOutput) -> PhaseResult | None:
    """The result a winning side stands for, when it is one phase ``r`` can be accepted with: the
    winning proposal's output and artifacts carry the run on."""
    if ctx.conflict.conflict_type == "competing_proposals":
        return _proposal(ctx, winner)
    if ctx.conflict.conflict_type in REVIEW_TYPES:
        return None
    for result in (ctx.result, ctx.state.pending_result):
        if result is not None and (result.phase, result.attempt) == (winner.phase, winner.attempt):
            return result
    return None


def _sides(ctx: Ctx) -> str:
    """The sides of the conflict with their outputs, for an arbiter's instructions."""
    lines = []
    outputs = dict(outputs_of(ctx.state))
    under_review = ctx.state.pending_result or ctx.result
    for p in ctx.conflict.their_outputs:
        text = (
            under_review.output
            if (p.phase, p.attempt) == (under_review.phase, under_review.attempt)
            else outputs.get(p.phase, "")
        )
        lines.append(
            f"\n## {p.agent_id} ({p.stance}; phase {p.phase}, confidence {p.confidence:.2f}, "
            f"{p.evidence_count} evidence)\n{text[:20_000]}"
        )
    return "".join(lines)


def _feedback(ctx: Ctx) -> str:
    """What the escalated re-run of the work is told about why it runs again."""
    kind = ctx.conflict.conflict_type
    if kind in REVIEW_TYPES:
        reviewer = ctx.state.pending_result or ctx.result
        return f"A reviewer rejected your earlier output. Their review:\n{reviewer.output[:20_000]}"
    if kind == "low_confidence_output":
        return (
            f"Your earlier output had confidence {ctx.result.confidence:.2f}, under "
            f"{ctx.rt.settings.conflicts.low_confidence_threshold:g}: produce a better-supported one."
        )
    return f"The earlier attempt reported a {kind.replace('_', ' ')}: resolve it."
