"""A local HTTP server that speaks the chat-completions protocol (the one allowed model double).

It replays a list of canned responses (text or tool calls, with usage; a raw body; an HTTP error status
with headers; a delay) and records
every request body, so tests can check what the provider sent.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class _Server(ThreadingHTTPServer):
    # a burst of hundreds of phases connects at once: the default backlog (5) would make most retry
    request_queue_size = 1024
    daemon_threads = True


class ChatServer:
    def __init__(
        self,
        replies: list[dict[str, Any]],
        serves: tuple[str, ...] = ("test-model",),
        port: int = 0,
        honours_response_format: bool = True,
    ) -> None:
        self.replies = list(replies)
        # a reply's "structured" object is its content when the request asks a response_format and the
        # server honours it (as OpenAI, vLLM and llama.cpp's server do); its "text" otherwise
        self.honours_response_format = honours_response_format
        # what GET /models lists
        self.serves = serves
        self.requests: list[dict[str, Any]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                if not self.path.endswith("/models"):
                    self._error(404, {}, "not found")
                    return
                listing = {
                    "object": "list",
                    "data": [{"id": m, "object": "model"} for m in server.serves],
                }
                self._send(json.dumps(listing).encode())

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.requests.append(
                    {"path": self.path, "auth": self.headers.get("Authorization"), "body": body}
                )
                if not self.path.endswith("/chat/completions") or not server.replies:
                    self._error(500, {}, "no reply scripted")
                    return
                reply = server.replies.pop(0)
                # a slow server: the client may time out first
                if reply.get("delay"):
                    time.sleep(reply["delay"])
                # an error status (e.g. 503 with a retry-after header)
                if "status" in reply:
                    self._error(
                        reply["status"],
                        reply.get("headers", {}),
                        reply.get("message", "scripted error status"),
                    )
                    return
                # a reply sent exactly as given (a server that gets the protocol wrong)
                if "body" in reply:
                    self._send(
                        reply["body"]
                        if isinstance(reply["body"], bytes)
                        else json.dumps(reply["body"]).encode()
                    )
                    return
                message: dict[str, Any] = {"role": "assistant", "content": reply.get("text")}
                asked = body.get("response_format")
                if "structured" in reply and asked and server.honours_response_format:
                    message["content"] = json.dumps(reply["structured"])
                if reply.get("tool_calls"):
                    # arguments_text: sent as is (a model's broken JSON)
                    message["tool_calls"] = [
                        {
                            "id": f"call_{i}",
                            "type": "function",
                            "function": {
                                "name": c["name"],
                                "arguments": c.get("arguments_text") or json.dumps(c["arguments"]),
                            },
                        }
                        for i, c in enumerate(reply["tool_calls"])
                    ]
                usage = reply.get("usage", {"prompt_tokens": 10, "completion_tokens": 5})
                data = {
                    "id": "chatcmpl-test",
                    "object": "chat.completion",
                    "created": 0,
                    "model": body["model"],
                    "choices": [
                        {
                            "index": 0,
                            "message": message,
                            "finish_reason": "tool_calls" if reply.get("tool_calls") else "stop",
                        }
                    ],
                }
                # "usage": None: a server that reports none
                if usage is not None:
                    counts = (usage.get("prompt_tokens"), usage.get("completion_tokens"))
                    data["usage"] = {
                        **usage,
                        "total_tokens": sum(counts)
                        if all(type(c) is int for c in counts)
                        else None,
                    }
                self._send(json.dumps(data).encode())

            def _error(self, status: int, headers: dict[str, str], message: str) -> None:
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(json.dumps({"error": {"message": message}}).encode())

            def _send(self, raw: bytes) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

        self.httpd = _Server(("127.0.0.1", port), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> ChatServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
