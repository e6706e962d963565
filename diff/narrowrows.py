"""A table diff's rows with only the columns that changed (``TableDiff.rows(columns="changed")``).

A backfill or a re-embedding changes one column of every row. Its full rows cost both sides' whole
tables; its changed columns cost what the column costs. Where the fragment plan compared column
files (:meth:`TableDiff.rows_through_columns`), those rows are read with the pair's columns only,
and the other changed rows whole; every part is then cut to the columns that changed in some row.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from trimerge.diff.rules import AFTER_ROWID, BEFORE_ROWID, project_rows

if TYPE_CHECKING:
    from trimerge.diff.engine import TableDiff

_ROW_IDS = [BEFORE_ROWID, AFTER_ROWID]


def changed_names(parts: list[pa.Table], every: list[str]) -> list[str]:
    """The value columns named in some row's ``changed_columns`` (of ``every``, in its order); all
    of them when a row was inserted or deleted (each of its values is a change)."""
    seen: set[str] = set()
    for part in parts:
        if not part.num_rows:
            continue
        if pc.any(pc.is_in(part.column("change"), pa.array(["insert", "delete"]))).as_py():
            return every
        seen.update(pc.unique(pc.list_flatten(part.column("changed_columns"))).to_pylist())
    return [c for c in every if c in seen]


def rows_of_changed_columns(td: "TableDiff") -> pa.Table:
    """``td``'s rows (as :meth:`TableDiff.rows`) whose ``before`` / ``after`` hold only the columns
    that changed in some row; a column unchanged in a row read through column files is null there."""
    key, common, added = td.compared_columns()
    every = [c for c in [*common, *added] if c not in key]
    split = td.rows_through_columns()
    if split is None:
        rows = td.rows()
        return project_rows(rows, changed_names([rows], every))
    narrow, rest = split
    parts = [t.drop_columns([c for c in _ROW_IDS if c in t.column_names]) for t in narrow]
    parts.append(rest.materialize(td.primary_key).drop_columns(_ROW_IDS))
    names = changed_names(parts, every)
    target = project_rows(td.rows_with_row_ids_schema().empty_table().drop_columns(_ROW_IDS), names).schema
    projected = [project_rows(p, names) for p in parts]
    out = pa.concat_tables(projected + [target.empty_table()], promote_options="permissive")
    out = out.select(target.names).cast(target)
    return out.sort_by([(k, "ascending") for k in td.primary_key]) if out.num_rows else out


def changes_fill_candidates(td: "TableDiff") -> bool:
    """Whether at least half of ``td``'s candidate rows are known, from its column files, to be
    changes (a backfill): then building its rows in memory needs no more than the rows themselves."""
    plan = td.candidate_plan
    if not plan.column_pairs or td.within_keys is not None or td.storage_status != "modified":
        return False
    return 2 * td.counts.rows_changed >= plan.estimated_rows
