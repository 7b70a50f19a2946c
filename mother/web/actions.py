"""What a signed-in principal does from the pages: approve, deny or answer what a run waits for, cancel a
run, submit it again, and cancel every run a listing's filters select (the count shown first). Each is a
form POSTed with the session's CSRF token, and sent by the principal's own client, on its own commands
stream: Mother decides whether it may, and a refusal is shown as Mother's one line.

Without a session there is nothing to post: the pages show no form, and a POST is refused."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlencode

from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route

from mother.errors import MotherError
from mother.observe.listing import RunQuery
from mother.web.session import COOKIE, Session, Sessions

__all__ = ["Web", "routes"]

# a form's body is small: a reason, an answer, a listing's filters
MAX_FORM_BYTES = 256 * 1024


@dataclass
class Web:
    """What the action routes need of the app: its sessions, how it renders a page, and how it reads a
    listing's filters from a query string."""

    sessions: Sessions
    page: Callable[..., HTMLResponse]
    query_of: Callable[[Any], RunQuery]
    secure_cookie: bool = False


async def _form(request: Request) -> dict[str, str]:
    """A urlencoded form's fields (the last value of each)."""
    body = await request.body()
    if len(body) > MAX_FORM_BYTES:
        raise ValueError(f"the form is over {MAX_FORM_BYTES} bytes")
    return dict(parse_qsl(body.decode("utf-8", errors="replace"), keep_blank_values=True))


def _back(target: str | None, fallback: str) -> str:
    """Where to go after a form: a path on this site only."""
    if target and target.startswith("/") and not target.startswith("//"):
        return target
    return fallback


def routes(web: Web) -> list[Route]:
    def session_of(request: Request) -> Session | None:
        return web.sessions.get(request.cookies.get(COOKIE))

    def said(
        request: Request, title: str, lines: list[str], back: str, status: int = 200
    ) -> Response:
        return web.page(
            "said.html",
            request,
            status=status,
            title=title,
            lines=lines,
            back=back,
            me=session_of(request),
        )

    def posted(
        handle: Callable[[Request, Session, dict[str, str]], Awaitable[Response]],
    ) -> Callable[[Request], Awaitable[Response]]:
        """A POST that needs a session and its CSRF token; Mother's refusal said in one line."""

        async def endpoint(request: Request) -> Response:
            me = session_of(request)
            if me is None:
                return PlainTextResponse(
                    "sign in first (/login): without a session the pages only show\n",
                    status_code=401,
                )
            try:
                form = await _form(request)
            except ValueError as exc:
                return PlainTextResponse(f"{exc}\n", status_code=413)
            if not me.csrf_ok(form.get("csrf")):
                return PlainTextResponse(
                    "this form's CSRF token is missing or wrong: reload the page and send it again\n",
                    status_code=403,
                )
            try:
                return await handle(request, me, form)
            except MotherError as exc:
                back = _back(form.get("back"), "/")
                return said(request, "refused", [exc.message], back, status=409)

        return endpoint

    async def login_page(request: Request) -> Response:
        return web.page("login.html", request, next=_back(request.query_params.get("next"), "/"))

    async def login(request: Request) -> Response:
        try:
            form = await _form(request)
        except ValueError as exc:
            return PlainTextResponse(f"{exc}\n", status_code=413)
        target = _back(form.get("next"), "/")
        try:
            session = web.sessions.sign_in(form.get("name", ""), form.get("password", ""))
        except MotherError as exc:
            return web.page("login.html", request, status=401, next=target, error=exc.message)
        response = RedirectResponse(target, status_code=303)
        response.set_cookie(
            COOKIE,
            session.sid,
            httponly=True,
            samesite="strict",
            secure=web.secure_cookie,
            max_age=int(web.sessions.minutes * 60),
        )
        return response

    async def logout(request: Request, me: Session, form: dict[str, str]) -> Response:
        web.sessions.sign_out(me.sid)
        response = RedirectResponse("/", status_code=303)
        response.delete_cookie(COOKIE)
        return response

    async def decide(request: Request, me: Session, form: dict[str, str]) -> Response:
        run_id, kind = request.path_params["run_id"], request.path_params["kind"]
        if kind not in ("approve", "deny", "answer"):
            return PlainTextResponse(
                f"no action {kind[:40]!r}: approve, deny or answer\n", status_code=404
            )
        reason = form.get("reason", "").strip()
        back = _back(form.get("back"), f"/runs/{run_id}")
        gate_id = form.get("gate_id") or None
        if kind == "answer":
            reply = me.client.answer(run_id, form.get("answer", ""), reason=reason, gate_id=gate_id)
        elif kind == "approve":
            reply = me.client.approve(
                run_id, reason=reason, gate_id=gate_id, digest=form.get("digest") or None
            )
        else:
            reply = me.client.deny(run_id, reason=reason, gate_id=gate_id)
        shown = {"approve": "approved", "deny": "denied", "answer": "answered"}[kind]
        gate = reply.get("gate_id") or gate_id or ""
        return said(request, shown, [f"{run_id}: {shown} as {me.principal} {gate}".rstrip()], back)

    async def cancel(request: Request, me: Session, form: dict[str, str]) -> Response:
        run_id = request.path_params["run_id"]
        state = me.client.cancel(
            run_id, reason=form.get("reason") or "cancelled from the dashboard"
        )
        line = (
            f"{run_id} had already ended ({state.reason}): nothing to cancel"
            if state.status == "terminated"
            else f"cancel of {run_id} asked as {me.principal}"
        )
        return said(request, "cancel", [line], _back(form.get("back"), f"/runs/{run_id}"))

    async def resubmit(request: Request, me: Session, form: dict[str, str]) -> Response:
        run_id = request.path_params["run_id"]
        new = me.client.resubmit(run_id)
        return RedirectResponse(f"/runs/{new}", status_code=303)

    async def cancel_all(request: Request, me: Session, form: dict[str, str]) -> Response:
        """The listing's filters (``filters``: its query string) select runs not yet ended; without
        ``confirm`` the count is shown with a form that confirms it, with it they are cancelled."""
        filters = form.get("filters", "")
        query = web.query_of(dict(parse_qsl(filters)))
        selected = me.client.select(query)
        listing = f"/runs?{filters}"
        if "confirm" not in form:
            return web.page(
                "cancel_all.html",
                request,
                me=me,
                count=len(selected),
                runs=selected[:50],
                filters=filters,
                listing=listing,
                reason=form.get("reason", ""),
            )
        if str(len(selected)) != form.get("confirm"):
            return said(
                request,
                "the selection changed",
                [
                    f"{form.get('confirm')} run(s) were shown, {len(selected)} are selected now: "
                    "look at the count again"
                ],
                listing,
                status=409,
            )
        done = me.client.cancel_all(
            selected, None, form.get("reason") or "cancelled from the dashboard"
        )
        lines = [f"cancel asked for {len(done.requested)} run(s) as {me.principal}"]
        if done.ended:
            lines.append(f"{len(done.ended)} had ended meanwhile")
        lines += [f"{run_id}: refused: {why}" for run_id, why in done.refused.items()]
        return said(request, "cancel all", lines, listing)

    return [
        Route("/login", login_page, methods=["GET"]),
        Route("/login", login, methods=["POST"]),
        Route("/logout", posted(logout), methods=["POST"]),
        Route("/runs/cancel-all", posted(cancel_all), methods=["POST"]),
        Route("/runs/{run_id}/cancel", posted(cancel), methods=["POST"]),
        Route("/runs/{run_id}/resubmit", posted(resubmit), methods=["POST"]),
        Route("/runs/{run_id}/{kind:str}", posted(decide), methods=["POST"]),
    ]


def listing_filters(params: Any) -> str:
    """A listing page's filters as the query string a cancel-all form carries (no cursor)."""
    return urlencode([(k, v) for k, v in params.multi_items() if k not in ("cursor", "limit")])
