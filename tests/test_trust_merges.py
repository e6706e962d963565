"""Issue 39, points 3 and 5 (merge half): no value lost whatever columns are left, reports that
match what happens (dry runs, granularity, merge plans), one rule for empty commits, and
protection refusing no-op writes alike across verbs. Real Lance data, public API only."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import trimerge
from trimerge.lineage.errors import DataReclaimedError, ProtectedBranchError
from trimerge.merge import MergeConflictError, cherry_pick, merge, revert
from trimerge.merge.rebase import rebase

PLANS = ["dest", "source"]


def rows(**columns: list[Any]) -> pa.Table:
    return pa.table({k: pa.array(v, pa.int64()) for k, v in columns.items()})


def write(repo: trimerge.Repository, branch: str, **values: list[Any]) -> Any:
    """Upsert rows given by column (in the branch's schema order; missing columns null)."""
    schema = repo.schema("t", branch)
    n = len(next(iter(values.values())))
    table = pa.table({f.name: pa.array(values.get(f.name, [None] * n), f.type) for f in schema})
    return repo.upsert("t", table, branch=branch)


def new_repo(tmp_path: Path, **columns: list[Any]) -> trimerge.Repository:
    repo = trimerge.Repository.init(tmp_path / "repo")
    repo.create_table("t", rows(**(columns or {"id": [1, 2], "v": [10, 20]})), "id")
    repo.branches.create("src")
    return repo


def by_key(repo: trimerge.Repository, ref: str = "main") -> dict[int, dict[str, Any]]:
    return {r["id"]: {k: v for k, v in r.items() if k != "id"} for r in repo.read("t", ref).to_pylist()}


def attempt(*args: Any, **kwargs: Any) -> Any:
    try:
        return merge(*args, **kwargs)
    except MergeConflictError as exc:
        return exc.result


def kinds(result: Any) -> list[tuple[str, Any, tuple[str, ...]]]:
    return sorted((c.kind, c.key, tuple(c.columns)) for c in result.conflicts)


# ---------------------------------------------------------------------------------------------- (3) no value lost
@pytest.mark.parametrize("left", [[], ["w"]], ids=["key-only", "one-value-column"])
def test_insert_insert_is_a_conflict_whatever_value_columns_dest_kept(tmp_path, left):
    """Dest dropped its value columns (all of them, or all but w) and inserted key 5; the source
    added x and inserted key 5 with x = 7: the same row.insert_insert either way, never x = None."""
    repo = new_repo(tmp_path, id=[1, 2], v=[10, 20], w=[1, 2])
    repo.drop_columns("t", ["v", "w"] if not left else ["v"])
    write(repo, "main", id=[5], w=[3])
    repo.add_columns("t", [pa.field("x", pa.int64())], branch="src")
    write(repo, "src", id=[5], x=[7], **({"w": [3]} if left else {}))
    dry = merge("src", "main", repo=repo, dry_run=True)
    assert dry.status == "conflicts"
    assert kinds(dry) == [("row.insert_insert", {"id": 5}, ("x",))]
    with pytest.raises(MergeConflictError):
        merge("src", "main", repo=repo)
    merge("src", "main", repo=repo, strategy="source-wins")
    assert by_key(repo)[5]["x"] == 7


@pytest.mark.parametrize("plan", PLANS)
def test_key_only_table_keeps_both_sides_inserts_under_every_plan(tmp_path, monkeypatch, plan):
    monkeypatch.setenv("TRIMERGE_MERGE_PLAN", plan)
    repo = trimerge.Repository.init(tmp_path / "repo")
    repo.create_table("t", rows(id=[1, 2, 3]), "id")
    repo.branches.create("src")
    repo.upsert("t", rows(id=[5]))
    repo.delete("t", "id = 2")
    repo.upsert("t", rows(id=[6, 7]), branch="src")
    repo.delete("t", "id = 3", branch="src")
    result = merge("src", "main", repo=repo)
    assert result.status == "merged" and result.stats["t"].plan == plan
    assert sorted(by_key(repo)) == [1, 5, 6, 7]


def test_restored_column_takes_the_source_value_with_no_spurious_conflict(tmp_path):
    """Dest dropped c, the source changed values in c; both inserted key 5 (same v). Resolving the
    schema.drop_modify as theirs restores c with the source's values: key 5 reads c = 7."""
    repo = new_repo(tmp_path, id=[1, 2], v=[10, 20], c=[100, 200])
    repo.drop_columns("t", ["c"])
    write(repo, "main", id=[5], v=[50])
    write(repo, "src", id=[1, 5], v=[10, 50], c=[101, 7])
    dry = merge("src", "main", repo=repo, dry_run=True)
    assert kinds(dry) == [("schema.drop_modify", None, ("c",))]
    table = dry.conflicts_table().to_pylist()
    resolutions = pa.Table.from_pylist([{**r, "resolution": "theirs", "value": None} for r in table
                                        if r["kind"] == "schema.drop_modify"])
    again = merge("src", "main", repo=repo, dry_run=True, resolutions=resolutions)
    assert again.status == "merged", kinds(again)
    merge("src", "main", repo=repo, resolutions=resolutions)
    assert by_key(repo) == {1: {"v": 10, "c": 101}, 2: {"v": 20, "c": 200}, 5: {"v": 50, "c": 7}}


def test_restored_column_with_a_real_conflict_elsewhere_reports_only_that(tmp_path):
    repo = new_repo(tmp_path, id=[1, 2], v=[10, 20], c=[100, 200])
    repo.drop_columns("t", ["c"])
    write(repo, "main", id=[5], v=[50])
    write(repo, "src", id=[1, 5], v=[10, 51], c=[101, 7])
    table = merge("src", "main", repo=repo, dry_run=True).conflicts_table().to_pylist()
    resolutions = pa.Table.from_pylist([{**r, "resolution": "theirs", "value": None} for r in table
                                        if r["kind"] == "schema.drop_modify"])
    dry = attempt("src", "main", repo=repo, dry_run=True, resolutions=resolutions)
    assert kinds(dry) == [("row.insert_insert", {"id": 5}, ("v",))]
    merge("src", "main", repo=repo, resolutions=resolutions, strategy="dest-wins")
    assert by_key(repo)[5] == {"v": 50, "c": 7}  # dest's row; the restored column from the source


# ---------------------------------------------------------------------------------------------- (5) dry runs
def _condemned_commit(repo: trimerge.Repository) -> Any:
    """A commit of a force-deleted branch that gc condemned, whose data main still holds."""
    repo.upsert("t", rows(id=[3], v=[30]))
    gone = repo.restore("t", "main", branch="src").commit  # src's t made main's: no data of its own
    repo.branches.delete("src", force=True)
    assert gone.id in repo.gc(retention="now").commits_reclaimed
    return gone


@pytest.mark.parametrize("verb", ["merge", "cherry-pick"])
def test_dry_run_reports_reclaimed_data_as_the_real_run_does(tmp_path, verb):
    repo = new_repo(tmp_path)
    gone = _condemned_commit(repo)
    run = merge if verb == "merge" else cherry_pick
    outcomes = []
    for dry in (True, False):
        try:
            outcomes.append(run(gone.id, "main", repo=repo, dry_run=dry).status)
        except DataReclaimedError:
            outcomes.append("reclaimed")
    assert outcomes[0] == outcomes[1], outcomes
    if verb == "merge":
        assert outcomes == ["reclaimed", "reclaimed"]


def test_dry_run_of_a_cherry_pick_dest_already_has_says_up_to_date(tmp_path):
    repo = new_repo(tmp_path)
    picked = write(repo, "src", id=[3], v=[30])
    write(repo, "main", id=[3], v=[30])
    dry = cherry_pick(picked.id, "main", repo=repo, dry_run=True)
    real = cherry_pick(picked.id, "main", repo=repo)
    assert dry.status == real.status == "up-to-date" and real.commit is None


# ---------------------------------------------------------------------------------------------- (5) same content, same verdict
@pytest.mark.parametrize("granularity", ["cell", "row", "table"])
def test_identical_changes_on_both_sides_merge_clean_at_every_granularity(tmp_path, granularity):
    repo = new_repo(tmp_path)
    for branch in ("main", "src"):
        write(repo, branch, id=[2, 3], v=[21, 30])
    assert repo.table_version("t", "main").location != repo.table_version("t", "src").location
    result = merge("src", "main", repo=repo, granularity=granularity)
    assert result.status == "merged" and not result.conflicts
    assert by_key(repo) == {1: {"v": 10}, 2: {"v": 21}, 3: {"v": 30}}


def test_different_changes_still_conflict_at_table_granularity(tmp_path):
    repo = new_repo(tmp_path)
    write(repo, "main", id=[3], v=[30])
    write(repo, "src", id=[3], v=[31])
    assert kinds(attempt("src", "main", repo=repo, granularity="table")) == [("table.update_update", None, ())]


# ---------------------------------------------------------------------------------------------- (5) empty commits
@pytest.mark.parametrize("plan", PLANS)
def test_cherry_pick_of_a_change_dest_has_publishes_nothing_under_every_plan(tmp_path, monkeypatch, plan):
    monkeypatch.setenv("TRIMERGE_MERGE_PLAN", plan)
    repo = new_repo(tmp_path)
    picked = write(repo, "src", id=[3], v=[30])
    write(repo, "main", id=[3, 4], v=[30, 40])  # dest has the change, and one of its own
    tip = repo.resolve("main").id
    for dry in (True, False):
        result = cherry_pick(picked.id, "main", repo=repo, dry_run=dry)
        assert result.status == "up-to-date" and result.commit is None
    assert repo.resolve("main").id == tip


@pytest.mark.parametrize("plan", PLANS)
def test_rebase_drops_a_commit_that_becomes_empty_under_every_plan(tmp_path, monkeypatch, plan):
    monkeypatch.setenv("TRIMERGE_MERGE_PLAN", plan)
    repo = new_repo(tmp_path)
    same = write(repo, "src", id=[3], v=[30])
    own = write(repo, "src", id=[1], v=[11])
    write(repo, "main", id=[3, 4], v=[30, 40])
    result = rebase("src", "main", repo=repo)
    assert result.dropped == [same.id] and [a for a, _ in result.replayed] == [own.id]
    assert by_key(repo, "src") == {1: {"v": 11}, 2: {"v": 20}, 3: {"v": 30}, 4: {"v": 40}}


def test_rebase_drops_a_commit_whose_only_other_change_is_storage(tmp_path):
    """A commit that made a change onto has and compacted another table changes nothing on onto:
    dropped, as if the compaction were not there (content decides, not storage)."""
    repo = new_repo(tmp_path)
    repo.create_table("u", rows(k=[1]), "k")
    for k in range(2, 6):
        repo.append("u", rows(k=[k]))
    repo.branches.delete("src", force=True)
    repo.branches.create("src")
    with repo.transaction("src") as tx:
        tx.upsert("t", rows(id=[3], v=[30]))
        tx.compact("u")
    same = repo.resolve("src")
    assert repo.table_version("u", "src").location != repo.table_version("u", "main").location
    write(repo, "main", id=[3], v=[30])
    result = rebase("src", "main", repo=repo)
    assert result.dropped == [same.id] and result.replayed == []
    assert repo.resolve("src").id == repo.resolve("main").id


def _started_empty(repo: trimerge.Repository) -> Any:
    """A commit on src that changes no content: an upsert of a row exactly as it is."""
    commit = write(repo, "src", id=[1], v=[10])
    assert commit is not None and list(commit.parents) == [repo.resolve("src~1").id]
    return commit


@pytest.mark.parametrize("onto_touches", [False, True], ids=["onto-untouched", "onto-touched"])
@pytest.mark.parametrize("plan", PLANS)
def test_rebase_keeps_a_commit_that_started_empty(tmp_path, monkeypatch, plan, onto_touches):
    monkeypatch.setenv("TRIMERGE_MERGE_PLAN", plan)
    repo = new_repo(tmp_path)
    repo.create_table("u", rows(k=[1]), "k")
    repo.branches.delete("src", force=True)
    repo.branches.create("src")
    empty = _started_empty(repo)
    if onto_touches:
        write(repo, "main", id=[4], v=[40])
    else:
        repo.upsert("u", rows(k=[2]))
    result = rebase("src", "main", repo=repo)
    assert result.dropped == [] and [a for a, _ in result.replayed] == [empty.id]
    replay = repo.resolve("src")
    assert replay.metadata["rebase.replayed_from"] == empty.id and list(replay.parents) == [repo.resolve("main").id]
    assert by_key(repo, "src") == by_key(repo, "main")


@pytest.mark.parametrize("verb", [cherry_pick, revert])
def test_cherry_pick_and_revert_of_an_empty_commit_publish_an_empty_commit(tmp_path, verb):
    repo = new_repo(tmp_path)
    empty = _started_empty(repo)
    write(repo, "main", id=[4], v=[40])
    before = by_key(repo)
    dry = verb(empty.id, "main", repo=repo, dry_run=True)
    real = verb(empty.id, "main", repo=repo)
    assert dry.status == real.status == "merged" and real.commit is not None
    assert by_key(repo) == before


# ---------------------------------------------------------------------------------------------- (5) protection
def test_protection_refuses_a_no_op_restore_as_it_refuses_a_no_op_reset(tmp_path):
    repo = new_repo(tmp_path)
    repo.branches.protect("main")
    tip = repo.resolve("main").id
    with pytest.raises(ProtectedBranchError):
        repo.branches.reset("main", "main")
    with pytest.raises(ProtectedBranchError):
        repo.restore("t", "main", branch="main")
    with pytest.raises(ProtectedBranchError):
        repo.restore("t", "main", branch="main", dry_run=True)
    assert repo.resolve("main").id == tip


# ---------------------------------------------------------------------------------------------- (5) empty commits, found by the model test
@pytest.mark.parametrize("verb", ["squash", "tables", "cherry-pick", "merge"])
def test_a_drop_modify_settled_dest_wins_that_changes_nothing_publishes_nothing(tmp_path, verb):
    """Dest dropped v; the source changed only v. Settled dest-wins, the source's change leaves no
    trace: a one-parent result is empty (up-to-date, dry run alike); a merge commit is still made."""
    repo = new_repo(tmp_path)
    repo.drop_columns("t", ["v"])
    picked = write(repo, "src", id=[1], v=[11])
    tip = repo.resolve("main").id
    results = []
    for dry in (True, False):
        if verb == "cherry-pick":
            results.append(cherry_pick(picked.id, "main", repo=repo, strategy="dest-wins", dry_run=dry))
        else:
            results.append(merge("src", "main", repo=repo, strategy="dest-wins", dry_run=dry, squash=verb == "squash",
                                 tables=["t"] if verb == "tables" else None))
    assert [r.status for r in results] == (["merged"] * 2 if verb == "merge" else ["up-to-date"] * 2)
    assert (repo.resolve("main").id != tip) == (verb == "merge")
    assert by_key(repo) == {1: {}, 2: {}}


@pytest.mark.parametrize("verb", ["cherry-pick", "squash"])
def test_identical_content_in_other_versions_is_up_to_date_at_table_granularity(tmp_path, verb):
    """Dest and the source each rewrote u without changing it (compactions) and made the same change
    to t: at table granularity, as at cell granularity, a one-parent result changes nothing."""
    repo = new_repo(tmp_path)
    repo.create_table("u", rows(k=[1]), "k")
    for k in range(2, 6):
        repo.append("u", rows(k=[k]))
    repo.branches.delete("src", force=True)
    repo.branches.create("src")
    for branch in ("src", "main"):
        with repo.transaction(branch) as tx:
            tx.upsert("t", rows(id=[3], v=[30]))
            tx.compact("u")
    locations = {repo.table_version("u", ref).location for ref in ("main", "main~1", "src")}
    assert len(locations) == 3
    tip = repo.resolve("main").id
    for granularity in ("cell", "table"):
        for dry in (True, False):
            if verb == "cherry-pick":
                result = cherry_pick("src", "main", repo=repo, granularity=granularity, dry_run=dry)
            else:
                result = merge("src", "main", repo=repo, granularity=granularity, dry_run=dry, squash=True)
            assert (granularity, result.status, result.commit) == (granularity, "up-to-date", None)
    assert repo.resolve("main").id == tip
