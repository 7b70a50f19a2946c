"""A host's step, as Mother records it: checked against the step's schema and size, its attempt and time
Mother's own (a host cannot write another attempt's step, nor date one)."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from mother.errors import InvalidSpec
from schemas import RunState, describe_validation_error
from schemas.journal import MAX_STEP_BYTES, Step

__all__ = ["check_step", "lane_of"]


def check_step(raw: Any, attempt: int, now: str) -> str:
    """The JSON text Mother appends for step ``raw`` a host sent with a charge of attempt ``attempt``:
    the step as a host says it (its number, lane, kind, state and what it records), with the attempt and
    the time Mother's. InvalidSpec in one line when it is not a step, or is larger than MAX_STEP_BYTES."""
    if not isinstance(raw, dict):
        raise InvalidSpec("a step is a JSON object")
    try:
        step = Step.model_validate({**raw, "attempt": attempt, "at": now})
    except ValidationError as exc:
        raise InvalidSpec(
            f"the step is not a journal step: {describe_validation_error(exc)}"
        ) from None
    text = step.to_text()
    if len(text) > MAX_STEP_BYTES:
        raise InvalidSpec(
            f"the step is {len(text)} bytes; a recorded step is at most {MAX_STEP_BYTES} bytes"
        )
    return text.decode()


def lane_of(state: RunState) -> str:
    """The lane the current attempt's steps go under: '' for the phase's own work, or a conflict's own
    attempt (an arbiter, an escalated re-run, a review made again) as ``{kind}:{conflict_id}``, which
    starts its own steps."""
    detour = state.detour
    return f"{detour.kind}:{detour.conflict_id}" if detour is not None else ""
