"""Keyed writes through the key index: upserts and deletes by key that touch what they change.

Lance's ``merge_insert`` joins the input against every key of the table (a scan of the key column,
fragment by fragment), whatever the size of the input; with a scalar index on the key it is slower
still in pylance 14. A filter on the key column, though, is answered by the index in about a
millisecond. So a small keyed write on a table with a key index reads the current rows of its keys
through the index (with their row addresses), keeps the input rows that are new or differ, marks
the old rows deleted in their fragments' deletion files and writes the new rows as one fragment:
one Lance ``Update``, the same shape as a merge's row replacement. Large inputs, and tables
without a key index (small tables: see ``index.key_min_rows``), keep using ``merge_insert``.

:func:`plan_upsert` and :func:`plan_delete` read only; the caller writes and commits.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Sequence, cast

import numpy as np
import pyarrow as pa

from trimerge.lineage.tables import arrowtypes
from trimerge.lineage.tables.indices import lance_indices
from trimerge.lineage.tables.conversion import matching_positions, rows_with_keys

if TYPE_CHECKING:
    import lance

#: Above this many input rows a keyed write joins (``merge_insert``) instead of looking keys up.
MAX_LOOKUP_ROWS = 20_000
#: Rows of the key columns an append's check reads at a time (flat memory, whatever the table).
KEY_SCAN_ROWS = 1 << 17
#: Existing keys an append's check collects before it stops (enough to name some in the error).
SHOWN_KEYS = 5


@dataclass
class KeyedEdit:
    """Rows to delete (fragment id -> offsets) and rows to write."""

    offsets: dict[int, list[int]] = field(default_factory=dict)
    rows: pa.Table | None = None

    @property
    def empty(self) -> bool:
        return not self.offsets and (self.rows is None or not self.rows.num_rows)


def key_indexed(ds: "lance.LanceDataset", primary_key: Sequence[str]) -> bool:
    """Whether a scalar BTREE index covers the table's first key column."""
    return any(i["fields"] == [primary_key[0]] and i["type"] == "BTree" for i in lance_indices(ds))


def _offsets(addresses: np.ndarray) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for address in np.sort(addresses.astype(np.uint64)):
        out.setdefault(int(address >> np.uint64(32)), []).append(int(address & np.uint64(0xFFFFFFFF)))
    return out


def _lookup(ds: "lance.LanceDataset", keys: pa.Table) -> pa.Table:
    return rows_with_keys(ds, keys, with_row_address=True)


def plan_upsert(ds: "lance.LanceDataset", rows: pa.Table, primary_key: Sequence[str]) -> KeyedEdit | None:
    """The edit that upserts ``rows`` (conformed to the table's schema, one row per key), or None
    when this path does not apply (no key index, or too many rows)."""
    if rows.num_rows > MAX_LOOKUP_ROWS or not key_indexed(ds, primary_key):
        return None
    import polars as pl

    pk = list(primary_key)
    current = _lookup(ds, rows.select(pk))
    at_rows, at_current = matching_positions(rows, current, pk)
    if not len(at_rows):
        return KeyedEdit(rows=rows)
    values = [c for c in rows.column_names if c not in pk]
    old = arrowtypes.encode(current.take(at_current).select(values))  # decimal256: polars panics on it
    new = arrowtypes.encode(rows.take(at_rows).select(values))
    if not values:  # a key-only table: an existing key has nothing to change
        differs = np.zeros(len(at_rows), dtype=bool)
    else:
        try:
            differs = cast(pl.DataFrame, pl.from_arrow(new)).select(pl.any_horizontal(
                [~pl.col(c).eq_missing(pl.Series(c, pl.from_arrow(old.column(c)))) for c in values])).to_series().to_numpy()
        except Exception:  # a type polars cannot compare: treat as changed (the diff drops equal rows)
            differs = np.ones(len(at_rows), dtype=bool)
    matched = np.zeros(rows.num_rows, dtype=bool)
    matched[at_rows.to_numpy()] = True
    keep = ~matched
    keep[at_rows.to_numpy()[differs]] = True
    replaced = current.column("_rowaddr").take(at_current.filter(pa.array(differs))).to_numpy()
    return KeyedEdit(offsets=_offsets(replaced), rows=rows.filter(pa.array(keep)))


def upsert_by_join(ds: "lance.LanceDataset", rows: pa.Table, primary_key: Sequence[str]) -> None:
    """Upsert ``rows`` with Lance's ``merge_insert`` (moving ``ds`` to the new version): new keys are
    inserted, and existing rows are updated only where a value differs, so identical rows keep their
    row versions."""
    values = [c for c in rows.column_names if c not in primary_key]
    builder = ds.merge_insert(list(primary_key))
    if values:
        changed = " OR ".join(f"(source.`{c}` IS DISTINCT FROM target.`{c}`)" for c in values)
        # pylance 14: a conditional update through a scalar index on the key fails with "Primary key
        # column ... must not be nullable"; the condition must stay, so the key index is not used.
        builder = builder.when_matched_update_all(changed).use_index(False)
    builder.when_not_matched_insert_all().execute(rows)


def existing_keys(ds: "lance.LanceDataset", rows: pa.Table, primary_key: Sequence[str]) -> pa.Table:
    """Some of the keys of ``rows`` (at most :data:`SHOWN_KEYS`) the table holds already; none when
    every key is new. What an append checks before it writes its rows as new fragments.

    A small input is looked up through the key index. A large one is checked against one scan of
    the key columns, a slice at a time: the input's keys are hashed once and sorted, each slice's
    key hashes are looked up in them, and only hash hits are compared by value. Lance's
    ``merge_insert`` instead builds a hash join of the whole input in a memory pool of fixed size
    (``LANCE_MEM_POOL_SIZE``): 5M rows appended to 5M ran out of it."""
    pk = list(primary_key)
    keys = rows.select(pk)
    if not keys.num_rows:
        return keys
    if keys.num_rows <= MAX_LOOKUP_ROWS and key_indexed(ds, pk):
        return _lookup(ds, keys).select(pk).slice(0, SHOWN_KEYS)
    import polars as pl

    wanted = cast(pl.DataFrame, arrowtypes.to_polars(keys))
    hashes = np.sort(wanted.hash_rows(seed=_KEY_SEED).to_numpy())
    found: list[pa.Table] = []
    for batch in ds.to_batches(columns=pk, batch_size=KEY_SCAN_ROWS):
        have = cast(pl.DataFrame, arrowtypes.to_polars(pa.Table.from_batches([batch])))
        have = have.with_columns([pl.col(k).cast(wanted.schema[k]) for k in pk if have.schema[k] != wanted.schema[k]])
        mine = have.hash_rows(seed=_KEY_SEED).to_numpy()
        at = np.minimum(np.searchsorted(hashes, mine), len(hashes) - 1)
        maybe = hashes[at] == mine
        if not maybe.any():
            continue
        candidates = have.with_row_index("\x01at").filter(pl.Series(maybe))
        at_hits = candidates.join(wanted, on=pk, how="semi", nulls_equal=True)["\x01at"]  # a hash is not a key
        if len(at_hits):
            found.append(pa.Table.from_batches([batch]).take(at_hits.to_arrow()).cast(keys.schema))
            if sum(t.num_rows for t in found) >= SHOWN_KEYS:
                break
    return pa.concat_tables(found).slice(0, SHOWN_KEYS) if found else keys.slice(0, 0)


_KEY_SEED = 0x6B657973


def plan_delete(ds: "lance.LanceDataset", keys: pa.Table, primary_key: Sequence[str]) -> KeyedEdit | None:
    """The edit that deletes the rows with ``keys``, or None when this path does not apply."""
    if keys.num_rows > MAX_LOOKUP_ROWS or not key_indexed(ds, primary_key):
        return None
    current = _lookup(ds, keys.select(list(primary_key)))
    return KeyedEdit(offsets=_offsets(current.column("_rowaddr").to_numpy()))
