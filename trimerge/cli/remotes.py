"""``clone``, ``remote add|list|remove``, ``fetch``, ``pull`` and ``push`` (see :mod:`trimerge.remotes`)."""

from __future__ import annotations

import sys
from typing import Any

import click

from trimerge.cli.app import Context, cli, common, echo_lines, emit, say_error
from trimerge.remotes.config import redact


class TransferBar:
    """A rich bar on stderr for long transfers (after one second; only when a person watches)."""

    def __init__(self, obj: Context, description: str, delay: float = 1.0):
        import time

        self.enabled = not obj.json and sys.stderr.isatty()
        self.description, self.delay, self.started = description, delay, time.monotonic()
        self._progress: Any = None
        self._task: Any = None

    def __call__(self, done: int, total: int, nbytes: int) -> None:
        import time

        if not self.enabled:
            return
        if self._progress is None and time.monotonic() - self.started >= self.delay:
            from rich.console import Console
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

            self._progress = Progress(TextColumn("{task.description}"), BarColumn(),
                                      TextColumn("{task.completed}/{task.total} files"), TimeElapsedColumn(),
                                      console=Console(stderr=True), transient=True)
            self._progress.start()
            self._task = self._progress.add_task(self.description, total=total)
        if self._progress is not None:
            self._progress.update(self._task, completed=done, total=total,
                                  description=f"{self.description} ({nbytes / 1e6:.1f} MB)")

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()


def _summary(result: Any) -> list[str]:
    moved = f"{result.commits} commit(s), {result.files} file(s), {result.bytes:,} bytes"
    lines = [f"{result.operation} {result.remote} ({redact(result.uri)}): {result.status}; copied {moved}"]
    for r in result.refs:
        old = r.old[:10] if r.old else "(new)"
        new = r.new[:10] if r.new else "(removed)"
        lines.append(f"  {r.ref}: {old} -> {new}")
    lines += [f"  {ref}: rejected (exists on the other side at another commit; tags never move)"
              for ref in result.rejected]
    return lines


def _run(obj: Context, description: str, call: Any) -> Any:
    bar = TransferBar(obj, description)
    try:
        return call(bar)
    finally:
        bar.close()


@cli.command("clone")
@click.argument("src")
@click.argument("dst")
@common
def clone_cmd(obj: Context, src: str, dst: str) -> None:
    """Copy repository SRC (a directory, s3://, az://...) to DST, which must not exist or be empty;
    SRC becomes remote 'origin' of the copy."""
    from trimerge.remotes.ops import clone

    options = obj.storage_options or None
    result = _run(obj, "clone", lambda bar: clone(src, dst, storage_options=options, dst_storage_options=options,
                                                  progress=bar))
    emit(obj, result.to_json(), lambda: echo_lines(_summary(result)))


@cli.group("remote")
def remote_group() -> None:
    """Named remote repositories (clone, fetch, pull and push exchange history with them)."""


@remote_group.command("add")
@click.argument("name")
@click.argument("uri")
@common
def remote_add(obj: Context, name: str, uri: str) -> None:
    """Add remote NAME at URI (a directory, s3://, az://...). It keeps the --storage-option values
    that say where and how to connect (endpoint, region, allow_http...) for fetch, pull and push;
    credentials are never written down (give them through the environment or --storage-option)."""
    from trimerge.remotes.config import connection_options
    from trimerge.remotes.ops import open_remote

    open_remote(uri, read_only=True, storage_options=obj.storage_options or None, name=name)  # reachable, a repository
    kept, withheld = connection_options(obj.storage_options)
    remote = obj.repo(options_for_remote=True).remotes.add(name, uri, storage_options=kept)
    note = f"; not kept (credentials): {', '.join(withheld)}" if withheld and remote.storage_options else ""
    kept_text = f"; keeps {', '.join(sorted(remote.storage_options))}" if remote.storage_options else ""
    emit(obj, remote.to_json(), f"Added remote {remote.name} ({remote.uri}){kept_text}{note}")


@remote_group.command("list")
@common
def remote_list(obj: Context) -> None:
    """List the remotes."""
    remotes = obj.open(read_only=True).remotes.list()
    emit(obj, [r.to_json() for r in remotes], lambda: echo_lines(f"{r.name}\t{redact(r.uri)}" for r in remotes))


@remote_group.command("remove")
@click.argument("name")
@common
def remote_remove(obj: Context, name: str) -> None:
    """Remove remote NAME and its remote-tracking refs."""
    remote = obj.repo().remotes.remove(name)
    emit(obj, remote.to_json(), f"Removed remote {remote.name}")


@cli.command("fetch")
@click.argument("remote", required=False)
@click.option("--tags", is_flag=True, help="Also fetch the remote's tags this repository lacks.")
@common
def fetch_cmd(obj: Context, remote: str | None, tags: bool) -> None:
    """Update the remote-tracking refs REMOTE/BRANCH (default remote: origin)."""
    repo = obj.repo(options_for_remote=True)
    options = obj.storage_options or None
    result = _run(obj, "fetch", lambda bar: repo.fetch(remote or "origin", tags=tags, storage_options=options,
                                                       progress=bar))
    emit(obj, result.to_json(), lambda: echo_lines(_summary(result)))


@cli.command("pull")
@click.argument("remote", required=False)
@click.argument("branch", required=False)
@common
def pull_cmd(obj: Context, remote: str | None, branch: str | None) -> None:
    """Fetch REMOTE (default: origin), then bring REMOTE/BRANCH into BRANCH (default: the current
    branch): it moves when it has not diverged, else the remote branch is merged into it
    (conflicts exit 1, as a merge's do)."""
    from trimerge.merge import MergeConflictError

    repo = obj.repo(options_for_remote=True)
    options = obj.storage_options or None
    try:
        result = _run(obj, "pull", lambda bar: repo.pull(remote, branch, storage_options=options, progress=bar))
    except MergeConflictError as exc:
        source = f"{remote or 'origin'}/{repo.default_ref(branch)}"
        if repo.branches.exists(source):  # a local branch of that name would win: name the fetched ref fully
            source = f"refs/remotes/{source}"
        say_error(f"{str(exc).split(';')[0]}; {source} was fetched: resolve with 'trimerge merge {source} --conflicts "
                  f"FILE' and '--resolve FILE', or '--strategy source-wins|dest-wins'", type(exc).__name__, exc.exit_code)
        sys.exit(exc.exit_code)
    emit(obj, result.to_json(), lambda: echo_lines(_summary(result)))


@cli.command("push")
@click.argument("remote", required=False)
@click.argument("branch", required=False)
@click.option("--tags", is_flag=True, help="Also push the tags the remote lacks.")
@common
def push_cmd(obj: Context, remote: str | None, branch: str | None, tags: bool) -> None:
    """Move REMOTE's BRANCH (defaults: origin, the current branch) to this branch's tip: fast-forward
    only ("fetch and merge first" otherwise, exit 1; a lost race exits 3)."""
    repo = obj.repo(options_for_remote=True)
    options = obj.storage_options or None
    result = _run(obj, "push", lambda bar: repo.push(remote, branch, tags=tags, storage_options=options,
                                                     progress=bar))
    emit(obj, result.to_json(), lambda: echo_lines(_summary(result)))
