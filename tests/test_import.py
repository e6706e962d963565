"""Zero-copy import (issue 21, item 4): ``repo.import_table`` / ``trimerge table import`` bring an
existing Lance dataset in as a table through a Lance shallow clone.

What is checked: nothing of the source is copied (the clone folder stays a few KB); the source is
checked first (dataset, version, key column present and of a key type, no null, no duplicate) with
one-line typed errors and exit 2 on the CLI; writes, branches, merges, compaction, gc, table drops
and crash recovery never change or delete a file of the source; the imported table is readable at
every commit, branches lazily and travels in time; the source's indices come along; a source
without stable row ids (Lance's default) diffs and merges like a native table (brute-force
references of ``diffref.py`` and ``test_merge_properties.py``); ``missing_sources`` finds a source
that disappeared; and an import from one S3 prefix into a repository on the S3 test server."""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import tempfile
from pathlib import Path

import lance
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import trimerge
from trimerge.diff import diff
from trimerge.lineage.tables import importing
from trimerge.lineage.errors import InvalidOperationError, NotFoundError, PrimaryKeyError
from trimerge.merge import merge

from conftest import rows, run_python
from diffref import engine_rows, reference_diff

# ---------------------------------------------------------------------------------------------- helpers


def write_source(path: Path | str, n: int = 1000, *, rows_per_file: int | None = None, stable: bool = False,
                 **columns) -> str:
    """A Lance dataset of ``n`` rows (``id`` int64 nullable, ``name``, ``score``) or of ``columns``."""
    data = pa.table(columns) if columns else pa.table({
        "id": pa.array(range(n), pa.int64()), "name": [f"n{i}" for i in range(n)],
        "score": pa.array(np.arange(n) * 0.5)})
    lance.write_dataset(data, str(path), max_rows_per_file=rows_per_file or 1024 * 1024,
                        enable_stable_row_ids=stable)
    return str(path)


def digest(path: Path | str) -> dict[str, tuple[int, int, str]]:
    """Every file below ``path``: (size, mtime in ns, sha1)."""
    out = {}
    for folder, _dirs, files in os.walk(path):
        for f in files:
            p = os.path.join(folder, f)
            out[os.path.relpath(p, path)] = (os.path.getsize(p), os.stat(p).st_mtime_ns,
                                             hashlib.sha1(Path(p).read_bytes()).hexdigest())
    return out


def listing(path: Path) -> list[str]:
    return sorted(os.listdir(path)) if path.exists() else []


def folder_size(path: Path | str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)


def dataset_folder(repo: trimerge.Repository, table: str, ref: str = "main") -> Path:
    return Path(repo.uri) / "tables" / repo.table_version(table, ref).dataset


def by_id(table: pa.Table) -> dict:
    return {r["id"]: r for r in table.to_pylist()}


@pytest.fixture
def source(tmp_path) -> str:
    """1,000 rows in 4 fragments, no stable row ids (Lance's default)."""
    return write_source(tmp_path / "src.lance", 1000, rows_per_file=250)


# ---------------------------------------------------------------------------------------------- zero copy
def test_import_is_zero_copy_and_reads_like_the_source(tmp_path, source):
    before = digest(source)
    repo = trimerge.Repository.init(tmp_path / "repo")
    commit = repo.import_table("people", source, "id", message="bring people in")
    assert commit.message == "bring people in" and repo.tables() == ["people"]
    folder = dataset_folder(repo, "people")
    assert folder_size(folder) < 32 * 1024, folder_size(folder)  # the source is ~30 KB of data; nothing copied
    assert not (folder / "data").exists() or not os.listdir(folder / "data")
    got, want = repo.read("people"), lance.dataset(source).to_table()
    assert rows(got, "id") == rows(want, "id")
    schema = repo.schema("people")
    assert not schema.field("id").nullable and schema.field("name").nullable  # the key stored as native keys are
    assert repo.primary_key("people") == ("id",)
    assert digest(source) == before
    # an older version of the source, a composite key, and an import on another branch
    lance.write_dataset(pa.table({"id": pa.array([5000], pa.int64()), "name": ["late"], "score": [1.0]}), source,
                        mode="append")
    repo.branches.create("side", from_ref="main")
    repo.import_table("people_v1", source, ["id", "name"], version=1, branch="side")
    assert repo.read("people_v1", "side").num_rows == 1000 and repo.primary_key("people_v1", "side") == ("id", "name")
    assert "people_v1" not in repo.tables("main")


def test_composite_unsorted_and_string_keys(tmp_path):
    rng = np.random.default_rng(1)
    n = 5000
    a, b = rng.permutation(n) % 50, rng.permutation(n)
    src = write_source(tmp_path / "s", a=pa.array(a, pa.int32()), b=pa.array(b.astype(str)), v=pa.array(b))
    repo = trimerge.Repository.init(tmp_path / "repo")
    repo.import_table("t", src, ["a", "b"])  # unsorted keys: checked through hashes
    assert repo.read("t").num_rows == n
    with pytest.raises(PrimaryKeyError, match="duplicate"):
        repo.import_table("u", src, "a")


def test_import_of_a_large_source_builds_no_key_index(tmp_path):
    src = write_source(tmp_path / "big.lance", 3000)
    repo = trimerge.Repository.init(tmp_path / "repo")
    repo.settings.set("index.key_min_rows", 1000)  # a "large" source, as 100,000 rows are by default
    repo.import_table("t", src, "id")
    assert repo.indices("t") == [] and folder_size(dataset_folder(repo, "t")) < 32 * 1024


def test_import_of_many_small_fragments_stays_zero_copy(tmp_path):
    src = write_source(tmp_path / "small.lance", 8000, rows_per_file=100)  # 80 fragments: over the policy's 64
    lance.dataset(src).create_scalar_index("id", "BTREE")
    repo = trimerge.Repository.init(tmp_path / "repo")
    repo.import_table("t", src, "id")
    assert len(repo.dataset("t", "main").get_fragments()) == 80
    assert folder_size(dataset_folder(repo, "t")) < 32 * 1024
    assert repo.read("t", filter="id = 5").num_rows == 1
    for i in range(3):  # later writes: upkeep compacts their small fragments, never the source's
        repo.upsert("t", pa.table({"id": pa.array([i], pa.int64()), "name": ["x"], "score": [0.0]}))
    assert folder_size(dataset_folder(repo, "t") / "data") < 16 * 1024  # manifests grow, data is not copied
    assert repo.read("t", filter="id = 5").num_rows == 1 and repo.read("t").num_rows == 8000


# ---------------------------------------------------------------------------------------------- source checks
def _dups(tmp_path):
    return write_source(tmp_path / "dups", id=pa.array([3, 1, 2, 1, 3, 3], pa.int64()), v=list("abcdef"))


def _nulls(tmp_path):
    return write_source(tmp_path / "nulls", id=pa.array([1, None, 3], pa.int64()), v=list("abc"))


def _nested(tmp_path):
    return write_source(tmp_path / "nested", id=pa.array([[1], [2]]), f=[0.5, 1.5])


BAD_SOURCES = [
    # (what, make source, key, version, error type, message part)
    ("duplicates", _dups, "id", None, PrimaryKeyError, "e.g. [{'id': 1}, {'id': 3}]"),
    ("nulls", _nulls, "id", None, PrimaryKeyError, "null"),
    ("missing column", lambda p: write_source(p / "s", 10), "nope", None, PrimaryKeyError, "not in the dataset"),
    ("float key", lambda p: write_source(p / "s", 10), "score", None, PrimaryKeyError, "cannot be a key"),
    ("nested key", _nested, "id", None, PrimaryKeyError, "cannot be a key"),
    ("missing path", lambda p: str(p / "nowhere"), "id", None, NotFoundError, "no such file"),
    ("not a dataset", lambda p: str((p / "empty").mkdir() or p / "empty"), "id", None, NotFoundError,
     "not a Lance dataset"),
    ("a plain file", lambda p: str((p / "f.csv").write_text("id\n1\n") and p / "f.csv"), "id", None, NotFoundError,
     "not a Lance dataset"),
    ("unknown version", lambda p: write_source(p / "s", 10), "id", 7, NotFoundError, "no version 7 (latest is 1)"),
    ("version zero", lambda p: write_source(p / "s", 10), "id", 0, InvalidOperationError, "positive integer"),
]


@pytest.mark.parametrize("what,make,key,version,error,part", BAD_SOURCES, ids=[b[0] for b in BAD_SOURCES])
def test_bad_sources_are_refused_before_any_effect(tmp_path, what, make, key, version, error, part):
    src = make(tmp_path)
    repo = trimerge.Repository.init(tmp_path / "repo")
    tip = repo.resolve("main").id
    with pytest.raises(error) as info:
        repo.import_table("t", src, key, version=version)
    assert part in str(info.value) and "\n" not in str(info.value)
    assert repo.resolve("main").id == tip and not listing(Path(repo.uri) / "tables")


@pytest.mark.parametrize("what,make,key,version,error,part", BAD_SOURCES[:8:2] + BAD_SOURCES[8:9],
                         ids=[b[0] for b in BAD_SOURCES[:8:2] + BAD_SOURCES[8:9]])
def test_cli_bad_sources_exit_2_with_one_line(tmp_path, cli, what, make, key, version, error, part):
    src = make(tmp_path)
    trimerge.Repository.init(tmp_path / "repo")
    args = ["-C", tmp_path / "repo", "table", "import", "t", src, "-k", key] + (["--version", version] if version else [])
    res = cli(*args)
    assert res.exit_code == 2, res.stderr
    assert len(res.stderr_lines) == 1 and part in res.stderr, res.stderr


def test_cli_import(tmp_path, cli, source):
    repo = trimerge.Repository.init(tmp_path / "repo")
    res = cli("-C", repo.uri, "table", "import", "people", source, "-k", "id", "-k", "name", "-m", "imported",
              "--json", ok=True)
    doc = res.json()
    assert doc["message"] == "imported" and doc["table"] == "people" and doc["source"] == source
    assert doc["dataset"] == repo.table_version("people").dataset and doc["tables"]["people"]["dataset"] == doc["dataset"]
    assert repo.primary_key("people") == ("id", "name")
    text = cli("-C", repo.uri, "table", "import", "v1", source, "-k", "id", "--version", "1", "-b", "main", ok=True)
    assert text.stdout.startswith("[main ") and "Import" in text.stdout
    again = cli("-C", repo.uri, "table", "import", "people", source, "-k", "id")
    assert again.exit_code == 2 and "exists already" in again.stderr


def test_a_source_inside_the_repository_is_refused(tmp_path):
    repo = trimerge.Repository.init(tmp_path / "repo")
    repo.create_table("t", pa.table({"id": [1, 2]}), "id")
    inside = dataset_folder(repo, "t")
    with pytest.raises(InvalidOperationError, match="inside the repository"):
        repo.import_table("copy", str(inside), "id")
    also = write_source(Path(repo.uri) / "elsewhere.lance", 5)  # anywhere below the repository's root
    with pytest.raises(InvalidOperationError, match="inside the repository"):
        repo.import_table("copy", also, "id")
    assert repo.tables() == ["t"] and len(listing(Path(repo.uri) / "tables")) == 1


# ---------------------------------------------------------------------------------------------- the source is safe
def test_writes_branches_merges_gc_and_drop_never_touch_the_source(tmp_path, source):
    before = digest(source)
    repo = trimerge.Repository.init(tmp_path / "repo")
    repo.branches.create("work", from_ref="main")
    repo.import_table("t", source, "id", branch="work")
    want = by_id(lance.dataset(source).to_table())
    w = {"branch": "work"}
    repo.upsert("t", pa.table({"id": pa.array([1, 2000], pa.int64()), "name": ["one", "new"], "score": [1.0, 2.0]}), **w)
    repo.delete("t", "id >= 900 AND id < 1000", **w)
    repo.update("t", pa.table({"id": pa.array([5, 300], pa.int64()), "score": [-1.0, -2.0]}), **w)
    repo.add_columns("t", pa.field("extra", pa.string()), **w)
    repo.drop_columns("t", "extra", **w)
    repo.compact("t", **w)
    repo.branches.create("feat", from_ref="work")
    repo.upsert("t", pa.table({"id": pa.array([7], pa.int64()), "name": ["feat"], "score": [7.0]}), branch="feat")
    repo.delete("t", "id = 8", branch="feat")
    repo.upsert("t", pa.table({"id": pa.array([9], pa.int64()), "name": ["work"], "score": [9.0]}), **w)
    assert merge("feat", "work", repo=repo).status == "merged"
    want[1].update(name="one", score=1.0)
    want[2000] = {"id": 2000, "name": "new", "score": 2.0}
    for k in list(range(900, 1000)) + [8]:
        del want[k]
    want[5]["score"], want[300]["score"] = -1.0, -2.0
    want[7].update(name="feat", score=7.0)
    want[9].update(name="work", score=9.0)
    assert by_id(repo.read("t", "work")) == want
    assert digest(source) == before
    assert repo.gc(retention=0).versions_removed > 0  # Lance cleanup of the clone's unused versions
    assert digest(source) == before and by_id(repo.read("t", "work")) == want
    folder = dataset_folder(repo, "t", "work")
    repo.drop_table("t", **w)
    repo.gc(retention=0)
    assert folder.exists() and digest(source) == before  # history still reads it
    repo.branches.delete("feat")
    repo.branches.delete("work", force=True)
    report = repo.gc(retention=0)
    assert folder.name in report.datasets_removed and not folder.exists()  # the clone, with all it wrote
    assert digest(source) == before
    assert lance.dataset(source).to_table().num_rows == 1000


def test_lance_cleanup_of_a_clone_never_deletes_base_files(tmp_path, source):
    """Lance's own ``cleanup_old_versions`` on a shallow clone whose writes (deletes, compaction)
    made every source file unused by the latest version."""
    from datetime import timedelta

    before = digest(source)
    clone = lance.dataset(source).shallow_clone(str(tmp_path / "clone"), 1)
    clone.delete("id < 100")
    clone.optimize.compact_files()
    clone = lance.dataset(str(tmp_path / "clone"))
    assert all(f.base_id is None for fr in clone.get_fragments() for f in fr.metadata.files)
    stats = clone.cleanup_old_versions(older_than=timedelta(0), delete_unverified=True)
    assert stats.old_versions >= 2
    assert digest(source) == before and lance.dataset(str(tmp_path / "clone")).count_rows() == 900


WRITER = r"""
import sys, trimerge
repo = trimerge.Repository.open(sys.argv[1])
repo.import_table("t", sys.argv[2], "id")
print("DONE", flush=True)
"""


@pytest.mark.parametrize("crash_at,completed", [("import_cloned", False), ("after_write_1", False),
                                                 ("before_publish", True)])
def test_recovery_of_an_interrupted_import_removes_only_the_clone(tmp_path, source, crash_at, completed):
    before = digest(source)
    repo = trimerge.Repository.init(tmp_path / "repo")
    proc = run_python(WRITER, repo.uri, source, env={"TRIMERGE_CRASH_AT": crash_at})
    assert proc.returncode == -9 and "DONE" not in proc.stdout, proc.stderr
    assert len(listing(Path(repo.uri) / "tables")) == 1  # the half-made clone
    repo = trimerge.Repository.open(repo.uri)  # read-write: recovers
    if completed:
        assert repo.read("t").num_rows == 1000 and len(listing(Path(repo.uri) / "tables")) == 1
    else:
        assert repo.tables() == [] and listing(Path(repo.uri) / "tables") == []
    assert digest(source) == before
    repo.import_table("t2", source, "id")  # and the next import works
    assert repo.read("t2").num_rows == 1000


# ---------------------------------------------------------------------------------------------- history
def test_readable_at_every_commit_branchable_and_time_travel(tmp_path, source):
    repo = trimerge.Repository.init(tmp_path / "repo")
    repo.import_table("t", source, "id")
    states = {repo.resolve("main").id: by_id(repo.read("t"))}
    for i in range(3):
        repo.upsert("t", pa.table({"id": pa.array([i, 5000 + i], pa.int64()), "name": [f"v{i}", "x"],
                                   "score": [float(i), 0.0]}))
        states[repo.resolve("main").id] = by_id(repo.read("t"))
    repo.branches.create("feat", from_ref="main~2")
    tv = repo.table_version("t", "feat")
    assert tv.lance_branch == "main"  # a branch forks lazily: nothing yet
    repo.delete("t", "id < 10", branch="feat")
    fork = repo.table_version("t", "feat")
    assert fork.lance_branch != "main" and fork.dataset == tv.dataset  # a Lance branch of the clone
    assert fork.lance_branch in lance.dataset(str(dataset_folder(repo, "t"))).branches.list()
    assert sorted(by_id(repo.read("t", "feat"))) == sorted(k for k in states[repo.resolve("main~2").id] if k >= 10)
    repo.gc(retention=0)
    for commit_id, state in states.items():
        assert by_id(repo.read("t", commit_id)) == state
        assert by_id(repo.read("t", commit_id[:12])) == state
    assert by_id(repo.read("t", "main~3")) == by_id(lance.dataset(source).to_table())


# ---------------------------------------------------------------------------------------------- indices
@pytest.fixture
def indexed_source(tmp_path) -> str:
    n = 2000
    rng = np.random.default_rng(0)
    vectors = rng.random((n, 8), dtype=np.float32)
    src = write_source(tmp_path / "idx.lance", rows_per_file=500, id=pa.array(range(n), pa.int64()),
                       v=pa.FixedSizeListArray.from_arrays(pa.array(vectors.ravel()), 8),
                       text=[f"word{i % 17} other{i}" for i in range(n)])
    ds = lance.dataset(src)
    ds.create_scalar_index("id", "BTREE")
    ds.create_index("v", "IVF_PQ", num_partitions=4, num_sub_vectors=2)
    return src


def test_indices_come_along_and_answer(tmp_path, indexed_source):
    before = digest(indexed_source)
    repo = trimerge.Repository.init(tmp_path / "repo")
    repo.import_table("docs", indexed_source, "id")
    names = {i.name for i in repo.indices("docs")}
    assert {"id_idx", "v_idx"} <= names
    ds = repo.dataset("docs", "main")
    assert "ScalarIndexQuery" in ds.scanner(filter="id = 5", columns=["id"]).explain_plan()
    assert repo.read("docs", filter="id = 5").column("id").to_pylist() == [5]
    query = lance.dataset(indexed_source).take([42], columns=["v"]).column("v")[0].values.to_numpy()
    hits = repo.search("docs", vector=query, column="v", k=3)
    assert 42 in hits.column("id").to_pylist()
    repo.upsert("docs", pa.table({"id": pa.array([5], pa.int64()), "v": pa.FixedSizeListArray.from_arrays(
        pa.array(np.zeros(8, np.float32)), 8), "text": ["changed"]}))
    assert repo.read("docs", filter="id = 5").column("text").to_pylist() == ["changed"]
    assert digest(indexed_source) == before


def test_compaction_keeps_imported_indices_readable(tmp_path, indexed_source):
    repo = trimerge.Repository.init(tmp_path / "repo")
    repo.import_table("docs", indexed_source, "id")
    repo.delete("docs", "id < 100")
    repo.compact("docs")
    assert repo.read("docs", filter="id = 500").num_rows == 1


# ---------------------------------------------------------------------------------------------- no stable row ids
def edit_both_sides(repo: trimerge.Repository) -> None:
    """Branch feat, then change rows on both sides: updates (some of the same rows), deletes,
    inserts, an upsert of existing rows and a compaction."""
    repo.branches.create("feat", from_ref="main")
    n = lambda keys: pa.array(keys, pa.int64())  # noqa: E731
    repo.update("t", pa.table({"id": n([1, 2, 3, 40]), "name": ["f1", "f2", "f3", "f40"]}), branch="feat")
    repo.delete("t", "id IN (10, 11, 600)", branch="feat")
    repo.upsert("t", pa.table({"id": n([3, 2000]), "name": ["f3b", "fnew"], "score": [3.5, 1.0]}), branch="feat")
    repo.compact("t", branch="feat")
    repo.update("t", pa.table({"id": n([1, 50, 700]), "score": [-1.0, -50.0, -700.0]}))
    repo.delete("t", "id IN (12, 13, 999)")
    repo.upsert("t", pa.table({"id": n([3000, 60]), "name": ["mnew", "m60"], "score": [0.0, 60.0]}))
    repo.compact("t")


def test_unstable_source_diff_matches_brute_force(tmp_path, source):
    assert not lance.dataset(source).has_stable_row_ids
    repo = trimerge.Repository.init(tmp_path / "repo")
    repo.import_table("t", source, "id")
    edit_both_sides(repo)
    for a, b in [("main", "feat"), ("feat", "main"), ("main~4", "main"), ("main~4", "feat"), ("feat~2", "feat"),
                 (repo.merge_base("main", "feat").id, "feat")]:
        for plan in ("auto", "fragments", "full"):
            d = diff(a, b, repo=repo, plan=plan).tables["t"]
            want = reference_diff(repo.read("t", a), repo.read("t", b), ["id"])
            assert engine_rows(d.rows(), ["id"]) == want, (a, b, plan)


def test_unstable_source_diff_does_not_try_the_delta_plan(tmp_path, source, caplog):
    repo = trimerge.Repository.init(tmp_path / "repo")
    repo.import_table("t", source, "id")
    repo.upsert("t", pa.table({"id": pa.array([1], pa.int64()), "name": ["x"], "score": [1.0]}))
    with caplog.at_level(logging.WARNING, logger="trimerge.diff"):
        d = diff("main~1", "main", repo=repo).tables["t"]
        d.rows()
    assert d.plan.fallback_from is None and not caplog.records


def test_unstable_source_merge_matches_reference(tmp_path, source):
    from test_merge_properties import reference_merge

    repo = trimerge.Repository.init(tmp_path / "repo")
    repo.import_table("t", source, "id")
    edit_both_sides(repo)
    snap = {r: {row["id"]: {c: v for c, v in row.items() if c != "id"} for row in repo.read("t", r).to_pylist()}
            for r in (repo.merge_base("main", "feat").id, "main", "feat")}
    base, ours, theirs = snap.values()
    want, conflicts, _ = reference_merge(base, ours, theirs, ["name", "score"])
    assert not conflicts
    result = merge("feat", "main", repo=repo)
    assert result.status == "merged"
    assert by_id(repo.read("t")) == {k: {"id": k, **v} for k, v in want.items()}
    assert lance.dataset(source).count_rows() == 1000


@settings(max_examples=6, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_unstable_source_merges_match_reference_on_random_edits(data):
    """``test_merge_properties``' edit scripts and three-way reference, on a table imported from a
    source without stable row ids (several small fragments)."""
    from test_merge_properties import Side, base_strategy, reference_merge, script, snapshot, to_table

    base = data.draw(base_strategy)
    edits = {side: data.draw(script) for side in ("a", "b")}
    with tempfile.TemporaryDirectory() as tmp:
        src = str(Path(tmp) / "src")
        lance.write_dataset(to_table(base, ["a", "b", "f"]), src, max_rows_per_file=2)
        repo = trimerge.Repository.init(Path(tmp) / "repo")
        repo.import_table("t", src, "id")
        for side in ("a", "b"):
            repo.branches.create(side, from_ref="main")
            Side(repo, side).apply(edits[side])
        snap_base, _ = snapshot(repo, "main")
        snap_a, cols_a = snapshot(repo, "a")
        snap_b, cols_b = snapshot(repo, "b")
        columns = sorted(set(cols_a) | set(cols_b))
        want, _, _ = reference_merge(snap_base, snap_b, snap_a, columns, winner="source")
        merge("a", "b", repo=repo, strategy="source-wins")
        got, _ = snapshot(repo, "b")
        from test_merge_properties import assert_rows_equal, full

        assert_rows_equal({k: full(v, columns) for k, v in got.items()}, want)


def test_unstable_source_random_histories_diff_like_brute_force(tmp_path):
    """``test_diff_differential``'s random multi-branch histories with ``t`` and ``u`` imported from
    sources without stable row ids; every plan against the brute-force diff."""
    import test_diff_differential as tdd
    from histories import BASE_SCHEMAS, KEY_VALUES, KEYS, HistoryBuilder, random_operations

    class ImportedHistory(HistoryBuilder):
        seed = 0

        def _create(self, rng, table, branch, min_rows=3, chunks=1):
            if len(getattr(self, "imported", ())) == 2:  # later creations: native tables
                return super()._create(rng, table, branch, min_rows, chunks)
            keys = sorted(rng.sample(KEY_VALUES[table], rng.randint(min_rows, len(KEY_VALUES[table]) - 3)))
            data = [self.random_row(rng, table, k, BASE_SCHEMAS[table]) for k in keys]
            src = str(tmp_path / f"src{self.seed}-{table}")
            lance.write_dataset(pa.Table.from_pylist(data, schema=BASE_SCHEMAS[table]), src, max_rows_per_file=3)
            self.repo.import_table(table, src, KEYS[table], branch=branch)
            self.imported = getattr(self, "imported", []) + [table]
            self.emit(f"# {table} imported (no stable row ids) from rows {data!r}")
            self._name_new_commits()

    for seed in (0,):
        ImportedHistory.seed = seed
        builder = ImportedHistory(str(tmp_path / f"repo{seed}"), init_seed=seed)
        for kind, branch, op_seed in random_operations(seed, 12):
            builder.apply(kind, branch, op_seed)
        found = tdd.check_history(builder, seed)
        assert not found, tdd.report(builder, found)


# ---------------------------------------------------------------------------------------------- missing sources
def test_missing_sources_reports_a_source_that_disappeared(tmp_path, source):
    lance.dataset(source).delete("id = 3")  # the source has a deletion file too
    repo = trimerge.Repository.init(tmp_path / "repo")
    repo.import_table("t", source, "id")
    repo.create_table("native", pa.table({"id": [1]}), "id")
    repo.branches.create("feat", from_ref="main")
    repo.upsert("t", pa.table({"id": pa.array([1], pa.int64()), "name": ["x"], "score": [0.0]}), branch="feat")
    store = repo.table_store
    tvs = [repo.table_version(t, r) for t in ("t", "native") for r in ("main", "feat")]
    assert importing.missing_sources(store, tvs) == []
    assert importing.missing_sources(store, [tv.dataset for tv in tvs]) == []
    ds = repo.dataset("t", "feat")
    assert list(importing.foreign_bases(ds, store).values()) == [source]
    victim = sorted(os.listdir(Path(source) / "data"))[0]
    os.remove(Path(source) / "data" / victim)
    problems = importing.missing_sources(store, tvs)
    assert len(problems) == 2 and all(f"1 file(s) of its import source {source} missing, e.g. data/{victim}" in p
                                      for p in problems)
    shutil.rmtree(source)
    problems = importing.missing_sources(store, tvs)
    assert len(problems) == 2 and all(p.endswith(f"its import source {source} is gone") for p in problems)


def test_fsck_accepts_an_imported_table(tmp_path, source):
    repo = trimerge.Repository.init(tmp_path / "repo")
    repo.import_table("t", source, "id")
    assert repo.fsck().problems == []


# ---------------------------------------------------------------------------------------------- S3
@pytest.mark.s3
def test_import_from_s3_into_an_s3_repository(s3_server, s3_uri, tmp_path):
    from trimerge.lineage.storage.location import Location

    uri, options = s3_uri
    src = uri.rsplit("/", 1)[0] + "/source.lance"
    lance.write_dataset(pa.table({"id": pa.array(range(500), pa.int64()), "v": [f"v{i}" for i in range(500)]}),
                        src, storage_options=options, max_rows_per_file=200)
    objects = Location.parse(src, options).backend("")

    def state():
        return {k: objects.tree_size(k) for k in ("data", "_versions", "_transactions")} | {
            "keys": sorted(k for folder in ("data", "_versions") for k in objects.keys_below(folder))}

    before = state()
    repo = trimerge.Repository.init(uri, storage_options=options)
    repo.import_table("t", src, "id", storage_options=options)
    assert repo.table_store.size(repo.table_version("t").dataset) < 32 * 1024
    repo.upsert("t", pa.table({"id": pa.array([1, 900], pa.int64()), "v": ["one", "new"]}))
    repo.branches.create("feat", from_ref="main")
    repo.delete("t", "id < 10", branch="feat")
    assert merge("feat", "main", repo=repo).status in ("merged", "fast-forward")
    got = by_id(repo.read("t"))
    assert len(got) == 491 and got[900]["v"] == "new" and 1 not in got
    assert importing.missing_sources(repo.table_store, [repo.table_version("t")]) == []
    repo.drop_table("t")
    repo.branches.delete("feat")
    repo.gc(retention=0)
    assert state() == before
    # across stores Lance would write the clone into the source's store: refused before any effect
    local = trimerge.Repository.init(tmp_path / "local")
    with pytest.raises(InvalidOperationError, match="Lance cannot clone across stores"):
        local.import_table("t", src, "id", storage_options=options)
    assert state() == before and local.tables() == [] and not listing(tmp_path / "local" / "tables")
    bucket = Location.parse(s3_server.uri(""), options).backend("")
    assert not list(bucket.keys_below(str(tmp_path).strip("/").split("/")[0]))  # no stray clone there
