"""The ASGI application of ``trimerge serve``: authentication, the operations, errors, the request log.

Every answer comes from :class:`~trimerge.namespace.service.TrimergeNamespace` (the same refs and
tables the in-process namespace gives); this module decides who may ask, turns HTTP into the
namespace's request models and its answers and errors back into JSON. An error is the spec's
``ErrorResponse`` (``{"error": MESSAGE, "code": N, "detail": TYPE}``, ``code`` one of
:class:`lance_namespace.ErrorCode`) with a 4xx status for anything the client can fix.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import lance_namespace as ln
from lance_namespace_urllib3_client.models import ErrorResponse
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from trimerge.lineage.errors import TrimergeError, one_line
from trimerge.namespace.query import ARROW_FILE
from trimerge.namespace.service import TrimergeNamespace
from trimerge.serve.config import ServeConfig
from trimerge.serve.routes import Op, build_request, find_op, split_path
from trimerge.serve.tokens import Grant, find_grant

__all__ = ["MAX_BODY", "build_app", "http_status"]

#: Largest request body read (the served operations' bodies are a few hundred bytes).
MAX_BODY = 1 << 20

_STATUS = {
    ln.ErrorCode.UNSUPPORTED: 406, ln.ErrorCode.INVALID_INPUT: 400, ln.ErrorCode.TABLE_SCHEMA_VALIDATION_ERROR: 400,
    ln.ErrorCode.UNAUTHENTICATED: 401, ln.ErrorCode.PERMISSION_DENIED: 403, ln.ErrorCode.CONCURRENT_MODIFICATION: 409,
    ln.ErrorCode.INVALID_TABLE_STATE: 409, ln.ErrorCode.NAMESPACE_NOT_EMPTY: 409, ln.ErrorCode.THROTTLING: 429,
    ln.ErrorCode.SERVICE_UNAVAILABLE: 503, ln.ErrorCode.INTERNAL: 500,
}


def http_status(code: int) -> int:
    """The HTTP status of a namespace error code: not found 404, already exists 409, ..."""
    try:
        known = ln.ErrorCode(code)
    except ValueError:
        return 500
    if known in _STATUS:
        return _STATUS[known]
    return 404 if known.name.endswith("NOT_FOUND") else 409 if known.name.endswith("ALREADY_EXISTS") else 500


class _Service:
    """The namespaces (one per commit author: a token's actor) and the rules around them."""

    def __init__(self, config: ServeConfig):
        self.config = config
        self.default = TrimergeNamespace(root=config.root, ref=config.ref, **config.storage_options)
        self.ref = self.default.ref  # fixed at start: the current branch may change under a running server
        self._by_actor: dict[str | None, TrimergeNamespace] = {None: self.default}
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()  # one client write at a time (each is a commit under a lease)

    def namespace(self, grant: Grant | None) -> TrimergeNamespace:
        actor = grant.actor if grant is not None else None
        with self._lock:
            ns = self._by_actor.get(actor)
            if ns is None:
                ns = TrimergeNamespace(root=self.config.root, ref=self.ref, actor=actor,
                                       **self.config.storage_options)
                self._by_actor[actor] = ns
            return ns

    def authenticate(self, header: str | None) -> Grant | None:
        grants = self.config.grants
        if grants is None:
            return None
        if not header:
            raise ln.UnauthenticatedError("no token: send 'Authorization: Bearer TOKEN' (LanceDB: the property "
                                          "'headers.Authorization': 'Bearer TOKEN')")
        grant = find_grant(grants, header)
        if grant is None:
            raise ln.UnauthenticatedError("the bearer token is not one of this server's tokens")
        return grant

    def refs_named(self, op: Op, ident: list[str], request: Any) -> list[str]:
        """The refs a request names: its namespace part (default: the server's ref) and, for a table,
        the request's ``branch``/``tag`` (the namespace reads them as trimerge's)."""
        if op.method == "list_namespaces" and not ident:
            return []  # the refs themselves: the answer lists only those the token may name
        names = ident[:-1] if op.table else ident
        refs = [names[0] if names else self.ref]
        for extra in ("branch", "tag"):
            value = getattr(request, extra, None)
            if value and not (extra == "branch" and value == "main" and op.method.endswith("_version")):
                refs.append(value)
        return refs

    def authorize(self, grant: Grant | None, op: Op, refs: list[str]) -> None:
        if grant is None:
            return
        if op.write and not grant.write:
            raise ln.PermissionDeniedError(f"{op.method}: {grant.label} is a read-only token; writes need a "
                                           f"'write' token")
        if grant.branches == "*":
            return
        branches = set(self.default.repo.branches.names())
        for ref in refs:
            if not grant.may_name(ref, branches):
                raise ln.PermissionDeniedError(
                    f"{op.method}: {grant.label} may name only branches matching {grant.branches!r} (and "
                    f"expressions on them), not {ref!r}")

    def call(self, op: Op, grant: Grant | None, request: Any) -> Any:
        ns = self.namespace(grant)
        method = getattr(ns, op.method)
        if op.method == "create_table_version":
            with self._write_lock:
                return method(request)
        return method(request)

    def refuse_write(self, grant: Grant | None, request: Any, error: ln.PermissionDeniedError) -> None:
        """Refuse a client's write with ``error``, removing what Lance wrote for it."""
        try:
            self.namespace(grant).refuse_table_version(request, error)
        except ln.LanceNamespaceError:
            pass  # whatever the namespace says of the table, the answer is the refusal

    def answer(self, op: Op, grant: Grant | None, response: Any) -> dict[str, Any]:
        if op.method == "list_namespaces" and grant is not None and grant.branches != "*":
            branches = set(self.default.repo.branches.names())
            response.namespaces = [n for n in response.namespaces if grant.may_name(n, branches)]
        if op.method == "describe_table" and not self.config.share_storage_options:
            response.storage_options = None  # credentials stay with the operator unless shared
        return response.to_dict() if response is not None else {}


def _error(exc: ln.LanceNamespaceError) -> JSONResponse:
    message = one_line(str(exc))
    if len(message) > 2000:  # an echoed client input must not make the answer huge
        message = message[:2000] + "..."
    body = ErrorResponse(error=message, code=int(exc.code), detail=type(exc).__name__).to_dict()
    return JSONResponse(body, status_code=http_status(int(exc.code)))


async def _body(request: Request) -> Any:
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > MAX_BODY):
        raise ln.InvalidInputError(f"request body of {declared} bytes refused (at most {MAX_BODY})")
    data = bytearray()
    async for chunk in request.stream():
        data += chunk
        if len(data) > MAX_BODY:
            raise ln.InvalidInputError(f"request body over {MAX_BODY} bytes refused")
    if not data.strip():
        return None
    try:
        return json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ln.InvalidInputError(f"the request body is not JSON ({one_line(str(exc))[:120]})") from None


def _log_path(request: Request) -> str:
    text = one_line(request.url.path)
    return text if len(text) <= 200 else f"{text[:200]}...({len(text)} chars)"


def build_app(config: ServeConfig) -> Starlette:
    """The application; opening the repository (and checking the ref) happens here, not per request."""
    service = _Service(config)

    async def dispatch(request: Request) -> Response:
        started = time.perf_counter()
        who = "-"
        try:
            grant = service.authenticate(request.headers.get("authorization"))
            who = grant.label if grant is not None else "-"
            parsed = split_path(request.scope.get("raw_path") or request.url.path.encode())
            op = find_op(parsed[0], parsed[2]) if parsed is not None else None
            if parsed is None or op is None:
                raise ln.UnsupportedOperationError(
                    f"{request.method} {request.url.path}: not an operation trimerge serve answers (it serves the "
                    f"Lance REST Namespace's read operations and create_table_version)")
            if op.model is None:  # a refused write: the namespace says why, whatever the body
                service.authorize(grant, op, [])
                await run_in_threadpool(service.call, op, grant, None)
                raise ln.InternalError(f"{op.method} was not refused")
            body = await _body(request) if request.method != "GET" else None
            model, ident = build_request(op, parsed[1], dict(request.query_params), body)
            try:
                service.authorize(grant, op, service.refs_named(op, ident, model))
            except ln.PermissionDeniedError as exc:
                if op.method == "create_table_version":  # Lance has written the files already
                    await run_in_threadpool(service.refuse_write, grant, model, exc)
                raise
            response = await run_in_threadpool(service.call, op, grant, model)
            if op.method == "query_table":  # the rows themselves, as LanceDB's clients read them back
                result: Response = Response(response, media_type=ARROW_FILE)
            else:
                result = JSONResponse(service.answer(op, grant, response))
        except ln.LanceNamespaceError as exc:
            result = _error(exc)
        except TrimergeError as exc:
            result = _error(ln.InvalidInputError(str(exc)))
        except Exception as exc:  # noqa: BLE001 - one line to the client and the log; the server goes on
            result = _error(ln.InternalError(f"internal error: {type(exc).__name__}: {exc}"))
        elapsed = (time.perf_counter() - started) * 1000
        client = request.client.host if request.client else "-"
        config.log(f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} {client} {request.method} "
                   f"{_log_path(request)} {result.status_code} {elapsed:.1f}ms {who}")
        return result

    methods = ["GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"]  # (HEAD: with GET)
    return Starlette(routes=[Route("/{path:path}", dispatch, methods=methods)])
