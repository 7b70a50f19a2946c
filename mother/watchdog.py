"""Mother's watchdog: deadlines, lost and failed phase jobs, stuck runs.

Runs every ``service.watchdog_interval_seconds`` on the leader:

- run and phase deadlines (zsets scored by server ms; "due" is decided with
  the server's ``TIME`` inside ``mh_due``) end the run ``timeout``;
- a started phase whose heartbeat is older than ``heartbeat_timeout_seconds``
  (its worker died, parent and work-horse) is a failed attempt: retried or
  ``retries_exhausted``;
- RQ's own started-job cleanup runs here (RQ would otherwise wait for a worker's
  maintenance), then jobs in the agents queue's FailedJobRegistry (a work-horse
  killed or timed out) are failed attempts;
- every few ticks, a running run whose current attempt has no RQ job is
  dispatched again (closes the window between a transition and its enqueue);
- a run whose termination record was written but whose end was not applied
  within ``finish_end_after_seconds`` (the Mother that wrote it died in between)
  gets its end applied: reservations given back, ledger closed, ``terminated``
  logged (marked ``late``), a spawned child's parent slot returned.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, cast

import orjson
from pydantic import ValidationError
from rq.exceptions import NoSuchJobError
from rq.job import Job
from rq.queue import Queue
from rq.registry import FailedJobRegistry, StartedJobRegistry

from mother import attempt_users, calls, hosts, keys, principals
from mother.attempt_users import REPORTED_MARK, REPORTED_MS, dispatched_to
from mother.budget import Guard
from mother.config import AGENTS_QUEUE
from mother.connection import unless_redis_down
from mother.functions import call
from mother.gates.decide import expire
from mother.hosts.table import AWAITING_QUEUE, HOST_QUEUES
from mother.lifecycle import (
    DISPATCHED_MS,
    JOB_FUNCTION,
    QUEUE_META,
    admit_waiting,
    completed_event,
    dispatch,
    end_run,
    finish_end,
    outputs_of,
    phase_timeout_seconds,
    queue_end_reads,
    run_duration_seconds,
)
from mother.logs import get_logger
from mother.records import parse_position, runs
from mother.records.budgets import budget_doc, refresh_gauges
from mother.records.rejections import forget_rejections
from mother.records.results import queue_termination_read
from mother.records.tools import refresh_success_rates
from mother.review import on_attempt_lost, on_phase_result
from mother.runtime import Runtime
from mother.security import cap_violations
from mother.streams import group_backlog
from schemas import ACTIVE_STATUSES, PhaseResult, RunState, TerminationRecord

__all__ = ["Watchdog"]

log = get_logger("watchdog")
BATCH = 200
# how often the leader looks for attempts' effects hashes no sweep names (mother.attempt_users.fold_orphans:
# a scan of the key space): at its first sweep, after a Redis restart, and then this often
ORPHANS_EVERY_SECONDS = 3600.0
# a job waiting on a host with no worker free is moved to a host with one once it has waited this long
# (a job queued a moment ago is about to be taken)
REBALANCE_AFTER_MS = 1000
# how long Mother queues nothing for a host that did not take its jobs (while another host is live)
AVOID_SECONDS = 60.0


def _own_streams() -> list[str]:
    return [keys.SUBMISSIONS_STREAM, keys.SPAWNS_STREAM, keys.EVENTS_STREAM, keys.COMMANDS_STREAM]


class Watchdog:
    """``streams``: the streams Mother reads now (its own and each principal's), for trimming and the
    queue depth."""

    def __init__(
        self, rt: Runtime, reconcile_every: int = 5, streams: Callable[[], list[str]] = _own_streams
    ) -> None:
        self.rt = rt
        self.reconcile_every = reconcile_every
        self.streams = streams
        self.ticks = 0
        self._orphans_at: float | None = None
        # hosts whose line is gone, since when (monotonic): forgotten after hosts.FORGET_SECONDS
        self._hosts_lost: dict[str, float] = {}
        # look for registered hosts without their user at the next tick (not only every few ticks)
        self._hosts_users = True
        # principals whose users cannot be made again (said once)
        self._cannot_reapply: set[str] = set()

    def remint_hosts_soon(self) -> None:
        """At the next tick, make again the users of registered hosts that have none (Mother became
        leader: after a failover or a restart, which keep no ACL user Mother made)."""
        self._hosts_users = True

    def fold_orphans_soon(self) -> None:
        """At the next sweep, fold the effects hashes of attempts whose users are gone (Mother became
        leader; Redis restarted)."""
        self._orphans_at = None

    def tick(self) -> None:
        self.ticks += 1
        self.rt.clock.sync()
        self.check_deadlines()
        self.check_heartbeats()
        self.check_rq()
        self.check_hosts()
        self.finish_ends()
        admit_waiting(self.rt)
        if self.ticks % self.reconcile_every == 1:
            self.reconcile()
            self.refresh_gauges()
            self.trim()
            self.sweep_attempt_users()
            refresh_success_rates(self.rt.redis)

    # -- bounded Redis -------------------------------------------------------
    def trim(self) -> None:
        """Trim the streams Mother consumes below what is still to be handled (and their retention), and
        forget rejections past theirs: Redis stays bounded however many runs pass through."""
        cfg = self.rt.settings.service
        for stream in self.streams():
            calls.trim_stream(
                self.rt.redis, stream, retention_ms=int(cfg.stream_retention_seconds * 1000)
            )
        due = calls.due(
            self.rt.redis,
            keys.REJECTIONS_INDEX,
            slack_ms=int(cfg.rejection_retention_seconds * 1000),
            limit=BATCH,
        )
        forget_rejections(self.rt.redis, [entry_id for entry_id, _ in due])
        cap_violations(self.rt.redis)

    # -- deadlines ---------------------------------------------------------
    def check_deadlines(self) -> None:
        for zset, what in ((keys.RUN_DEADLINES, "run"), (keys.PHASE_DEADLINES, "phase")):
            for run_id, _ in calls.due(self.rt.redis, zset, limit=BATCH):
                self._isolated(f"{what} deadline", run_id, self._timeout, run_id, what)
        for run_id, _ in calls.due(self.rt.redis, keys.RUN_WARNINGS, limit=BATCH):
            self._isolated("wall-clock warning", run_id, self._wall_clock_warning, run_id)
        # a warning before its deadline, even when both are due at one tick
        for run_id, _ in calls.due(self.rt.redis, keys.GATE_WARNINGS, limit=BATCH):
            self._isolated("gate warning", run_id, self._gate_warning, run_id)
        for run_id, _ in calls.due(self.rt.redis, keys.GATE_DEADLINES, limit=BATCH):
            self._isolated("gate deadline", run_id, self._gate_expired, run_id)

    def _gate_expired(self, run_id: str) -> None:
        """Nobody decided the gate in time: the run ends blocked (fail closed)."""
        if not keys.is_id(run_id) or not expire(self.rt, run_id):
            self.rt.redis.zrem(keys.GATE_DEADLINES, run_id)

    def _gate_warning(self, run_id: str) -> None:
        """A gate's deadline is near (gates.warning_ratio of its wait gone): said once, in the activity
        stream and the log, with the command that decides it."""
        self.rt.redis.zrem(keys.GATE_WARNINGS, run_id)
        state = self.rt.load_run(run_id) if keys.is_id(run_id) else None
        gate = state.gate if state is not None and state.status == "waiting" else None
        if gate is None:
            return
        self.rt.emit(
            self.rt.redis,
            "gate_deadline_warning",
            run_id=run_id,
            phase=gate.phase,
            gate_id=gate.gate_id,
            deadline=gate.deadline,
            approvers=gate.approvers,
        )
        log.warning(
            "gate_deadline_near",
            run_id=run_id,
            gate_id=gate.gate_id,
            deadline=gate.deadline,
            subject=gate.subject,
        )

    def _wall_clock_warning(self, run_id: str) -> None:
        """A run's wall clock reached its profile's warning ratio: the budget records the warning (an
        activity entry with it), as the guard does for every other dimension."""
        self.rt.redis.zrem(keys.RUN_WARNINGS, run_id)
        state = self.rt.load_run(run_id) if keys.is_id(run_id) else None
        if state is not None and state.status in ACTIVE_STATUSES:
            self._guard(state).clock()

    def _timeout(self, run_id: str, what: str) -> None:
        # a member that is no run id: dropped
        state = self.rt.load_run(run_id) if keys.is_id(run_id) else None
        if state is None or state.status == "terminated":
            pipe = self.rt.redis.pipeline(transaction=False)
            pipe.zrem(keys.RUN_DEADLINES, run_id)
            pipe.zrem(keys.PHASE_DEADLINES, run_id)
            pipe.execute()
            return
        budget = budget_doc(self.rt.redis, keys.run_limits_key(run_id)) or {}
        # the budget records the crossing of its wall clock (and the warning, if due)
        if what == "run" and budget:
            self._guard(state).clock(deadline=True)
        if budget.get("status") == "budget_stopped":
            stop = budget.get("stop") or {}
            end_run(
                self.rt,
                state,
                "budget_exhausted",
                f"Run still emergency-stopped at its {what} deadline (stopped by {stop.get('actor')}: {stop.get('reason')})",
                contributing_factors=[
                    f"budget_stopped at {stop.get('at')}",
                    f"{what} deadline passed",
                ],
            )
            return
        if what == "run":
            limit = run_duration_seconds(self.rt, state.spec)
            details = f"Run exceeded its duration limit of {limit:g}s during phase {state.phase}"
        else:
            limit = phase_timeout_seconds(self.rt, state.spec, state.phase_index)
            details = (
                f"Phase {state.phase} (attempt {state.attempt}) exceeded its timeout of {limit:g}s"
            )
        factors = [f"{what} deadline {limit:g}s passed"]
        if what == "run":
            factors.append(f"budget_wall_clock_exceeded ({limit:g}/{limit:g})")
        end_run(self.rt, state, "timeout", details, contributing_factors=factors)

    def _guard(self, state: RunState) -> Guard:
        return Guard(
            self.rt.redis, self.rt.settings, state.run_id, state.user_id, self.rt.clock.today
        )

    # -- ends a Mother died before applying -----------------------------------
    def finish_ends(self) -> None:
        slack = int(self.rt.settings.service.finish_end_after_seconds * 1000)
        for run_id, _ in calls.due(self.rt.redis, keys.RUNS_ENDING, slack_ms=slack, limit=BATCH):
            self._isolated("run end", run_id, self._finish_end, run_id)

    def _finish_end(self, run_id: str) -> None:
        # a member that is no run id: dropped
        if not keys.is_id(run_id):
            self.rt.redis.zrem(keys.RUNS_ENDING, run_id)
            return
        pipe = self.rt.redis.pipeline(transaction=False)
        runs.queue_read(pipe, run_id)
        queue_termination_read(pipe, run_id)
        queue_end_reads(pipe, run_id)
        raw_run, raw_record, node_raw, budget_raw = pipe.execute()
        state = self.rt.parse_run(run_id, raw_run)
        if state is None or raw_record is None:
            log.error(
                "run_end_not_applied",
                run_id=run_id,
                why="its run record or its termination record is gone",
            )
            self.rt.redis.zrem(keys.RUNS_ENDING, run_id)
            return
        record = TerminationRecord.model_validate(orjson.loads(raw_record))
        # what the dead Mother would have logged with it: a success's last phase_completed (from the run's results)
        activity = (
            [completed_event(state.results[-1])]
            if record.reason == "success" and state.results
            else []
        )
        if finish_end(self.rt, state, record, node_raw, budget_raw, activity, late=True):
            log.warning(
                "run_end_applied_late",
                run_id=run_id,
                reason=record.reason,
                why=f"its record was written {self.rt.settings.service.finish_end_after_seconds:g}s ago or more "
                f"and its end not applied (the Mother that wrote it died in between)",
            )

    # -- lost workers ------------------------------------------------------
    def check_heartbeats(self) -> None:
        """The attempts not seen alive for a heartbeat timeout (Mother's index, ``mother:heartbeats``):
        one whose heartbeat key is still there is alive (seen now); one whose key is gone is lost. Only
        the attempt's own ACL user writes its key, so no other worker's credentials make it lost.

        A key that still has Mother's dispatch mark after its token was claimed had no beat (its worker
        beats at once after the claim: the token was taken by someone else, or the worker died right
        after): the mark's long life, meant for the wait in the queue, is cut to a heartbeat timeout."""
        slack = int(self.rt.settings.service.heartbeat_timeout_seconds * 1000)
        due = calls.due(self.rt.redis, keys.HEARTBEATS, slack_ms=slack, limit=BATCH)
        if not due:
            return
        members = [member for member, _ in due]
        beats = self._beats(members)
        alive = [value is not None for value, _claimable, _ttl in beats]
        if not all(alive) and self._restarted_within(slack):
            # Redis restarted: the keys expired while it was down and it kept no attempt user. The
            # attempts get their users again and a timeout to beat before any is taken for lost (a
            # member that names no attempt is dropped all the same).
            alive = [
                live or keys.heartbeat_member_ids(m) is not None
                for m, live in zip(members, alive, strict=True)
            ]
            self._remint_missing()
            self.fold_orphans_soon()
            self.remint_hosts_soon()
        now = self.rt.clock.now_ms()
        # a result reported this long ago and not taken: Mother's relay did not hear of it
        overdue = REPORTED_MS - (slack + int(self.rt.settings.service.claim_idle_seconds * 1000))
        reported: list[tuple[str, int, int]] = []
        # attempts whose job has waited for a worker a heartbeat timeout since they were last checked
        waiting: list[tuple[str, int, int, str]] = []
        pipe = self.rt.redis.pipeline(transaction=False)
        for member, live, (value, claimable, ttl) in zip(members, alive, beats, strict=True):
            if not live:
                pipe.zrem(keys.HEARTBEATS, member)
                continue
            pipe.zadd(keys.HEARTBEATS, {member: now}, xx=True)
            ids = keys.heartbeat_member_ids(member)
            marked, host = dispatched_to(value)
            if ids is not None and marked and not claimable:
                pipe.execute_command("PEXPIRE", keys.attempt_heartbeat_key(*ids), slack, "LT")
            if ids is not None and value == REPORTED_MARK and 0 <= ttl < overdue:
                reported.append(ids)
            # a job on a host's queue (one on the shared queue waits for a host: check_hosts)
            if ids is not None and marked and claimable and host is not None:
                waiting.append((*ids, host))
        pipe.execute()
        for member, live in zip(members, alive, strict=True):
            if not live:
                self._isolated("heartbeat", member, self._lost, member, slack)
        if waiting:
            self._isolated("queued jobs", str(waiting[0]), self._jobs_moved, waiting)
        if reported:
            self._isolated(
                "reported",
                str(reported[0]),
                self._take_reported,
                reported,
                "it reported long ago and was not taken (Mother's relay did not hear of it)",
            )

    def _jobs_moved(self, waiting: list[tuple[str, int, int, str]]) -> None:
        """Attempts whose job still waits for a worker on the host Mother chose (the dispatch mark, the
        token not claimed): one whose RQ job is queued and on neither that host's queues nor being
        dequeued was moved off it (the worker user may write RQ's keys) and would wait out its claim time,
        the phase's timeout. It is dispatched again now (as :meth:`reconcile` does for a job whose hash
        is gone), and that is recorded as a violation. One consistent read (MULTI) of every job's status
        and place."""
        job_ids = [keys.phase_job_id(*ids[:3]) for ids in waiting]
        pipe = self.rt.rq_redis.pipeline(transaction=True)
        places_of = []
        for (_run, _index, _attempt, host), job_id in zip(waiting, job_ids, strict=True):
            queues = [self.rt.queue(keys.host_queue(base, host)) for base in HOST_QUEUES]
            places = [key for queue in queues for key in (queue.key, queue.intermediate_queue_key)]
            places_of.append(places)
            pipe.hget(Job.key_for(job_id), "status")
            for place in places:
                pipe.lpos(place, job_id)
        found = iter(pipe.execute())
        for (run_id, index, attempt, _host), job_id, places in zip(
            waiting, job_ids, places_of, strict=True
        ):
            status = next(found)
            if any([next(found) is not None for _ in places]) or status != b"queued":
                continue
            self.rt.violation(
                "rq_job_moved",
                run_id=run_id,
                phase_index=index,
                attempt=attempt,
                job_id=job_id,
                why="its job was queued and on no queue: dispatched again",
            )
            self._redispatch(run_id, job_id)

    def take_results(self) -> None:
        """Every result waiting in a current attempt's key: Mother's relay may not have heard of it (no
        Mother led, or the relay was not listening), so it is taken now, fenced as any result (one the
        relay did append is then stale). When Mother becomes leader and each time its relay listens again."""
        members = self.rt.redis.zrange(keys.HEARTBEATS, 0, -1)
        named = [
            ids for ids in (keys.heartbeat_member_ids(str(m)) for m in members) if ids is not None
        ]
        for at in range(0, len(named), BATCH):
            batch = named[at : at + BATCH]
            self._isolated(
                "results",
                str(batch[0]),
                self._take_reported,
                batch,
                "Mother's relay did not hear of it",
                False,
            )

    def _take_reported(
        self, reported: list[tuple[str, int, int]], why: str, lose_missing: bool = True
    ) -> None:
        """Attempts still their run's current one whose result is in their own key
        (``attempt_result:{run}:{i}:{a}``, which only the attempt writes) and was not taken: each taken
        from there, fenced as any result. With ``lose_missing`` (attempts that marked their result
        reported long ago) an attempt with no result there (its horse died between the mark and the
        result) has its heartbeat key deleted, so it is lost at the next check."""
        positions = self._positions([run_id for run_id, _index, _attempt in reported])
        current = [
            ids
            for ids, position in zip(reported, positions, strict=True)
            if position is not None
            and position[0] in ACTIVE_STATUSES
            and (position[1], position[2]) == (ids[1], ids[2])
        ]
        if not current:
            return
        found = self.rt.redis.mget([keys.attempt_result_key(*ids) for ids in current])
        lost: list[str] = []
        for ids, raw in zip(current, found, strict=True):
            taken = _stored_result(ids, raw)
            if isinstance(taken, str) and not lose_missing:
                continue
            if isinstance(taken, str):
                run_id, index, attempt = ids
                log.warning(
                    "reported_result_not_there",
                    run_id=run_id,
                    phase_index=index,
                    attempt=attempt,
                    why=f"its heartbeat says it reported, and {taken}: taken for lost",
                )
                lost.append(keys.attempt_heartbeat_key(*ids))
                continue
            log.warning(
                "result_taken_from_its_key",
                run_id=ids[0],
                phase_index=ids[1],
                attempt=ids[2],
                why=why,
            )
            on_phase_result(self.rt, *taken)
        if lost:
            # lost at the next check
            self.rt.redis.delete(*lost)

    def _restarted_within(self, slack_ms: int) -> bool:
        """Whether the server started less than two heartbeat timeouts ago (``INFO server``)."""
        uptime = self.rt.redis.info("server").get("uptime_in_seconds")
        return isinstance(uptime, int) and uptime * 1000 < 2 * slack_ms

    def _beats(self, members: list[str]) -> list[tuple[str | None, bool, int]]:
        """Each attempt's heartbeat key (None: gone; a member that names no attempt: None too), whether
        its token still waits to be claimed (one that waits for a host has none to claim: waiting), and
        the key's time to live in ms: one round trip, and one more for the attempts still marked
        dispatched to a host."""
        named = [keys.heartbeat_member_ids(member) for member in members]
        pipe = self.rt.redis.pipeline(transaction=False)
        for ids in named:
            if ids is not None:
                pipe.get(keys.attempt_heartbeat_key(*ids))
                pipe.pttl(keys.attempt_heartbeat_key(*ids))
        found = iter(pipe.execute() if any(ids is not None for ids in named) else [])
        read = [(next(found), int(next(found))) if ids else (None, -2) for ids in named]
        hosts = [dispatched_to(value) for value, _ttl in read]
        asked = [
            (ids, host)
            for ids, (marked, host) in zip(named, hosts, strict=True)
            if ids is not None and marked and host is not None
        ]
        claimable: dict[tuple[str, int, int], bool] = {}
        if asked:
            pipe = self.rt.redis.pipeline(transaction=False)
            for ids, host in asked:
                pipe.exists(keys.host_token_key(host, *ids))
            for (ids, _host), there in zip(asked, pipe.execute(), strict=True):
                claimable[ids] = bool(there)
        return [
            (value, claimable.get(ids, marked) if ids else False, ttl)
            for ids, (value, ttl), (marked, _host) in zip(named, read, hosts, strict=True)
        ]

    def check_hosts(self) -> None:
        """The worker hosts (mother.hosts): a job queued on a host that stopped, or whose line is gone (dead
        for a heartbeat timeout), is dispatched again to a live one, and so is a job that waited on the
        shared queue for a host, once one is live; a host that stopped is forgotten, one gone for long too,
        and a registered host without its user (a Redis restart) gets it again."""
        table = self.rt.hosts
        table.refresh()
        for host in [*table.stopped, *table.missing]:
            self._move_queued(host, f"host {host} is gone")
        if table.live:
            self.take_awaited()
            self._rebalance()
            self._stalled()
        users = self._hosts_users or self.ticks % self.reconcile_every == 1
        self._hosts_users = False
        hosts.check(self.rt, self._hosts_lost, users=users)
        if users:
            self.reapply_principals()
        if table.live:
            self._move_orphaned()

    def reapply_principals(self) -> None:
        """Principals whose ACL user the server lost (a restart without saved ACLs, a failover: ACL
        users are not replicated) get it back from the registry, at Mother's start, when it takes the
        lead and every few ticks; said in the activity stream. One that cannot (no digest kept) is said
        once a process."""
        made, cannot = principals.reapply(self.rt.redis)
        if made:
            self.rt.emit(
                self.rt.redis,
                "principal_users_reapplied",
                principals=made,
                why="the server had lost them (a restart or a failover keeps no ACL user)",
            )
            log.warning("principal_users_reapplied", principals=made)
        fresh = [name for name in cannot if name not in self._cannot_reapply]
        if fresh:
            self._cannot_reapply.update(fresh)
            log.error(
                "principal_users_not_reapplied",
                principals=fresh,
                why="their records keep no password digest (made before it was kept): "
                "`mother principals rotate NAME` once, with an administrator's connection",
            )

    def _move_orphaned(self) -> None:
        """Jobs on the queues of a host no longer registered (forgotten between a dispatch that chose it
        and its job's arrival, or with jobs the moves above had not reached) go to a live host; the empty
        queues of forgotten hosts leave RQ's set of queues. Two round trips."""
        registered = self.rt.hosts.registered
        orphans = []
        for name in self.rt.redis.smembers(keys.RQ_QUEUES):
            base, _, host = str(name).removeprefix(keys.RQ_QUEUE_PREFIX).partition(".")
            if base in HOST_QUEUES and keys.is_host_id(host) and host not in registered:
                orphans.append((str(name), host))
        if not orphans:
            return
        pipe = self.rt.redis.pipeline(transaction=False)
        for name, _host in orphans:
            pipe.llen(name)
        for (name, host), waiting in zip(orphans, pipe.execute(), strict=True):
            if waiting:
                self._move_queued(host, f"host {host} was forgotten")
            else:
                self.rt.redis.srem(keys.RQ_QUEUES, name)

    def _rebalance(self) -> None:
        """Jobs waiting on a host whose workers are all busy, while another host has workers free (a
        parent waiting for its child on the host its child was queued for; hosts that finish at
        different speeds): the oldest of them, queued at least ``REBALANCE_AFTER_MS`` ago, are
        dispatched again to the hosts with free slots, as many as there are."""
        live = self.rt.hosts.live
        free = {h: s.concurrency - s.busy - s.queued for h, s in live.items()}
        spare = sum(f for f in free.values() if f > 0)
        for host, state in live.items():
            if spare <= 0:
                return
            if not state.queued or free[host] > 0:
                continue
            spare -= self._move_queued(
                host,
                f"host {host} has no worker free and another host has",
                limit=spare,
                older_ms=REBALANCE_AFTER_MS,
            )

    def _move_queued(self, host: str, why: str, *, limit: int = BATCH, older_ms: int = 0) -> int:
        """Move the oldest jobs waiting on ``host``'s queues (up to ``limit``) to other live hosts
        (:meth:`_move`); returns how many were looked at."""
        looked = 0
        for base in HOST_QUEUES:
            name = keys.host_queue(base, host)
            for job_id in self.rt.queue(name).get_job_ids(0, min(limit - looked, BATCH)):
                looked += 1
                self._isolated("host's queue", job_id, self._move, job_id, why, name, older_ms)
        return looked

    def take_awaited(self) -> None:
        """The attempts dispatched while no host was live (``hosts:awaited``): their jobs go to a live host
        now, with their tokens (a member whose job is no longer waiting is dropped)."""
        members = [str(m) for m in self.rt.redis.zrange(keys.HOSTS_AWAITED, 0, BATCH - 1)]
        outcomes: dict[str, str] = {}

        def move(member: str, job_id: str) -> None:
            outcomes[member] = self._move(job_id, "a host is live now", AWAITING_QUEUE)

        for member in members:
            ids = keys.heartbeat_member_ids(member)
            if ids is None:
                outcomes[member] = "gone"
            else:
                self._isolated("awaiting a host", member, move, member, keys.phase_job_id(*ids))
        # moved ones are out already (mh_readdress); one that failed is tried again at the next look
        done = [m for m, outcome in outcomes.items() if outcome not in ("moved", "wait")]
        if done:
            self.rt.redis.zrem(keys.HOSTS_AWAITED, *done)

    def _stalled(self) -> None:
        """A live host whose line says it has workers free while the oldest job on its queues has waited
        a heartbeat timeout is not taking its jobs (its workers wedged, or it is not what it says): its
        jobs go to other hosts, and Mother queues nothing for it for ``AVOID_SECONDS`` while another
        host is live (``hosts:avoided``). Two round trips, for the hosts that have jobs waiting."""
        table = self.rt.hosts
        if len(table.live) < 2:
            return
        names = [
            (host, keys.host_queue(base, host))
            for host, state in table.live.items()
            if state.queued and state.busy < state.concurrency and host not in table.avoided
            for base in HOST_QUEUES
        ]
        if not names:
            return
        pipe = self.rt.rq_redis.pipeline(transaction=False)
        for _host, name in names:
            pipe.lindex(self.rt.queue(name).key, 0)
        heads = pipe.execute()
        pipe = self.rt.rq_redis.pipeline(transaction=False)
        for head in heads:
            if head is not None:
                pipe.hget(Job.key_for(head.decode() if isinstance(head, bytes) else head), "meta")
        metas = iter(pipe.execute())
        now = self.rt.clock.now_ms()
        slack = int(self.rt.settings.service.heartbeat_timeout_seconds * 1000)
        stalled: set[str] = set()
        for (host, _name), head in zip(names, heads, strict=True):
            if head is None:
                continue
            try:
                meta = orjson.loads(next(metas) or b"{}")
            except orjson.JSONDecodeError:
                meta = {}
            dispatched = meta.get(DISPATCHED_MS) if isinstance(meta, dict) else None
            if isinstance(dispatched, int) and now - dispatched >= slack:
                stalled.add(host)
        for host in sorted(stalled):
            log.warning(
                "host_not_taking_jobs",
                host=host,
                why=f"its line says it has workers free and its oldest job has waited {slack}ms: "
                f"its jobs go to other hosts, and none to it for {AVOID_SECONDS:g}s",
            )
            self.rt.redis.zadd(keys.HOSTS_AVOIDED, {host: now + int(AVOID_SECONDS * 1000)})
            table.avoided.add(host)
            self._move_queued(host, f"host {host} is not taking its jobs")
        self.rt.redis.zremrangebyscore(keys.HOSTS_AVOIDED, "-inf", now)

    def _move(self, job_id: str, why: str, off: str, older_ms: int = 0) -> str:
        """Move a phase job of ours waiting on ``off`` (a host's queue, or the one where jobs await a
        host) to the queue of another live host, with its token (``mh_readdress``: the same attempt,
        nothing composed or counted again), when it was dispatched ``older_ms`` ago or more (server
        time). Returns 'moved'; 'wait' (too young, or no other host live); 'taken' (no longer on that
        queue: a worker dequeued it first, or it was removed); 'gone' (no such job of ours); 'anew' (its
        token was not there: the attempt was dispatched anew)."""
        job = self._phase_job(job_id)
        if job is None:
            return "gone"
        meta = job.meta or {}
        dispatched = meta.get(DISPATCHED_MS)
        now = self.rt.clock.now_ms()
        if older_ms and isinstance(dispatched, int) and now - dispatched < older_ms:
            return "wait"
        base, _, source = off.partition(".")
        if off == AWAITING_QUEUE:
            base, source = str(meta.get(QUEUE_META) or AGENTS_QUEUE), ""
        if base not in HOST_QUEUES:
            base = AGENTS_QUEUE
        host = self.rt.hosts.choose(exclude=source or None)
        if host is None:
            return "wait"
        ids = (str(job.args[0]), int(job.args[1]), int(job.args[2]))
        to = keys.host_queue(base, host)
        got = call(
            self.rt.redis,
            "mh_readdress",
            [
                self.rt.queue(off).key,
                keys.host_token_key(source, *ids) if source else keys.awaiting_token_key(*ids),
                self.rt.queue(to).key,
                keys.host_token_key(host, *ids),
                Job.key_for(job_id),
                keys.attempt_heartbeat_key(*ids),
                keys.HOSTS_AWAITED,
                Queue.redis_queues_keys,
            ],
            [job_id, to, attempt_users.dispatch_mark(host), keys.heartbeat_member(*ids)],
        )
        if int(got) == 0:
            return "taken"
        if int(got) < 0:
            self._redispatch(ids[0], job_id, f"{why}; its token was gone")
            return "anew"
        log.info("phase_moved", run_id=ids[0], job_id=job_id, host=host, why=why)
        self.rt.emit(
            self.rt.redis,
            "phase_moved",
            run_id=ids[0],
            phase_index=ids[1],
            attempt=ids[2],
            job_id=job_id,
            host=host,
            moved_from=source or None,
            why=why,
        )
        return "moved"

    def _phase_job(self, job_id: str) -> Job | None:
        """The RQ job ``job_id`` when it is a phase job of ours naming the attempt its id says (a job
        anyone with the worker credentials queued, naming another run's attempt, is None)."""
        try:
            job = Job.fetch(
                job_id, connection=self.rt.rq_redis, serializer=self.rt.agents_queue.serializer
            )
        except NoSuchJobError:
            return None
        if (
            job.func_name != JOB_FUNCTION
            or keys.member_of_job(job.args) is None
            or keys.phase_job_id(*job.args) != job_id
        ):
            return None
        return job

    def _positions(self, run_ids: list[str]) -> list[tuple[str, int, int] | None]:
        """Each run's (status, phase_index, attempt), one round trip (None: no run, or no position)."""
        pipe = self.rt.redis.pipeline(transaction=False)
        for run_id in run_ids:
            runs.queue_position_read(pipe, run_id)
        found = pipe.execute(raise_on_error=False) if run_ids else []
        return [
            runs.parse_position(raw) if not isinstance(raw, Exception) else None for raw in found
        ]

    def sweep_attempt_users(self) -> None:
        """Delete the ACL users (and heartbeat keys) of attempts that are no longer their run's current
        one: ended, retried, the run over. An attempt ahead of its run's position (dispatched, its move
        not applied yet) is kept. Then the current ones that lost their user get it again."""

        def current(ids: list[tuple[str, int, int]]) -> list[bool]:
            positions = self._positions([run_id for run_id, _index, _attempt in ids])
            return [
                position is not None
                and position[0] in ACTIVE_STATUSES
                and (index, attempt) >= (position[1], position[2])
                for (_run, index, attempt), position in zip(ids, positions, strict=True)
            ]

        remaining = attempt_users.sweep(self.rt.redis, current)
        self._remint_missing(remaining)
        now = time.monotonic()
        if self._orphans_at is None or now - self._orphans_at >= ORPHANS_EVERY_SECONDS:
            self._orphans_at = now
            attempt_users.fold_orphans(self.rt.redis, current)

    def _remint_missing(self, have: list[str] | None = None) -> None:
        """The current attempts in Mother's index whose ACL user is gone (a Redis restart keeps none) get
        it again, from their run's token digest. ``have``: the attempt users there are, when known."""
        members = [str(m) for m in self.rt.redis.zrange(keys.HEARTBEATS, 0, BATCH - 1)]
        there = set(attempt_users.users(self.rt.redis) if have is None else have)
        missing = [
            ids
            for m in members
            if (ids := keys.heartbeat_member_ids(m)) is not None
            and keys.attempt_user(*ids) not in there
        ]
        if not missing:
            return
        positions = self._positions([run_id for run_id, _index, _attempt in missing])
        run_keys = [keys.run_key(run_id) for run_id, _i, _a in missing]
        pipe = self.rt.redis.pipeline(transaction=False)
        pipe.execute_command("JSON.MGET", *run_keys, "$.token_digest")
        pipe.execute_command("JSON.MGET", *run_keys, "$.user_id")
        digests, user_ids = pipe.execute()
        today = self.rt.clock.today()
        for (run_id, index, attempt), position, raw, raw_user in zip(
            missing, positions, digests, user_ids, strict=True
        ):
            if position is None or position[0] not in ACTIVE_STATUSES:
                continue
            if (position[1], position[2]) != (index, attempt) or not isinstance(raw, str):
                continue
            digest = orjson.loads(raw)
            user = orjson.loads(raw_user) if isinstance(raw_user, str) else None
            if not (user and isinstance(user[0], str) and keys.is_id(user[0])):
                continue
            if digest and isinstance(digest[0], str) and len(digest[0]) == 64:
                attempt_users.remint(
                    self.rt.redis, run_id, index, attempt, digest[0], user[0], today
                )
                log.info(
                    "attempt_user_made_again", run_id=run_id, phase_index=index, attempt=attempt
                )

    def _lost(self, member: str, slack: int) -> None:
        run_id, index, attempt = keys.parse_heartbeat_member(member)
        self._failed_attempt(
            run_id, index, attempt, f"worker lost: no heartbeat for {slack / 1000:g}s"
        )

    def check_rq(self) -> None:
        """RQ's failed jobs of every phase queue (the shared one, each registered host's): one round trip
        to look; RQ's started registries cleaned up at each reconcile."""
        names = [AGENTS_QUEUE] + [
            keys.host_queue(base, host) for host in self.rt.hosts.registered for base in HOST_QUEUES
        ]
        queues = [self.rt.queue(name) for name in names]
        if self.ticks % self.reconcile_every == 1:
            for queue in queues:
                StartedJobRegistry(queue=queue).cleanup()
        registries = [FailedJobRegistry(queue=queue) for queue in queues]
        pipe = self.rt.rq_redis.pipeline(transaction=False)
        for registry in registries:
            pipe.zrange(registry.key, 0, BATCH - 1)
        for registry, job_ids in zip(registries, pipe.execute(), strict=True):
            for raw in job_ids:
                job_id = raw.decode() if isinstance(raw, bytes) else raw
                registry.remove(job_id)
                self._isolated("failed job", job_id, self._job_failed, job_id)

    def _job_failed(self, job_id: str) -> None:
        # only a phase job of ours names an attempt (a refused job naming another run's attempt changes nothing)
        job = self._phase_job(job_id)
        if job is None:
            return
        run_id, index, attempt = job.args
        # any worker's credentials can put a job in the registry: it counts only when the attempt is not
        # alive (its worker drops the heartbeat key when its horse dies, so that is at once)
        if self._beats([keys.heartbeat_member(run_id, int(index), int(attempt))])[0][0] is not None:
            log.warning("failed_job_ignored", job_id=job_id, why="its attempt is still alive")
            return
        result = job.latest_result()
        info = (result.exc_string if result is not None else "") or ""
        last = info.strip().splitlines()[-1] if info.strip() else "the job process died"
        self._failed_attempt(run_id, int(index), int(attempt), f"worker job failed: {last[:300]}")

    def _isolated(self, check: str, about: str, func: Any, *args: Any) -> None:
        """One item of a check (``about``: the run, heartbeat member or job it is about): what fails for it
        alone (a run record edited into something that is not one, a member that is not one) is logged,
        and the other items are still checked (else one due at every tick would keep every deadline,
        lost worker and failed job behind it from being acted on). Redis going away stops the tick."""
        unless_redis_down(log, "watchdog_check_failed", func, *args, check=check, about=about)

    def _failed_attempt(self, run_id: str, index: int, attempt: int, error: str) -> None:
        state = self.rt.load_run(run_id)
        if (
            state is None
            or state.status not in ACTIVE_STATUSES
            or (state.phase_index, state.attempt) != (index, attempt)
        ):
            return
        log.warning(
            "phase_attempt_lost", run_id=run_id, phase_index=index, attempt=attempt, error=error
        )
        on_attempt_lost(self.rt, state, error)

    # -- gauges --------------------------------------------------------------
    def refresh_gauges(self) -> None:
        """budget:global from the truth: concurrent runs (live run deadlines), queue depth
        (submissions not yet handled: pending + lag of the group; and runs waiting for a slot),
        Redis memory (INFO)."""
        r = self.rt.redis
        group = self.rt.settings.service.consumer_group
        depth = r.zcard(keys.ADMISSION_WAITING)
        for stream in self.streams():
            if not stream.startswith((keys.SUBMISSIONS_STREAM, keys.SPAWNS_STREAM)):
                continue
            backlog = group_backlog(r, stream, group)
            depth += backlog[0] + (backlog[1] or 0) if backlog is not None else 0
        memory_mb = int(r.info("memory")["used_memory"]) // (1024 * 1024)
        concurrent = r.zcard(keys.RUN_DEADLINES)
        refresh_gauges(r, concurrent, depth, memory_mb)

    # -- reconcile -----------------------------------------------------------
    def reconcile(self) -> None:
        """Re-dispatch running runs whose current attempt has no job at all.

        Two pipelined round trips per batch (each run's status and attempt, then whether
        its job exists); only a run that lost its job is loaded whole.
        """
        # the connection decodes replies
        run_ids = cast("list[str]", self.rt.redis.zrange(keys.PHASE_DEADLINES, 0, -1))
        for start in range(0, len(run_ids), BATCH):
            batch = run_ids[start : start + BATCH]
            pipe = self.rt.redis.pipeline(transaction=False)
            for run_id in batch:
                runs.queue_position_read(pipe, run_id)
            running = []
            for run_id, raw in zip(batch, pipe.execute(raise_on_error=False), strict=True):
                position = parse_position(raw)
                if position is not None and position[0] in ACTIVE_STATUSES and position[2] > 0:
                    running.append((run_id, keys.phase_job_id(run_id, position[1], position[2])))
            pipe = self.rt.redis.pipeline(transaction=False)
            for _, job_id in running:
                pipe.exists(Job.key_for(job_id))
            for (run_id, job_id), exists in zip(running, pipe.execute(), strict=True):
                if exists:
                    continue
                self._isolated("reconcile", run_id, self._redispatch, run_id, job_id)

    def _redispatch(self, run_id: str, job_id: str, why: str = "its job was gone") -> None:
        """Dispatch the run's current attempt again, composed anew with a new token (``job_id`` must be
        its job: one whose hash is gone, one moved off every queue of its host, one whose token was gone
        and that mh_readdress took off its queue): its id is queued anew."""
        state = self.rt.load_run(run_id)
        if (
            state is None
            or state.status not in ACTIVE_STATUSES
            or keys.phase_job_id(run_id, state.phase_index, state.attempt) != job_id
        ):
            return
        log.warning("phase_redispatched", run_id=run_id, job_id=job_id, why=why)
        dispatch(
            self.rt, run_id, state.spec, state.phase_index, state.attempt, outputs=outputs_of(state)
        )


def _stored_result(
    ids: tuple[str, int, int], raw: str | bytes | None
) -> tuple[PhaseResult, str | None] | str:
    """The result (and its token) an attempt stored on its own key, or why there is none to take."""
    if raw is None:
        return "no result is stored"
    try:
        stored = orjson.loads(raw)
        result = PhaseResult.model_validate_json(stored["payload"])
        token = stored.get("token")
    except (orjson.JSONDecodeError, KeyError, TypeError, ValidationError) as exc:
        return f"its stored result cannot be read ({str(exc)[:200]})"
    if (result.run_id, result.phase_index, result.attempt) != ids:
        return "its stored result is another attempt's"
    return result, token if isinstance(token, str) else None
