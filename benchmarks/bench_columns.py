"""Column-level writes: a backfill, its diff, its merge back while main ingests, a re-embedding —
beside what Lance's own column writes cost and what a whole-row rewrite costs.

The table: 30,000 rows of ``id`` (int64), ``title`` (short text), ``body`` (a 3 KB text) and
``emb`` (64 float32). Measured, each step in its own process (peak RSS is the process's own):

* backfill of a new int32 ``label`` column for every row: ``tx.add_columns`` of key + values,
  ``tx.update`` of an existing column (``write="auto"`` and forced ``"rows"``), against Lance's
  ``LanceFragment.update_columns`` + ``LanceOperation.Update`` on a plain dataset;
* ``diff`` of the backfill (counts) against reading the whole table at that ref;
* merge of the backfill branch into a main that ingested 100 rows and edited one ``body`` cell;
* re-embedding every row (``emb`` replaced).

Bytes written = growth of the repository folder. Run: ``python benchmarks/bench_columns.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

from common import fresh_dir, own_peak_rss_mb, print_table

ROWS = 30_000
DIM = 64


def folder_bytes(path: str | Path) -> int:
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file())


def table(rows: int = ROWS, seed: int = 0, start: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed)
    body = "".join(chr(97 + i % 26) for i in range(3000))
    return pa.table({
        "id": pa.array(np.arange(start, start + rows), pa.int64()),
        "title": [f"title {i}" for i in range(start, start + rows)],
        "body": [f"{i}:{body}" for i in range(start, start + rows)],
        "emb": pa.FixedSizeListArray.from_arrays(pa.array(rng.random(rows * DIM, dtype=np.float32)), DIM),
    })


def labels(seed: int = 1) -> pa.Table:
    rng = np.random.default_rng(seed)
    return pa.table({"id": pa.array(np.arange(ROWS), pa.int64()),
                     "label": pa.array(rng.integers(0, 100, ROWS), pa.int32())})


def setup(path: str) -> None:
    import trimerge

    repo = trimerge.Repository.init(path)
    repo.create_table("docs", table(), primary_key="id")
    repo.branches.create("backfill", from_ref="main")


def step(name: str, path: str) -> dict:
    """One measured step, in this process (called in a fresh interpreter)."""
    import lance
    import trimerge
    from trimerge.diff import diff
    from trimerge.merge import merge

    out: dict = {"step": name}
    if name == "lance-update-columns":  # Lance's own column write on a plain dataset
        ds = lance.dataset(path)
        before = folder_bytes(path)
        t0 = time.perf_counter()
        ds.add_columns(pa.field("label", pa.int32()))
        ds = lance.dataset(path)
        lab = labels().column("label")
        updated, fields = [], set()
        for frag in ds.get_fragments():
            ids = ds.scanner(columns=[], with_row_id=True, fragments=[frag]).to_table().column("_rowid")
            part = pa.table({"_rowid": ids, "label": lab.take(pa.array(ids.to_numpy().astype(np.int64)))})
            meta, modified = frag.update_columns(part)
            updated.append(meta)
            fields.update(modified)
        lance.LanceDataset.commit(path, lance.LanceOperation.Update(updated_fragments=updated,
                                                                    fields_modified=sorted(fields)),
                                  read_version=ds.version)
        out["seconds"] = time.perf_counter() - t0
        out["written_mb"] = (folder_bytes(path) - before) / 1e6
        out["peak_mb"] = own_peak_rss_mb()
        return out
    repo = trimerge.Repository.open(path)
    before = folder_bytes(path)
    t0 = time.perf_counter()
    if name == "backfill-add-columns":
        repo.add_columns("docs", labels(), branch="backfill")
    elif name.startswith("update-title"):
        new = pa.table({"id": pa.array(np.arange(ROWS), pa.int64()), "title": [f"T{i}" for i in range(ROWS)]})
        repo.update("docs", new, name.rsplit("-", 1)[1], branch="backfill")
    elif name == "diff-backfill":
        d = diff("main...backfill", repo=repo).tables["docs"]
        out["rows"] = d.counts.updated
        out["plan"] = d.plan.method
    elif name == "read-whole-table":
        out["rows"] = repo.read("docs", ref="backfill").num_rows
    elif name == "main-ingests":
        repo.upsert("docs", table(100, seed=3, start=ROWS))
        repo.update("docs", pa.table({"id": pa.array([5], pa.int64()), "body": ["edited on main"]}))
    elif name == "merge-backfill":
        r = merge("backfill", "main", repo=repo)
        out["status"] = r.status
    elif name == "re-embed":
        rng = np.random.default_rng(7)
        emb = pa.FixedSizeListArray.from_arrays(pa.array(rng.random(ROWS * DIM, dtype=np.float32)), DIM)
        repo.update("docs", pa.table({"id": pa.array(np.arange(ROWS), pa.int64()), "emb": emb}), branch="backfill")
    out["seconds"] = time.perf_counter() - t0
    out["written_mb"] = (folder_bytes(path) - before) / 1e6
    out["peak_mb"] = own_peak_rss_mb()
    return out


def run(name: str, path: str) -> dict:
    proc = subprocess.run([sys.executable, __file__, "--step", name, path], capture_output=True, text=True,
                          check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "--step":
        print(json.dumps(step(sys.argv[2], sys.argv[3])))
        return
    import lance

    results = []
    plain = str(fresh_dir("columns-lance") / "plain.lance")
    lance.write_dataset(table(), plain, enable_stable_row_ids=True)
    results.append(run("lance-update-columns", plain))
    repo = str(fresh_dir("columns-repo") / "repo")
    setup(repo)
    for name in ("backfill-add-columns", "diff-backfill", "read-whole-table", "main-ingests", "merge-backfill"):
        results.append(run(name, repo))
    for write in ("auto", "rows"):
        other = str(fresh_dir(f"columns-update-{write}") / "repo")
        setup(other)
        results.append(run(f"update-title-{write}", other))
    results.append(run("re-embed", repo))
    column_mb = labels().column("label").nbytes / 1e6
    emb_mb = table().column("emb").nbytes / 1e6
    print_table(results, ["step", "seconds", "written_mb", "peak_mb", "rows", "plan", "status"])
    print(f"label column: {column_mb:.2f} MB raw; emb column: {emb_mb:.2f} MB raw; "
          f"table: {folder_bytes(plain) / 1e6:.1f} MB on disk")


if __name__ == "__main__":
    main()
