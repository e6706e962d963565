"""The web view's HTTP side: routes under ``/ui``, sign-in, CSRF, security headers, errors, the log.

Every answer is an HTML page rendered from the package's Jinja2 templates (autoescaped: a cell
holding ``<script>`` is text), with a Content-Security-Policy that lets a page load only from its
own origin, and no inline script or style. A GET never changes anything; a POST must carry the
session's CSRF token (and, when the browser sends one, an ``Origin`` of this server), and an
action must also be allowed by the session's token. Handlers run in worker threads; an error a
visitor can cause is a page saying what is wrong with the status the namespace would use.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Awaitable, Callable
from urllib.parse import quote, urlsplit

from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from trimerge.lineage.errors import TrimergeError, one_line
from trimerge.pages import browse, compare, history, review
from trimerge.pages.errors import (
    BadRequestError,
    ForbiddenError,
    MethodNotAllowedError,
    PageNotFoundError,
    SignInRequiredError,
    TooLongError,
    http_status,
)
from trimerge.pages.sessions import COOKIE, Sessions
from trimerge.pages.site import Ask, Page, Redirect, Site
from trimerge.serve.config import ServeConfig
from trimerge.serve.tokens import find_grant

__all__ = ["MAX_QUERY_CHARS", "PREFIX", "SECURITY_HEADERS", "pages_routes"]

PREFIX = "/ui"
MAX_QUERY_CHARS = 8192  # no page needs more; longer addresses get 414
MAX_FORM_FIELDS = 2000  # a conflict form has a few fields per conflict shown
HERE = Path(__file__).resolve().parent
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; "
                               "base-uri 'none'; form-action 'self'",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}

Handler = Callable[[Site, Ask], "Page | Redirect"]


class _Pages:
    """The routes' shared state: the site, the sessions, the templates."""

    def __init__(self, config: ServeConfig):
        self.config = config
        self.site = Site(config)
        self.sessions = Sessions()
        self.authenticated = config.grants is not None
        # StrictUndefined: a name a template expects and a handler forgot is an error, not an empty cell.
        self.env = Environment(loader=FileSystemLoader(HERE / "templates"), autoescape=select_autoescape(["html"]),
                               trim_blocks=True, lstrip_blocks=True, undefined=StrictUndefined, auto_reload=False)
        self.env.globals.update(prefix=PREFIX, quote=quote)

    # -- rendering
    def render(self, page: Page, ask: Ask | None, notices: list[str]) -> str:
        template = self.env.get_template(page.template)
        session = ask.session if ask is not None else None
        return template.render(**page.data, ask=ask, session=session, notices=notices,
                               authenticated=self.authenticated, csrf=session.csrf if session else "",
                               signed_in=bool(session and session.signed_in), prefix=PREFIX)

    def error_page(self, exc: BaseException, ask: Ask | None) -> tuple[str, int]:
        status = http_status(exc)
        if status >= 500:
            message = f"internal error: {type(exc).__name__}: {one_line(str(exc))[:300]}"
        else:
            message = one_line(str(exc).strip("'\""))
        if len(message) > 2000:  # an echoed input must not make the page huge
            message = message[:2000] + "..."
        page = Page("error.html", {"title": f"{status} {_REASONS.get(status, 'Error')}", "status": status,
                                   "message": message, "sign_in": status == 401})
        return self.render(page, ask, []), status

    # -- one request
    async def handle(self, request: Request, handler: Handler, *, public: bool = False) -> Response:
        started = time.perf_counter()
        ask: Ask | None = None
        fresh_cookie: str | None = None
        clear_cookie = False
        try:
            if len(request.scope.get("query_string", b"")) > MAX_QUERY_CHARS:
                raise TooLongError(f"the address's query is {len(request.scope['query_string']):,} characters long "
                                   f"(at most {MAX_QUERY_CHARS:,})")
            session, why = self.sessions.find(request.cookies.get(COOKIE))
            if request.method == "POST":
                form = await _form(request)
                if session is None:
                    clear_cookie = why is not None
                    if self.authenticated:
                        raise SignInRequiredError(why or "not signed in: sign in first")
                    raise ForbiddenError(why or "this form has no session: reload the page and try again")
                _check_origin(request)
                if not self.sessions.csrf_ok(session, form.get("csrf")):
                    raise ForbiddenError("the form's CSRF token is missing or wrong: reload the page and try again")
            else:
                form = {}
                if session is None:
                    if why is not None and self.authenticated and not public:
                        clear_cookie = True
                        raise SignInRequiredError(why)
                    session, fresh_cookie = self.sessions.start()
            ask = Ask(request.url.path, _query(request), form, session, self.authenticated, self.site.branch_names)
            if self.authenticated and not public and not session.signed_in:
                if request.method == "GET":
                    result: Page | Redirect = Redirect(f"{PREFIX}/login?next={quote(_here(request), safe='')}")
                else:
                    raise SignInRequiredError("not signed in: sign in first")
            else:
                result = await run_in_threadpool(self._run, handler, ask)
            if isinstance(result, Redirect):
                if result.notice:
                    (ask.session or session).notices.append(result.notice)
                response: Response = RedirectResponse(result.url, status_code=303)
                if isinstance(result, _SignedIn):
                    fresh_cookie = result.cookie
                elif isinstance(result, _SignedOut):
                    clear_cookie = True
            else:
                notices, session.notices = list(session.notices), []
                body = await run_in_threadpool(self.render, result, ask, notices)
                response = HTMLResponse(body, status_code=result.status)
        except Exception as exc:  # noqa: BLE001 - a page that says what is wrong; the server goes on
            if not isinstance(exc, TrimergeError):
                self.config.log(f"pages: {type(exc).__name__}: {one_line(str(exc))[:500]}")
            body, status = await run_in_threadpool(self.error_page, exc, ask)
            response = HTMLResponse(body, status_code=status)
        for name, value in SECURITY_HEADERS.items():
            response.headers[name] = value
        secure = request.url.scheme == "https"
        if fresh_cookie is not None:
            response.set_cookie(COOKIE, fresh_cookie, max_age=_max_age(self.sessions, fresh_cookie), path=PREFIX,
                                httponly=True, samesite="strict", secure=secure)
        elif clear_cookie:
            response.delete_cookie(COOKIE, path=PREFIX, httponly=True, samesite="strict", secure=secure)
        self._log(request, response.status_code, started, ask)
        return response

    def _run(self, handler: Handler, ask: Ask) -> "Page | Redirect":
        return handler(self.site, ask)

    def _log(self, request: Request, status: int, started: float, ask: Ask | None) -> None:
        elapsed = (time.perf_counter() - started) * 1000
        who = ask.grant.label if ask is not None and ask.grant is not None else "-"
        path = one_line(request.url.path)
        path = path if len(path) <= 200 else f"{path[:200]}...({len(path)} chars)"
        client = request.client.host if request.client else "-"
        self.config.log(f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} {client} {request.method} {path} "
                        f"{status} {elapsed:.1f}ms {who}")

    # -- sign-in
    def login(self, site: Site, ask: Ask) -> "Page | Redirect":
        target = _next(ask.text("next", source="form" if ask.form else "query"))
        if not ask.form:
            return Page("login.html", {"title": "Sign in", "next": target})
        if not self.authenticated:
            return Redirect(target, "this server has no tokens: there is nothing to sign in to")
        token = (ask.form.get("token") or "").strip()
        grant = find_grant(self.config.grants or [], f"Bearer {token}") if token else None
        if grant is None:
            time.sleep(0.2)  # guessing tokens through the form is slow
            return Page("login.html", {"title": "Sign in", "next": target,
                                       "error": "that token is not one of this server's tokens"}, status=401)
        assert ask.session is not None
        self.sessions.end(ask.session)
        fresh, cookie = self.sessions.start(grant, signed_in=True)
        fresh.notices.append(f"signed in as {grant.label} ({'write' if grant.write else 'read'} token"
                             f"{'' if grant.branches == '*' else ', branches ' + grant.branches})")
        return _SignedIn(target, cookie=cookie)

    def logout(self, site: Site, ask: Ask) -> "Page | Redirect":
        assert ask.session is not None
        self.sessions.end(ask.session)
        return _SignedOut(f"{PREFIX}/login" if self.authenticated else f"{PREFIX}/")


class _SignedIn(Redirect):
    def __init__(self, url: str, *, cookie: str):
        super().__init__(url)
        self.cookie = cookie


class _SignedOut(Redirect):
    pass


_REASONS = {400: "Bad request", 401: "Sign in required", 403: "Forbidden", 404: "Not found",
            405: "Method not allowed", 409: "Conflict", 414: "Address too long", 500: "Internal error"}


def _max_age(sessions: Sessions, cookie: str) -> int:
    session, _ = sessions.find(cookie)
    return session.seconds if session is not None else 0


def _here(request: Request) -> str:
    query = request.url.query
    return request.url.path + (f"?{query}" if query else "")


def _next(target: str | None) -> str:
    """A page to go to after sign-in: only one of ours (never another site: no open redirect)."""
    if not target or not target.startswith(PREFIX + "/") or target.startswith("//") or "\\" in target:
        return f"{PREFIX}/"
    parts = urlsplit(target)
    return target if not parts.scheme and not parts.netloc else f"{PREFIX}/"


def _query(request: Request) -> dict[str, str]:
    out: dict[str, str] = {}
    for name, value in request.query_params.multi_items():
        if name in out and out[name] != value:
            raise BadRequestError(f"{name}= is given twice with different values")
        out[name] = value
    return out


async def _form(request: Request) -> dict[str, str]:
    kind = request.headers.get("content-type", "")
    if not kind.startswith(("application/x-www-form-urlencoded", "multipart/form-data")):
        raise BadRequestError("a form post needs Content-Type application/x-www-form-urlencoded")
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > 1 << 20):
        raise BadRequestError("the form is larger than 1 MiB")
    try:
        async with request.form(max_files=0, max_fields=MAX_FORM_FIELDS, max_part_size=1 << 20) as form:
            return {k: v for k, v in form.multi_items() if isinstance(v, str)}
    except Exception as exc:  # noqa: BLE001 - a malformed body is bad input, whatever the parser calls it
        raise BadRequestError(f"the form cannot be read ({one_line(str(exc))[:200]})") from None


def _check_origin(request: Request) -> None:
    origin = request.headers.get("origin")
    if origin is None or origin == "null":
        return  # SameSite=Strict and the CSRF token carry the check; some browsers send no Origin
    host = request.headers.get("host", "")
    if urlsplit(origin).netloc != host:
        raise ForbiddenError(f"a form from another site ({origin[:100]}) is refused")


def pages_routes(config: ServeConfig) -> list[BaseRoute]:
    """The web view's routes, to put before the namespace's (``ServeConfig.routes``)."""
    pages = _Pages(config)

    def route(path: str, handler: Handler, methods: tuple[str, ...] = ("GET",), public: bool = False) -> Route:
        async def endpoint(request: Request) -> Response:
            return await pages.handle(request, handler, public=public)

        return Route(path, endpoint, methods=list(methods))

    def with_id(handler: Callable[[Site, Ask, str], "Page | Redirect"]) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            value = request.path_params["ident"]
            return await pages.handle(request, lambda site, ask: handler(site, ask, value))

        return endpoint

    async def unknown(request: Request) -> Response:
        return await pages.handle(request, _unknown(request.url.path))

    async def refused(request: Request, exc: Exception) -> Response:
        """Starlette's own refusals inside /ui (a method a page does not answer): a page too."""
        status = int(getattr(exc, "status_code", 500))

        def handler(site: Site, ask: Ask) -> Page:
            if status == 405:
                raise MethodNotAllowedError(f"{request.method} {request.url.path[:200]}: pages answer GET "
                                            f"(and POST for their forms)")
            raise PageNotFoundError(f"no page at {request.url.path[:200]} (start at {PREFIX}/)")

        return await pages.handle(request, handler, public=True)

    async def to_home(request: Request) -> Response:
        return RedirectResponse(f"{PREFIX}/", status_code=307)

    ui = [
        route("/", history.home_page),
        route("/login", pages.login, ("GET", "POST"), public=True),
        route("/logout", pages.logout, ("POST",), public=True),
        route("/log", history.log_page),
        Route("/commit/{ident:path}", with_id(history.commit_page), methods=["GET"]),
        route("/compare", compare.compare_page),
        route("/table", browse.table_page),
        route("/blame", browse.blame_page),
        route("/requests", review.list_page, ("GET", "POST")),
        Route("/requests/{ident:path}", with_id(review.request_page), methods=["GET", "POST"]),
        Mount("/static", app=StaticFiles(directory=HERE / "static"), name="static"),
        Route("/{rest:path}", unknown, methods=["GET", "POST"]),
    ]
    return [Route("/", to_home, methods=["GET"]), Route(PREFIX, to_home, methods=["GET"]),
            Mount(PREFIX, app=Starlette(routes=ui, exception_handlers={HTTPException: refused}))]


def _unknown(path: str) -> Handler:
    def handler(site: Site, ask: Ask) -> Page:
        raise PageNotFoundError(f"no page at {path[:200]} (start at {PREFIX}/)")

    return handler
