"""The ASGI application of ``trimerge serve``: authentication, the operations, errors, the request log.

Every answer comes from :class:`~trimerge.namespace.service.TrimergeNamespace` (the same refs and
tables the in-process namespace gives); this module decides who may ask, turns HTTP into the
namespace's request models and its answers and errors back into JSON. An error is the spec's
``ErrorResponse`` (``{"error": MESSAGE, "code": N, "detail": TYPE}``, ``code`` one of
:class:`lance_namespace.ErrorCode`) with a 4xx status for anything the client can fix.

Every request the HTTP layer hands over gets that body on an error and one log line, whatever its
path (routes added through :attr:`ServeConfig.routes` answer first; everything else comes here):
a route of the spec asked with another method is 405 with an ``Allow`` header, a path the spec
does not have is 406. A body is JSON of at most :data:`MAX_BODY` bytes nesting at most
:data:`MAX_JSON_DEPTH` levels (no ``NaN``/``Infinity``).
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any
from urllib.parse import quote

import lance_namespace as ln
from lance_namespace_urllib3_client.models import ErrorResponse
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import request_response

from trimerge.lineage.errors import TrimergeError, one_line
from trimerge.namespace.query import ARROW_FILE
from trimerge.namespace.service import TrimergeNamespace
from trimerge.serve.config import ServeConfig
from trimerge.serve.routes import Op, build_request, find_op, spec_method, split_path
from trimerge.serve.tokens import Grant, find_grant

__all__ = ["MAX_BODY", "MAX_JSON_DEPTH", "MethodNotAllowedError", "build_app", "http_status"]

#: Largest request body read (the served operations' bodies are a few hundred bytes).
MAX_BODY = 1 << 20
#: Deepest nesting of a body's arrays and objects (the spec's requests nest four levels).
MAX_JSON_DEPTH = 32

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


class MethodNotAllowedError(ln.UnsupportedOperationError):
    """A route of the spec asked with a method the spec does not give it: HTTP 405 with
    ``Allow: allowed`` and the spec's error body (code 0, ``Unsupported``)."""

    def __init__(self, message: str, allowed: str):
        super().__init__(message)
        self.allowed = allowed


def _error(exc: ln.LanceNamespaceError) -> JSONResponse:
    if isinstance(exc, MethodNotAllowedError):
        return _error_body(str(exc), int(exc.code), type(exc).__name__, 405, {"Allow": exc.allowed})
    return _error_body(str(exc), int(exc.code), type(exc).__name__, http_status(int(exc.code)))


def _error_body(message: str, code: int, detail: str, status: int,
                headers: dict[str, str] | None = None) -> JSONResponse:
    message = one_line(message)
    if len(message) > 2000:  # an echoed client input must not make the answer huge
        message = message[:2000] + "..."
    body = ErrorResponse(error=message, code=code, detail=detail).to_dict()
    return JSONResponse(body, status_code=status, headers=headers)


def _log(config: ServeConfig, request: Request, status: int, started: float, who: str) -> None:
    """The request's one log line: time, client, method, path as sent, status, duration, token."""
    elapsed = (time.perf_counter() - started) * 1000
    client = request.client.host if request.client else "-"
    config.log(f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} {client} {request.method} "
               f"{_log_path(request)} {status} {elapsed:.1f}ms {who}")


def _depth(value: Any) -> int:
    """How deep ``value``'s lists and dicts nest (iteratively: the value may be deep)."""
    deepest, stack = 0, [(value, 1)] if isinstance(value, (dict, list)) else []
    while stack:
        item, depth = stack.pop()
        deepest = max(deepest, depth)
        children = item.values() if isinstance(item, dict) else item
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return deepest


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


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
        value = json.loads(data, parse_constant=_no_constant)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ln.InvalidInputError(f"the request body is not JSON ({one_line(str(exc))[:120]})") from None
    except RecursionError:  # deeper than Python parses: far past the limit below
        raise ln.InvalidInputError(f"the request body nests hundreds of levels deep (at most {MAX_JSON_DEPTH})"
                                   ) from None
    depth = _depth(value)
    if depth > MAX_JSON_DEPTH:
        raise ln.InvalidInputError(f"the request body nests {depth} levels deep (at most {MAX_JSON_DEPTH})")
    return value


def _path(request: Request) -> str:
    """The path as received, decoded (``request.url`` drops a newline, as ``urlsplit`` does)."""
    return str(request.scope.get("path", ""))


def _log_path(request: Request) -> str:
    """The path as sent (still percent-encoded: one word of the log line, whatever it decodes to)."""
    raw = request.scope.get("raw_path")
    text = one_line(raw.decode("ascii", "backslashreplace") if isinstance(raw, bytes) else quote(_path(request)))
    return text if len(text) <= 200 else f"{text[:200]}...({len(text)}-chars)"  # (one word: no space)


def build_app(config: ServeConfig) -> Starlette:
    """The application; opening the repository (and checking the ref) happens here, not per request."""
    service = _Service(config)

    async def dispatch(request: Request) -> Response:
        started = time.perf_counter()
        who = "-"
        try:
            grant = service.authenticate(request.headers.get("authorization"))
            who = grant.label if grant is not None else "-"
            parsed = split_path(request.scope.get("raw_path") or _path(request).encode())
            allowed = spec_method(parsed[0], parsed[2]) if parsed is not None else None
            if allowed is not None and request.method != allowed:
                raise MethodNotAllowedError(f"{request.method} {_path(request)}: this route of the Lance REST "
                                            f"Namespace takes {allowed} only", allowed)
            op = find_op(parsed[0], parsed[2]) if parsed is not None else None
            if parsed is None or op is None:
                raise ln.UnsupportedOperationError(
                    f"{request.method} {_path(request)}: not an operation trimerge serve answers (it serves the "
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
        _log(config, request, result.status_code, started, who)
        return result

    from trimerge.serve.requests_routes import requests_routes  # merge requests beside the namespace

    async def refused_by_routing(request: Request, exc: Exception) -> Response:
        """An added route's own refusal (a wrong method: 405; a sub-application's 404): the error body
        and a log line too, not Starlette's plain text."""
        started = time.perf_counter()
        status = int(getattr(exc, "status_code", 500))
        code = ln.ErrorCode.INVALID_INPUT if status == 400 else ln.ErrorCode.UNSUPPORTED
        result = _error_body(f"{request.method} {_path(request)}: {getattr(exc, 'detail', '')}", int(code),
                             type(exc).__name__, status, getattr(exc, "headers", None))
        _log(config, request, status, started, "-")
        return result

    app = Starlette(routes=[*requests_routes(config), *config.routes],
                    exception_handlers={HTTPException: refused_by_routing})
    # The namespace is not a route: a route's pattern does not match every path (``.`` stops at a
    # newline: ``%0A``). Whatever no added route answers comes here, and is answered with the error
    # body and a log line whatever its path and method.
    app.router.default = request_response(dispatch)
    app.add_middleware(ControlPathsToNamespace, namespace=app.router.default)
    return app


class ControlPathsToNamespace:
    """A path holding a control character is no added route's: Starlette's route patterns end in
    ``$``, which also matches before a trailing newline (``/ui%0A`` would reach ``/ui``). Such a path
    goes to the namespace's handler, which answers it with the error body and one log line."""

    def __init__(self, app: Any, namespace: Any):
        self.app = app
        self.namespace = namespace

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        path = scope.get("path", "") if scope.get("type") == "http" else ""
        if any(ord(c) < 32 or ord(c) == 127 for c in path):
            await self.namespace(scope, receive, send)
        else:
            await self.app(scope, receive, send)
