"""The narrower reads a merge asks of its diffs (trimerge.diff.images).

Deleted rows' before images by key only (``TableDiff.key_only_deletes``, the source's diff): the
rows are the full diff's except those images, a key deleted and written again keeps its whole
image, and a merge still shows and restores the base values of a deleted key the other side
changed. Dest's diff restricted to the source's keys (``TableDiff.only_keys``): its rows are the
full diff's rows of those keys, only their images are read whole, and a merge still tells a
dest that changed nothing (its table is then the source's) from one that did."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest

from trimerge.diff import reads
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
    assert changes.count("delete") == 40
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
    repo.delete_keys("t", pa.table({"id": np.arange(0, 32, dtype=np.int64)}), branch=deleting)
    repo.upsert("t", table([3, 5], "changed"), branch=changing)
    conflicts = merge("dev", "main", repo=repo, dry_run=True).conflicts_table().to_pylist()
    assert [c["kind"] for c in conflicts] == ["row.delete_modify"] * 2
    assert [json.loads(c["base"]) for c in conflicts] == [{"name": f"b{i}", "n": 10 * i, "f": i / 7} for i in (3, 5)]
    back = [{**c, "resolution": "base", "value": None} for c in conflicts]
    merge("dev", "main", repo=repo, resolutions=pa.Table.from_pylist(back))
    rows = {r["id"]: r for r in repo.read("t").to_pylist()}
    assert len(rows) == N - 32 + 2
    assert [rows[i] for i in (3, 5)] == [{"id": i, "name": f"b{i}", "n": 10 * i, "f": i / 7} for i in (3, 5)]


def whole_diff(repo) -> TableDiff:
    return TableDiff("t", Snapshot(repo, repo.resolve("main").tables["t"]), Snapshot(repo, repo.resolve("dev").tables["t"]))


def test_a_diff_of_some_keys_holds_their_rows_and_reads_only_their_images(edited, monkeypatch):
    keys = pa.table({"id": np.array([5, 100, 101, 140, 141, 200, N + 1, 10 * N], dtype=np.int64)})
    want = [r for r in whole_diff(edited).rows().sort_by("id").to_pylist() if r["id"] in keys.column("id").to_pylist()]
    assert [r["change"] for r in want] == ["update", "update", "delete", "delete", "update", "insert"]
    taken: list[int] = []
    real_take = reads.take
    monkeypatch.setattr(reads, "take", lambda s, ids, cols: (taken.append(len(ids) if len(cols) > 1 else 0),
                                                             real_take(s, ids, cols))[1])
    part = whole_diff(edited).only_keys(keys)
    assert part.rows().sort_by("id").to_pylist() == want
    assert sum(taken) == 5  # whole images of the five changed keys that were in the base, of 110 rows read
    assert part.whole_changed and part.counts.rows_changed == 6


def test_a_diff_of_keys_dest_did_not_touch_is_empty_and_says_whether_the_rest_changed(edited):
    untouched = pa.table({"id": np.array([1, 2], dtype=np.int64)})
    part = whole_diff(edited).only_keys(untouched)
    assert part.rows().num_rows == 0 and not part.changed
    assert part.whole_changed  # keys were deleted and inserted: the whole diff has rows, known from keys


@pytest.mark.parametrize("dest_change", ["none", "update"])
def test_a_merge_still_takes_the_source_table_when_dest_rewrote_rows_without_changing_them(repo, dest_change):
    repo.create_table("t", table(range(N), "b"), "id")
    repo.branches.create("dev")
    repo.upsert("t", table(range(300, 310), "src"), branch="dev")
    same = table(range(50, 60), "b") if dest_change == "none" else table(range(50, 60), "dest")
    repo.upsert("t", same)  # a rewrite of keys the source did not touch
    result = merge("dev", "main", repo=repo)
    rows = {r["id"]: r["name"] for r in repo.read("t").to_pylist()}
    assert rows[300] == "src300" and rows[50] == ("b50" if dest_change == "none" else "dest50")
    if dest_change == "none":
        assert result.stats["t"].action == "taken"
        assert repo.table_version("t", "main").location == repo.table_version("t", "dev").location
    else:
        assert result.stats["t"].action == "merged"


def test_key_columns_by_take_and_by_scan_agree(edited):
    from trimerge.diff.images import key_columns

    snap = Snapshot(edited, edited.resolve("main").tables["t"])
    ids = snap.ds.to_table(columns=[], with_row_id=True).column("_rowid").combine_chunks()
    few, many = ids.slice(3, 5), ids.filter(pa.array(np.arange(len(ids)) % 3 == 0))
    for chosen in (few, many):
        got = key_columns(snap, chosen, ["id"]).sort_by("_rowid")
        want = reads.take(snap, chosen, ["id"]).sort_by("_rowid")
        assert got.equals(want) and got.num_rows == len(chosen)
