"""A change batch written out (``trimerge changes``): JSON lines, or one Parquet / Arrow IPC file
per table beside ``changes.json`` (the range, counts and each table's key)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import IO, Any

from trimerge.lineage.errors import InvalidOperationError
from trimerge.lineage.storage.jsonvalues import jsonable

#: Rows converted to Python at a time for JSON lines (bounded memory on a large batch).
JSONL_ROWS = 4096


def write_batch(batch: Any, fmt: str, output: str | None) -> int:
    """Write ``batch`` as ``fmt`` (``jsonl``, ``parquet`` or ``arrow``) to ``output`` (jsonl: a
    file, or stdout when None; the others: a directory, created if absent); the rows written."""
    if fmt == "jsonl":
        if output is None:
            return _jsonl(batch, sys.stdout)
        with open(output, "w", encoding="utf-8") as out:
            return _jsonl(batch, out)
    if fmt not in ("parquet", "arrow") or output is None:
        raise InvalidOperationError(f"--format {fmt} needs -o DIRECTORY")
    folder = Path(output)
    if folder.exists() and not folder.is_dir():
        raise InvalidOperationError(f"-o {output}: not a directory (parquet and arrow write one file per table)")
    folder.mkdir(parents=True, exist_ok=True)
    total = 0
    files = {}
    for name in batch.diffs:
        rows = batch.tables[name]
        path = folder / f"{name}.{'parquet' if fmt == 'parquet' else 'arrow'}"
        if fmt == "parquet":
            import pyarrow.parquet as pq

            pq.write_table(rows, path)
        else:
            import pyarrow as pa

            with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, rows.schema) as writer:
                writer.write_table(rows)
        files[name] = path.name
        total += rows.num_rows
    meta = {**batch.to_json(), "files": files, "primary_keys": {n: list(k) for n, k in batch.primary_keys.items()}}
    (folder / "changes.json").write_text(json.dumps(meta, indent=2, default=str) + "\n", encoding="utf-8")
    return total


def _jsonl(batch: Any, out: IO[str]) -> int:
    total = 0
    for name in batch.diffs:
        for record in batch.iter_batches(name, JSONL_ROWS):
            for row in record.to_pylist():
                out.write(json.dumps({"table": name, **jsonable(row)}, separators=(",", ":")) + "\n")
                total += 1
    out.flush()
    return total
