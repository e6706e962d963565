"""Small-change benchmark: the latency of diffing and merging a few rows, the everyday case.

A repository of three 100k-row tables; a branch changes ``--rows`` rows of one of them. Measured
side by side (median of ``--repeat`` runs, warm):

* ``diff rows``: ``diff(main, feature).tables["a"].rows()``;
* ``diff counts``: counts of every table (two unchanged: their answer needs no row read);
* ``merge``: a fresh branch at main merges feature (one two-parent commit);
* ``full join``: what a user would otherwise write: read both versions of the table with Lance
  and compare them with a polars full join on the key.

Run: ``python benchmarks/bench_small_changes.py`` (``--rows 1000`` for a larger change). Exits 1
if the full join and trimerge disagree on the changed keys.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np
import polars as pl
import pyarrow as pa

from common import fresh_dir, median_time, print_table

import trimerge
from trimerge.diff import diff
from trimerge.merge import merge

ROWS = 100_000


def table(seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    return pa.table({"id": np.arange(ROWS, dtype=np.int64), "x": rng.random(ROWS),
                     "n": rng.integers(0, 1000, ROWS), "s": pa.array([f"v{i % 997}" for i in range(ROWS)])})


def build(changed_rows: int) -> trimerge.Repository:
    repo = trimerge.Repository.init(fresh_dir("small_changes"))
    for i, name in enumerate("abc"):
        repo.create_table(name, table(i), primary_key=["id"])
    repo.branches.create("feature", from_ref="main")
    ids = np.random.default_rng(9).choice(ROWS, changed_rows, replace=False)
    edits = table(0).take(pa.array(np.sort(ids)))
    edits = edits.set_column(1, "x", pa.array(np.full(changed_rows, -1.0)))
    repo.upsert("a", edits, branch="feature")
    return repo


def full_join(repo: trimerge.Repository) -> pl.DataFrame:
    """Both versions of table a read whole and joined: what the diff replaces."""
    before, after = (pl.from_arrow(repo.read("a", ref=ref)) for ref in ("main", "feature"))
    j = before.join(after, on="id", how="full", coalesce=True, suffix="_after")
    return j.filter(pl.any_horizontal(*[~pl.col(c).eq_missing(pl.col(f"{c}_after")) for c in ("x", "n", "s")]))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1, help="rows the branch changes (default 1)")
    ap.add_argument("--repeat", type=int, default=15)
    args = ap.parse_args()
    repo = build(args.rows)
    rows = diff("main", "feature", repo=repo).tables["a"].rows()
    joined = full_join(repo)
    if sorted(rows.column("id").to_pylist()) != sorted(joined["id"].to_list()):
        print("MISMATCH: the full join and the diff name different keys", file=sys.stderr)
        return 1

    counter = iter(range(10**6))

    def merge_once() -> None:
        name = f"m{next(counter)}"
        repo.branches.create(name, from_ref="main")
        merge("feature", name, repo=repo)

    results = [
        {"operation": "diff rows (trimerge)", "ms": 1000 * median_time(
            lambda: diff("main", "feature", repo=repo).tables["a"].rows(), args.repeat)},
        {"operation": "diff counts, 3 tables (trimerge)", "ms": 1000 * median_time(
            lambda: {t: d.counts for t, d in diff("main", "feature", repo=repo).tables.items()}, args.repeat)},
        {"operation": "merge (trimerge)", "ms": 1000 * median_time(merge_once, args.repeat)},
        {"operation": "full join of table a (polars)", "ms": 1000 * median_time(lambda: full_join(repo), args.repeat)},
    ]
    print(f"{args.rows} changed row(s) of a {ROWS:,}-row table; {time.strftime('%Y-%m-%d %H:%M')}")
    print_table(results, ["operation", "ms"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
