"""Graph branches (lazily forked Lance branches) and tags (immutable, pinned)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import lance
import pyarrow as pa
import pytest

import trimerge
from trimerge.lineage.errors import (
    AlreadyExistsError,
    BranchNotFoundError,
    InvalidNameError,
    InvalidOperationError,
    RefNotFoundError,
    ReadOnlyRefError,
    TagNotFoundError,
)
from trimerge.lineage.history.names import SCHEMA_LOCK_BRANCH

from conftest import AIRLINES, T, all_lance_branches, as_map, lance_branches, lance_tags, rows

NOW = timedelta(0)  # gc with no retention


def no_forks_anywhere(repo) -> bool:
    return all(not forks for forks in all_lance_branches(repo).values())


# ---------------------------------------------------------------------------------------------- create

def test_create_branch_from_main(seeded):
    b = seeded.branches.create("fix-names", from_ref="main")
    assert b.name == "fix-names"
    assert b.commit_id == seeded.resolve("main").id
    assert b.parent == "main"
    assert seeded.branches.names() == ["main", "fix-names"]
    assert "fix-names" in seeded.branches
    assert seeded.branches.exists("fix-names")
    assert seeded.resolve("fix-names") == seeded.resolve("main")
    assert trimerge.Repository.open(seeded.uri).branches.get("fix-names").commit_id == b.commit_id
    # Creating a branch is not a commit.
    assert len(seeded.all_commits()) == 3


@pytest.mark.parametrize("source", ["main~1", "tag", "commit", "prefix", "branch", "default"])
def test_create_branch_from_any_ref(seeded, source):
    seeded.tags.create("v1", ref="main~1")
    seeded.branches.create("other", from_ref="main")
    seeded.upsert("airlines", T(carrier=["ZZ"], name=["z"]), branch="other")
    expr = {
        "main~1": "main~1", "tag": "v1", "commit": seeded.resolve("main~1").id,
        "prefix": seeded.resolve("main~1").id[:9], "branch": "other", "default": None,
    }[source]
    b = seeded.branches.create("new", from_ref=expr)
    expected = {"branch": seeded.resolve("other"), "default": seeded.resolve("main")}.get(source,
                                                                                        seeded.resolve("main~1"))
    assert b.commit_id == expected.id
    assert b.parent == ("other" if source == "branch" else "main" if source == "default" else None)
    assert seeded.tables(ref="new") == sorted(expected.tables)


def test_main_is_reserved_and_names_are_unique(seeded):
    with pytest.raises(InvalidNameError):
        seeded.branches.create("main")
    seeded.branches.create("x")
    with pytest.raises(AlreadyExistsError):
        seeded.branches.create("x")
    with pytest.raises(AlreadyExistsError):
        seeded.branches.create("x", from_ref="main~1")
    assert seeded.branches.get("x").commit_id == seeded.resolve("main").id


def test_branch_create_from_unknown_ref(seeded):
    with pytest.raises(RefNotFoundError):
        seeded.branches.create("x", from_ref="nope")
    assert seeded.branches.names() == ["main"]


def test_internal_schema_lock_branch_is_hidden(seeded):
    assert SCHEMA_LOCK_BRANCH not in seeded.branches.names()
    assert all(b.name != SCHEMA_LOCK_BRANCH for b in seeded.branches.list())
    assert SCHEMA_LOCK_BRANCH not in seeded.branches
    with pytest.raises(BranchNotFoundError):
        seeded.branches.get(SCHEMA_LOCK_BRANCH)
    with pytest.raises(RefNotFoundError):
        seeded.resolve(SCHEMA_LOCK_BRANCH)
    with pytest.raises((InvalidNameError, AlreadyExistsError)):
        seeded.branches.create(SCHEMA_LOCK_BRANCH)
    with pytest.raises((BranchNotFoundError, ReadOnlyRefError)):
        seeded.upsert("airlines", T(carrier=["ZZ"], name=["z"]), branch=SCHEMA_LOCK_BRANCH)
    with pytest.raises((BranchNotFoundError, InvalidOperationError)):
        seeded.branches.delete(SCHEMA_LOCK_BRANCH)
    # Schema changes (which take the internal lock) still keep it hidden.
    seeded.add_columns("airports", pa.field("alt", pa.int64()))
    assert seeded.branches.names() == ["main"]


# ---------------------------------------------------------------------------------------------- lazy forks

def test_branches_are_forked_lazily(seeded):
    seeded.branches.create("fix-names", from_ref="main")
    seeded.branches.create("other", from_ref="main")
    assert no_forks_anywhere(seeded)
    # A pure-read branch shares storage with main.
    for table in ("airlines", "airports"):
        assert seeded.table_version(table, "fix-names") == seeded.table_version(table, "main")
        assert rows(seeded.read(table, ref="fix-names"), seeded.primary_key(table)) == \
            rows(seeded.read(table, ref="main"), seeded.primary_key(table))
    assert no_forks_anywhere(seeded)

    # The first write to one table forks exactly that table, once.
    seeded.upsert("airlines", T(carrier=["AA"], name=["American Airlines"]), branch="fix-names")
    forks = lance_branches(seeded, "airlines", "fix-names")
    assert len(forks) == 1
    assert seeded.table_version("airlines", "fix-names").lance_branch == forks[0]
    assert seeded.table_version("airlines", "fix-names").owner == seeded.branches.get("fix-names").id
    assert lance_branches(seeded, "airports", "fix-names") == []
    assert seeded.table_version("airports", "fix-names") == seeded.table_version("airports", "main")
    assert seeded.table_version("airlines", "main").lance_branch == "main"

    # Further writes reuse the fork.
    seeded.upsert("airlines", T(carrier=["UA"], name=["United Airlines"]), branch="fix-names")
    seeded.delete("airlines", "carrier = 'DL'", branch="fix-names")
    assert lance_branches(seeded, "airlines", "fix-names") == forks
    assert seeded.table_version("airlines", "fix-names").lance_branch == forks[0]

    # Main is unaffected, and writes to main never fork.
    assert rows(seeded.read("airlines", ref="main"), "carrier") == rows(T(**AIRLINES), "carrier")
    seeded.upsert("airlines", T(carrier=["ZZ"], name=["z"]), branch="main")
    assert lance_branches(seeded, "airlines") == forks
    assert as_map(seeded.read("airlines", ref="fix-names"), "carrier", "name") == {
        "AA": "American Airlines", "UA": "United Airlines"}

    # The second branch forks independently when it writes.
    seeded.delete("airports", "faa = 'XYZ'", branch="other")
    assert len(lance_branches(seeded, "airports", "other")) == 1
    assert lance_branches(seeded, "airlines") == forks


def test_lazy_fork_starts_from_the_branch_point_not_from_latest(seeded):
    seeded.branches.create("b", from_ref="main")
    seeded.upsert("airlines", T(carrier=["M1"], name=["main only"]))
    seeded.upsert("airlines", T(carrier=["AA"], name=["changed on main"]))
    seeded.upsert("airlines", T(carrier=["B1"], name=["b only"]), branch="b")
    assert as_map(seeded.read("airlines", ref="b"), "carrier", "name") == {
        "AA": "American", "UA": "United", "DL": "Delta", "B1": "b only"}
    assert as_map(seeded.read("airlines"), "carrier", "name") == {
        "AA": "changed on main", "UA": "United", "DL": "Delta", "M1": "main only"}


def test_fork_kept_by_a_tag_is_reclaimed_once_the_tag_goes(seeded):
    seeded.branches.create("b")
    seeded.upsert("airlines", T(carrier=["B1"], name=["b"]), branch="b")
    seeded.tags.create("keep", ref="b")
    seeded.upsert("airlines", T(carrier=["B2"], name=["b"]), branch="b")
    seeded.branches.delete("b", force=True)
    seeded.gc(retention=NOW)
    assert len(lance_branches(seeded, "airlines")) == 1
    assert set(as_map(seeded.read("airlines", ref="keep"), "carrier", "name")) == {"AA", "UA", "DL", "B1"}
    seeded.tags.delete("keep")
    seeded.gc(retention=NOW)
    assert no_forks_anywhere(seeded)
    assert lance_tags(seeded, "airlines") == []


def test_branch_of_a_branch_forks_from_the_fork(seeded):
    seeded.branches.create("a", from_ref="main")
    seeded.upsert("airlines", T(carrier=["A1"], name=["a"]), branch="a")
    seeded.branches.create("b", from_ref="a")
    assert seeded.table_version("airlines", "b") == seeded.table_version("airlines", "a")
    seeded.upsert("airlines", T(carrier=["B1"], name=["b"]), branch="b")
    assert len(lance_branches(seeded, "airlines")) == 2
    assert set(as_map(seeded.read("airlines", ref="b"), "carrier", "name")) == {"AA", "UA", "DL", "A1", "B1"}
    assert set(as_map(seeded.read("airlines", ref="a"), "carrier", "name")) == {"AA", "UA", "DL", "A1"}
    # Writing a again does not disturb b.
    seeded.delete("airlines", "carrier = 'A1'", branch="a")
    assert "A1" in as_map(seeded.read("airlines", ref="b"), "carrier", "name")


def test_table_created_on_a_branch_is_not_on_main(seeded):
    seeded.branches.create("b")
    seeded.create_table("planes", T(tailnum=["N1"]), primary_key="tailnum", branch="b")
    assert seeded.tables(ref="b") == ["airlines", "airports", "planes"]
    assert seeded.tables(ref="main") == ["airlines", "airports"]
    seeded.upsert("planes", T(tailnum=["N2"]), branch="b")
    assert seeded.read("planes", ref="b").num_rows == 2
    assert lance_branches(seeded, "planes", "b") == []  # the branch owns the new dataset's main


# ---------------------------------------------------------------------------------------------- switch / delete

def test_switch(seeded):
    seeded.branches.create("dev")
    seeded.switch("dev")
    assert seeded.current_branch == "dev"
    seeded.upsert("airlines", T(carrier=["ZZ"], name=["z"]))
    assert seeded.read("airlines").num_rows == 4
    assert seeded.read("airlines", ref="main").num_rows == 3
    seeded.switch("main")
    assert seeded.read("airlines").num_rows == 3


def test_delete_refusals(seeded):
    with pytest.raises(InvalidOperationError):
        seeded.branches.delete("main")
    seeded.branches.create("dev")
    seeded.switch("dev")
    with pytest.raises(InvalidOperationError):
        seeded.branches.delete("dev")
    seeded.switch("main")
    with pytest.raises(BranchNotFoundError):
        seeded.branches.delete("nope")
    # A branch created from it holds it back (named in the refusal); force deletes it anyway and
    # the child keeps working.
    seeded.branches.create("child", from_ref="dev")
    with pytest.raises(InvalidOperationError, match="'child' was created from it"):
        seeded.branches.delete("dev")
    assert seeded.branches.delete("dev", force=True).name == "dev"
    seeded.upsert("airlines", T(carrier=["C1"], name=["c"]), branch="child")
    seeded.branches.delete("child", force=True)
    assert seeded.branches.names() == ["main"]


def test_delete_of_an_unmerged_branch_needs_force(seeded):
    seeded.branches.create("feat")
    tip = seeded.upsert("airlines", T(carrier=["F1"], name=["f"]), branch="feat")
    with pytest.raises(InvalidOperationError) as exc:
        seeded.branches.delete("feat")
    assert "force=True" in str(exc.value) and "-D feat" in str(exc.value)
    assert seeded.branches.exists("feat")
    # Reached from a tag or another branch: no force needed.
    seeded.tags.create("keep", ref="feat")
    assert seeded.branches.delete("feat").commit_id == tip.id
    seeded.branches.create("feat", from_ref="keep")
    seeded.upsert("airlines", T(carrier=["F2"], name=["f"]), branch="feat")
    seeded.branches.create("other", from_ref="feat")
    with pytest.raises(InvalidOperationError, match="'other' was created from it"):
        seeded.branches.delete("feat")
    seeded.branches.delete("feat", force=True)
    seeded.upsert("airlines", T(carrier=["F3"], name=["f"]), branch="other")
    assert seeded.branches.delete("other", force=True).name == "other"


def test_deleted_branch_stays_readable_until_gc_passes_the_retention(seeded):
    seeded.branches.create("tmp")
    seeded.upsert("airlines", T(carrier=["T1"], name=["t"]), branch="tmp")
    tip = seeded.delete("airports", "true", branch="tmp")
    assert len(lance_branches(seeded, "airlines", "tmp")) == 1
    seeded.branches.delete("tmp", force=True)
    assert "tmp" not in seeded.branches.names()
    with pytest.raises(RefNotFoundError):
        seeded.resolve("tmp")
    assert [r.name for r in seeded.branches.deleted()] == ["tmp"]
    report = seeded.gc()  # default retention: 7 days
    assert report.commits_reclaimed == [] and report.forks_removed == []
    assert seeded.read("airlines", ref=tip.id).num_rows == 4
    # Restorable by its commit id, like git's reflog.
    seeded.branches.create("tmp", from_ref=tip.id)
    assert seeded.read("airports", ref="tmp").num_rows == 0
    seeded.branches.delete("tmp", force=True)
    report = seeded.gc(retention=NOW)
    assert tip.id in report.commits_reclaimed
    assert no_forks_anywhere(seeded)
    assert seeded.branches.deleted() == []
    # Main is untouched.
    assert rows(seeded.read("airlines"), "carrier") == rows(T(**AIRLINES), "carrier")
    assert seeded.read("airports").num_rows == 3


def test_delete_keeps_forks_another_branch_still_reaches(seeded):
    seeded.branches.create("a")
    c = seeded.upsert("airlines", T(carrier=["A1"], name=["a"]), branch="a")
    seeded.branches.create("b", from_ref=c.id)  # from a commit: no parent link
    assert seeded.branches.get("b").parent is None
    seeded.branches.delete("a")
    seeded.gc(retention=NOW)
    assert len(lance_branches(seeded, "airlines", "b")) == 1
    assert "A1" in as_map(seeded.read("airlines", ref="b"), "carrier", "name")
    seeded.upsert("airlines", T(carrier=["B1"], name=["b"]), branch="b")
    assert {"A1", "B1"} <= set(as_map(seeded.read("airlines", ref="b"), "carrier", "name"))
    assert seeded.read("airlines", ref=c.id).num_rows == 4
    seeded.branches.delete("b", force=True)
    seeded.gc(retention=NOW)
    assert no_forks_anywhere(seeded)


def test_tagged_data_survives_branch_delete_and_cleanup(seeded):
    seeded.branches.create("feat")
    seeded.upsert("airlines", T(carrier=["F1"], name=["f"]), branch="feat")
    seeded.create_table("planes", T(tailnum=["N1", "N2"]), primary_key="tailnum", branch="feat")
    tagged = seeded.resolve("feat")
    seeded.tags.create("keep", ref="feat")
    seeded.upsert("airlines", T(carrier=["F2"], name=["f"]), branch="feat")  # after the tag
    untagged = seeded.resolve("feat")
    seeded.branches.delete("feat", force=True)
    report = seeded.gc(retention=NOW)
    assert isinstance(report.to_json(), dict)
    again = trimerge.Repository.open(seeded.uri)
    assert set(as_map(again.read("airlines", ref="keep"), "carrier", "name")) == {"AA", "UA", "DL", "F1"}
    assert again.read("planes", ref="keep").num_rows == 2
    assert again.read("keep::planes").num_rows == 2
    assert again.read("airlines", ref=tagged.id).num_rows == 4
    assert [c.id for c in again.log("keep")][0] == tagged.id
    # The same name can be used for a new, independent branch.
    again.branches.create("feat", from_ref="keep")
    again.upsert("airlines", T(carrier=["G1"], name=["g"]), branch="feat")
    assert set(as_map(again.read("airlines", ref="feat"), "carrier", "name")) == {"AA", "UA", "DL", "F1", "G1"}
    assert set(as_map(again.read("airlines", ref="keep"), "carrier", "name")) == {"AA", "UA", "DL", "F1"}
    assert untagged.id != tagged.id


def test_deleted_untagged_table_dataset_is_reclaimed(seeded):
    seeded.branches.create("feat")
    seeded.create_table("planes", T(tailnum=["N1"]), primary_key="tailnum", branch="feat")
    ds = seeded.table_version("planes", "feat").dataset
    assert (Path(seeded.uri) / "tables" / ds).exists()
    seeded.branches.delete("feat", force=True)
    report = seeded.gc(retention=NOW)
    assert ds in report.datasets_removed
    assert not (Path(seeded.uri) / "tables" / ds).exists()
    assert seeded.tables() == ["airlines", "airports"]


def test_cleanup_keeps_every_reachable_commit_readable(seeded):
    seeded.branches.create("a")
    for i in range(3):
        seeded.upsert("airlines", T(carrier=[f"A{i}"], name=["a"]), branch="a")
    seeded.drop_table("airports")
    before = {c.id: {t: seeded.read(t, ref=c.id).num_rows for t in c.tables}
              for b in ("main", "a") for c in seeded.log(b)}
    seeded.gc(retention=NOW)
    seeded.gc(retention=NOW)  # idempotent
    after = {c.id: {t: seeded.read(t, ref=c.id).num_rows for t in c.tables}
             for b in ("main", "a") for c in seeded.log(b)}
    assert after == before


# ---------------------------------------------------------------------------------------------- tags

def test_tags_are_immutable_and_pin_tables(seeded):
    t = seeded.tags.create("v1", ref="main", message="first")
    assert t.commit_id == seeded.resolve("main").id
    assert t.message == "first"
    assert seeded.resolve("v1") == seeded.resolve("main")
    assert [x.name for x in seeded.tags.list()] == ["v1"]
    assert seeded.tags.get("v1").commit_id == t.commit_id
    for table in ("airlines", "airports"):
        assert "t-v1" in lance_tags(seeded, table)
        pinned = lance.dataset(seeded.dataset_path(seeded.table_version(table, "v1"))).tags.list()["t-v1"]
        assert pinned["version"] == seeded.table_version(table, "v1").version
    with pytest.raises(AlreadyExistsError):
        seeded.tags.create("v1", ref="main~1")
    assert seeded.tags.get("v1").commit_id == t.commit_id
    # The tag does not move with the branch.
    seeded.upsert("airlines", T(carrier=["ZZ"], name=["z"]))
    assert seeded.resolve("v1").id == t.commit_id
    assert seeded.read("airlines", ref="v1").num_rows == 3
    # Writes to a tag are refused.
    with pytest.raises(ReadOnlyRefError):
        seeded.upsert("airlines", T(carrier=["ZY"], name=["y"]), branch="v1")


def test_tag_a_fork_and_delete_tags(seeded):
    seeded.branches.create("b")
    seeded.upsert("airlines", T(carrier=["B1"], name=["b"]), branch="b")
    seeded.tags.create("on-b", ref="b")
    tv = seeded.table_version("airlines", "on-b")
    assert tv.lance_branch != "main"
    pins = lance.dataset(seeded.dataset_path(tv)).tags.list()
    assert pins["t-on-b"]["branch"] == tv.lance_branch and pins["t-on-b"]["version"] == tv.version
    seeded.tags.create("old", ref="main~1")
    assert [t.name for t in seeded.tags.list()] == ["old", "on-b"]
    seeded.tags.delete("on-b")
    assert [t.name for t in seeded.tags.list()] == ["old"]
    assert "t-on-b" not in lance_tags(seeded, "airlines", "b")
    assert "t-on-b" not in lance_tags(seeded, "airports", "b")
    with pytest.raises(RefNotFoundError):
        seeded.resolve("on-b")
    with pytest.raises(TagNotFoundError):
        seeded.tags.delete("on-b")
    # The name is free again, and may point elsewhere.
    seeded.tags.create("on-b", ref="main")
    assert seeded.resolve("on-b") == seeded.resolve("main")
    assert seeded.read("airlines", ref="b").num_rows == 4


def test_tag_of_the_empty_root(repo):
    repo.tags.create("empty", ref="main")
    repo.create_table("t", T(k=[1]), primary_key="k")
    assert repo.tables(ref="empty") == []
    repo.tags.delete("empty")
    assert repo.tags.list() == []


def test_tag_errors(seeded):
    with pytest.raises(RefNotFoundError):
        seeded.tags.create("v1", ref="nope")
    with pytest.raises(InvalidNameError):
        seeded.tags.create("a/b", ref="main")
    assert seeded.tags.list() == []
    assert "t-v1" not in lance_tags(seeded, "airlines")


# ---------------------------------------------------------------------------------------------- reclaimed data

@pytest.fixture
def reclaimed(seeded):
    """A commit of a deleted, untagged branch whose data cleanup has reclaimed."""
    seeded.branches.create("feat")
    seeded.create_table("planes", T(tailnum=["N1"]), primary_key="tailnum", branch="feat")
    c = seeded.upsert("airlines", T(carrier=["F1"], name=["f"]), branch="feat")
    seeded.branches.delete("feat", force=True)
    seeded.gc(retention=NOW)
    return seeded, c


def test_reading_reclaimed_data_is_a_typed_error(reclaimed):
    from trimerge.lineage.errors import DataReclaimedError

    repo, c = reclaimed
    with pytest.raises(DataReclaimedError):
        repo.read("planes", ref=c.id)
    with pytest.raises(DataReclaimedError):
        repo.read("airlines", ref=c.id)
    # Data the commit shares with main is still there.
    assert repo.read("airports", ref=c.id).num_rows == 3


def test_tagging_reclaimed_data_is_a_typed_error(reclaimed):
    from trimerge.lineage.errors import DataReclaimedError

    repo, c = reclaimed
    with pytest.raises(DataReclaimedError):
        repo.tags.create("late", ref=c.id)
    assert repo.tags.list() == []


def test_writing_on_top_of_reclaimed_data_is_a_typed_error(reclaimed):
    repo, c = reclaimed
    with pytest.raises(trimerge.TrimergeError):
        repo.branches.create("again", from_ref=c.id)
        repo.upsert("airlines", T(carrier=["G1"], name=["g"]), branch="again")
    assert not repo.branches.exists("again")


def test_tag_pins_the_tagged_version_even_over_an_orphan_pin(seeded):
    old = seeded.table_version("airlines", "main")
    seeded.upsert("airlines", T(carrier=["ZZ"], name=["z"]))
    # What a crash between pinning and writing the tag document leaves behind (for a tag of main~1).
    lance.dataset(seeded.dataset_path(old)).tags.create("t-v1", (old.lance_branch, old.version))
    seeded.tags.create("v1", ref="main")
    tv = seeded.table_version("airlines", "v1")
    pin = lance.dataset(seeded.dataset_path(tv)).tags.list()["t-v1"]
    assert pin["version"] == tv.version


def test_cleanup_during_a_transaction_keeps_its_writes(seeded):
    seeded.branches.create("b")
    other = trimerge.Repository.open(seeded.uri)
    with seeded.transaction(branch="b") as tx:
        tx.create_table("planes", T(tailnum=["N1", "N2"]), primary_key="tailnum")
        tx.upsert("airlines", T(carrier=["B1"], name=["b"]))
        report = other.gc(retention=NOW)
        assert report.datasets_removed == [] and report.forks_removed == []
    assert seeded.read("planes", ref="b").num_rows == 2
    assert seeded.read("airlines", ref="b").num_rows == 4
    other.gc(retention=NOW)
    assert seeded.read("planes", ref="b").num_rows == 2
    assert seeded.read("airlines", ref="b").num_rows == 4
