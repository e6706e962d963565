"""A table diff's rows with only the columns that changed (``TableDiff.rows(columns="changed")``).

A backfill or a re-embedding changes one column of every row. Its full rows cost both sides' whole
tables; its changed columns cost what the column costs. Where the fragment plan compared column
files (:meth:`TableDiff.rows_through_columns`), those rows are read with the pair's columns only,
and the other changed rows whole; every part is then cut to the columns that changed in some row.

``rows(columns="all")`` of such a diff (:func:`rows_through_pairs`) needs every changed row whole,
but not the keyed join of both sides: a pair row's kind and changed columns are known from the
narrow read (a column not read is held by the same files on both sides, so it is equal), and its
images are the rows with its two stable row ids. Both sides' images are read once (one scan each
when the rows are a large share of the table) and set beside the narrow rows by row id — in place
when they come in the same order (a backfill: every row, in row-id order). Nothing spills: the
caller holds every row anyway, and building them holds no more than the rows themselves.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from trimerge.diff import columns as column_pairs
from trimerge.diff.reads import ROWID, take_all
from trimerge.diff.rules import AFTER_ROWID, BEFORE_ROWID, project_rows
from trimerge.diff.spill import ChangedRows, ordered_map
from trimerge.lineage.tables import arrowtypes

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


def rows_through_pairs(td: "TableDiff") -> ChangedRows | None:
    """Every changed row of ``td`` whole (as :meth:`TableDiff.rows_with_row_ids`), in memory, with
    the rows of column pairs completed by stable row id rather than joined by key (see the module
    docstring); None when the plan has no column pairs (or they do not hold)."""
    if td.within_keys is not None:
        return None
    split = td.rows_through_columns()
    if split is None:
        return None
    narrow, rest = split
    target = td.rows_with_row_ids_schema()
    parts = [completed(td, t, target) for t in narrow if t.num_rows]
    parts.append(rest.materialize(td.primary_key).cast(target))
    out = pa.concat_tables(parts)
    return ChangedRows.in_memory(sorted_by_key(out, list(td.primary_key)) if len(parts) > 1 else out)


def completed(td: "TableDiff", narrow: pa.Table, target: pa.Schema) -> pa.Table:
    """The update rows ``narrow`` (one column pair's, in key order) with both sides' full images
    in ``target``'s schema: images read by row id and set beside them by position."""
    ids = column_pairs.row_ids(narrow)

    def read(request: tuple) -> list[pa.Table]:
        return [t for _, t in take_all([request])]

    # Both sides side by side (Lance lets go of the GIL): ~10% off a backfill's two scans.
    images = list(ordered_map(read, [(td.before_snapshot, ids[0]), (td.after_snapshot, ids[1])], workers=2))
    key = list(td.primary_key)
    structs = []
    for side, name, wanted in ((0, "before", ids[0]), (1, "after", ids[1])):
        if not images[side]:
            return td.complete(narrow).cast(target)  # the keyed way: values decide
        rows = pa.concat_tables(images[side])
        at = positions(rows.column(ROWID), wanted)
        struct_type = target.field(name).type
        if at is None or not _same_types(rows.schema, struct_type) or len(wanted) != narrow.num_rows:
            return td.complete(narrow).cast(target)
        if not np.array_equal(at, np.arange(rows.num_rows)):
            rows = rows.take(pa.array(at))
        if not all(rows.column(k).equals(narrow.column(k)) for k in key if rows.schema.field(k).type ==
                   narrow.schema.field(k).type):
            return td.complete(narrow).cast(target)
        structs.append(pa.chunked_array([pa.StructArray.from_arrays([b.column(f.name) for f in struct_type],
                                                                    fields=list(struct_type))
                                         for b in rows.to_batches()], struct_type))
    columns = {f.name: narrow.column(f.name).cast(f.type) for f in target if f.name not in ("before", "after")}
    columns.update(before=structs[0], after=structs[1])
    return pa.Table.from_arrays([columns[f.name] for f in target], schema=target)


def positions(have: pa.ChunkedArray, wanted: pa.Array) -> np.ndarray | None:
    """Where each id of ``wanted`` is in ``have`` (ids, unique); None if one is missing."""
    have_ids = have.to_numpy()
    wanted_ids = wanted.to_numpy(zero_copy_only=False)
    if len(have_ids) == len(wanted_ids) and np.array_equal(have_ids, wanted_ids):
        return np.arange(len(have_ids))
    order = np.argsort(have_ids, kind="stable")
    ordered = have_ids[order]
    at = np.searchsorted(ordered, wanted_ids)
    if len(ordered) == 0 or (at >= len(ordered)).any():
        return None if len(wanted_ids) else np.zeros(0, dtype=np.int64)
    if not np.array_equal(ordered[at], wanted_ids):
        return None
    return order[at]


def _same_types(images: pa.Schema, struct_type: pa.DataType) -> bool:
    """Whether the images hold each field of ``struct_type`` in its very type (else the keyed
    classification converts them)."""
    if not pa.types.is_struct(struct_type):  # e.g. a side whose image is all null-typed
        return False
    names = set(images.names)
    return all(f.name in names and images.field(f.name).type == f.type for f in struct_type)


def sorted_by_key(table: pa.Table, key: list[str]) -> pa.Table:
    """``table`` in key order as the classification sorts (polars: nulls first); untouched when it
    is in that order already (the costly part, moving whole images, is then skipped)."""
    frame = arrowtypes.to_polars(table.select(key))
    order = frame.select(pl.arg_sort_by(key).alias("at"))["at"].to_numpy()
    if np.array_equal(order, np.arange(len(order))):
        return table
    return table.take(pa.array(order))
