"""Every Redis key Mother-Harness touches, built in one place.

The names are the spec's Appendix A spelled exactly, plus the few keys the
design implies (streams, indexes). Nothing outside this module formats a key:
callers ask for ``termination_key(run_id)``, never write ``f"termination:…"``.

Each builder checks its id against the project's id alphabet
(``[A-Za-z0-9_.:-]{1,128}``) so a malformed id can never produce a key that
collides with another family or spans a delimiter in an unexpected way.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import re
import socket
from typing import TypeGuard

from mother.errors import InvalidSpec

__all__ = [
    "ACCESS_LOG_INDEX",
    "ACCESS_LOG_PREFIX",
    "ACTIVITY_STREAM",
    "ADMISSION_STATE",
    "ADMISSION_WAITING",
    "ARTIFACT_ARCHIVE_DUE",
    "ARTIFACT_EXPIRY",
    "BUDGET_LIBRARY",
    "CHUNK_INDEX",
    "CHUNK_PREFIX",
    "COMMANDS_STREAM",
    "CONFLICT_INDEX",
    "CONFLICT_PREFIX",
    "DEAD_LETTER_STREAM",
    "EVENTS_STREAM",
    "FUNCTIONS_LIBRARY",
    "GATE_DEADLINES",
    "GATE_WARNINGS",
    "GC_DELETED",
    "GC_FORGOTTEN",
    "GC_LIBRARY",
    "GC_REPORTS",
    "GLOBAL_BUDGET",
    "HEARTBEATS",
    "HOSTS",
    "HOSTS_AVOIDED",
    "HOSTS_AWAITED",
    "HOST_PATTERN",
    "ID_PATTERN",
    "LEADER_LEASE",
    "LEDGER_LIBRARY",
    "LIBRARIES_INDEX",
    "MCP_SERVERS",
    "METRICS_COUNTERS",
    "MOTHER_CONFIG",
    "PHASE_DEADLINES",
    "PRINCIPALS",
    "PRINCIPAL_PATTERN",
    "PROBE_KEY",
    "REJECTIONS_BY_RUN",
    "REJECTIONS_INDEX",
    "RQ_QUEUES",
    "RQ_QUEUE_PREFIX",
    "RQ_RATE_LIMITS",
    "RQ_SUSPENDED",
    "RQ_WORKERS",
    "RUNS_ENDING",
    "RUNS_INDEX",
    "RUNS_WAITING",
    "RUN_ACTIVITY_MAXLEN",
    "RUN_ACTIVITY_PREFIX",
    "RUN_CLAIMS",
    "RUN_DEADLINES",
    "RUN_PREFIX",
    "RUN_RETENTION",
    "RUN_SEARCH_INDEX",
    "RUN_WARNINGS",
    "SECURITY_VIOLATIONS",
    "SPAWNS_STREAM",
    "SUBMISSIONS_STREAM",
    "TERMINATION_INDEX",
    "TERMINATION_PREFIX",
    "TOOLS_REGISTRY",
    "access_log_id_prefix",
    "access_log_key",
    "access_logs_key",
    "archive_artifact_key",
    "artifact_key",
    "artifact_meta_key",
    "attempt_heartbeat_key",
    "check_host",
    "check_id",
    "check_principal",
    "child_prefix",
    "chunk_key",
    "command_reply_key",
    "conflict_key",
    "context_key",
    "context_summary_key",
    "gc_day_key",
    "gc_pending_key",
    "gc_report_key",
    "global_budget_key",
    "heartbeat_member",
    "heartbeat_member_ids",
    "host_alive_key",
    "host_asks_key",
    "host_job_id",
    "host_key",
    "host_of_asks",
    "host_of_queue",
    "host_of_user",
    "host_queue",
    "host_replies_pattern",
    "host_reply_key",
    "host_rq_patterns",
    "host_user",
    "host_violations_key",
    "host_worker_name",
    "is_host",
    "is_id",
    "journal_key",
    "leader_prefix",
    "ledger_children_key",
    "ledger_key",
    "library_key",
    "library_policy_key",
    "library_run_usage_key",
    "library_run_violations_key",
    "library_user_usage_key",
    "member_of_job",
    "parent_prefix",
    "parse_heartbeat_member",
    "party_refusals_key",
    "party_rejections_key",
    "phase_artifact_id",
    "phase_job_id",
    "principal_commands_key",
    "principal_key",
    "principal_of_stream",
    "principal_replies_pattern",
    "principal_reply_key",
    "principal_submissions_key",
    "rate_limit_key",
    "rejection_key",
    "result_key",
    "rq_job_key",
    "rq_queue_key",
    "rq_worker_key",
    "run_activity_key",
    "run_budget_key",
    "run_key",
    "run_limits_key",
    "termination_key",
    "termination_reason_index_key",
    "token_calibration_key",
    "tool_stats_key",
    "tools_registry_key",
    "user_daily_budget_key",
    "user_runs_key",
    "workspace_artifact_id",
    "workspace_blob_key",
    "workspace_blobs_key",
    "workspace_key",
]

ID_PATTERN = r"[A-Za-z0-9_.:-]{1,128}"
_ID_RE = re.compile(ID_PATTERN)
# a spawned child's id: its parent's child prefix (:func:`child_prefix`), ".c" and 8 hex digits
_CHILD_RE = re.compile(r"(.+)\.c[0-9a-f]{8}")
# a run id this long or shorter names its children after itself; a longer one, after its digest
_CHILD_PREFIX_MAX = 128 - len(".c") - 8
_MODEL_RE = re.compile(r"[A-Za-z0-9_.:/@-]{1,128}")

# Fixed keys.
GLOBAL_BUDGET = "budget:global"
TOOLS_REGISTRY = "registry:tools"
# JSON: the MCP servers registered as sources of tools, by name (mother tools mcp add)
MCP_SERVERS = "registry:mcp"
SECURITY_VIOLATIONS = "security:violations"
SUBMISSIONS_STREAM = "mother:submissions"
EVENTS_STREAM = "mother:events"
ACTIVITY_STREAM = "activity"
# a run's own activity stream (activity:run:{id}) keeps this many entries at most (MAXLEN ~), the same
# number in the server functions (rendered into mother/lua/prelude.lua): a run's story lives as long as its
# records (the GC removes it with them)
RUN_ACTIVITY_PREFIX = "activity:run:"
RUN_ACTIVITY_MAXLEN = 10_000
TERMINATION_INDEX = "idx:termination"
# RediSearch index over run:{id} (status, user, reason TAGs; created and ended NUMERIC): mother runs, /runs
RUN_SEARCH_INDEX = "idx:runs"
RUN_PREFIX = "run:"
# the prefix idx:termination indexes
TERMINATION_PREFIX = "termination:"
DEAD_LETTER_STREAM = "mother:dead_letter"
# RQ's own: the set of every queue's key, and a queue's key prefix (rq.Queue's layout)
RQ_QUEUES = "rq:queues"
RQ_QUEUE_PREFIX = "rq:queue:"
# RQ's set of every worker (each adds and removes itself) and its suspension flag (`rq suspend`)
RQ_WORKERS = "rq:workers"
RQ_SUSPENDED = "rq:suspended"
# RQ's set of rate-limited queues' registries (every worker's maintenance reads it; Mother makes none)
RQ_RATE_LIMITS = "rq:rl-keys"


def rq_queue_key(name: str) -> str:
    """RQ's list of a queue's job ids (rq.Queue's layout)."""
    return f"{RQ_QUEUE_PREFIX}{name}"


def rq_job_key(job_id: str) -> str:
    """RQ's hash of a job (rq.Job's layout)."""
    return f"rq:job:{job_id}"


def rq_worker_key(name: str) -> str:
    """RQ's hash of a worker (rq.Worker's layout)."""
    return f"rq:worker:{name}"


# string: the leading Mother's instance id, "<host>:<pid>:<nonce>"
LEADER_LEASE = "mother:leader"
# zset: run_id scored by the run's deadline (server ms)
RUN_DEADLINES = "mother:deadlines:run"
# zset: run_id scored by its current phase's deadline
PHASE_DEADLINES = "mother:deadlines:phase"
# zset: run_id scored by when its wall clock reaches the warning ratio
RUN_WARNINGS = "mother:deadlines:run_warning"
# zset: Mother's index of the phase attempts to check ("run index attempt"), scored by when each was last
# seen alive (server ms); Mother's alone, as is each attempt's own key (attempt_heartbeat_key)
HEARTBEATS = "mother:heartbeats"
# zset: run_id whose record is written and whose end is not yet applied (record's server ms)
RUNS_ENDING = "mother:ending"
# zset: run_id scored by creation time (ms)
RUNS_INDEX = "runs:all"
# zset: submission entry id scored by rejection time
REJECTIONS_INDEX = "rejections"
# hash: run_id -> the entry id of its newest rejection
REJECTIONS_BY_RUN = "rejections:by_run"
# hash: run_id -> the submission entry that claimed it (first come, on the server)
RUN_CLAIMS = "runs:claimed"
# zset: runs waiting for a slot, scored by their fair-queue order
ADMISSION_WAITING = "admission:waiting"
# hash: the fair queue's virtual time, sequence and each user's last tag
ADMISSION_STATE = "admission:state"
# stream: what people ask of Mother (cancel, ...); workers cannot write it
COMMANDS_STREAM = "mother:commands"
# stream: the child runs a phase's spawn_run asks for (Mother appends each, from its host's ask; Mother's
# intake checks each against its parent)
SPAWNS_STREAM = "mother:spawns"
# set: the names of the principals (each its own ACL user, its own streams)
PRINCIPALS = "principals"
# a principal's name (also its ACL user's): never one of the service users'
PRINCIPAL_PATTERN = r"[a-z][a-z0-9_-]{0,62}"
# JSON: the leading Mother's effective limits, read by submitters' server calls
MOTHER_CONFIG = "mother:config"
# zset: run_id waiting for a person, scored by its gate's deadline (server ms)
GATE_DEADLINES = "mother:deadlines:gate"
# zset: run_id scored by when its gate's deadline warning is due
GATE_WARNINGS = "mother:deadlines:gate_warning"
# zset: run_id waiting for a person, scored by when it began to wait (oldest first: mother runs --waiting)
RUNS_WAITING = "runs:waiting"
# RediSearch index over conflict:{id} (type, strategy, decision, time), when the search module is there
CONFLICT_INDEX = "idx:conflict"
# zset: artifact ids by when they expire (ms); the GC reads only what is due
ARTIFACT_EXPIRY = "artifacts:expiry"
# zset: artifact ids by when they are due to be archived (ms)
ARTIFACT_ARCHIVE_DUE = "artifacts:archive_due"
# zset: ended runs by when their own records (run, termination, result, budgets, contexts, conflicts) may go
RUN_RETENTION = "retention:runs"
# zset: gc_report keys by when the GC that wrote them ran (ms)
GC_REPORTS = "gc:reports"
# lists: what the GC deleted (artifact ids) and forgot (run ids) that no activity entry names yet
# (written with each deletion, drained into one entry a batch by mh_gc_drain)
GC_DELETED = "gc:deleted"
GC_FORGOTTEN = "gc:forgotten"
CONFLICT_PREFIX = "conflict:"
# the monotonic counters /metrics exposes, a hash ('runs_terminated|success' -> n), counted by the server
# functions (passed in KEYS: mother/lua/prelude.lua, counted) and the moves that do what they count
METRICS_COUNTERS = "metrics:counters"
LIBRARIES_INDEX = "libraries"
CHUNK_INDEX = "idx:chunks"
CHUNK_PREFIX = "chunk:"
ACCESS_LOG_INDEX = "idx:access_logs"
ACCESS_LOG_PREFIX = "access_log:"
# names of the Redis Functions libraries (not keys)
FUNCTIONS_LIBRARY = "mother"
BUDGET_LIBRARY = "mother_budget"
LEDGER_LIBRARY = "mother_ledger"
GC_LIBRARY = "mother_gc"
# never written: JSON.TYPE of it tells whether RedisJSON is loaded
PROBE_KEY = "mother:probe"


def is_id(value: object) -> TypeGuard[str]:
    """Whether ``value`` is a valid id (:func:`check_id` without the error)."""
    return isinstance(value, str) and _ID_RE.fullmatch(value) is not None


def _shown(value: object, most: int = 60) -> str:
    """``repr(value)``, or its start and length if it is long (an error line stays one short line)."""
    text = repr(value)
    return (
        text
        if len(text) <= most
        else f"{text[:most]}… ({len(value) if isinstance(value, str) else len(text)} characters)"
    )


def check_id(value: str, what: str = "id") -> str:
    """Return ``value`` if it is a valid id, else raise ``InvalidSpec``."""
    if not is_id(value):
        raise InvalidSpec(
            f"{what} {_shown(value)} is not a valid id: use 1-128 characters from A-Z a-z 0-9 _ . : -",
            field=what,
        )
    return value


def _day(day: _dt.date | str) -> str:
    if isinstance(day, _dt.date):
        return day.isoformat()
    try:
        return _dt.date.fromisoformat(day).isoformat()
    except (TypeError, ValueError):
        raise InvalidSpec(f"day {day!r} is not a date: use YYYY-MM-DD", field="day") from None


# Termination records
def termination_key(run_id: str) -> str:
    return TERMINATION_PREFIX + check_id(run_id, "run_id")


# Runs
def run_key(run_id: str) -> str:
    return f"run:{check_id(run_id, 'run_id')}"


def run_activity_key(run_id: str) -> str:
    """A run's own activity stream: each entry that names the run, appended with the global one."""
    return RUN_ACTIVITY_PREFIX + check_id(run_id, "run_id")


def result_key(run_id: str) -> str:
    """The final ResultEnvelope of a run."""
    return f"result:{check_id(run_id, 'run_id')}"


def user_runs_key(user_id: str) -> str:
    """zset of a user's run ids scored by creation time."""
    return f"runs:user:{check_id(user_id, 'user_id')}"


def termination_reason_index_key(reason: str) -> str:
    """zset of run ids that ended with ``reason``, scored by termination time (server ms)."""
    return f"terminations:reason:{check_id(reason, 'reason')}"


def party_rejections_key(principal: str) -> str:
    """zset: the entries of a principal's refused submissions kept as records, scored by time."""
    return f"rejections:party:{check_principal(principal)}"


def party_refusals_key(principal: str) -> str:
    """hash: a principal's refused submissions counted, not stored: ``{code}|{error digest}`` -> count,
    and ``{code}|{error digest}|said`` -> the error (once); ``dropped`` past the cap."""
    return f"rejections:counted:{check_principal(principal)}"


def rejection_key(entry_id: str) -> str:
    """Why a submission entry was refused."""
    return f"rejection:{check_id(entry_id, 'entry_id')}"


def _job_safe(value: str) -> str:
    # RQ job ids allow [A-Za-z0-9_-]; escape the rest of our id alphabet bijectively.
    return value.replace("_", "__").replace(".", "_d").replace(":", "_c")


def phase_job_id(host: str, run_id: str, phase_index: int, attempt: int) -> str:
    """The RQ job id of one phase attempt queued on ``host``: ``{host}_ph-{run}-{index}-{attempt}`` (RQ's
    keys of the job start with the host's name, as its ACL patterns want)."""
    return (
        f"{check_host(host)}_ph-{_job_safe(check_id(run_id, 'run_id'))}-{int(phase_index)}-"
        f"{int(attempt)}"
    )


def host_job_id(host: str, what: str) -> str:
    """The RQ job id of another job queued on ``host`` (the GC): ``{host}_{what}``."""
    return f"{check_host(host)}_{_job_safe(what)}"


def leader_prefix(pid: int) -> str:
    """The start of the instance id (``mother:leader``'s value) of the Mother process ``pid`` on this host."""
    return f"{socket.gethostname()}:{pid}:"


def attempt_heartbeat_key(run_id: str, phase_index: int, attempt: int) -> str:
    """A phase attempt's heartbeat: a string with a time to live, written by Mother alone (at its host's
    beats, while the host holds it)."""
    return f"heartbeat:{check_id(run_id, 'run_id')}:{int(phase_index)}:{int(attempt)}"


def phase_artifact_id(run_id: str, phase_index: int, attempt: int) -> str:
    """The id of a phase attempt's output artifact: ``art-`` and 20 hex digits of the attempt's SHA-256
    (``art-ws-`` names a run's workspace artifact, which no attempt's id can be)."""
    digest = hashlib.sha256(
        f"{check_id(run_id, 'run_id')}:{int(phase_index)}:{int(attempt)}".encode()
    )
    return f"art-{digest.hexdigest()[:20]}"


def heartbeat_member(run_id: str, phase_index: int, attempt: int) -> str:
    """A phase attempt's member in the HEARTBEATS zset (not a key; ids hold no spaces)."""
    return f"{check_id(run_id, 'run_id')} {int(phase_index)} {int(attempt)}"


def member_of_job(args: object) -> str | None:
    """The heartbeat member a phase job's arguments (run_id, phase_index, attempt) name; None when they are
    not that (a malformed or forged job)."""
    try:
        return heartbeat_member(*args)  # type: ignore[misc]
    except (InvalidSpec, TypeError, ValueError):
        return None


def heartbeat_member_ids(member: str) -> tuple[str, int, int] | None:
    """:func:`parse_heartbeat_member` without the error: None for what is not a member."""
    try:
        return parse_heartbeat_member(member)
    except InvalidSpec:
        return None


def parse_heartbeat_member(member: str) -> tuple[str, int, int]:
    """(run_id, phase_index, attempt) of a ``mother:heartbeats`` member; InvalidSpec for anything else."""
    try:
        run_id, index, attempt = member.split(" ")
        return check_id(run_id, "run_id"), int(index), int(attempt)
    except (ValueError, InvalidSpec):
        raise InvalidSpec(
            f"heartbeat member {member[:200]!r} is not '<run_id> <phase_index> <attempt>'"
        ) from None


# Budget tracking
def run_budget_key(run_id: str) -> str:
    return f"budget:run:{check_id(run_id, 'run_id')}"


def run_limits_key(run_id: str) -> str:
    """JSON: what a run's budget guard enforces and only Mother (or an operator) changes: its limits,
    overrides, emergency stop, fence and start time (workers may read it, never write it)."""
    return f"limits:run:{check_id(run_id, 'run_id')}"


# Worker hosts (mother/identities/hosts.py): each enrolled by an operator, its own ACL user, its own
# stream of asks, its own RQ queues, workers and jobs (their names start with the host's, so ACL key
# patterns confine a host to its own)
# set: the names of the enrolled hosts
HOSTS = "hosts"
# a host's name: no dot, colon or underscore, which end it in its queues', workers' and jobs' names
HOST_PATTERN = r"[a-z][a-z0-9-]{0,62}"
# zset: attempts (heartbeat members) that had no live host to go to, by when (server ms): Mother queues
# each on a host as soon as one is live
HOSTS_AWAITED = "hosts:awaited"
# zset: live hosts Mother sends no job to until the score (server ms): their queues held a job a heartbeat
# timeout while their line said workers were free
HOSTS_AVOIDED = "hosts:avoided"
_HOST_RE = re.compile(HOST_PATTERN)


def is_host(value: object) -> TypeGuard[str]:
    return isinstance(value, str) and _HOST_RE.fullmatch(value) is not None


def check_host(name: str) -> str:
    if not is_host(name):
        raise InvalidSpec(
            f"host {_shown(name)} is not a valid name: a lowercase letter, then up to 62 of a-z 0-9 -",
            field="host",
        )
    return name


def host_key(name: str) -> str:
    """JSON: an enrolled host's record (its queues, its password's SHA-256)."""
    return f"host:{check_host(name)}"


def host_user(name: str) -> str:
    """The ACL user of an enrolled host."""
    return f"host:{check_host(name)}"


def host_of_user(user: str) -> str | None:
    """The host an ACL user's name is (``host:{name}``), or None."""
    name = user.removeprefix("host:")
    return name if user.startswith("host:") and is_host(name) else None


def host_asks_key(name: str) -> str:
    """stream: what a host asks of Mother; only its own user may XADD to it, so an ask there is its."""
    return f"mother:asks:{check_host(name)}"


def host_of_asks(stream: str) -> str | None:
    """The host whose ask stream ``stream`` is, or None."""
    name = stream.removeprefix("mother:asks:")
    return name if stream.startswith("mother:asks:") and is_host(name) else None


def host_reply_key(name: str, ask_id: str) -> str:
    """list: Mother's reply to one of the host's asks (only that host may read it; expires)."""
    if not re.fullmatch(r"[0-9a-f]{16,32}", ask_id):
        raise InvalidSpec(f"an ask id is 16-32 hexadecimal digits, not {_shown(ask_id)}")
    return f"host_reply:{check_host(name)}:{ask_id}"


def host_replies_pattern(name: str) -> str:
    """The ACL key pattern of every reply to the host's asks."""
    return f"host_reply:{check_host(name)}:*"


def host_violations_key(name: str) -> str:
    """String counter: the violations a host reported this hour (past a cap they are not kept)."""
    return f"security:violations:host:{check_host(name)}"


def host_alive_key(name: str) -> str:
    """String: a host's line (JSON {concurrency, busy, workers}), written by Mother from the host's beats,
    with a heartbeat timeout to live; 'stopped' when its pool said it stops."""
    return f"hosts:alive:{check_host(name)}"


def host_queue(name: str, kind: str) -> str:
    """A host's own RQ queue for ``kind`` (agents, tools, maintenance): ``{host}.{kind}``."""
    return f"{check_host(name)}.{kind}"


def host_worker_name(name: str, suffix: str) -> str:
    """An RQ worker's name on host ``name``: ``{host}.{suffix}`` (RQ's keys of it carry the host's)."""
    return f"{check_host(name)}.{suffix}"


def host_of_queue(queue: str) -> tuple[str, str] | None:
    """(host, kind) of a host's queue name, or None."""
    name, dot, kind = queue.partition(".")
    return (name, kind) if dot and is_host(name) and kind else None


def host_rq_patterns(name: str) -> list[str]:
    """RQ's keys of a host's own queues, jobs and workers (RQ 3's layout: docs/security.md), as ACL key
    patterns: queue names and worker names start ``{host}.``, job ids ``{host}_``."""
    check_host(name)
    by_queue = (
        *("queue", "wip", "finished", "failed", "deferred", "scheduled", "canceled", "ready"),
        *("clean_registries", "workers"),
    )
    by_job = ("job", "results", "execution", "executions")
    return [
        *(f"rq:{family}:{name}.*" for family in by_queue),
        *(f"rq:{family}:{name}_*" for family in by_job),
        # a job's dependencies, as RQ 3 spells their key (a second colon)
        f"rq:job::{name}_*",
        f"rq:worker:{name}.*",
    ]


def user_daily_budget_key(user_id: str, day: _dt.date | str) -> str:
    return f"budget:user:{check_id(user_id, 'user_id')}:daily:{_day(day)}"


def global_budget_key() -> str:
    return GLOBAL_BUDGET


def ledger_key(thread_id: str) -> str:
    """One thread's (run's) node in the hierarchical spend ledger."""
    return f"ledger:{check_id(thread_id, 'thread_id')}"


def ledger_children_key(thread_id: str) -> str:
    """Set of a thread's children in the ledger."""
    return f"ledger_children:{check_id(thread_id, 'thread_id')}"


def rate_limit_key(user_id: str) -> str:
    """zset: the user's messages in the rate-limit window, scored by server ms."""
    return f"ratelimit:user:{check_id(user_id, 'user_id')}"


# Tool registry
def tools_registry_key() -> str:
    return TOOLS_REGISTRY


def tool_stats_key(tool_id: str) -> str:
    return f"tool_stats:{check_id(tool_id, 'tool_id')}"


# Conflict resolutions
def conflict_key(conflict_id: str) -> str:
    return f"conflict:{check_id(conflict_id, 'conflict_id')}"


# Context summaries and composed contexts
_PRINCIPAL_RE = re.compile(PRINCIPAL_PATTERN)
# a principal's streams: the one its submissions arrive by, the one its commands arrive by
_PRINCIPAL_STREAM = re.compile(rf"mother:(submissions|commands):({PRINCIPAL_PATTERN})")


def check_principal(name: str) -> str:
    if not isinstance(name, str) or not _PRINCIPAL_RE.fullmatch(name):
        raise InvalidSpec(
            f"principal {_shown(name)} is not a valid name: a lowercase letter, then up to 62 of "
            "a-z 0-9 _ -",
            field="principal",
        )
    return name


def principal_key(name: str) -> str:
    """JSON: a principal's grants and whom it acts for (``mother principals``)."""
    return f"principal:{check_principal(name)}"


def principal_submissions_key(name: str) -> str:
    """stream: the principal's submissions; only its ACL user may XADD to it, so an entry there is its."""
    return f"mother:submissions:{check_principal(name)}"


def principal_commands_key(name: str) -> str:
    """stream: the principal's commands (cancel, approve, deny, answer, budget)."""
    return f"mother:commands:{check_principal(name)}"


def principal_reply_key(name: str, entry_id: str) -> str:
    """list: Mother's reply to the principal's command ``entry_id`` (only it may read its replies)."""
    return f"mother:reply:{check_principal(name)}:{check_id(entry_id, 'entry_id')}"


def principal_replies_pattern(name: str) -> str:
    """The ACL key pattern of every reply to the principal's commands."""
    return f"mother:reply:{check_principal(name)}:*"


def principal_of_stream(stream: str) -> str | None:
    """The principal whose submissions or commands stream ``stream`` is; None for Mother's own."""
    found = _PRINCIPAL_STREAM.fullmatch(stream)
    return found.group(2) if found else None


def command_reply_key(entry_id: str) -> str:
    """list: Mother's reply to the mother:commands entry ``entry_id`` (the CLI blocks on it; expires)."""
    return f"mother:reply:{entry_id}"


def context_summary_key(summary_id: str) -> str:
    return f"context_summary:{check_id(summary_id, 'summary_id')}"


def context_key(run_id: str, phase_index: int) -> str:
    """JSON: the ComposedContext Mother built for a phase (implied key)."""
    return f"context:{check_id(run_id, 'run_id')}:{int(phase_index)}"


def journal_key(run_id: str, phase_index: int) -> str:
    """List: the phase's steps (schemas.journal.Step), appended by Mother in the guard call that charges
    or settles each (implied key): what a new attempt of the phase replays."""
    return f"journal:{check_id(run_id, 'run_id')}:{int(phase_index)}"


def token_calibration_key(model: str) -> str:
    """Hash: estimated / reported prompt tokens per model, the estimate's running ratio (implied key)."""
    if not _MODEL_RE.fullmatch(model):
        raise InvalidSpec(
            f"model name {model[:80]!r} must be 1-128 characters from A-Z a-z 0-9 _ . : / @ -"
        )
    return f"tokens:calibration:{model}"


# Artifacts
def artifact_key(artifact_id: str) -> str:
    return f"artifact:{check_id(artifact_id, 'artifact_id')}"


def artifact_meta_key(artifact_id: str) -> str:
    return f"artifact_meta:{check_id(artifact_id, 'artifact_id')}"


def archive_artifact_key(artifact_id: str) -> str:
    return f"archive:artifact:{check_id(artifact_id, 'artifact_id')}"


# Library policies
def library_policy_key(library_id: str) -> str:
    return f"policy:library:{check_id(library_id, 'library_id')}"


def library_key(library_id: str) -> str:
    """JSON: a library's name, its documents and their chunk counts."""
    return f"library:{check_id(library_id, 'library_id')}"


def chunk_key(library_id: str, document_id: str, index: int) -> str:
    """JSON: one chunk of a library's document (indexed by idx:chunks)."""
    return f"chunk:{check_id(library_id, 'library_id')}:{check_id(document_id, 'document_id')}:{int(index)}"


def library_run_usage_key(run_id: str, library_id: str) -> str:
    """string counter: a run's queries of a library (expires with the run's wall clock, at most a day)."""
    return f"budget:library:run:{check_id(run_id, 'run_id')}:{check_id(library_id, 'library_id')}"


def library_user_usage_key(user_id: str, day: str, library_id: str) -> str:
    """string counter: a user's queries of a library on a (server, UTC) day."""
    return (
        f"budget:library:user:{check_id(user_id, 'user_id')}:{_day(day)}:"
        f"{check_id(library_id, 'library_id')}"
    )


def library_run_violations_key(run_id: str) -> str:
    """string counter: a run's refused library accesses (libraries.violations_to_end)."""
    return f"budget:library:violations:{check_id(run_id, 'run_id')}"


# Access logs
def access_log_key(log_id: str) -> str:
    return f"access_log:{check_id(log_id, 'log_id')}"


# Workspaces (workers/workspaces.py)
def workspace_key(run_id: str) -> str:
    """String (JSON): the run's workspace as its last phase left it: path -> sha256, size, mode, mtime."""
    return f"workspace:{check_id(run_id, 'run_id')}"


def workspace_blob_key(run_id: str, sha256: str) -> str:
    """String: one file content of the run's workspace, zlib-compressed, named by its SHA-256."""
    if not re.fullmatch(r"[0-9a-f]{64}", sha256):
        raise InvalidSpec(f"a workspace blob is named by a SHA-256 in hex, not {sha256[:80]!r}")
    return f"workspace_blob:{check_id(run_id, 'run_id')}:{sha256}"


def workspace_blobs_key(run_id: str) -> str:
    """Set: the SHA-256 of every content the run stored (what the GC deletes with the run)."""
    return f"workspace_blobs:{check_id(run_id, 'run_id')}"


def workspace_artifact_id(run_id: str) -> str:
    """The artifact a run's stored workspace becomes at its end (``art-ws-`` and 20 hex digits of the run
    id's SHA-256): no phase's output artifact can have it (``art-`` and hex digits only)."""
    digest = hashlib.sha256(check_id(run_id, "run_id").encode()).hexdigest()
    return f"art-ws-{digest[:20]}"


def child_prefix(run_id: str) -> str:
    """What the ids of ``run_id``'s spawned children start with (before ``.c`` and 8 hex digits): the run's
    id, or for an id too long to be extended, ``h`` and 32 hex digits of its SHA-256. A run id of the
    child shape is taken only with the parent it names (:func:`parent_prefix`), so the attempt's ACL
    pattern for its children's ledger nodes matches its own children and nobody else's runs."""
    check_id(run_id, "run_id")
    if len(run_id) <= _CHILD_PREFIX_MAX:
        return run_id
    return "h" + hashlib.sha256(run_id.encode()).hexdigest()[:32]


def parent_prefix(run_id: str) -> str | None:
    """The child prefix a run id of the child shape (``{prefix}.c{8 hex}``) names, or None."""
    match = _CHILD_RE.fullmatch(run_id)
    return match.group(1) if match else None


def access_log_id_prefix(run_id: str) -> str:
    """How the ids of a run's library access logs start: ``acc-`` and 16 hex digits of the run id's
    SHA-256 (a run id may be longer than an id allows); the run's attempts may write those logs only."""
    digest = hashlib.sha256(check_id(run_id, "run_id").encode()).hexdigest()
    return f"acc-{digest[:16]}-"


def access_logs_key(library_id: str) -> str:
    return f"access_logs:{check_id(library_id, 'library_id')}"


# GC reports
def gc_day_key(day: str) -> str:
    """string (SET NX, expires): the day's scheduled GC was taken by one scheduler's job ("running
    {job id} {time}" while it runs, "done {time}" after)."""
    return f"gc:day:{_day(day)}"


def gc_pending_key(day: str) -> str:
    """string (expires): the id of the RQ job last enqueued for the day's scheduled GC."""
    return f"gc:pending:{_day(day)}"


GC_REPORT_PREFIX = "gc_report:"


def gc_report_key(timestamp: str) -> str:
    return GC_REPORT_PREFIX + check_id(timestamp, "timestamp")
