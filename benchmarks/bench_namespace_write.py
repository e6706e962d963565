"""A one-row LanceDB ``add`` that becomes a trimerge commit vs ``repo.upsert`` of the same row (issue 40).

Run: ``python benchmarks/bench_namespace_write.py [ROWS]`` (default 200,000 rows). One table on
main and a fork on a branch; each write adds one new row, warm (connection and table handle made
once, as a LanceDB user keeps them), median of 15. Side by side in one run:

- ``repo.upsert(table, row, branch=...)``: trimerge's own one-row commit;
- LanceDB ``tbl.add(row)`` through the in-process namespace (``lancedb.connect_namespace("trimerge")``):
  Lance writes the fragment, then asks the namespace to commit it, which publishes one trimerge
  commit under the branch's lease;
- LanceDB ``tbl.add(row)`` on a plain Lance dataset outside any repository: the floor.

Every write is checked to have landed as a commit (the branch's log grows by one per write).
"""

from __future__ import annotations

import os
import sys
import time

os.environ.setdefault("LANCEDB_LOG", "error")  # LanceDB's bundled Lance warns about trimerge's key index

import lancedb
import pyarrow as pa

from common import fresh_dir, print_table

import trimerge

REPEAT = 15


def row(i: int) -> pa.Table:
    return pa.table({"id": pa.array([i], pa.int64()), "v": pa.array([float(i)]), "s": [f"row {i}"]})


def median_write(write, start: int) -> float:
    times = []
    for i in range(REPEAT):
        began = time.perf_counter()
        write(row(start + i))
        times.append(time.perf_counter() - began)
    return sorted(times)[len(times) // 2]


def main() -> int:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 200_000
    work = fresh_dir("namespace_write")
    base = pa.table({"id": pa.array(range(n), pa.int64()), "v": pa.array([float(i) for i in range(n)]),
                     "s": [f"row {i}" for i in range(n)]})
    repo = trimerge.Repository.init(str(work / "repo"))
    repo.create_table("items", base, primary_key="id")
    repo.branches.create("feat")
    repo.upsert("items", row(-1), branch="feat")  # the fork exists: both refs write their own Lance branch

    results = []
    for branch in ("main", "feat"):
        log_before = len(list(repo.log(branch)))
        upsert = median_write(lambda t: repo.upsert("items", t, branch=branch), 10 * n)
        table = lancedb.connect_namespace("trimerge", {"root": repo.uri, "ref": branch}).open_table("items")
        add = median_write(table.add, 20 * n)
        landed = len(list(trimerge.Repository.open(repo.uri).log(branch))) - log_before
        assert landed == 2 * REPEAT, f"{landed} commits for {2 * REPEAT} writes on {branch}"
        results.append({"branch": branch, "repo.upsert ms": upsert * 1e3, "LanceDB add ms": add * 1e3,
                        "ratio": add / upsert})

    plain = lancedb.connect(str(work / "plain")).create_table("items", base)
    floor = median_write(plain.add, 30 * n)
    print(f"one-row writes into a {n:,}-row table, median of {REPEAT} (warm)")
    print_table(results, ["branch", "repo.upsert ms", "LanceDB add ms", "ratio"])
    print(f"plain LanceDB add outside any repository (no commit, no lease): {floor * 1e3:.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
