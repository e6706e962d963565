"""Remotes as git has them (issue 50, point 5): where a command names a remote branch the
remote-tracking ref wins, whatever local branches are called; fully spelled refs
(``refs/heads/B``, ``refs/tags/T``, ``refs/remotes/R/B``) name one kind of ref; and a commit gc
reclaimed that a fetch or push brought back is usable again. The model of remotes that found both
defects: tests/test_model_remotes.py."""

from __future__ import annotations

from pathlib import Path

import pytest

import trimerge
from trimerge.lineage.errors import DataReclaimedError, RefNotFoundError, RefSyntaxError
from trimerge.merge import merge

from conftest import T, run_trimerge_subprocess
from test_remotes import make_origin, rows


def values(repo, ref=None):
    return {r["k"]: r["v"] for r in rows(repo, ref=ref)}


@pytest.fixture
def pair(tmp_path):
    origin = make_origin(tmp_path / "origin")
    copy = trimerge.Repository.clone(origin.uri, tmp_path / "copy").repository
    return origin, copy


# ---------------------------------------------------------------------------------------------- names
def test_pull_merges_the_fetched_ref_not_a_local_branch_called_origin_main(pair):
    origin, copy = pair
    copy.branches.create("origin/main")  # a legal branch name
    copy.upsert("t", T(k=[50], v=["local branch named origin/main"]), branch="origin/main")
    copy.upsert("t", T(k=[51], v=["copy"]))
    origin.upsert("t", T(k=[52], v=["origin"]))
    result = copy.pull("origin", "main")
    assert result.status == "merged"
    assert copy.resolve("main").parents[1] == origin.resolve("main").id
    got = values(copy)
    assert got[51] == "copy" and got[52] == "origin" and 50 not in got
    assert result.merge.source_commit.id == origin.resolve("main").id
    # The short name still means the local branch (git's order); the full name the fetched ref.
    assert copy.resolve("origin/main").id == copy.resolve("refs/heads/origin/main").id != origin.resolve("main").id
    assert copy.resolve("refs/remotes/origin/main").id == origin.resolve("main").id
    # Fast-forward and "already contains" are decided on the fetched ref too.
    assert copy.push("origin", "main").status == "fast-forward"  # main contains the fetched ref
    assert origin.resolve("main").id == copy.resolve("main").id
    assert copy.pull("origin", "main").status == "up-to-date"
    origin.upsert("t", T(k=[54], v=["ff"]))
    assert copy.pull("origin", "main").status == "fast-forward"
    assert copy.resolve("main").id == origin.resolve("main").id
    assert 50 not in values(copy)


def test_pull_merges_the_fetched_ref_of_a_slashed_branch_beside_a_local_namesake(pair):
    origin, copy = pair
    assert copy.pull("origin", "dev/x").status == "created"
    copy.branches.create("origin/dev/x", "main")
    copy.upsert("t", T(k=[60], v=["namesake"]), branch="origin/dev/x")
    copy.upsert("t", T(k=[61], v=["copy"]), branch="dev/x")
    origin.upsert("t", T(k=[62], v=["origin"]), branch="dev/x")
    assert copy.pull("origin", "dev/x").status == "merged"
    got = values(copy, "dev/x")
    assert got[61] == "copy" and got[62] == "origin" and 60 not in got


def test_cli_pull_with_a_local_namesake_names_the_fetched_ref_fully(pair):
    origin, copy = pair
    copy.branches.create("origin/main")
    origin.upsert("t", T(k=[3], v=["origin"]))
    copy.upsert("t", T(k=[3], v=["copy"]))
    tip = copy.resolve("main").id
    res = run_trimerge_subprocess("-C", copy.uri, "pull", "origin", "main")
    assert res.exit_code == 1 and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert "trimerge merge refs/remotes/origin/main" in res.stderr and copy.resolve("main").id == tip
    res = run_trimerge_subprocess("-C", copy.uri, "merge", "refs/remotes/origin/main", "--strategy", "source-wins",
                                  "--json")
    assert res.exit_code == 0, res.stderr
    assert values(copy)[3] == "origin"
    assert copy.resolve("main").parents[1] == origin.resolve("main").id


def test_fully_spelled_refs_name_one_kind_of_ref(pair):
    origin, copy = pair
    main, dev = copy.resolve("main").id, copy.resolve("origin/dev/x").id
    copy.tags.create("v2", "main~1")
    assert copy.resolve("refs/heads/main").id == main
    assert copy.resolve("refs/tags/v1").id == copy.resolve("v1").id
    assert copy.resolve("refs/tags/v2~0").id == copy.resolve("main~1").id
    assert copy.resolve("refs/remotes/origin/dev/x").id == dev
    assert copy.resolve("refs/remotes/origin/dev/x^").id == copy.resolve("origin/dev/x~1").id
    assert copy.read("t", ref="refs/remotes/origin/dev/x").equals(origin.read("t", ref="dev/x"))
    assert copy.read("refs/remotes/origin/dev/x::t").equals(origin.read("t", ref="dev/x"))
    # A tag and a branch of one name: each full name picks its own.
    copy.branches.create("v1", "main")
    assert copy.resolve("refs/heads/v1").id == main and copy.resolve("refs/tags/v1").id == origin.resolve("v1").id
    for missing in ("refs/remotes/origin/nope", "refs/remotes/nobody/main", "refs/heads/nope", "refs/tags/nope",
                    "refs/heads/HEAD", "refs/remotes/origin", "refs/heads/", "refs/tags/"):
        with pytest.raises(RefNotFoundError):
            copy.resolve(missing)
    # Hostile spellings name nothing (no key outside the ref folders is ever read) and change nothing.
    before = sorted(p.relative_to(copy.uri).as_posix() for p in Path(copy.uri).rglob("*"))
    for hostile in ("refs/remotes/origin/../../HEAD", "refs/remotes/../branches/main", "refs/remotes/origin/%2e%2e",
                    "refs/remotes/origin/dev%2Fx", "refs/heads/../tags/v1", "refs/tags/../../repo", "refs/remotes//main",
                    "refs/remotes/origin/" + "x" * 5000, "refs/heads/main/", "refs/remotes/origin/main\u200b"):
        with pytest.raises((RefNotFoundError, RefSyntaxError)):
            copy.resolve(hostile)
    for bad in ("refs/remotes/origin/main\x00", "refs/heads/ma in", "refs/remotes/origin/main:x", "refs/tags/v1\n"):
        with pytest.raises(RefSyntaxError):
            copy.resolve(bad)
    after = sorted(p.relative_to(copy.uri).as_posix() for p in Path(copy.uri).rglob("*"))
    assert after == before
    # As in git, a name that is not there in full is still tried short: a branch may be called so.
    copy.branches.create("refs/heads/odd", "main~1")
    assert copy.resolve("refs/heads/odd").id == copy.resolve("main~1").id


# ---------------------------------------------------------------------------------------------- reclaimed
def _reclaimed_then_kept_elsewhere(origin, copy):
    """A commit C only branch ``b`` of ``copy`` reached, pushed to ``origin`` as ``kept``; ``copy``
    deletes ``b`` and its gc reclaims C. Returns C's id."""
    copy.branches.create("b")
    copy.upsert("t", T(k=[70], v=["only on b"]), branch="b")
    c = copy.resolve("b").id
    copy.push("origin", "b")
    origin.branches.create("kept", "b")
    origin.branches.delete("b", force=True)
    copy.fetch()  # origin/b goes; origin/kept names C
    copy.remotes.remove("origin")  # and with it origin/kept: nothing here reaches C any more
    copy.branches.delete("b", force=True)
    copy.gc(retention="now")
    assert c in copy.reclaimed.read()[0]
    with pytest.raises(DataReclaimedError):
        copy.branches.create("again", c)
    return c


def test_a_commit_a_fetch_brought_back_after_gc_can_be_branched_from_and_merged(pair):
    origin, copy = pair
    c = _reclaimed_then_kept_elsewhere(origin, copy)
    copy.remotes.add("origin", origin.uri)
    result = copy.fetch()
    assert c not in copy.reclaimed.read()[0]
    assert any(r.ref == "origin/kept" and r.new == c for r in result.refs)
    copy.branches.create("again", c)
    assert values(copy, "again")[70] == "only on b"
    assert merge(c, "main", repo=copy).status == "merged"
    assert values(copy)[70] == "only on b"
    copy.branches.reset("again", "main")
    assert copy.fsck().ok
    # Reinstated, it is an ordinary commit: gc keeps it while a ref reaches it.
    copy.gc(retention="now")
    assert values(copy, "again")[70] == "only on b"


def test_a_commit_a_pull_created_a_branch_at_after_gc_is_usable(pair):
    origin, copy = pair
    c = _reclaimed_then_kept_elsewhere(origin, copy)
    copy.remotes.add("origin", origin.uri)
    assert copy.pull("origin", "kept").status == "created"
    assert copy.resolve("kept").id == c
    copy.upsert("t", T(k=[71], v=["on kept"]), branch="kept")
    copy.tags.create("at-c", c)
    assert copy.resolve("at-c").id == c and values(copy, "kept")[70] == "only on b"


def test_a_commit_a_push_brought_back_after_the_remotes_gc_is_usable_there(tmp_path):
    origin = make_origin(tmp_path / "origin")
    a = trimerge.Repository.clone(origin.uri, tmp_path / "a").repository
    a.branches.create("b")
    a.upsert("t", T(k=[80], v=["from a"]), branch="b")
    c = a.resolve("b").id
    a.push("origin", "b")
    origin.branches.delete("b", force=True)
    a.fetch()
    origin.gc(retention="now")
    assert c in origin.reclaimed.read()[0]
    with pytest.raises(DataReclaimedError):
        origin.branches.create("again", c)
    # Pushed again (on top of C), the data comes back and C is usable there.
    a.upsert("t", T(k=[81], v=["after"]), branch="b")
    assert a.push("origin", "b").status == "created"
    assert c not in origin.reclaimed.read()[0]
    origin.branches.create("again", c)
    assert values(origin, "again")[80] == "from a" and 81 not in values(origin, "again")
    assert merge(c, "main", repo=origin).status == "merged"
    assert origin.fsck().ok


def test_a_fetch_waits_for_a_running_gc_before_reinstating(pair):
    """Reinstating takes gc's lease: while another process holds it, the fetch waits, then gives up
    with the retryable error, leaving every ref as it was; a rerun finishes."""
    from trimerge.lineage.errors import ConcurrentWriteError
    from trimerge.lineage.safety.gc import GC_LEASE
    from trimerge.lineage.storage.lease import Lease

    origin, copy = pair
    c = _reclaimed_then_kept_elsewhere(origin, copy)
    copy.remotes.add("origin", origin.uri)
    held = Lease(copy.docs, GC_LEASE, "a gc in another process").acquire(1, "gc")
    copy.lock_timeout = 0.3
    try:
        with pytest.raises(ConcurrentWriteError) as caught:
            copy.fetch()
        assert caught.value.retryable
        assert copy.refs.tracking_names("origin") == [] and c in copy.reclaimed.read()[0]
    finally:
        held.release()
    copy.fetch()
    copy.branches.create("again", c)
    assert copy.resolve("again").id == c and c not in copy.reclaimed.read()[0]


# ---------------------------------------------------------------------------------------------- found by the model
def test_a_table_compacted_under_its_key_index_can_be_cloned_and_pushed(tmp_path):
    """Found by tests/test_model_remotes.py: a compaction remaps the key index (a RewrittenIndex
    transaction, which pylance 14 cannot read back as Python), and a clone of that version failed."""
    origin = trimerge.Repository.init(tmp_path / "origin")
    origin.settings.set("index.key_min_rows", 5)
    origin.create_table("t", T(k=list(range(6)), v=[f"v{i}" for i in range(6)]), primary_key="k")
    for i in range(6):
        origin.upsert("t", T(k=[i], v=[f"w{i}"]))
    origin.compact("t")
    copy = trimerge.Repository.clone(origin.uri, tmp_path / "copy").repository
    assert values(copy) == values(origin)
