"""What a running process holds: settings, connections, the server clock, the agents queue."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from redis import Redis
from rq import Queue
from rq.serializers import JSONSerializer

from mother import activity, security
from mother.clock import ServerClock
from mother.config import Settings
from mother.connection import connect, connect_waiting
from mother.functions import ensure_loaded
from mother.hosts.table import HostTable
from mother.ledger import BudgetLedger
from mother.logs import get_logger
from mother.records import parse_run_record, runs
from mother.tokens import Calibration
from mother.tools.router import ToolsCache
from schemas import ActivityEvent, RunSpec, RunState

__all__ = ["Runtime"]

SPEC_CACHE_SIZE = 10_000
# runs whose phase outputs Mother keeps for composing the next phase
OUTPUT_CACHE_SIZE = 1_000


@dataclass
class Runtime:
    """One process's view of the system (Mother, a worker, or a CLI command)."""

    settings: Settings
    redis: Redis
    clock: ServerClock = field(init=False)
    _specs: OrderedDict[str, RunSpec] = field(default_factory=OrderedDict, init=False, repr=False)
    _outputs: OrderedDict[str, list[tuple[str, str]]] = field(
        default_factory=OrderedDict, init=False, repr=False
    )
    _notes: OrderedDict[str, list[str]] = field(default_factory=OrderedDict, init=False, repr=False)
    # how long to wait for a Mother to load the server functions; whether this process calls them at all
    # (a worker host's user may not: it asks Mother)
    functions_wait_seconds: float = 0.0
    functions: bool = True
    # the model providers (workers.providers.make_provider) where this process calls models itself: Mother,
    # for LLM-generated context summaries; handed in, since mother does not import workers
    make_provider: Callable[..., Any] | None = None
    # what sees a completed phase result before it moves its run (mother.review: conflicts, human gates)
    review_hooks: list[Callable[..., Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.functions:
            ensure_loaded(
                self.redis, wait_seconds=self.functions_wait_seconds, log=get_logger("runtime")
            )
        self.clock = ServerClock(self.redis)

    @classmethod
    def create(cls, settings: Settings, *, functions: bool = True) -> Runtime:
        """A long-running process's runtime (Mother, a worker host): it waits up to
        ``redis_wait_seconds`` for a Redis that cannot be reached yet, as when it starts alongside it;
        with ``functions`` it loads the server functions (a worker host calls none; it waits for its
        ACL user too, which Mother makes again after a restart that lost it)."""
        return cls(
            settings=settings,
            redis=connect_waiting(
                settings.redis_url,
                settings.redis_wait_seconds,
                get_logger("runtime"),
                modules=functions,
                user_may_come=not functions,
            ),
            functions_wait_seconds=settings.redis_wait_seconds,
            functions=functions,
        )

    @cached_property
    def rq_redis(self) -> Redis:
        """RQ wants a connection that returns bytes."""
        return connect(self.settings.redis_url, check=False, decode_responses=False)

    @cached_property
    def calibration(self) -> Calibration:
        """Each model's token-estimate calibration (re-read from Redis every few seconds)."""
        return Calibration(self.redis, self.settings.context.calibration_min_samples)

    @cached_property
    def ledger(self) -> BudgetLedger:
        """The hierarchical budget ledger on this process's connection and clock."""
        return BudgetLedger(self.redis, self.settings.service.activity_maxlen, self.clock)

    @cached_property
    def tools(self) -> ToolsCache:
        """``registry:tools`` and its router, re-read every ``tools.refresh_seconds``."""
        return ToolsCache(self.redis, self.settings)

    def queue(self, name: str) -> Queue:
        """An RQ queue of ours by name (a host's own ``{host}.agents``), on the RQ connection."""
        return Queue(name, connection=self.rq_redis, serializer=JSONSerializer)

    @cached_property
    def hosts(self) -> HostTable:
        """The enrolled worker hosts and their lines, re-read every half second: who gets the next job."""
        return HostTable(self.redis)

    def emit(self, client: Any, event_type: str, **kwargs: Any) -> ActivityEvent:
        """Append an activity entry stamped with server time (``client`` may be a pipeline)."""
        return activity.emit(
            client,
            event_type,
            at=self.clock.now_iso(),
            maxlen=self.settings.service.activity_maxlen,
            **kwargs,
        )

    def violation(self, kind: str, **data: Any) -> None:
        """Record a security violation stamped with server time (:func:`mother.security.record_violation`:
        ``run_id``, ``activity`` and the rest as there)."""
        self.violation_on(self.redis, kind, **data)

    def violation_on(self, client: Any, kind: str, **data: Any) -> None:
        """:meth:`violation` on ``client``, which may be a pipeline (then the caller executes it)."""
        security.record_violation(
            client,
            kind,
            at=self.clock.now_iso(),
            maxlen=self.settings.service.activity_maxlen,
            **data,
        )

    def load_run(self, run_id: str) -> RunState | None:
        return self.parse_run(run_id, runs.read_raw(self.redis, run_id))

    def parse_run(self, run_id: str, raw: str | None) -> RunState | None:
        """``run:{id}`` as read (JSON.GET of the whole document), validated; its spec is remembered."""
        if not raw:
            return None
        state = parse_run_record(run_id, raw)
        self.remember_spec(run_id, state.spec)
        self.remember_notes(run_id, state.notes)
        return state

    def spec(self, run_id: str) -> RunSpec | None:
        """A run's spec (immutable once submitted), from a small LRU cache or ``$.spec``."""
        cached = self._specs.get(run_id)
        if cached is not None:
            self._specs.move_to_end(run_id)
            return cached
        spec = runs.read_spec(self.redis, run_id)
        if spec is not None:
            self.remember_spec(run_id, spec)
        return spec

    def outputs(self, run_id: str, count: int) -> list[tuple[str, str]] | None:
        """The first ``count`` phases' (name, output) as this process saw them accepted, if it saw all."""
        if count == 0:
            return []
        cached = self._outputs.get(run_id)
        return list(cached) if cached is not None and len(cached) == count else None

    def remember_output(self, run_id: str, index: int, phase: str, output: str) -> None:
        """Note an accepted phase output (kept only while this process has seen every earlier one)."""
        cached = self._outputs.setdefault(run_id, [])
        if len(cached) != index:
            del self._outputs[run_id]
            return
        cached.append((phase, output))
        self._outputs.move_to_end(run_id)
        while len(self._outputs) > OUTPUT_CACHE_SIZE:
            self._outputs.popitem(last=False)

    def forget(self, run_id: str) -> None:
        self._outputs.pop(run_id, None)

    def notes(self, run_id: str) -> list[str]:
        """The run's notes (people's answers, conflict decisions: every later phase's context has them),
        from a small LRU cache or ``$.notes``."""
        cached = self._notes.get(run_id)
        if cached is None:
            cached = runs.read_notes(self.redis, run_id)
            self.remember_notes(run_id, cached)
        return list(cached)

    def remember_notes(self, run_id: str, notes: list[str]) -> None:
        self._notes[run_id] = list(notes)
        self._notes.move_to_end(run_id)
        while len(self._notes) > SPEC_CACHE_SIZE:
            self._notes.popitem(last=False)

    def remember_spec(self, run_id: str, spec: RunSpec) -> None:
        self._specs[run_id] = spec
        self._specs.move_to_end(run_id)
        while len(self._specs) > SPEC_CACHE_SIZE:
            self._specs.popitem(last=False)
