"""OpenTelemetry traces of runs (docs/telemetry.md): with ``telemetry.otlp_endpoint`` set (or the SDK's
``OTEL_EXPORTER_OTLP_ENDPOINT``), Mother and the workers export a trace per run over OTLP/HTTP
(protobuf): the run's root span, ``intake``, an ``invoke_agent {role}`` span per phase attempt, a
``chat {model}`` span per model call, an ``execute_tool {tool}`` span per tool call, with the GenAI
semantic conventions' attributes; gates and conflicts are events of the root span. Off, nothing of
OpenTelemetry is imported."""

from mother.telemetry.tracing import Tracing, enabled, flush, new_trace, run_ended, span, tracing

__all__ = ["Tracing", "enabled", "flush", "new_trace", "run_ended", "span", "tracing"]
