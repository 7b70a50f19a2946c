"""``MotherClient``: submit runs, watch them, cancel them, read their records.

The client is who its connection's Redis user is. A principal (``mother principals add``) submits on
its own stream and commands on its own command stream: a raw ``XADD mother:submissions:NAME '*' spec
'<json>'`` with its credentials is equivalent to :meth:`MotherClient.submit`, which only validates
earlier and picks a run_id when the spec has none. Mother's own credentials (and the embedded
development server's default user) use ``mother:submissions`` and ``mother:commands``.
"""

from __future__ import annotations

import functools
import inspect
import math
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import orjson
import redis
from pydantic import ValidationError

from mother import keys
from mother.budget import append_submission, audit_fields
from mother.config import Settings, load_settings
from mother.connection import connect, mother_error, redis_down
from mother.errors import (
    GateRefused,
    InvalidSpec,
    MotherError,
    NoSuchRun,
    NotFound,
    PolicyViolation,
    RateLimited,
    RedisUnavailable,
    WaitTimeout,
    not_utf8,
)
from mother.functions import server_now_ms
from mother.gates.build import check_decision, gate_waited_on
from mother.identities.who import may_act_on, principal_of, why_not
from mother.records import parse_run_record, runs
from mother.records.budgets import published_limits
from mother.records.rejections import read_rejection_for
from mother.records.results import read_result
from mother.specs import check_faults, check_libraries, check_models, check_scripts
from mother.streams import group_backlog
from mother.yamlfile import YamlProblem, file_text, parse_yaml, read_yaml
from schemas import (
    ACTIVE_STATUSES,
    MAX_SPEC_BYTES,
    Gate,
    ResultEnvelope,
    RunSpec,
    RunState,
    describe_validation_error,
    iso_from_ms,
    ms_from_iso,
)
from schemas.principal import Principal

if TYPE_CHECKING:
    from mother.observe.listing import Page, RunQuery

__all__ = [
    "SERVICE_VIEWER",
    "Cancelled",
    "MotherClient",
    "error_from",
    "gate_command",
    "load_spec_file",
    "parse_spec",
    "waiting_row",
]

# wait() says when Mother has not taken a run in after this long
INTAKE_NOTICE_SECONDS = 3.0
# ... and when a phase attempt's job has sat queued, no worker starting it, this long
QUEUE_NOTICE_SECONDS = 10.0
# on mother:commands: what people ask of Mother
COMMAND_CANCEL = "cancel"
# ... and their decisions on gates (mother.gates.decide); Mother replies on mother:reply:{entry}
GATE_COMMANDS = ("approve", "deny", "answer")
# how long Mother keeps a reply to a command
REPLY_TTL_SECONDS = 3600
# the longest a reply is blocked on at once (a connection's read times out past about 5 s)
REPLY_BLOCK_SECONDS = 2.0
# on mother:events: what workers report
EVENT_PHASE_RESULT = "phase_result"


def parse_spec(spec: RunSpec | dict[str, Any] | str | bytes) -> RunSpec:
    """Validate a spec given as a model, a mapping, or JSON text; one-line ``InvalidSpec`` otherwise."""
    if isinstance(spec, RunSpec):
        return spec
    raw = spec.encode(errors="surrogatepass") if isinstance(spec, str) else spec
    if isinstance(raw, bytes) and len(raw) > MAX_SPEC_BYTES:
        raise InvalidSpec(f"spec is {len(raw)} bytes; the limit is {MAX_SPEC_BYTES} bytes")
    try:
        if isinstance(raw, bytes):
            return RunSpec.from_json(raw)
        if isinstance(spec, dict):
            return RunSpec.model_validate(spec)
    except ValidationError as exc:
        raise InvalidSpec(f"invalid RunSpec: {describe_validation_error(exc)}") from None
    # from_json's "not valid JSON": text that is not UTF-8 is named as such (orjson says only
    # 'str is not valid UTF-8')
    except ValueError as exc:
        raise InvalidSpec(
            f"invalid RunSpec: {(isinstance(raw, bytes) and _not_text(raw)) or exc}"
        ) from None
    raise InvalidSpec(
        f"a spec must be a RunSpec, a mapping or JSON text, not {type(spec).__name__}"
    )


def _not_text(raw: bytes) -> str | None:
    """Where text that failed to parse is not UTF-8, if it is not (looked for only after a failure)."""
    try:
        raw.decode()
    except UnicodeDecodeError as exc:
        return f"{not_utf8(raw, exc)}; send UTF-8 JSON"
    return None


def load_spec_file(path: Path) -> dict[str, Any]:
    """Read a YAML or JSON spec file; a ``script_file`` key is inlined as ``scripts``."""
    try:
        text = file_text(path)
    except YamlProblem as exc:
        raise InvalidSpec(f"spec file {exc}") from None
    return load_spec_text(text, str(path), path.parent)


def load_spec_text(text: str | bytes, source: str, base: Path) -> dict[str, Any]:
    """A YAML or JSON spec read from ``source`` (a file, or standard input); a ``script_file`` key,
    relative to ``base``, is inlined as ``scripts``."""
    try:
        data = parse_yaml(text, source)
    except YamlProblem as exc:
        raise InvalidSpec(str(exc)) from None
    if data is None:
        raise InvalidSpec(f"{source} is empty; it must hold a RunSpec")
    if not isinstance(data, dict):
        raise InvalidSpec(f"{source} must hold a mapping (a RunSpec), not {type(data).__name__}")
    script_file = data.pop("script_file", None)
    if script_file is not None:
        script_path = (base / str(script_file)).resolve()
        try:
            scripts = read_yaml(script_path)
        except YamlProblem as exc:
            raise InvalidSpec(f"script_file {exc}") from None
        if not isinstance(scripts, dict):
            raise InvalidSpec(f"script_file {script_path} must map role -> list of replies")
        data["scripts"] = {**scripts, **data.get("scripts", {})}
    return data


def check_timeout(timeout: Any) -> None:
    """A wait's timeout: None (wait for good) or a finite number of seconds, 0 or more."""
    if timeout is not None and (
        isinstance(timeout, bool)
        or not isinstance(timeout, int | float)
        or not math.isfinite(timeout)
        or timeout < 0
    ):
        raise InvalidSpec(
            f"timeout must be a finite number of seconds, 0 or more (omit it to wait until the run ends), got {timeout!r}"
        )


def waiting_row(state: RunState, viewer: str | None = None) -> dict[str, Any]:
    """What a listing shows of a run waiting for a person, and the command that decides it, for
    ``viewer`` (:func:`gate_command`)."""
    gate = state.gate
    assert gate is not None
    return {
        "run_id": state.run_id,
        "user": state.user_id,
        "phase": gate.phase,
        "gate_id": gate.gate_id,
        "kind": gate.kind,
        "subject": gate.subject,
        "question": gate.question,
        "approvers": gate.approvers,
        "since": gate.opened_at,
        "deadline": gate.deadline,
        "digest": gate.digest,
        "command": gate_command(state.run_id, gate, viewer),
    }


# gate_command's viewer that connects with Mother's own credentials (it names the actor itself)
SERVICE_VIEWER = "\0service"


def gate_command(run_id: str, gate: Gate, viewer: str | None = None) -> str:
    """The command that decides ``gate``, as it works for ``viewer``: a principal's name (it decides as
    itself, so no ``--actor``; one the gate does not name is told who may), SERVICE_VIEWER (Mother's own
    credentials: ``--actor`` names who decides), or None (someone reading a page: the command each
    approver runs with its own credentials)."""
    who = gate.approvers[0] if gate.approvers else "YOU"
    actor = f" --actor {who}" if viewer == SERVICE_VIEWER else ""
    if gate.kind == "input":
        command = (
            f"mother answer {run_id}{actor} --text '...' (or mother approve / mother deny "
            f"{run_id}{actor} --reason '...')"
        )
    else:
        command = f"mother approve {run_id}{actor} --reason '...' (or mother deny)"
    if viewer == SERVICE_VIEWER:
        return command
    if viewer is not None and (not gate.approvers or viewer in gate.approvers):
        return command
    named = ", ".join(gate.approvers) if gate.approvers else "a principal granted approve"
    return f"as {named}, with its own credentials: {command}"


def error_from(reply: dict[str, Any]) -> MotherError:
    """The error a reply of Mother's names (code, message and its details), as raised here."""
    code, message = reply.get("code"), str(reply.get("message", "Mother refused the command"))
    if code == "gate_refused":
        return GateRefused(message, why=str(reply.get("why", "")))
    if code == "invalid_spec":
        return InvalidSpec(message, field=reply.get("field"))
    if code == "not_found":
        return NotFound(message)
    if code == "policy_violation":
        return PolicyViolation(message)
    return MotherError(message)


@dataclass
class Cancelled:
    """What a bulk cancel did: runs asked to end, runs that had ended already, runs Mother refused
    (their one-line reasons)."""

    requested: list[str] = field(default_factory=list)
    ended: list[str] = field(default_factory=list)
    refused: dict[str, str] = field(default_factory=dict)


class MotherClient:
    """Talks to Mother through Redis only; safe to use from many processes."""

    def __init__(
        self,
        url: str | None = None,
        *,
        settings: Settings | None = None,
        client: redis.Redis | None = None,
    ):
        self.settings = settings or load_settings(**({"redis_url": url} if url else {}))
        self.redis = client or connect(url or self.settings.redis_url)
        # who this connection is: its principal (None: Mother's own credentials), asked once
        self._principal: Principal | bool | None = False
        # who reads what it prints (viewer()), asked once
        self._viewer: str | None = None

    @classmethod
    def signed_in(cls, settings: Settings, name: str, password: str) -> MotherClient:
        """A client that is principal ``name``, its ``password`` checked by Redis (authenticating as it):
        PolicyViolation in one line for a wrong name or password, or a name that is not a principal's;
        RedisUnavailable when Redis cannot be reached."""
        from mother.identities import party_url

        url = party_url(settings.redis_url, name, password)
        try:
            made = cls(settings=settings.model_copy(update={"redis_url": url}))
            principal = made.principal
        except RedisUnavailable as exc:
            if not exc.refused:
                raise
            raise PolicyViolation("wrong principal name or password") from None
        if principal is None or principal.name != name:
            made.redis.close()
            raise PolicyViolation(f"{name} is not a principal: sign in with a principal's name")
        return made

    @property
    def principal(self) -> Principal | None:
        """The principal this connection's Redis user is, or None (Mother's own user, the embedded
        server's default user, an administrator's)."""
        if self._principal is False:
            self._principal = principal_of(self.redis)
        return self._principal  # type: ignore[return-value]

    def _streams(self) -> tuple[str, str]:
        """Where this client submits and commands."""
        me = self.principal
        if me is None:
            return keys.SUBMISSIONS_STREAM, keys.COMMANDS_STREAM
        return keys.principal_submissions_key(me.name), keys.principal_commands_key(me.name)

    # -- submit ----------------------------------------------------------
    def submit(self, spec: RunSpec | dict[str, Any] | str | bytes) -> str:
        """Validate and append to this client's submissions stream; return the run_id. Mother takes it
        in (its run_id claimed, the user's rate window counted, the queue measured); a refusal there is
        a rejection record, which :meth:`status` and :meth:`wait` raise (RateLimited, InvalidSpec)."""
        parsed = parse_spec(spec)
        if parsed.run_id is None:
            parsed = parsed.model_copy(update={"run_id": f"run-{uuid.uuid4().hex[:16]}"})
        payload = parsed.to_json()
        if len(payload) > MAX_SPEC_BYTES:
            raise InvalidSpec(f"spec is {len(payload)} bytes; the limit is {MAX_SPEC_BYTES} bytes")
        check_models(self.settings, parsed)
        check_scripts(self.settings, parsed)
        # what only the deployment knows: its libraries, and whether its Mother lets scripts fail
        check_libraries(self.redis, parsed)
        published = published_limits(self.redis)
        if published is not None:
            check_faults(self.settings, parsed, published.fault_models)
        assert parsed.run_id is not None
        me = self.principal
        if me is not None and not me.submits_for(parsed.user_id):
            raise PolicyViolation(
                f"principal {me.name} may not submit for user {parsed.user_id} (it submits for "
                f"{', '.join([me.name, *me.acts_for])}); Mother would refuse it"
            )
        append_submission(
            self.redis,
            self.settings,
            stream=self._streams()[0],
            payload=payload,
            run_id=parsed.run_id,
            user_id=parsed.user_id,
        )
        return parsed.run_id

    # -- read ------------------------------------------------------------
    def status(self, run_id: str) -> RunState:
        raw = runs.read_raw(self.redis, run_id)
        if raw is None:
            idle = self._intake_idle()
            # read again: Mother may have taken it in since the first look
            if idle:
                raw = runs.read_raw(self.redis, run_id)
            if raw is None:
                raise self._missing(run_id, idle)
        return parse_run_record(run_id, raw)

    def _missing(self, run_id: str, idle: bool) -> MotherError:
        """Why there is no run ``run_id``: InvalidSpec when it was rejected at intake; :class:`NoSuchRun`
        when Mother has taken in every submission (``idle``: none pending or undelivered, so each one
        has its run or its rejection by then) and this one is not among them; a plain NotFound while it
        may still be waiting to be taken in."""
        rejected = self.rejection_for(run_id)
        if rejected:
            why = f"run {run_id} was rejected at intake: {rejected['error']}"
            if rejected.get("code") == "rate_limited":
                return RateLimited(
                    why, retry_after=float(rejected.get("retry_after") or 0), user_id=run_id
                )
            if rejected.get("code") == "identity_refused":
                return PolicyViolation(why)
            return InvalidSpec(why)
        if idle:
            return NoSuchRun(
                f"no run {run_id!r}: Mother has taken in every submission and none is this run "
                "(never submitted, or its records are gone); list runs with `mother runs`"
            )
        return NotFound(
            f"no run {run_id!r}: not submitted, or not taken in yet (is `mother run` running?); "
            "list runs with `mother runs`"
        )

    def _intake_idle(self) -> bool:
        """Whether Mother's consumer group has acknowledged every submission (none pending, none
        undelivered); False when that cannot be told (no group yet, lag unknown)."""
        return group_backlog(
            self.redis, self._streams()[0], self.settings.service.consumer_group
        ) == (0, 0)

    def result(self, run_id: str) -> ResultEnvelope | None:
        """The run's result envelope (with its termination record once it ended), or None."""
        return read_result(self.redis, run_id)

    def rejection_for(self, run_id: str) -> dict[str, Any] | None:
        """The newest rejection naming ``run_id`` (``rejections:by_run`` names its entry), or None."""
        found = read_rejection_for(self.redis, run_id)
        return found.to_dict() if found is not None else None

    def wait(
        self,
        run_id: str,
        timeout: float | None = None,
        *,
        poll: float = 0.1,
        on_progress: Callable[[RunState], None] | None = None,
        on_notice: Callable[[str], None] | None = None,
    ) -> ResultEnvelope:
        """Block until the run has its final ResultEnvelope; ``WaitTimeout`` after ``timeout`` s.

        ``on_notice`` hears, once each, of a wait that is not the run's doing: Redis unreachable
        (a restart, a failover: waited out until it is back or the timeout passes), a run not
        taken in by Mother after ``INTAKE_NOTICE_SECONDS`` (is ``mother run`` running?), or a
        phase attempt whose job no worker has started after ``QUEUE_NOTICE_SECONDS`` (is
        ``mother worker`` running? see :meth:`unstarted`).
        """
        check_timeout(timeout)
        watch = _Watch(self, run_id, on_progress, on_notice)
        deadline = None if timeout is None else watch.started + timeout
        while True:
            # an outage anywhere in a look is waited out
            try:
                envelope = watch.look()
                if envelope is not None:
                    return envelope
            except (redis.RedisError, RedisUnavailable) as exc:
                if not redis_down(exc):
                    raise
                watch.notice(
                    "outage", f"Redis cannot serve ({exc}); still waiting for it to come back"
                )
                if deadline is not None and time.monotonic() >= deadline:
                    raise RedisUnavailable(
                        f"Redis went away while waiting for run {run_id} and is not back after "
                        f"{timeout:g}s ({exc})"
                    ) from None
                time.sleep(max(poll, 0.5))
                continue
            if deadline is not None and time.monotonic() >= deadline:
                # never taken in: say so, not that it "goes on"
                if watch.unknown is not None:
                    raise NotFound(f"{watch.unknown.message} (waited {timeout:g}s)")
                raise WaitTimeout(
                    f"run {run_id} has not ended after {timeout:g}s; it goes on (`mother status {run_id}`)"
                )
            time.sleep(poll)

    def queue_position(self, run_id: str) -> tuple[int, int, int] | None:
        """Where a run waits in the admission queue: (its position from 1, how many wait, how many runs
        run); None when it does not wait there (it started, or was never queued)."""
        pipe = self.redis.pipeline(transaction=False)
        pipe.zrank(keys.ADMISSION_WAITING, run_id)
        pipe.zcard(keys.ADMISSION_WAITING)
        pipe.zcard(keys.RUN_DEADLINES)
        rank, waiting, running = pipe.execute()
        return None if rank is None else (int(rank) + 1, int(waiting), int(running))

    def _since(self, state: RunState) -> float:
        """When (on this process's monotonic clock) the run made its last move (``updated_at``: for a running
        run, its current attempt's dispatch), measured on the server's clock: a wait started late counts
        from the dispatch, not from when it looked. Now, for a run not yet taken in."""
        now = time.monotonic()
        if state.status not in ACTIVE_STATUSES:
            return now
        age_ms = server_now_ms(self.redis) - ms_from_iso(state.updated_at)
        return now - max(0.0, age_ms / 1000)

    def unstarted(self, state: RunState, waited: float) -> str | None:
        """Why the run's current phase attempt has not started, while its RQ job is still queued
        (``waited``: seconds it has been seen so): no live worker host takes it (it waits for one), or
        the host Mother chose has no worker free. None once a worker has it."""
        # here: rq costs the CLI's other commands an import they never need
        from rq.job import Job
        from rq.queue import Queue

        head = f"run {state.run_id}: phase {state.phase} (attempt {state.attempt}) has waited {waited:.0f}s"
        if state.host is None:
            return (
                f"{head} for a worker host, and no live host takes it (enrolled, beating); still "
                "waiting (start one: `mother hosts add NAME`, then `mother worker` with its URL)"
            )
        job_id = keys.phase_job_id(state.host, state.run_id, state.phase_index, state.attempt)
        status, origin = self.redis.hmget(Job.key_for(job_id), ["status", "origin"])
        if status not in ("queued", b"queued"):
            return None
        queue = (origin.decode() if isinstance(origin, bytes) else origin) or ""
        queued = self.redis.llen(Queue.redis_queue_namespace_prefix + queue)
        where = f"{head} for a worker of host {state.host} (queue '{queue}', Mother's choice)"
        if not self.redis.exists(keys.host_alive_key(state.host)):
            return (
                f"{where}, and that host is not beating; still waiting (Mother moves it to another "
                "host once one is live; start one: `mother worker` with a host's URL)"
            )
        return (
            f"{where}: its workers are busy, {queued} job(s) queued; still waiting (more workers: "
            "`mother worker --concurrency N`, or another host)"
        )

    # -- act -------------------------------------------------------------
    def cancel(
        self, run_id: str, actor: str | None = None, reason: str = "cancelled by user"
    ) -> RunState:
        """Ask Mother to end the run ``user_cancelled``; returns the run as it was. A run that has
        already ended is left as it is (no request is sent): check the returned ``status``."""
        audit = audit_fields(self.actor_for(actor) or "user", reason)
        # NotFound for an unknown id
        state = self.status(run_id)
        if state.status == "terminated":
            return state
        entry_id = self.send_command(COMMAND_CANCEL, {"run_id": run_id, **audit})
        if self.principal is not None:
            # Mother says whether this principal may cancel it; a slow one has it queued
            try:
                self.command_reply(entry_id, self.settings.gates.reply_seconds)
            except WaitTimeout:
                return state
        return state

    def approve(
        self,
        run_id: str,
        *,
        actor: str | None = None,
        reason: str,
        gate_id: str | None = None,
        digest: str | None = None,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """Approve what the run waits for (a phase to start, a tool call, a conflict's work): the run goes
        on. ``digest``: approve only if the gate asks for exactly that content. Returns Mother's reply;
        GateRefused (changing nothing) when the run does not wait on that gate, its deadline passed, the
        actor may not decide it, or the digest differs."""
        return self._decide("approve", run_id, actor, reason, gate_id, digest, None, timeout)

    def deny(
        self,
        run_id: str,
        *,
        actor: str | None = None,
        reason: str,
        gate_id: str | None = None,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """Deny what the run waits for: it ends ``approval_denied``."""
        return self._decide("deny", run_id, actor, reason, gate_id, None, None, timeout)

    def answer(
        self,
        run_id: str,
        text: str,
        *,
        actor: str | None = None,
        reason: str = "",
        gate_id: str | None = None,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """Answer the question the run waits on (a conflict's): the work is accepted and ``text`` joins
        the context of every later phase (a required part of it)."""
        return self._decide("answer", run_id, actor, reason, gate_id, None, text, timeout)

    def _decide(
        self,
        kind: str,
        run_id: str,
        actor: Any,
        reason: Any,
        gate_id: str | None,
        digest: str | None,
        text: Any,
        timeout: float | None,
    ) -> dict[str, Any]:
        """Check what can be checked here (one-line errors, nothing sent), send the decision on
        ``mother:commands`` and wait for Mother's reply (its checks are the ones that count: atomic, on
        the server)."""
        actor = self.actor_for(actor)
        check_decision(kind, actor, reason, text)
        check_timeout(timeout)
        keys.check_id(run_id, "run_id")
        state = self.status(run_id)
        me = self.principal
        if me is not None and not may_act_on(me, state):
            raise GateRefused(why_not(me, state, kind), why="not_allowed")
        gate = gate_waited_on(state, gate_id, actor)
        # the decision names its gate and what it decides (Mother refuses one that does not)
        payload = {
            "run_id": run_id,
            "gate_id": gate.gate_id,
            "actor": actor,
            "reason": reason,
            "digest": digest if digest is not None else gate.digest,
        }
        if text is not None:
            payload["text"] = text
        entry_id = self.send_command(kind, payload)
        return self.command_reply(entry_id, timeout or self.settings.gates.reply_seconds)

    def command_reply(self, entry_id: str, timeout: float) -> dict[str, Any]:
        """Mother's reply to the command ``entry_id``: what it did, or the one-line error it refused it
        with (raised). WaitTimeout when no Mother replied in ``timeout`` seconds (the command stays queued
        and is taken when one runs)."""
        me = self.principal
        key = (
            keys.principal_reply_key(me.name, entry_id)
            if me is not None
            else keys.command_reply_key(entry_id)
        )
        deadline = time.monotonic() + max(0.01, timeout)
        got = None
        while got is None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise WaitTimeout(
                    f"queued, Mother has not confirmed yet: no reply within {timeout:g}s (is "
                    f"`mother run` running?); the command {entry_id} is taken when one runs: see "
                    "`mother status`"
                )
            # in short blocks: the connection's socket gives up on a read past a few seconds
            got = self.redis.blpop([key], timeout=max(0.01, min(left, REPLY_BLOCK_SECONDS)))
        reply = orjson.loads(cast("list[str]", got)[1])
        if reply.get("ok"):
            return {k: v for k, v in reply.items() if k != "ok"}
        raise error_from(reply)

    def viewer(self) -> str | None:
        """Who reads what this client shows, for the decide commands it prints
        (:func:`gate_command`): its principal's name; None for the dashboard's user (the people reading
        its pages each decide with their own credentials); SERVICE_VIEWER for Mother's own."""
        if self.principal is not None:
            return self.principal.name
        if self._viewer is None:
            from mother.acl import whoami

            self._viewer = "" if whoami(self.redis) == "dashboard" else SERVICE_VIEWER
        return self._viewer or None

    def waiting(self, limit: int = 50) -> list[dict[str, Any]]:
        """The runs that wait for a person, the longest waiting first: run_id, user, what it waits for
        (gate, kind, subject, question), who may decide, since and deadline."""
        ids = cast("list[str]", self.redis.zrange(keys.RUNS_WAITING, 0, limit - 1))
        pipe = self.redis.pipeline(transaction=False)
        for run_id in ids:
            runs.queue_read(pipe, run_id)
        rows = []
        for run_id, raw in zip(ids, pipe.execute(raise_on_error=False) if ids else [], strict=True):
            if not raw or isinstance(raw, Exception):
                continue
            state = parse_run_record(run_id, raw)
            if state.gate is None or state.status != "waiting":
                continue
            # a principal is shown what it may decide
            if self.principal is not None and not may_act_on(self.principal, state):
                continue
            rows.append(waiting_row(state, self.viewer()))
        return rows

    def inspect(
        self, run_id: str, *, context_text: bool = False, activity: int | None = None
    ) -> dict[str, Any]:
        """Everything about a run: state, termination, budget, artifacts, conflicts, its phases'
        context manifests (with their sections' text when ``context_text``) and summaries, its activity
        (its own stream: every entry, or the newest ``activity`` of them), and since when its end has waited to be applied (``end_pending_since``:
        its Mother died between its record and the rest). What ``mother inspect RUN`` prints, the
        dashboard's run page shows and a replay bundle holds."""
        from mother.activity import recent
        from mother.observe.timeline import timeline
        from mother.records.artifacts import read_artifact_meta
        from mother.records.budgets import budget_view
        from mother.records.conflicts import read_conflicts
        from mother.records.results import read_termination

        state = self.status(run_id)
        r = self.redis
        out: dict[str, Any] = {"run": state.to_dict()}
        record = read_termination(r, run_id)
        out["termination"] = record.to_dict() if record is not None else None
        out["budget"] = budget_view(r, run_id)
        # its artifacts, then those a conflict set aside (a rejecting review, replaced work)
        out["artifacts"] = read_artifact_meta(
            r, list(dict.fromkeys([*state.artifacts, *state.superseded_artifacts]))
        )
        out["conflicts"] = [c.to_dict() for c in read_conflicts(r, state.conflicts)]
        out["contexts"], out["summaries"] = self._contexts(state, context_text)
        count = keys.RUN_ACTIVITY_MAXLEN if activity is None else activity
        out["activity"] = [e.to_dict() for e in recent(r, count, run_id=run_id)]
        out["timeline"] = timeline(
            out["run"], out["activity"], out["budget"], now=iso_from_ms(server_now_ms(r))
        )
        # its record is written, the rest of its end not yet applied
        pending = r.zscore(keys.RUNS_ENDING, run_id)
        out["end_pending_since"] = iso_from_ms(int(pending)) if pending is not None else None
        return out

    def timeline(self, run_id: str) -> dict[str, Any]:
        """The run's timeline (every attempt's times, waits, tokens and cost) from what any principal
        reads: its record, its own activity, its budget."""
        from mother.activity import recent
        from mother.observe.timeline import timeline
        from mother.records.budgets import budget_view

        state = self.status(run_id)
        activity = [
            e.to_dict() for e in recent(self.redis, keys.RUN_ACTIVITY_MAXLEN, run_id=run_id)
        ]
        budget = budget_view(self.redis, run_id)
        now = iso_from_ms(server_now_ms(self.redis))
        return timeline(state.to_dict(), activity, budget, now=now)

    def _contexts(
        self, state: RunState, text: bool = False
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """The run's composed contexts (their sections' text left out unless ``text``), and the
        ContextSummary records they name: one round trip each."""
        count = min(len(state.spec.pipeline), state.phase_index + 1)
        pipe = self.redis.pipeline(transaction=False)
        for index in range(count):
            pipe.execute_command("JSON.GET", keys.context_key(state.run_id, index))
        manifests = []
        for raw in pipe.execute(raise_on_error=False) if count else []:
            if not raw or isinstance(raw, Exception):
                continue
            doc = orjson.loads(raw)
            for section in doc.get("sections", []) if not text else []:
                section.pop("content", None)
            manifests.append(doc)
        ids = [i for m in manifests for i in m.get("summary_ids", [])]
        pipe = self.redis.pipeline(transaction=False)
        for summary_id in ids:
            pipe.execute_command("JSON.GET", keys.context_summary_key(summary_id))
        summaries = [
            orjson.loads(raw)
            for raw in (pipe.execute(raise_on_error=False) if ids else [])
            if raw and not isinstance(raw, Exception)
        ]
        return manifests, summaries

    def actor_for(self, actor: Any) -> Any:
        """Who acts: a principal is its own actor (one naming another is refused here, as Mother would);
        Mother's own credentials say who."""
        me = self.principal
        if me is None:
            return actor
        if actor not in (None, "", me.name):
            raise PolicyViolation(
                f"you are principal {me.name}: the actor is the principal, not {str(actor)[:128]!r} "
                "(leave --actor out)"
            )
        return me.name

    def send_command(self, kind: str, payload: dict[str, Any]) -> str:
        """Append a command for Mother to this client's command stream (a principal's own, or
        ``mother:commands``; workers cannot write either)."""
        entry_id = self.redis.xadd(
            self._streams()[1], {"type": kind, "payload": orjson.dumps(payload)}
        )
        # the connection decodes replies
        return cast(str, entry_id)

    def runs(
        self, *, reason: str | None = None, user: str | None = None, limit: int = 50
    ) -> list[dict[str, Any]]:
        """Newest runs first (by creation; with ``reason``, by end): run_id, user, status, phase, reason,
        details, suggested_action, times, duration and cost. A run whose record is gone (deleted by
        hand) is still listed, with what its termination record says."""
        from mother.observe.listing import RunQuery

        order = "ended" if reason is not None else "created"
        query = RunQuery(reason=reason, user=user, sort=order, limit=limit)  # type: ignore[arg-type]
        return self.list_runs(query).rows

    def select(self, query: RunQuery) -> list[str]:
        """Every run not yet ended (all pages) that ``query``'s filters select: what a bulk action acts
        on. A status of an ended run selects none."""
        from mother.observe.listing import MAX_PAGE, OPEN_STATUSES, all_rows

        statuses = [query.status] if query.status else list(OPEN_STATUSES)
        found: list[str] = []
        for status in statuses:
            if status not in OPEN_STATUSES:
                continue
            each = replace(query, status=status, limit=MAX_PAGE, cursor=None).check()
            found += [row["run_id"] for row in all_rows(self.redis, each)]
        return list(dict.fromkeys(found))

    def resubmit(self, run_id: str) -> str:
        """Submit a run's spec again as a new run (a new run id; ``metadata.resubmitted_from`` names the
        old one); returns the new run's id."""
        spec = self.status(run_id).spec.to_dict()
        spec["run_id"] = None
        spec["parent_run_id"] = None
        spec["metadata"] = {**(spec.get("metadata") or {}), "resubmitted_from": run_id}
        return self.submit({k: v for k, v in spec.items() if v is not None})

    def cancel_all(self, run_ids: list[str], actor: str | None, reason: str) -> Cancelled:
        """Cancel each run (:meth:`cancel`): which were asked to end, had ended already, or were refused
        (by Mother, for a principal that may not cancel it: its one-line reason)."""
        done = Cancelled()
        for run_id in run_ids:
            try:
                state = self.cancel(run_id, actor, reason)
            except (GateRefused, PolicyViolation, NotFound) as exc:
                done.refused[run_id] = exc.message
                continue
            (done.ended if state.status == "terminated" else done.requested).append(run_id)
        return done

    def list_runs(self, query: RunQuery) -> Page:
        """A page of runs (:func:`mother.observe.listing.list_runs`): filtered on reason, status, "not
        success", user and time ranges, sorted, counted, with the next page's cursor."""
        from mother.observe.listing import list_runs

        return list_runs(self.redis, query)


def _one_line_errors(method: Callable[..., Any]) -> Callable[..., Any]:
    """``method`` raising Mother errors only: a redis-py error becomes its one-line meaning
    (:func:`mother.connection.mother_error`), the original kept as its cause."""

    @functools.wraps(method)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return method(*args, **kwargs)
        except redis.RedisError as exc:
            raise mother_error(exc) from exc

    return wrapper


# every public method of the client raises Mother errors only (a caller catches MotherError)
for _name, _method in list(vars(MotherClient).items()):
    if not _name.startswith("_") and inspect.isfunction(_method):
        setattr(MotherClient, _name, _one_line_errors(_method))


@dataclass
class _Watch:
    """One :meth:`MotherClient.wait`'s view of its run: what it has seen, and which notices it has
    given (each once)."""

    client: MotherClient
    run_id: str
    on_progress: Callable[[RunState], None] | None
    on_notice: Callable[[str], None] | None
    started: float = field(default_factory=time.monotonic)
    # where the run was last seen: (status, phase, attempt); () once known to exist, when nothing
    # is told of its moves
    seen: tuple[Any, ...] | None = None
    # when the run got where it is (seen): its last move, on wait()'s clock
    seen_since: float = 0.0
    # when the queue was last looked at for a phase no worker has started
    checked_queue: float = 0.0
    # the run is not taken in yet (why)
    unknown: NotFound | None = None
    noticed: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.seen_since = self.started

    def notice(self, kind: str, text: str) -> None:
        if kind not in self.noticed and self.on_notice is not None:
            self.on_notice(text)
        self.noticed.add(kind)

    def look(self) -> ResultEnvelope | None:
        """One poll: the run's final envelope once it has one; else where the run is and what it
        waits on, told as asked."""
        envelope = self.client.result(self.run_id)
        if envelope is not None and envelope.termination is not None:
            return envelope
        state = self._state()
        if state is not None and self.on_notice is not None:
            self._tell_admission(state)
            self._tell_gate(state)
        if state is not None and (self.on_progress is not None or self.on_notice is not None):
            self._tell_progress(state)
        elif self.seen is None:
            self.seen = ()
        return None

    def _state(self) -> RunState | None:
        # read once to know the run exists, then only while someone is told or it is not taken in
        told = self.on_progress is not None or self.on_notice is not None
        if not (told or self.seen is None or self.unknown is not None):
            return None
        try:
            state = self.client.status(self.run_id)
        # nothing is waiting to be taken in: it never will be (a rejection raises InvalidSpec)
        except NoSuchRun:
            raise
        # submitted but not taken in yet: keep waiting
        except NotFound as exc:
            self.unknown = exc
            if time.monotonic() - self.started >= INTAKE_NOTICE_SECONDS:
                self.notice(
                    "intake",
                    f"run {self.run_id} is not taken in after {INTAKE_NOTICE_SECONDS:g}s; "
                    "still waiting (is `mother run` running?)",
                )
            return None
        self.unknown = None
        return state

    def _tell_admission(self, state: RunState) -> None:
        if state.admission != "waiting" or state.status != "queued":
            return
        where = self.client.queue_position(self.run_id)
        if where is not None:
            self.notice(
                f"queued {where[0]}",
                f"run {self.run_id} waits for a slot: position {where[0]} of "
                f"{where[1]} in the admission queue ({where[2]} runs running)",
            )

    def _tell_gate(self, state: RunState) -> None:
        gate = state.gate
        if state.status != "waiting" or gate is None:
            return
        what = "an answer to" if gate.kind == "input" else "approval of"
        who = f"; who may decide: {', '.join(gate.approvers)}" if gate.approvers else ""
        self.notice(
            f"gate {gate.gate_id}",
            f"run {self.run_id} waits for {what} {gate.subject} (gate {gate.gate_id}, until "
            f"{gate.deadline}{who}): {gate_command(self.run_id, gate, self.client.viewer())}",
        )

    def _tell_progress(self, state: RunState) -> None:
        marker = (state.status, state.phase, state.attempt)
        if marker != self.seen:
            # since its dispatch (a TIME read) only where the notice may use it
            self.seen_since = (
                self.client._since(state) if self.on_notice is not None else time.monotonic()
            )
            if self.on_progress is not None:
                self.on_progress(state)
        self.seen = marker
        if self.on_notice is None or state.status not in ACTIVE_STATUSES:
            return
        kind, now = f"unstarted {state.phase_index} {state.attempt}", time.monotonic()
        waited = now - self.seen_since
        if kind in self.noticed or waited < QUEUE_NOTICE_SECONDS or now - self.checked_queue < 1.0:
            return
        self.checked_queue = now
        if (why := self.client.unstarted(state, waited)) is not None:
            self.notice(kind, why)
