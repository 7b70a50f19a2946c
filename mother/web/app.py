"""The dashboard: a small ASGI app (Starlette, Jinja templates, served by uvicorn; no front-end build).

Pages: ``/`` (terminations by reason over time, gauges and the circuit breaker, runs waiting for a
person, the newest runs), ``/runs`` (filterable by reason, user, status and time), ``/runs/{id}``
(phases, attempts, termination, budget used against limits, conflicts, context manifests and
summaries, artifacts, activity), ``/waiting``; JSON at ``/api/...``; Prometheus metrics at
``/metrics``. Pages update by polling (``dashboard.refresh_seconds``).

Read-only: it only reads Redis. Who may see it: with ``dashboard.token`` set, every request needs it;
and the Redis ACL user it connects as (``dashboard`` in deploy/users.acl) decides what it can read,
which leaves out attempt tokens and library chunks. It never shows a secret (no configuration, no
token) or a library chunk: contexts are shown as manifests (sections and token counts, no text), and
what agents wrote is what they wrote from the redacted hits."""

from __future__ import annotations

import hmac
import ipaddress
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import orjson
from jinja2 import Environment, FileSystemLoader, select_autoescape
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from mother.client import MotherClient
from mother.clock import ServerClock
from mother.config import Settings
from mother.errors import ConfigError, InvalidSpec, NotFound
from mother.web import data
from mother.web.metrics import RedisCollector
from schemas import TERMINATION_REASONS, iso_from_ms

__all__ = ["check_exposure", "create_app"]

HERE = Path(__file__).resolve().parent
COOKIE = "mother_dashboard"
# a colour per termination reason, the same on every page
PALETTE = [
    "#2e7d32", "#c62828", "#6a1b9a", "#ef6c00", "#1565c0", "#00838f", "#ad1457", "#4e342e",
    "#9e9d24", "#283593", "#558b2f", "#d84315", "#37474f", "#f9a825", "#00695c", "#5d4037",
]  # fmt: skip
COLOURS = {reason: PALETTE[i % len(PALETTE)] for i, reason in enumerate(TERMINATION_REASONS)}


def check_exposure(settings: Settings) -> None:
    """Refuse to listen beyond the loopback address without a token (one line saying how)."""
    host = settings.dashboard.host
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback and not settings.dashboard.token:
        raise ConfigError(
            f"the dashboard would listen on {host} with no token: set dashboard.token "
            "(MOTHER_DASHBOARD__TOKEN) or listen on 127.0.0.1"
        )


class TokenGate(BaseHTTPMiddleware):
    """With a token configured: ``Authorization: Bearer T``, the cookie, or ``?token=T`` (which sets
    the cookie and redirects to the same page without it)."""

    def __init__(self, app: Any, token: str) -> None:
        super().__init__(app)
        self.token = token

    def _ok(self, offered: str | None) -> bool:
        return bool(offered) and hmac.compare_digest(str(offered), self.token)

    async def dispatch(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
        if not self.token or request.url.path == "/healthz":
            return await call_next(request)
        header = request.headers.get("authorization", "")
        bearer = header[7:] if header.lower().startswith("bearer ") else None
        if self._ok(bearer) or self._ok(request.cookies.get(COOKIE)):
            return await call_next(request)
        if self._ok(request.query_params.get("token")):
            query = urlencode(
                [(k, v) for k, v in request.query_params.multi_items() if k != "token"]
            )
            target = request.url.path + (f"?{query}" if query else "")
            response = Response(status_code=303, headers={"location": target})
            response.set_cookie(COOKIE, self.token, httponly=True, samesite="strict")
            return response
        return PlainTextResponse(
            "a token is needed: Authorization: Bearer TOKEN, or open /?token=TOKEN once\n",
            status_code=401,
        )


def create_app(settings: Settings, client: MotherClient | None = None) -> Starlette:
    """The dashboard for ``settings`` (its Redis, its token)."""
    mother = client or MotherClient(settings=settings)
    redis = mother.redis
    clock = ServerClock(redis)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(RedisCollector(redis))
    env = Environment(
        loader=FileSystemLoader(HERE / "templates"), autoescape=select_autoescape(["html"])
    )
    env.filters["iso"] = lambda ms: iso_from_ms(int(ms))[:16].replace("T", " ")
    env.filters["json"] = lambda value: orjson.dumps(value, option=orjson.OPT_INDENT_2).decode()
    env.globals.update(colours=COLOURS, refresh=settings.dashboard.refresh_seconds)

    def page(name: str, request: Request, status: int = 200, **context: Any) -> HTMLResponse:
        html = env.get_template(name).render(request=request, path=request.url.path, **context)
        return HTMLResponse(html, status_code=status)

    def bucket_of(request: Request) -> str:
        bucket = request.query_params.get("bucket", "hour")
        if bucket not in data.BUCKETS:
            raise InvalidSpec(f"bucket must be hour or day, got {bucket!r}", field="bucket")
        return bucket

    def filters(request: Request) -> dict[str, Any]:
        q = request.query_params
        reason = q.get("reason") or None
        status = q.get("status") or None
        if status is not None and status not in data.RUN_STATUSES:
            raise InvalidSpec(
                f"unknown status {status!r}; use one of: {', '.join(data.RUN_STATUSES)}",
                field="status",
            )
        hours = q.get("hours") or None
        try:
            since = clock.now_ms() - int(float(hours) * 3_600_000) if hours else None
            limit = min(max(int(q.get("limit") or 50), 1), 500)
        except ValueError:
            raise InvalidSpec("hours and limit must be numbers", field="hours") from None
        return {
            "reason": reason,
            "user": q.get("user") or None,
            "status": status,
            "since_ms": since,
            "limit": limit,
        }

    def overview(request: Request) -> HTMLResponse:
        bucket = bucket_of(request)
        chart = data.chart(redis, bucket, clock.now_ms())  # type: ignore[arg-type]
        return page(
            "overview.html",
            request,
            bucket=bucket,
            chart=chart,
            layout=data.bar_layout(chart),
            totals=data.reason_totals(redis),
            gauges=data.gauges(redis),
            waiting=mother.waiting(limit=10),
            rows=data.recent_runs(mother, limit=15),
        )

    def runs_page(request: Request) -> HTMLResponse:
        chosen = filters(request)
        rows = data.recent_runs(mother, **chosen)
        return page(
            "runs.html",
            request,
            rows=rows,
            chosen=request.query_params,
            reasons=TERMINATION_REASONS,
            statuses=data.RUN_STATUSES,
        )

    def run_page(request: Request) -> HTMLResponse:
        run_id = request.path_params["run_id"]
        view = mother.inspect(run_id)
        return page("run.html", request, run_id=run_id, view=view)

    def waiting_page(request: Request) -> HTMLResponse:
        return page("waiting.html", request, rows=mother.waiting(limit=200))

    def api_chart(request: Request) -> JSONResponse:
        bucket = bucket_of(request)
        return JSONResponse(data.chart(redis, bucket, clock.now_ms()).to_dict())  # type: ignore[arg-type]

    def api_summary(request: Request) -> JSONResponse:
        gauges = data.gauges(redis)
        return JSONResponse(
            {
                "totals": data.reason_totals(redis),
                "gauges": gauges,
                "waiting": gauges["waiting_for_person"],
            }
        )

    def api_runs(request: Request) -> JSONResponse:
        return JSONResponse(data.recent_runs(mother, **filters(request)))

    def api_run(request: Request) -> Response:
        view = mother.inspect(request.path_params["run_id"])
        return Response(orjson.dumps(view), media_type="application/json")

    def metrics(request: Request) -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    def healthz(request: Request) -> PlainTextResponse:
        redis.ping()
        return PlainTextResponse("ok\n")

    def not_found(request: Request, exc: Exception) -> Response:
        if request.url.path.startswith("/api/"):
            return JSONResponse({"error": str(exc)}, status_code=404)
        return page("error.html", request, status=404, message=str(exc))

    def bad_request(request: Request, exc: Exception) -> Response:
        if request.url.path.startswith("/api/"):
            return JSONResponse({"error": str(exc)}, status_code=400)
        return page("error.html", request, status=400, message=str(exc))

    middleware = [Middleware(TokenGate, token=settings.dashboard.token)]
    return Starlette(
        routes=[
            Route("/", overview),
            Route("/runs", runs_page),
            Route("/runs/{run_id}", run_page),
            Route("/waiting", waiting_page),
            Route("/api/chart", api_chart),
            Route("/api/summary", api_summary),
            Route("/api/runs", api_runs),
            Route("/api/runs/{run_id}", api_run),
            Route("/metrics", metrics),
            Route("/healthz", healthz),
            Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
        ],
        middleware=middleware,
        exception_handlers={NotFound: not_found, InvalidSpec: bad_request},
    )
