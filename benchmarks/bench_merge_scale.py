"""Merges at every change size: a source that changed a share of a table merged into a dest that
changed 0.1% — trimerge (local, and optionally Spark), beside what a user would otherwise do.

A 4-column table (id, a, b, c) of N rows; the source updates a share of the rows (column ``a``;
``--full``: every row), the dest updates 0.1% (column ``b``, some of them rows the source changed
too: cell merges). Engines, each run in its own process (peak RSS is its own), alternating, best
of ``--repeat`` runs:

* ``local``: ``merge("theirs", <a fresh copy of ours>)`` — the plan is chosen by change size
  (``TableMergeStats.plan``: ``dest`` or ``source``);
* ``naive``: the polars three-way rewrite (read base, dest and source whole; join; write);
* ``floor``: the same reads and writes done directly with pylance and polars — read the source's
  changed rows, find dest's rows by key, read their before-images, write the changed rows — the
  floor a merge that rewrites the changed rows could approach;
* ``spark``: the merge on ``local-cluster[2,1,1024]`` (1 GB executors).

Every merged table is checked equal to the naive rewrite's (and Spark's to the local one's).

Run: ``python benchmarks/bench_merge_scale.py`` (4M rows at 0.1%, 1%, 10%, 50% and 100%);
``--full --rows 20000000`` for the 20M full-change merge; ``--engines local,spark`` for Spark.
``--baseline DIR`` also runs the local merge with the ``trimerge`` of another checkout (engine
``baseline``, alternating with ``local``), and the ``open`` engine is the import baseline: a process
that imports pylance, pyarrow and polars and opens the repository, the floor of every peak
(issue 55: ``--shares 0.1,0.5,1 --engines open,local --baseline /path/to/old``).
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
sys.path.insert(0, sys.argv[4])
from common import own_peak_rss_mb
import trimerge
from trimerge.merge import merge
path, engine, run = sys.argv[1], sys.argv[2], sys.argv[3]
repo = trimerge.Repository.open(path)
out = {}
spark = None
t0 = time.perf_counter()
if engine == "open":
    import lance, polars, pyarrow  # noqa: F401 - what every merge process holds anyway
    repo.resolve("ours")
elif engine in ("local", "spark"):
    dest = f"ours_{engine}_{run}"
    repo.branches.create(dest, from_ref="ours")
    if engine == "spark":
        from trimerge.diff.spark import get_spark
        spark = get_spark("local-cluster[2,1,1024]")
    t0 = time.perf_counter()
    result = merge("theirs", dest, repo=repo, engine=engine, spark=spark)
    out["plan"] = result.stats["t"].plan
elif engine == "naive":
    import lance
    import polars as pl
    t0 = time.perf_counter()
    base = repo.merge_base("ours", "theirs")
    b, o, t = (pl.from_arrow(repo.read("t", ref=r)) for r in (base.id, "ours", "theirs"))
    j = b.join(o, on="id", suffix="_o").join(t, on="id", suffix="_t")
    merged = j.select("id", *[pl.when(pl.col(f"{c}_t") != pl.col(c)).then(pl.col(f"{c}_t")).otherwise(pl.col(f"{c}_o"))
                              .alias(c) for c in ("a", "b", "c")])
    lance.write_dataset(merged.to_arrow(), path + "-naive.lance", mode="overwrite")
else:  # floor: the direct reads and writes of a row rewrite
    import lance
    import polars as pl
    t0 = time.perf_counter()
    base = repo.merge_base("ours", "theirs")
    b_ds, o_ds, t_ds = (repo.dataset("t", ref=r) for r in (base.id, "ours", "theirs"))
    old = {f.fragment_id for f in b_ds.get_fragments()}
    new = [f for f in t_ds.get_fragments() if f.fragment_id not in old]
    changed = pl.from_arrow(t_ds.scanner(fragments=new).to_table())  # the source's changed rows
    keys = changed.select("id")
    where = pl.from_arrow(o_ds.to_table(columns=["id"], with_row_address=True)).join(keys, on="id", how="semi")
    before = pl.from_arrow(b_ds.to_table()).join(keys, on="id", how="semi")  # their before-images
    lance.write_dataset(changed.to_arrow(), path + "-floor.lance", mode="overwrite")
    out["rows"] = changed.height + where.height + before.height
out.update({"seconds": time.perf_counter() - t0, "peak_rss_mb": own_peak_rss_mb(),
            "code": trimerge.__file__.rsplit("/", 2)[0]})
print("RESULT " + json.dumps(out))
"""


def build(n: int, full: bool, share: float) -> str:
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
    return str(path)


def same_as_naive(path: str, engines: list[str]) -> bool:
    """Each trimerge merge left exactly the naive rewrite's rows."""
    import lance
    import trimerge

    repo = trimerge.Repository.open(path, read_only=True)
    want = lance.dataset(path + "-naive.lance").to_table().sort_by("id") if "naive" in engines else None
    got = [repo.read("t", ref=f"ours_{e}_0").sort_by("id") for e in engines if e in ("local", "spark")]
    got += [repo.read("t", ref="ours_local_b0").sort_by("id") for e in engines if e == "baseline"]
    # polars writes large_string: compare values in trimerge's schema
    return all(g.equals(got[0]) for g in got) and (want is None or all(g.equals(want.cast(g.schema)) for g in got))


def run(path: str, engine: str, i: int, baseline: str | None = None) -> dict:
    import os

    here = str(__import__("pathlib").Path(__file__).resolve().parent)
    env = dict(os.environ)
    if engine == "baseline":  # the local merge with another checkout's trimerge, first on the path
        env["PYTHONPATH"] = str(baseline) + os.pathsep + env.get("PYTHONPATH", "")
    # cwd: the benchmarks folder, so that the checkout the benchmark runs from is not on the path first
    out = subprocess.run([sys.executable, "-c", CHILD, path, "local" if engine == "baseline" else engine,
                          f"b{i}" if engine == "baseline" else str(i), here], capture_output=True, text=True, env=env,
                         cwd=here)
    if out.returncode:
        sys.exit(f"{engine} failed:\n{out.stderr[-3000:]}")
    line = next(line for line in out.stdout.splitlines() if line.startswith("RESULT "))
    return json.loads(line[7:])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, action="append", help="table size (repeatable; default 4M)")
    ap.add_argument("--engines", default="local,naive,floor", help="comma-separated: local, naive, floor, spark")
    ap.add_argument("--full", action="store_true", help="the source changes every row")
    ap.add_argument("--shares", default="0.001,0.01,0.1,0.5,1", help="shares of the rows the source changes")
    ap.add_argument("--repeat", type=int, default=3, help="runs per engine, alternating; the best is kept")
    ap.add_argument("--baseline", help="a checkout whose trimerge runs the local merge too (engine 'baseline')")
    args = ap.parse_args()
    engines = args.engines.split(",") + (["baseline"] if args.baseline else [])
    rows = []
    cases = [(n, float(sh)) for n in (args.rows or [4_000_000]) for sh in
             (["1"] if args.full else args.shares.split(","))]
    for n, share in cases:
        t0 = time.perf_counter()
        path = build(n, args.full or share >= 1, share)
        changed = n if args.full or share >= 1 else max(1, int(n * share))
        print(f"{n:,} rows built in {time.perf_counter() - t0:.1f} s (source changed {changed:,})", flush=True)
        best: dict[str, dict] = {}
        for i in range(args.repeat):
            for engine in engines:
                r = run(path, engine, i, args.baseline)
                print(f"  run {i} {engine}: {r}", flush=True)
                if engine not in best or r["seconds"] < best[engine]["seconds"]:
                    best[engine] = {**r, "peak_rss_mb": max(r["peak_rss_mb"], best.get(engine, r)["peak_rss_mb"])}
        same = same_as_naive(path, engines)
        print(f"  merged tables identical to the naive rewrite: {same}", flush=True)
        if not same:
            return 1
        for engine, r in best.items():
            rows.append({"rows": f"{n:,}", "changed": f"{changed:,}", "engine": engine, "plan": r.get("plan", ""),
                         "seconds": r["seconds"], "peak_rss_mb": r["peak_rss_mb"]})
    print_table(rows, ["rows", "changed", "engine", "plan", "seconds", "peak_rss_mb"])
    print(f"(best of {args.repeat} runs each, alternating; peak RSS: the highest of the runs; "
          f"this process: {peak_rss_mb():.0f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
