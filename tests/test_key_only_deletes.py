"""Deleted rows' before images read by key only (TableDiff.key_only_deletes, as merges diff): the
diff's rows are the full diff's except those images, a key deleted and written again keeps its
whole image, and a merge still shows and restores the base values of a deleted key the other
side changed."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest

from trimerge.diff.deletes import MIN_DELETED
from trimerge.diff.engine import TableDiff
from trimerge.diff.planner import Snapshot
from trimerge.merge import merge

N = 400


def table(ids, tag: str) -> pa.Table:
    ids = np.asarray(ids, dtype=np.int64)
    return pa.table({"id": ids, "name": [f"{tag}{i}" for i in ids], "n": ids * 10, "f": ids / 7})


@pytest.fixture
def edited(repo):
    """main: N rows. dev: 60 keys deleted, 20 of them written again (delete, then append: new row
    ids for old keys), 30 others upserted, 10 inserted."""
    repo.create_table("t", table(range(N), "b"), "id")
    repo.branches.create("dev")
    with repo.transaction(branch="dev", message="edits") as tx:
        tx.delete_keys("t", pa.table({"id": np.arange(100, 160, dtype=np.int64)}))
        tx.append("t", table(range(100, 120), "again"))
    repo.upsert("t", table(range(200, 230), "up"), branch="dev")
    repo.append("t", table(range(N, N + 10), "new"), branch="dev")
    return repo


def diff_rows(repo, key_only: bool) -> pa.Table:
    d = TableDiff("t", Snapshot(repo, repo.resolve("main").tables["t"]),
                  Snapshot(repo, repo.resolve("dev").tables["t"]))
    d.key_only_deletes = key_only
    assert d.candidate_plan.method == "delta"
    return d.rows().sort_by("id")


def test_only_deleted_rows_lose_their_before_images(edited):
    full, lean = diff_rows(edited, False), diff_rows(edited, True)
    assert lean.num_rows == full.num_rows == 40 + 20 + 30 + 10
    changes = lean.column("change").to_pylist()
    assert changes == full.column("change").to_pylist()
    assert changes.count("delete") == 40 >= MIN_DELETED
    for f, l in zip(full.to_pylist(), lean.to_pylist()):
        if f["change"] == "delete":
            assert l["before"] == {"name": None, "n": None, "f": None} and f["before"]["name"] == f"b{f['id']}"
            assert {**l, "before": None} == {**f, "before": None}
        else:  # updates, also of keys deleted and written again, keep their whole images
            assert l == f


def test_a_verified_diff_accepts_key_only_deleted_images(edited):
    d = TableDiff("t", Snapshot(edited, edited.resolve("main").tables["t"]),
                  Snapshot(edited, edited.resolve("dev").tables["t"]), verify=True)
    d.key_only_deletes = True
    assert d.counts.deleted == 40


@pytest.mark.parametrize("deleting", ["main", "dev"])
def test_a_merge_shows_and_restores_the_base_values_of_a_deleted_key_the_other_side_changed(repo, deleting):
    repo.create_table("t", table(range(N), "b"), "id")
    repo.branches.create("dev")
    changing = "dev" if deleting == "main" else "main"
    repo.delete_keys("t", pa.table({"id": np.arange(0, 2 * MIN_DELETED, dtype=np.int64)}), branch=deleting)
    repo.upsert("t", table([3, 5], "changed"), branch=changing)
    conflicts = merge("dev", "main", repo=repo, dry_run=True).conflicts_table().to_pylist()
    assert [c["kind"] for c in conflicts] == ["row.delete_modify"] * 2
    assert [json.loads(c["base"]) for c in conflicts] == [{"name": f"b{i}", "n": 10 * i, "f": i / 7} for i in (3, 5)]
    back = [{**c, "resolution": "base", "value": None} for c in conflicts]
    merge("dev", "main", repo=repo, resolutions=pa.Table.from_pylist(back))
    rows = {r["id"]: r for r in repo.read("t").to_pylist()}
    assert len(rows) == N - 2 * MIN_DELETED + 2
    assert [rows[i] for i in (3, 5)] == [{"id": i, "name": f"b{i}", "n": 10 * i, "f": i / 7} for i in (3, 5)]
