"""The floor of ``scripts/bench_pipeline.py``: the server work the spec asks of each phase, and nothing else.

A no-op run's phases make the same server calls as Mother's, through the same server functions
and the production wrappers that send them, with as little Python around them as can make them:

  the phase job  its first read (its beat, run, counters, context: one round trip), the model
                 call's reservation (``mh_guard`` through :class:`mother.budget.Guard`), then one
                 transaction: the settle, the output artifact and its meta, the result on a stream,
                 the attempt's "reported" mark
  the dispatcher (:func:`relay`, one process, as Mother) reads the results with a consumer group and
                 per result makes one transaction: ``mh_transition`` with the next attempt's RQ job,
                 its context and two activity entries as follow-ups (or, after the last phase,
                 ``mh_terminate`` and a ``terminated`` entry), and the ack

No pydantic model, no structlog, no context composition, no hooks, no admission, rate limit,
ledger or spend pricing: what it adds over plain RQ is a lower bound on what any dispatcher that
meets the spec can add on the same machine. Its run ids start with ``floor-`` and its records are
not Mother's: its ended runs go to their own set, never to ``mother:ending``.
"""

from __future__ import annotations

import sys
import uuid
from typing import Any

import orjson
import redis
from rq import get_current_job

from mother import calls, keys
from mother.activity import DEFAULT_MAXLEN
from mother.budget import Guard, open_run_budget
from mother.clock import ServerClock
from mother.config import Settings
from mother.functions import follow_ups
from mother.records import POSITION_PATHS, parse_position
from mother.records.budgets import COUNTER_PATHS
from schemas import RunSpec, iso_from_ms
from scripts.bench import FLOOR_ENDING, FLOOR_STREAM, bench_queue, bench_redis, host_of_job
from scripts.bench.noop import serve
from workers.phase import runtime

__all__ = ["PHASES", "floor_job_id", "floor_run_id", "open_run", "phase", "relay", "relay_command"]

GROUP = "floor"
PHASES = ("plan", "execute", "review")
JOB = "scripts.bench.floor.phase"


def floor_run_id(index: int) -> str:
    return f"floor-{index}"


def floor_job_id(host: str, index: int, step: int) -> str:
    return keys.host_job_id(host, f"floor-{index}-{step}")


def open_run(pipe: Any, settings: Settings, index: int, now_ms: int) -> None:
    """Queue run ``index``'s run document and its run budget (the production one) on ``pipe``."""
    run_id = floor_run_id(index)
    spec = RunSpec(
        run_id=run_id,
        user_id="bench",
        task="no-op",
        pipeline=[{"name": name, "role": "noop", "model": "scripted"} for name in PHASES],
    )
    at = iso_from_ms(now_ms)
    pipe.execute_command(
        "JSON.SET",
        keys.run_key(run_id),
        "$",
        orjson.dumps(
            {
                "run_id": run_id,
                "user_id": "bench",
                "status": "running",
                "phase_index": 0,
                "attempt": 1,
                "phase": PHASES[0],
                "results": [],
                "history": [],
                "artifacts": [],
                "created_at": at,
                "updated_at": at,
            }
        ),
    )
    open_run_budget(pipe, settings, spec, now_ms)


def phase(index: int, step: int, steps: int) -> int:
    """Phase ``step`` of floor run ``index``: first read, reserve, then settle, artifact and result in one write."""
    job = get_current_job()
    assert job is not None
    # (a host's own user may not make these writes: the floor stands for a dispatcher that is not Mother)
    conn, run_id = bench_redis(), floor_run_id(index)
    pipe = conn.pipeline(transaction=False)
    # the attempt's beat (its own key; in production on its own ACL user's line)
    pipe.set(keys.attempt_heartbeat_key(run_id, step, 1), "floor", px=10_000)
    pipe.execute_command("JSON.GET", keys.run_key(run_id), *POSITION_PATHS)
    pipe.execute_command("JSON.GET", keys.run_budget_key(run_id), *COUNTER_PATHS)
    pipe.execute_command("JSON.GET", keys.context_key(run_id, step))
    _beat, position, _counters, _context = pipe.execute()
    if position is None:
        raise RuntimeError(
            f"floor run {run_id} has no run document: floor.open_run makes it before the first phase"
        )
    if parse_position(position) != ("running", step, 1):
        raise RuntimeError(f"floor run {run_id} is not at phase {step}: {position!r}")
    rt = runtime()
    guard = Guard(conn, rt.settings, run_id, "bench", rt.clock.today, attempt=(step, 1))
    op = guard.reserve_model_call(max_tokens=1000, max_spend_micro_usd=0, cloud=False)
    artifact_id = f"art-{uuid.uuid4().hex[:20]}"
    result = orjson.dumps(
        {
            "run_id": run_id,
            "phase": PHASES[step],
            "phase_index": step,
            "attempt": 1,
            "status": "completed",
            "output": "ok",
            "confidence": 1.0,
            "evidence_count": 0,
            "artifacts": [artifact_id],
            "usage": {"input_tokens": 10, "output_tokens": 2, "model_calls": 1},
        }
    )
    pipe = conn.pipeline(transaction=True)
    guard.settle_model_call(op, input_tokens=10, output_tokens=2, spend=0, pipe=pipe)
    pipe.execute_command(
        "JSON.SET",
        keys.artifact_key(artifact_id),
        "$",
        orjson.dumps(
            {
                "artifact_id": artifact_id,
                "run_id": run_id,
                "phase": PHASES[step],
                "kind": "phase_output",
                "content": "ok",
            }
        ),
    )
    pipe.execute_command(
        "JSON.SET",
        keys.artifact_meta_key(artifact_id),
        "$",
        orjson.dumps(
            {"artifact_id": artifact_id, "run_id": run_id, "kind": "phase_output", "size_bytes": 2}
        ),
    )
    pipe.xadd(
        FLOOR_STREAM, {"result": result, "steps": steps, "index": index, "host": host_of_job(job)}
    )
    # the attempt's key says it reported (production: on its own line, just before)
    pipe.set(keys.attempt_heartbeat_key(run_id, step, 1), "reported", px=86_400_000)
    settled = pipe.execute()[0]
    # raises if the guard refused
    guard.queued_reply(settled)
    return step


def relay(url: str) -> None:
    """Dispatch floor runs until killed: per result, the next phase (or the end) and the ack in one transaction."""
    conn = redis.Redis.from_url(url)
    # Mother's clock: the server's time with no round trip per result
    clock = ServerClock(conn)
    serve(conn, FLOOR_STREAM, GROUP, lambda pipe, fields: _dispatch(conn, clock, pipe, fields))


def _dispatch(conn: redis.Redis, clock: ServerClock, pipe: Any, fields: dict[bytes, bytes]) -> None:
    """Queue on ``pipe`` what one phase's result leads to: the next phase's transition, or the run's end."""
    raw = fields[b"result"]
    result = orjson.loads(raw)
    host = fields[b"host"].decode()
    queue = bench_queue(conn, host)
    index, step, steps = int(fields[b"index"]), result["phase_index"], int(fields[b"steps"])
    run_id, at = result["run_id"], clock.now_iso()
    entry = orjson.dumps(
        {"at": at, "event": "phase_completed", "phase": result["phase"], "attempt": 1, "detail": ""}
    )
    if step + 1 >= steps:
        record = orjson.dumps(
            {
                "run_id": run_id,
                "reason": "success",
                "details": "floor run done",
                "logged_by": "mother",
                "timestamp": at,
                "phase_at_termination": result["phase"],
                "final_artifacts": result["artifacts"],
            }
        )
        calls.terminate(
            pipe,
            run_id=run_id,
            reason="success",
            record=record,
            envelope=orjson.dumps({"run_id": run_id, "status": "success", "termination": None}),
            at=at,
            history=entry,
            ending=FLOOR_ENDING,
        )
        pipe.xadd(
            keys.ACTIVITY_STREAM,
            {"type": "terminated", "run_id": run_id, "at": at},
            maxlen=DEFAULT_MAXLEN,
            approximate=True,
        )
        return
    name = PHASES[step + 1]
    # never executed: its commands become mh_transition's follow-ups
    writes = conn.pipeline(transaction=True)
    queue.enqueue_call(
        JOB,
        args=(index, step + 1, steps),
        job_id=floor_job_id(host, index, step + 1),
        timeout=600,
        result_ttl=600,
        pipeline=writes,
    )
    writes.execute_command(
        "JSON.SET",
        keys.context_key(run_id, step + 1),
        "$",
        orjson.dumps(
            {
                "run_id": run_id,
                "phase_index": step + 1,
                "sections": [{"section": "previous_output", "content": result["output"]}],
            }
        ),
    )
    for event, phase in (("phase_completed", result["phase"]), ("phase_dispatched", name)):
        writes.xadd(
            keys.ACTIVITY_STREAM,
            {"type": event, "run_id": run_id, "phase": phase, "at": at},
            maxlen=DEFAULT_MAXLEN,
            approximate=True,
        )
    follow = follow_ups(writes)
    writes.reset()
    calls.transition(
        pipe,
        run_id=run_id,
        expected=(step, 1),
        to=(step + 1, 1),
        phase=name,
        phase_timeout_ms=600_000,
        run_duration_ms=0,
        at=at,
        history=entry,
        result=raw,
        artifacts=result["artifacts"],
        follow_ups=follow,
    )


def relay_command(url: str) -> list[str]:
    """The command that runs :func:`relay` on ``url`` in a process of its own."""
    return [sys.executable, "-m", "scripts.bench.floor", url]


if __name__ == "__main__":
    relay(sys.argv[1])
