"""Mother's watchdog: deadlines, lost and failed phase jobs, worker hosts, stuck runs.

Runs every ``service.watchdog_interval_seconds`` on the leader:

- run and phase deadlines (zsets scored by server ms; "due" is decided with
  the server's ``TIME`` inside ``mh_due``) end the run ``timeout``;
- a started phase whose heartbeat key is gone (its host stopped beating for it: the host died, or its
  work-horse did) is a failed attempt: retried or ``retries_exhausted``;
- RQ's own started-job cleanup runs here for each host's queues (RQ would otherwise wait for a worker's
  maintenance), then jobs in their failed registries (a work-horse killed or timed out) are failed
  attempts;
- the worker hosts: a job queued on a host that is gone (stopped, silent for a heartbeat timeout,
  removed) goes to a live one, and so does an attempt that waited for a live host, and a job waiting on
  a host with no worker free while another has one (:mod:`mother.hosts.moves`); every enrolled party's
  ACL user the server lost is made again (:mod:`mother.identities.reapply`);
- every few ticks, a running run whose current attempt has no RQ job is dispatched again (closes the
  window between a transition and its enqueue);
- a run whose termination record was written but whose end was not applied
  within ``finish_end_after_seconds`` (the Mother that wrote it died in between)
  gets its end applied: reservations given back, ledger closed, ``terminated``
  logged (marked ``late``), a spawned child's parent slot returned.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import orjson
from rq.job import Job
from rq.registry import FailedJobRegistry, StartedJobRegistry

from mother import calls, identities, keys
from mother.budget import Guard
from mother.config import AGENTS_QUEUE, TOOLS_QUEUE
from mother.connection import unless_redis_down
from mother.gates.decide import expire
from mother.hosts.liveness import dispatched_to
from mother.hosts.moves import phase_job, rehost
from mother.lifecycle import (
    DISPATCHED_MS,
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
from mother.review import on_attempt_lost
from mother.runtime import Runtime
from mother.security import cap_violations
from mother.streams import group_backlog
from schemas import ACTIVE_STATUSES, RunState, TerminationRecord

__all__ = ["Watchdog"]

log = get_logger("watchdog")
BATCH = 200
# a job waiting on a host with no worker free is moved to a host with one once it has waited this long
# (a job queued a moment ago is about to be taken)
REBALANCE_AFTER_MS = 1000
# the queues Mother queues phase jobs on, on each host
PHASE_KINDS = (AGENTS_QUEUE, TOOLS_QUEUE)
# how long Mother queues nothing for a host that did not take its jobs while its line said it could
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
        # make the enrolled parties' users again at the next tick (not only every few ticks)
        self._reapply = True
        # what could not be made again, said once
        self._said: set[str] = set()

    def reapply_soon(self) -> None:
        """At the next tick, make again the ACL users of enrolled parties the server lacks (Mother became
        leader or reconnected: after a failover or a restart, which keep no ACL user)."""
        self._reapply = True

    def tick(self) -> None:
        self.ticks += 1
        self.rt.clock.sync()
        self.check_deadlines()
        self.check_heartbeats()
        self.check_rq()
        self.check_hosts()
        self.finish_ends()
        admit_waiting(self.rt)
        if self._reapply or self.ticks % self.reconcile_every == 1:
            self._reapply = False
            self.reapply_identities()
        if self.ticks % self.reconcile_every == 1:
            self.reconcile()
            self.refresh_gauges()
            self.trim()
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
        """The attempts not seen alive for a heartbeat timeout (Mother's index, ``mother:heartbeats``): one
        no longer its run's current attempt leaves the index (its key goes); one whose heartbeat key is
        still there is alive (seen now); one whose key is gone is lost. Only Mother writes those keys, at
        the beats of the host that holds the attempt: no other host can keep it alive or end it. An
        attempt whose job still waits for a worker (the dispatch mark) has its job's place checked."""
        slack = int(self.rt.settings.service.heartbeat_timeout_seconds * 1000)
        due = calls.due(self.rt.redis, keys.HEARTBEATS, slack_ms=slack, limit=BATCH)
        if not due:
            return
        members = [member for member, _ in due]
        named = [keys.heartbeat_member_ids(m) for m in members]
        pipe = self.rt.redis.pipeline(transaction=False)
        for ids in named:
            if ids is not None:
                runs.queue_position_read(pipe, ids[0])
                pipe.get(keys.attempt_heartbeat_key(*ids))
        found = iter(pipe.execute(raise_on_error=False) if any(named) else [])
        restarted: bool | None = None
        now = self.rt.clock.now_ms()
        lost: list[str] = []
        # attempts whose job has waited for a worker a heartbeat timeout since they were last checked
        waiting: list[tuple[str, int, int, str]] = []
        pipe = self.rt.redis.pipeline(transaction=False)
        for member, ids in zip(members, named, strict=True):
            if ids is None:
                # not one (edited by hand): dropped, and said
                pipe.zrem(keys.HEARTBEATS, member)
                self._isolated("heartbeat", member, keys.parse_heartbeat_member, member)
                continue
            raw, value = next(found), next(found)
            position = parse_position(raw) if isinstance(raw, str) else None
            # ahead of its run's position: dispatched, its move not applied yet
            current = (
                position is not None
                and position[0] in ACTIVE_STATUSES
                and (ids[1], ids[2]) >= (position[1], position[2])
            )
            if not current:
                pipe.zrem(keys.HEARTBEATS, member)
                pipe.delete(keys.attempt_heartbeat_key(*ids))
                continue
            if value is None:
                if restarted is None:
                    restarted = self._restarted_within(slack)
                # Redis restarted: keys may have expired while it was down; a timeout to beat first
                if not restarted and not self._asks_behind(ids[0]):
                    pipe.zrem(keys.HEARTBEATS, member)
                    lost.append(member)
                    continue
            pipe.zadd(keys.HEARTBEATS, {member: now}, xx=True)
            marked, host = dispatched_to(value)
            if marked and host is not None:
                waiting.append((*ids, host))
        pipe.execute()
        for member in lost:
            self._isolated("heartbeat", member, self._lost, member, slack)
        if waiting:
            self._isolated("queued jobs", str(waiting[0]), self._jobs_moved, waiting)

    def _jobs_moved(self, waiting: list[tuple[str, int, int, str]]) -> None:
        """Attempts whose job still waits for a worker on the host Mother chose (the dispatch mark): one
        whose RQ job is queued and on none of that host's queues nor being dequeued was moved off them
        (a host may write its own queues' keys) and would wait out its dispatch mark, the phase's timeout.
        It is dispatched again now (as :meth:`reconcile` does for a job whose hash is gone), and that is
        recorded as a violation. One consistent read (MULTI) of every job's status and place."""
        job_ids = [
            keys.phase_job_id(host, run, index, number) for run, index, number, host in waiting
        ]
        pipe = self.rt.rq_redis.pipeline(transaction=True)
        places_of = []
        for (_run, _index, _number, host), job_id in zip(waiting, job_ids, strict=True):
            queues = [self.rt.queue(keys.host_queue(host, kind)) for kind in PHASE_KINDS]
            places = [key for queue in queues for key in (queue.key, queue.intermediate_queue_key)]
            places_of.append(places)
            pipe.hget(Job.key_for(job_id), "status")
            for place in places:
                pipe.lpos(place, job_id)
        found = iter(pipe.execute())
        for (run_id, index, attempt, host), job_id, places in zip(
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
                host=host,
                why="its job was queued and on no queue of its host: dispatched again",
            )
            self._redispatch(run_id, job_id, why="its job was moved off its host's queues")

    def _asks_behind(self, run_id: str) -> bool:
        """Whether Mother has asks of the host holding ``run_id``'s attempt it has not answered yet (its
        beats among them: every Mother was stopped or slow, not the host): the attempt is not lost until
        Mother has caught up with its host's stream. A host can delay only its own attempts' loss so.
        Answered asks are deleted, so the stream's newest entry past the group's last delivered one, or
        an entry delivered and not yet acknowledged, is one not answered."""
        _position, host = runs.read_position_and_host(self.rt.redis, run_id)
        if not keys.is_host(host):
            return False
        stream, group = keys.host_asks_key(host), self.rt.settings.service.consumer_group
        pipe = self.rt.redis.pipeline(transaction=False)
        pipe.xinfo_groups(stream)
        pipe.xrevrange(stream, count=1)
        groups, newest = pipe.execute(raise_on_error=False)
        if isinstance(groups, Exception) or isinstance(newest, Exception) or not newest:
            # no stream, or nothing in it: nothing asked and not answered
            return False
        mine = next((g for g in groups if g.get("name") == group), None)
        if mine is None:
            return True
        if int(mine.get("pending") or 0) > 0:
            return True
        return _entry_id(str(newest[0][0])) > _entry_id(str(mine.get("last-delivered-id", "0-0")))

    def _restarted_within(self, slack_ms: int) -> bool:
        """Whether the server started less than two heartbeat timeouts ago (``INFO server``)."""
        uptime = self.rt.redis.info("server").get("uptime_in_seconds")
        return isinstance(uptime, int) and uptime * 1000 < 2 * slack_ms

    def _lost(self, member: str, slack: int) -> None:
        run_id, index, attempt = keys.parse_heartbeat_member(member)
        self._failed_attempt(
            run_id, index, attempt, f"worker lost: no heartbeat for {slack / 1000:g}s"
        )

    # -- hosts ----------------------------------------------------------------
    def check_hosts(self) -> None:
        """The worker hosts (mother.hosts): a job queued on a host that stopped, is silent (no beat for a
        heartbeat timeout) or is no longer enrolled goes to a live one; so does an attempt that waited for
        a live host, and a job waiting on a host with no worker free while another host has one."""
        table = self.rt.hosts
        table.refresh()
        if not table.live:
            return
        for host in [*table.stopped, *table.missing, *self._unenrolled(table.enrolled)]:
            self._move_queued(host, f"host {host} is gone")
        self.take_awaited()
        self._stalled()
        self._rebalance()

    def _unenrolled(self, enrolled: dict[str, Any]) -> list[str]:
        """Hosts whose queues hold jobs and that are no longer enrolled (removed since)."""
        found: set[str] = set()
        for name in self.rt.redis.smembers(keys.RQ_QUEUES):
            place = keys.host_of_queue(str(name).removeprefix(keys.RQ_QUEUE_PREFIX))
            if place is not None and place[0] not in enrolled and place[1] in PHASE_KINDS:
                found.add(place[0])
        return sorted(found)

    def _move_queued(self, host: str, why: str, *, limit: int = BATCH, older_ms: int = 0) -> int:
        """Move the oldest jobs waiting on ``host``'s phase queues (up to ``limit``) to other live hosts;
        returns how many were looked at."""
        looked = 0
        now = self.rt.clock.now_ms()
        for kind in PHASE_KINDS:
            queue = self.rt.queue(keys.host_queue(host, kind))
            for job_id in queue.get_job_ids(0, min(limit - looked, BATCH)):
                looked += 1
                job = phase_job(self.rt, job_id)
                if job is None:
                    continue
                dispatched = (job.meta or {}).get(DISPATCHED_MS)
                if older_ms and isinstance(dispatched, int) and now - dispatched < older_ms:
                    continue
                run_id, index, attempt = job.args

                def move(
                    run_id: str = run_id, index: int = int(index), attempt: int = int(attempt)
                ) -> None:
                    rehost(self.rt, run_id, index, attempt, from_host=host, why=why)

                self._isolated("host's queue", job_id, move)
        return looked

    def take_awaited(self) -> None:
        """The attempts that waited for a live host (``hosts:awaited``) go to one now (a member whose
        attempt is no longer waiting is dropped)."""
        members = [str(m) for m in self.rt.redis.zrange(keys.HOSTS_AWAITED, 0, BATCH - 1)]
        done = []
        for member in members:
            ids = keys.heartbeat_member_ids(member)
            outcome = (
                rehost(self.rt, *ids, from_host=None, why="a host is live now")
                if ids is not None
                else "gone"
            )
            if outcome != "wait":
                done.append(member)
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
            (host, keys.host_queue(host, kind))
            for host, state in table.live.items()
            if any(state.queued.values())
            and state.busy < state.concurrency
            and host not in table.avoided
            for kind in PHASE_KINDS
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
            meta = _meta(next(metas))
            dispatched = meta.get(DISPATCHED_MS)
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

    def _rebalance(self) -> None:
        """Jobs waiting on a host whose workers are all busy, while another host has workers free (a
        parent waiting for its child on the host its child was queued for; hosts that finish at
        different speeds): the oldest, queued at least ``REBALANCE_AFTER_MS`` ago, go to the hosts with
        free workers, as many as there are."""
        live = self.rt.hosts.live
        spare = sum(max(0, h.free()) for h in live.values())
        for host, state in live.items():
            if spare <= 0:
                return
            if not any(state.queued.get(k) for k in PHASE_KINDS) or state.free() > 0:
                continue
            spare -= self._move_queued(
                host,
                f"host {host} has no worker free and another host has",
                limit=spare,
                older_ms=REBALANCE_AFTER_MS,
            )

    def reapply_identities(self) -> None:
        """Every enrolled principal's and host's ACL user the server lost (a restart without saved ACLs, a
        failover: ACL users are not replicated) is made again from the registry, at Mother's start, on
        taking the lead, after a reconnect and every few ticks; said in the activity stream. With
        ``service.make_acl_users`` off (a managed Redis that refuses ACL SETUSER) only what is missing
        is said, once."""
        done = identities.reapply(self.rt.redis, make=self.rt.settings.service.make_acl_users)
        if done.made:
            self.rt.emit(
                self.rt.redis,
                "acl_users_reapplied",
                users=done.made,
                why="the server had lost them (a restart or a failover keeps no ACL user)",
            )
            log.warning("acl_users_reapplied", users=done.made)
        fresh = [u for u in [*done.missing, *done.cannot] if u not in self._said]
        if fresh:
            self._said.update(fresh)
            log.error(
                "acl_users_missing",
                users=fresh,
                why="the server lacks them and Mother did not make them: load `mother acl export`'s "
                "file (service.make_acl_users is off, or the server refused ACL SETUSER), or rotate "
                "a principal made before digests were kept",
            )

    # -- RQ's failed jobs ---------------------------------------------------
    def check_rq(self) -> None:
        """RQ's failed jobs of every enrolled host's phase queues: one round trip to look; RQ's started
        registries cleaned up at each reconcile."""
        names = [
            keys.host_queue(host, kind) for host in self.rt.hosts.enrolled for kind in PHASE_KINDS
        ]
        queues = [self.rt.queue(name) for name in names]
        if self.ticks % self.reconcile_every == 1:
            for queue in queues:
                StartedJobRegistry(queue=queue).cleanup()
        registries = [FailedJobRegistry(queue=queue) for queue in queues]
        if not registries:
            return
        pipe = self.rt.rq_redis.pipeline(transaction=False)
        for registry in registries:
            pipe.zrange(registry.key, 0, BATCH - 1)
        for registry, job_ids in zip(registries, pipe.execute(), strict=True):
            for raw in job_ids:
                job_id = raw.decode() if isinstance(raw, bytes) else raw
                registry.remove(job_id)
                self._isolated("failed job", job_id, self._job_failed, job_id)

    def _job_failed(self, job_id: str) -> None:
        # only a phase job of ours names an attempt (one naming another run's attempt changes nothing)
        job = phase_job(self.rt, job_id)
        if job is None:
            return
        run_id, index, attempt = job.args
        # a job in the registry counts only once its attempt is not alive: its host says at once when its
        # horse died, and Mother then drops the attempt's heartbeat key
        if self.rt.redis.exists(keys.attempt_heartbeat_key(run_id, int(index), int(attempt))):
            log.info("failed_job_waits", job_id=job_id, why="its attempt is still alive")
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
        """Re-dispatch running runs whose current attempt has no job at all (and waits for no host).

        Two pipelined round trips per batch (each run's status, attempt and host, then whether its job
        exists); only a run that lost its job is loaded whole.
        """
        # the connection decodes replies
        run_ids = cast("list[str]", self.rt.redis.zrange(keys.PHASE_DEADLINES, 0, -1))
        for start in range(0, len(run_ids), BATCH):
            batch = run_ids[start : start + BATCH]
            pipe = self.rt.redis.pipeline(transaction=False)
            for run_id in batch:
                pipe.execute_command(
                    "JSON.GET", keys.run_key(run_id), *runs.POSITION_PATHS, "$.host"
                )
            running = []
            for run_id, raw in zip(batch, pipe.execute(raise_on_error=False), strict=True):
                position = parse_position(raw) if isinstance(raw, str) else None
                host = orjson.loads(raw).get("$.host", [None]) if isinstance(raw, str) else [None]
                if position is None or position[0] not in ACTIVE_STATUSES or position[2] <= 0:
                    continue
                if host and isinstance(host[0], str) and keys.is_host(host[0]):
                    job_id = keys.phase_job_id(host[0], run_id, position[1], position[2])
                    running.append((run_id, job_id))
            pipe = self.rt.rq_redis.pipeline(transaction=False)
            for _, job_id in running:
                pipe.exists(Job.key_for(job_id))
            for (run_id, job_id), exists in zip(running, pipe.execute(), strict=True):
                if exists:
                    continue
                self._isolated("reconcile", run_id, self._redispatch, run_id, job_id)

    def _redispatch(self, run_id: str, job_id: str, why: str = "its job was gone") -> None:
        """Dispatch the run's current attempt again, composed anew (``job_id`` must be its job, whose hash
        is gone)."""
        state = self.rt.load_run(run_id)
        if (
            state is None
            or state.status not in ACTIVE_STATUSES
            or state.host is None
            or keys.phase_job_id(state.host, run_id, state.phase_index, state.attempt) != job_id
        ):
            return
        log.warning("phase_redispatched", run_id=run_id, job_id=job_id, why=why)
        dispatch(
            self.rt, run_id, state.spec, state.phase_index, state.attempt, outputs=outputs_of(state)
        )


def _meta(raw: Any) -> dict[str, Any]:
    """An RQ job's ``meta`` field (JSON: our serializer), or {} when it is not one."""
    try:
        meta = orjson.loads(raw or b"{}")
    except orjson.JSONDecodeError:
        return {}
    return meta if isinstance(meta, dict) else {}


def _entry_id(text: str) -> tuple[int, int]:
    """A stream entry id as (ms, sequence), to compare."""
    ms, _, seq = text.partition("-")
    return int(ms), int(seq or 0)
