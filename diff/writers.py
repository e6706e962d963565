"""Writing a table's diff rows to Parquet, JSON lines or Lance, whichever engine computed it.

A diff computed by the local engine is written batch by batch (bounded memory, also when it
spilled); one computed on Spark is written by the executors and never collected on the driver
(unless only its first rows or some columns are wanted, which the local path streams).
"""

from __future__ import annotations

import json
from typing import IO, TYPE_CHECKING, Iterator, Sequence

import pyarrow as pa

from trimerge.lineage.errors import InvalidOperationError

if TYPE_CHECKING:
    from trimerge.diff.engine import TableDiff

FORMATS = ("parquet", "jsonl", "lance")


def batches(td: "TableDiff", columns: Sequence[str] | None = None, limit: int | None = None) -> Iterator[pa.RecordBatch]:
    """The changed rows as record batches: the first ``limit`` by key, or all of them streamed."""
    if limit is not None:
        yield from td.head(limit, columns).to_batches()
    else:
        yield from td.iter_batches(columns=columns)


def write(td: "TableDiff", target: str, fmt: str, *, columns: Sequence[str] | None = None,
          limit: int | None = None, storage_options: dict[str, str] | None = None) -> None:
    """Write one table's diff rows to ``target`` (a file for Parquet and JSON lines, a dataset for Lance)."""
    if fmt not in FORMATS:
        raise InvalidOperationError(f"unknown diff output format {fmt!r} (use {', '.join(FORMATS)})")
    if td.engine == "spark" and fmt != "jsonl" and columns is None and limit is None:
        _write_from_executors(td, target, fmt, storage_options)
    elif fmt == "parquet":
        write_parquet(td, target, columns, limit)
    elif fmt == "lance":
        _write_lance_locally(td, target, columns, limit, storage_options)
    else:
        with open(target, "w") as sink:
            write_jsonl(td, sink, None, columns, limit)


def write_parquet(td: "TableDiff", path: str, columns: Sequence[str] | None = None, limit: int | None = None) -> None:
    import pyarrow.parquet as pq

    writer = None
    try:
        for batch in batches(td, columns, limit):
            if writer is None:
                writer = pq.ParquetWriter(path, batch.schema)
            writer.write_batch(batch)
    finally:
        if writer is not None:
            writer.close()
    if writer is None:
        pq.write_table(td.rows(columns).slice(0, 0), path)


def write_jsonl(td: "TableDiff", sink: IO[str], table: str | None, columns: Sequence[str] | None = None,
                limit: int | None = None) -> None:
    """One JSON object per changed row (with ``"table": table`` first, when given)."""
    head = {"table": table} if table is not None else {}
    for batch in batches(td, columns, limit):
        for row in batch.to_pylist():
            sink.write(json.dumps({**head, **row}, default=str) + "\n")


def _write_lance_locally(td: "TableDiff", uri: str, columns: Sequence[str] | None, limit: int | None,
                         storage_options: dict[str, str] | None) -> None:
    import lance

    it = batches(td, columns, limit)
    first = next(it, None)
    if first is None:
        lance.write_dataset(td.rows(columns).slice(0, 0), uri, mode="overwrite", storage_options=storage_options)
        return
    reader = pa.RecordBatchReader.from_batches(first.schema, _chain(first, it))
    lance.write_dataset(reader, uri, mode="overwrite", storage_options=storage_options)


def _chain(first: pa.RecordBatch, rest: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    yield first
    yield from rest


def _write_from_executors(td: "TableDiff", target: str, fmt: str, storage_options: dict[str, str] | None) -> None:
    from trimerge.diff.spark import pinned, write_lance

    remote = "://" in target and not target.startswith("file://")
    if remote and fmt == "parquet":
        raise InvalidOperationError("Spark writes Parquet through Hadoop filesystems only; for an object-store "
                                    "target use a Lance output (a path ending in .lance)")
    with pinned(td):
        frame = td.to_spark()
        if fmt == "lance":
            write_lance(frame, target, storage_options if remote else None)
        else:
            frame.write.mode("overwrite").parquet(target)
