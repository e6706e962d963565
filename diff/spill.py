"""Bounded memory for large diffs: candidate rows are hash-partitioned by key into bucket files on
disk once they outgrow a memory budget, and classified one bucket at a time.

A key lands in the same bucket on both sides (keys are hashed in the after side's types), so each
bucket is a complete, independent diff. Small diffs never touch the disk.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import weakref
from dataclasses import dataclass
from collections import deque
from typing import Any, Callable, Iterable, Iterator, Sequence, TypeVar

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

DEFAULT_MEMORY_BUDGET = 512 << 20  # bytes a diff may use before it spills to disk
#: Classifying candidates in memory (a keyed join of both sides) peaks at about this many times their
#: size, so candidates spill once they exceed budget / CLASSIFY_FACTOR (measured: 250 MB of
#: candidates peaked at 1.36 GB; spilled, the same diff peaked at 0.7 GB and ran as fast).
CLASSIFY_FACTOR = 4
SPILL_BUCKETS = 64
PARTITION_ROWS = 262144  # rows gathered before one partitioning pass (few, large bucket writes)
_HASH_SEED = 0x7472696D
T = TypeVar("T")
R = TypeVar("R")


_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def memory_budget(value: int | str | None = None) -> int:
    """The spill threshold in bytes: ``value``, else env ``TRIMERGE_DIFF_MEMORY``, else 512 MiB.
    Strings may carry a binary unit: ``"256M"``, ``"2GiB"``, ``"1G"``."""
    if value is None:
        value = os.environ.get("TRIMERGE_DIFF_MEMORY") or DEFAULT_MEMORY_BUDGET
    if isinstance(value, int) and not isinstance(value, bool):
        parsed: int | None = value
    else:
        text = str(value).strip().upper().removesuffix("IB").removesuffix("B")
        unit = text[-1:] if text[-1:] in _UNITS and text[-1:] else ""
        number = text[: len(text) - len(unit)].strip()
        parsed = int(float(number) * _UNITS[unit]) if number.replace(".", "", 1).isdigit() else None
    if parsed is None or parsed < 1:
        from trimerge.lineage.errors import InvalidOperationError

        raise InvalidOperationError(f"bad memory budget {value!r} (bytes, or a size such as 512M or 2G)")
    return parsed


def spill_directory() -> str:
    """A new temporary folder for spilled rows (under ``TRIMERGE_SPILL_DIR`` if set)."""
    parent = os.environ.get("TRIMERGE_SPILL_DIR") or None
    if parent:
        os.makedirs(parent, exist_ok=True)
    return tempfile.mkdtemp(prefix="trimerge-diff-", dir=parent)


class CandidateBuffer:
    """Candidate rows of both sides (0 = before, 1 = after) — and rows classified already (2: a
    delta diff's pairs compared by stable row id, :mod:`trimerge.diff.aligned`) — kept in memory
    until their size exceeds ``budget`` bytes, then partitioned by key hash into ``buckets`` Arrow
    files per side: a bucket holds every row of its keys, candidates and classified alike."""

    SIDES = 3
    CLASSIFIED = 2

    def __init__(self, key: Sequence[str], key_types: pl.Schema, budget: int, buckets: int = SPILL_BUCKETS):
        self.key = list(key)
        self.key_types = key_types
        self.budget = budget
        self.buckets = buckets
        self.parts: tuple[list[pa.Table], ...] = tuple([] for _ in range(self.SIDES))
        self.schemas: list[pa.Schema | None] = [None] * self.SIDES
        self.rows = [0] * self.SIDES
        self._bytes = 0
        self._pending: tuple[list[pa.Table], ...] = tuple([] for _ in range(self.SIDES))
        self._pending_rows = [0] * self.SIDES
        self.directory: str | None = None
        self._writers: dict[tuple[int, int], pa.ipc.RecordBatchFileWriter] = {}
        self._partitioner: Any = None
        self._in_flight: Any = None

    @property
    def spilled(self) -> bool:
        return self.directory is not None

    def add(self, side: int, table: pa.Table) -> None:
        if table.num_rows == 0:
            self.schemas[side] = self.schemas[side] or table.schema
            return
        self.schemas[side] = self.schemas[side] or table.schema
        self.rows[side] += table.num_rows
        if self.spilled:
            self._queue(side, table)
            return
        self.parts[side].append(table)
        self._bytes += table.nbytes
        if self._bytes * CLASSIFY_FACTOR > self.budget:
            self.directory = spill_directory()
            for s in range(self.SIDES):
                for t in self.parts[s]:
                    self._queue(s, t)
            self.parts = tuple([] for _ in range(self.SIDES))

    def _queue(self, side: int, table: pa.Table) -> None:
        self._pending[side].append(table)
        self._pending_rows[side] += table.num_rows
        if self._pending_rows[side] >= PARTITION_ROWS:
            self._flush(side)

    def _flush(self, side: int) -> None:
        if self._pending[side]:
            table = pa.concat_tables(self._pending[side], promote_options="permissive")
            # Partitioned on a helper thread while the next rows are read; one slice in flight
            # keeps the memory flat (Arrow and polars release the GIL).
            self._wait()
            if WORKERS <= 1:
                self._partition(side, table)
            else:
                if self._partitioner is None:
                    from concurrent.futures import ThreadPoolExecutor

                    self._partitioner = ThreadPoolExecutor(1)
                self._in_flight = self._partitioner.submit(self._partition, side, table)
        self._pending[side].clear()
        self._pending_rows[side] = 0

    def _wait(self) -> None:
        if self._in_flight is not None:
            done, self._in_flight = self._in_flight, None
            done.result()

    def tables(self, empty: tuple[pa.Schema, pa.Schema]) -> tuple[pa.Table, pa.Table]:
        """In-memory candidates of both sides (only when nothing was spilled)."""
        assert not self.spilled
        return tuple(
            pa.concat_tables(self.parts[s], promote_options="permissive") if self.parts[s] else empty[s].empty_table()
            for s in (0, 1))

    def classified(self) -> list[pa.Table]:
        """In-memory rows classified already (only when nothing was spilled)."""
        assert not self.spilled
        return list(self.parts[self.CLASSIFIED])

    def bucket_tables(self, empty: tuple[pa.Schema, pa.Schema]) -> Iterator[tuple[pa.Table, pa.Table]]:
        """(before, after) candidates of each bucket in turn (after spilling)."""
        for before, after, _ in self.buckets_with_classified(empty):
            yield before, after

    def buckets_with_classified(self, empty: tuple[pa.Schema, pa.Schema]) -> Iterator[tuple[pa.Table, pa.Table,
                                                                                             list[pa.Table]]]:
        """(before, after, rows classified already) of each bucket in turn (after spilling)."""
        assert self.directory is not None
        for side in range(self.SIDES):
            self._flush(side)
        self._wait()
        for w in self._writers.values():
            w.close()
        self._writers.clear()
        for bucket in range(self.buckets):
            out = []
            for side in (0, 1):
                path = self._path(side, bucket)
                if os.path.exists(path):
                    with pa.OSFile(path) as source:
                        out.append(pa.ipc.open_file(source).read_all())
                else:
                    out.append((self.schemas[side] or empty[side]).empty_table())
            path = self._path(self.CLASSIFIED, bucket)
            done = []
            if os.path.exists(path):
                with pa.OSFile(path) as source:
                    done.append(pa.ipc.open_file(source).read_all())
            yield out[0], out[1], done

    def clear(self) -> None:
        """Forget every row added (a reader that must start again with another plan)."""
        self.close()
        self.parts = tuple([] for _ in range(self.SIDES))
        self.schemas = [None] * self.SIDES
        self.rows = [0] * self.SIDES
        self._bytes = 0
        self._pending = tuple([] for _ in range(self.SIDES))
        self._pending_rows = [0] * self.SIDES

    def close(self) -> None:
        if self._partitioner is not None:
            try:
                self._wait()
            except Exception:  # noqa: BLE001 - closing after a failure: the first error is the one raised
                pass
            self._partitioner.shutdown()
            self._partitioner = None
        for w in self._writers.values():
            w.close()
        self._writers.clear()
        if self.directory:
            shutil.rmtree(self.directory, ignore_errors=True)
            self.directory = None

    def _path(self, side: int, bucket: int) -> str:
        return os.path.join(self.directory or "", f"{'bac'[side]}-{bucket:04d}.arrow")

    def _partition(self, side: int, table: pa.Table) -> None:
        schema = self.schemas[side] or table.schema
        for b, part in split_by_bucket(table, self.key, self.key_types, self.buckets):
            writer = self._writers.get((side, b))
            if writer is None:
                writer = self._writers[(side, b)] = pa.ipc.new_file(self._path(side, b), schema)
            writer.write_table(part.cast(schema))


def split_by_bucket(table: pa.Table, key: Sequence[str], key_types: pl.Schema,
                    buckets: int) -> Iterator[tuple[int, pa.Table]]:
    """``(bucket, rows)`` of ``table`` cut by the hash of its key in ``key_types`` (non-empty
    buckets only, in bucket order): the same key lands in the same bucket whatever table it is in."""
    import numpy as np

    keys = pl.from_arrow(table.select(list(key)))
    assert isinstance(keys, pl.DataFrame)
    casts = [pl.col(k).cast(key_types[k]) for k in key if keys.schema[k] != key_types[k]]
    if casts:
        keys = keys.with_columns(casts)
    bucket = (keys.hash_rows(seed=_HASH_SEED) % buckets).to_arrow()
    order = pc.sort_indices(bucket)
    table = table.take(order)
    bounds = np.searchsorted(bucket.take(order).to_numpy(), np.arange(buckets + 1))
    for b in range(buckets):
        lo, hi = int(bounds[b]), int(bounds[b + 1])
        if hi > lo:
            yield b, table.slice(lo, hi - lo)


#: Threads that classify buckets side by side (polars and Arrow release the GIL while they work).
WORKERS = int(os.environ.get("TRIMERGE_THREADS") or max(1, min(4, os.cpu_count() or 1)))


def ordered_map(fn: Callable[[T], R], items: Iterable[T], workers: int | None = None) -> Iterator[R]:
    """``map(fn, items)`` on a few threads, in order, with at most ``workers + 1`` items in flight:
    the buckets of a spilled diff or merge are worked on side by side, in flat memory."""
    workers = WORKERS if workers is None else workers
    if workers <= 1:
        yield from map(fn, items)
        return
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(workers) as pool:
        pending: deque = deque()
        for item in items:
            pending.append(pool.submit(fn, item))
            if len(pending) > workers:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()


@dataclass
class ChangedRows:
    """Classified rows of one table: in memory, or an Arrow file of batches on disk (one sorted
    run per bucket) when the diff outgrew the memory budget."""

    schema: pa.Schema
    table: pa.Table | None = None
    path: str | None = None
    #: Spilled rows: the record batches each key-hash bucket holds (in bucket order), and the key
    #: types the buckets were cut by (:func:`split_by_bucket`) — a merge reads them bucket by
    #: bucket beside the other side's rows cut the same way, with no second partitioning.
    bucket_batches: list[int] | None = None
    key_types: pl.Schema | None = None

    @classmethod
    def in_memory(cls, table: pa.Table) -> "ChangedRows":
        return cls(table.schema, table=table)

    @classmethod
    def from_buckets(cls, buckets: Iterator[pa.Table], owner: object,
                     key_types: pl.Schema | None = None) -> "ChangedRows":
        """Stream per-bucket results (one table per bucket, every bucket in order) to a spill file
        that lives as long as ``owner``."""
        directory = spill_directory()
        weakref.finalize(owner, shutil.rmtree, directory, True)
        path = os.path.join(directory, "rows.arrow")
        writer = None
        schema = None
        counts = []
        for t in buckets:
            if writer is None:
                schema = t.schema
                writer = pa.ipc.new_file(path, schema)
            batches = [b for b in t.cast(schema).to_batches() if b.num_rows]
            for b in batches:
                writer.write_batch(b)
            counts.append(len(batches))
        if writer is None:
            raise ValueError("no buckets")
        writer.close()
        return cls(schema, path=path, bucket_batches=counts, key_types=key_types)

    def buckets(self, key_types: pl.Schema, buckets: int) -> Iterator[pa.Table] | None:
        """Each bucket's rows in turn, if the rows were spilled in ``buckets`` buckets cut by
        ``key_types``; else None."""
        if self.path is None or self.bucket_batches is None or len(self.bucket_batches) != buckets \
                or self.key_types is None or dict(self.key_types) != dict(key_types):
            return None
        return self._bucket_tables()

    def _bucket_tables(self) -> Iterator[pa.Table]:
        with pa.OSFile(self.path) as source:
            reader = pa.ipc.open_file(source)
            i = 0
            for n in self.bucket_batches or []:
                yield pa.Table.from_batches([reader.get_batch(j) for j in range(i, i + n)], self.schema)
                i += n

    def batches(self, max_rows: int = 65536) -> Iterator[pa.RecordBatch]:
        if self.table is not None:
            yield from self.table.to_batches(max_chunksize=max_rows)
            return
        with pa.OSFile(self.path) as source:
            reader = pa.ipc.open_file(source)
            for i in range(reader.num_record_batches):
                batch = reader.get_batch(i)
                for start in range(0, batch.num_rows, max_rows):
                    yield batch.slice(start, max_rows)

    def materialize(self, sort_key: Sequence[str]) -> pa.Table:
        if self.table is not None:
            return self.table
        with pa.OSFile(self.path) as source:
            table = pa.ipc.open_file(source).read_all()
        return table.sort_by([(k, "ascending") for k in sort_key]) if table.num_rows else table
