"""``trimerge mcp``: the repository as a Model Context Protocol server (the official ``mcp`` SDK).

Tools (each a thin shell over :class:`~trimerge.agents.tools.AgentTools`): ``list_branches``,
``list_tables``, ``read_table``, ``diff``, ``sql`` (read); ``create_branch``, ``upsert_rows``,
``delete_rows``, ``merge``, ``open_request`` (write). A failure is a tool result with
``isError`` and one line of text (:func:`~trimerge.agents.tools.error_line`), never a traceback;
arguments that do not fit a tool's schema are one line too.

Transports: stdio (the client starts ``trimerge mcp``), or streamable HTTP at ``URL/mcp``
(``--http``). Over HTTP every request must carry ``Authorization: Bearer TOKEN`` of the token
file (:mod:`trimerge.serve.tokens`, the file ``trimerge serve`` reads): a missing or unknown
token is answered 401 before the protocol sees the request. Over stdio the token file is
optional; with one, the server's token is ``--token`` or ``$TRIMERGE_MCP_TOKEN`` and must be in it.
"""

from __future__ import annotations

import json
import signal
import sys
from typing import Any, Callable, Mapping

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import ValidationError

from trimerge.agents.tools import DEFAULT_ROWS, MAX_ROWS, MAX_WRITE_CHARS, AgentTools, error_line
from trimerge.lineage.errors import one_line
from trimerge.lineage.safety.boundary import is_panic
from trimerge.serve.tokens import Grant, find_grant

__all__ = ["MAX_BODY", "PATH", "TOOL_NAMES", "WRITE_TOOLS", "build_server", "run_http", "run_stdio"]

#: Where the streamable HTTP endpoint listens.
PATH = "/mcp"
#: Largest HTTP request body: a write's rows plus the protocol's envelope (larger: 413).
MAX_BODY = MAX_WRITE_CHARS + (1 << 20)
READ_TOOLS = ("list_branches", "list_tables", "read_table", "diff", "sql")
WRITE_TOOLS = ("create_branch", "upsert_rows", "delete_rows", "merge", "open_request")
TOOL_NAMES = READ_TOOLS + WRITE_TOOLS
INSTRUCTIONS = (
    "A trimerge repository: git-style branches, diffs and three-way merges of Lance tables. Try a change on a "
    "branch (create_branch, upsert_rows/delete_rows), look at it (diff main..BRANCH, read_table, sql), then merge "
    f"it or open_request for review. Answers hold at most {MAX_ROWS} rows; filters are SQL predicates "
    "(Lance's DataFusion dialect), sql is DuckDB, read-only.")


def _arguments_line(name: str, exc: ValidationError) -> str:
    """A pydantic validation error as one line naming each bad argument."""
    parts = []
    for err in exc.errors()[:5]:
        where = ".".join(str(p) for p in err.get("loc", ())) or "arguments"
        parts.append(f"{where}: {err.get('msg', 'invalid')}")
    return one_line(f"{name}: bad arguments ({'; '.join(parts)})")[:2000]


class TrimergeMCP(MCPServer):
    """The SDK's server, with every tool failure cut to one line (argument validation included)."""

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            cause = exc.__cause__
            if isinstance(cause, ValidationError):
                raise ToolError(_arguments_line(name, cause)) from None
            if cause is not None and not isinstance(cause, ToolError):  # a crash the SDK wrapped: still one line
                raise ToolError(_named(name, error_line(cause))) from None
            text = one_line(str(exc))
            sdk = f"Error executing tool {name}: "  # the SDK's prefix: the tool's name leads instead
            raise ToolError(_named(name, text[len(sdk):] if text.startswith(sdk) else text)[:4000]) from None


def _named(name: str, text: str) -> str:
    return text if text.startswith(f"{name}:") else f"{name}: {text}"


def build_server(tools: AgentTools, *, grants: list[Grant] | None = None, grant: Grant | None = None,
                 http: bool = False) -> TrimergeMCP:
    """The MCP server over ``tools``. ``http``: each call's grant is that of its bearer token among
    ``grants`` (the HTTP gate refused the rest); otherwise every call runs as ``grant`` (None: the
    local user, unrestricted)."""
    server = TrimergeMCP("trimerge", instructions=INSTRUCTIONS, log_level="WARNING",
                         warn_on_duplicate_tools=False)

    def caller(ctx: Context) -> Grant | None:
        if not http:
            return grant
        headers: Mapping[str, str] = ctx.headers or {}
        found = find_grant(grants or [], headers.get("authorization"))
        if found is None:  # the gate in front refuses these; a transport without headers must not pass
            raise ToolError("no valid bearer token: send 'Authorization: Bearer TOKEN'")
        return found

    def run(ctx: Context, fn: Callable[..., dict[str, Any]], *args: Any) -> dict[str, Any]:
        who = caller(ctx)
        try:
            return fn(who, *args)
        except Exception as exc:  # noqa: BLE001 - a client gets one line, never a traceback
            raise ToolError(error_line(exc)) from None
        except BaseException as exc:  # a Rust panic in Lance or polars is a BaseException: still one line
            if not is_panic(exc):
                raise
            raise ToolError(error_line(exc)) from None

    reading = ToolAnnotations(read_only_hint=True, destructive_hint=False, open_world_hint=False)
    writing = ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False)

    @server.tool(annotations=reading)
    def list_branches(ctx: Context) -> dict[str, Any]:
        """The repository's branches (name, tip commit, protected) and the current one."""
        return run(ctx, tools.list_branches)

    @server.tool(annotations=reading)
    def list_tables(ctx: Context, ref: str | None = None) -> dict[str, Any]:
        """The tables at a ref (branch, tag, commit id, or an expression such as main~1; default: the
        current branch), each with its primary key and column types."""
        return run(ctx, tools.list_tables, ref)

    @server.tool(annotations=reading, description=(
        f"Rows of a table at a ref, in storage order: at most `limit` (max {MAX_ROWS}); `columns`: the "
        "columns to return; `where`: a SQL predicate such as \"price > 10 AND sector = 'tech'\"; "
        "`truncated` says more rows match."))
    def read_table(ctx: Context, table: str, ref: str | None = None, columns: list[str] | None = None,
                   where: str | None = None, limit: int = DEFAULT_ROWS) -> dict[str, Any]:
        return run(ctx, tools.read_table, table, ref, columns, where, limit)

    @server.tool(annotations=reading)
    def diff(ctx: Context, a: str, b: str | None = None, tables: list[str] | None = None,
             limit: int = DEFAULT_ROWS) -> dict[str, Any]:
        """What changed from ref ``a`` to ref ``b`` (or a range in ``a``: A..B, or A...B for what a merge
        of B would bring): per table the counts, schema changes and the first changed rows (at most
        ``limit`` in all, with before_/after_ values)."""
        return run(ctx, tools.diff, a, b, tables, limit)

    @server.tool(annotations=reading)
    def sql(ctx: Context, query: str, ref: str | None = None, limit: int = DEFAULT_ROWS) -> dict[str, Any]:
        """One read-only DuckDB query over the tables at ``ref``: "TABLE@REF" names a table at another
        ref, diff('A', 'B', 'TABLE') the rows that changed. No files, no network, no writes."""
        return run(ctx, tools.sql, query, ref, limit)

    @server.tool(annotations=writing)
    def create_branch(ctx: Context, name: str, from_ref: str | None = None) -> dict[str, Any]:
        """Create branch ``name`` at ``from_ref`` (default: the current branch)."""
        return run(ctx, tools.create_branch, name, from_ref)

    @server.tool(annotations=writing)
    def upsert_rows(ctx: Context, table: str, branch: str, rows: list[dict[str, Any]],
                    message: str | None = None) -> dict[str, Any]:
        """Insert or update rows (matched by primary key) of a table on a branch: one commit. Each row
        is an object of column values; dates and timestamps as ISO text."""
        return run(ctx, tools.upsert_rows, table, branch, rows, message)

    @server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True, open_world_hint=False))
    def delete_rows(ctx: Context, table: str, branch: str, where: str, message: str | None = None) -> dict[str, Any]:
        """Delete the rows of a table on a branch that match a SQL predicate: one commit."""
        return run(ctx, tools.delete_rows, table, branch, where, message)

    @server.tool(annotations=writing)
    def merge(ctx: Context, source: str, into: str, message: str | None = None, strategy: str | None = None,
              dry_run: bool = False) -> dict[str, Any]:
        """Three-way merge of ref ``source`` into branch ``into`` (always a merge commit). Conflicts
        publish nothing and are an error naming them; ``strategy``: source-wins or dest-wins settles
        them; ``dry_run``: only report what would happen."""
        return run(ctx, tools.merge, source, into, message, strategy, dry_run)

    @server.tool(annotations=writing)
    def open_request(ctx: Context, source: str, into: str, title: str, body: str | None = None) -> dict[str, Any]:
        """Open a merge request of branch ``source`` into branch ``into`` for review."""
        return run(ctx, tools.open_request, source, into, title, body)

    return server


def run_stdio(server: TrimergeMCP) -> None:
    """Serve one client over standard input and output until it closes them."""
    server.run("stdio")


class BearerGate:
    """ASGI middleware: an HTTP request without one of ``grants``' tokens is answered 401 (one line
    of JSON) before the protocol reads it."""

    def __init__(self, app: Any, grants: list[Grant], log: Callable[[str], None]):
        self.app, self.grants, self.log = app, grants, log

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            header = next((v.decode("latin-1") for k, v in scope.get("headers", []) if k.lower() == b"authorization"),
                          None)
            if find_grant(self.grants, header) is None:
                why = ("no token: send 'Authorization: Bearer TOKEN'" if not header
                       else "the bearer token is not one of this server's tokens")
                body = json.dumps({"error": why}).encode()
                await send({"type": "http.response.start", "status": 401,
                            "headers": [(b"content-type", b"application/json"), (b"www-authenticate", b"Bearer"),
                                        (b"content-length", str(len(body)).encode())]})
                await send({"type": "http.response.body", "body": body})
                self.log(f"refused {scope.get('method', '?')} {scope.get('path', '?')}: {why}")
                return
        await self.app(scope, receive, send)


def run_http(server: TrimergeMCP, grants: list[Grant], host: str, port: int,
             ready: Callable[[str], None] | None = None,
             log: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True)) -> None:
    """Serve streamable HTTP at ``http://HOST:PORT/mcp`` until SIGTERM or SIGINT."""
    import uvicorn

    from trimerge.serve.runner import bind

    sock = bind(host, port, authenticated=True)
    app = BearerGate(server.streamable_http_app(streamable_http_path=PATH, max_request_body_size=MAX_BODY,
                                                host=host), grants, log)
    bound_host, bound_port = sock.getsockname()[:2]
    url = f"http://{'[' + bound_host + ']' if ':' in bound_host else bound_host}:{bound_port}{PATH}"
    runner = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on",
                                           timeout_graceful_shutdown=5))
    # As trimerge serve: a SIGTERM before uvicorn has its own handlers stops it too, and exits 0.
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: setattr(runner, "should_exit", True))
    if ready is not None:
        ready(url)
    try:
        runner.run(sockets=[sock])
    finally:
        sock.close()
        signal.signal(signal.SIGTERM, previous)
    log("trimerge mcp: stopped")
