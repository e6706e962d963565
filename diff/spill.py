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
from typing import Callable, Iterator, Sequence

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

DEFAULT_MEMORY_BUDGET = 1 << 30  # bytes of candidate rows held in memory before spilling
SPILL_BUCKETS = 64
_HASH_SEED = 0x7472696D


def memory_budget(value: int | None = None) -> int:
    """The spill threshold in bytes: ``value``, else env ``TRIMERGE_DIFF_MEMORY``, else 1 GiB."""
    if value is not None:
        return int(value)
    env = os.environ.get("TRIMERGE_DIFF_MEMORY")
    return int(env) if env else DEFAULT_MEMORY_BUDGET


def _spill_root() -> str:
    return tempfile.mkdtemp(prefix="trimerge-diff-", dir=os.environ.get("TRIMERGE_SPILL_DIR"))


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
            self._partition(side, table)
            return
        self.parts[side].append(table)
        self._bytes += table.nbytes
        if self._bytes > self.budget:
            self.directory = _spill_root()
            for s in (0, 1):
                for t in self.parts[s]:
                    self._partition(s, t)
            self.parts = ([], [])

    def tables(self, empty: tuple[pa.Schema, pa.Schema]) -> tuple[pa.Table, pa.Table]:
        """In-memory candidates of both sides (only when nothing was spilled)."""
        assert not self.spilled
        return tuple(  # type: ignore[return-value]
            pa.concat_tables(self.parts[s], promote_options="permissive") if self.parts[s] else empty[s].empty_table()
            for s in (0, 1))

    def bucket_tables(self, empty: tuple[pa.Schema, pa.Schema]) -> Iterator[tuple[pa.Table, pa.Table]]:
        """(before, after) candidates of each bucket in turn (after spilling)."""
        assert self.directory is not None
        for w in self._writers.values():
            w.close()
        self._writers.clear()
        for bucket in range(self.buckets):
            out = []
            for side in (0, 1):
                path = self._path(side, bucket)
                if os.path.exists(path):
                    with pa.memory_map(path) as source:
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
        directory = _spill_root()
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
        with pa.memory_map(self.path) as source:
            reader = pa.ipc.open_file(source)
            for i in range(reader.num_record_batches):
                batch = reader.get_batch(i)
                for start in range(0, batch.num_rows, max_rows):
                    yield batch.slice(start, max_rows)

    def materialize(self, sort_key: Sequence[str]) -> pa.Table:
        if self.table is not None:
            return self.table
        with pa.memory_map(self.path) as source:
            table = pa.ipc.open_file(source).read_all()
        return table.sort_by([(k, "ascending") for k in sort_key]) if table.num_rows else table

    def reduce(self, fn: Callable[[pa.Table], int]) -> int:
        """Sum of ``fn`` over the rows, one batch at a time."""
        if self.table is not None:
            return fn(self.table)
        return sum(fn(pa.Table.from_batches([b])) for b in self.batches())
