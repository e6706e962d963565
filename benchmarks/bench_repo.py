"""Repository core timings: init, a 3-table transaction, log over 1,000 commits, open + main~100.

Run: ``python benchmarks/bench_repo.py``."""

from __future__ import annotations

import sys
import time

import pyarrow as pa

from common import fresh_dir, median_time as timed, print_table

import trimerge


def main() -> int:
    root = fresh_dir("repo-bench")
    counter = iter(range(10**9))
    t_init = timed(lambda: trimerge.Repository.init(root / f"r{next(counter)}"))

    repo = trimerge.Repository.init(root / "main")
    for name in ("a", "b", "c"):
        repo.create_table(name, pa.table({"id": pa.array(range(1000), pa.int64()), "v": range(1000)}), primary_key="id")
    keys = iter(range(10_000, 10**9))

    def three_tables():
        with repo.transaction(message="3 tables") as tx:
            for name in ("a", "b", "c"):
                k = next(keys)
                tx.upsert(name, pa.table({"id": pa.array([k, 1], pa.int64()), "v": [k, k]}))

    t_tx = timed(three_tables, repeat=10)
    # A 1,000-commit history.
    with_log = trimerge.Repository.init(root / "log")
    with_log.create_table("t", pa.table({"id": pa.array([0], pa.int64()), "v": [0]}), primary_key="id")
    t0 = time.perf_counter()
    for i in range(999):
        with_log.upsert("t", pa.table({"id": pa.array([0], pa.int64()), "v": [i + 1]}), message=f"c{i}")
    t_commit = (time.perf_counter() - t0) / 999
    fresh = trimerge.Repository.open(root / "log", read_only=True)
    t_log_cold = timed(lambda: trimerge.Repository.open(root / "log", read_only=True).log("main"), repeat=3)
    t_log_warm = timed(lambda: fresh.log("main"), repeat=3)
    t_open_resolve = timed(lambda: trimerge.Repository.open(root / "log").resolve("main~100"), repeat=5)
    rows = [
        {"operation": "init", "seconds": t_init},
        {"operation": "3-table transaction (upsert 2 rows each)", "seconds": t_tx},
        {"operation": "one-table one-row commit (mean of 999)", "seconds": t_commit},
        {"operation": "log of 1,000 commits (cold open)", "seconds": t_log_cold},
        {"operation": "log of 1,000 commits (warm)", "seconds": t_log_warm},
        {"operation": "open read-write + resolve main~100", "seconds": t_open_resolve},
    ]
    print_table(rows, ["operation", "seconds"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
