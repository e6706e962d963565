"""Spark benchmark: a full-change diff with 1 GB executors and driver, and the local/Spark crossover.

1. Full change: a 20M-row, 5-column table, every row updated on a branch. The diff runs through
   Spark on ``local-cluster[2,1,1024]`` (two executor JVMs of 1 GB, driver 1 GB), streaming its
   output to Parquet from the executors; the local engine runs the same diff beside it twice:
   streamed (default 1 GiB memory budget: candidates spill to key-hash buckets, output written
   batch by batch) and all in memory (unlimited budget, ``rows()``). Each run is its own process,
   so peak RSS is measured per engine.
2. Crossover: a 10M-row table with k rows changed (clustered), k from 10k to 5M: seconds of the
   local engine vs Spark (warm session), which justifies ``DEFAULT_SPARK_THRESHOLD``.

Run: ``python benchmarks/bench_spark.py`` (``--rows 2000000`` for a smaller full-change run,
``--skip-crossover``). Needs Java 17 and ``pip install -e '.[spark]'``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np
import pyarrow as pa

from common import WORK, fresh_dir, own_peak_rss_mb, print_table

import trimerge


def make_table(n: int, seed: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed)
    return pa.table({"id": pa.array(np.arange(n), pa.int64()), "a": rng.integers(0, 1000, n),
                     "b": rng.random(n), "c": pa.array(np.char.add("s", (np.arange(n) % 9973).astype(str))),
                     "d": rng.integers(0, 10, n).astype(np.int32)})


def build_full_change(n: int):
    path = fresh_dir(f"spark-full-{n}")
    repo = trimerge.Repository.init(path)
    for start in range(0, n, 5_000_000):
        t = make_table(min(5_000_000, n - start), seed=start).set_column(
            0, "id", pa.array(np.arange(start, min(start + 5_000_000, n)), pa.int64()))
        (repo.create_table("t", t, primary_key="id") if start == 0 else repo.append("t", t))
    repo.branches.create("feature")
    with repo.transaction(branch="feature", message="rewrite every row") as tx:
        current = repo.dataset("t", ref="main")
        tx.overwrite("t", pa.Table.from_batches(
            [b.set_column(1, "a", pa.compute.add(b.column("a"), 1)) for b in current.to_batches(batch_size=1_000_000)]))
    return path


def build_crossover(n: int, k: int):
    path = fresh_dir(f"spark-cross-{n}-{k}")
    repo = trimerge.Repository.init(path)
    repo.create_table("t", make_table(n), primary_key="id")
    repo.branches.create("feature")
    start = n // 3
    changed = repo.read("t", ref="main", filter=f"id >= {start} AND id < {start + k}")
    changed = changed.set_column(1, "a", pa.compute.add(changed.column("a"), 1))
    repo.upsert("t", changed, branch="feature")
    return path


def child(engine: str, path: str, out: str | None, master: str | None) -> None:
    """One measured run in its own process: prints JSON with seconds, rows and peak RSS.

    ``engine``: spark, local (default memory budget, output streamed) or local-in-memory."""
    from trimerge.diff import diff

    budget, label = None, engine
    if engine == "local-in-memory":
        engine, budget = "local", 1 << 50
    repo = trimerge.Repository.open(path, read_only=True)
    spark = None
    if engine == "spark":
        from trimerge.diff.spark import get_spark, pinned

        spark = get_spark(master or "local[2]", memory="1g")
        spark.range(10).count()  # session and executors up: not part of the diff's time
    t0 = time.perf_counter()
    td = diff("main", "feature", repo=repo, engine=engine, spark=spark, memory_budget=budget).tables["t"]
    if engine == "spark" and out:
        with pinned(td):
            frame = td.to_spark()
            frame.write.mode("overwrite").parquet(out)
        rows = spark.read.parquet(out).count()
    elif out and budget is None:
        import pyarrow.parquet as pq

        writer, rows = None, 0
        for batch in td.iter_batches():
            writer = writer or pq.ParquetWriter(out, batch.schema)
            writer.write_batch(batch)
            rows += batch.num_rows
        if writer:
            writer.close()
    elif out:
        import pyarrow.parquet as pq

        rows_t = td.rows()
        pq.write_table(rows_t, out)
        rows = rows_t.num_rows
    else:
        rows = td.rows().num_rows
    seconds = time.perf_counter() - t0
    peak = own_peak_rss_mb()
    if spark is not None:
        spark.stop()
    print("RESULT " + json.dumps({"engine": label, "seconds": seconds, "rows": rows, "driver_peak_rss_mb": peak}))


def run_child(engine: str, path, out=None, master=None) -> dict:
    cmd = [sys.executable, __file__, "--child", engine, "--path", str(path)]
    if out:
        cmd += ["--out", str(out)]
    if master:
        cmd += ["--master", master]
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYSPARK_PYTHON": sys.executable})
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    raise SystemExit(f"{engine} run failed:\n{proc.stderr[-3000:]}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=20_000_000)
    ap.add_argument("--skip-crossover", action="store_true")
    ap.add_argument("--child")
    ap.add_argument("--path")
    ap.add_argument("--out")
    ap.add_argument("--master")
    args = ap.parse_args()
    if args.child:
        child(args.child, args.path, args.out, args.master)
        return 0

    path = WORK / f"spark-full-{args.rows}"
    if not (path / "_trimerge").exists():
        path = build_full_change(args.rows)
    results = [run_child("spark", path, WORK / "full-spark.parquet", "local-cluster[2,1,1024]"),
               run_child("local", path, WORK / "full-local.parquet"),
               run_child("local-in-memory", path, WORK / "full-local-memory.parquet")]
    for r in results:
        r["scenario"] = f"full change, {args.rows:,} rows x 5 cols"
    print_table(results, ["scenario", "engine", "seconds", "rows", "driver_peak_rss_mb"])
    ok = all(r["rows"] == args.rows for r in results)
    if not args.skip_crossover:
        cross = []
        n = 10_000_000
        for k in (10_000, 100_000, 1_000_000, 3_000_000):
            p = build_crossover(n, k)
            loc = run_child("local", p)
            spk = run_child("spark", p, master="local[2]")
            cross.append({"rows changed": k, "planned rows": 2 * k, "local s": loc["seconds"],
                          "spark s": spk["seconds"], "same": loc["rows"] == spk["rows"] == k})
            ok &= loc["rows"] == spk["rows"] == k
        print()
        print_table(cross, ["rows changed", "planned rows", "local s", "spark s", "same"])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
