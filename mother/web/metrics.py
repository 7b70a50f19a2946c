"""Prometheus metrics at ``/metrics`` (``prometheus_client``), read from Redis at each scrape.

Counters come from ``metrics:counters``, a hash the server functions and Mother's moves count into in the
same call as what they count (runs submitted, started and terminated by reason, budget refusals by code,
guard calls, conflicts by type and their resolutions by strategy and decision, tool calls by tool and
outcome, model calls, tokens and spend by model; histograms of phase and run durations, queue and gate
waits): monotonic, shared by every Mother and worker, and kept across restarts of
the process serving them. Gauges (queue depths, concurrent runs, runs waiting, workers, the circuit
breaker, the last GC report) are read as they are. ``mother_redis_up`` is 0 (and nothing else is
exported) when Redis cannot be reached. Names follow Prometheus's conventions: the
``mother_`` prefix, ``_total`` on counters, base units (seconds, bytes)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson
import redis
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from mother import keys
from mother.connection import REDIS_DOWN
from mother.errors import RedisUnavailable
from mother.records.metrics import HISTOGRAMS, bound_text
from mother.web.data import gauges
from schemas import ms_from_iso

__all__ = ["COUNTERS", "RedisCollector"]

# what says Redis is away: the scrape exports mother_redis_up 0
AWAY: tuple[type[Exception], ...] = (*REDIS_DOWN, RedisUnavailable)

# the counters of metrics:counters: field (the metric is mother_<field>_total), help, labels (a field
# with labels is counted as 'field|label value|…')
COUNTERS: tuple[tuple[str, str, list[str]], ...] = (
    ("runs_submitted", "Runs taken in from the submissions stream", []),
    ("runs_started", "Runs whose first phase was dispatched", []),
    ("runs_terminated", "Runs ended, by termination reason", ["reason"]),
    ("budget_refusals", "Actions the budget guard or admission refused, by reason code", ["code"]),
    (
        "budget_limits_exceeded",
        "Budget limits a run or a user's day crossed (once each), by reason code",
        ["code"],
    ),
    ("guard_calls", "Budget guard checks made (mh_guard)", []),
    ("gc_runs", "Artifact GC runs that stored a report", []),
    ("conflicts", "Conflicts detected, by type", ["type"]),
    (
        "conflict_resolutions",
        "Conflicts closed, by type, the strategy that closed them and the decision",
        ["type", "strategy", "decision"],
    ),
    ("tool_calls", "Registry tool calls, by tool and outcome", ["tool", "outcome"]),
    ("model_calls", "Model calls settled, by model", ["model"]),
    ("model_input_tokens", "Input (prompt) tokens of settled model calls, by model", ["model"]),
    ("model_output_tokens", "Output tokens of settled model calls, by model", ["model"]),
    (
        "model_spend_micro_usd",
        "What settled model calls cost, in millionths of a US dollar, by model",
        ["model"],
    ),
    (
        "security_violations",
        "Security violations recorded, by kind (a host's own kinds: host_reported)",
        ["kind"],
    ),
    ("steps_replayed", "Steps a resumed phase attempt replayed from its journal", []),
    ("tokens_saved", "Tokens resumed attempts did not pay for again (replayed model calls)", []),
    (
        "spend_saved_micro_usd",
        "What resumed attempts did not pay for again, in millionths of a US dollar",
        [],
    ),
)


class RedisCollector(Collector):
    """Collects Mother-Harness's metrics from one Redis connection at each scrape."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client

    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily("mother_redis_up", "1 when the scrape could read Redis, else 0")
        try:
            counters = {
                str(k): int(v)
                for k, v in (self.client.hgetall(keys.METRICS_COUNTERS) or {}).items()
            }
            families = [*self._counters(counters), *self._histograms(counters)]
            families += [*self._gauges(), *self._service(), *self._gc()]
        except AWAY:
            # Redis away: only that, so an alert on mother_redis_up == 0 fires (not a 500 per scrape)
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        yield from families

    def _counters(self, counters: dict[str, int]) -> Iterator[Metric]:
        for field, text, labels in COUNTERS:
            family = CounterMetricFamily(f"mother_{field}", text, labels=labels)
            if not labels:  # one series, there from the first scrape (0 until counted)
                family.add_metric([], counters.get(field, 0))
                yield family
                continue
            for key, value in sorted(counters.items()):
                parts = key.split("|")
                if parts[0] == field and len(parts) == len(labels) + 1:
                    family.add_metric(parts[1:], value)
            yield family

    @staticmethod
    def _histograms(counters: dict[str, int]) -> Iterator[Metric]:
        for name, (text, bounds) in HISTOGRAMS.items():
            buckets: list[tuple[str, float]] = []
            seen = 0
            for bound in bounds:
                seen += counters.get(f"{name}_bucket|{bound_text(bound)}", 0)
                buckets.append((bound_text(bound), seen))
            seen += counters.get(f"{name}_bucket|+Inf", 0)
            buckets.append(("+Inf", seen))
            family = HistogramMetricFamily(f"mother_{name}_seconds", text)
            family.add_metric([], buckets, counters.get(f"{name}_ms_sum", 0) / 1000)
            yield family

    def _gauges(self) -> Iterator[Metric]:
        now = gauges(self.client)
        for name, value, text in (
            ("concurrent_runs", now["concurrent_runs"], "Runs holding a concurrency slot"),
            ("admission_waiting_runs", now["admission_waiting"], "Runs waiting for a slot"),
            ("runs_waiting_for_person", now["waiting_for_person"], "Runs waiting on a human gate"),
            ("workers", now["workers"], "RQ workers registered"),
            ("submissions_stream_length", now["submissions_stream"], "Entries in the stream"),
        ):
            family = GaugeMetricFamily(f"mother_{name}", text)
            family.add_metric([], value)
            yield family
        depth = GaugeMetricFamily(
            "mother_queue_depth", "Jobs waiting in an RQ queue", labels=["queue"]
        )
        for queue, n in now["queues"].items():
            depth.add_metric([queue], n)
        yield depth
        breaker = GaugeMetricFamily(
            "mother_circuit_breaker_open",
            "1 when the gauge refuses new runs (it is at its limit)",
            labels=["gauge"],
        )
        for b in now["breakers"]:
            breaker.add_metric([b["gauge"]], 1 if b["open"] else 0)
        yield breaker

    def _service(self) -> Iterator[Metric]:
        """Whether a Mother leads, and how many runs wait past their gate's deadline warning."""
        pipe = self.client.pipeline(transaction=False)
        pipe.exists(keys.LEADER_LEASE)
        pipe.time()
        pipe.zcard(keys.RUNS_WAITING)
        leads, (seconds, micros), waiting = pipe.execute()
        now_ms = int(seconds) * 1000 + int(micros) // 1000
        # a waiting run whose warning is still ahead is not past it
        ahead = int(self.client.zcount(keys.GATE_WARNINGS, f"({now_ms}", "+inf"))
        leader = GaugeMetricFamily(
            "mother_leader", "1 when a Mother holds the leader lease, else 0"
        )
        leader.add_metric([], 1 if leads else 0)
        yield leader
        past = GaugeMetricFamily(
            "mother_runs_waiting_past_warning",
            "Runs waiting for a person whose gate's deadline warning is due or was sent",
        )
        past.add_metric([], max(0, int(waiting) - ahead))
        yield past

    def _gc(self) -> Iterator[Metric]:
        last: dict[str, Any] = {}
        newest = self.client.zrevrange(keys.GC_REPORTS, 0, 0)
        if newest:
            raw = self.client.execute_command("JSON.GET", newest[0])
            last = orjson.loads(raw) if raw else {}
        report = GaugeMetricFamily(
            "mother_gc_last_report", "The newest GC report's figures", labels=["figure"]
        )
        for figure in ("scheduled_deletion", "archived", "protected", "errors", "keys_removed"):
            value = last.get(figure) or 0
            # a report's errors are a list of lines: their count
            report.add_metric([figure], float(len(value) if isinstance(value, list) else value))
        yield report
        freed = GaugeMetricFamily("mother_gc_last_bytes_freed", "Bytes the newest GC freed")
        freed.add_metric([], float(last.get("bytes_freed") or 0))
        yield freed
        took = GaugeMetricFamily("mother_gc_last_duration_seconds", "The newest GC's duration")
        took.add_metric([], float(last.get("duration_ms") or 0) / 1000)
        yield took
        started = last.get("started_at")
        began = GaugeMetricFamily(
            "mother_gc_last_started_timestamp_seconds",
            "When the newest GC began (Unix seconds; 0: none has run)",
        )
        began.add_metric([], ms_from_iso(started) / 1000 if isinstance(started, str) else 0.0)
        yield began
