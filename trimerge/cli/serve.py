"""``trimerge serve``: the repository as a Lance REST Namespace over HTTP (see :mod:`trimerge.serve`)."""

from __future__ import annotations

import sys

import click

from trimerge.cli.app import Context, cli, common, fail


@cli.command("serve")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on. Without --token-file only a host that resolves to loopback addresses "
                   "(127.0.0.1, ::1; a name is checked by what it resolves to).")
@click.option("--port", type=click.IntRange(0, 65535), default=2333, show_default=True,
              help="Port to listen on (0: any free port; the first line printed names it).")
@click.option("--token-file", default=None, metavar="FILE",
              help="Bearer tokens, one a line: TOKEN [read|write [BRANCHES [ACTOR]]] (BRANCHES: a glob).")
@click.option("--ref", default=None,
              help="Ref of the root namespace (a table id [TABLE]); default: the current branch at start.")
@click.option("--share-storage-options", is_flag=True,
              help="Hand the repository's --storage-option values (credentials) to clients in describe_table.")
@click.option("--no-ui", "no_ui", is_flag=True,
              help="Leave out the web view (pages under /ui/: history, diffs, blame, tables, merge requests).")
@click.option("--no-hooks", "no_hooks", is_flag=True,
              help="Do not deliver the hooks' pending events (by default a runner does, every 2 s: 'hooks run --watch').")
@common
def serve_cmd(obj: Context, host: str, port: int, token_file, ref, share_storage_options: bool,
              no_ui: bool, no_hooks: bool) -> None:
    """Serve the repository's refs and tables to Lance clients (LanceDB's connect_namespace("rest",
    ...), pylance's RestNamespace) until SIGTERM or Ctrl-C.

    Child namespaces are refs: table id [REF, TABLE] is TABLE at REF (a branch, tag, commit id or
    expression such as feat~1). A client's write becomes a trimerge commit on a branch, or is refused.
    Prints "listening on URL" once ready; logs one line per request on stderr.

    A browser opens the web view at URL/ui/ (unless --no-ui): the repository's branches, log and
    graph, commits, compares, tables, blame and merge requests; with --token-file it signs in with a
    token once (read tokens see, write tokens may also review and merge)."""
    try:
        from trimerge.serve import ServeConfig, ServeError, TokenFileError, load_tokens, serve
    except ImportError as exc:
        fail(f"trimerge serve needs the 'serve' extra (pip install 'trimerge[serve]'): {exc}")
    try:
        grants = load_tokens(token_file) if token_file is not None else None
    except TokenFileError as exc:
        fail(str(exc))
    config = ServeConfig(root=obj.path, ref=ref, storage_options=dict(obj.storage_options), grants=grants,
                         share_storage_options=share_storage_options)
    if not no_ui:
        from trimerge.pages import pages_routes

        try:
            config.routes = pages_routes(config)
        except ImportError as exc:
            fail(f"the web view needs the 'serve' extra (pip install 'trimerge[serve]'), or pass --no-ui: {exc}")

    def ready(url: str) -> None:
        if not no_hooks:  # the repository opened fine: deliver what writers could not (trimerge.hooks.runner)
            from trimerge.hooks.runner import Runner

            Runner(obj.open(), on_error=lambda message: click.echo(message, err=True)).start()
        click.echo(f"listening on {url}")
        if not no_ui:
            click.echo(f"web view: {url}/ui/")
        sys.stdout.flush()  # a pipe is block-buffered: whoever started the server waits for this line

    try:
        serve(config, host, port, ready=ready)
    except ServeError as exc:
        fail(str(exc))
    except Exception as exc:  # the namespace's own errors: not a repository, a ref that does not resolve
        if type(exc).__module__.startswith("lance_namespace"):
            fail(str(exc))
        raise
