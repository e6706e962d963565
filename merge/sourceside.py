"""The source-side plan of a row merge: start from the source's table and apply dest's changes.

A three-way merge is symmetric in its data: the merged table is the source's table with dest's
changes applied as much as it is dest's table with the source's. The usual plan
(:meth:`trimerge.merge.plan.ThreeWay.merge_rows`) takes the second way — every row the source
changed is read, classified, folded and rewritten into dest's table — so its cost follows the
source's change. When the source changed far more rows than dest (a nightly reload, a branch that
recomputed a column), this plan takes the first way: dest's table becomes the source's Lance
version (its fragments shared, nothing copied) and only the keys dest changed are written onto it.
Its cost follows dest's change.

The result is the same table, the same conflicts and the same counts, because the same rules
decide every key:

* keys only the source changed: the source's row, which the source's table already holds;
* keys dest changed: the source's diff restricted to those keys (the base's and the source's rows
  read by key, classified by the diff's own rules) is classified against dest's diff and folded
  exactly as in the usual plan (:func:`trimerge.merge.rows.fold`). The rows the fold writes are
  written; keys it deletes are deleted; every other key of dest's change keeps dest's row (or its
  absence), which is written onto the source's table;
* ``rows_from_source`` counts the source's changed rows outside dest's keys from the source's
  diff counts, as the fold would have counted them one by one.

It applies where the two tables differ in rows only: same key, same schema on both sides and in
the merge, no column to add, drop, widen or restore, a local merge.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Callable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from trimerge.diff.engine import TableDiff
from trimerge.diff.reads import SCAN_OPTIONS
from trimerge.diff.rules import classify as classify_diff
from trimerge.lineage.tables import arrowtypes
from trimerge.lineage.errors import InvalidOperationError
from trimerge.lineage.tables.conversion import rows_with_keys
from trimerge.merge.classify import classify
from trimerge.merge.edits import TablePlan, conform_rows
from trimerge.merge.publish import release_memory
from trimerge.merge.resolve import Resolver
from trimerge.merge.result import Conflict
from trimerge.merge.rows import fold

if TYPE_CHECKING:
    import lance

#: The source-side plan is chosen when the source changed at least :data:`MIN_SOURCE_ROWS` rows and
#: this many times the rows dest changed. Measured on 4M rows of 4 columns with 4,000 rows changed
#: by dest, each merge in a fresh process with each plan forced (TRIMERGE_MERGE_PLAN): the usual
#: plan costs ~2 µs per source row; this one counts the source's rows by stable row id (~0.5 µs a
#: row) and pays ~0.5 s to find and write dest's keys in the source's table, ~25 times a source
#: row each. Source changes of 40k rows: 0.64 s against 1.08 s; 400k: 2.43-2.55 s against
#: 2.15-2.37 s; 2M: ~4.5 s against 2.5 s (benchmarks/bench_merge_scale.py).
SOURCE_SIDE_FACTOR = 25
MIN_SOURCE_ROWS = 500_000
PLANS = ("auto", "dest", "source")


def plan_choice() -> str:
    """``TRIMERGE_MERGE_PLAN``: ``auto`` (by change size), ``dest`` (always the usual plan) or
    ``source`` (this plan wherever it applies)."""
    choice = (os.environ.get("TRIMERGE_MERGE_PLAN") or "auto").strip().lower()
    if choice not in PLANS:
        raise InvalidOperationError(f"TRIMERGE_MERGE_PLAN={choice!r}: use one of {', '.join(PLANS)}")
    return choice


def _same_shape(ours: TableDiff, theirs: TableDiff, merged: pa.Schema | None = None) -> bool:
    """A local merge of three snapshots with one key and one schema (and ``merged`` that schema)."""
    b, o, t = (theirs.before_snapshot, ours.after_snapshot, theirs.after_snapshot)
    if "spark" in (ours.engine, theirs.engine) or b.tv is None or o.tv is None or t.tv is None:
        return False
    if not (tuple(b.tv.primary_key) == tuple(o.tv.primary_key) == tuple(t.tv.primary_key)):
        return False
    schemas = [b.ds.schema, o.ds.schema, t.ds.schema] + ([merged] if merged is not None else [])
    shapes = [[(f.name, f.type) for f in s] for s in schemas]
    return all(shape == shapes[0] for shape in shapes)


def applies(plan: TablePlan, ours: TableDiff, theirs: TableDiff, merged: pa.Schema) -> bool:
    """Whether the merge of this table may start from the source's table (see the module docstring)."""
    if plan.add_columns or plan.widen or plan.drop_columns or plan.restore_columns:
        return False
    return _same_shape(ours, theirs, merged) and not ours.spilled


def pays(ours: TableDiff, theirs: TableDiff) -> bool:
    """Whether the source-side plan is the cheaper one, by the two diffs' sizes (or as forced)."""
    choice = plan_choice()
    if choice != "auto":
        return choice == "source"
    changed = theirs.counts.rows_changed
    return changed >= MIN_SOURCE_ROWS and changed >= SOURCE_SIDE_FACTOR * ours.counts.rows_changed


def likely(ours: TableDiff, theirs: TableDiff) -> bool:
    """Whether :func:`pays` will likely hold, from the diffs' plans alone (no row read): the
    source's diff is then only counted, not built (:attr:`TableDiff.count_first`)."""
    choice = plan_choice()
    if choice == "dest" or not _same_shape(ours, theirs):
        return False
    if choice == "source":
        return True
    planned = theirs.candidate_plan.estimated_rows
    return planned >= 2 * MIN_SOURCE_ROWS and planned >= SOURCE_SIDE_FACTOR * ours.candidate_plan.estimated_rows


def merge_onto_source(plan: TablePlan, ours: TableDiff, theirs: TableDiff, key: Sequence[str], merged: pa.Schema,
                      granularity: str, resolver: Resolver, report: Callable[[Conflict], None]) -> None:
    """Fill ``plan`` so that its publish makes dest's table the source's table plus dest's changes."""
    release_memory()  # what counting the source's diff read: before the fold and the commit
    key = list(key)
    ours_rows = ours.rows_with_row_ids()
    keys_o = ours_rows.select(key)
    theirs_rows, located = _restricted(theirs, keys_o)
    part = plan.part()
    fold(part, classify(ours_rows, theirs_rows, key, merged, granularity), resolver, merged, report)
    plan.stats.plan = "source"
    if not part.writes and theirs.counts.rows_changed == theirs_rows.num_rows:
        # Every key the source changed is one of dest's and the fold takes nothing from it: the
        # result is dest's table as it is. Pointing dest at the source's storage instead would
        # publish a change of storage alone (an empty cherry-pick, a replay a rebase keeps).
        plan.absorb(part)
        return
    decided = [t.select(key) for t in part.upserts.tables()] + [t.select(key) for t in part.deletes]
    kept = _without(ours_rows, decided, key)  # dest's change the fold left as it is: dest's rows
    present = pc.not_equal(kept.column("change"), "delete")  # a key-only table's rows have no image
    rows = kept.filter(present)
    after = rows.column("after").combine_chunks() if rows.num_rows else None
    n = after.type.num_fields if after is not None and pa.types.is_struct(after.type) else 0
    own = pa.table([rows.column(k) for k in key] + [after.field(i) for i in range(n)],
                   names=key + [after.type.field(i).name for i in range(n)]) if after is not None else None
    plan.set_to = theirs.after_snapshot.tv
    plan.absorb(part)
    # Every row the source's table holds for dest's keys goes; the final rows of those keys come
    # back (the fold's, and dest's own where the fold left them): one write, no lookup by key.
    plan.dest_row_ids, plan.dest_row_keys, plan.deletes = [], [], []
    plan.ids_complete = False
    plan.located = located
    plan.stats.rows_from_source += theirs.counts.rows_changed - theirs_rows.num_rows  # keys only the source changed
    if own is not None and own.num_rows:
        plan.upserts.append(conform_rows(own, merged))
    release_memory()  # what the key scans read: before Lance commits the source's manifest


def _restricted(theirs: TableDiff, keys: pa.Table) -> tuple[pa.Table, np.ndarray]:
    """(The source's diff rows (as :meth:`TableDiff.rows_with_row_ids`) for ``keys`` only, the
    addresses of the source's rows of those keys): the base's and the source's rows of those keys
    read by key and classified by the diff's rules — the same rows the whole diff holds for them."""
    key, common, added = theirs.compared_columns()
    b, a = theirs.before_snapshot.ds, theirs.after_snapshot.ds
    before, after = _rows_of(b, keys, key), _rows_of(a, keys, key)
    rows = classify_diff(before.drop_columns([ROWADDR]), after.drop_columns([ROWADDR]), key, common, added,
                         [c for c in b.schema.names if c not in key], [c for c in a.schema.names if c not in key])
    return rows, after.column(ROWADDR).to_numpy()


ROWADDR = "_rowaddr"
#: Above this many keys, rows are found by one scan of the key columns rather than by the key
#: index (4,000 keys in 4M rows: 0.1-0.35 s scanned against 0.16-0.5 s looked up).
SCAN_KEYS = 1000


def _rows_of(ds: "lance.LanceDataset", keys: pa.Table, key: list[str]) -> pa.Table:
    """The rows of ``ds`` holding ``keys``, with ``_rowid`` and ``_rowaddr`` last."""
    import polars as pl

    if keys.num_rows <= SCAN_KEYS:
        found = rows_with_keys(ds, keys, with_row_id=True, with_row_address=True) if keys.num_rows else \
            ds.to_table(limit=0, with_row_id=True, with_row_address=True)
        return found.select([*ds.schema.names, "_rowid", ROWADDR])
    wanted = arrowtypes.to_polars(keys)
    parts = []
    for batch in ds.to_batches(columns=key, with_row_id=True, with_row_address=True, batch_size=1 << 17,
                               **SCAN_OPTIONS):
        where = arrowtypes.to_polars(pa.Table.from_batches([batch]))  # a slice at a time: flat memory
        parts.append(where.join(wanted.with_columns([pl.col(k).cast(where.schema[k]) for k in key]), on=key,
                                how="semi", nulls_equal=True))
    hits = pl.concat(parts) if parts else pl.DataFrame({"_rowid": [], ROWADDR: []},
                                                         schema={"_rowid": pl.UInt64, ROWADDR: pl.UInt64})
    ids = hits["_rowid"].to_arrow().cast(pa.uint64())
    rows = ds._take_rows(ids, columns=ds.schema.names) if len(ids) else ds.schema.empty_table()
    return rows.append_column("_rowid", ids).append_column(ROWADDR, hits[ROWADDR].to_arrow().cast(pa.uint64()))


def _without(rows: pa.Table, tables: list[pa.Table], key: list[str]) -> pa.Table:
    """The rows of ``rows`` whose key is in none of ``tables``."""
    import polars as pl

    tables = [t for t in tables if t.num_rows]
    if not tables or not rows.num_rows:
        return rows
    mine = arrowtypes.to_polars(rows.select(key)).with_row_index("\x01at")
    types = mine.schema
    other = pl.concat([arrowtypes.to_polars(t).with_columns([pl.col(k).cast(types[k]) for k in key])
                       for t in tables]).unique()
    keep = mine.join(other, on=key, how="anti", nulls_equal=True)["\x01at"].sort()
    return rows.take(keep.to_arrow())
