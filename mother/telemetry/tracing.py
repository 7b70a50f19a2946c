"""The tracer of this process, made on first use (a forked work-horse makes its own), and the spans of a
run, all parented by the run's root span, whose ids its record keeps (``RunState.trace``).

A run lives longer than any process that works on it (Mother restarts, a phase runs on another host),
so its root span is made when the run ends, with the ids chosen at intake and the run's own start and
end times; every other span is made by the process that does what it measures, with the root as its
parent (a remote parent: its ids alone). The context reaches a work-horse with the attempt's ``begin``.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import threading
from collections.abc import Iterator
from typing import Any

from mother.errors import ConfigError
from mother.logs import get_logger
from schemas import iso_from_ms, ms_from_iso
from schemas.run import RunState, Trace

__all__ = ["Tracing", "enabled", "flush", "new_trace", "run_ended", "span", "tracing"]

log = get_logger(__name__)

# the history events that are a root span's events (conflicts' steps, approvals, retries, with their
# times; the gates come from the run's gates)
EVENTS = ("phase_approved", "tool_approved", "conflict_strategy", "phase_retried")


def enabled(settings: Any) -> bool:
    """Whether this deployment exports traces: an endpoint in the settings or the SDK's environment."""
    return bool(
        settings.telemetry.otlp_endpoint
        or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    )


def new_trace() -> Trace:
    """A new run's trace: its id and its root span's, random (W3C trace context)."""
    return Trace(trace_id=secrets.token_hex(16), span_id=secrets.token_hex(8))


class Tracing:
    """The SDK's tracer provider for this process, with an id generator that gives a run's root span the
    ids its record keeps."""

    def __init__(self, settings: Any) -> None:
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
            from opentelemetry.sdk.resources import Resource
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import BatchSpanProcessor
            from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
        except ImportError as exc:
            raise ConfigError(
                f"traces are on (telemetry.otlp_endpoint or OTEL_EXPORTER_OTLP_ENDPOINT) but the "
                f"OpenTelemetry SDK is not installed ({exc}): pip install 'mother-harness[telemetry]'"
            ) from None
        preset = self._preset = threading.local()

        class _Ids(RandomIdGenerator):
            def generate_span_id(self) -> int:
                given = getattr(preset, "span_id", None)
                return given if given is not None else super().generate_span_id()

            def generate_trace_id(self) -> int:
                given = getattr(preset, "trace_id", None)
                return given if given is not None else super().generate_trace_id()

        endpoint = settings.telemetry.otlp_endpoint
        if endpoint and not endpoint.rstrip("/").endswith("/v1/traces"):
            endpoint = endpoint.rstrip("/") + "/v1/traces"
        name = os.environ.get("OTEL_SERVICE_NAME") or settings.telemetry.service_name
        self.provider = TracerProvider(
            resource=Resource.create({"service.name": name}), id_generator=_Ids()
        )
        # no endpoint given: the exporter reads the SDK's OTEL_EXPORTER_OTLP_* variables itself
        exporter = OTLPSpanExporter(endpoint=endpoint) if endpoint else OTLPSpanExporter()
        self.provider.add_span_processor(BatchSpanProcessor(exporter))
        self.tracer = self.provider.get_tracer("mother-harness")
        self.pid = os.getpid()

    def parent(self, trace: Trace) -> Any:
        """The context of ``trace``'s root span, a remote parent (its ids alone)."""
        from opentelemetry import trace as api

        root = api.SpanContext(
            int(trace.trace_id, 16),
            int(trace.span_id, 16),
            is_remote=True,
            trace_flags=api.TraceFlags(api.TraceFlags.SAMPLED),
        )
        return api.set_span_in_context(api.NonRecordingSpan(root))

    @contextlib.contextmanager
    def preset_ids(self, trace: Trace) -> Iterator[None]:
        """The next span this thread starts gets ``trace``'s ids (the run's root span)."""
        self._preset.trace_id, self._preset.span_id = (
            int(trace.trace_id, 16),
            int(trace.span_id, 16),
        )
        try:
            yield
        finally:
            self._preset.trace_id = self._preset.span_id = None


_made: Tracing | None = None
_lock = threading.Lock()


def tracing(settings: Any) -> Tracing | None:
    """This process's tracing (made on first use, again in a forked child), or None when traces are off."""
    global _made
    if not enabled(settings):
        return None
    with _lock:
        if _made is None or _made.pid != os.getpid():
            _made = Tracing(settings)
        return _made


@contextlib.contextmanager
def span(
    settings: Any,
    trace: Trace | None,
    name: str,
    attributes: dict[str, Any] | None = None,
    start_ms: int | None = None,
) -> Iterator[Any]:
    """A span of the run whose trace is ``trace`` (its root's child), for the block; yields it (None when
    traces are off, or the run has no trace): set attributes on it as they become known. An error that
    leaves the block marks the span and goes on."""
    made = tracing(settings) if trace is not None else None
    if made is None or trace is None:
        yield None
        return
    from opentelemetry import trace as api
    from opentelemetry.trace import Status, StatusCode

    # inside another span of the run (a model call within its phase's): its child; else the root's
    current = api.get_current_span()
    inner = current.is_recording() and current.get_span_context().trace_id == int(
        trace.trace_id, 16
    )
    started = made.tracer.start_span(
        name,
        context=None if inner else made.parent(trace),
        attributes={k: v for k, v in (attributes or {}).items() if v is not None},
        start_time=start_ms * 1_000_000 if start_ms is not None else None,
    )
    try:
        with api.use_span(started, end_on_exit=False, record_exception=False):
            yield started
    except BaseException as exc:
        started.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"[:300]))
        raise
    finally:
        started.end()


def run_ended(settings: Any, state: RunState, reason: str, details: str, at_ms: int) -> None:
    """The run's root span, made at its end: its ids from its record, its start its creation, its end
    ``at_ms``; the gates' and conflicts' steps of its history as events."""
    made = tracing(settings) if state.trace is not None else None
    if made is None or state.trace is None:
        return
    from opentelemetry.trace import Status, StatusCode

    created = ms_from_iso(state.created_at)
    with made.preset_ids(state.trace):
        root = made.tracer.start_span(
            f"run {state.run_id}",
            context=None,
            attributes={
                "mother.run_id": state.run_id,
                "mother.user_id": state.user_id,
                "mother.termination.reason": reason,
                "mother.termination.details": details[:1000],
                "mother.phases": len(state.spec.pipeline),
            },
            start_time=created * 1_000_000,
        )
    for entry in state.history:
        if entry.event in EVENTS or "conflict" in entry.event:
            root.add_event(
                entry.event,
                {
                    "phase": entry.phase or "",
                    "attempt": entry.attempt or 0,
                    "detail": entry.detail[:500],
                },
                timestamp=ms_from_iso(entry.at) * 1_000_000,
            )
    for gate in state.gates:
        if gate.opened_at is not None:
            root.add_event(
                "gate_opened",
                {"gate_id": gate.gate_id, "kind": gate.kind, "subject": gate.subject[:500]},
                timestamp=ms_from_iso(gate.opened_at) * 1_000_000,
            )
        if gate.decision is not None and gate.decision.at is not None:
            root.add_event(
                "gate_decided",
                {
                    "gate_id": gate.gate_id,
                    "decision": gate.decision.decision,
                    "actor": gate.decision.actor,
                },
                timestamp=ms_from_iso(gate.decision.at) * 1_000_000,
            )
    if reason != "success":
        root.set_status(Status(StatusCode.ERROR, f"{reason}: {details}"[:300]))
    root.end(end_time=max(at_ms, created) * 1_000_000)
    log.debug(
        "run_trace_ended", run_id=state.run_id, trace_id=state.trace.trace_id, at=iso_from_ms(at_ms)
    )


def flush(settings: Any, timeout_ms: int = 5000) -> None:
    """Send what this process has not sent yet (a work-horse ends with ``os._exit``, before its batch)."""
    made = tracing(settings)
    if made is not None:
        made.provider.force_flush(timeout_ms)
