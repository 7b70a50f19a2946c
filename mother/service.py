"""The Mother service: one leader at a time, consuming submissions and worker events.

- **Leadership.** ``mother:leader`` is a lease (``mh_lease``: SET NX PX / renew if
  ours). A standby polls it and takes over within one lease period after the
  leader dies. On taking over it reclaims every pending stream entry.
- **Streams.** Consumer group ``mother`` on its own streams (``mother:submissions``,
  ``mother:commands``, ``mother:events``), the workers' ``mother:spawns``, and each principal's
  ``mother:submissions:{name}`` and ``mother:commands:{name}`` (:mod:`mother.identities.streams`: the
  stream an entry came by is who sent it): at-least-once. An entry is acknowledged after it is handled;
  one whose handling raised stays pending, is reclaimed by XAUTOCLAIM after
  ``claim_idle_seconds`` and, after ``max_deliveries`` attempts, moves to
  ``mother:dead_letter``.
- **Isolation.** An unexpected exception while handling one run's entry ends that
  run ``catastrophic_error``; Mother goes on serving the others.
- **Asks.** Every Mother process, leader and standbys, also runs an ask server (:mod:`mother.asks`):
  what the worker hosts ask on their own streams, applied by whichever Mother reads it.
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import orjson
import redis
from pydantic import ValidationError

from mother import calls, keys
from mother.asks import AskServer
from mother.client import COMMAND_CANCEL, EVENT_PHASE_RESULT
from mother.commands import failure_reply, handle_command, send_reply
from mother.config import Settings
from mother.conflicts import install as install_review_hooks
from mother.connection import Outage, redis_down, sleep_unless, unless_redis_down
from mother.errors import ConfigError, MotherError
from mother.functions import ensure_loaded
from mother.identities.streams import ConsumedStreams, Source
from mother.intake import handle_submission, reject
from mother.lifecycle import end_run
from mother.logs import get_logger
from mother.observe.listing import ensure_index as ensure_runs_index
from mother.records.budgets import publish_limits
from mother.records.conflicts import ensure_index as ensure_conflict_index
from mother.records.libraries import ensure_indexes as ensure_library_indexes
from mother.records.tools import read_registry
from mother.review import on_phase_result
from mother.runtime import Runtime
from mother.specs import fault_models
from mother.streams import Delivery, as_text
from mother.termination import ensure_index
from mother.tools import sync as sync_tools
from mother.watchdog import Watchdog
from schemas import PhaseResult, describe_validation_error
from schemas.budget import PublishedLimits

__all__ = ["Mother"]

log = get_logger("mother")

# how often the leader queues on a live host the attempts that waited for one (one round trip to look)
HOSTS_LOOK_SECONDS = 0.1


class Mother:
    def __init__(
        self,
        settings: Settings,
        *,
        instance: str | None = None,
        make_provider: Callable[..., Any] | None = None,
    ) -> None:
        self.settings = settings
        self.cfg = settings.service
        self.rt = Runtime.create(settings)
        self._check_user()
        self.rt.make_provider = make_provider
        # conflict resolution and human gates review every phase result
        install_review_hooks(self.rt)
        self.instance = instance or f"{keys.leader_prefix(os.getpid())}{uuid.uuid4().hex[:6]}"
        self.consumed = ConsumedStreams(
            self.rt.redis, self.cfg.consumer_group, self.cfg.principals_refresh_seconds
        )
        self.watchdog = Watchdog(self.rt, streams=lambda: self.consumed.streams)
        # what the worker hosts ask: applied by every Mother, standbys too
        self.asks = AskServer(settings, self.instance)
        self.stopping = False
        self.leader = False
        self._hosts_at = 0.0
        self._renewed_at = 0.0
        self._watchdog_at = 0.0
        self._claimed_at = 0.0
        self.log = log.bind(instance=self.instance)

    def _check_user(self) -> None:
        """Stop at the start, in one line, when the connection's ACL user lacks what Mother needs (as
        deploy/users.acl grants its mother user), where every run would fail on its first write."""
        from mother.acl import mother_lacks, whoami

        lacks = mother_lacks(self.rt.redis, self.cfg.make_acl_users)
        if lacks:
            raise ConfigError(
                f"Mother connects as ACL user {whoami(self.rt.redis)!r}, which may not: "
                f"{'; '.join(lacks)}. Grant what deploy/users.acl gives its mother user "
                "(~* &* +@all -@dangerous +info +client|list +module|list +acl|setuser +acl|users), "
                "or set service.make_acl_users false where the server's ACL users are managed"
            )

    # -- lifecycle ---------------------------------------------------------
    def install_signal_handlers(self) -> None:
        def _stop(signum: int, _frame: Any) -> None:
            self.stopping = True

        signal.signal(signal.SIGTERM, _stop)
        signal.signal(signal.SIGINT, _stop)

    def run_forever(self) -> None:
        """Lead (or stand by) until asked to stop. Redis unable to serve (a restart, a failover, maxmemory)
        is waited out with backoff: leadership is dropped, and on recovery the lease is taken again, the
        server functions reloaded if the server came back empty, and unacknowledged entries reclaimed.
        Any other failure of a loop is logged with its traceback and retried a second later."""
        self.log.info("mother_started")
        outage = Outage(self.log, "serve", stop=lambda: self.stopping)
        self.asks.start()
        try:
            while not self.stopping:
                try:
                    if outage.active:
                        # a server that came back empty has no functions (and perhaps no ACL users)
                        ensure_loaded(self.rt.redis)
                        self.watchdog.reapply_soon()
                    if not self._hold_lease():
                        outage.recovered()
                        time.sleep(min(0.5, self.cfg.lease_seconds / 4))
                        continue
                    self.serve_once()
                    outage.recovered()
                # whatever was being handled is unacknowledged: reclaimed later
                except Exception as exc:
                    if redis_down(exc):
                        self.leader = False
                        outage.failed(exc)
                    else:
                        self.log.exception("serve_failed", error=str(exc), retry_in_seconds=1)
                        sleep_unless(lambda: self.stopping, 1.0)
        finally:
            self.asks.stop()
            self._release_lease()
            self.log.info("mother_stopped")

    def _release_lease(self) -> None:
        if not self.leader:
            return
        try:
            calls.release_lease(self.rt.redis, instance=self.instance)
        # if Redis cannot take it, it expires on its own within lease_seconds
        except Exception as exc:
            if not redis_down(exc):
                raise
            self.log.warning(
                "lease_not_released", error=str(exc), expires_in_seconds=self.cfg.lease_seconds
            )

    def _hold_lease(self) -> bool:
        now = time.monotonic()
        if self.leader and now - self._renewed_at < self.cfg.lease_seconds / 3:
            return True
        got = calls.lease(
            self.rt.redis, instance=self.instance, ttl_ms=int(self.cfg.lease_seconds * 1000)
        )
        self._renewed_at = now
        if got == 0:
            if self.leader:
                self.log.warning("leadership_lost")
            self.leader = False
            return False
        if got == 2 or not self.leader:
            self.leader = True
            self.log.info("leadership_acquired")
            self._become_leader()
        return True

    def _become_leader(self) -> None:
        self.publish_config()
        self.ensure_groups()
        for what, make in (
            ("termination", ensure_index),
            ("runs", ensure_runs_index),
            ("conflict", ensure_conflict_index),
            ("library", ensure_library_indexes),
        ):
            try:
                make(self.rt.redis)
            except redis.ResponseError as exc:
                self.log.warning(f"{what}_index_unavailable", error=str(exc))
        self.ensure_tools()
        self.reclaim(min_idle_ms=0)
        self.watchdog.reconcile()
        self.watchdog.reapply_soon()

    def ensure_tools(self) -> None:
        """Sync the tool registry when none exists yet (a fresh install routes with the shipped tools);
        a registry someone synced is left as it is. A manifest that is wrong is logged, not fatal: the
        phases then go to the model."""
        try:
            if read_registry(self.rt.redis) is None:
                registry = sync_tools(self.rt.redis, self.settings, self.rt.clock.now_iso())
                self.log.info("tool_registry_synced", tools=registry.routing_order)
        except MotherError as exc:
            self.log.warning("tool_registry_not_synced", error=exc.message)

    def publish_config(self) -> None:
        """Write the limits a submitter's server call checks against (``mother:config``): the leading
        Mother's, so every client, whatever its own settings, is refused at the same queue depth."""
        g = self.settings.budget.global_
        publish_limits(
            self.rt.redis,
            PublishedLimits(
                max_queue_depth=g.max_queue_depth,
                max_concurrent_runs=g.max_concurrent_runs,
                max_redis_memory_mb=g.max_redis_memory_mb,
                max_docling_jobs=g.max_docling_jobs,
                rate_limit_messages=self.settings.budget.rate_limit.messages,
                rate_limit_window_ms=self.settings.budget.rate_limit.window_seconds * 1000,
                fault_models=fault_models(self.settings),
                heartbeat_timeout_ms=int(self.settings.service.heartbeat_timeout_seconds * 1000),
                published_by=self.instance,
                published_at=self.rt.clock.now_iso(),
            ),
        )

    def ensure_groups(self) -> None:
        self.consumed.forget_groups()
        self.consumed.refresh(force=True)

    # -- one loop ----------------------------------------------------------
    def serve_once(self) -> int:
        """Read and handle one batch from both streams; run the watchdog when due."""
        handled = 0
        self.consumed.refresh()
        # read as bytes: an entry that is not UTF-8 must be refused on its own, not break the batch
        try:
            batches = self.rt.rq_redis.xreadgroup(
                self.cfg.consumer_group,
                self.instance,
                {s: ">" for s in self.consumed.streams},
                count=self.cfg.batch,
                block=self.cfg.block_ms,
            )
        except redis.ResponseError as exc:
            if "NOGROUP" not in str(exc):
                raise
            self.ensure_groups()
            return 0
        pairs = _as_pairs(batches)
        now = time.monotonic()
        if now - self._hosts_at >= HOSTS_LOOK_SECONDS:
            self._hosts_at = now
            self._guarded("hosts", self._look_at_hosts)
        # one entry of each party's in turn: a party that floods its stream delays no one else's
        # entries behind its own
        for stream, raw_id, raw_fields in _in_turn(pairs):
            self.handle(stream, *as_text(raw_id, raw_fields))
            handled += 1
        now = time.monotonic()
        if now - self._watchdog_at >= self.cfg.watchdog_interval_seconds:
            self._watchdog_at = now
            self._guarded("watchdog", self.watchdog.tick)
        if now - self._claimed_at >= min(self.cfg.claim_idle_seconds / 2, 10.0):
            self._claimed_at = now
            self._guarded(
                "reclaim", lambda: self.reclaim(min_idle_ms=int(self.cfg.claim_idle_seconds * 1000))
            )
        return handled

    def _look_at_hosts(self) -> None:
        """Queue on a live host at once what waited for one."""
        if self.rt.redis.zcard(keys.HOSTS_AWAITED) and self.rt.hosts.any_live():
            self.watchdog.take_awaited()

    def _guarded(self, what: str, func: Any) -> None:
        # a bad record must not stop the loop
        unless_redis_down(self.log, "periodic_task_failed", func, task=what)

    # -- handling ----------------------------------------------------------
    def handle(
        self, stream: str, entry_id: str, fields: dict[str, Any], not_text: str | None = None
    ) -> None:
        """Handle one entry and acknowledge it; a failing run ends catastrophic_error.

        ``not_text`` says why an entry read as bytes is not UTF-8 (:func:`as_text`): a submission
        is then rejected with that error, an event ignored (both acknowledged).
        """
        delivery = Delivery(stream, self.cfg.consumer_group, entry_id)
        source = self.consumed.source(stream)
        try:
            if not_text is not None:
                if source.role == "submissions":
                    reject(self.rt, entry_id, fields, not_text, source=source)
                else:
                    self.log.warning("event_ignored", entry_id=entry_id, why=not_text)
            elif source.role == "submissions":
                handle_submission(self.rt, entry_id, fields, delivery=delivery, source=source)
            elif source.role == "commands":
                self.handle_command(delivery, fields, source)
            else:
                self.handle_event(delivery, fields)
        except Exception as exc:
            if redis_down(exc):
                # not acknowledged: handled again once Redis serves again / by the next leader
                raise
            self.log.exception("entry_handling_failed", stream=stream, entry_id=entry_id)
            recorded = self._failed(stream, entry_id, fields, exc)
            if source.role == "commands":
                # its sender waits for a reply: say so now, not after its timeout
                unless_redis_down(
                    self.log,
                    "failure_reply_not_sent",
                    send_reply,
                    self.rt,
                    source,
                    entry_id,
                    failure_reply(exc, recorded=recorded, run_id=_run_id_of(fields)),
                )
            if not recorded:
                # left pending: reclaimed later, dead-lettered after max_deliveries
                return
        # not already acknowledged with the handler's last write
        if not delivery.acked:
            self.rt.redis.xack(stream, self.cfg.consumer_group, entry_id)

    def _failed(self, stream: str, entry_id: str, fields: dict[str, Any], exc: Exception) -> bool:
        """Record why handling an entry failed: a submission whose run was not made is rejected with the
        error, a run that was made ends catastrophic_error. True when that is done (the entry may be
        acknowledged). Nothing but Redis going away escapes: a failure here too (say, a run record that is
        not one) leaves the entry pending, and the entries read with it are still handled."""
        run_id = _run_id_of(fields)
        if run_id is None and self.consumed.source(stream).role != "submissions":
            # an event naming no readable run: nothing to end
            return False
        return unless_redis_down(
            self.log,
            "entry_failure_not_recorded",
            self._record_failure,
            stream,
            entry_id,
            fields,
            run_id,
            exc,
            stream=stream,
            entry_id=entry_id,
            run_id=run_id,
        )

    def _record_failure(
        self, stream: str, entry_id: str, fields: dict[str, Any], run_id: str | None, exc: Exception
    ) -> None:
        # record why instead of losing it
        if self._not_taken_in(stream, run_id):
            reject(
                self.rt,
                entry_id,
                fields,
                f"Mother failed to take this submission in: {type(exc).__name__}: {exc}",
                source=self.consumed.source(stream),
            )
        else:
            # _failed returns before this for an event that names no run
            assert run_id is not None
            self._end_catastrophically(run_id, exc)

    def handle_event(self, delivery: Delivery, fields: dict[str, Any]) -> None:
        """A worker's report on ``mother:events``: a phase result, reviewed (mother.review)."""
        entry_id = delivery.entry_id
        kind, payload = fields.get("type"), self._payload(entry_id, fields)
        if payload is None:
            return
        if kind == EVENT_PHASE_RESULT:
            try:
                result = PhaseResult.model_validate(payload)
            except ValidationError as exc:
                self.log.warning(
                    "event_ignored", entry_id=entry_id, why=describe_validation_error(exc)
                )
                return
            on_phase_result(self.rt, result, fields.get("host"), delivery=delivery)
        # a cancel here is not taken: people write mother:commands
        else:
            self.log.warning(
                "event_ignored",
                entry_id=entry_id,
                why=f"unknown event type {kind!r}"[:300]
                + ("; commands go to mother:commands" if kind == COMMAND_CANCEL else ""),
            )

    def handle_command(self, delivery: Delivery, fields: dict[str, Any], source: Source) -> None:
        """A person's command on ``mother:commands`` or a principal's stream (:mod:`mother.commands`)."""
        payload = self._payload(delivery.entry_id, fields)
        if payload is not None:
            handle_command(self.rt, delivery, fields.get("type"), payload, source)

    def _payload(self, entry_id: str, fields: dict[str, Any]) -> dict[str, Any] | None:
        """An entry's ``payload`` field as a JSON object; None (logged) when it is not one."""
        try:
            payload = orjson.loads(fields.get("payload", "{}"))
        except orjson.JSONDecodeError:
            self.log.warning("entry_ignored", entry_id=entry_id, why="payload is not JSON")
            return None
        if not isinstance(payload, dict):
            self.log.warning(
                "entry_ignored",
                entry_id=entry_id,
                why=f"payload is a JSON {type(payload).__name__}, not an object",
            )
            return None
        return payload

    def _end_catastrophically(self, run_id: str, exc: Exception) -> None:
        state = self.rt.load_run(run_id)
        if state is not None and state.status != "terminated":
            end_run(
                self.rt,
                state,
                "catastrophic_error",
                f"Mother failed while handling this run: {type(exc).__name__}: {exc}"[:1000],
                contributing_factors=[type(exc).__name__],
            )

    # -- reclaiming ----------------------------------------------------------
    def reclaim(self, min_idle_ms: int) -> None:
        """Claim entries pending too long (a dead consumer's, or our own failures); dead-letter repeats."""
        for stream in self.consumed.streams:
            start = "0-0"
            while True:
                reply = self.rt.rq_redis.xautoclaim(
                    stream,
                    self.cfg.consumer_group,
                    self.instance,
                    min_idle_time=min_idle_ms,
                    start_id=start,
                    count=100,
                )
                start, entries = reply[0], reply[1]
                for raw_id, raw_fields in entries:
                    if raw_fields is None:
                        continue
                    entry_id, fields, not_text = as_text(raw_id, raw_fields)
                    if self._deliveries(stream, entry_id) > self.cfg.max_deliveries:
                        self._dead_letter(stream, entry_id, fields)
                    else:
                        self.handle(stream, entry_id, fields, not_text)
                if start == b"0-0" or not entries:
                    break

    def _deliveries(self, stream: str, entry_id: str) -> int:
        info = self.rt.redis.xpending_range(
            stream, self.cfg.consumer_group, min=entry_id, max=entry_id, count=1
        )
        return int(info[0]["times_delivered"]) if info else 0

    def _not_taken_in(self, stream: str, run_id: str | None) -> bool:
        """Whether an entry is a submission whose run was not made (its record's existence: a record
        that does not parse is still a run that was made)."""
        return self.consumed.source(stream).role == "submissions" and (
            run_id is None or not self.rt.redis.exists(keys.run_key(run_id))
        )

    def _dead_letter(self, stream: str, entry_id: str, fields: dict[str, Any]) -> None:
        run_id = _run_id_of(fields)
        # its rejection says so (status and wait name it, not "never submitted")
        if self._not_taken_in(stream, run_id):
            reject(
                self.rt,
                entry_id,
                fields,
                f"Mother failed to take this submission in on each of more than "
                f"{self.cfg.max_deliveries} deliveries; it is kept in {keys.DEAD_LETTER_STREAM}",
                source=self.consumed.source(stream),
            )
        pipe = self.rt.redis.pipeline(transaction=True)
        pipe.xadd(
            keys.DEAD_LETTER_STREAM,
            {
                "stream": stream,
                "entry_id": entry_id,
                "fields": orjson.dumps(fields),
                "at": self.rt.clock.now_iso(),
            },
            maxlen=self.cfg.dead_letter_maxlen,
            approximate=True,
        )
        pipe.xack(stream, self.cfg.consumer_group, entry_id)
        self.rt.emit(pipe, "dead_lettered", run_id=run_id, stream=stream, entry_id=entry_id)
        pipe.execute()
        self.log.error("entry_dead_lettered", stream=stream, entry_id=entry_id)


def _in_turn(pairs: list[tuple[str, list[Any]]]) -> Iterator[tuple[str, Any, Any]]:
    """The entries read from each stream, one stream's next after another's (round robin)."""
    queues = [(stream, iter(entries)) for stream, entries in pairs]
    while queues:
        still = []
        for stream, entries in queues:
            entry = next(entries, None)
            if entry is not None:
                yield stream, entry[0], entry[1]
                still.append((stream, entries))
        queues = still


def _as_pairs(batches: Any) -> list[tuple[str, list[tuple[bytes, dict[bytes, bytes]]]]]:
    """XREADGROUP's reply read as bytes (RESP2: a list of [stream, entries]) as pairs; None when it timed out."""
    return [(stream.decode(), entries) for stream, entries in batches or []]


def _run_id_of(fields: dict[str, Any]) -> str | None:
    """The run an entry is about, when it can be read (for ending it or tagging the dead letter)."""
    for raw in (fields.get("payload"), fields.get("spec")):
        if not raw:
            continue
        try:
            value = orjson.loads(raw).get("run_id")
            return keys.check_id(value, "run_id") if value else None
        except Exception:  # noqa: BLE001
            return None
    return None
