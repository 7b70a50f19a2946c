"""``run:{run_id}``: the run record (``schemas.RunState``) and the paths of it the product reads or writes.

Mother writes the record (``mh_create_run``, ``mh_transition``, ``mh_terminate``, ``mh_budget_state``);
every other reader goes through here.
"""

from __future__ import annotations

from typing import Any

import orjson
from pydantic import ValidationError

from mother import keys
from mother.errors import RecordInvalid
from mother.records._json import path_values
from schemas import ACTIVE_STATUSES, PhaseResult, RunSpec, RunState, describe_validation_error
from schemas.conflict import Detour

__all__ = [
    "ADMISSION_PATH",
    "CAPABILITIES_PATH",
    "HOST_PATH",
    "POSITION_PATHS",
    "SPEC_PATH",
    "attempt_view",
    "is_active_at",
    "parse_position",
    "parse_run_record",
    "queue_artifacts",
    "queue_conflict_id",
    "queue_detour",
    "queue_grant",
    "queue_listing_read",
    "queue_note",
    "queue_pending_result",
    "queue_position_read",
    "queue_read",
    "queue_result_replaced",
    "read_capabilities",
    "read_notes",
    "read_position",
    "read_position_and_host",
    "read_raw",
    "read_run",
    "read_spec",
    "set_admission",
    "set_host",
]

POSITION_PATHS = ("$.status", "$.phase_index", "$.attempt")
SPEC_PATH = "$.spec"
CAPABILITIES_PATH = "$.capabilities"
ADMISSION_PATH = "$.admission"
HOST_PATH = "$.host"


def attempt_view(state: RunState) -> RunState:
    """The run as its current attempt runs it: a conflict strategy's attempt (``state.detour``: an
    arbiter, an escalated re-run, a second review) stands in for the phase at ``phase_index``, with
    its role, model, name and instructions. Without a detour, the run itself."""
    detour = state.detour
    if detour is None or state.phase_index >= len(state.spec.pipeline):
        return state
    own = state.spec.pipeline[state.phase_index]
    stands_for = state.spec.pipeline[detour.for_phase]
    # an arbiter states a verdict on the work in question; an escalated re-run does the work again
    role_of = (
        {"kind": "review", "reviews": detour.reviews}
        if detour.kind == "arbiter"
        else {"kind": stands_for.kind, "reviews": stands_for.reviews, "group": stands_for.group}
    )
    phase = own.model_copy(
        update={
            "name": detour.name,
            "role": detour.role,
            "model": detour.model,
            "timeout_seconds": stands_for.timeout_seconds or own.timeout_seconds,
            "exit_criteria": detour.instructions or stands_for.exit_criteria,
            "require_approval": False,
            **role_of,
        }
    )
    pipeline = [*state.spec.pipeline]
    pipeline[state.phase_index] = phase
    return state.model_copy(update={"spec": state.spec.model_copy(update={"pipeline": pipeline})})


def parse_run_record(run_id: str, raw: str | bytes) -> RunState:
    """``run:{id}`` as read (JSON.GET of the whole document), validated; a one-line ``RecordInvalid`` when
    it is not a run record (edited by hand, or written by an incompatible version)."""
    try:
        return RunState.model_validate(orjson.loads(raw))
    except orjson.JSONDecodeError as exc:
        why = f"not JSON: {exc}"
    except ValidationError as exc:
        why = describe_validation_error(exc, limit=2)
    raise RecordInvalid(
        f"run {run_id}'s record ({keys.run_key(run_id)}) is not a valid run record ({why}); it was "
        "changed outside Mother or written by another version: restore it, or delete the key"
    )


def read_raw(client: Any, run_id: str) -> Any:
    """The run's record as stored (JSON text), or None: for a caller that parses it itself."""
    return client.execute_command("JSON.GET", keys.run_key(run_id))


def read_run(client: Any, run_id: str) -> RunState | None:
    """The run's record, validated; None when there is none."""
    raw = read_raw(client, run_id)
    return parse_run_record(run_id, raw) if raw else None


LISTING_PATHS = ("$.user_id", "$.status", "$.phase", "$.created_at", "$.terminated_at")


def queue_listing_read(pipe: Any, run_id: str) -> None:
    """Queue the read of what a listing of runs shows of one (LISTING_PATHS) on ``pipe``."""
    pipe.execute_command("JSON.GET", keys.run_key(run_id), *LISTING_PATHS)


def read_spec(client: Any, run_id: str) -> RunSpec | None:
    """The run's spec (immutable once submitted); None when there is no run."""
    raw = client.execute_command("JSON.GET", keys.run_key(run_id), SPEC_PATH)
    return RunSpec.model_validate(orjson.loads(raw)[0]) if raw else None


def read_capabilities(client: Any, run_id: str) -> list[str]:
    """The run's capability token (its granted patterns); none when there is no run."""
    raw = client.execute_command("JSON.GET", keys.run_key(run_id), CAPABILITIES_PATH)
    return list(orjson.loads(raw)[0]) if raw else []


def parse_position(raw: Any) -> tuple[str, int, int] | None:
    """A run's (status, phase_index, attempt) from ``JSON.GET run:{id} *POSITION_PATHS``; None if no run,
    or a record that holds no such position (edited by hand: it is not a run anything can act on)."""
    # an Exception: a pipeline's reply for a key of another type
    if not raw or isinstance(raw, Exception):
        return None
    got = path_values(raw)
    status, index, attempt = got.get("status"), got.get("phase_index"), got.get("attempt")
    if isinstance(status, str) and type(index) is type(attempt) is int:
        return status, index, attempt
    return None


def is_active_at(position: tuple[str, int, int] | None, index: int, attempt: int) -> bool:
    """Whether a position (:func:`parse_position`) is this attempt of a run that is running (or stopped)."""
    return (
        position is not None and position[0] in ACTIVE_STATUSES and position[1:] == (index, attempt)
    )


def queue_read(pipe: Any, run_id: str) -> None:
    """Queue the read of the whole record on ``pipe`` (parse its reply with :func:`parse_run_record`)."""
    pipe.execute_command("JSON.GET", keys.run_key(run_id))


def read_position(client: Any, run_id: str) -> tuple[str, int, int] | None:
    """The run's (status, phase_index, attempt), or None (:func:`parse_position`)."""
    return parse_position(client.execute_command("JSON.GET", keys.run_key(run_id), *POSITION_PATHS))


def queue_position_read(pipe: Any, run_id: str) -> None:
    """Queue the read of the run's position on ``pipe`` (parse its reply with :func:`parse_position`)."""
    pipe.execute_command("JSON.GET", keys.run_key(run_id), *POSITION_PATHS)


def read_position_and_host(
    client: Any, run_id: str
) -> tuple[tuple[str, int, int] | None, str | None]:
    """The run's position and the host its current attempt was queued on (None, None without a run)."""
    raw = client.execute_command("JSON.GET", keys.run_key(run_id), *POSITION_PATHS, HOST_PATH)
    host = path_values(raw).get("host") if raw else None
    return parse_position(raw), host if isinstance(host, str) else None


NOTES_PATH = "$.notes"


def read_notes(client: Any, run_id: str) -> list[str]:
    """The run's notes (answers, conflict decisions); none without a run or notes."""
    raw = client.execute_command("JSON.GET", keys.run_key(run_id), NOTES_PATH)
    found = orjson.loads(raw)[0] if raw else []
    return [n for n in found if isinstance(n, str)] if isinstance(found, list) else []


def queue_note(pipe: Any, run_id: str, note: str) -> None:
    """Queue appending a note to the run (a follow-up of the move that decides it)."""
    pipe.execute_command("JSON.ARRAPPEND", keys.run_key(run_id), NOTES_PATH, orjson.dumps(note))


def queue_detour(pipe: Any, run_id: str, detour: Detour | None) -> None:
    """Queue setting (or, with None, clearing) the strategy attempt the run's next attempt is."""
    value = detour.to_json() if detour is not None else "null"
    pipe.execute_command("JSON.SET", keys.run_key(run_id), "$.detour", value)


def queue_pending_result(pipe: Any, run_id: str, result: PhaseResult | None) -> None:
    """Queue keeping (or, with None, dropping) the result a conflict or a gate holds."""
    value = result.to_json() if result is not None else "null"
    pipe.execute_command("JSON.SET", keys.run_key(run_id), "$.pending_result", value)


def queue_result_replaced(pipe: Any, run_id: str, index: int, result: PhaseResult) -> None:
    """Queue replacing phase ``index``'s accepted result (an escalated re-run's takes its place)."""
    pipe.execute_command(
        "JSON.SET", keys.run_key(run_id), f"$.results[{int(index)}]", result.to_json()
    )


def queue_artifacts(pipe: Any, run_id: str, artifacts: list[str]) -> None:
    """Queue setting the run's list of artifacts (an escalated re-run's replace the rejected ones)."""
    pipe.execute_command("JSON.SET", keys.run_key(run_id), "$.artifacts", orjson.dumps(artifacts))


def queue_superseded(pipe: Any, run_id: str, artifacts: list[str]) -> None:
    """Queue adding artifacts a conflict set aside to the run's ``superseded_artifacts``."""
    if artifacts:
        pipe.execute_command(
            "JSON.ARRAPPEND",
            keys.run_key(run_id),
            "$.superseded_artifacts",
            *(orjson.dumps(a) for a in artifacts),
        )


def queue_conflict_id(pipe: Any, run_id: str, conflict_id: str) -> None:
    """Queue adding a conflict to the run's list of them."""
    pipe.execute_command(
        "JSON.ARRAPPEND", keys.run_key(run_id), "$.conflicts", orjson.dumps(conflict_id)
    )


def queue_grant(pipe: Any, run_id: str, digest: str, retry_base: int) -> None:
    """Queue an approved tool call's grant, and the attempt its phase's retries count from."""
    run_key = keys.run_key(run_id)
    pipe.execute_command("JSON.ARRAPPEND", run_key, "$.grants", orjson.dumps(digest))
    pipe.execute_command("JSON.SET", run_key, "$.retry_base", int(retry_base))


def set_admission(pipe: Any, run_id: str, decision: str) -> None:
    """Queue the run's admission decision (``admitted`` / ``waiting``) on ``pipe``."""
    pipe.execute_command("JSON.SET", keys.run_key(run_id), ADMISSION_PATH, orjson.dumps(decision))


def set_host(pipe: Any, run_id: str, host: str | None) -> None:
    """Queue the host the current attempt is queued on (None: it waits for one) on ``pipe``."""
    pipe.execute_command("JSON.SET", keys.run_key(run_id), HOST_PATH, orjson.dumps(host))
