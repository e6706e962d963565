"""gc: the storage bound after aborted writes, and what one gc run costs, on local disk and S3.

* **Storage bound.** A 200k-row table, then ten aborted overwrites (each leaves the overwrite's
  version and its undo); the live size is that of a twin repository that never aborted.
* **gc cost.** A repository with 40 branches (each a fork with two commits), half of them deleted;
  the time of ``gc(retention=now)`` (reclaims the deleted half) and of a second, idle run.

Run: ``python benchmarks/bench_gc.py`` (needs ``pip install -e '.[test]'`` for the S3 server).
"""

from __future__ import annotations

import sys
import time
from datetime import timedelta
from pathlib import Path

import pyarrow as pa

from common import fresh_dir, print_table

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import trimerge  # noqa: E402

from s3server import S3Server  # noqa: E402

NOW = timedelta(0)
ROWS = 200_000


def table(fill: str) -> pa.Table:
    return pa.table({"id": pa.array(range(ROWS), pa.int64()), "v": [f"{fill}{i % 977}" for i in range(ROWS)]})


def tables_size(repo: trimerge.Repository) -> int:
    return repo.table_store.files.tree_size("")


def storage_bound(make_uri, options) -> dict[str, str]:
    twin = trimerge.Repository.init(make_uri("twin"), storage_options=options)
    twin.create_table("t", table("x"), "id")
    live = tables_size(twin)
    repo = trimerge.Repository.init(make_uri("aborted"), storage_options=options)
    repo.create_table("t", table("x"), "id")
    for _ in range(10):
        try:
            with repo.transaction() as tx:
                tx.overwrite("t", table("y"))
                raise RuntimeError("abort")
        except RuntimeError:
            pass
    before = tables_size(repo)
    t0 = time.perf_counter()
    report = repo.gc(retention=NOW)
    took = time.perf_counter() - t0
    after = tables_size(repo)
    return {"live size": f"{live / 1e6:.2f} MB", "after 10 aborted overwrites": f"{before / 1e6:.2f} MB "
            f"({before / live:.1f}x)", "after gc(now)": f"{after / 1e6:.2f} MB ({after / live:.2f}x)",
            "gc time": f"{took * 1000:.0f} ms ({report.versions_removed} versions removed)"}


def gc_cost(make_uri, options) -> dict[str, str]:
    repo = trimerge.Repository.init(make_uri("many"), storage_options=options)
    repo.create_table("t", pa.table({"id": pa.array(range(1000), pa.int64()), "v": range(1000)}), "id")
    for b in range(40):
        repo.branches.create(f"b{b}")
        for c in range(2):
            repo.upsert("t", pa.table({"id": pa.array([b * 10 + c], pa.int64()), "v": [-1]}), branch=f"b{b}")
    for b in range(0, 40, 2):
        repo.branches.delete(f"b{b}", force=True)
    t0 = time.perf_counter()
    first = repo.gc(retention=NOW)
    busy = time.perf_counter() - t0
    t0 = time.perf_counter()
    repo.gc(retention=NOW)
    idle = time.perf_counter() - t0
    return {"gc reclaiming 20 of 40 branches": f"{busy * 1000:.0f} ms ({len(first.commits_reclaimed)} commits, "
            f"{len(first.forks_removed)} forks)", "gc with nothing to do (40 branches, 81 commits)": f"{idle * 1000:.0f} ms"}


def main() -> int:
    root = fresh_dir("gc-bench")
    local = {**storage_bound(lambda n: str(root / n), None), **gc_cost(lambda n: str(root / n), None)}
    with S3Server() as server:
        remote = {**storage_bound(lambda n: server.uri(f"gcbench/{n}"), server.storage_options),
                  **gc_cost(lambda n: server.uri(f"gcbench/{n}"), server.storage_options)}
    print_table([{"measure": k, "local disk": local[k], "S3 (SeaweedFS)": remote[k]} for k in local],
                ["measure", "local disk", "S3 (SeaweedFS)"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
