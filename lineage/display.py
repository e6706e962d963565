"""Short reprs and notebook HTML for the API's result objects.

Every ``repr`` here is bounded (:data:`MAX_REPR` characters, whatever the size of the diff or the
number of conflicts): counts and ids, never values by the thousand. ``_repr_html_`` renders a table
of at most :data:`MAX_HTML_ROWS` rows and says how many more there are. The functions are
duck-typed (they take a Commit, Diff, TableDiff, MergeResult or Conflict) so that this module
imports none of them.
"""

from __future__ import annotations

from collections import Counter
from html import escape
from typing import Any, Iterable, Sequence

__all__ = ["HTML_DIFF_ROWS", "HTML_DIFF_TABLES", "MAX_HTML_ROWS", "MAX_REPR", "change_text", "commit_repr",
           "conflict_html", "conflict_repr", "conflicts_html", "diff_html", "diff_repr", "merge_result_html",
           "merge_result_repr", "merge_conflict_lines", "table_diff_html", "table_diff_repr"]

#: Upper bound of every repr of this module.
MAX_REPR = 400
#: Rows an HTML table shows before "... N more".
MAX_HTML_ROWS = 50
#: Changed rows of one table a diff's HTML shows, and how many changed tables get theirs.
HTML_DIFF_ROWS = 20
HTML_DIFF_TABLES = 5


def cut(text: str, width: int) -> str:
    """``text`` on one line, at most ``width`` characters (``…`` where cut)."""
    text = " ".join(str(text).split())
    return text if len(text) <= width else text[:max(width - 1, 0)] + "…"


def _bounded(text: str) -> str:
    if len(text) <= MAX_REPR:
        return text
    return text[:MAX_REPR - 2] + "…)"


def commit_repr(c: Any) -> str:
    """``Commit(1a2b3c4d5e on main by alice 2026-…: 'fix names', 2 parents, 5 tables)``."""
    when = c.created_at.strftime("%Y-%m-%d %H:%M:%S") if hasattr(c.created_at, "strftime") else c.created_at
    return _bounded(f"Commit({c.id[:10]} on {cut(c.branch, 40)} by {cut(c.actor, 40)} {when}: "
                    f"{cut(c.message, 80)!r}, {len(c.parents)} parent(s), {len(c.tables)} table(s))")


def _counts_text(td: Any) -> str:
    if td.storage_status == "unchanged":
        return "unchanged"
    c = td.counts
    text = f"{td.status} +{c.inserted} -{c.deleted} ~{c.updated}"
    if td.schema_changes:
        text += f" schema {len(td.schema_changes)}"
    return text


def table_diff_repr(td: Any) -> str:
    """``TableDiff('airlines': modified +1 -0 ~2, 3 cells)``."""
    extra = ""
    if td.storage_status != "unchanged":
        extra = f", {td.counts.cells_changed} cell(s)"
    return _bounded(f"TableDiff({cut(td.name, 60)!r}: {_counts_text(td)}{extra})")


def _range(d: Any) -> str:
    return f"{d.before.id[:10]}{'...' if d.three_dot else '..'}{d.after.id[:10]}"


def diff_repr(d: Any) -> str:
    """``Diff(1a2b..3c4d: 2 of 5 table(s) changed: airlines modified +1 -0 ~2, ...)``."""
    changed = d.changed_tables()
    shown = ", ".join(f"{cut(n, 30)} {_counts_text(d.tables[n])}" for n in changed[:4])
    more = f", … {len(changed) - 4} more" if len(changed) > 4 else ""
    return _bounded(f"Diff({_range(d)}: {len(changed)} of {len(d.tables)} table(s) changed"
                    f"{': ' + shown + more if changed else ''})")


def conflict_repr(c: Any) -> str:
    """``Conflict(row.update_update in products[sku='B2'] columns price)``: no values."""
    where = cut(c.table, 40)
    if c.key:
        where += "[" + cut(", ".join(f"{k}={v!r}" for k, v in c.key.items()), 80) + "]"
    cols = f" columns {cut(', '.join(c.columns), 80)}" if c.columns else ""
    return _bounded(f"Conflict({c.kind} in {where}{cols})")


def merge_result_repr(r: Any) -> str:
    """``MergeResult(conflicts: 'spring' into 'main', 20000 conflict(s) (row.update_update 20000), ...)``."""
    head = f"MergeResult({r.status}{' (dry run)' if r.dry_run else ''}: {cut(r.source_ref, 40)!r} into " \
           f"{cut(r.dest_ref, 40)!r}"
    if r.commit is not None:
        head += f", commit {r.commit.id[:10]}"
    total = r.conflicts_total
    if total:
        kinds = Counter(c.kind for c in r.conflicts).most_common(3)
        head += f", {total} conflict(s)"
        if kinds:
            head += " (" + ", ".join(f"{k} {n}" for k, n in kinds) + ")"
    touched = [(n, s.action) for n, s in sorted(r.stats.items()) if s.action != "unchanged"]
    if touched:
        head += ", tables: " + ", ".join(f"{cut(n, 30)} {a}" for n, a in touched[:4])
        head += f", … {len(touched) - 4} more" if len(touched) > 4 else ""
    return _bounded(head + ")")


def html_table(columns: Sequence[str], rows: Iterable[Sequence[Any]], total: int | None = None,
               caption: str = "") -> str:
    """An HTML table of at most :data:`MAX_HTML_ROWS` rows (``total``: how many there are in all)."""
    out = ["<table>"]
    if caption:
        out.append(f"<caption>{escape(caption)}</caption>")
    out.append("<tr>" + "".join(f"<th>{escape(str(c))}</th>" for c in columns) + "</tr>")
    n = 0
    for row in rows:
        if n == MAX_HTML_ROWS:
            break
        out.append("<tr>" + "".join(f"<td>{escape(cut(str(v), 120))}</td>" for v in row) + "</tr>")
        n += 1
    out.append("</table>")
    if total is not None and total > n:
        out.append(f"<p>… {total - n} more</p>")
    return "".join(out)


def diff_html(d: Any) -> str:
    """One row per table (status and counts), then the first changed rows of the first changed tables."""
    stat = d.stat().to_pylist()
    columns = ["table", "status", "inserted", "deleted", "updated", "cells_changed", "schema_changes"]
    summary = html_table(columns, ([row[c] for c in columns] for row in stat), len(stat),
                         caption=f"diff {_range(d)}")
    changed = d.changed_tables()
    tables = "".join(table_diff_html(d.tables[n]) for n in changed[:HTML_DIFF_TABLES])
    more = f"<p>… {len(changed) - HTML_DIFF_TABLES} more changed table(s)</p>" if len(changed) > HTML_DIFF_TABLES else ""
    return summary + tables + more


def change_text(row: dict[str, Any]) -> str:
    """A changed row's cells as a person reads them: ``price: 1.0 → 1.5`` for an update, the
    values with ``+`` / ``-`` for an insert / delete."""
    before, after = row.get("before") or {}, row.get("after") or {}
    if row["change"] == "update":
        return "; ".join(f"{c}: {before.get(c)!r} → {after.get(c)!r}" for c in row["changed_columns"])
    sign, values = ("+", after) if row["change"] == "insert" else ("-", before)
    return sign + " " + ", ".join(f"{c}={v!r}" for c, v in values.items())


def table_diff_html(td: Any) -> str:
    """A table diff's counts, then its first :data:`HTML_DIFF_ROWS` changed rows by key, each
    with its changed cells as before → after."""
    caption = f"{td.name}: {_counts_text(td)}"
    if td.storage_status == "unchanged" or not td.changed:
        return html_table(["table", "status"], [[td.name, td.status]], caption=caption)
    key = list(td.primary_key)
    rows = td.head(HTML_DIFF_ROWS).to_pylist()
    return html_table([*key, "change", "cells"], ([*(r[k] for k in key), r["change"], change_text(r)] for r in rows),
                      td.counts.rows_changed, caption=caption)


def merge_conflict_lines(error: Any, shown: int = 10) -> list[str]:
    """What a notebook shows for a merge that raised on conflicts (``MergeConflictError``), in
    place of a traceback: the error's line, the result's repr, the first ``shown`` conflicts with
    their values (cut), and how to go on."""
    r = error.result
    lines = [f"{type(error).__name__}: {error}", "", merge_result_repr(r)]
    for c in r.conflicts[:shown]:
        lines.append(f"  CONFLICT {cut(c.describe(), 200)}")
        lines += [f"      {cut(line, 200)}" for line in c.value_lines()]
    if r.conflicts_total > min(shown, len(r.conflicts)):
        lines.append(f"  … {r.conflicts_total - min(shown, len(r.conflicts))} more (in the error's "
                     ".result.conflicts_polars())")
    lines += ["", "next: settle them all with merge(..., strategy='source-wins' | 'dest-wins'), or one by one "
                  "with resolutions= (the error's .result.conflicts_polars(); merge(..., dry_run=True) returns "
                  "that result without raising)"]
    return lines


def _conflict_row(c: Any) -> list[Any]:
    key = ", ".join(f"{k}={v!r}" for k, v in (c.key or {}).items())
    return [c.kind, c.table, key, ", ".join(c.columns), "; ".join(c.value_lines(30)) or c.message]


CONFLICT_COLUMNS = ["kind", "table", "key", "columns", "base / dest (ours) / source (theirs)"]


def conflicts_html(conflicts: Sequence[Any], total: int | None = None) -> str:
    """A table of conflicts (first :data:`MAX_HTML_ROWS`)."""
    return html_table(CONFLICT_COLUMNS, (_conflict_row(c) for c in conflicts),
                      len(conflicts) if total is None else total, caption="conflicts")


def conflict_html(c: Any) -> str:
    """One conflict as a one-row table."""
    return html_table(CONFLICT_COLUMNS, [_conflict_row(c)])


def merge_result_html(r: Any) -> str:
    """Status line, per-table statistics and the first conflicts."""
    head = f"<p><b>{escape(r.status)}</b>{' (dry run)' if r.dry_run else ''}: {escape(r.source_ref)} into " \
           f"{escape(r.dest_ref)}{', commit ' + escape(r.commit.id[:10]) if r.commit is not None else ''}</p>"
    stats = sorted(r.stats.items())
    columns = ["table", "action", "rows_from_source", "converged", "cells_merged", "conflicts", "resolved"]
    table = html_table(columns, ([n] + [getattr(s, c) for c in columns[1:]] for n, s in stats), len(stats),
                       caption="tables")
    conflicts = conflicts_html(r.conflicts, r.conflicts_total) if r.conflicts_total else ""
    return head + table + conflicts
