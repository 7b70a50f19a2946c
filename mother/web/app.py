"""The dashboard: a small ASGI app (Starlette, Jinja templates, served by uvicorn; no front-end build).

Pages: ``/`` (terminations by reason over time, gauges and the circuit breaker, runs waiting for a
person, the newest runs), ``/runs`` (every stored run, from ``idx:runs``: filtered by reason, "not success", user, status and
time, sorted and paged; the overview's bars and reasons link to exactly the runs they count), ``/runs/{id}``
(phases, attempts, termination, budget used against limits, conflicts, context manifests and
summaries, artifacts, activity), ``/waiting``; JSON at ``/api/...``; Prometheus metrics at
``/metrics``. Pages update when the activity stream says something happened (server-sent events at
``/events``), polling every ``dashboard.refresh_seconds`` only without them.

Read-only unless a principal signs in (``/login``): then its forms act as that principal, on its own
commands stream (mother/web/actions.py). Who may see it: with ``dashboard.token`` set, every request needs it;
and the Redis ACL user it connects as (``dashboard`` in deploy/users.acl) decides what it can read,
which leaves out attempt tokens and library chunks. It never shows a secret (no configuration, no
token) or a library chunk: contexts are shown as manifests (sections and token counts, no text), and
what agents wrote is what they wrote from the redacted hits."""

from __future__ import annotations

import hmac
import ipaddress
import math
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import orjson
from jinja2 import Environment, FileSystemLoader, select_autoescape
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from starlette.applications import Starlette
from starlette.concurrency import iterate_in_threadpool
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.requests import Request
from starlette.responses import (
    HTMLResponse,
    JSONResponse,
    PlainTextResponse,
    Response,
    StreamingResponse,
)
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from mother.client import MotherClient
from mother.clock import ServerClock
from mother.config import Settings
from mother.connection import redact_url
from mother.errors import ConfigError, InvalidSpec, NotFound
from mother.hosts.view import host_rows
from mother.logs import get_logger
from mother.observe.costs import Costs, costs, period
from mother.observe.listing import MAX_PAGE, RUN_STATUSES, RunQuery, all_rows, csv_lines
from mother.observe.timeline import clock_text, duration_text, suggestion_text, usd
from mother.web import actions, data
from mother.web.actions import listing_filters
from mother.web.live import Live
from mother.web.metrics import AWAY, RedisCollector
from mother.web.session import COOKIE as SESSION_COOKIE
from mother.web.session import Sessions
from schemas import TERMINATION_REASONS, iso_from_ms

__all__ = ["check_exposure", "create_app"]

HERE = Path(__file__).resolve().parent
log = get_logger(__name__)
# what says Redis is away (answered with a one-line 503)
REDIS_DOWN_ERRORS = AWAY
COOKIE = "mother_dashboard"
# a colour per termination reason, the same on every page
PALETTE = [
    "#2e7d32", "#c62828", "#6a1b9a", "#ef6c00", "#1565c0", "#00838f", "#ad1457", "#4e342e",
    "#9e9d24", "#283593", "#558b2f", "#d84315", "#37474f", "#f9a825", "#00695c", "#5d4037",
]  # fmt: skip
COLOURS = {reason: PALETTE[i % len(PALETTE)] for i, reason in enumerate(TERMINATION_REASONS)}


def _int(value: float | None) -> int | None:
    return None if value is None else int(value)


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
    env.filters["iso"] = lambda ms: iso_from_ms(int(float(ms)))[:16].replace("T", " ")
    env.filters["clock"] = clock_text
    env.filters["took"] = duration_text
    env.filters["usd"] = usd
    env.filters["suggestion"] = lambda t: suggestion_text(
        t.get("reason"), t.get("suggested_action"), t.get("can_retry")
    )
    env.filters["json"] = lambda value: orjson.dumps(value, option=orjson.OPT_INDENT_2).decode()
    env.globals.update(colours=COLOURS, refresh=settings.dashboard.refresh_seconds)

    sessions = Sessions(settings, settings.dashboard.session_minutes)

    def page(name: str, request: Request, status: int = 200, **context: Any) -> HTMLResponse:
        """A page; with a signed-in principal (``me``) its forms act as that principal."""
        context.setdefault("me", sessions.get(request.cookies.get(SESSION_COOKIE)))
        context.setdefault("filters", listing_filters(request.query_params))
        html = env.get_template(name).render(request=request, path=request.url.path, **context)
        return HTMLResponse(html, status_code=status)

    def bucket_of(request: Request) -> str:
        bucket = request.query_params.get("bucket", "hour")
        if bucket not in data.BUCKETS:
            raise InvalidSpec(f"bucket must be hour or day, got {bucket!r}", field="bucket")
        return bucket

    def query_of(q: Any, limit: int = 50) -> RunQuery:
        """The runs a page lists, from its query string's fields (each as `mother runs` takes it)."""

        def number(name: str) -> float | None:
            text = q.get(name) or None
            if text is None:
                return None
            try:
                value = float(text)
            except ValueError:
                raise InvalidSpec(
                    f"{name} must be a number, got {text[:40]!r}", field=name
                ) from None
            if not math.isfinite(value) or value < 0:
                raise InvalidSpec(
                    f"{name} must be a finite number >= 0, got {text[:40]!r}", field=name
                )
            return value

        def scaled(name: str, by: int) -> int | None:
            value = number(name)
            return None if value is None else round(value * by)

        hours = number("hours")
        since = clock.now_ms() - int(hours * 3_600_000) if hours is not None else None
        bounds = {
            name: number(name) for name in ("ended_from", "ended_to", "created_from", "created_to")
        }
        sort = q.get("sort") or "created"
        return RunQuery(
            reason=q.get("reason") or None,
            status=q.get("status") or None,
            not_success=q.get("outcome") == "not_success",
            user=q.get("user") or None,
            created_from=since if since is not None else _int(bounds["created_from"]),
            created_to=_int(bounds["created_to"]),
            ended_from=_int(bounds["ended_from"]),
            ended_to=_int(bounds["ended_to"]),
            search=q.get("search") or None,
            phase=q.get("phase") or None,
            model=q.get("model") or None,
            host=q.get("host") or None,
            cost_from=scaled("cost_min", 1_000_000),
            cost_to=scaled("cost_max", 1_000_000),
            duration_from=scaled("duration_min", 1000),
            duration_to=scaled("duration_max", 1000),
            sort=sort,  # type: ignore[arg-type]
            descending=q.get("order") != "asc",
            limit=int(number("limit") or limit),
            cursor=q.get("cursor") or None,
        ).check()

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
            rows=mother.list_runs(RunQuery(limit=15)).rows,
        )

    def runs_page(request: Request) -> HTMLResponse:
        found = mother.list_runs(query_of(request.query_params))
        params = {k: v for k, v in request.query_params.items() if k != "cursor"}
        return page(
            "runs.html",
            request,
            rows=found.rows,
            total=found.total,
            next_page=f"/runs?{urlencode({**params, 'cursor': found.next})}"
            if found.next
            else None,
            previous_page=f"/runs?{urlencode({**params, 'cursor': found.previous})}"
            if found.previous
            else None,
            chosen=request.query_params,
            reasons=TERMINATION_REASONS,
            statuses=RUN_STATUSES,
            csv_link="/runs.csv?" + urlencode(params),
        )

    def runs_csv(request: Request) -> StreamingResponse:
        """Every run the page's filters select (all pages), as CSV."""
        query = replace(query_of(request.query_params), limit=MAX_PAGE, cursor=None)
        return StreamingResponse(
            iterate_in_threadpool(csv_lines(all_rows(redis, query))),
            media_type="text/csv; charset=utf-8",
            headers={"content-disposition": 'attachment; filename="runs.csv"'},
        )

    def run_page(request: Request) -> HTMLResponse:
        run_id = request.path_params["run_id"]
        view = mother.inspect(run_id)
        return page("run.html", request, run_id=run_id, view=view)

    def waiting_page(request: Request) -> HTMLResponse:
        return page("waiting.html", request, rows=mother.waiting(limit=200))

    def host_list() -> list[Any]:
        return host_rows(redis, int(settings.service.heartbeat_timeout_seconds * 1000))

    def hosts_page(request: Request) -> HTMLResponse:
        return page("hosts.html", request, rows=host_list())

    def api_hosts(request: Request) -> JSONResponse:
        return JSONResponse([row.to_dict() for row in host_list()])

    def cost_view(request: Request) -> tuple[Costs, str, str | None, int]:
        """The costs a page or /api/costs asks for: ``since`` (an age or a date-time, default 7d),
        ``until`` (default now), ``top``."""
        q = request.query_params
        since, until = q.get("since") or "7d", q.get("until") or None
        top = q.get("top") or "10"
        if not top.isdigit() or not 1 <= int(top) <= 500:
            raise InvalidSpec(f"top must be 1 to 500, got {top[:40]!r}", field="top")
        start, end = period(since, until, clock.now_ms())
        return costs(redis, start, end, int(top)), since, until, int(top)

    def costs_page(request: Request) -> HTMLResponse:
        found, since, until, top = cost_view(request)
        return page("costs.html", request, c=found, since=since, until=until, top=top)

    def api_costs(request: Request) -> JSONResponse:
        return JSONResponse(cost_view(request)[0].to_dict())

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
        return JSONResponse(mother.list_runs(query_of(request.query_params)).to_dict())

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

    def redis_away(request: Request, exc: Exception) -> Response:
        """Redis cannot be reached: one line and 503 (the page or API asked for has nothing to show), not a
        traceback per request; /metrics answers instead with mother_redis_up 0."""
        line = f"Redis unreachable at {redact_url(settings.redis_url)}: {type(exc).__name__}"
        log.warning("dashboard_redis_unreachable", path=request.url.path, error=str(exc)[:200])
        if request.url.path.startswith("/api/"):
            return JSONResponse({"error": line}, status_code=503)
        return PlainTextResponse(line + "\n", status_code=503)

    middleware = [Middleware(TokenGate, token=settings.dashboard.token)]
    acting = actions.routes(actions.Web(sessions, page, query_of))
    live = Live(redis)
    return Starlette(
        routes=[
            *acting,
            Route("/", overview),
            Route("/runs", runs_page),
            Route("/runs.csv", runs_csv),
            Route("/runs/{run_id}", run_page),
            Route("/waiting", waiting_page),
            Route("/hosts", hosts_page),
            Route("/costs", costs_page),
            Route("/api/chart", api_chart),
            Route("/api/summary", api_summary),
            Route("/api/runs", api_runs),
            Route("/api/runs/{run_id}", api_run),
            Route("/api/hosts", api_hosts),
            Route("/api/costs", api_costs),
            Route("/events", live.endpoint),
            Route("/metrics", metrics),
            Route("/healthz", healthz),
            Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
        ],
        middleware=middleware,
        exception_handlers={
            NotFound: not_found,
            InvalidSpec: bad_request,
            **dict.fromkeys(REDIS_DOWN_ERRORS, redis_away),
        },
    )
