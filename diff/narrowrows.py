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
from trimerge.diff.spill import ChangedRows
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
    return sorted_by_key(out, list(td.primary_key)) if out.num_rows else out  # column pairs: in row order


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
    """The update rows ``narrow`` (one column pair's) with both sides' full images in ``target``'s
    schema. Only the after side is read (by row id, set beside the rows by position): a column the
    pair did not read is held by the same files on both sides, so its before value is its after
    value, and the columns it read carry their before values in ``narrow`` already."""
    ids = column_pairs.row_ids(narrow)
    key = list(td.primary_key)
    images = [t for _, t in take_all([(td.after_snapshot, ids[1])])]
    before_type, after_type = target.field("before").type, target.field("after").type
    if not images or len(ids[1]) != narrow.num_rows or not pa.types.is_struct(before_type):
        return td.complete(narrow).cast(target)  # the keyed way: values decide
    rows = pa.concat_tables(images)
    at = positions(rows.column(ROWID), ids[1])
    if at is None or not _same_types(rows.schema, after_type):
        return td.complete(narrow).cast(target)
    if not np.array_equal(at, np.arange(rows.num_rows)):
        rows = rows.take(pa.array(at))
    if not all(rows.column(k).equals(narrow.column(k)) for k in key if rows.schema.field(k).type ==
               narrow.schema.field(k).type):
        return td.complete(narrow).cast(target)
    read_before = narrow.column("before")
    read_type = read_before.type if pa.types.is_struct(read_before.type) else pa.struct([])
    before_fields = []
    for f in before_type:
        if read_type.get_field_index(f.name) >= 0:
            column = pc.struct_field(read_before, [read_type.get_field_index(f.name)])
        elif f.name in rows.column_names:
            column = rows.column(f.name)  # not read by the pair: the same files on both sides
        else:  # a column only the before side has: read it the keyed way
            return td.complete(narrow).cast(target)
        if column.type != f.type:
            return td.complete(narrow).cast(target)
        before_fields.append(column)
    lengths = [b.num_rows for b in rows.to_batches()]
    structs = [_struct([rows.column(f.name) for f in after_type], after_type, lengths),
               _struct(before_fields, before_type, lengths)]
    columns = {f.name: narrow.column(f.name).cast(f.type) for f in target if f.name not in ("before", "after")}
    columns.update(after=structs[0], before=structs[1])
    return pa.Table.from_arrays([columns[f.name] for f in target], schema=target)


def _struct(columns: list[pa.ChunkedArray], struct_type: pa.DataType, lengths: list[int]) -> pa.ChunkedArray:
    """A struct column (no nulls) of ``columns`` — one per field of ``struct_type`` — in chunks of
    ``lengths`` rows: the image's own chunks stay where they are (no copy); a column chunked
    otherwise (the pair's narrow read) is cut to match."""
    aligned = []
    for c in columns:
        if [len(chunk) for chunk in c.chunks] == lengths:
            aligned.append(c.chunks)
            continue
        whole = c.combine_chunks()
        starts = np.cumsum([0, *lengths[:-1]])
        aligned.append([whole.slice(int(start), n) for start, n in zip(starts, lengths)])
    chunks = [pa.StructArray.from_arrays([parts[i] for parts in aligned], fields=list(struct_type))
              for i in range(len(lengths))]
    return pa.chunked_array(chunks, struct_type)


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
    if len(key) == 1 and frame[key[0]].null_count() == 0 and frame[key[0]].is_sorted():
        return table  # one pass, not a sort: a backfill's rows come in key order
    order = frame.select(pl.arg_sort_by(key).alias("at"))["at"].to_numpy()
    if np.array_equal(order, np.arange(len(order))):
        return table
    return table.take(pa.array(order))
