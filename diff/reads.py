"""Reading candidate rows from Lance: whole fragments in slices, or rows by stable row id.

Every read returns the table's columns plus ``_rowid`` as the last column, in the table's types.
"""

from __future__ import annotations

from typing import Any, Iterator, Sequence

import pyarrow as pa

from trimerge.diff.planner import PlanAssumptionError, Snapshot
from trimerge.lineage.tables.fragments import IdIndex, RowIdSet

ROWID = "_rowid"


def with_row_ids(table: pa.Table, ids: pa.Array) -> pa.Table:
    return table.append_column(ROWID, ids.cast(pa.uint64()))


def schema_with_row_ids(schema: pa.Schema, columns: Sequence[str] | None = None) -> pa.Schema:
    """``schema`` (only ``columns``, in that order, if named) plus ``_rowid``: what
    :func:`with_row_ids` gives, built from the schema alone (no tables: diffs ask this often)."""
    if columns is not None:
        schema = pa.schema([schema.field(c) for c in columns], metadata=schema.metadata)
    return schema.append(pa.field(ROWID, pa.uint64()))


def _name(snap: Snapshot) -> str:
    return snap.tv.dataset if snap.tv is not None else "(no table)"


def conform_batches(batches: Sequence[pa.RecordBatch], schema: pa.Schema) -> pa.Table:
    """Batches read with ``_rowid`` (and maybe other row metadata) as a candidate table: the
    columns of ``schema`` in its order and types."""
    return pa.Table.from_batches(batches).select(schema.names).cast(schema)


SCAN_BATCH_ROWS = 65536
#: Rows of each batch Lance decodes for a diff's scans (gathered into slices of ``SCAN_BATCH_ROWS``).
LANCE_BATCH_ROWS = 16384
#: How far Lance may read ahead of a diff's scan. Its defaults (gigabytes of I/O buffer, many
#: decoded batches, several fragments at once) made each of a merge's two concurrent scans of a
#: 20M-row table hold ~300 MB. With one batch and one fragment ahead, 16 MiB of I/O buffer and
#: small batches, the two concurrent scans of a merge's count (a changed 4M-row table and its
#: base) hold ~100 MB instead of ~195 MB (32 MiB, two ahead, 128k-row batches), as fast.
SCAN_OPTIONS: dict[str, Any] = {"io_buffer_size": 16 << 20, "batch_readahead": 1, "fragment_readahead": 1}


def scan(snap: Snapshot, columns: Sequence[str] | None = None, **kwargs: Any) -> Iterator[pa.Table]:
    """Rows of ``snap`` (optionally of some ``fragments``; all ``columns`` unless named) with their
    stable row id as the last column, in slices of about ``SCAN_BATCH_ROWS`` rows so a large read
    never sits in memory whole."""
    names = list(snap.ds.schema.names if columns is None else columns)
    schema = schema_with_row_ids(snap.ds.schema, names)
    pending: list[pa.RecordBatch] = []
    size = 0
    for batch in snap.ds.scanner(columns=names, with_row_id=True, batch_size=LANCE_BATCH_ROWS, **SCAN_OPTIONS,
                                 **kwargs).to_batches():
        pending.append(batch)
        size += batch.num_rows
        if size >= SCAN_BATCH_ROWS:
            yield conform_batches(pending, schema)
            pending, size = [], 0
    if pending:
        yield conform_batches(pending, schema)


def take(snap: Snapshot, row_ids: pa.Array, columns: list[str]) -> pa.Table:
    """Rows by stable row id (in that order), with the ids as the last column."""
    if len(row_ids) == 0:
        return schema_with_row_ids(snap.ds.schema, columns).empty_table()
    rows = snap.ds._take_rows(row_ids, columns=columns)
    if rows.num_rows != len(row_ids):
        raise PlanAssumptionError(f"{_name(snap)}: {len(row_ids) - rows.num_rows} row id(s) not found")
    return with_row_ids(rows, row_ids)


TAKE_CHUNK_ROWS = 1024
#: Above this share of a table, one scan beats reading rows one by one: a take costs ~1.5 µs a
#: row, a scan ~0.075 µs a row of the table (4M rows of 4 columns, benchmarks/bench_merge_scale.py).
DENSE_TAKE_FRACTION = 0.05


def scan_ids(snap: Snapshot, ids: pa.Array | RowIdSet, columns: Sequence[str] | None = None) -> Iterator[pa.Table]:
    """The rows with these stable row ids (an array, or a set the caller holds already), by one
    filtered scan of the table (of ``columns`` only, if named)."""
    index = ids if isinstance(ids, RowIdSet) else RowIdSet.of(ids.to_numpy(zero_copy_only=False))
    found = 0
    for t in scan(snap, columns):
        hit = index.contains(t.column(ROWID).to_numpy())
        found += int(hit.sum())
        if hit.all():
            yield t  # a dense read (a backfill's every row): no copy
        elif hit.any():
            yield t.filter(pa.array(hit))
    if found != len(index):
        raise PlanAssumptionError(f"{_name(snap)}: {len(index) - found} row id(s) not found")


class RowCache:
    """Rows of one snapshot already read by stable row id, kept for a second reader of the same
    rows: a merge's two diffs both read the base's images of the rows they changed, and those of
    the keys both sides changed — where conflicts and cell merges are — are then read once (a
    random read costs ~40 µs a row of 16 columns). Holds at most ``limit`` rows."""

    LIMIT = 100_000

    def __init__(self, limit: int = LIMIT):
        import threading

        self.limit = limit
        self._tables: list[pa.Table] = []
        self._rows = 0
        self._index: tuple[pa.Table, IdIndex] | None = None
        self._lock = threading.Lock()

    def put(self, rows: pa.Table) -> None:
        with self._lock:
            if rows.num_rows and self._rows + rows.num_rows <= self.limit:
                self._tables.append(rows)
                self._rows += rows.num_rows
                self._index = None

    def split(self, ids: pa.Array) -> tuple[pa.Table | None, pa.Array]:
        """(The cached rows among ``ids``, the ids still to read, in their order.)"""
        with self._lock:
            if not self._tables or not len(ids):
                return None, ids
            if self._index is None:
                table = pa.concat_tables(self._tables)
                self._index = (table, IdIndex(table.column(ROWID).to_numpy()))
            table, index = self._index
        hit, at = index.find(ids.to_numpy(zero_copy_only=False))
        if not hit.any():
            return None, ids
        return table.take(pa.array(at)), ids.filter(pa.array(~hit))


def take_all(requests: Sequence[tuple[Snapshot, pa.Array]],
             columns: Sequence[str] | None = None) -> Iterator[tuple[int, pa.Table]]:
    """Every snapshot's rows by stable row id (all ``columns`` unless named: then the row cache is
    left out) as ``(request index, rows)`` slices.

    Scattered reads are CPU-bound decoding of one compressed chunk per row and column; a single
    ``_take_rows`` call keeps about one core busy, so ids are sorted (neighbours share chunks) and
    split into slices that run on a small thread pool (pylance releases the GIL)."""
    import pyarrow.compute as pc
    from concurrent.futures import ThreadPoolExecutor

    jobs: list[tuple[int, Snapshot, pa.Array]] = []
    for i, (snap, ids) in enumerate(requests):
        if len(ids) > 1 and not _ascending(ids):
            ids = ids.take(pc.sort_indices(ids))
        cache = snap.row_cache if columns is None else None
        if cache is not None:
            cached, ids = cache.split(ids)
            if cached is not None:
                yield i, cached
        if len(ids) >= DENSE_TAKE_FRACTION * snap.ds.count_rows():
            yield from ((i, t) for t in scan_ids(snap, ids, columns))
            continue
        for start in range(0, len(ids), TAKE_CHUNK_ROWS):
            jobs.append((i, snap, ids.slice(start, TAKE_CHUNK_ROWS)))
    if not jobs:
        return
    with ThreadPoolExecutor(max(1, min(4, len(jobs)))) as pool:
        names = (lambda snap: snap.ds.schema.names) if columns is None else (lambda snap: list(columns))
        for (i, snap, _), rows in zip(jobs, pool.map(lambda job: take(job[1], job[2], names(job[1])), jobs)):
            if snap.row_cache is not None and columns is None:
                snap.row_cache.put(rows)
            yield i, rows


def _ascending(ids: pa.Array) -> bool:
    """Whether ``ids`` are in ascending order already (a set difference's are): no second sort."""
    import numpy as np

    values = ids.to_numpy(zero_copy_only=False)
    return bool(np.all(values[1:] >= values[:-1]))
