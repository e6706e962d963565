"""Executor-side reading for Spark diffs: imports only pylance and pyarrow.

Shipped to executors by value (cloudpickle), so executors need ``pylance`` and ``pyarrow`` but not
trimerge itself. A task is a small JSON document: dataset URI, storage options, Lance branch, pinned version and
either a fragment (optionally a row slice of it) or stable row ids (base64 of uint64 bytes) — never fragment
objects, which would drag the whole manifest along.
"""

from __future__ import annotations

import json
from typing import Iterator

BATCH_ROWS = 65536


def open_pinned(path: str, lance_branch: str, version: int, storage_options: dict | None = None):
    import lance

    ds = lance.dataset(path, storage_options=storage_options)
    if lance_branch == "main":
        return ds.checkout_version(version) if ds.version != version else ds
    return ds.checkout_version((lance_branch, version))


def read_task(task: dict, columns: list[str]):
    """Yield the task's rows as record batches with exactly ``columns``."""
    import base64

    import pyarrow as pa

    ds = open_pinned(task["path"], task["lance_branch"], task["version"], task.get("storage_options"))
    if task["mode"] == "rows":
        data = base64.b64decode(task["row_ids_b64"])
        ids = pa.Array.from_buffers(pa.uint64(), len(data) // 8, [None, pa.py_buffer(data)])
        table = ds._take_rows(ids, columns=columns)
        yield from table.to_batches(max_chunksize=BATCH_ROWS)
        return
    fragment = ds.get_fragment(task["fragment"])
    scanner = ds.scanner(columns=columns, fragments=[fragment], batch_size=BATCH_ROWS,
                         offset=task.get("offset"), limit=task.get("limit"))
    yield from scanner.to_batches()


def make_reader(columns: list[str], schema_bytes: bytes):
    """The ``mapInArrow`` function: task JSON strings in, rows of one table side out."""

    def read(batches: Iterator) -> Iterator:
        import warnings

        import pyarrow as pa

        # Spark's Python workers are forked; each task opens its own datasets, so nothing is shared.
        warnings.filterwarnings("ignore", message="lance is not fork-safe")

        schema = pa.ipc.read_schema(pa.py_buffer(schema_bytes))
        for batch in batches:
            for text in batch.column(0).to_pylist():
                for rb in read_task(json.loads(text), columns):
                    yield pa.RecordBatch.from_arrays([rb.column(c).cast(schema.field(c).type) for c in columns],
                                                     schema=schema)

    return read
