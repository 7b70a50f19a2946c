"""Replay bundles (seed 003 §1's replay implications): a run exported whole, told as a story, and run
again.

- :func:`export` gathers a run: its spec, every phase's results (outputs, usage, verdicts, tool
  plans), its composed contexts (redacted as composed) and their summaries, its conflicts, its
  gates and people's decisions, its budget and a budget timeline (the activity entries that moved
  it), the termination record, the result envelope and the artifact manifest. The model replies are
  the spec's scripts when its phases ran on scripted models; else every model call's reply from the
  phases' step journals (tool-call turns included), which the bundle carries (``journals``).
- :func:`write_bundle` / :func:`read_bundle`: gzip'd JSON, ``format: mother-replay:v1``; another
  format, or a file that is not a bundle, is refused in one line.
- :func:`story`: why the run stopped, what was suggested, which artifacts existed, and how it got
  there.
- :func:`replay`: submits the run again (a new run id, ``metadata.replay_of``): by default its
  phases on the scripted model with the recorded replies, so the same termination and counters come
  out; with ``model`` every phase on that model (the spec's "retry with escalation"). The recorded
  decisions on gates are made again, in order, by the same actors; a run the original's user
  cancelled is cancelled once it runs.
"""

from __future__ import annotations

import gzip
import io
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, ValidationError

from mother import keys
from mother.client import MotherClient
from mother.errors import InvalidSpec, NotFound
from mother.functions import server_now_ms
from mother.observe.timeline import clock_text, duration_text, suggestion_text, usd
from mother.records.budgets import budget_view
from mother.records.results import read_result
from schemas import (
    ConflictResolution,
    Gate,
    Id,
    RunSpec,
    RunState,
    TerminationRecord,
    describe_validation_error,
    iso_from_ms,
)
from schemas.artifact import ArtifactMetadata
from schemas.journal import chain

__all__ = [
    "BUNDLE_FORMAT",
    "COUNTERS",
    "ReplayOutcome",
    "export",
    "read_bundle",
    "replay",
    "replay_spec",
    "story",
    "write_bundle",
]

BUNDLE_FORMAT = "mother-replay:v1"
# the counters a faithful replay reproduces
COUNTERS = ("model_calls", "tool_calls", "input_tokens", "output_tokens", "retrieval_queries")
# the activity entries that moved the run's budget
BUDGET_EVENTS = ("budget_warning", "budget_refused", "budget_exhausted", "budget_stopped")
MAX_BUNDLE_BYTES = 256 * 1024 * 1024


def export(client: MotherClient, run_id: str) -> dict[str, Any]:
    """The run as a bundle (a plain mapping, ready for :func:`write_bundle`)."""
    view = client.inspect(run_id, context_text=True)
    run, activity = view["run"], view["activity"]
    envelope = read_result(client.redis, run_id)
    journals = _journals(client, run_id, len(run["spec"]["pipeline"]))
    return {
        "format": BUNDLE_FORMAT,
        "exported_at": iso_from_ms(server_now_ms(client.redis)),
        "run_id": run_id,
        "spec": run["spec"],
        "run": run,
        "replies": recorded_replies(client, run, journals),
        "journals": {str(i): [orjson.loads(e) for e in steps] for i, steps in journals.items()},
        "contexts": view["contexts"],
        "summaries": view["summaries"],
        "conflicts": view["conflicts"],
        "gates": run.get("gates") or [],
        "budget": view["budget"],
        "budget_timeline": [e for e in activity if e.get("type") in BUDGET_EVENTS],
        "timeline": view["timeline"],
        "termination": view["termination"],
        "result": envelope.to_dict() if envelope is not None else None,
        "artifacts": view["artifacts"],
        "activity": activity,
    }


def _journals(client: MotherClient, run_id: str, phases: int) -> dict[int, list[str]]:
    """Each phase's step journal as recorded (its elements' JSON texts), for the phases that have one."""
    pipe = client.redis.pipeline(transaction=False)
    for index in range(phases):
        pipe.lrange(keys.journal_key(run_id, index), 0, -1)
    return {i: steps for i, steps in enumerate(pipe.execute()) if steps}


def recorded_replies(
    client: MotherClient, run: dict[str, Any], journals: dict[int, list[str]] | None = None
) -> dict[str, Any]:
    """The replies a replay gives each role: the spec's scripts when every phase ran on a scripted
    model; else every model call's reply from the phases' journals, tool-call turns included (each
    phase's last chain of steps, in order); else, for a run recorded before journals, each role's final
    replies rebuilt from its results."""
    spec = run["spec"]
    models = client.settings.models
    scripted = all(
        p["model"] in models and models[p["model"]].provider == "scripted" for p in spec["pipeline"]
    )
    if scripted and spec.get("scripts"):
        return {"source": "scripts", "scripts": spec["scripts"]}
    roles = {i: p["role"] for i, p in enumerate(spec["pipeline"])}
    if journals:
        return {"source": "journal", "scripts": _journal_scripts(roles, journals)}
    scripts: dict[str, list[dict[str, Any]]] = {}
    for result in run.get("results") or []:
        role = roles.get(result.get("phase_index"), "")
        if not role or result.get("status") != "completed":
            continue
        reply: dict[str, Any] = {
            "text": result.get("output") or "",
            "confidence": result.get("confidence") or 0.0,
            "evidence_count": result.get("evidence_count") or 0,
        }
        usage = result.get("usage") or {}
        reply["usage"] = {
            "input_tokens": usage.get("input_tokens") or 0,
            "output_tokens": usage.get("output_tokens") or 0,
        }
        verdict = result.get("verdict")
        if verdict:
            reply["verdict"] = verdict.get("decision")
        if result.get("findings"):
            reply["findings"] = result["findings"]
        scripts.setdefault(role, []).append(reply)
    return {"source": "results", "scripts": scripts}


def _journal_scripts(roles: dict[int, str], journals: dict[int, list[str]]) -> dict[str, Any]:
    """Each role's scripted replies: every model call of its phases' last chains, in order."""
    scripts: dict[str, list[dict[str, Any]]] = {}
    for index in sorted(journals):
        steps = chain(journals[index], "", keep_complete=True)
        for number in sorted(steps.sent):
            done = steps.done(number)
            if done is None or done.kind != "model" or done.reply is None:
                continue
            reply = done.reply
            scripted: dict[str, Any] = {
                "usage": {"input_tokens": reply.input_tokens, "output_tokens": reply.output_tokens},
                "tool_calls": [
                    {
                        "name": c.name,
                        "arguments": c.arguments if isinstance(c.arguments, dict) else {},
                    }
                    for c in reply.tool_calls
                ],
            }
            if reply.text is not None:
                scripted["text"] = reply.text
            for name in ("confidence", "evidence_count", "verdict", "winner"):
                if getattr(reply, name) is not None:
                    scripted[name] = getattr(reply, name)
            if reply.findings:
                scripted["findings"] = reply.findings
            scripts.setdefault(roles.get(index, ""), []).append(scripted)
    return scripts


def write_bundle(bundle: dict[str, Any], path: Path) -> int:
    """Write ``bundle`` gzip'd to ``path`` (``-``: not allowed, a bundle is binary); its size."""
    data = gzip.compress(orjson.dumps(bundle), compresslevel=6)
    path.write_bytes(data)
    return len(data)


def read_bundle(path: Path) -> dict[str, Any]:
    """A bundle from ``path``; one-line errors for a missing file, one that is not a gzip'd JSON
    bundle, or a bundle of another format."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise NotFound(f"no bundle at {path}") from None
    except OSError as exc:
        raise InvalidSpec(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        # read at most one byte past the limit: a small file that unpacks to gigabytes stops there
        if raw[:2] == b"\x1f\x8b":
            with gzip.GzipFile(fileobj=io.BytesIO(raw)) as unpacked:
                text = unpacked.read(MAX_BUNDLE_BYTES + 1)
        else:
            text = raw
    except (OSError, EOFError) as exc:
        raise InvalidSpec(f"{path} is not a gzip'd bundle ({exc})") from None
    if len(text) > MAX_BUNDLE_BYTES:
        raise InvalidSpec(f"{path} is over {MAX_BUNDLE_BYTES} bytes unpacked; not a bundle of ours")
    try:
        bundle = orjson.loads(text)
    except orjson.JSONDecodeError:
        raise InvalidSpec(f"{path} is not a replay bundle (not JSON)") from None
    fmt = bundle.get("format") if isinstance(bundle, dict) else None
    if fmt != BUNDLE_FORMAT:
        raise InvalidSpec(
            f"{path} is a bundle of format {fmt!r}; this version reads {BUNDLE_FORMAT!r} "
            "(export the run again with this version)"
        )
    for needed in ("spec", "run", "termination", "replies"):
        if needed not in bundle:
            raise InvalidSpec(
                f"{path} lacks {needed!r}: it is not a complete {BUNDLE_FORMAT} bundle"
            )
    try:
        _Bundle.model_validate(bundle)
    except ValidationError as exc:
        raise InvalidSpec(
            f"{path} is not a well-formed {BUNDLE_FORMAT} bundle: {describe_validation_error(exc)}"
        ) from None
    return bundle


class _Replies(BaseModel):
    source: Literal["scripts", "results", "journal"]
    scripts: dict[str, Any]


class _Bundle(BaseModel):
    """What :func:`story` and :func:`replay_spec` read of a bundle, checked before they read it (a bundle
    edited by hand, or cut short, is refused in one line instead of failing half way)."""

    model_config = ConfigDict(extra="allow")

    run_id: Id
    spec: RunSpec
    run: RunState
    termination: TerminationRecord | None
    replies: _Replies
    conflicts: list[ConflictResolution] = []
    gates: list[Gate] = []
    artifacts: list[ArtifactMetadata] = []
    budget: dict[str, Any] = {}
    activity: list[dict[str, Any]] = []


def _attempt_lines(run: dict[str, Any], tl: dict[str, Any]) -> list[str]:
    """Every attempt of every phase, failed and lost ones too (the bundle's timeline), with its times,
    tokens, cost and error, and the accepted ones' verdict and output; then the run's cost and waits.
    A bundle without a timeline tells the accepted results alone."""
    accepted = {(r.get("phase"), r.get("attempt")): r for r in run.get("results") or []}
    lines: list[str] = []
    for a in tl.get("attempts") or []:
        result = accepted.get((a.get("phase"), a.get("attempt"))) or accepted.get(
            (str(a.get("phase") or "").split(".")[0], a.get("attempt"))
        )
        verdict = ((result or {}).get("verdict") or {}).get("decision")
        line = (
            f"  {a.get('phase')} attempt {a.get('attempt')}: {a.get('status')}"
            + (f" at {clock_text(a['started_at'])}" if a.get("started_at") else "")
            + (f", ran {duration_text(a.get('run_ms'))}" if a.get("run_ms") is not None else "")
            + f", {a.get('input_tokens', 0)}/{a.get('output_tokens', 0)} tokens, "
            f"{usd(a.get('spend_micro_usd'))}"
            + (f", on {a['worker']}" if a.get("worker") else "")
            + (f", verdict {verdict}" if verdict else "")
            + (
                f", handled by {result['handled_by']}"
                if result and result.get("handled_by")
                else ""
            )
        )
        if a.get("error"):
            line += f"; error: {str(a['error'])[:200]}"
        elif result and result.get("output"):
            line += f": {result['output'][:120]!r}"
        lines.append(line)
    if not tl.get("attempts"):
        for result in run.get("results") or []:
            usage = result.get("usage") or {}
            lines.append(
                f"  {result['phase']} attempt {result.get('attempt')}: {result.get('status')}, "
                f"{usage.get('input_tokens', 0)}/{usage.get('output_tokens', 0)} tokens"
                + (f": {result['output'][:120]!r}" if result.get("output") else "")
            )
    cost = tl.get("cost") or {}
    if cost:
        lines.append(
            f"cost: {cost.get('spend_usd')}, {cost.get('total_tokens')} tokens "
            f"({cost.get('input_tokens')} in, {cost.get('output_tokens')} out), "
            f"{cost.get('model_calls')} model calls, {cost.get('tool_calls')} tool calls"
        )
        lines.append(
            f"took {duration_text(tl.get('duration_ms'))}: before its first phase "
            f"{duration_text(tl.get('admission_wait_ms'))}, in worker queues "
            f"{duration_text(tl.get('queue_wait_ms'))}, for people {duration_text(tl.get('gate_wait_ms'))}"
            f", model {duration_text(tl.get('model_ms'))}, tools {duration_text(tl.get('tool_ms'))}, "
            f"{tl.get('retries', 0)} retries"
        )
    return lines


def story(bundle: dict[str, Any]) -> list[str]:
    """The run told in lines: what it was, each phase's attempts, conflicts and decisions, why it
    stopped, what was suggested, and the artifacts at its end."""
    run, spec, t = bundle["run"], bundle["spec"], bundle["termination"] or {}
    lines = [f"run {bundle['run_id']} of {run.get('user_id')}: {spec.get('task', '')[:200]}"]
    lines.append(
        "phases: "
        + " -> ".join(f"{p['name']} ({p['role']} on {p['model']})" for p in spec["pipeline"])
    )
    lines += _attempt_lines(run, bundle.get("timeline") or {})
    for c in bundle.get("conflicts") or []:
        lines.append(
            f"conflict {c['conflict_id']} ({c['conflict_type']}): "
            f"{c.get('strategy_applied') or 'nothing'} -> {c.get('final_decision') or c.get('status')}"
            f": {c.get('rationale') or ''}"[:300]
        )
    for g in bundle.get("gates") or []:
        d = g.get("decision") or {}
        lines.append(
            f"gate {g['gate_id']} ({g['kind']}: {g['subject']}): {d.get('decision')} by "
            f"{d.get('actor')} ({d.get('reason') or 'no reason'}) at {d.get('at')}"
        )
    budget = bundle.get("budget") or {}
    lines.append(
        "budget used: " + ", ".join(f"{k} {budget.get(k, 0)}" for k in COUNTERS if k in budget)
    )
    lines.append(f"stopped: {t.get('reason')} in phase {t.get('phase_at_termination')}")
    lines.append(f"why: {t.get('details')}")
    for factor in t.get("contributing_factors") or []:
        lines.append(f"  factor: {factor}")
    lines.append(
        f"next: {suggestion_text(t.get('reason'), t.get('suggested_action'), t.get('can_retry'))}"
    )
    artifacts = bundle.get("artifacts") or []
    lines.append(
        "artifacts at termination: "
        + (
            ", ".join(
                f"{a['artifact_id']} ({a.get('phase')}, {a.get('size_bytes')} bytes, {a.get('status')})"
                for a in artifacts
            )
            or "none"
        )
    )
    lines.append(
        f"replies recorded from {bundle['replies']['source']}"
        + (
            " (final replies only: a real model's tool-call turns are not kept)"
            if bundle["replies"]["source"] == "results"
            else ""
        )
    )
    return lines


def replay_spec(bundle: dict[str, Any], model: str | None = None) -> dict[str, Any]:
    """The spec a replay submits: a new run id, ``metadata.replay_of``, the recorded replies; every
    phase on ``model`` when given, else on the scripted model where the replies were rebuilt from
    journals or results (scripts recorded as the spec's stay as they were)."""
    spec = orjson.loads(orjson.dumps(bundle["spec"]))
    original = bundle["run_id"]
    spec["run_id"] = f"replay-{uuid.uuid4().hex[:12]}"
    spec.pop("parent_run_id", None)
    spec["metadata"] = {**(spec.get("metadata") or {}), "replay_of": original}
    spec["scripts"] = bundle["replies"]["scripts"]
    if model is not None:
        for phase in spec["pipeline"]:
            phase["model"] = model
    elif bundle["replies"]["source"] in ("results", "journal"):
        # the phases that ran answer through the scripted model; one that never reached its model
        # (refused before it) keeps its own, so the same refusal comes out
        ran = {r.get("phase_index") for r in bundle["run"].get("results") or []}
        for index, phase in enumerate(spec["pipeline"]):
            if index in ran:
                phase["model"] = "scripted"
    return spec


@dataclass
class ReplayOutcome:
    run_id: str
    reason: str
    expected: str
    counters: dict[str, Any]
    recorded: dict[str, Any]
    decisions: list[str] = field(default_factory=list)

    @property
    def same_reason(self) -> bool:
        return self.reason == self.expected

    @property
    def same_counters(self) -> bool:
        return all(self.counters.get(k, 0) == self.recorded.get(k, 0) for k in COUNTERS)


def replay(
    client: MotherClient,
    bundle: dict[str, Any],
    *,
    model: str | None = None,
    timeout: float = 300.0,
    on_event: Callable[[str], None] | None = None,
) -> ReplayOutcome:
    """Run the bundle again and wait for its end: the recorded gate decisions are made again in order
    (an ``expire`` is waited out), and a run its user cancelled is cancelled once it runs."""
    say = on_event or (lambda _text: None)
    spec = replay_spec(bundle, model)
    run_id = client.submit(spec)
    say(f"submitted {run_id} (replay of {bundle['run_id']})")
    decisions = [g["decision"] for g in bundle.get("gates") or [] if g.get("decision")]
    cancel = (bundle["termination"] or {}).get("reason") == "user_cancelled"
    made: list[str] = []
    recorded = {k: (bundle.get("budget") or {}).get(k, 0) for k in COUNTERS}
    # when the replay was first seen running (a cancel waits until it has done what the original had)
    running: list[float] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            state = client.status(run_id)
        except NotFound:
            time.sleep(0.05)
            continue
        if state.status == "terminated":
            break
        if cancel and state.status == "running" and _caught_up(client, run_id, recorded, running):
            client.cancel(run_id, actor="replay", reason=f"replay of {bundle['run_id']}")
            made.append("cancel")
            say("cancelled it, as its original was")
            cancel = False
        gate = state.gate if state.status == "waiting" else None
        # no decision left, or an expiry: the gate runs out as the original's did
        if gate is not None and gate.decision is None and decisions:
            if decisions[0]["decision"] != "expire":
                made.append(_decide_again(client, run_id, decisions.pop(0)))
                say(f"{made[-1]}, as in the original")
            elif gate.deadline_ms and server_now_ms(client.redis) > gate.deadline_ms:
                decisions.pop(0)
        time.sleep(0.1)
    envelope = client.wait(run_id, max(1.0, deadline - time.monotonic()))
    budget = budget_view(client.redis, run_id) or {}
    return ReplayOutcome(
        run_id,
        envelope.termination.reason if envelope.termination is not None else "not ended",
        (bundle["termination"] or {}).get("reason", ""),
        {k: budget.get(k, 0) for k in COUNTERS},
        recorded,
        made,
    )


def _decide_again(client: MotherClient, run_id: str, d: dict[str, Any]) -> str:
    """Make a recorded decision (approve, deny, answer) again, by the same actor; what was done."""
    reason = f"replay: {d.get('reason') or ''}"[:500]
    if d["decision"] == "approve":
        client.approve(run_id, actor=d["actor"], reason=reason)
    elif d["decision"] == "deny":
        client.deny(run_id, actor=d["actor"], reason=reason)
    else:
        client.answer(run_id, d.get("answer") or "", actor=d["actor"], reason=reason)
    return f"{d['decision']} by {d['actor']}"


def _caught_up(
    client: MotherClient, run_id: str, recorded: dict[str, Any], running: list[float]
) -> bool:
    """Whether a run to be cancelled has done what its original had when it was cancelled (its
    counters reached the recorded ones), or has run 10 s trying."""
    if not running:
        running.append(time.monotonic())
    budget = budget_view(client.redis, run_id) or {}
    done = all(budget.get(k, 0) >= v for k, v in recorded.items())
    return done or time.monotonic() - running[0] > 10
