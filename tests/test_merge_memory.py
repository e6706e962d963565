"""A mid-size merge under a small memory budget (in its own process) writes the same rows as the
same merge held in memory: the diffs spill, are paired per key-hash bucket, and the merged rows
are spooled to disk and written from there."""

from __future__ import annotations

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
