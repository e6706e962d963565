"""Merge requests over HTTP: the routes ``trimerge serve`` answers beside the Lance namespace.

Routes (JSON in, JSON out; the same tokens and branch scopes as the namespace's)::

    GET  /v1/trimerge/requests?state=&into=         list            read
    POST /v1/trimerge/requests                      create          write on "into"
         {"source", "into", "title", "body"}
    GET  /v1/trimerge/requests/events?since=        the events      read
    GET  /v1/trimerge/requests/N?format=&rows=      show            read
    POST /v1/trimerge/requests/N/review             review          write on the target
         {"verdict": "approve" | "request-changes", "comment", "commit"}
    POST /v1/trimerge/requests/N/merge {"strategy"} merge           write on the target
    POST /v1/trimerge/requests/N/queue              enqueue         write on the target
    POST /v1/trimerge/requests/N/close | /reopen    close, reopen   write on the target
    GET  /v1/trimerge/queues/BRANCH                 the queue       read
    POST /v1/trimerge/queues/BRANCH/run             run it now      write on BRANCH

A read token lists and shows the requests whose source and target it may name; a write token
whose branch glob covers a request's target may act on it, as the token's actor. Errors are the
namespace's error body ``{"error", "code", "detail"}``: 400 bad input, 401/403 tokens, 404 an
unknown request, 409 refused by a rule (conflicts, failing checks, missing approvals) or a lost
race (``detail`` names the error type; a lost race may be retried).

The server also runs the merge queues (:mod:`trimerge.review.queue`): a worker thread, started by
the first request to these routes, looks for queued requests every :data:`QUEUE_POLL` seconds
(at once after an enqueue) and runs each branch's queue; a request queued by any client (the CLI
against the same bucket too) is merged by it. Merges are attributed to whoever queued them.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any, Callable

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from trimerge.lineage.errors import (ConcurrentWriteError, InvalidOperationError, NotFoundError, TrimergeError,
                                     one_line)
from trimerge.serve.config import ServeConfig
from trimerge.serve.tokens import Grant, find_grant

__all__ = ["PREFIX", "QUEUE_POLL", "requests_routes"]

PREFIX = "/v1/trimerge"
#: Seconds between the queue worker's looks for queued requests.
QUEUE_POLL = 2.0
MAX_BODY = 1 << 20
_FORMATS = ("json", "markdown", "sarif", "junit")


class _Refused(Exception):
    def __init__(self, status: int, detail: str, message: str):
        super().__init__(message)
        self.status, self.detail = status, detail


def _status(exc: TrimergeError) -> int:
    if isinstance(exc, NotFoundError) and not isinstance(exc, ConcurrentWriteError):
        return 404 if type(exc).__name__ == "RequestNotFoundError" else 400
    return {1: 409, 3: 409, 4: 500}.get(exc.exit_code, 400)


def _answer(body: Any, status: int = 200) -> Response:
    return JSONResponse(body, status_code=status)


def _error(status: int, detail: str, message: str) -> Response:
    text = one_line(message)
    code = {400: 13, 401: 16, 403: 15, 404: 0, 409: 14, 500: 18}.get(status, 18)
    return JSONResponse({"error": text[:2000], "code": code, "detail": detail}, status_code=status)


class _Requests:
    """The repository (one per thread: a Repository is not shared between threads) and the rules."""

    def __init__(self, config: ServeConfig):
        self.config = config
        self._local = threading.local()
        self._worker: threading.Thread | None = None
        self._wake = threading.Event()
        self._start = threading.Lock()

    def repo(self) -> Any:
        repo = getattr(self._local, "repo", None)
        if repo is None:
            from trimerge.lineage.repository import Repository

            repo = Repository.open(self.config.root, storage_options=self.config.storage_options or None)
            self._local.repo = repo
        return repo

    def grant(self, request: Request) -> Grant | None:
        if self.config.grants is None:
            return None
        header = request.headers.get("authorization")
        if not header:
            raise _Refused(401, "UnauthenticatedError", "no token: send 'Authorization: Bearer TOKEN'")
        grant = find_grant(self.config.grants, header)
        if grant is None:
            raise _Refused(401, "UnauthenticatedError", "the bearer token is not one of this server's tokens")
        return grant

    def may_see(self, grant: Grant | None, *branches: str) -> bool:
        if grant is None or grant.branches == "*":
            return True
        names = set(self.repo().branches.names())
        return all(grant.may_name(b, names) for b in branches)

    def check_write(self, grant: Grant | None, branch: str, what: str) -> None:
        if grant is None:
            return
        if not grant.write:
            raise _Refused(403, "PermissionDeniedError", f"{what}: {grant.label} is a read-only token; it may list "
                                                         f"and show requests")
        if not self.may_see(grant, branch):
            raise _Refused(403, "PermissionDeniedError", f"{what}: {grant.label} may write only branches matching "
                                                         f"{grant.branches!r}, not {branch!r}")

    def check_read(self, grant: Grant | None, *branches: str) -> None:
        if not self.may_see(grant, *branches):
            raise _Refused(403, "PermissionDeniedError", f"{grant.label if grant else '-'} may name only branches "
                                                         f"matching {grant.branches if grant else '*'!r}")

    # -- the queue worker
    def wake_worker(self) -> None:
        with self._start:
            if self._worker is None:
                self._worker = threading.Thread(target=self._run_queues, name="trimerge-queue", daemon=True)
                self._worker.start()
        self._wake.set()

    def _run_queues(self) -> None:
        from trimerge.review.queue import run_queue

        while True:
            self._wake.wait(QUEUE_POLL)
            self._wake.clear()
            try:
                requests = self.repo().requests
                branches = sorted({r.into for r in requests.list(state="open") if r.queued is not None})
                for branch in branches:
                    try:
                        run_queue(requests, branch)
                    except ConcurrentWriteError:
                        pass  # another runner holds that queue: it merges what is queued
            except TrimergeError as exc:
                self.config.log(f"merge queue: {one_line(str(exc))}")
            except Exception as exc:  # noqa: BLE001 - the worker outlives one failure, and says so
                self.config.log(f"merge queue: internal error: {type(exc).__name__}: {one_line(str(exc))}")
                time.sleep(QUEUE_POLL)


async def _json_body(request: Request) -> dict[str, Any]:
    data = bytearray()
    async for chunk in request.stream():
        data += chunk
        if len(data) > MAX_BODY:
            raise _Refused(400, "InvalidInputError", f"request body over {MAX_BODY} bytes refused")
    if not data.strip():
        return {}
    try:
        body = json.loads(data)
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise _Refused(400, "InvalidInputError", "the request body is not JSON") from None
    if not isinstance(body, dict):
        raise _Refused(400, "InvalidInputError", "the request body must be a JSON object")
    return body


def _text(body: dict[str, Any], key: str, *, required: bool = False) -> Any:
    value = body.get(key)
    if value is None and required:
        raise _Refused(400, "InvalidInputError", f"the request body needs {key!r}")
    if value is not None and not isinstance(value, str):
        raise _Refused(400, "InvalidInputError", f"{key!r} must be text")
    return value


def requests_routes(config: ServeConfig) -> list[Route]:
    """The routes of the module's docstring, logging one line per request as the server does."""
    service = _Requests(config)

    def route(path: str, method: str, handler: Callable[..., Any]) -> Route:
        async def endpoint(request: Request) -> Response:
            started = time.perf_counter()
            who = "-"
            try:
                grant = service.grant(request)
                who = grant.label if grant is not None else "-"
                body = await _json_body(request) if method == "POST" else {}
                result = await run_in_threadpool(handler, grant, dict(request.path_params),
                                                 dict(request.query_params), body)
                response = result if isinstance(result, Response) else _answer(result)
            except _Refused as exc:
                response = _error(exc.status, exc.detail, str(exc))
            except TrimergeError as exc:
                response = _error(_status(exc), type(exc).__name__, str(exc))
            except Exception as exc:  # noqa: BLE001 - one line to the client and the log; the server goes on
                response = _error(500, "InternalError", f"internal error: {type(exc).__name__}: {exc}")
            elapsed = (time.perf_counter() - started) * 1000
            client = request.client.host if request.client else "-"
            config.log(f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} {client} {request.method} "
                       f"{one_line(request.url.path)[:200]} {response.status_code} {elapsed:.1f}ms {who}")
            return response

        return Route(PREFIX + path, endpoint, methods=[method])

    def number(params: dict[str, str]) -> int:
        from trimerge.lineage.history.requests import request_number

        return request_number(params["n"])

    def actor(grant: Grant | None) -> str | None:
        return grant.actor if grant is not None else None

    def listing(grant: Grant | None, params: dict, query: dict, body: dict) -> Any:
        found = service.repo().requests.list(state=query.get("state") or None, into=query.get("into") or None)
        return [r.to_json() for r in found if service.may_see(grant, r.into, r.source)]

    def create(grant: Grant | None, params: dict, query: dict, body: dict) -> Any:
        into = _text(body, "into") or "main"
        source = _text(body, "source", required=True)
        service.check_write(grant, into, "create a request")
        service.check_read(grant, source)
        r = service.repo().requests.create(source, into=into, title=_text(body, "title"), body=_text(body, "body"),
                                           actor=actor(grant))
        return _answer(r.to_json(), 201)

    def events(grant: Grant | None, params: dict, query: dict, body: dict) -> Any:
        repo = service.repo()
        seen = {r.id for r in repo.requests.list() if service.may_see(grant, r.into, r.source)}
        return [e.to_json() for e in repo.requests.events(since=query.get("since") or None) if e.request in seen]

    def show(grant: Grant | None, params: dict, query: dict, body: dict) -> Any:
        requests = service.repo().requests
        r = requests.get(number(params))
        service.check_read(grant, r.into, r.source)
        fmt = query.get("format") or "json"
        if fmt not in _FORMATS:
            raise InvalidOperationError(f"format= is one of {', '.join(_FORMATS)}, not {fmt[:40]!r}")
        rows = query.get("rows")
        if rows is not None and not rows.isdigit():
            raise InvalidOperationError("rows= is a whole number")
        view = requests.show(r.id)
        if fmt == "json":
            return json.loads(json.dumps(view.to_json(rows=int(rows) if rows else 1000), default=str))
        media = {"markdown": "text/markdown", "sarif": "application/sarif+json", "junit": "application/xml"}[fmt]
        return Response(view.report(fmt), media_type=media)

    def act(verb: str) -> Callable[..., Any]:
        def handler(grant: Grant | None, params: dict, query: dict, body: dict) -> Any:
            requests = service.repo().requests
            r = requests.get(number(params))
            service.check_write(grant, r.into, f"{verb} request #{r.id}")
            who = actor(grant)
            if verb == "review":
                done = requests.review(r.id, _text(body, "verdict", required=True), comment=_text(body, "comment"),
                                       actor=who, commit=_text(body, "commit"))
            elif verb == "merge":
                done = requests.merge(r.id, strategy=body.get("strategy"), actor=who)
            elif verb == "queue":
                done = requests.enqueue(r.id, actor=who)
                service.wake_worker()
            elif verb == "close":
                done = requests.close(r.id, actor=who)
            else:
                done = requests.reopen(r.id, actor=who)
            return done.to_json()

        return handler

    def queue_list(grant: Grant | None, params: dict, query: dict, body: dict) -> Any:
        branch = params["branch"]
        service.check_read(grant, branch)
        return [r.to_json() for r in service.repo().requests.queue(branch)]

    def queue_run(grant: Grant | None, params: dict, query: dict, body: dict) -> Any:
        from trimerge.review.queue import run_queue

        branch = params["branch"]
        service.check_write(grant, branch, f"run the merge queue of {branch!r}")
        return run_queue(service.repo().requests, branch).to_json()

    def wake(handler: Callable[..., Any]) -> Callable[..., Any]:
        def woken(*args: Any) -> Any:
            service.wake_worker()  # the first request starts the worker: queued requests get merged
            return handler(*args)

        return woken

    return [
        route("/requests", "GET", wake(listing)),
        route("/requests", "POST", wake(create)),
        route("/requests/events", "GET", events),
        route("/requests/{n}", "GET", wake(show)),
        *(route(f"/requests/{{n}}/{verb}", "POST", wake(act(verb)))
          for verb in ("review", "merge", "queue", "close", "reopen")),
        route("/queues/{branch:path}/run", "POST", queue_run),
        route("/queues/{branch:path}", "GET", wake(queue_list)),
    ]
