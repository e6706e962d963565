"""Spark jobs and wall time per small diff and merge (the per-job overhead the test suite pays).

Builds two small repositories like the Spark tests' (a 100-row table with 30 source and 20 dest
changes, 21 conflicts; a 50-row table across Lance lineages), then on one warm ``local[2]``
session runs each operation a few times and counts the Spark jobs and stages it started (the
SparkContext's status tracker, through a job group) and its wall time.

Run: ``python benchmarks/bench_spark_jobs.py [--repeat 3] [--untuned]`` (``--untuned``: as before
:func:`trimerge.diff.spark.small_jobs`). Needs Java 17 and pyspark.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import pyarrow as pa

import trimerge
from trimerge.diff import diff
from trimerge.merge import MergeConflictError, merge


def conflicted(path: Path) -> trimerge.Repository:
    repo = trimerge.Repository.init(path)
    n = 100
    repo.create_table("t", pa.table({"k": list(range(n)), "v": [f"v{i}" for i in range(n)], "w": list(range(n))}),
                      primary_key="k")
    repo.branches.create("src")
    repo.upsert("t", pa.table({"k": list(range(30)), "v": [f"s{i}" for i in range(30)], "w": list(range(30))}),
                branch="src")
    repo.upsert("t", pa.table({"k": list(range(20)), "v": [f"d{i}" for i in range(20)], "w": list(range(20))}),
                branch="main")
    repo.delete("t", "k >= 95", branch="main")
    repo.upsert("t", pa.table({"k": [96], "v": ["s96"], "w": [0]}), branch="src")
    return repo


class Jobs:
    """Counts the jobs (and their stages) Spark runs inside a ``with`` block."""

    def __init__(self, spark, label: str):
        self.sc, self.group = spark.sparkContext, f"bench-{label}-{time.monotonic_ns()}"

    def __enter__(self):
        self.sc.setJobGroup(self.group, self.group)
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.seconds = time.perf_counter() - self.t0
        self.sc.setLocalProperty("spark.jobGroup.id", None)
        tracker = self.sc.statusTracker()
        ids = tracker.getJobIdsForGroup(self.group)
        self.jobs = len(ids)
        self.stages = sum(len(tracker.getJobInfo(i).stageIds) for i in ids if tracker.getJobInfo(i))
        return False


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--untuned", action="store_true", help="the session's own settings for every job (as before "
                    "diff.spark.small_jobs): adaptive execution, broadcast joins, its shuffle partitions")
    args = ap.parse_args()
    from trimerge.diff import spark as spark_module
    from trimerge.diff.spark import get_spark

    if args.untuned:
        spark_module.SMALL_ROWS = -1

    spark = get_spark("local[2]", memory="1g")
    results: dict[str, list[tuple[int, int, float]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for round_ in range(args.repeat + 1):  # round 0 warms the session up (not reported)
            repo = conflicted(Path(tmp) / f"r{round_}")
            for i in range(2):
                repo.branches.create(f"main{i}", from_ref="main")
            ops = {
                "diff: counts (--stat)": lambda: diff("main", "src", repo=repo, engine="spark", spark=spark)
                .tables["t"].counts,
                "diff: counts + rows": lambda: (lambda td: (td.counts, td.rows()))(
                    diff("main", "src", repo=repo, engine="spark", spark=spark).tables["t"]),
                "merge --dry-run (21 conflicts)": lambda: merge("src", "main", repo=repo, dry_run=True,
                                                                engine="spark", spark=spark),
                "merge with conflicts (refused)": lambda: _refused(repo, spark),
                "merge source-wins (published)": lambda: merge("src", "main0", repo=repo, strategy="source-wins",
                                                               engine="spark", spark=spark),
            }
            for name, op in ops.items():
                with Jobs(spark, str(round_)) as j:
                    op()
                if round_:
                    results.setdefault(name, []).append((j.jobs, j.stages, j.seconds))
    print(f"{'operation':34} {'jobs':>5} {'stages':>6} {'median s':>9}")
    for name, runs in results.items():
        jobs = sorted({r[0] for r in runs})
        stages = sorted({r[1] for r in runs})
        print(f"{name:34} {'/'.join(map(str, jobs)):>5} {'/'.join(map(str, stages)):>6} "
              f"{statistics.median(r[2] for r in runs):9.2f}")
    spark.stop()


def _refused(repo, spark):
    try:
        merge("src", "main1", repo=repo, engine="spark", spark=spark)
    except MergeConflictError:
        return
    raise AssertionError("expected conflicts")


if __name__ == "__main__":
    main()
