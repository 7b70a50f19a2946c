"""Termination records: one immutable TerminationRecord per run, written only here.

:func:`terminate` is the single writer of ``termination:{run_id}``. It runs the
``mh_terminate`` server function, which in one atomic step writes the record with
``JSON.SET … NX``, adds the run to ``terminations:reason:{reason}`` (scored by
server time), marks the run terminated, stores the final ResultEnvelope with the
record inside, clears the run's deadlines and adds the run to ``mother:ending``
(what its end still has to give back: :func:`mother.lifecycle.finish_end`). A
second call returns the first record unchanged.

The rule table below fills ``can_retry`` and ``suggested_action`` per reason:

| reason                  | can_retry | suggested_action | why |
|-------------------------|-----------|------------------|-----|
| success                 | no        | abandon          | nothing left to do |
| approval_denied         | no        | user_input       | a person said no; ask again with changes |
| policyViolation         | no        | abandon          | the agent tried a disallowed action |
| retries_exhausted       | yes       | escalate_model   | the model failed repeatedly; a stronger one may not |
| timeout                 | yes       | retry            | retry with a larger duration or phase timeout |
| insufficient_evidence   | yes       | broaden_scope    | retrieval was inadequate; widen the sources |
| conflicting_agents      | yes       | escalate_model   | no tie-breaker succeeded; escalate the arbiter |
| user_cancelled          | yes       | user_input       | the user stopped it; resubmit when wanted |
| budget_exhausted        | no        | user_input       | raise the budget or narrow the task |
| blocked                 | yes       | user_input       | waiting for input or approval |
| catastrophic_error      | no        | abandon          | unrecoverable system error; see details |
| context_budget_exceeded | yes       | escalate_model   | the required context needs a larger window |
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson
import redis

from mother import calls, keys
from mother.logs import get_logger
from mother.records._json import ensure_json_index
from schemas import (
    HistoryEntry,
    ResultEnvelope,
    SuggestedAction,
    TerminationReason,
    TerminationRecord,
)

__all__ = ["RULES", "Rule", "build_record", "ensure_index", "terminate", "terminated"]

log = get_logger("termination")


@dataclass(frozen=True)
class Rule:
    can_retry: bool
    suggested_action: SuggestedAction
    summary: str


RULES: dict[str, Rule] = {
    "success": Rule(False, "abandon", "All phases completed"),
    "approval_denied": Rule(False, "user_input", "A gated action was rejected"),
    "policyViolation": Rule(False, "abandon", "The agent attempted a disallowed action"),
    "retries_exhausted": Rule(True, "escalate_model", "A phase failed on every allowed attempt"),
    "timeout": Rule(True, "retry", "A phase or run deadline passed"),
    "insufficient_evidence": Rule(True, "broaden_scope", "Retrieval was inadequate"),
    "conflicting_agents": Rule(
        True, "escalate_model", "Agents disagreed and no tie-breaker succeeded"
    ),
    "user_cancelled": Rule(True, "user_input", "The user cancelled the run"),
    "budget_exhausted": Rule(False, "user_input", "A resource limit was reached"),
    "blocked": Rule(True, "user_input", "The run cannot proceed without input or approval"),
    "catastrophic_error": Rule(False, "abandon", "An unrecoverable system error occurred"),
    "context_budget_exceeded": Rule(
        True, "escalate_model", "The required context does not fit the model"
    ),
}


def build_record(
    *,
    run_id: str,
    reason: TerminationReason,
    phase: str,
    details: str,
    at_ms: int,
    at_iso: str,
    contributing_factors: list[str] | None = None,
    final_artifacts: list[str] | None = None,
) -> TerminationRecord:
    """A complete record for ``reason``, recommendations taken from :data:`RULES`."""
    rule = RULES[reason]
    return TerminationRecord(
        run_id=run_id,
        reason=reason,
        phase_at_termination=phase,
        timestamp=at_iso,
        details=details[:4000] or rule.summary,
        contributing_factors=[f[:1000] for f in (contributing_factors or [])][:50],
        can_retry=rule.can_retry,
        suggested_action=rule.suggested_action,
        logged_by="mother",
        final_artifacts=list(dict.fromkeys(final_artifacts or [])),
        timestamp_ms=at_ms,
    )


def terminate(
    client: redis.Redis | redis.client.Pipeline,
    record: TerminationRecord,
    envelope: ResultEnvelope,
    *,
    gate: str = "",
) -> tuple[bool, TerminationRecord] | None:
    """Write the record once. Returns (won, record in force): the first record if we lost.
    With a pipeline the call is queued (returns None); pass its reply to :func:`terminated`.
    ``gate``: a gate close op (a denial, an expiry): the run ends only while it waits on that gate."""
    history = HistoryEntry(
        at=record.timestamp,
        event="terminated",
        phase=record.phase_at_termination,
        detail=f"{record.reason}: {record.details}"[:4000],
    )
    reply = calls.terminate(
        client,
        run_id=record.run_id,
        reason=record.reason,
        record=record.to_json(),
        envelope=envelope.model_copy(update={"termination": None}).to_json(),
        at=record.timestamp,
        history=history.to_json(),
        gate=gate,
    )
    return None if isinstance(client, redis.client.Pipeline) else terminated(reply)


def terminated(
    reply: list[Any], refused: Callable[[int], Exception] | None = None
) -> tuple[bool, TerminationRecord]:
    """mh_terminate's reply: (whether this call won, the record in force). A gate op's refusal (a
    negative reply) raises what ``refused`` makes of its code."""
    won, stored = reply
    if int(won) < 0:
        raise (refused or (lambda code: RuntimeError(f"gate op refused ({code})")))(int(won))
    return bool(won), TerminationRecord.model_validate(orjson.loads(stored))


def ensure_index(client: redis.Redis) -> bool:
    """Create ``idx:termination`` (reason and phase TAGs, timestamp NUMERIC) when the search module
    exists; False without it."""
    made = ensure_json_index(
        client,
        keys.TERMINATION_INDEX,
        keys.TERMINATION_PREFIX,
        [
            ("$.reason", "reason", "TAG"),
            ("$.phase_at_termination", "phase", "TAG"),
            ("$.timestamp_ms", "timestamp", "NUMERIC"),
        ],
    )
    if made:
        log.info("termination_index_ready", index=keys.TERMINATION_INDEX)
    return made
