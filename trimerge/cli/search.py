"""The ``search`` command: nearest rows to a vector, or best full-text matches, at any ref."""

from __future__ import annotations

import json
from pathlib import Path

import click

from trimerge.cli.app import table_address, Context, cli, common, fail, print_table


def _vector(text: str) -> object:
    """``--vector``: a JSON list, or ``@FILE`` holding one (checked further by the search itself)."""
    source = "--vector"
    if text.startswith("@"):
        path = Path(text[1:])
        if not path.is_file():
            fail(f"--vector {text}: no such file")
        try:
            text = path.read_text()
        except (OSError, UnicodeDecodeError) as exc:
            fail(f"--vector {text}: cannot read it ({exc})")
        source = f"--vector @{path}"
    try:
        value = json.loads(text)
    except ValueError as exc:
        fail(f"{source}: not a JSON list of numbers ({exc})")
    if not isinstance(value, list):
        fail(f"{source}: expected a JSON list of numbers, not {type(value).__name__}")
    return value


def _options(pairs: tuple[str, ...]) -> dict[str, object]:
    """``--option K=V``: V is read as JSON when it parses (numbers, true/false, null), else as text."""
    out: dict[str, object] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            fail(f"expected --option KEY=VALUE, not {pair!r}")
        if key in out:
            fail(f"--option {key} given twice")
        try:
            out[key] = json.loads(value)
        except ValueError:
            out[key] = value
    return out


@cli.command()
@click.argument("table_name", metavar="TABLE")
@click.option("--vector", default=None, metavar="JSON|@FILE", help="Query vector: a JSON list, or @FILE holding one.")
@click.option("--text", default=None, help="Full-text query (needs an INVERTED index on the column).")
@click.option("--column", default=None,
              help="Column to search (default: the only vector column, or the only one with an INVERTED index).")
@click.option("-k", "k", type=int, default=10, show_default=True, help="Number of rows to return.")
@click.option("--where", default=None, help="SQL prefilter: the top k among the matching rows.")
@click.option("--ref", default=None, help="Ref to search (default: the current branch).")
@click.option("--columns", default=None, help="Comma-separated columns to show besides the key.")
@click.option("--option", "options", multiple=True, metavar="K=V",
              help="Vector search option: nprobes, refine_factor (default 10 with an index; null: off), ef, metric, "
                   "use_index (repeatable).")
@click.option("--format", "fmt", type=click.Choice(["table", "json", "jsonl", "csv", "parquet"]), default=None)
@click.option("-o", "output", default=None, help="Write to a file.")
@common
def search(obj: Context, table_name: str, vector, text, column, k, where, ref, columns, options, fmt, output) -> None:
    """Rows of TABLE (or an address REPO::REF::TABLE) nearest to --vector, or best matching --text.

    Prints the key columns, --columns, then _distance (ascending) or _score (descending)."""
    if (vector is None) == (text is None):
        fail("search needs exactly one of --vector or --text")
    table_name, ref = table_address(obj, table_name, ref)
    query = _vector(vector) if vector is not None else None
    cols = [c.strip() for c in columns.split(",") if c.strip()] if columns else None
    repo = obj.open(read_only=True)
    data = repo.search(table_name, ref=ref, vector=query, text=text, column=column, k=k, where=where, columns=cols,
                       **_options(options))
    print_table(data, fmt or ("json" if obj.json else "table"), output)
