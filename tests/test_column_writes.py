"""Column-level writes (issue 26): updates and filled new columns that write only the changed
columns, diffs that read only them, merges that write only them — and every path giving the same
tables and diffs as whole-row rewrites, nested types included."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import trimerge
from trimerge.diff import diff
from trimerge.lineage.errors import InvalidOperationError, PrimaryKeyError, SchemaMismatchError
from trimerge.merge import merge

from conftest import run_python

DIM = 4
MAP = pa.map_(pa.string(), pa.int64())
NESTED = {
    "vec": pa.list_(pa.float32(), DIM),
    "lst": pa.list_(pa.int64()),
    "big": pa.large_list(pa.string()),
    "st": pa.struct([("a", pa.int64()), ("b", pa.string())]),
    "mp": MAP,
    "dc": pa.dictionary(pa.int32(), pa.string()),
    "s": pa.string(),
    "n": pa.int64(),
}


def value(rng: np.random.Generator, name: str, i: int):
    if rng.random() < 0.15:
        return None
    r = int(rng.integers(0, 1000))
    return {"vec": [float(r + j) for j in range(DIM)], "lst": [r, i], "big": [f"x{r}"], "st": {"a": r, "b": str(i)},
            "mp": [("k", r)], "dc": f"d{r % 3}", "s": f"s{r}", "n": r}[name]


def column(rng, name: str, keys) -> pa.Array:
    return pa.array([value(rng, name, int(k)) for k in keys], NESTED[name])


def base_table(n: int, seed: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed)
    keys = np.arange(n)
    return pa.table({"id": pa.array(keys, pa.int64()), **{c: column(rng, c, keys) for c in NESTED}})


def folder_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def canonical(t: pa.Table) -> list[dict]:
    return t.sort_by("id").to_pylist()


def diff_rows(repo, a: str, b: str) -> list[dict]:
    return diff(a, b, repo=repo).tables["t"].rows().sort_by("id").to_pylist()


@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
@given(seed=st.integers(0, 2**16), steps=st.lists(st.tuples(st.floats(0.01, 1.0), st.integers(1, 3)),
                                                    min_size=1, max_size=3))
def test_column_path_and_row_path_give_identical_tables_and_diffs(tmp_path_factory, seed, steps):
    """Random shares of the rows, random columns of every nested type: updated as column files,
    as whole rows, and by cost — the same table at every step, the same diffs from the fork and
    between steps, counts asked alone equal to the rows' counts, and the brute-force check passes."""
    root = tmp_path_factory.mktemp("cols")
    rng = np.random.default_rng(seed)
    n = 150
    repos = {}
    for write in ("columns", "rows", "auto"):
        repo = trimerge.Repository.init(root / write)
        repo.create_table("t", base_table(n, seed), primary_key="id")
        repo.append("t", base_table(n, seed + 1).set_column(0, "id", pa.array(np.arange(n, 2 * n), pa.int64())))
        repo.branches.create("b", from_ref="main")
        repos[write] = repo
    for share, width in steps:
        keys = np.sort(rng.choice(2 * n, max(1, int(share * 2 * n)), replace=False))
        names = list(rng.choice(list(NESTED), width, replace=False))
        data = pa.table({"id": pa.array(keys, pa.int64()), **{c: column(rng, c, keys) for c in names}})
        for write, repo in repos.items():
            repo.update("t", data, write, branch="b")
    tables = {w: canonical(r.read("t", ref="b")) for w, r in repos.items()}
    assert tables["columns"] == tables["rows"] == tables["auto"]
    for a, b in (("main", "b"), ("b~1", "b"), ("b", "main")):
        rows = {w: diff_rows(r, a, b) for w, r in repos.items()}
        assert rows["columns"] == rows["rows"] == rows["auto"], (a, b)
        for repo in repos.values():
            alone = diff(a, b, repo=repo).tables["t"].counts
            td = diff(a, b, repo=repo, verify=True).tables["t"]
            td.rows()
            assert alone == td.counts
    for repo in repos.values():
        assert repo.read("t", ref="b").schema == repos["rows"].read("t", ref="b").schema
        assert repo.fsck().problems == []


def test_backfill_writes_and_reads_only_the_column(tmp_path):
    n = 5000
    rng = np.random.default_rng(5)
    repo = trimerge.Repository.init(tmp_path / "repo")
    repo.create_table("t", pa.table({"id": pa.array(range(n), pa.int64()),
                                     "body": [rng.bytes(500).hex() for _ in range(n)]}), primary_key="id")
    repo.branches.create("b", from_ref="main")
    before = folder_bytes(tmp_path / "repo")
    labels = pa.table({"id": pa.array(range(n), pa.int64()), "label": pa.array(np.arange(n) % 7, pa.int32())})
    repo.add_columns("t", labels, branch="b")
    written = folder_bytes(tmp_path / "repo") - before
    assert written < 1.5 * labels.column("label").nbytes + (1 << 20)
    td = diff("main", "b", repo=repo).tables["t"]
    assert td.counts.updated == n
    assert td.plan.method == "fragments" and td.plan.fragments_read == 0 and td.plan.fragments_columns_only >= 1
    # an update of that column by cost: column files again, a few KB
    before = folder_bytes(tmp_path / "repo")
    repo.update("t", labels.set_column(1, "label", pa.array(np.arange(n) % 5, pa.int32())), branch="b")
    assert folder_bytes(tmp_path / "repo") - before < 1.5 * labels.column("label").nbytes + (1 << 20)
    # the same update as whole rows writes the table again
    before = folder_bytes(tmp_path / "repo")
    repo.update("t", labels.set_column(1, "label", pa.array(np.arange(n) % 3, pa.int32())), "rows", branch="b")
    assert folder_bytes(tmp_path / "repo") - before > n * 500  # 1,000 hex digits a row
    assert repo.read("t", ref="b").column("label").to_pylist() == list(np.arange(n) % 3)


def test_backfill_merged_into_a_main_that_moved(tmp_path):
    """Main ingests rows and edits a cell; the branch fills a new column for every row: the merge
    writes the column (not the rows), keeps main's work, and the new rows get nulls."""
    n = 3000
    repo = trimerge.Repository.init(tmp_path / "repo")
    repo.create_table("t", pa.table({"id": pa.array(range(n), pa.int64()), "body": ["x" * 500 + str(i) for i in range(n)],
                                     "vec": pa.array([[float(i)] * DIM for i in range(n)], NESTED["vec"])}),
                      primary_key="id")
    repo.branches.create("b", from_ref="main")
    repo.add_columns("t", pa.table({"id": pa.array(range(n), pa.int64()), "label": pa.array(range(n), pa.int32())}),
                     branch="b")
    repo.update("t", pa.table({"id": pa.array([1, 2], pa.int64()), "vec": pa.array([[9.0] * DIM] * 2, NESTED["vec"])}),
                branch="b")
    repo.upsert("t", pa.table({"id": pa.array([n, n + 1], pa.int64()), "body": ["new", "new"],
                               "vec": pa.array([[1.0] * DIM] * 2, NESTED["vec"])}))
    repo.update("t", pa.table({"id": pa.array([5], pa.int64()), "body": ["edited on main"]}))
    before = folder_bytes(tmp_path / "repo")
    result = merge("b", "main", repo=repo)
    assert result.status == "merged"
    assert folder_bytes(tmp_path / "repo") - before < 3 << 20
    rows = {r["id"]: r for r in repo.read("t").to_pylist()}
    assert len(rows) == n + 2
    assert rows[5]["body"] == "edited on main" and rows[5]["label"] == 5
    assert rows[1]["vec"] == [9.0] * DIM and rows[7]["label"] == 7 and rows[n]["label"] is None
    d = diff("main~1", "main", repo=repo, verify=True).tables["t"]
    assert d.counts.updated == n and d.counts.inserted == 0


def test_merge_of_column_writes_with_conflicts_and_overlaps(tmp_path):
    """Keys both sides changed get a cell merge from full images; the rest are taken as columns."""
    n = 400
    repo = trimerge.Repository.init(tmp_path / "repo")
    repo.create_table("t", base_table(n), primary_key="id")
    repo.branches.create("b", from_ref="main")
    repo.update("t", pa.table({"id": pa.array(range(n), pa.int64()), "n": pa.array(range(n), pa.int64())}),
                "columns", branch="b")
    repo.update("t", pa.table({"id": pa.array([3, 4], pa.int64()), "n": pa.array([-3, 4], pa.int64()),
                               "s": ["main3", "main4"]}))
    result = merge("b", "main", repo=repo, dry_run=True)
    assert [c.key for c in result.conflicts] == [{"id": 3}]
    result = merge("b", "main", repo=repo, strategy="dest-wins")
    rows = {r["id"]: r for r in repo.read("t").to_pylist()}
    assert rows[3]["n"] == -3 and rows[3]["s"] == "main3" and rows[4]["n"] == 4 and rows[4]["s"] == "main4"
    assert all(rows[i]["n"] == i for i in range(n) if i != 3)


def test_filled_columns_bad_input_changes_nothing(tmp_path):
    repo = trimerge.Repository.init(tmp_path / "repo")
    repo.create_table("t", base_table(20), primary_key="id")
    tip = repo.resolve("main").id

    def ids(*v):
        return pa.array(v, pa.int64())

    cases = [
        (pa.table({"id": ids(1, 98, 99), "z": [1, 2, 3]}), PrimaryKeyError, "2 key(s) do not exist (e.g. 98, 99)"),
        (pa.table({"id": ids(1, 1), "z": [1, 2]}), PrimaryKeyError, "duplicate"),
        (pa.table({"z": [1]}), SchemaMismatchError, "key column"),
        (pa.table({"id": ids(1)}), SchemaMismatchError, "no column besides the key"),
        (pa.table({"id": ids(1), "s": ["x"]}), SchemaMismatchError, "has a column 's' already"),
    ]
    for data, error, words in cases:
        with pytest.raises(error, match=words.replace("(", r"\(").replace(")", r"\)")):
            repo.add_columns("t", data)
    with pytest.raises(PrimaryKeyError, match="1 key"):
        repo.update("t", pa.table({"id": ids(1, 500), "n": pa.array([1, 2], pa.int64())}))
    with pytest.raises(SchemaMismatchError):
        repo.update("t", pa.table({"id": ids(1), "nosuch": [1]}))
    with pytest.raises(InvalidOperationError, match="write="):
        repo.update("t", pa.table({"id": ids(1), "n": pa.array([1], pa.int64())}), "sideways")
    assert repo.resolve("main").id == tip
    assert repo.fsck().problems == []


def test_column_write_of_an_indexed_vector_keeps_search_exact(tmp_path):
    n = 600
    rng = np.random.default_rng(3)
    vecs = rng.random((n, 8), dtype=np.float32)
    repo = trimerge.Repository.init(tmp_path / "repo")
    repo.create_table("t", pa.table({"id": pa.array(range(n), pa.int64()),
                                     "v": pa.FixedSizeListArray.from_arrays(pa.array(vecs.ravel()), 8)}),
                      primary_key="id")
    repo.create_index("t", "v", "IVF_FLAT", num_partitions=2)
    new = rng.random((n // 2, 8), dtype=np.float32)
    repo.update("t", pa.table({"id": pa.array(range(0, n, 2), pa.int64()),
                               "v": pa.FixedSizeListArray.from_arrays(pa.array(new.ravel()), 8)}), "columns")
    vecs[::2] = new
    q = rng.random(8, dtype=np.float32)
    got = repo.search("t", vector=q, column="v", k=5).column("id").to_pylist()
    want = list(np.argsort(((vecs - q) ** 2).sum(axis=1))[:5])
    assert got == want


WRITER = """
import sys, pyarrow as pa, trimerge
repo = trimerge.Repository.open(sys.argv[1])
n = int(sys.argv[2])
with repo.transaction("b") as tx:
    tx.update("t", pa.table({"id": pa.array(range(n), pa.int64()), "n": pa.array([-1] * n, pa.int64())}), "columns")
    tx.update("t", pa.table({"id": pa.array(range(n), pa.int64()), "s": ["k"] * n}), "columns")
"""


@pytest.mark.parametrize("crash_at", ["after_write_1", "after_write_2", "before_publish"])
def test_kill_during_a_column_write_leaves_the_branch_before_or_after(tmp_path, crash_at):
    """Killed inside the transaction: rolled back. Killed once the commit is decided: completed."""
    n = 200
    repo = trimerge.Repository.init(tmp_path / "repo")
    repo.create_table("t", base_table(n), primary_key="id")
    repo.branches.create("b", from_ref="main")
    tip, rows = repo.resolve("b").id, canonical(repo.read("t", ref="b"))
    proc = run_python(WRITER, tmp_path / "repo", n, env={"TRIMERGE_CRASH_AT": crash_at})
    assert proc.returncode == -9, proc.stderr[-2000:]
    repo = trimerge.Repository.open(tmp_path / "repo")  # read-write: recovers
    after = canonical(repo.read("t", ref="b"))
    assert tip in [c.id for c in repo.log("b")]  # (a rollback may add a recovery commit, data unchanged)
    if crash_at == "before_publish":
        assert after == [{**r, "n": -1, "s": "k"} for r in rows]
    else:
        assert after == rows
    assert repo.fsck().problems == []
    proc = run_python(WRITER, tmp_path / "repo", n)  # writes work afterwards
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert set(trimerge.Repository.open(tmp_path / "repo").read("t", ref="b").column("n").to_pylist()) == {-1}


def test_gc_and_fsck_with_column_files(tmp_path):
    n = 300
    repo = trimerge.Repository.init(tmp_path / "repo")
    repo.create_table("t", base_table(n), primary_key="id")
    repo.branches.create("b", from_ref="main")
    for i in range(3):
        repo.update("t", pa.table({"id": pa.array(range(n), pa.int64()), "n": pa.array([i] * n, pa.int64())}),
                    "columns", branch="b")
    kept = canonical(repo.read("t", ref="b~1"))
    repo.gc(retention="now")
    assert repo.fsck().problems == []
    assert canonical(repo.read("t", ref="b~1")) == kept
    assert set(repo.read("t", ref="b").column("n").to_pylist()) == {2}


@pytest.mark.s3
def test_column_writes_on_the_object_store(s3_uri):
    uri, options = s3_uri
    n = 200
    repo = trimerge.Repository.init(uri, storage_options=options)
    repo.create_table("t", base_table(n), primary_key="id")
    repo.branches.create("b", from_ref="main")
    repo.add_columns("t", pa.table({"id": pa.array(range(n), pa.int64()), "label": pa.array(range(n), pa.int32())}),
                     branch="b")
    repo.update("t", pa.table({"id": pa.array([1], pa.int64()), "vec": pa.array([[7.0] * DIM], NESTED["vec"])}),
                "columns", branch="b")
    td = diff("main", "b", repo=repo, verify=True).tables["t"]
    assert td.counts.updated == n
    repo.upsert("t", base_table(1).set_column(0, "id", pa.array([n], pa.int64())))
    assert merge("b", "main", repo=repo).status == "merged"
    rows = {r["id"]: r for r in repo.read("t").to_pylist()}
    assert rows[1]["vec"] == [7.0] * DIM and rows[9]["label"] == 9 and rows[n]["label"] is None
    assert repo.fsck().problems == []
