"""A mid-size merge under a small memory budget (in its own process) writes the same rows as the
same merge held in memory: the diffs spill, are paired per key-hash bucket, and the merged rows
are spooled to disk and written from there. And a regression check of a merge's peak memory,
as a ratio to a process that only imports and opens the repository (issue 55)."""

from __future__ import annotations

import sys

import numpy as np
import pyarrow as pa
import pytest

import trimerge
from trimerge.diff.engine import Snapshot, TableDiff
from trimerge.merge import merge

from conftest import run_python

N = 60_000

SPILLED_MERGE = r"""
import sys
import trimerge
from trimerge.diff.engine import Snapshot, TableDiff
from trimerge.merge import merge
repo = trimerge.Repository.open(sys.argv[1])
base = repo.merge_base("theirs", "spilled")
d = TableDiff("t", Snapshot(repo, base.tables["t"]), Snapshot(repo, repo.resolve("theirs").tables["t"]))
assert d.spilled, "the budget should make the diff spill"
result = merge("theirs", "spilled", repo=repo, strategy="source-wins")
import os
assert result.stats["t"].plan == os.environ["TRIMERGE_MERGE_PLAN"], result.stats["t"].plan
print(result.stats["t"].rows_from_source, result.stats["t"].resolved)
"""


def _history(path) -> trimerge.Repository:
    rng = np.random.default_rng(3)
    table = pa.table({"id": np.arange(N, dtype=np.int64), "a": rng.integers(0, 100, N),
                      "b": pa.array([f"r{i}" for i in range(N)])})
    repo = trimerge.Repository.init(path, actor="t")
    repo.create_table("t", table, ["id"])
    for b in ("theirs", "ours"):
        repo.branches.create(b, from_ref="main")
    src = np.sort(rng.choice(N, N // 3, replace=False))
    changed = table.take(pa.array(src))
    repo.upsert("t", changed.set_column(1, "a", pa.array(changed.column("a").to_numpy() + 1)), branch="theirs")
    repo.delete_keys("t", pa.table({"id": pa.array(rng.choice(N, 500, replace=False))}), branch="theirs")
    dst = np.sort(rng.choice(N, 2_000, replace=False))  # some overlap: cell merges and conflicts
    mine = table.take(pa.array(dst))
    repo.upsert("t", mine.set_column(1, "a", pa.array(mine.column("a").to_numpy() + 7))
                .set_column(2, "b", pa.array([f"dest{i}" for i in dst])), branch="ours")
    for b in ("spilled", "in-memory"):
        repo.branches.create(b, from_ref="ours")
    return repo


@pytest.mark.parametrize("plan,threads", [("dest", "2"), ("source", "2"), ("dest", "1")])
def test_a_merge_that_spills_writes_the_same_rows_as_one_in_memory(tmp_path, plan, threads):
    """Either merge plan (issue 22), on two threads or one, spilled or not: the same rows."""
    repo = _history(tmp_path / "repo")
    proc = run_python(SPILLED_MERGE, repo.uri, env={"TRIMERGE_DIFF_MEMORY": "2M", "TRIMERGE_MERGE_PLAN": plan,
                                                   "TRIMERGE_THREADS": threads}, timeout=300)
    assert proc.returncode == 0, proc.stderr
    in_memory = merge("theirs", "in-memory", repo=repo, strategy="source-wins")
    base = repo.merge_base("theirs", "in-memory")
    assert not TableDiff("t", Snapshot(repo, base.tables["t"]), Snapshot(repo, repo.resolve("theirs").tables["t"])).spilled
    assert proc.stdout.split() == [str(in_memory.stats["t"].rows_from_source), str(in_memory.stats["t"].resolved)]
    assert in_memory.stats["t"].resolved > 0
    spilled = repo.read("t", "spilled").sort_by("id")
    assert spilled.num_rows == repo.read("t", "in-memory").num_rows
    assert spilled.equals(repo.read("t", "in-memory").sort_by("id"))


PEAK_OF = r"""
import sys
import trimerge
repo = trimerge.Repository.open(sys.argv[1])
import lance, polars, pyarrow  # the import baseline: what every merge process holds anyway
if sys.argv[2] == "merge":
    from trimerge.merge import merge
    repo.branches.create(sys.argv[3], from_ref="ours")
    assert merge("theirs", sys.argv[3], repo=repo).stats["t"].plan == "dest"
else:
    repo.resolve("main")
for line in open("/proc/self/status"):
    if line.startswith("VmHWM:"):
        print(int(line.split()[1]) / 1024)
"""
#: Peak RSS of a merge of 270k changed rows (of 600k) over that of a process that only imports and
#: opens the repository (~167 MiB). Measured on 2 cores (issue 55): 2.49-2.64x with the streaming
#: comparison (pairs classified by row id in windows, the fold in slices, freed heaps handed back
#: between phases); 2.91-3.11x before, when the classification joined every candidate at once.
MAX_PEAK_RATIO = 2.8


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads VmHWM from /proc")
def test_merge_peak_memory_stays_near_the_import_baseline(tmp_path):
    n = 600_000
    rng = np.random.default_rng(5)
    table = pa.table({"id": np.arange(n, dtype=np.int64), "a": rng.integers(0, 1000, n), "b": rng.random(n),
                      "c": pa.array([f"row {i}" for i in range(n)])})
    repo = trimerge.Repository.init(tmp_path / "repo")
    repo.create_table("t", table, ["id"])
    for b in ("ours", "theirs"):
        repo.branches.create(b, from_ref="main")
    src = table.take(pa.array(np.sort(rng.choice(n, int(n * 0.45), replace=False))))
    repo.upsert("t", src.set_column(1, "a", pa.array(src.column("a").to_numpy() + 1)), branch="theirs")
    dst = table.take(pa.array(np.sort(rng.choice(n, n // 1000, replace=False))))
    repo.upsert("t", dst.set_column(2, "b", pa.array(dst.column("b").to_numpy() + 1.0)), branch="ours")

    def peak(*args) -> float:
        proc = run_python(PEAK_OF, repo.uri, *args, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return float(proc.stdout.split()[-1])

    baseline = peak("open")
    merged = min(peak("merge", "m1"), peak("merge", "m2"))  # the lower of two: one process's noise
    ratio = merged / baseline
    assert ratio <= MAX_PEAK_RATIO, (f"a merge of 270k changed rows peaked at {merged:.0f} MiB, {ratio:.2f}x the "
                                     f"{baseline:.0f} MiB import baseline (limit {MAX_PEAK_RATIO}x)")
    assert repo.read("t", "m1").sort_by("id").equals(repo.read("t", "m2").sort_by("id"))
