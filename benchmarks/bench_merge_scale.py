"""Merges at scale: a source that changed half of a table (or all of it), merged into a dest that
changed 0.1% — locally, on Spark, and as a naive polars three-way rewrite.

A 4-column table (id, a, b, c) of N rows; the source updates N/2 rows (column ``a``; with
``--full``, every row), the dest updates 0.1% (column ``b``, some of them rows the source changed
too: cell merges). Each merge runs in its own process so its peak RSS is its own (for Spark: the
driver's; executors are ``local-cluster[2,1,1024]``, 1 GB each). The local and the Spark merge go
into copies of dest, and their results are checked to be identical.

Run: ``python benchmarks/bench_merge_scale.py`` (4M and 8M rows; ``--rows 1000000`` for one size;
``--engines local,spark``; ``--full --rows 20000000 --engines local,spark`` for the full-change merge).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

import numpy as np
import pyarrow as pa

from common import fresh_dir, peak_rss_mb, print_table

CHILD = r"""
import json, sys, time
sys.path.insert(0, sys.argv[3])
from common import own_peak_rss_mb
import trimerge
from trimerge.merge import merge
repo = trimerge.Repository.open(sys.argv[1])
spark = None
if sys.argv[2] == "spark":
    from trimerge.diff.spark import get_spark
    spark = get_spark("local-cluster[2,1,1024]")
t0 = time.perf_counter()
if sys.argv[2] in ("local", "spark"):
    merge("theirs", "ours_" + sys.argv[2], repo=repo, engine=sys.argv[2], spark=spark)
else:
    import polars as pl
    base = repo.merge_base("ours", "theirs")
    b, o, t = (pl.from_arrow(repo.read("t", ref=r)) for r in (base.id, "ours", "theirs"))
    j = b.join(o, on="id", suffix="_o").join(t, on="id", suffix="_t")
    merged = j.select("id", *[pl.when(pl.col(f"{c}_t") != pl.col(c)).then(pl.col(f"{c}_t")).otherwise(pl.col(f"{c}_o"))
                              .alias(c) for c in ("a", "b", "c")])
    import lance
    lance.write_dataset(merged.to_arrow(), sys.argv[1] + "-naive.lance", mode="overwrite")
print("RESULT " + json.dumps({"seconds": time.perf_counter() - t0, "peak_rss_mb": own_peak_rss_mb()}))
"""


def build(n: int, full: bool, share: float = 0.5) -> str:
    import trimerge

    path = fresh_dir(f"merge-scale-{n}{'-full' if full else ''}-{share}")
    rng = np.random.default_rng(5)
    table = pa.table({"id": np.arange(n, dtype=np.int64), "a": rng.integers(0, 1000, n),
                      "b": rng.random(n), "c": pa.array([f"row {i}" for i in range(n)])})
    repo = trimerge.Repository.init(path)
    repo.create_table("t", table, ["id"])
    repo.branches.create("ours", from_ref="main")
    repo.branches.create("theirs", from_ref="main")
    src = np.arange(n) if full else np.sort(rng.choice(n, max(1, int(n * share)), replace=False))
    dst = np.sort(rng.choice(n, max(1, n // 1000), replace=False))
    theirs = table.take(pa.array(src))
    repo.upsert("t", theirs.set_column(1, "a", pa.array(theirs.column("a").to_numpy() + 1)), branch="theirs")
    ours = table.take(pa.array(dst))
    repo.upsert("t", ours.set_column(2, "b", pa.array(ours.column("b").to_numpy() + 1.0)), branch="ours")
    for engine in ("local", "spark"):
        repo.branches.create(f"ours_{engine}", from_ref="ours")
    return str(path)


def identical(path: str) -> bool:
    """The local and the Spark merge left the same rows."""
    import trimerge

    repo = trimerge.Repository.open(path, read_only=True)
    a, b = (repo.read("t", ref=f"ours_{e}").sort_by("id") for e in ("local", "spark"))
    return a.equals(b)


def run(path: str, engine: str) -> dict:
    here = str(__import__("pathlib").Path(__file__).resolve().parent)
    out = subprocess.run([sys.executable, "-c", CHILD, path, engine, here], capture_output=True, text=True, check=True)
    line = next(line for line in out.stdout.splitlines() if line.startswith("RESULT "))
    return json.loads(line[7:])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, action="append", help="table size (repeatable; default 4M and 8M)")
    ap.add_argument("--engines", default="local,naive", help="comma-separated: local, spark, naive")
    ap.add_argument("--full", action="store_true", help="the source changes every row")
    ap.add_argument("--shares", default="0.5", help="comma-separated shares of the rows the source changes")
    args = ap.parse_args()
    engines = args.engines.split(",")
    rows = []
    cases = [(n, float(sh)) for n in (args.rows or [4_000_000, 8_000_000]) for sh in
             (["1"] if args.full else args.shares.split(","))]
    for n, share in cases:
        t0 = time.perf_counter()
        path = build(n, args.full, share)
        changed = n if args.full else max(1, int(n * share))
        print(f"{n:,} rows built in {time.perf_counter() - t0:.1f} s (source changed {changed:,})", flush=True)
        for engine in engines:
            r = run(path, engine)
            rows.append({"rows": f"{n:,}", "changed": f"{changed:,}", "engine": engine, **r})
            print(rows[-1], flush=True)
        if {"local", "spark"} <= set(engines):
            same = identical(path)
            print(f"local and spark results identical: {same}", flush=True)
            if not same:
                return 1
    print_table(rows, ["rows", "changed", "engine", "seconds", "peak_rss_mb"])
    print(f"(this process: {peak_rss_mb():.0f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
