"""The diff command."""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path

import click

from trimerge.cli.app import (
    MAX_COUNT,
    Context,
    cli,
    common,
    emit,
    fail,
    print_table,
)


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
@click.option("--verbose", is_flag=True, help="Show Spark's own log lines (hidden by default).")
@click.option("--plan", type=click.Choice(["auto", "delta", "fragments", "full"]), default="auto", show_default=True,
              help="Candidate plan to start from (one whose precondition fails falls back to the next exact one).")
@click.option("--verify", is_flag=True, default=None,
              help="Check every table against the brute-force diff (exit 4 on a difference; also TRIMERGE_VERIFY=1).")
@common
def diff_cmd(obj: Context, refs, tables, stat, name_only, limit, fmt, output, columns, engine, spark_master,
             verbose, plan, verify) -> None:
    """Show what changed: A B (tip vs tip), A..B, or A...B (merge base of A and B vs B)."""
    import sys as _sys

    from trimerge.diff import diff as run_diff
    from trimerge.diff import writers
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

        spark = get_spark(spark_master, verbose=verbose)
    d = run_diff(refs[0], refs[1] if len(refs) == 2 else None, repo=repo, tables=list(tables) or None, engine=engine,
                 spark=spark, plan=plan, verify=verify or None)
    spark_tables = {n for n, td in d.tables.items() if td.engine == "spark"}
    lance_out = bool(output) and output.rstrip("/").endswith(".lance")
    if output and (lance_out or (spark_tables and fmt in (None, "parquet"))) and not (stat or name_only):
        # Spark tables are written by the executors, never collected on the driver.
        changed = {n: td for n, td in d.tables.items() if td.status != "unchanged"}
        for n, td in changed.items():
            target = output if len(changed) == 1 else f"{output.rstrip('/')}/{n}"
            writers.write(td, target, "lance" if lance_out else "parquet", storage_options=repo.table_store.options)
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
                     f"({r['cells_changed']} cells{', schema changed' if r['schema_changes'] else ''}"
                     f"{', indices changed' if r['index_changes'] else ''})"
                     for r in st.to_pylist() if r["status"] != "unchanged" or r["index_changes"]]
            if output:
                Path(output).write_text("".join(f"{line}\n" for line in lines))
            elif lines:
                click.echo("\n".join(lines))
        elif fmt == "json" or obj.json:
            text = json.dumps(st.to_pylist(), indent=2, default=str)
            Path(output).write_text(text + "\n") if output else click.echo(text)
        else:
            print_table(st, fmt, output)
        return
    changed = {n: td for n, td in d.tables.items() if td.status != "unchanged" or td.index_changes}
    if fmt == "parquet":
        if not output:
            fail("--format parquet needs -o FILE")
        if len(changed) == 1:
            writers.write_parquet(next(iter(changed.values())), output, cols, limit)
        else:
            Path(output).mkdir(parents=True, exist_ok=True)
            for n, td in changed.items():
                writers.write_parquet(td, str(Path(output) / f"{n}.parquet"), cols, limit)
        return
    if fmt == "jsonl":
        # Streamed batch by batch: a large diff never sits in memory as Python objects.
        with open(output, "w") if output else contextlib.nullcontext(sys.stdout) as sink:
            for n, td in changed.items():
                writers.write_jsonl(td, sink, n, cols, limit)
        return
    if fmt == "json":
        doc = d.to_json()
        for n, td in changed.items():
            rows = td.head(limit, cols) if limit is not None else td.rows(cols)
            doc["tables"][n]["rows"] = rows.to_pylist()
        text = json.dumps(doc, indent=2, default=str)
    else:
        parts = []
        for n, td in changed.items():
            c = td.counts
            parts.append(f"=== {n} ({td.status}: +{c.inserted} -{c.deleted} ~{c.updated})")
            for sc in td.schema_changes:
                parts.append(f"  schema: {sc.kind} {sc.column} {sc.before or ''} -> {sc.after or ''}")
            for ic in td.index_changes:
                parts.append(f"  index: {ic['change']} {ic['index']} ({ic['kind']} on {', '.join(ic['columns'])})")
            shown = td.head(50 if limit is None else limit, cols)
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
