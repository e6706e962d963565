"""Zero-copy import benchmark: ``repo.import_table`` of a ≥ 1 GB Lance dataset vs ``create_table``
(a copy) of the same data.

The source is TPC-H lineitem (scale 1, 6M rows, key ``l_orderkey, l_linenumber``) plus a random
32-float ``emb`` column (incompressible: it takes the dataset past 1 GB on disk), written once to
``benchmarks/_work/import-source-1g.lance`` and reused. Measured:

* ``import_table`` with the repository's default settings (the import commit runs no upkeep; the
  table's first write builds its BTREE key index, as for any table of ``index.key_min_rows`` rows);
* ``import_table`` with that upkeep off (``index.key_min_rows = 0``): the import itself (source
  checks + shallow clone), target < 2 s and < 1 MB written;
* the same split into its two steps (``open_source``: manifest + key-column scan; ``clone``);
* ``create_table`` of the same rows (read from the source into memory, then written), same settings.

Bytes written = growth of the repository folder. Then a one-row upsert and a keyed read on the
imported table. Run: ``python benchmarks/bench_import.py`` (``--rows N`` copies only the first N
rows into the ``create_table`` side, ``--rebuild`` rewrites the source).
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

from common import WORK, fresh_dir, lineitem, print_table

import lance
import trimerge
from trimerge.lineage.tables import importing

SOURCE = WORK / "import-source-1g.lance"
KEY = ["l_orderkey", "l_linenumber"]
DIM = 32


def folder_bytes(path: Path) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)


def build_source(rebuild: bool) -> lance.LanceDataset:
    if SOURCE.exists() and not rebuild:
        return lance.dataset(str(SOURCE))
    table = lineitem(1)
    rng = np.random.default_rng(3)
    emb = rng.random((table.num_rows, DIM), dtype=np.float32)
    table = table.append_column("emb", pa.FixedSizeListArray.from_arrays(pa.array(emb.ravel()), DIM))
    fresh_dir(SOURCE.name)
    lance.write_dataset(table, str(SOURCE))  # the Lance default: no stable row ids
    return lance.dataset(str(SOURCE))


def new_repo(name: str, key_index: bool) -> tuple[trimerge.Repository, Path, int]:
    path = fresh_dir(f"import-{name}")
    repo = trimerge.Repository.init(path)
    if not key_index:
        repo.settings.set("index.key_min_rows", 0)
    return repo, path, folder_bytes(path)


def measure_import(name: str, key_index: bool) -> dict:
    repo, path, before = new_repo(name, key_index)
    t0 = time.perf_counter()
    repo.import_table("lineitem", str(SOURCE), KEY)
    seconds = time.perf_counter() - t0
    row = {"operation": f"import_table ({'default upkeep' if key_index else 'no key-index upkeep'})",
           "seconds": seconds, "MB written": (folder_bytes(path) - before) / 1e6,
           "tables/ MB": folder_bytes(path / "tables") / 1e6}
    t0 = time.perf_counter()
    got = repo.read("lineitem", filter="l_orderkey = 5 AND l_linenumber = 1")
    row["keyed read s"] = time.perf_counter() - t0
    assert got.num_rows == 1
    current = repo.read("lineitem", filter="l_orderkey = 3 AND l_linenumber = 1")
    changed = current.set_column(current.schema.get_field_index("l_comment"), "l_comment", pa.array(["bench"]))
    t0 = time.perf_counter()
    repo.upsert("lineitem", changed)
    row["1-row upsert s"] = time.perf_counter() - t0
    return row


def measure_steps() -> list[dict]:
    repo, path, before = new_repo("steps", key_index=False)
    t0 = time.perf_counter()
    source = importing.open_source(str(SOURCE), tuple(KEY), version=None, storage_options=None)
    checks = time.perf_counter() - t0
    t0 = time.perf_counter()
    importing.clone(source, KEY, repo.table_store, "lineitem-01aaaaaaaaaaaaaaaaaaaaaaaa")
    cloned = time.perf_counter() - t0
    return [{"operation": "  open_source (manifest + key scan)", "seconds": checks},
            {"operation": "  clone (shallow clone + key columns non-null)", "seconds": cloned,
             "MB written": (folder_bytes(path) - before) / 1e6}]


def measure_copy(rows: int | None, key_index: bool) -> dict:
    repo, path, before = new_repo("copy" + ("" if key_index else "-nokeyidx"), key_index)
    t0 = time.perf_counter()
    ds = lance.dataset(str(SOURCE))
    table = ds.to_table() if rows is None else ds.to_table(limit=rows)
    read = time.perf_counter() - t0
    t0 = time.perf_counter()
    repo.create_table("lineitem", table, KEY)
    seconds = time.perf_counter() - t0
    what = "all rows" if rows is None else f"first {rows:,} rows"
    return {"operation": f"create_table, {what} ({'default upkeep' if key_index else 'no key-index upkeep'})",
            "seconds": seconds, "read s": read, "MB written": (folder_bytes(path) - before) / 1e6,
            "tables/ MB": folder_bytes(path / "tables") / 1e6}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=None, help="rows copied by the create_table side (default: all)")
    parser.add_argument("--rebuild", action="store_true", help="rewrite the source dataset")
    args = parser.parse_args()
    source = build_source(args.rebuild)
    print(f"source: {SOURCE} — {source.count_rows():,} rows, {folder_bytes(SOURCE) / 1e9:.2f} GB on disk, "
          f"{len(source.get_fragments())} fragments, stable row ids: {source.has_stable_row_ids}")
    rows = [measure_import("default", key_index=True), measure_import("nokeyidx", key_index=False)]
    rows += measure_steps()
    rows += [measure_copy(args.rows, key_index=False), measure_copy(args.rows, key_index=True)]
    print_table(rows, ["operation", "seconds", "MB written", "tables/ MB", "read s", "keyed read s", "1-row upsert s"])


if __name__ == "__main__":
    main()
