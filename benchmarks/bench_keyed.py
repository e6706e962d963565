"""One-row keyed writes on a small and a large table, side by side: the cost should follow the
change (issue 44), however the write is spelled.

For each size (100k and 4M rows of ``id`` int64, ``v`` float64, ``s`` text; key index on ``id``),
the median of 7 runs of: a one-row upsert, a delete by key filter (``id = k``), a delete by key
table (``delete_keys``), the filter delete as it ran before (Lance evaluates it), and a one-row ``update`` of ``v``. The last column is the large/small ratio.
Run: ``python benchmarks/bench_keyed.py [small_rows large_rows]``.
"""

from __future__ import annotations

import statistics
import sys
import time

import numpy as np
import pyarrow as pa

from common import fresh_dir, print_table

REPEAT = 7


def _table(n: int, start: int = 0) -> pa.Table:
    ids = np.arange(start, start + n)
    return pa.table({"id": pa.array(ids, pa.int64()), "v": pa.array(ids * 0.5),
                     "s": pa.array([f"s{i}" for i in ids])})


def _lance_evaluates(repo, where: str) -> None:
    """The delete as it ran before filters naming keys took the key index (issue 44's baseline)."""
    from trimerge.lineage import transaction

    recognise = transaction.pinned_keys
    transaction.pinned_keys = lambda *args: None
    try:
        repo.delete("t", where)
    finally:
        transaction.pinned_keys = recognise


def measure(rows: int) -> dict[str, float]:
    import trimerge

    repo = trimerge.Repository.init(str(fresh_dir(f"keyed-{rows}") / "repo"))
    repo.create_table("t", _table(rows), primary_key="id")
    rng = np.random.default_rng(rows)
    keys = iter(rng.choice(rows, size=5 * REPEAT + 1, replace=False).tolist())

    def one(k: int) -> pa.Table:
        return pa.table({"id": pa.array([k], pa.int64()), "v": pa.array([-1.0])})

    writes = {
        "upsert": lambda: repo.upsert("t", _table(1, next(keys)).set_column(1, "v", pa.array([-1.0]))),
        "delete (filter id = k)": lambda: repo.delete("t", f"id = {next(keys)}"),
        "delete (filter, as before: Lance evaluates it)": lambda: _lance_evaluates(repo, f"id = {next(keys)}"),
        "delete_keys": lambda: repo.delete_keys("t", pa.table({"id": pa.array([next(keys)], pa.int64())})),
        "update": lambda: repo.update("t", one(next(keys))),
    }
    out = {}
    for name, write in writes.items():
        times = []
        for _ in range(REPEAT):
            t0 = time.perf_counter()
            write()
            times.append(time.perf_counter() - t0)
        out[name] = statistics.median(times) * 1000
    return out


def main() -> None:
    small, large = (int(a) for a in sys.argv[1:3]) if len(sys.argv) == 3 else (100_000, 4_000_000)
    a, b = measure(small), measure(large)
    print_table([{"write": k, f"ms @ {small:,}": a[k], f"ms @ {large:,}": b[k], "ratio": b[k] / a[k]} for k in a],
                ["write", f"ms @ {small:,}", f"ms @ {large:,}", "ratio"])


if __name__ == "__main__":
    main()
