"""Column-level writes: change some columns of existing rows by writing only those columns.

Lance's data evolution stores a fragment's columns in one or more data files. A write that changes
a few columns of many rows of a fragment can add one new data file holding just those columns for
the fragment (``LanceFragment.update_columns``: the old file's copy of them is masked), instead of
deleting the rows and writing them whole elsewhere. Which is cheaper depends on the fragment:

* column write: every physical row of the fragment, but only the changed columns
  (``physical_rows × bytes per row of the changed columns``);
* row rewrite: only the touched rows, but every column (``touched rows × bytes per stored row``,
  the stored row size taken from the fragment's data-file sizes).

A fragment already spread over ``MAX_DATA_FILES`` data files gets row rewrites (compaction
rewrites it whole in time).

:func:`plan_column_update` picks the cheaper one per fragment; :func:`write_columns` writes the
column part and :func:`commit_columns` commits it as one Lance ``Update`` in ``rewrite_columns``
mode with the physical offsets of the rows it changed, so Lance refreshes exactly those rows'
``_row_last_updated_at_version`` (without the offsets, pylance 14 leaves row versions as they were
and ``delta()`` would not see the write): a column write is a row-level write like any other, and
the diff's delta plan stays exact across it.

:func:`prepare_update` and :func:`prepare_fill` check an update's or a filled column's input and
plan it before any effect; the transaction then writes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np
import pyarrow as pa

from trimerge.lineage.errors import PrimaryKeyError, SchemaMismatchError

if TYPE_CHECKING:
    import lance

#: How an update writes: ``auto`` (per fragment, whichever writes less), ``columns`` (column files
#: only) or ``rows`` (rows rewritten whole). ``TRIMERGE_COLUMN_WRITES`` sets what ``auto`` means
#: (tests force each path to compare them).
WRITE_CHOICES = ("auto", "columns", "rows")
COLUMN_WRITES_ENV = "TRIMERGE_COLUMN_WRITES"
#: Above this share of the table's rows, keys are located by one scan of the key columns rather
#: than a filter per key.
SCAN_SHARE = 0.05
#: A fragment whose columns are spread over this many data files already is not given another
#: (every read of it opens each file): its touched rows are rewritten instead.
MAX_DATA_FILES = 16


def column_write_mode(write: str = "auto") -> str:
    """The write choice in force: ``write`` if given other than ``auto``, else the environment's."""
    if write not in WRITE_CHOICES:
        from trimerge.lineage.errors import InvalidOperationError

        raise InvalidOperationError(f"write={write!r}: choose one of {', '.join(WRITE_CHOICES)}")
    if write != "auto":
        return write
    import os

    mode = os.environ.get(COLUMN_WRITES_ENV, "auto").strip().lower() or "auto"
    return mode if mode in WRITE_CHOICES else "auto"


@dataclass
class ColumnUpdate:
    """How an update splits: ``by_fragment`` maps fragment id -> positions (in the input) of the
    rows whose changed columns are written as column files; ``row_positions`` are the input rows
    left to the row-rewrite path. ``row_ids`` are the stable row ids of the input rows."""

    row_ids: np.ndarray
    addresses: np.ndarray
    by_fragment: dict[int, np.ndarray] = field(default_factory=dict)
    row_positions: np.ndarray = field(default_factory=lambda: np.array([], np.int64))

    @property
    def column_rows(self) -> int:
        return int(sum(len(p) for p in self.by_fragment.values()))


def locate(ds: "lance.LanceDataset", keys: pa.Table, primary_key: Sequence[str], what: str) -> pa.Table:
    """For each row of ``keys`` (in order): ``_rowid`` and ``_rowaddr`` of the stored row with that
    key. Keys that are not stored raise :class:`PrimaryKeyError` naming how many and a few of them.
    Reads the key columns only: by filter for few keys, by one scan of the key columns for many."""
    import polars as pl

    pk = list(primary_key)
    stored_rows = ds.count_rows()
    if keys.num_rows <= SCAN_SHARE * stored_rows:
        from trimerge.lineage.tables.conversion import rows_with_keys

        found = rows_with_keys(ds, keys.select(pk), columns=pk, with_row_id=True, with_row_address=True)
    else:
        found = ds.to_table(columns=pk, with_row_id=True, with_row_address=True)
    wanted = pl.from_arrow(keys.select(pk)).with_row_index("\x01pos")
    stored = pl.from_arrow(found.select(pk + ["_rowid", "_rowaddr"]))
    joined = wanted.join(stored, on=pk, how="left", nulls_equal=True).sort("\x01pos")
    missing = joined.filter(pl.col("_rowid").is_null())
    if missing.height:
        shown = ", ".join(str(tuple(r) if len(pk) > 1 else r[0]) for r in missing.select(pk).head(5).rows())
        raise PrimaryKeyError(f"{what}: {missing.height} key(s) do not exist (e.g. {shown}); use upsert to insert rows")
    return joined.select(["_rowid", "_rowaddr"]).to_arrow()


def stored_row_bytes(fragment: "lance.LanceFragment") -> float:
    """Bytes per physical row of a fragment's data files (its stored row width)."""
    meta = fragment.metadata
    size = sum(int(d.file_size_bytes or 0) for d in meta.files)
    return size / max(1, meta.physical_rows)


def plan_column_update(ds: "lance.LanceDataset", rows: pa.Table, primary_key: Sequence[str], what: str,
                       mode: str | None = None) -> ColumnUpdate:
    """Split an update of ``rows`` (key + the changed columns, one row per key, every key stored)
    between column files and row rewrites, fragment by fragment, by the cost rule of the module."""
    mode = column_write_mode(mode or "auto")
    located = locate(ds, rows, primary_key, what)
    ids = located.column("_rowid").to_numpy()
    addresses = located.column("_rowaddr").to_numpy().astype(np.uint64)
    plan = ColumnUpdate(row_ids=ids, addresses=addresses)
    if mode == "rows" or not rows.num_rows:
        plan.row_positions = np.arange(rows.num_rows)
        return plan
    changed = [c for c in rows.column_names if c not in primary_key]
    column_bytes = rows.select(changed).nbytes / max(1, rows.num_rows)
    fragments = (addresses >> np.uint64(32)).astype(np.int64)
    order = np.argsort(fragments, kind="stable")
    bounds = np.flatnonzero(np.diff(fragments[order])) + 1
    rest = []
    for positions in np.split(order, bounds):
        frag = ds.get_fragment(int(fragments[positions[0]]))
        physical = frag.metadata.physical_rows
        by_columns = physical * column_bytes
        by_rows = len(positions) * stored_row_bytes(frag)
        if mode == "columns" or (by_columns <= by_rows and len(frag.metadata.files) < MAX_DATA_FILES):
            plan.by_fragment[int(fragments[positions[0]])] = positions
        else:
            rest.append(positions)
    plan.row_positions = np.sort(np.concatenate(rest)) if rest else np.array([], np.int64)
    return plan


def write_columns(ds: "lance.LanceDataset", rows: pa.Table, plan: ColumnUpdate,
                  primary_key: Sequence[str]) -> "lance.LanceDataset":
    """Write the column part of ``plan`` (one new data file per fragment holding the changed
    columns) and commit it as one Lance ``Update``; returns the dataset at the new version."""
    from lance import LanceDataset, LanceOperation
    from pyroaring import BitMap

    changed = [c for c in rows.column_names if c not in primary_key]
    updated, fields, offsets = [], set(), {}
    for fragment_id, positions in sorted(plan.by_fragment.items()):
        take = pa.array(positions)
        part = rows.select(changed).take(take)
        part = part.add_column(0, "_rowid", pa.array(plan.row_ids[positions], pa.uint64()))
        meta, modified = ds.get_fragment(fragment_id).update_columns(part)
        updated.append(meta)
        fields.update(int(f) for f in modified)
        rows_at = (plan.addresses[positions] & np.uint64(0xFFFFFFFF)).astype(np.uint32)
        offsets[fragment_id] = BitMap(rows_at.tolist()).serialize()
    if not updated:
        return ds
    op = LanceOperation.Update(updated_fragments=updated, fields_modified=sorted(fields),
                               update_mode="rewrite_columns", updated_fragment_offsets=offsets)
    return LanceDataset.commit(ds, op, read_version=ds.version)


def prepare_update(stored: "lance.LanceDataset", data: Any, primary_key: Sequence[str], table: str,
                   write: str = "auto") -> tuple[pa.Table, ColumnUpdate | None]:
    """An update's input checked against the stored table (columns, key, every key stored) and
    split between column files and row rewrites; nothing is written. (input, None) when it has
    no rows."""
    from trimerge.lineage.tables import conversion as tbl

    column_write_mode(write)
    what = f"update {table}"
    rows = tbl.to_arrow(data)
    pk = list(primary_key)
    tbl.check_primary_key(rows, pk, what)
    schema = stored.schema
    unknown = [c for c in rows.column_names if c not in schema.names]
    if unknown:
        raise SchemaMismatchError(f"{what}: no column(s) {unknown} (columns: {schema.names})")
    if not [c for c in rows.column_names if c not in pk]:
        raise SchemaMismatchError(f"{what}: give at least one column to change besides the key {pk}")
    if not rows.num_rows:
        return rows, None
    rows = tbl.conform(rows, pa.schema([schema.field(c) for c in rows.column_names]), what)
    return rows, plan_column_update(stored, rows, pk, what, write)


def rows_with_changes(head: "lance.LanceDataset", ids: pa.Array, changes: pa.Table) -> pa.Table:
    """The stored rows ``ids`` (in that order) with the columns of ``changes`` put in: the
    whole-row half of an update."""
    columns = head.schema.names
    current = pa.concat_tables([head._take_rows(ids.slice(i, 1 << 16), columns=columns)
                                for i in range(0, len(ids), 1 << 16)])
    return pa.table([changes.column(c) if c in changes.column_names else current.column(c) for c in columns],
                    schema=head.schema)


def prepare_fill(stored: "lance.LanceDataset", fields: Any, primary_key: Sequence[str],
                 table: str) -> tuple[list[pa.Field], pa.Table | None, ColumnUpdate | None]:
    """What ``add_columns`` adds: (the new fields, the filled values or None, their column-write
    plan or None), checked before any effect. ``fields``: pyarrow fields, or a table of key +
    new columns (every key stored, once)."""
    from trimerge.lineage.tables import conversion as tbl

    pk = list(primary_key)
    data = None
    if not isinstance(fields, (pa.Field, pa.Schema, list, tuple)):
        data = tbl.to_arrow(fields)
        what = f"add columns to {table}"
        absent = [k for k in pk if k not in data.column_names]
        if absent:
            raise SchemaMismatchError(f"{what}: the data needs the key column(s) {absent} beside the new columns")
        fields = [data.schema.field(c).with_nullable(True) for c in data.column_names if c not in pk]
        if not fields:
            raise SchemaMismatchError(f"{what}: the data holds no column besides the key {pk}")
    fields = tbl.checked_new_columns(stored.schema, fields, table)
    if data is None:
        return fields, None, None
    target = pa.schema([stored.schema.field(k) for k in pk] + fields)
    data = tbl.conform(data.select(target.names), target, what)
    tbl.check_primary_key(data, pk, what)
    return fields, data, plan_column_update(stored, data, pk, what, "columns")
