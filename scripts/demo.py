"""The offline demo: embedded Redis + Mother + workers, every example, a table of how each run ended.

Runs entirely on this machine with the scripted model provider; stops everything
it started, even on Ctrl-C.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from mother.cli._common import data_console, sandbox_notice
from mother.cli.runs import runs_table
from mother.client import MotherClient, load_spec_file
from mother.config import load_settings
from mother.errors import MotherError, NotFound, RedisUnavailable
from mother.logs import configure_logging
from mother.server import EmbeddedRedis
from mother.stack import DEV_ENV, LocalStack

# a slow machine is waited out: the demo gives up only when nothing has moved for this long
QUIET_SECONDS = 240.0
# and after this long in all, whatever moves
MOST_SECONDS = 1800.0
ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
console = data_console()
EXPECTED = {
    "three-phase": "success",
    "retries-exhausted": "retries_exhausted",
    "timeout": "timeout",
    "cancelled": "user_cancelled",
    "worker-killed": "success",
    "context-summarized": "success",
    "conflict-arbiter": "success",
    "conflict-escalation": "success",
    "conflict-ask-user": "success",
    "approval-denied": "approval_denied",
    "gate-timeout": "blocked",
    "conflicting-agents": "conflicting_agents",
    "tool-run-tests": "success",
    "tool-fallback": "success",
    "tool-ocr": "success",
    "library-redacted": "success",
    "library-refused-agent": "policyViolation",
    "library-refused-model": "policyViolation",
    "library-rate-limited": "policyViolation",
    "library-insufficient": "insufficient_evidence",
}


def main() -> int:
    """The demo; a failure it can name is one line (error[code]: what to do), never a traceback."""
    try:
        return _demo()
    except MotherError as exc:
        console.print(f"error[{exc.code}]: {exc.message}", style="red", soft_wrap=True)
        return 2


def patiently(call: Any, what: str) -> Any:
    """``call()``, tried again while Redis is too busy to answer (a loaded machine: a read timed out),
    saying so, for up to QUIET_SECONDS."""
    deadline = time.monotonic() + QUIET_SECONDS
    told = False
    while True:
        try:
            return call()
        except RedisUnavailable as exc:
            if not exc.unreachable or time.monotonic() >= deadline:
                raise
            if not told:
                console.print(f"{what}: {exc.message}; waiting for Redis", style="yellow")
                told = True
            time.sleep(1)


def _demo() -> int:
    # the demo prints its own story: library log lines only for what went wrong
    configure_logging("WARNING")
    with (
        tempfile.TemporaryDirectory(prefix="mother-demo-") as tmp,
        EmbeddedRedis(dir=Path(tmp) / "redis") as server,
    ):
        console.print(f"embedded Redis at {server.url}")
        # where bubblewrap is missing, the workers run tools unsandboxed: one yellow line says so
        sandbox_notice(load_settings(redis_url=server.url), dev=True)
        # DEV_ENV: the examples inject faults on purpose
        with LocalStack(
            server.url,
            workers=2,
            log_dir=Path(tmp) / "logs",
            env={"MOTHER_WORKER__WORKSPACE_ROOT": str(Path(tmp) / "workspaces"), **DEV_ENV},
            wait_hosts=True,
        ) as stack:
            console.print("started Mother and 2 workers")
            client = MotherClient(settings=load_settings(redis_url=server.url))
            _create_libraries(client)
            run_ids = {}
            for name in EXPECTED:
                spec = load_spec_file(EXAMPLES / f"{name}.yaml")
                run_ids[name] = patiently(lambda spec=spec: client.submit(spec), f"submit {name}")
                console.print(f"submitted {name:<18} → {run_ids[name]}")
            _cancel_when_running(client, run_ids["cancelled"])
            _decide_when_waiting(client, run_ids)
            ended = _wait_all(client, stack, run_ids)
        rows = client.runs(limit=len(run_ids))
        console.print(runs_table(rows, title="runs and why each stopped"))
        _show_context(client, run_ids["context-summarized"])
        _show_tools(client, {n: run_ids[n] for n in run_ids if n.startswith("tool-")})
        _show_retention(client)
    wrong = {n: r for n, r in ended.items() if r != EXPECTED[n]}
    for name, reason in wrong.items():
        console.print(f"{name} ended {reason}, expected {EXPECTED[name]}", style="red")
    console.print(
        "everything stopped." if not wrong else "demo finished with unexpected outcomes",
        style="red" if wrong else None,
    )
    return 1 if wrong else 0


def _show_context(client: MotherClient, run_id: str) -> None:
    """What Mother summarized for the context-summarized run, and the note its output carries."""
    envelope = client.result(run_id)
    if envelope is None:
        return
    for phase in envelope.phases:
        if phase.manifest is None:
            continue
        for section in phase.manifest.sections:
            if section.summary_id:
                console.print(
                    f"context-summarized, phase {phase.phase}: {section.section} summarized "
                    f"{section.source_tokens:,} → {section.tokens:,} tokens ({section.summary_id}) "
                    f"to fit {phase.manifest.model}'s {phase.manifest.available_for_context:,}"
                )
    notes = [
        line for line in envelope.output.splitlines() if line.startswith("Note: Context included")
    ]
    for line in notes:
        console.print(f"  output: {line}")


def _create_libraries(client: MotherClient) -> None:
    """The spec's three example libraries, from the policies and fake documents in examples/libraries."""
    from mother.clock import ServerClock
    from mother.libraries.ingest import create_example_libraries

    made = create_example_libraries(client.redis, ServerClock(client.redis).now_iso())
    for name, docs in made.items():
        console.print(
            f"library {name}: {sum(m.chunks for m in docs)} chunk(s) from {len(docs)} document(s)"
        )


def _show_tools(client: MotherClient, run_ids: dict[str, str]) -> None:
    """Which phases a registry tool did (no model call), and which went to the model."""
    for name, run_id in run_ids.items():
        envelope = client.result(run_id)
        if envelope is None:
            continue
        for phase in envelope.phases:
            how = (
                f"done by tool {phase.handled_by}, no model call"
                if phase.handled_by
                else f"done by the model ({phase.usage.model_calls} model calls)"
            )
            console.print(f"{name}, phase {phase.phase}: {how}: {phase.output[:90]}")


def _show_retention(client: MotherClient) -> None:
    """What the daily GC would do to these runs as of later dates (dry runs: nothing changes)."""
    from mother.artifacts.collect import collect_here
    from mother.runtime import Runtime

    rt = Runtime(settings=client.settings, redis=client.redis)
    now = rt.clock.now_ms()
    for days in (8, 31, 91, 181):
        report = collect_here(rt, now_ms=now + days * 86_400_000, dry_run=True)
        assert report is not None
        console.print(
            f"GC as of {days:>3} days from now (dry run): {report.scheduled_deletion} artifacts "
            f"deleted, {report.archived} archived, {report.runs_removed} runs' records removed"
        )


def _cancel_when_running(client: MotherClient, run_id: str) -> None:
    deadline = time.monotonic() + QUIET_SECONDS
    while time.monotonic() < deadline:
        try:
            if patiently(lambda: client.status(run_id), "status").status == "running":
                break
        except NotFound:
            # Mother has not taken it in yet
            pass
        time.sleep(0.1)
    time.sleep(0.5)
    client.cancel(run_id, actor="demo", reason="the demo cancels this run while it runs")
    console.print(f"cancelled {run_id}")


def _decide_when_waiting(client: MotherClient, run_ids: dict[str, str]) -> None:
    """Play the people: answer the run that asks, deny the deploy (gate-timeout is left to expire)."""
    decisions = {
        "conflict-ask-user": lambda run_id: client.answer(
            run_id, "Use the UTC date.", actor="alice", reason="the demo answers"
        ),
        "approval-denied": lambda run_id: client.deny(
            run_id, actor="ops", reason="the demo denies the deploy: freeze week"
        ),
        # financials requires approval before its content is exported to artifacts
        "library-redacted": lambda run_id: client.approve(
            run_id, actor="ops", reason="the demo approves the board pack"
        ),
        "library-rate-limited": lambda run_id: client.approve(
            run_id, actor="ops", reason="the demo approves the reconciliation"
        ),
    }
    for name, decide in decisions.items():
        run_id = run_ids[name]
        deadline = time.monotonic() + QUIET_SECONDS
        while time.monotonic() < deadline:
            try:
                status = patiently(lambda run_id=run_id: client.status(run_id), "status").status
            except NotFound:
                status = "queued"
            if status in ("waiting", "terminated"):
                break
            time.sleep(0.1)
        if status == "waiting":
            reply = patiently(lambda decide=decide, run_id=run_id: decide(run_id), name)
            console.print(f"{reply['actor']} decided {name}: {reply['decision']}")


def _wait_all(client: MotherClient, stack: LocalStack, run_ids: dict[str, str]) -> dict[str, str]:
    """Wait until every run ended: on a slow machine as long as runs still move (one ends, or one
    moves to another phase or attempt), giving up after QUIET_SECONDS with none moving; says which
    runs it still waits for at each quiet stretch."""
    ended: dict[str, str] = {}
    started = moved = time.monotonic()
    seen: dict[str, tuple[Any, ...]] = {}
    with console.status("waiting for runs to end...") as status:
        while len(ended) < len(run_ids):
            now = time.monotonic()
            if now - moved > QUIET_SECONDS or now - started > MOST_SECONDS:
                left = ", ".join(sorted(set(run_ids) - set(ended)))
                console.print(f"gave up waiting for: {left} (nothing moved)", style="red")
                break
            for exited in stack.respawn_dead():
                if exited.gave_up:
                    raise SystemExit(f"{exited}: see {exited.log}")
                because = (
                    " (as the worker-killed example asks)"
                    if exited.name.startswith("worker-")
                    else ""
                )
                console.print(f"{exited}{because}")
            for name, run_id in run_ids.items():
                if name in ended:
                    continue
                envelope = patiently(lambda run_id=run_id: client.result(run_id), "result")
                if envelope is not None and envelope.termination is not None:
                    ended[name] = envelope.termination.reason
                    moved = time.monotonic()
                    console.print(f"{name:<18} ended: {ended[name]}")
                    continue
                where = _where(client, run_id)
                if where != seen.get(name):
                    seen[name], moved = where, time.monotonic()
            quiet = time.monotonic() - moved
            status.update(
                f"waiting for {len(run_ids) - len(ended)} run(s) to end"
                + (f" (nothing moved for {quiet:.0f}s; a slow machine?)" if quiet > 30 else "...")
            )
            time.sleep(0.2)
    return ended


def _where(client: MotherClient, run_id: str) -> tuple[Any, ...]:
    """Where a run is: (status, phase, attempt); () before Mother took it in."""
    try:
        state = patiently(lambda: client.status(run_id), "status")
    except NotFound:
        return ()
    return (state.status, state.phase, state.attempt)


if __name__ == "__main__":
    sys.exit(main())
