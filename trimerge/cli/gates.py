"""Commands that gate main: data checks (``check add/list/remove/run``) and ``blame``
(``branch protect/unprotect`` live with the other branch commands)."""

from __future__ import annotations

import sys

import click

from trimerge.cli.app import (EXIT_NO, Context, check_output_path, cli, common, echo_lines, emit, output_format,
                              print_table)
from trimerge.cli.tables import READ_FORMATS


@cli.group()
def check() -> None:
    """Data checks: SQL queries returning a table's failing rows; they gate merges into protected branches."""


@check.command("add")
@click.argument("name")
@click.option("--table", "-t", "table", required=True,
              help="The table whose failing rows the query returns (it may also read the branch's other tables).")
@click.option("--sql", required=True,
              help="A query returning the failing rows (SELECT * FROM T WHERE ...; joins, EXISTS and aggregates "
                   "over other tables of the commit judged allowed).")
@click.option("--gate", "gates", multiple=True, metavar="BRANCH",
              help="A branch whose merges it gates (repeatable; default: every protected branch).")
@click.option("--branch", "-b", default=None, help="Where the definition is committed (default: the current branch).")
@click.option("--message", "-m", default=None)
@click.option("--actor", default=None)
@common
def check_add(obj: Context, name: str, table: str, sql: str, gates, branch, message, actor) -> None:
    """Add check NAME on a table (one commit); refused (exit 2) when its SQL names a table the branch lacks."""
    repo = obj.repo()
    c = repo.checks.add(name, table, sql, gates=list(gates) or None, branch=branch, actor=actor, message=message)
    emit(obj, c.to_json(), f"Added check {c.name} on {c.table}")


@check.command("list")
@click.option("--ref", default=None, help="Ref (default: the current branch).")
@common
def check_list(obj: Context, ref) -> None:
    """List the checks defined at a ref."""
    checks = obj.open(read_only=True).checks.list(ref)
    emit(obj, [c.to_json() for c in checks],
         lambda: echo_lines(f"{c.name}\t{c.table}\tgates {', '.join(c.gates) if c.gates is not None else '(protected)'}"
                            f"\t{c.sql}" for c in checks))


@check.command("remove")
@click.argument("name")
@click.option("--branch", "-b", default=None, help="Where the removal is committed (default: the current branch).")
@click.option("--message", "-m", default=None)
@click.option("--actor", default=None)
@common
def check_remove(obj: Context, name: str, branch, message, actor) -> None:
    """Remove check NAME (one commit)."""
    c = obj.repo().checks.remove(name, branch=branch, actor=actor, message=message)
    emit(obj, c.to_json(), f"Removed check {c.name}")


@check.command("run")
@click.option("--ref", default=None, help="Ref to check (default: the current branch).")
@common
def check_run(obj: Context, ref) -> None:
    """Run every check defined at a ref on its data; exit 1 when one fails (or reads a table the ref lacks)."""
    results = obj.open(read_only=True).checks.run(ref)
    emit(obj, [r.to_json() for r in results],
         lambda: echo_lines([*(("FAILED " if not r.passed else "ok     ") + r.describe() for r in results),
                             f"{sum(not r.passed for r in results)} of {len(results)} check(s) failed"]))
    if any(not r.passed for r in results):
        sys.exit(EXIT_NO)


@cli.command()
@click.argument("table_name", metavar="TABLE")
@click.option("--ref", default=None, help="Ref (default: the current branch).")
@click.option("--where", default=None, help="SQL filter: blame only these rows.")
@click.option("--columns", default=None, help="Comma-separated columns: blame each of these cells.")
@click.option("--format", "fmt", type=click.Choice(READ_FORMATS), default=None,
              help="Default: from the extension of -o FILE, else table.")
@click.option("-o", "output", default=None, metavar="FILE", help="Write to FILE.")
@common
def blame(obj: Context, table_name: str, ref, where, columns, fmt, output) -> None:
    """The last commit that changed each row (or each --columns cell) of TABLE: key, commit, actor, time, message."""
    fmt = output_format(fmt, output, formats=READ_FORMATS, default="json" if obj.json else "table", what="blame")
    check_output_path(output, fmt)
    repo = obj.open(read_only=True)
    cols = [c.strip() for c in columns.split(",")] if columns is not None else None
    blamed = repo.blame(table_name, ref=ref, where=where, columns=cols)
    if fmt == "table" and "commit" in blamed.column_names:  # read by people: git's short ids (files keep full ids)
        import pyarrow as pa
        import pyarrow.compute as pc

        ids = blamed.column("commit")
        unique = pc.unique(ids).to_pylist()
        short = pa.array([repo.short_id(i) if i is not None else None for i in unique], pa.string())
        blamed = blamed.set_column(blamed.schema.get_field_index("commit"), "commit",
                                   pc.take(short, pc.index_in(ids, value_set=pa.array(unique, ids.type))))
    print_table(blamed, fmt, output)
