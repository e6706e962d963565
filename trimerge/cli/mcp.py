"""``trimerge mcp``: the repository as a Model Context Protocol server for agents (see :mod:`trimerge.agents`)."""

from __future__ import annotations

import os
import sys

import click

from trimerge.cli.app import Context, cli, common, fail

#: The environment variable holding the stdio server's token (as ``--token``).
TOKEN_ENV = "TRIMERGE_MCP_TOKEN"


@cli.command("mcp")
@click.option("--http", "http", is_flag=True,
              help="Serve streamable HTTP at http://HOST:PORT/mcp instead of stdio (needs --token-file).")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on (with --http).")
@click.option("--port", type=click.IntRange(0, 65535), default=2334, show_default=True,
              help="Port to listen on (with --http; 0: any free port, the first line printed names the URL).")
@click.option("--token-file", default=None, metavar="FILE",
              help="Bearer tokens, one a line: TOKEN [read|write [BRANCHES [ACTOR]]], as 'trimerge serve' reads.")
@click.option("--token", default=None, metavar="TOKEN",
              help=f"Over stdio: the token of --token-file this server acts with (default: ${TOKEN_ENV}).")
@common
def mcp_cmd(obj: Context, http: bool, host: str, port: int, token_file: str | None, token: str | None) -> None:
    """Serve the repository to agents over the Model Context Protocol: list branches and tables,
    read a table at a ref, diff, SQL, create a branch, upsert or delete rows, merge, open a merge request.

    Over stdio (the default) an MCP client starts this command and talks on its stdin and stdout;
    without --token-file it acts as the local user. With --token-file, the token (--token or
    $TRIMERGE_MCP_TOKEN) must be one of the file's, and its scope applies: a read token may not
    write, a BRANCHES glob limits the branches named. Over --http every request must carry
    "Authorization: Bearer TOKEN" of --token-file; prints "listening on URL" once ready."""
    from trimerge.serve.tokens import TokenFileError, find_grant, load_tokens

    if http and token_file is None:
        fail("trimerge mcp --http needs --token-file: every HTTP request must carry one of its bearer tokens")
    if http and token is not None:
        fail("--token is for stdio: over --http each client sends its own bearer token")
    token = token if token is not None else os.environ.get(TOKEN_ENV) or None
    if token is not None and token_file is None and not http:
        fail(f"--token (or ${TOKEN_ENV}) needs --token-file, the file that says what the token may do")
    try:
        grants = load_tokens(token_file) if token_file is not None else None
    except TokenFileError as exc:
        fail(str(exc))
    grant = None
    if grants is not None and not http:
        if token is None:
            fail(f"--token-file given but no token: pass --token TOKEN or set ${TOKEN_ENV}")
        grant = find_grant(grants, f"Bearer {token}")
        if grant is None:
            fail(f"the token (--token or ${TOKEN_ENV}) is not one of --token-file's tokens")
    try:  # the SDK takes a second or more to import: only once the setup is known to be good
        from trimerge.agents.mcp_server import build_server, run_http, run_stdio
        from trimerge.agents.tools import AgentTools
        from trimerge.serve.runner import ServeError
    except ImportError as exc:
        fail(f"trimerge mcp needs the 'serve' extra (pip install 'trimerge[serve]'): {exc}")
    obj.open(read_only=True)  # a bad -C fails here, before a client connects
    tools = AgentTools(obj.path, dict(obj.storage_options))
    if http:
        assert grants is not None
        server = build_server(tools, grants=grants, http=True)

        def ready(url: str) -> None:
            click.echo(f"listening on {url}")
            sys.stdout.flush()  # a pipe is block-buffered: whoever started the server waits for this line

        try:
            run_http(server, grants, host, port, ready=ready)
        except ServeError as exc:
            fail(str(exc))
        return
    run_stdio(build_server(tools, grant=grant))
