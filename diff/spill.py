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
from typing import Iterator, Sequence

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
    """Candidate rows of both sides (0 = before, 1 = after): kept in memory until their size
    exceeds ``budget`` bytes, then partitioned by key hash into ``buckets`` Arrow files per side."""

    def __init__(self, key: Sequence[str], key_types: pl.Schema, budget: int, buckets: int = SPILL_BUCKETS):
        self.key = list(key)
        self.key_types = key_types
        self.budget = budget
        self.buckets = buckets
        self.parts: tuple[list[pa.Table], list[pa.Table]] = ([], [])
        self.schemas: list[pa.Schema | None] = [None, None]
        self.rows = [0, 0]
        self._bytes = 0
        self._pending: tuple[list[pa.Table], list[pa.Table]] = ([], [])
        self._pending_rows = [0, 0]
        self.directory: str | None = None
        self._writers: dict[tuple[int, int], pa.ipc.RecordBatchFileWriter] = {}

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
            for s in (0, 1):
                for t in self.parts[s]:
                    self._queue(s, t)
            self.parts = ([], [])

    def _queue(self, side: int, table: pa.Table) -> None:
        self._pending[side].append(table)
        self._pending_rows[side] += table.num_rows
        if self._pending_rows[side] >= PARTITION_ROWS:
            self._flush(side)

    def _flush(self, side: int) -> None:
        if self._pending[side]:
            self._partition(side, pa.concat_tables(self._pending[side], promote_options="permissive"))
        self._pending[side].clear()
        self._pending_rows[side] = 0

    def tables(self, empty: tuple[pa.Schema, pa.Schema]) -> tuple[pa.Table, pa.Table]:
        """In-memory candidates of both sides (only when nothing was spilled)."""
        assert not self.spilled
        return tuple(  # type: ignore[return-value]
            pa.concat_tables(self.parts[s], promote_options="permissive") if self.parts[s] else empty[s].empty_table()
            for s in (0, 1))

    def bucket_tables(self, empty: tuple[pa.Schema, pa.Schema]) -> Iterator[tuple[pa.Table, pa.Table]]:
        """(before, after) candidates of each bucket in turn (after spilling)."""
        assert self.directory is not None
        self._flush(0)
        self._flush(1)
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
            yield out[0], out[1]

    def close(self) -> None:
        for w in self._writers.values():
            w.close()
        self._writers.clear()
        if self.directory:
            shutil.rmtree(self.directory, ignore_errors=True)
            self.directory = None

    def _path(self, side: int, bucket: int) -> str:
        return os.path.join(self.directory or "", f"{'ba'[side]}-{bucket:04d}.arrow")

    def _partition(self, side: int, table: pa.Table) -> None:
        keys = pl.from_arrow(table.select(self.key))
        assert isinstance(keys, pl.DataFrame)
        casts = [pl.col(k).cast(self.key_types[k]) for k in self.key if keys.schema[k] != self.key_types[k]]
        if casts:
            keys = keys.with_columns(casts)
        bucket = (keys.hash_rows(seed=_HASH_SEED) % self.buckets).to_arrow()
        order = pc.sort_indices(bucket)
        table = table.take(order)
        bucket = bucket.take(order).to_numpy()
        import numpy as np

        bounds = np.searchsorted(bucket, np.arange(self.buckets + 1))
        schema = self.schemas[side] or table.schema
        for b in range(self.buckets):
            lo, hi = int(bounds[b]), int(bounds[b + 1])
            if hi == lo:
                continue
            writer = self._writers.get((side, b))
            if writer is None:
                writer = self._writers[(side, b)] = pa.ipc.new_file(self._path(side, b), schema)
            writer.write_table(table.slice(lo, hi - lo).cast(schema))


@dataclass
class ChangedRows:
    """Classified rows of one table: in memory, or an Arrow file of batches on disk (one sorted
    run per bucket) when the diff outgrew the memory budget."""

    schema: pa.Schema
    table: pa.Table | None = None
    path: str | None = None

    @classmethod
    def in_memory(cls, table: pa.Table) -> "ChangedRows":
        return cls(table.schema, table=table)

    @classmethod
    def from_buckets(cls, buckets: Iterator[pa.Table], owner: object) -> "ChangedRows":
        """Stream per-bucket results to a spill file that lives as long as ``owner``."""
        directory = spill_directory()
        weakref.finalize(owner, shutil.rmtree, directory, True)
        path = os.path.join(directory, "rows.arrow")
        writer = None
        schema = None
        for t in buckets:
            if writer is None:
                schema = t.schema
                writer = pa.ipc.new_file(path, schema)
            writer.write_table(t.cast(schema))
        if writer is None:
            raise ValueError("no buckets")
        writer.close()
        return cls(schema, path=path)

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
