"""Errors say the true cause (issue 55, point 5).

``repo.append`` used Lance's ``merge_insert(...).when_matched_fail()``, which builds a hash join of
the whole input in Lance's fixed memory pool; when the pool ran out (5M rows appended to 5M, pool
300 MB) the failure was read as "some primary keys exist already" — a wrong reason for a refusal.
Here a small pool (``LANCE_MEM_POOL_SIZE``, read by Lance in the child process) provokes the same
exhaustion cheaply: an append that fits in memory now works, a real duplicate is named, a pool
too small for any work is reported as the pool running out, with the setting that raises it, and a
diff whose delta Lance cannot read in it falls back to the next exact plan, saying why.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

import trimerge
from trimerge.lineage.errors import PrimaryKeyError, ResourceExhaustedError, resource_exhausted

from conftest import run_python

ROWS = 200_000

APPEND = r"""
import sys
import numpy as np, pyarrow as pa
import trimerge
from trimerge.lineage.errors import TrimergeError
repo = trimerge.Repository.open(sys.argv[1])
start, n = int(sys.argv[2]), int(sys.argv[3])
ids = np.arange(start, start + n)
try:
    repo.append("t", pa.table({"id": pa.array(ids, pa.int64()), "v": pa.array(ids * 2.0)}))
except TrimergeError as exc:
    print(type(exc).__name__, exc)
    sys.exit(exc.exit_code)
print("appended", repo.read("t").num_rows)
"""

#: The join of a 200k-row append needs ~6 MB of Lance's pool: 2 MB makes Lance's own
#: ``merge_insert`` fail while the key index's sort (which spills) still fits.
SMALL_POOL = "2000000"


def _table(path) -> trimerge.Repository:
    repo = trimerge.Repository.init(path)
    ids = np.arange(ROWS)
    repo.create_table("t", pa.table({"id": pa.array(ids, pa.int64()), "v": pa.array(ids * 2.0)}), primary_key="id")
    return repo


def test_the_old_way_ran_out_of_lances_pool(tmp_path):
    """The premise: with this pool Lance's own join cannot take the append on a key-indexed table
    (so the tests below exercise the case the misreport came from)."""
    import lance

    ds = lance.write_dataset(pa.table({"id": pa.array(np.arange(ROWS), pa.int64())}), str(tmp_path / "d"))
    ds.create_scalar_index("id", "BTREE")  # as trimerge's key index: Lance's join then uses the pool
    code = r"""
import sys, numpy as np, pyarrow as pa, lance
ds = lance.dataset(sys.argv[1])
new = pa.table({"id": pa.array(np.arange(%d, %d), pa.int64())})
try:
    ds.merge_insert("id").when_matched_fail().when_not_matched_insert_all().execute(new)
except OSError as exc:
    print("Resources exhausted" in str(exc))
""" % (ROWS, 2 * ROWS)
    proc = run_python(code, tmp_path / "d", env={"LANCE_MEM_POOL_SIZE": SMALL_POOL}, timeout=300)
    assert proc.stdout.strip() == "True", (proc.stdout, proc.stderr[-2000:])


def test_a_large_append_works_with_a_small_memory_pool(tmp_path):
    repo = _table(tmp_path / "repo")
    proc = run_python(APPEND, repo.uri, ROWS, ROWS, env={"LANCE_MEM_POOL_SIZE": SMALL_POOL}, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-2000:]
    assert proc.stdout.split() == ["appended", str(2 * ROWS)]
    got = repo.read("t")
    assert got.num_rows == 2 * ROWS
    assert pa.compute.count_distinct(got.column("id")).as_py() == 2 * ROWS


def test_a_duplicate_among_many_new_keys_is_named(tmp_path):
    """One old key among 200k new ones: refused as a key problem, naming the key, nothing written."""
    repo = _table(tmp_path / "repo")
    before = repo.resolve("main").id
    proc = run_python(APPEND, repo.uri, ROWS - 1, ROWS, env={"LANCE_MEM_POOL_SIZE": SMALL_POOL}, timeout=300)
    assert proc.returncode == 2, proc.stdout + proc.stderr[-2000:]
    assert proc.stdout.startswith(f"PrimaryKeyError append to t: key(s) exist already (e.g. {ROWS - 1}); use upsert")
    assert repo.resolve("main").id == before


@pytest.mark.parametrize("indexed", [True, False])
def test_append_names_existing_keys_small_and_large(tmp_path, indexed):
    """Through the key index (small input) and through the key scan (a table without one, or a
    large input): the same refusal, the same keys named; compound keys too."""
    repo = trimerge.Repository.init(tmp_path / "repo")
    n = 150_000 if indexed else 3_000  # a key index from index.key_min_rows (100k) rows on
    a = np.arange(n)
    repo.create_table("t", pa.table({"a": pa.array(a // 10, pa.int64()), "b": pa.array([f"k{i % 10}" for i in a]),
                                     "v": pa.array(a)}), primary_key=["a", "b"])
    assert bool(repo.indices("t")) == indexed
    with pytest.raises(PrimaryKeyError, match=r"key\(s\) exist already \(e\.g\. \(3, 'k7'\)\); use upsert"):
        repo.append("t", pa.table({"a": pa.array([n, 3], pa.int64()), "b": ["k0", "k7"], "v": [1, 2]}))
    big = np.arange(n, n + 30_000)
    rows = pa.table({"a": pa.array(np.append(big // 10 + n, [3]), pa.int64()),
                     "b": [f"k{i % 10}" for i in big] + ["k7"], "v": pa.array(np.append(big, [0]))})
    with pytest.raises(PrimaryKeyError, match=r"\(e\.g\. \(3, 'k7'\)\)"):
        repo.append("t", rows)
    repo.append("t", rows.slice(0, rows.num_rows - 1))
    assert repo.read("t").num_rows == n + 30_000


def test_lances_pool_running_out_is_reported_as_that(tmp_path):
    """A pool too small for any work (the key index's build cannot run): a typed error that names
    the pool and the setting, exit 2 like the machine's other limits — never a data problem."""
    repo = _table(tmp_path / "repo")
    proc = run_python(APPEND, repo.uri, ROWS, ROWS, env={"LANCE_MEM_POOL_SIZE": "1024"}, timeout=300)
    assert proc.returncode == 2, proc.stdout + proc.stderr[-2000:]
    assert proc.stdout.startswith("ResourceExhaustedError Lance's memory pool of 1024.0 B ran out"), proc.stdout
    assert "raise LANCE_MEM_POOL_SIZE (now 1024) and retry" in proc.stdout
    assert "Traceback" not in proc.stderr
    assert repo.read("t").num_rows == ROWS


def test_resource_errors_are_recognised_and_nothing_else():
    text = ("Resources exhausted: Additional allocation failed for HashJoinInput with top memory consumers "
            "(across reservations) as:\n  HashJoinInput#0(can spill: false) consumed 0.0 B, peak 0.0 B.\n"
            "Error: Failed to allocate additional 26.7 MB for HashJoinInput with 0.0 B already allocated for this "
            "reservation - 300.0 MB remain available for the total memory pool: fair(pool_size: 300.0 MB)")
    err = resource_exhausted(OSError(text))
    assert isinstance(err, ResourceExhaustedError) and isinstance(err, OSError) and err.exit_code == 2
    assert str(err).startswith("Lance's memory pool of 300.0 MB ran out (HashJoinInput needed 26.7 MB more)")
    assert "\n" not in str(err)
    for other in (OSError("Merge insert failed: found matching row with key values: id = 5"),
                  ValueError("Resources"), RuntimeError("failed to allocate a buffer")):
        assert resource_exhausted(other) is None


DELTA = r"""
import logging, sys
import trimerge
from trimerge.diff import diff
logging.basicConfig()
repo = trimerge.Repository.open(sys.argv[1])
t = diff("main~1", "main", repo=repo).tables["t"]
print(t.counts.deleted, t.plan.method, t.plan.fallback_from)
"""


def test_a_delta_lances_pool_cannot_read_falls_back_and_says_why(tmp_path):
    """Lance's deleted-row ids of a delta need its memory pool: out of it, the diff runs the next
    exact plan (the same answer) and its warning names the pool, not a broken plan."""
    repo = trimerge.Repository.init(tmp_path / "repo")
    ids = np.arange(20_000)
    repo.create_table("t", pa.table({"id": pa.array(ids, pa.int64()), "v": pa.array(ids * 2.0)}), primary_key="id")
    repo.delete("t", "id < 4")
    proc = run_python(DELTA, repo.uri, env={"LANCE_MEM_POOL_SIZE": "1024"}, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["4", "fragments", "delta"]
    assert "Lance's memory pool ran out: see LANCE_MEM_POOL_SIZE" in proc.stderr
