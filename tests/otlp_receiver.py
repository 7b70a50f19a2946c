"""An OTLP/HTTP traces receiver for the tests: it takes what an exporter POSTs to /v1/traces (protobuf),
decodes it with the official ``opentelemetry-proto`` messages, and keeps every span."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Span:
    trace_id: str
    span_id: str
    parent_id: str
    name: str
    attributes: dict[str, Any]
    events: list[tuple[str, dict[str, Any]]]
    start_ns: int
    end_ns: int
    service: str


def _value(v: Any) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [_value(x) for x in v.array_value.values]
    return getattr(v, kind) if kind else None


def _attributes(items: Any) -> dict[str, Any]:
    return {a.key: _value(a.value) for a in items}


@dataclass
class Receiver:
    spans: list[Span] = field(default_factory=list)
    requests: int = 0

    def __post_init__(self) -> None:
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceRequest,
        )

        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                receiver.requests += 1
                for resource in request.resource_spans:
                    service = _attributes(resource.resource.attributes).get("service.name", "")
                    for scope in resource.scope_spans:
                        for s in scope.spans:
                            receiver.spans.append(
                                Span(
                                    s.trace_id.hex(),
                                    s.span_id.hex(),
                                    s.parent_span_id.hex(),
                                    s.name,
                                    _attributes(s.attributes),
                                    [(e.name, _attributes(e.attributes)) for e in s.events],
                                    s.start_time_unix_nano,
                                    s.end_time_unix_nano,
                                    service,
                                )
                            )
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def of(self, trace_id: str) -> list[Span]:
        return [s for s in self.spans if s.trace_id == trace_id]
