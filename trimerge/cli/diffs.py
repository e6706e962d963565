"""The diff command."""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path
from typing import Any

import click

from trimerge.cli.app import (
    MAX_COUNT,
    Context,
    check_output_path,
    cli,
    common,
    emit,
    fail,
    output_format,
    print_table,
)


class DelayedProgress:
    """A rich progress bar on stderr that appears only once work has run for ``delay`` seconds.
    Called as ``progress=`` callbacks are, ``(item, stage)``; ``done`` and ``published`` stages
    count towards ``total``. With ``total=None`` (steps not known ahead: an import's key batches,
    an index's build stages) the bar pulses and its label names the item and the current stage."""

    def __init__(self, total: int | None, description: str, delay: float = 1.0, enabled: bool = True):
        import time

        self.total, self.description, self.delay, self.enabled = total, description, delay, enabled
        self.started = time.monotonic()
        self._progress: Any = None
        self._task: Any = None
        self.done = 0

    def __call__(self, item: str, stage: str) -> None:
        import time

        if stage in ("done", "published"):
            self.done += 1
        if not self.enabled:
            return
        if self._progress is None and time.monotonic() - self.started >= self.delay:
            from rich.console import Console
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

            counted = [] if self.total is None else [TextColumn("{task.completed}/{task.total}")]
            self._progress = Progress(TextColumn("{task.description}"), BarColumn(), *counted,
                                      TimeElapsedColumn(), console=Console(stderr=True), transient=True)
            self._progress.start()
            self._task = self._progress.add_task(self.description, total=self.total, completed=self.done)
        if self._progress is not None:
            label = f"{self.description} {item}" if self.total is not None else f"{self.description} {item}: {stage}"
            self._progress.update(self._task, completed=self.done, description=label)

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()


def watched_bar(obj: Context, total: int | None, description: str) -> DelayedProgress | None:
    """A :class:`DelayedProgress` when a person watches (the ``merge``, ``table import`` and
    ``index create`` bar): None with --json, or when stdout or stderr is not a terminal."""
    if obj.json or not (sys.stdout.isatty() and sys.stderr.isatty()):
        return None
    return DelayedProgress(total, description)


DIFF_FORMATS = ("table", "json", "jsonl", "csv", "parquet", "lance")


def diff_options(fn):
    """The options ``diff`` and ``show`` share: what to show and where to write it."""
    for opt in reversed([
        click.option("--table", "tables", multiple=True, help="Only this table (repeatable)."),
        click.option("--name-only", is_flag=True, help="Only the names of changed tables."),
        click.option("--limit", type=click.IntRange(min=0, max=MAX_COUNT), default=None,
                     help="At most N rows per table (the first by key)."),
        click.option("--format", "fmt", type=click.Choice(DIFF_FORMATS), default=None,
                     help="Default: from the extension of -o (.parquet, .jsonl, .json, .csv, .lance), else table."),
        click.option("-o", "output", default=None, metavar="PATH",
                     help="Write to PATH; its extension picks the format (text for no extension or .txt). Rows as "
                          "Parquet: one file, or a directory with a file per table; .lance: a dataset per table."),
        click.option("--columns", default=None,
                     help="Value columns to show: all (default), changed (only those that changed), or A,B,..."),
    ]):
        fn = opt(fn)
    return fn


@cli.command("diff")
@click.argument("refs", nargs=-1, required=True, metavar="A [B] [TABLE]...")
@click.option("--stat", is_flag=True, help="One line per table with counts.")
@diff_options
@click.option("--engine", type=click.Choice(["local", "spark", "auto"]), default="auto", show_default=True,
              help="auto: Spark only for tables whose planned rows exceed the threshold.")
@click.option("--spark-master", default=None, metavar="URL", help="Spark master (default: local[*]).")
@click.option("--verbose", is_flag=True, help="Show Spark's own log lines (hidden by default).")
@click.option("--plan", type=click.Choice(["auto", "delta", "fragments", "full"]), default="auto", show_default=True,
              help="Candidate plan to start from (one whose precondition fails falls back to the next exact one).")
@click.option("--verify", is_flag=True, default=None,
              help="Check every table against the brute-force diff (exit 4 on a difference; also TRIMERGE_VERIFY=1).")
@click.option("--where", default=None, metavar="SQL",
              help="Only rows whose before or after values match this SQL filter (as read --where); "
                   "counts count those.")
@common
def diff_cmd(obj: Context, refs, tables, stat, name_only, limit, fmt, output, columns, engine, spark_master,
             verbose, plan, verify, where) -> None:
    """Show what changed: A B (tip vs tip), A..B, or A...B (merge base of A and B vs B); tables
    named after the refs (or with --table) limit it to them, --where to the rows a filter selects
    on either side (a row that left the filter's range shows as an update)."""
    from trimerge.diff import diff as run_diff
    from trimerge.lineage.history.address import is_address, parse_address

    # git and Dolt habits: `diff A..B [TABLE...]`, `diff A B [TABLE...]`.
    refs, named = (refs[:1], refs[1:]) if ".." in refs[0] else (refs[:2], refs[2:])
    tables = tuple(tables) + tuple(named)
    fmt = diff_format(obj, fmt, output, stat, name_only)
    if where is not None:
        from trimerge.diff.where import check_where

        check_where(where)  # one expression, before any ref is resolved or table opened
        if engine == "spark" or spark_master:
            fail("--where runs on the local engine: leave out --engine spark and --spark-master")
    for r in refs:
        repository = parse_address(r).repository if is_address(r) else None
        if repository is not None:
            obj.path = repository
    repo = obj.open(read_only=True)
    spark = None
    if engine == "spark" or spark_master:
        from trimerge.diff.spark import get_spark

        spark = get_spark(spark_master, verbose=verbose)
    d = run_diff(refs[0], refs[1] if len(refs) == 2 else None, repo=repo, tables=list(tables) or None, engine=engine,
                 spark=spark, plan=plan, verify=verify or None, where=where)
    render_diff(obj, repo, d, stat=stat, name_only=name_only, limit=limit, fmt=fmt, output=output, columns=columns)


def diff_format(obj: Context, fmt: str | None, output: str | None, stat: bool, name_only: bool) -> str:
    """The format of a diff's output, refused up front when it cannot be written (exit 2)."""
    from trimerge.lineage.errors import InvalidOperationError
    from trimerge.lineage.storage.outputs import DIRECTORY, EITHER, FILE, check_output

    chosen = output_format(fmt, output, formats=DIFF_FORMATS, default="json" if obj.json else "table", what="diff")
    if chosen == "csv" and not (stat or name_only):
        fail("diff rows nest their before and after values, which CSV cannot hold: write .parquet, .jsonl, .json "
             "or .lance (or use --stat)")
    if output is not None:
        # Rows as Parquet are one file or a directory per table: which one is known once the diff is.
        kind = DIRECTORY if chosen == "lance" else EITHER if chosen == "parquet" and not (stat or name_only) else FILE
        try:
            check_output(output, kind, "-o")
        except InvalidOperationError as exc:
            fail(str(exc))
    return chosen


def render_diff(obj: Context, repo, d, *, stat: bool, name_only: bool, limit: int | None, fmt: str,
                output: str | None, columns: str | None) -> None:
    """Print or write a computed diff as ``diff`` does (``fmt`` from :func:`diff_format`)."""
    import pyarrow as pa

    from trimerge.diff import writers

    spec = (columns or "all").strip()
    cols = None if spec in ("all", "changed") else [c.strip() for c in spec.split(",")]
    if cols:
        known = {c for td in d.tables.values() for part in td.compared_columns() for c in part}
        unknown = [c for c in cols if c not in known]
        if unknown:
            fail(f"--columns: no compared table has column(s) {', '.join(map(repr, unknown))} "
                 f"(columns: {', '.join(sorted(known)) or 'none'})")
    spark_tables = {n for n, td in d.tables.items() if td.engine == "spark"}
    if output and not (stat or name_only) and (fmt == "lance" or (spark_tables and fmt == "parquet")):
        # Spark tables are written by the executors, never collected on the driver.
        changed = {n: td for n, td in d.tables.items() if td.status != "unchanged"}
        for n, td in changed.items():
            target = output if len(changed) == 1 else f"{output.rstrip('/')}/{n}"
            writers.write(td, target, fmt, columns=_shown_columns(td, spec, cols), limit=limit,
                          storage_options=repo.table_store.options)
        emit(obj, {"written": output, "tables": sorted(changed)}, f"wrote {', '.join(sorted(changed))} to {output}")
        return
    if stat or name_only:  # counts are all these print: no changed rows are built
        for td in d.tables.values():
            td.count_first = True
    _count(obj, d, name_only)
    if name_only:
        names = d.changed_tables()
        if fmt in ("table", "json"):
            _write_text(obj, output, "\n".join(names) if fmt == "table" else json.dumps(names), names)
        else:
            print_table(pa.table({"table": pa.array(names, pa.string())}), fmt, output)
        return
    if stat:
        st = d.stat()
        if fmt == "table":
            lines = [f"{r['table']:<20} {r['status']:<9} +{r['inserted']} -{r['deleted']} ~{r['updated']} "
                     f"({r['cells_changed']} cells{': ' + r['columns'] if r['columns'] else ''}"
                     f"{', schema changed' if r['schema_changes'] else ''}"
                     f"{', indices changed' if r['index_changes'] else ''})"
                     for r in st.to_pylist() if r["status"] != "unchanged" or r["index_changes"]]
            _write_text(obj, output, "\n".join(lines), st.to_pylist())
        elif fmt in ("json", "jsonl"):  # the shape of a table in `--json diff`, not the flat columns
            doc = d.stat_json()
            text = json.dumps(doc, indent=2, default=str) if fmt == "json" else "\n".join(
                json.dumps(r, default=str) for r in doc)
            _write_text(obj, output, text, None)
        else:
            print_table(st, fmt, output)
        return
    changed = {n: td for n, td in d.tables.items() if td.status != "unchanged" or td.index_changes}
    if fmt == "parquet":
        assert output is not None  # diff_format refused parquet without -o
        if len(changed) == 1:
            check_output_path(output, "parquet")
            only = next(iter(changed.values()))
            writers.write_parquet(only, output, _shown_columns(only, spec, cols), limit)
        else:
            _parquet_directory(output)
            for n, td in changed.items():
                writers.write_parquet(td, str(Path(output) / f"{n}.parquet"), _shown_columns(td, spec, cols), limit)
        return
    if fmt == "jsonl":
        # Streamed batch by batch: a large diff never sits in memory as Python objects.
        with open(output, "w", encoding="utf-8") if output else contextlib.nullcontext(sys.stdout) as sink:
            for n, td in changed.items():
                writers.write_jsonl(td, sink, n, _shown_columns(td, spec, cols), limit)
        return
    if fmt == "json":
        doc = d.to_json()
        for n, td in changed.items():
            shown = _shown_columns(td, spec, cols)
            rows = td.head(limit, shown) if limit is not None else td.rows("changed" if spec == "changed" else shown)
            doc["tables"][n]["rows"] = rows.to_pylist()
        _write_text(obj, output, json.dumps(doc, indent=2, default=str), None, always=True)
        return
    _write_text(obj, output, "\n".join(_text_parts(changed, limit, spec, cols)) or "no changes", None, always=True)


def _count(obj: Context, d, name_only: bool) -> None:
    """Count every table's changes, with a progress bar on a terminal when it takes a while."""
    progress = DelayedProgress(len(d.tables), "diff", enabled=sys.stderr.isatty() and not obj.json)
    try:
        for name, td in d.tables.items():
            progress(name, "start")
            if td.status != "unchanged" and not name_only:
                td.counts
            progress(name, "done")
    finally:
        progress.close()


def _write_text(obj: Context, output: str | None, text: str, data, always: bool = False) -> None:
    """``text`` to ``output`` (a newline after each line), or to stdout — as JSON ``data`` under
    --json when given; an empty text prints nothing unless ``always``."""
    if output:
        Path(output).write_text(text + "\n" if text else "", encoding="utf-8")
    elif data is not None and obj.json:
        emit(obj, data)
    elif text or always:
        click.echo(text)


def _parquet_directory(output: str) -> None:
    """The directory that receives one Parquet file per table (its parent was checked up front)."""
    try:
        Path(output).mkdir(exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        fail(f"cannot write -o {output}: several tables changed, so it must be a directory, and it is a file")


def _shown_columns(td, spec: str, cols: list[str] | None) -> list[str] | None:
    """The value columns shown of ``td``: ``--columns A,B``, all (None), or with ``changed`` the
    columns its updates changed (counted through column files where it can: a backfill's rows are
    then read as its column only); a table with inserts or deletes shows every column."""
    if spec != "changed":
        return cols
    c = td.counts
    return sorted(c.by_column) if c.updated and not (c.inserted or c.deleted) else None


def text_value(v: Any) -> str:
    """A value in diff text as ``--format jsonl`` writes it (``"2000-01-01 00:00:00"``, ``null``),
    never a Python repr; non-ASCII text as itself."""
    return json.dumps(v, default=str, ensure_ascii=False)


def _text_parts(changed: dict, limit: int | None, spec: str, cols: list[str] | None) -> list[str]:
    """The text rendering: per table a header, schema and index changes, then the first rows."""
    parts = []
    for n, td in changed.items():
        c = td.counts
        parts.append(f"=== {n} ({td.status}: +{c.inserted} -{c.deleted} ~{c.updated})")
        for sc in td.schema_changes:
            parts.append(f"  schema: {sc.kind} {sc.column} {sc.before or ''} -> {sc.after or ''}")
        for ic in td.index_changes:
            parts.append(f"  index: {ic['change']} {ic['index']} ({ic['kind']} on {', '.join(ic['columns'])})")
        shown = td.head(50 if limit is None else limit, _shown_columns(td, spec, cols))
        for r in shown.to_pylist():
            keyv = ", ".join(f"{k}={text_value(r[k])}" for k in td.primary_key)
            if r["change"] == "update":
                before, after = r.get("before") or {}, r.get("after") or {}
                cells = "; ".join(f"{col}: {text_value(before.get(col))} -> {text_value(after.get(col))}"
                                  for col in r["changed_columns"] if col in after)
                parts.append(f"  ~ {keyv}: {cells}")
            else:
                parts.append(f"  {'+' if r['change'] == 'insert' else '-'} {keyv}")
        if shown.num_rows < c.rows_changed:
            parts.append(f"  ... {c.rows_changed - shown.num_rows} more rows (use --limit or --format)")
    return parts
