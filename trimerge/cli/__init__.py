"""The ``trimerge`` command line: the application in :mod:`~trimerge.cli.app`, one module per family
of commands (tables, history, diffs, merging). Importing it registers every command."""

from trimerge.cli import diffs, editing, gates, history, importing, indices, merging, relocate, remotes, search, serve, sql, status, tables  # noqa: F401 - registers the commands
from trimerge.cli import requests  # noqa: F401,E402 - request and queue (merge requests, trimerge.review)
from trimerge.cli import hooks  # noqa: F401,E402 - hook, hooks run, changes (trimerge.hooks)
from trimerge.cli import mcp  # noqa: F401,E402 - mcp: the Model Context Protocol server (trimerge.agents)
from trimerge.cli.app import Context, cli, main
from trimerge.cli.habits import polish

polish(cli)  # every option has help; no internal bounds in help

__all__ = ["Context", "cli", "main"]
