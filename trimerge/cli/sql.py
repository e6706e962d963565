"""``trimerge sql``: one read-only SQL query over the tables at a ref (see :mod:`trimerge.lineage.tables.sql`)."""

from __future__ import annotations

import click

from trimerge.cli.app import MAX_COUNT, Context, check_output_path, cli, common, output_format, print_table
from trimerge.cli.tables import READ_FORMATS


@cli.command("sql")
@click.argument("query")
@click.option("--ref", default=None, help="Ref whose tables plain names mean (default: the current branch).")
@click.option("--limit", type=click.IntRange(min=0, max=MAX_COUNT), default=None, help="At most N rows.")
@click.option("--format", "fmt", type=click.Choice(READ_FORMATS), default=None,
              help="Default: from the extension of -o FILE (.parquet, .jsonl, .json, .csv, .lance), else table.")
@click.option("-o", "output", default=None, metavar="FILE",
              help="Write to FILE; its extension picks the format (text for no extension or .txt).")
@common
def sql_cmd(obj: Context, query: str, ref, limit, fmt, output) -> None:
    """Run QUERY (DuckDB SQL, read-only) over the tables at --ref. "TABLE@REF" is a table at any
    other ref; diff('A', 'B', 'TABLE') the rows that changed between two refs (before_/after_ columns)."""
    fmt = output_format(fmt, output, formats=READ_FORMATS, default="json" if obj.json else "table", what="sql")
    check_output_path(output, fmt)
    repo = obj.open(read_only=True)
    print_table(repo.sql(query, ref=ref), fmt, output, limit)
