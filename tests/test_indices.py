"""Indices as versioned table state (issue 21 items 1, 2, 6).

Every index kind through the API, listed with its definition, travelling with commits and lazy
forks; the refresh threshold (a write that leaves too many rows unindexed refreshes the indices in
the same commit); three-way merges of index definitions (and a model-based property test of the
merge law); bad input through the API and the CLI; kill -9 during an index build; gc beside
index builds and fsck of index files.
"""

from __future__ import annotations

import shutil
import signal
import tempfile
from pathlib import Path

import lance
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, example, given, settings as hsettings, strategies as st

import trimerge
from trimerge.diff import diff
from trimerge.lineage.tables import conversion as tbl
from trimerge.lineage.errors import (
    AlreadyExistsError,
    InvalidOperationError,
    NotFoundError,
    SchemaMismatchError,
    TrimergeError,
)
from trimerge.merge import MergeConflictError, merge

from conftest import lance_branches, run_python

# pylance 14 deprecates list_indices (the helpers below read uuids through it).
pytestmark = pytest.mark.filterwarnings("ignore:The 'list_indices' method is deprecated:DeprecationWarning")

DIM = 16
N = 2000
RECOVERY = "trimerge:recovery"


# ---------------------------------------------------------------------------------------------- helpers
def vectors(n: int, seed: int) -> pa.FixedSizeListArray:
    rng = np.random.default_rng(seed)
    return pa.FixedSizeListArray.from_arrays(pa.array(rng.random(n * DIM, dtype=np.float32)), DIM)


def rows_of(ids, seed: int = 0, tag: str = "x") -> pa.Table:
    """Rows of the vector table: one column per index kind."""
    ids = list(ids)
    return pa.table({
        "id": pa.array(ids, pa.int64()),
        "vec": vectors(len(ids), seed),
        "cat": pa.array([f"c{i % 5}" for i in ids]),
        "score": pa.array([float(i) for i in ids]),
        "tags": pa.array([[f"t{i % 3}", f"u{i % 7}"] for i in ids], pa.list_(pa.string())),
        "body": pa.array([f"{tag} quick brown fox number {i}" for i in ids]),
    })


def small_rows(ids, tag: str = "x") -> pa.Table:
    """Rows of the scalar table used by the merge tests (cheap to index)."""
    ids = list(ids)
    return pa.table({"id": pa.array(ids, pa.int64()), "a": pa.array([i % 7 for i in ids], pa.int64()),
                     "b": pa.array([f"{tag}{i % 3}" for i in ids]), "c": pa.array([float(i) for i in ids])})


def shown(infos) -> dict:
    """Index name -> (columns, kind, params): what a merge compares."""
    return {i.name: (tuple(i.columns), i.kind, dict(i.params)) for i in infos}


def coverage(repo, table: str, ref: str | None = None) -> dict:
    """Index name -> (indexed rows, unindexed rows); one entry per listed index."""
    infos = repo.indices(table, ref=ref)
    names = [i.name for i in infos]
    assert len(names) == len(set(names)), f"an index is listed more than once: {names}"
    return {i.name: (i.num_indexed_rows, i.num_unindexed_rows) for i in infos}


def uuids(repo, table: str, ref: str | None = None) -> set[str]:
    return {i["uuid"] for i in repo.dataset(table, ref).list_indices() if not i["name"].startswith("__")}


def lance_state(repo) -> dict:
    """(dataset, Lance branch) -> number of Lance versions, for every dataset of the repository."""
    out = {}
    root = Path(repo.uri) / "tables"
    for d in sorted(root.iterdir()) if root.exists() else []:
        ds = lance.dataset(str(d))
        out[(d.name, "main")] = len(ds.versions())
        for b in sorted(ds.branches.list()):
            out[(d.name, b)] = len(tbl.open_version(str(d), b, None).versions())
    return out


def repo_state(repo) -> tuple:
    """What a refused operation must leave as it was: branch tips and every Lance version."""
    again = trimerge.Repository.open(repo.uri, read_only=True)
    return {b.name: b.commit_id for b in again.branches.list()}, lance_state(again)


def latest_matches_committed(repo, table: str, branch: str) -> None:
    """The Lance head of a branch's own fork is its committed version (no leftover write)."""
    tv = repo.table_version(table, branch)
    path = repo.dataset_path(tv)
    latest = tbl.open_version(path, tv.lance_branch, None)
    committed = tbl.open_version(path, tv.lance_branch, tv.version)
    # A rolled-back write is undone by restoring the committed version as a new one: same content.
    assert tbl.fragment_signature(latest) == tbl.fragment_signature(committed)
    assert sorted(i["name"] for i in latest.list_indices()) == sorted(i["name"] for i in committed.list_indices())


@pytest.fixture
def vrepo(repo):
    """Table ``t`` (N rows: id, vec, cat, score, tags, body) on main."""
    repo.create_table("t", rows_of(range(N)), "id")
    return repo


@pytest.fixture
def srepo(repo):
    """Table ``t`` (500 rows of scalars: id, a, b, c) on main and branch ``dev`` from it."""
    repo.create_table("t", small_rows(range(500)), "id")
    repo.branches.create("dev")
    return repo


# ---------------------------------------------------------------------------------------------- 1. each kind
KIND_CASES = [
    ("vec", "IVF_PQ", "pq", {"num_partitions": 4, "num_sub_vectors": 4, "metric": "l2"}),
    ("vec", "IVF_HNSW_SQ", "hnsw", {"num_partitions": 2, "m": 8, "ef_construction": 40}),
    ("vec", "IVF_FLAT", "flat", {"num_partitions": 4, "metric": "cosine"}),
    ("score", "BTREE", None, {}),
    ("cat", "BITMAP", None, {}),
    ("tags", "LABEL_LIST", None, {}),
    ("body", "INVERTED", None, {"with_position": False, "lower_case": True}),
]


def test_each_kind_is_listed_with_its_definition_and_travels_with_commits(vrepo):
    repo = vrepo
    expected: dict = {}
    history = [dict(expected)]
    for column, kind, name, params in KIND_CASES:
        commit = repo.create_index("t", column, kind, name=name, **params)
        expected[name or f"{column}_idx"] = ((column,), kind, params)
        history.append(dict(expected))
        assert repo.log()[0].id == commit.id and len(commit.parents) == 1
        assert shown(repo.indices("t")) == expected
    assert coverage(repo, "t") == {n: (N, 0) for n in expected}
    assert repo.read("t").num_rows == N
    # Time travel: each older commit lists the set it had.
    for back, older in enumerate(reversed(history)):
        ref = "main" if back == 0 else f"main~{back}"
        assert shown(repo.indices("t", ref=ref)) == older, ref
    # An index-only commit changes no rows; the diff lists the index change.
    d = diff("main~1", "main", repo=repo)
    assert d.tables["t"].index_changes == [{"index": "body_idx", "change": "added", "columns": ["body"],
                                            "kind": "INVERTED", "params": {"with_position": False, "lower_case": True}}]
    [stat] = d.stat().to_pylist()
    assert (stat["inserted"], stat["deleted"], stat["updated"], stat["cells_changed"]) == (0, 0, 0, 0)
    assert stat["index_changes"] == 1 and stat["schema_changes"] == 0
    # Over several commits: added and dropped both show.
    repo.drop_index("t", "pq")
    repo.create_index("t", "score", "BTREE", replace=True)  # same definition: no change to show
    d = diff("main~2", "main", repo=repo)
    assert [(c["index"], c["change"], c["kind"]) for c in d.tables["t"].index_changes] == [("pq", "dropped", "IVF_PQ")]
    assert diff("main~1", "main", repo=repo).tables["t"].index_changes == []
    assert "pq" in shown(repo.indices("t", ref="main~2")) and "pq" not in shown(repo.indices("t"))
    # A redefinition (same name, other kind) is one change.
    repo.create_index("t", "cat", "BTREE", name="cat_idx", replace=True)
    [change] = diff("main~1", "main", repo=repo).tables["t"].index_changes
    assert (change["index"], change["change"], change["kind"]) == ("cat_idx", "redefined", "BTREE")
    # A transaction sees its own index before publishing; the published commit is one commit.
    before = len(repo.log())
    with repo.transaction(message="two indices") as tx:
        tx.drop_index("t", "flat")
        tx.create_index("t", "vec", "IVF_FLAT", name="flat2", num_partitions=2)
        assert "flat2" in shown(tx.indices("t")) and "flat" not in shown(tx.indices("t"))
        assert "flat" in shown(repo.indices("t"))  # not yet visible outside
    assert len(repo.log()) == before + 1 and repo.log()[0].message == "two indices"
    assert "flat2" in shown(repo.indices("t")) and "flat" not in shown(repo.indices("t"))


# ---------------------------------------------------------------------------------------------- 2. lazy forks, threshold
def test_lazy_fork_carries_indices_and_the_threshold_refreshes_in_the_same_commit(vrepo):
    repo = vrepo
    repo.create_index("t", "score", "BTREE")
    repo.create_index("t", "cat", "BITMAP")
    assert repo.settings.get("index.refresh_threshold") == 0.10
    repo.branches.create("b")
    assert lance_branches(repo, "t") == []  # lazy: no fork until the first write
    assert shown(repo.indices("t", ref="b")) == shown(repo.indices("t"))
    # Below the threshold (100 / 2100 < 10%): the new rows stay outside the indices.
    repo.upsert("t", rows_of(range(N, N + 100), seed=1), branch="b")
    assert len(lance_branches(repo, "t")) == 1
    assert coverage(repo, "t", "b") == {"score_idx": (N, 100), "cat_idx": (N, 100)}
    assert coverage(repo, "t", "main") == {"score_idx": (N, 0), "cat_idx": (N, 0)}
    # Updated rows move out of the index too (150 / 2100 still below).
    repo.upsert("t", rows_of(range(50), seed=2), branch="b")
    assert coverage(repo, "t", "b") == {"score_idx": (N - 50, 150), "cat_idx": (N - 50, 150)}
    # Over the threshold (250 / 2200): refreshed in the same commit.
    commits = len(repo.log("b"))
    commit = repo.upsert("t", rows_of(range(N + 100, N + 200), seed=3), branch="b")
    assert len(repo.log("b")) == commits + 1 and repo.log("b")[0].id == commit.id
    assert commit.message == "Upsert into t"
    assert coverage(repo, "t", "b") == {"score_idx": (N + 200, 0), "cat_idx": (N + 200, 0)}
    assert coverage(repo, "t", "b~1") == {"score_idx": (N - 50, 150), "cat_idx": (N - 50, 150)}  # history as it was
    # optimize_indices indexes the rest; None when there is nothing to do.
    repo.upsert("t", rows_of(range(N + 200, N + 230), seed=4), branch="b")
    assert coverage(repo, "t", "b")["score_idx"] == (N + 200, 30)
    done = repo.optimize_indices("t", branch="b")
    assert done is not None and repo.log("b")[0].id == done.id
    assert coverage(repo, "t", "b") == {"score_idx": (N + 230, 0), "cat_idx": (N + 230, 0)}
    assert repo.read("t", ref="b").num_rows == N + 230
    assert diff("b~1", "b", repo=repo).stat().to_pylist()[0]["inserted"] == 0  # a maintenance commit: no rows
    assert repo.optimize_indices("t", branch="b") is None
    # Threshold 1 turns refreshing off.
    repo.settings.set("index.refresh_threshold", 1)
    repo.upsert("t", rows_of(range(N + 230, 2 * N + 230), seed=5), branch="b")
    assert coverage(repo, "t", "b")["score_idx"] == (N + 230, N)
    repo.settings.set("index.refresh_threshold", None)  # back to the default
    assert repo.settings.get("index.refresh_threshold") == 0.10
    # Dropping an index on the branch leaves main's alone.
    repo.drop_index("t", "cat_idx", branch="b")
    assert set(shown(repo.indices("t", ref="b"))) == {"score_idx"}
    assert main_untouched(repo)


def main_untouched(repo) -> bool:
    return repo.read("t").num_rows == N and coverage(repo, "t") == {"score_idx": (N, 0), "cat_idx": (N, 0)}


def test_threshold_boundary_and_zero(vrepo):
    repo = vrepo
    repo.create_index("t", "score", "BTREE")
    repo.settings.set("index.refresh_threshold", 0.2)
    assert trimerge.Repository.open(repo.uri).settings.get("index.refresh_threshold") == 0.2  # persisted
    repo.append("t", rows_of(range(N, N + 500), seed=1))  # exactly 20% unindexed: not more than the threshold
    assert coverage(repo, "t") == {"score_idx": (N, 500)}
    repo.append("t", rows_of([N + 500], seed=2))  # now more
    assert coverage(repo, "t") == {"score_idx": (N + 501, 0)}
    repo.settings.set("index.refresh_threshold", 0)  # every write refreshes
    repo.append("t", rows_of([N + 501], seed=3))
    assert coverage(repo, "t") == {"score_idx": (N + 502, 0)}


def test_bad_settings_are_refused_and_change_nothing(vrepo, cli):
    repo = vrepo
    repo.settings.set("index.refresh_threshold", 0.3)
    doc = Path(repo.uri) / "_trimerge" / "settings.json"
    stored = doc.read_bytes() if doc.exists() else None
    for bad in (2, -0.1, "x", True, 1.0000001, [0.1], float("nan")):
        with pytest.raises(InvalidOperationError):
            repo.settings.set("index.refresh_threshold", bad)
        assert repo.settings.get("index.refresh_threshold") == 0.3, bad
    with pytest.raises(InvalidOperationError):
        repo.settings.set("index.no_such_setting", 0.1)
    assert (doc.read_bytes() if doc.exists() else None) == stored
    assert trimerge.Repository.open(repo.uri).settings.get("index.refresh_threshold") == 0.3
    # The CLI: one line on stderr, exit 2, nothing changed; good values work.
    for bad in ("2", "-0.1", "x", "true"):
        res = cli("-C", repo.uri, "config", "index.refresh_threshold", bad)
        assert_one_line_error(res)
    assert (doc.read_bytes() if doc.exists() else None) == stored
    ok = cli("-C", repo.uri, "--json", "config", "index.refresh_threshold", "0.25", ok=True)
    assert ok.json() == {"index.refresh_threshold": 0.25}
    assert trimerge.Repository.open(repo.uri).settings.get("index.refresh_threshold") == 0.25
    listed = cli("-C", repo.uri, "--json", "config", ok=True).json()
    assert listed["index.refresh_threshold"] == 0.25


def test_vector_index_segments_are_one_index(vrepo):
    repo = vrepo
    repo.create_index("t", "vec", "IVF_PQ", num_partitions=4, num_sub_vectors=4)
    repo.append("t", rows_of(range(N, N + 300), seed=1))  # refresh 1: Lance merges into the index
    repo.append("t", rows_of(range(N + 300, N + 600), seed=2))  # refresh 2: Lance adds a delta segment
    assert coverage(repo, "t") == {"vec_idx": (N + 600, 0)}  # listed once, covering every row
    tv = repo.table_version("t")
    versions = len(lance.dataset(repo.dataset_path(tv)).versions())
    repo.append("t", rows_of([N + 600], seed=3))  # 1 row of 2601: no refresh due
    assert len(lance.dataset(repo.dataset_path(tv)).versions()) == versions + 1
    assert coverage(repo, "t") == {"vec_idx": (N + 600, 1)}


def test_dropping_an_indexed_column_drops_its_index_only(srepo):
    repo = srepo
    repo.create_index("t", "c", "BTREE")
    repo.create_index("t", "a", "BITMAP")
    repo.drop_columns("t", ["c"])
    assert shown(repo.indices("t")) == {"a_idx": (("a",), "BITMAP", {})}
    assert dict(repo.table_version("t").index_params) == {"a_idx": "{}"}  # the definition is forgotten too
    [change] = diff("main~1", "main", repo=repo).tables["t"].index_changes
    assert (change["index"], change["change"]) == ("c_idx", "dropped")
    assert "c_idx" in shown(repo.indices("t", ref="main~1"))


# ---------------------------------------------------------------------------------------------- 3. rows after the index
def test_rows_written_after_the_index_are_found_by_a_vector_query(vrepo):
    repo = vrepo
    repo.create_index("t", "vec", "IVF_PQ", num_partitions=4, num_sub_vectors=4)
    repo.branches.create("b")
    new = rows_of([N + 7], seed=99)
    probe = new.column("vec").to_pylist()[0]
    repo.upsert("t", new, branch="b")
    assert coverage(repo, "t", "b") == {"vec_idx": (N, 1)}  # the row is not in the index

    def nearest(ref):
        return repo.dataset("t", ref).to_table(nearest={"column": "vec", "q": probe, "k": 3, "nprobes": 4,
                                                        "refine_factor": 50}, columns=["id"])

    found = nearest("b")
    assert found.column("id")[0].as_py() == N + 7 and found.column("_distance")[0].as_py() == pytest.approx(0, abs=1e-5)
    assert N + 7 not in nearest("main").column("id").to_pylist()
    assert N + 7 not in nearest("b~1").column("id").to_pylist()
    # Also once it is in the index.
    repo.optimize_indices("t", branch="b")
    assert coverage(repo, "t", "b") == {"vec_idx": (N + 1, 0)}
    assert nearest("b").column("id")[0].as_py() == N + 7


# ---------------------------------------------------------------------------------------------- 4. merges
def test_index_added_on_the_source_only(srepo):
    repo = srepo
    repo.create_index("t", "a", "BTREE", branch="dev")
    result = merge("dev", "main", repo=repo)  # only the source changed t: its table is taken
    assert result.status == "merged"
    assert shown(repo.indices("t")) == {"a_idx": (("a",), "BTREE", {})}
    # Both sides changed rows, the source added an index: the merge builds it on dest's rows.
    repo.create_index("t", "b", "BITMAP", name="ib", branch="dev")
    repo.upsert("t", small_rows([1000]), branch="dev")
    repo.upsert("t", small_rows([2000]), branch="main")
    result = merge("dev", "main", repo=repo)
    assert result.status == "merged" and not result.conflicts
    assert shown(repo.indices("t")) == {"a_idx": (("a",), "BTREE", {}), "ib": (("b",), "BITMAP", {})}
    ids = set(repo.read("t").column("id").to_pylist())
    assert {1000, 2000} <= ids and len(ids) == 502
    assert coverage(repo, "t")["ib"] == (502, 0)
    assert "add index ib" in result.stats["t"].schema_changes


def test_index_on_both_sides_keeps_dest_trained_index(vrepo):
    repo = vrepo
    repo.create_index("t", "vec", "IVF_PQ", num_partitions=4, num_sub_vectors=4)
    repo.create_index("t", "score", "BTREE")
    repo.branches.create("dev")
    repo.upsert("t", rows_of(range(N, N + 20), seed=1), branch="dev")
    repo.upsert("t", rows_of(range(3, 8), seed=2, tag="dev"), branch="dev")
    repo.upsert("t", rows_of(range(N + 20, N + 40), seed=3))
    before = uuids(repo, "t", "main")
    defs = shown(repo.indices("t"))
    result = merge("dev", "main", repo=repo)
    assert result.status == "merged" and result.stats["t"].action == "merged"
    after = uuids(repo, "t", "main")
    assert before <= after, "dest's trained indices were rebuilt"
    assert shown(repo.indices("t")) == defs
    assert repo.read("t").num_rows == N + 40
    # Rows the merge wrote (20 inserted, 5 updated by the source) stay outside the index below the
    # threshold: nothing was retrained.
    assert coverage(repo, "t") == {"vec_idx": (N - 5, 45), "score_idx": (N - 5, 45)}


def test_index_dropped_on_one_side_is_dropped(srepo):
    repo = srepo
    repo.create_index("t", "a", "BTREE")
    repo.create_index("t", "b", "BITMAP")
    repo.create_index("t", "c", "BTREE")
    repo.create_index("t", "id", "BTREE")
    repo.branches.create("src")
    repo.drop_index("t", "a_idx", branch="src")  # the source drops a, dest changes rows
    repo.drop_index("t", "c_idx", branch="src")  # both drop c
    repo.upsert("t", small_rows([1000]), branch="src")
    repo.drop_index("t", "b_idx")  # dest drops b, the source changes rows: dest's drop must survive
    repo.drop_index("t", "c_idx")
    repo.upsert("t", small_rows([2000]))
    result = merge("src", "main", repo=repo)
    assert result.status == "merged" and not result.conflicts
    assert shown(repo.indices("t")) == {"id_idx": (("id",), "BTREE", {})}
    assert {1000, 2000} <= set(repo.read("t").column("id").to_pylist())
    assert [c["index"] for c in diff("main^1", "main", repo=repo).tables["t"].index_changes] == ["a_idx"]


def test_both_sides_add_the_same_index_gives_one(srepo):
    repo = srepo
    repo.create_index("t", "a", "BTREE", name="ia", branch="dev")
    repo.upsert("t", small_rows([1000]), branch="dev")
    repo.create_index("t", "a", "BTREE", name="ia")
    repo.upsert("t", small_rows([2000]))
    dest_uuid = uuids(repo, "t", "main")
    result = merge("dev", "main", repo=repo)
    assert result.status == "merged" and not result.conflicts
    assert shown(repo.indices("t")) == {"ia": (("a",), "BTREE", {})}
    assert dest_uuid <= uuids(repo, "t", "main")  # dest's own, not rebuilt


@pytest.fixture
def add_add(srepo):
    """``ia`` is BTREE on dev (the source) and BITMAP on main (dest); both changed rows."""
    repo = srepo
    repo.create_index("t", "a", "BTREE", name="ia", branch="dev")
    repo.upsert("t", small_rows([1000]), branch="dev")
    repo.create_index("t", "a", "BITMAP", name="ia")
    repo.upsert("t", small_rows([2000]))
    return repo


def test_add_add_conflict_publishes_nothing(add_add):
    repo = add_add
    before = repo_state(repo)
    dry = merge("dev", "main", repo=repo, dry_run=True)
    assert dry.status == "conflicts"
    [c] = dry.conflicts
    assert (c.kind, c.table, c.columns) == ("index.add_add", "t", ("a",))
    assert c.ours == {"columns": ["a"], "kind": "BITMAP", "params": {}}
    assert c.theirs == {"columns": ["a"], "kind": "BTREE", "params": {}}
    assert c.base is None and "ia" in c.message
    with pytest.raises(MergeConflictError) as info:
        merge("dev", "main", repo=repo)
    assert [c.kind for c in info.value.result.conflicts] == ["index.add_add"]
    assert repo_state(repo) == before
    assert shown(repo.indices("t")) == {"ia": (("a",), "BITMAP", {})}


@pytest.mark.parametrize("how, kind", [("source-wins", "BTREE"), ("dest-wins", "BITMAP"),
                                       ({"t": "source-wins"}, "BTREE"), ("theirs", "BTREE"), ("ours", "BITMAP")])
def test_add_add_settled_by_strategy_or_resolution(add_add, how, kind):
    repo = add_add
    if how in ("ours", "theirs"):
        table = merge("dev", "main", repo=repo, dry_run=True).conflicts_table()
        resolutions = pa.Table.from_pylist([{**row, "resolution": how, "value": None} for row in table.to_pylist()])
        result = merge("dev", "main", repo=repo, resolutions=resolutions)
        assert result.commit.metadata["merge.resolved_by_hand"] == "1"
    else:
        result = merge("dev", "main", repo=repo, strategy=how)
    assert result.status == "merged"
    assert shown(repo.indices("t")) == {"ia": (("a",), kind, {})}
    # The source's definition is built on the merged rows; dest's is kept as it was (not rebuilt:
    # dest's own row 2000 and the merged row 1000 are still outside it).
    assert coverage(repo, "t") == {"ia": (502, 0) if kind == "BTREE" else (500, 2)}
    assert {1000, 2000} <= set(repo.read("t").column("id").to_pylist())


def test_drop_modify_conflict(srepo):
    repo = srepo
    repo.create_index("t", "a", "BTREE", name="ia")
    repo.branches.create("src")
    repo.drop_index("t", "ia", branch="src")  # the source drops it
    repo.upsert("t", small_rows([1000]), branch="src")
    repo.create_index("t", "a", "BITMAP", name="ia", replace=True)  # dest redefines it
    repo.upsert("t", small_rows([2000]))
    repo.branches.create("main2")  # main's tip again, to settle the conflict both ways
    before = repo_state(repo)
    with pytest.raises(MergeConflictError) as info:
        merge("src", "main", repo=repo)
    [c] = info.value.result.conflicts
    assert c.kind == "index.drop_modify" and c.theirs is None and c.ours["kind"] == "BITMAP"
    assert c.base == {"columns": ["a"], "kind": "BTREE", "params": {}}
    assert repo_state(repo) == before
    # The other direction: dest dropped it, the source redefined it.
    dry = merge("main", "src", repo=repo, dry_run=True)
    assert [(c.kind, c.ours, c.theirs["kind"]) for c in dry.conflicts] == [("index.drop_modify", None, "BITMAP")]
    # Settled either way.
    merge("src", "main", repo=repo, strategy="dest-wins")
    assert shown(repo.indices("t")) == {"ia": (("a",), "BITMAP", {})}
    merge("src", "main2", repo=repo, strategy="source-wins")
    assert shown(repo.indices("t", ref="main2")) == {}
    for ref in ("main", "main2"):
        assert {1000, 2000} <= set(repo.read("t", ref=ref).column("id").to_pylist())


def test_dest_index_survives_when_only_the_source_changed_rows(srepo):
    repo = srepo
    repo.create_index("t", "b", "BITMAP", name="ib")  # dest adds an index, no row change
    created = uuids(repo, "t", "main")
    repo.upsert("t", small_rows(range(20), tag="dev"), branch="dev")  # source changes 20 rows
    result = merge("dev", "main", repo=repo)
    assert result.status == "merged"
    assert shown(repo.indices("t")) == {"ib": (("b",), "BITMAP", {})}
    assert created <= uuids(repo, "t", "main")
    got = {r["id"]: r["b"] for r in repo.read("t").to_pylist()}
    assert all(got[i].startswith("dev") for i in range(20))
    # Over the threshold: the source's rows go into dest's index in the merge commit.
    repo.upsert("t", small_rows(range(100, 400), tag="big"), branch="dev")
    merge("dev", "main", repo=repo)
    assert shown(repo.indices("t")) == {"ib": (("b",), "BITMAP", {})}
    assert coverage(repo, "t") == {"ib": (500, 0)}
    assert repo.read("t", filter="b = 'big1'").num_rows == 100
    # And the source adding an index while dest changed rows: the index comes over.
    repo.create_index("t", "c", "BTREE", name="ic", branch="dev")
    repo.upsert("t", small_rows([3000]))
    merge("dev", "main", repo=repo)
    assert set(shown(repo.indices("t"))) == {"ib", "ic"}
    assert coverage(repo, "t")["ic"] == (501, 0)


# ---------------------------------------------------------------------------------------------- 5. the merge law
INDEX_COLUMNS = {"i1": "a", "i2": "b", "i3": "c"}  # a name always indexes the same column
OPS = st.one_of(st.tuples(st.just("create"), st.sampled_from(sorted(INDEX_COLUMNS)), st.sampled_from(["BTREE", "BITMAP"])),
                st.tuples(st.just("drop"), st.sampled_from(sorted(INDEX_COLUMNS)), st.none()))
SIDE = st.tuples(st.lists(OPS, max_size=3), st.booleans())


def apply_ops(repo, branch: str, ops, model: dict) -> dict:
    model = dict(model)
    for op, name, kind in ops:
        column = INDEX_COLUMNS[name]
        if op == "create":
            repo.create_index("t", column, kind, name=name, replace=name in model, branch=branch)
            model[name] = ((column,), kind, {})
        elif name in model:
            repo.drop_index("t", name, branch=branch)
            del model[name]
    return model


def three_way(b: dict, o: dict, t: dict) -> tuple[dict, dict]:
    """The merge law by name: (merged definitions, conflicts name -> kind)."""
    out, conflicts = {}, {}
    for name in b.keys() | o.keys() | t.keys():
        bv, ov, tv = b.get(name), o.get(name), t.get(name)
        if ov == tv or tv == bv:
            chosen = ov
        elif ov == bv:
            chosen = tv
        else:
            conflicts[name] = "index.drop_modify" if ov is None or tv is None else "index.add_add"
            continue
        if chosen is not None:
            out[name] = chosen
    return out, conflicts


@hsettings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(base=st.lists(OPS, max_size=2), ours=SIDE, theirs=SIDE)
@example(base=[], ours=([("create", "i1", "BTREE")], True), theirs=([("create", "i1", "BITMAP")], False))
@example(base=[("create", "i1", "BTREE")], ours=([("drop", "i1", None)], False),
         theirs=([("create", "i1", "BITMAP")], True))
@example(base=[("create", "i2", "BITMAP"), ("create", "i3", "BTREE")],
         ours=([("create", "i1", "BTREE"), ("drop", "i3", None)], True),
         theirs=([("drop", "i2", None), ("create", "i1", "BTREE")], True))
def test_merge_law_of_index_definitions(base, ours, theirs):
    folder = tempfile.mkdtemp(prefix="trimerge-indices-")
    try:
        repo = trimerge.Repository.init(Path(folder) / "repo")
        repo.create_table("t", small_rows(range(40)), "id")
        b = apply_ops(repo, "main", base, {})
        repo.branches.create("x")
        repo.branches.create("y")
        models = {}
        for branch, (ops, write), new_id in (("x", ours, 1000), ("y", theirs, 2000)):
            models[branch] = apply_ops(repo, branch, ops, b)
            if write:
                repo.upsert("t", small_rows([new_id]), branch=branch)
            assert shown(repo.indices("t", ref=branch)) == models[branch]
        want, conflicts = three_way(b, models["x"], models["y"])
        x_tip = repo.resolve("x").id
        if conflicts:
            dry = merge("y", "x", repo=repo, dry_run=True)
            got = {c.message.split("'")[1]: c.kind for c in dry.conflicts}
            assert got == conflicts
            before = repo_state(repo)
            with pytest.raises(MergeConflictError):
                merge("y", "x", repo=repo)
            assert repo_state(repo) == before
            return
        merge("y", "x", repo=repo)
        assert shown(repo.indices("t", ref="x")) == want
        merge(x_tip, "y", repo=repo)  # the other direction, from the same two tips
        assert shown(repo.indices("t", ref="y")) == want
        for branch in ("x", "y"):
            coverage(repo, "t", branch)  # each listed once
    finally:
        shutil.rmtree(folder, ignore_errors=True)


# ---------------------------------------------------------------------------------------------- 6. bad input
BAD_API = [
    (dict(column="vec", kind="IVF_NOPE"), InvalidOperationError, "unknown index kind"),
    (dict(column="cat", kind="IVF_PQ"), SchemaMismatchError, "needs a vector"),
    (dict(column="score", kind="INVERTED"), SchemaMismatchError, "needs text"),
    (dict(column="cat", kind="LABEL_LIST"), SchemaMismatchError, "list of scalars"),
    (dict(column="vec", kind="BTREE"), SchemaMismatchError, "needs a scalar"),
    (dict(column="nope", kind="BTREE"), SchemaMismatchError, "no column"),
    (dict(column="id", kind="BTREE", num_partitions=4), InvalidOperationError, "unknown parameter"),
    (dict(column="vec", kind="IVF_PQ", bogus=1), InvalidOperationError, "unknown parameter"),
    (dict(column="vec", kind="IVF_PQ", num_partitions="x"), InvalidOperationError, "num_partitions"),
    (dict(column="vec", kind="IVF_PQ", num_partitions=0), InvalidOperationError, "num_partitions"),
    (dict(column="vec", kind="IVF_PQ", num_partitions=True), InvalidOperationError, "num_partitions"),
    (dict(column="vec", kind="IVF_PQ", num_sub_vectors=3), InvalidOperationError, "does not divide"),
    (dict(column="vec", kind="IVF_PQ", num_bits=6), InvalidOperationError, "num_bits"),
    (dict(column="vec", kind="IVF_FLAT", metric="manhattan"), InvalidOperationError, "metric"),
    (dict(column="vec", kind="IVF_FLAT", metric="hamming"), InvalidOperationError, "hamming"),
    (dict(column="body", kind="INVERTED", with_position="yes"), InvalidOperationError, "with_position"),
    (dict(column="score", kind="BTREE", name=""), InvalidOperationError, "index name"),
    (dict(column="score", kind="BTREE", name="dup"), AlreadyExistsError, "exists already"),
    (dict(column="cat", kind="BITMAP", name="other"), AlreadyExistsError, "cat_idx"),
]


@pytest.fixture
def bad_repo(vrepo):
    repo = vrepo
    repo.create_index("t", "cat", "BITMAP")
    repo.create_index("t", "score", "BTREE", name="dup")
    repo.branches.create("lazy")  # no fork yet: a refused write must not create one
    return repo


def test_bad_index_input_through_the_api_changes_nothing(bad_repo):
    repo = bad_repo
    before = repo_state(repo)
    indices_before = shown(repo.indices("t"))
    for branch in ("main", "lazy"):
        for args, error, text in BAD_API:
            args = dict(args)
            with pytest.raises(error) as info:
                repo.create_index("t", args.pop("column"), args.pop("kind"), branch=branch, **args)
            assert text in str(info.value) and "\n" not in str(info.value), (args, str(info.value))
            assert isinstance(info.value, TrimergeError)
        with pytest.raises(NotFoundError, match="no index 'nope'"):
            repo.drop_index("t", "nope", branch=branch)
        with pytest.raises(TrimergeError):
            repo.create_index("nosuchtable", "x", "BTREE", branch=branch)
        with repo.transaction(branch) as tx:  # a refused step inside a transaction: the rest still commits
            with pytest.raises(AlreadyExistsError):
                tx.create_index("t", "body", "INVERTED", name="dup")
        assert repo_state(repo) == before
    assert shown(repo.indices("t")) == indices_before
    assert lance_branches(repo, "t") == []
    assert repo.optimize_indices("t") is None  # nothing to do: no commit either
    assert repo_state(repo) == before


def assert_one_line_error(res, code=2):
    assert res.exit_code == code, (res.exit_code, res.stdout, res.stderr)
    assert "Traceback" not in res.stderr + res.stdout
    assert len(res.stderr_lines) == 1, res.stderr
    assert res.stderr_lines[0].startswith("error:"), res.stderr
    assert res.stdout == "", res.stdout


def test_index_commands(bad_repo, cli, run_trimerge):
    repo = bad_repo
    path = repo.uri
    before = repo_state(repo)
    bad = [
        ["index", "create", "t", "vec", "--kind", "NOPE"],
        ["index", "create", "t", "cat", "--kind", "IVF_PQ"],
        ["index", "create", "t", "nope", "--kind", "BTREE"],
        ["index", "create", "t", "id", "--kind", "BTREE", "--param", "num_partitions=4"],
        ["index", "create", "t", "vec", "--kind", "IVF_PQ", "--param", "num_partitions=x"],
        ["index", "create", "t", "vec", "--kind", "IVF_PQ", "--param", "num_sub_vectors=5"],
        ["index", "create", "t", "vec", "--kind", "IVF_PQ", "--param", "num_partitions"],
        ["index", "create", "t", "vec", "--kind", "IVF_PQ", "--param", "=4"],
        ["index", "create", "t", "vec", "--kind", "IVF_PQ", "--param", "name=x"],
        ["index", "create", "t", "vec", "--kind", "IVF_FLAT", "--name", "dup"],
        ["index", "create", "t", "score", "--kind", "BTREE"],  # score has a BTREE already ('dup')
        ["index", "create", "t", "score", "--kind", "BTREE", "-b", "nosuchbranch"],
        ["index", "create", "t", "score"],  # --kind is required
        ["index", "drop", "t", "nope"],
        ["index", "drop", "t", "nope", "-b", "lazy"],
        ["index", "list", "nosuchtable"],
        ["index", "optimize", "nosuchtable"],
    ]
    for args in bad:
        assert_one_line_error(cli("-C", path, *args))
    assert repo_state(repo) == before
    # The real console script: exit code 2 and one line, too.
    real = run_trimerge("-C", path, "index", "create", "t", "vec", "--kind", "IVF_PQ", "--param", "num_sub_vectors=3")
    assert_one_line_error(real)
    assert repo_state(repo) == before
    # The good path.
    made = cli("-C", path, "--json", "index", "create", "t", "vec", "--kind", "ivf_pq", "--name", "pq",
               "--param", "num_partitions=4", "--param", "num_sub_vectors=4", "--param", "metric=cosine", ok=True)
    assert made.json()["id"] == repo.resolve("main").id
    listed = cli("-C", path, "--json", "index", "list", "t", ok=True).json()
    pq = next(r for r in listed if r["name"] == "pq")
    assert pq == {"table": "t", "name": "pq", "columns": ["vec"], "kind": "IVF_PQ",
                  "params": {"num_partitions": 4, "num_sub_vectors": 4, "metric": "cosine"},
                  "num_indexed_rows": N, "num_unindexed_rows": 0}
    assert [r["name"] for r in cli("-C", path, "--json", "index", "list", "--ref", "main~1", ok=True).json()] == \
        ["cat_idx", "dup"]
    text = cli("-C", path, "index", "list", "t", ok=True).stdout
    assert "pq\tIVF_PQ on vec" in text and f"{N} indexed, 0 not yet" in text
    assert cli("-C", path, "--json", "index", "optimize", "t", ok=True).json() == {"commit": None}
    cli("-C", path, "index", "drop", "t", "pq", "-m", "no pq", ok=True)
    assert repo.log()[0].message == "no pq" and "pq" not in shown(repo.indices("t"))


# ---------------------------------------------------------------------------------------------- 7. kill -9
WRITER = r"""
import sys
import numpy as np
import pyarrow as pa
import trimerge

path, branch, scenario = sys.argv[1], sys.argv[2], sys.argv[3]
repo = trimerge.Repository.open(path)
with repo.transaction(branch=branch, actor="writer", message="crashy " + scenario) as tx:
    print(tx.ulid, flush=True)
    if scenario == "build":
        tx.create_index("t", "vec", "IVF_PQ", name="crash_idx", num_partitions=2, num_sub_vectors=4)
    elif scenario == "refresh":
        ids = list(range(5000, 5300))
        vec = pa.FixedSizeListArray.from_arrays(pa.array(np.zeros(len(ids) * 16, dtype=np.float32)), 16)
        tx.append("t", pa.table({"id": pa.array(ids, pa.int64()), "vec": vec,
                                 "score": pa.array([float(i) for i in ids])}))
print("DONE", tx.commit.id, flush=True)
"""


@pytest.fixture
def crash_repo(repo):
    repo.create_table("t", rows_of(range(1000)).select(["id", "vec", "score"]), "id")
    repo.create_index("t", "score", "BTREE")
    repo.branches.create("owned")
    repo.upsert("t", rows_of([1000], seed=1).select(["id", "vec", "score"]), branch="owned")  # owns a fork
    repo.branches.create("lazy")
    return repo


@pytest.mark.parametrize("branch, scenario, crash_at", [
    ("owned", "build", "after_write_1"),
    ("lazy", "build", "after_write_1"),
    ("owned", "build", "before_publish"),
    ("owned", "refresh", "after_write_2"),  # killed while the upkeep refreshes the index
])
def test_kill_during_an_index_build_is_repaired(crash_repo, branch, scenario, crash_at):
    repo = crash_repo
    rows_before = repo.read("t", ref=branch).num_rows
    indices_before = shown(repo.indices("t", ref=branch))
    coverage_before = coverage(repo, "t", branch)
    forks_before = lance_branches(repo, "t")
    proc = run_python(WRITER, repo.uri, branch, scenario, env={"TRIMERGE_CRASH_AT": crash_at})
    assert proc.returncode == -signal.SIGKILL, (proc.returncode, proc.stderr)
    ulid = proc.stdout.split()[0]

    again = trimerge.Repository.open(repo.uri)  # read-write: recovers
    rolled_back = crash_at != "before_publish"
    assert again.last_recovery.rolled_back == ([ulid] if rolled_back else [])
    assert again.last_recovery.completed == ([] if rolled_back else [ulid])
    [repair] = again.log(branch, actor=RECOVERY)
    assert repair.metadata["recovery.action"] == ("rolled_back" if rolled_back else "completed")
    assert again.fsck().problems == []
    assert again.read("t", ref="main").num_rows == 1000 and shown(again.indices("t", ref="main")) == \
        {"score_idx": (("score",), "BTREE", {})}
    if rolled_back:
        assert again.read("t", ref=branch).num_rows == rows_before
        assert shown(again.indices("t", ref=branch)) == indices_before
        assert coverage(again, "t", branch) == coverage_before
        assert [c for c in again.log(branch) if c.ulid == ulid] == []
        assert lance_branches(again, "t") == forks_before
    else:
        assert [c.ulid for c in again.log(branch)].count(ulid) == 1
        assert shown(again.indices("t", ref=branch)) == {**indices_before,
                                                         "crash_idx": (("vec",), "IVF_PQ",
                                                                       {"num_partitions": 2, "num_sub_vectors": 4})}
    if again.table_version("t", branch).owner == again.branches.get(branch).id:
        latest_matches_committed(again, "t", branch)
    # The next index build works, also under the crashed index's name.
    if rolled_back:
        again.create_index("t", "vec", "IVF_PQ", name="crash_idx", num_partitions=2, num_sub_vectors=4, branch=branch)
    else:
        with pytest.raises(AlreadyExistsError):
            again.create_index("t", "vec", "IVF_PQ", name="crash_idx", branch=branch)
    again.create_index("t", "vec", "IVF_FLAT", name="after", num_partitions=2, branch=branch)
    assert {"crash_idx", "after"} <= set(shown(again.indices("t", ref=branch)))
    latest_matches_committed(again, "t", branch)
    assert again.fsck().problems == []


# ---------------------------------------------------------------------------------------------- 8. gc
def test_gc_beside_index_builds_and_fsck_of_index_files(vrepo):
    repo = vrepo
    repo.create_index("t", "score", "BTREE")
    repo.create_index("t", "vec", "IVF_PQ", num_partitions=4, num_sub_vectors=4)
    repo.create_index("t", "cat", "BITMAP")
    repo.drop_index("t", "cat_idx")  # main~1 still has it: its files must stay
    # A branch builds and refreshes indices, then goes away.
    repo.branches.create("tmp")
    repo.create_index("t", "tags", "LABEL_LIST", branch="tmp")
    repo.upsert("t", rows_of(range(N, N + 400), seed=7), branch="tmp")  # refreshes
    repo.create_index("t", "vec", "IVF_FLAT", name="flat", num_partitions=2, branch="tmp")
    assert len(lance_branches(repo, "t")) == 1
    repo.branches.delete("tmp", force=True)
    # main keeps writing: a refresh and a rebuild leave superseded index files behind.
    repo.upsert("t", rows_of(range(2 * N, 2 * N + 400), seed=8))
    repo.create_index("t", "score", "BTREE", replace=True)
    report = repo.gc(retention=0)
    assert report.forks_removed
    assert lance_branches(repo, "t") == []
    assert repo.fsck().problems == []
    # Every commit of main still reads through its indices.
    probe = rows_of([0], seed=0).column("vec").to_pylist()[0]  # row 0's vector
    query = {"column": "vec", "q": probe, "k": 1, "nprobes": 4, "refine_factor": 50}
    for back in range(len(repo.log("main"))):
        ref = f"main~{back}"
        if "t" not in repo.tables(ref):
            continue
        infos = coverage(repo, "t", ref)
        ds = repo.dataset("t", ref)
        if "vec_idx" in infos:
            assert ds.to_table(nearest=query, columns=["id"]).column("id")[0].as_py() == 0
        if "score_idx" in infos:
            assert ds.to_table(filter="score = 5.0").num_rows == 1
        if "cat_idx" in infos:
            assert ds.to_table(filter="cat = 'c1'").num_rows == ds.count_rows() // 5
    assert set(shown(repo.indices("t"))) == {"score_idx", "vec_idx"}
    assert "cat_idx" in shown(repo.indices("t", ref="main~3"))
    # fsck finds index files deleted by hand.
    tv = repo.table_version("t")
    folders = dict(repo.table_store.index_folders(tv))
    shutil.rmtree(Path(repo.uri) / "tables" / folders["vec_idx"])
    problems = repo.fsck().problems
    assert problems and any("files of index 'vec_idx' are missing" in p for p in problems), problems


@pytest.mark.s3
def test_indices_branch_merge_and_fsck_on_an_object_store(s3_uri):
    uri, options = s3_uri
    repo = trimerge.Repository.init(uri, storage_options=options)
    repo.create_table("t", rows_of(range(400)), "id")
    repo.create_index("t", "vec", "IVF_FLAT", num_partitions=2)
    repo.branches.create("feat")
    repo.create_index("t", "cat", "BITMAP", branch="feat")
    repo.upsert("t", rows_of(range(400, 450), seed=5), branch="feat")
    repo.upsert("t", rows_of(range(3), seed=6, tag="m"))
    result = merge("feat", "main", repo=repo)
    assert result.status == "merged"
    listed = {i.name: (i.kind, i.num_indexed_rows + i.num_unindexed_rows) for i in repo.indices("t")}
    assert listed == {"vec_idx": ("IVF_FLAT", 450), "cat_idx": ("BITMAP", 450)}
    assert [i.name for i in repo.indices("t", ref="main~1")] == ["vec_idx"]
    assert repo.fsck().problems == []
