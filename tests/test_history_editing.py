"""Issue 30: squash and per-table merges, rebase, branch reset, table restore and the reflog.

Real Lance data in temporary directories. Property tests (small example counts): a squash merge's
tree equals the ordinary merge's; a per-table merge then a full merge equals one full merge; a
rebase's tree equals merging ``onto`` into the branch when nothing conflicts; reset then reset to
``@{1}`` is the identity. kill -9 during a rebase and a reset; gc beside a rebase; bad input."""

from __future__ import annotations

import os
from datetime import timedelta

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import trimerge
from trimerge.lineage.storage import faults
from trimerge.lineage.errors import (BranchNotFoundError, InvalidOperationError, RefNotFoundError,
                                     TableNotFoundError, TrimergeError)
from trimerge.merge import merge, rebase
from trimerge.merge.rebase import RebaseConflictError

from conftest import run_python

FAST = settings(max_examples=4, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)


def T(**cols) -> pa.Table:
    return pa.table(cols)


def tree(repo: trimerge.Repository, ref: str) -> dict[str, list[dict]]:
    """Every table's rows at ``ref``, sorted by key: what 'the same tree' means."""
    out = {}
    for name in repo.tables(ref):
        key = list(repo.primary_key(name, ref))
        out[name] = sorted(repo.read(name, ref=ref).to_pylist(), key=lambda r: tuple(r[k] for k in key))
    return out


def fresh(tmp_path, name="repo") -> trimerge.Repository:
    repo = trimerge.Repository.init(tmp_path / name)
    repo.create_table("airports", T(faa=["JFK", "LGA", "EWR"], name=["Kennedy", "LaGuardia", "Newark"]), "faa")
    repo.create_table("flights", T(id=[1, 2, 3], delay=[0, 5, 10]), "id")
    return repo


# per-table edits drawn by hypothesis: (table, key index, value) on each side, disjoint keys so nothing conflicts
edits = st.lists(st.tuples(st.sampled_from(["airports", "flights"]), st.integers(0, 2), st.integers(0, 99)),
                 min_size=1, max_size=3)


def apply(repo, branch, changes, side):
    for table, i, v in changes:
        if table == "airports":
            repo.upsert("airports", T(faa=[f"{side}{i}"], name=[f"n{v}"]), branch=branch)
        else:
            repo.upsert("flights", T(id=[100 * (1 if side == "S" else 2) + i], delay=[v]), branch=branch)


def two_sided(tmp_path, name, src_changes, dst_changes):
    repo = fresh(tmp_path, name)
    repo.branches.create("feat")
    apply(repo, "feat", src_changes, "S")
    apply(repo, "main", dst_changes, "D")
    return repo


_n = iter(range(10**6))


@FAST
@given(src=edits, dst=edits)
def test_squash_tree_equals_merge_tree(tmp_path_factory, src, dst):
    tmp = tmp_path_factory.mktemp("sq")
    repo = two_sided(tmp, "r", src, dst)
    repo.branches.create("plain", from_ref="main")
    full = merge("feat", "plain", repo=repo)
    squashed = merge("feat", "main", repo=repo, squash=True)
    assert len(squashed.commit.parents) == 1 and squashed.commit.metadata["merge.squash"] == "true"
    assert squashed.commit.metadata["merge.source_commit"] == repo.resolve("feat").id
    assert tree(repo, "main") == tree(repo, "plain") and len(full.commit.parents) == 2


@FAST
@given(src=edits, dst=edits, table=st.sampled_from(["airports", "flights"]))
def test_per_table_merge_then_full_merge_equals_one_full_merge(tmp_path_factory, src, dst, table):
    tmp = tmp_path_factory.mktemp("pt")
    repo = two_sided(tmp, "r", src, dst)
    repo.branches.create("plain", from_ref="main")
    merge("feat", "plain", repo=repo)
    part = merge("feat", "main", repo=repo, tables=[table])
    if part.commit is not None:
        assert len(part.commit.parents) == 1 and part.commit.metadata["merge.tables"] == table
        other = {"airports", "flights"} - {table}
        for name in other:  # the others stay as dest had them
            assert tree(repo, "main")[name] == tree(repo, "main~1")[name]
    merge("feat", "main", repo=repo)
    assert tree(repo, "main") == tree(repo, "plain")


@FAST
@given(src=edits, dst=edits)
def test_rebase_tree_equals_merging_onto_into_the_branch(tmp_path_factory, src, dst):
    tmp = tmp_path_factory.mktemp("rb")
    repo = two_sided(tmp, "r", src, dst)
    repo.branches.create("merged", from_ref="feat")
    merge("main", "merged", repo=repo)
    mine = [c for c in repo.log("feat") if not repo.is_ancestor(c.id, "main")]
    r = rebase("feat", "main", repo=repo, actor="rebaser")
    assert r.status == "rebased"
    assert tree(repo, "feat") == tree(repo, "merged")
    assert repo.is_ancestor("main", "feat")
    replays = [c for c in repo.log("feat", first_parent=True) if "rebase.replayed_from" in c.metadata]
    assert [c.metadata["rebase.replayed_from"] for c in replays] == [c.id for c in mine]
    assert [(c.message, c.actor) for c in replays] == [(c.message, c.actor) for c in mine]
    assert rebase("feat", "main", repo=repo).status == "up-to-date"
    assert repo.reflog("feat")[0].reason.startswith("rebase")


@FAST
@given(steps=st.lists(st.integers(0, 4), min_size=1, max_size=3))
def test_reset_then_reset_to_at_1_is_the_identity(tmp_path_factory, steps):
    repo = fresh(tmp_path_factory.mktemp("rs"))
    for v in range(4):
        repo.upsert("flights", T(id=[v], delay=[v * 7]))
    for back in steps:
        before, rows = repo.resolve("main").id, tree(repo, "main")
        r = repo.branches.reset("main", f"main~{back}")
        assert r.old == before and r.new == repo.resolve("main").id
        if not r.moved:  # a reset to where the branch is moves nothing and records nothing
            continue
        repo.branches.reset("main", "main@{1}")
        assert repo.resolve("main").id == before and tree(repo, "main") == rows


def test_reset_back_then_write_and_undo(tmp_path):
    repo = fresh(tmp_path)
    repo.upsert("flights", T(id=[4], delay=[40]), message="bad load")
    r = repo.branches.reset("main", "main~1")
    assert r.unreachable == 1 and repo.read("flights").num_rows == 3
    repo.upsert("flights", T(id=[5], delay=[50]))  # a write after moving back: heals the Lance branch
    assert sorted(repo.read("flights").column("id").to_pylist()) == [1, 2, 3, 5]
    repo.branches.reset("main", "main@{2}")  # the bad load again, through the reflog
    assert sorted(repo.read("flights").column("id").to_pylist()) == [1, 2, 3, 4]
    entries = repo.reflog("main", limit=3)
    assert [e.reason.split(":")[0] for e in entries] == ["reset", "commit", "reset"]
    assert repo.gc(retention="7d").commits_reclaimed == []  # the reflog keeps what the resets left
    assert repo.read("flights", ref=entries[2].old).num_rows == 4


def test_restore_table_brings_back_and_drops(tmp_path):
    repo = fresh(tmp_path)
    v1 = repo.resolve("main").id
    repo.create_index("airports", "faa", "BTREE")
    repo.delete("airports", "faa = 'LGA'")
    repo.upsert("flights", T(id=[9], delay=[1]))
    r = repo.restore("airports", v1)
    assert r.action == "restored" and len(r.commit.parents) == 1
    assert tree(repo, "main")["airports"] == tree(repo, v1)["airports"]
    assert tree(repo, "main")["flights"] != tree(repo, v1)["flights"]  # only that table
    assert repo.indices("airports") == [] and repo.indices("airports", ref="main~1") != []
    repo.upsert("airports", T(faa=["SFO"], name=["San Francisco"]))  # write after restore, then diff exactly
    from trimerge.diff import diff
    d = diff("main~2", "main", repo=repo, verify=True)
    assert d.tables["airports"].counts.rows_changed == 2
    repo.drop_table("flights")
    assert repo.restore("flights", "main~1").action == "brought back"
    assert repo.read("flights").num_rows == 4
    repo.create_table("extra", T(k=[1]), "k")
    assert repo.restore("extra", v1).action == "dropped" and "extra" not in repo.tables()
    assert repo.restore("airports", "main").action == "unchanged"


def test_rebase_conflict_publishes_nothing_and_names_the_commit(tmp_path):
    repo = fresh(tmp_path)
    repo.branches.create("feat")
    repo.upsert("flights", T(id=[1], delay=[11]), branch="feat", message="first")
    repo.upsert("flights", T(id=[2], delay=[22]), branch="feat", message="second")
    repo.upsert("flights", T(id=[2], delay=[99]))
    tip = repo.resolve("feat").id
    with pytest.raises(RebaseConflictError) as err:
        rebase("feat", "main", repo=repo)
    second = repo.resolve("feat").id
    assert err.value.rebase_result.conflict_commit == second and "replaying commit" in str(err.value)
    assert repo.resolve("feat").id == tip and repo.branches.names() == ["main", "feat"]
    dry = rebase("feat", "main", repo=repo, dry_run=True)
    assert dry.status == "conflicts" and repo.resolve("feat").id == tip
    table = dry.replay_result.conflicts_table().append_column("commit", pa.array([second[:10]]))
    table = table.append_column("resolution", pa.array(["theirs"])).append_column("value", pa.array([None], pa.string()))
    done = rebase("feat", "main", repo=repo, resolutions=table)
    assert done.status == "rebased" and repo.entity("flights", 2, ref="feat")["delay"] == 22


def test_bad_input_is_one_line_and_writes_nothing(tmp_path, cli):
    repo = fresh(tmp_path)
    repo.branches.create("feat")
    repo.upsert("flights", T(id=[7], delay=[7]), branch="feat")
    repo.branches.create("child", from_ref="feat")
    repo.upsert("flights", T(id=[8], delay=[8]), branch="child")
    snapshot = sorted(p.relative_to(tmp_path) for p in (tmp_path / "repo").rglob("*") if "locks" not in str(p))
    cases = [
        (lambda: merge("feat", "main", repo=repo, tables=["nope"]), InvalidOperationError),
        (lambda: merge("feat", "main", repo=repo, tables=[]), InvalidOperationError),
        (lambda: rebase("feat", "feat", repo=repo), InvalidOperationError),
        (lambda: rebase("feat", "child", repo=repo), InvalidOperationError),
        (lambda: repo.branches.reset("main", "nope"), RefNotFoundError),
        (lambda: repo.branches.reset("nope", "main"), BranchNotFoundError),
        (lambda: repo.resolve("main@{50}"), RefNotFoundError),
        (lambda: repo.restore("ghost", "main~1"), TableNotFoundError),
    ]
    for call, error in cases:
        with pytest.raises(error) as info:
            call()
        assert "\n" not in str(info.value) and isinstance(info.value, TrimergeError)
    after = sorted(p.relative_to(tmp_path) for p in (tmp_path / "repo").rglob("*") if "locks" not in str(p))
    assert after == snapshot
    where = str(tmp_path / "repo")
    for argv in (["merge", "feat", "--table", "nope"], ["merge", "feat", "--table", ""], ["rebase", "feat", "--onto", "feat"],
                 ["branch", "reset", "main", "nope"], ["rev-parse", "main@{50}"],
                 ["table", "restore", "ghost", "--ref", "main~1"]):
        out = cli("-C", where, *argv, ok=False)
        assert out.exit_code == 2 and len(out.stderr.strip().splitlines()) == 1, (argv, out.stderr)


def test_cli_verbs_with_json_and_dry_run(tmp_path, cli):
    import json

    repo = fresh(tmp_path)
    repo.branches.create("feat")
    repo.upsert("flights", T(id=[7], delay=[7]), branch="feat")
    repo.upsert("airports", T(faa=["SFO"], name=["SF"]), branch="feat")
    repo.upsert("flights", T(id=[1], delay=[1]))
    where = str(tmp_path / "repo")
    tip = repo.resolve("feat").id
    out = json.loads(cli("-C", where, "--json", "rebase", "feat", "--onto", "main", "--dry-run").stdout)
    assert out["status"] == "rebased" and out["dry_run"] and repo.resolve("feat").id == tip
    out = json.loads(cli("-C", where, "--json", "rebase", "feat", "--onto", "main").stdout)
    assert out["status"] == "rebased" and len(out["replayed"]) == 2
    out = json.loads(cli("-C", where, "--json", "branch", "reset", "feat", "feat@{1}", "--dry-run").stdout)
    assert out["dry_run"] and out["new"] == tip
    cli("-C", where, "branch", "reset", "feat", "feat@{1}")
    assert repo.resolve("feat").id == tip
    out = json.loads(cli("-C", where, "--json", "merge", "feat", "--squash", "--table", "airports").stdout)
    assert out["status"] == "merged"
    assert len(repo.resolve("main").parents) == 1 and repo.entity("flights", 7) is None
    out = json.loads(cli("-C", where, "--json", "table", "restore", "airports", "--ref", "main~1").stdout)
    assert out["action"] == "restored"
    entries = json.loads(cli("-C", where, "--json", "reflog", "main", "-n", "2").stdout)
    assert len(entries) == 2 and entries[0]["reason"].startswith("commit: Restore")
    assert "feat@{0}" in cli("-C", where, "reflog", "feat").stdout


CRASH = """
import sys, trimerge
from trimerge.merge import rebase
repo = trimerge.Repository.open(sys.argv[1])
if sys.argv[2] == "rebase":
    rebase("feat", "main", repo=repo)
else:
    repo.branches.reset("feat", "main~1")
"""


@pytest.mark.parametrize("verb,point", [("rebase", "rebase_replay"), ("rebase", "before_publish"),
                                        ("rebase", "rebase_replayed"), ("rebase", "rebase_moved"),
                                        ("reset", "reset_locked"), ("reset", "reset_moved")])
def test_kill_during_rebase_and_reset_leaves_the_branch_before_or_after(tmp_path, verb, point):
    repo = fresh(tmp_path)
    repo.branches.create("feat")
    repo.upsert("flights", T(id=[7], delay=[7]), branch="feat")
    repo.upsert("flights", T(id=[8], delay=[8]), branch="feat")
    repo.upsert("airports", T(faa=["SFO"], name=["SF"]))
    before = repo.resolve("feat").id
    proc = run_python(CRASH, tmp_path / "repo", verb, env={"TRIMERGE_CRASH_AT": point})
    assert proc.returncode == -9, proc.stderr
    again = trimerge.Repository.open(tmp_path / "repo")  # recovers
    now = again.resolve("feat").id
    after_points = {"rebase_moved", "reset_moved"}
    if point in after_points:
        assert now != before
        assert again.reflog("feat")[0].old == before
    else:
        assert now == before and again.reflog("feat")[0].new == before  # a dead move's entry is not shown
    assert not again.fsck().problems
    r = rebase("feat", "main", repo=again) if verb == "rebase" else None  # a leftover temporary branch goes
    assert [b for b in again.branches.names() if b.startswith("rebasing/")] == []
    if r is not None:
        assert sorted(again.read("flights", ref="feat").column("id").to_pylist()) == [1, 2, 3, 7, 8]


def test_gc_beside_a_rebase_loses_nothing_a_reflog_entry_names(tmp_path):
    repo = fresh(tmp_path)
    repo.branches.create("feat")
    repo.upsert("flights", T(id=[7], delay=[7]), branch="feat")
    repo.upsert("flights", T(id=[8], delay=[8]), branch="feat")
    repo.upsert("airports", T(faa=["SFO"], name=["SF"]))
    old = repo.resolve("feat").id
    other = trimerge.Repository.open(tmp_path / "repo")
    reports = []
    for point in ("rebase_replay", "rebase_replayed", "rebase_moved"):
        with faults.at(point, lambda: reports.append(other.gc(retention="now"))):
            if point != "rebase_replay":
                repo.branches.reset("feat", old)
            rebase("feat", "main", repo=repo)
    assert len(reports) == 3
    for e in repo.reflog("feat"):
        for cid in (e.old, e.new):
            if cid:
                for name in repo.tables(cid):
                    repo.read(name, ref=cid)  # every table of every commit a reflog entry names is readable
    assert sorted(repo.read("flights", ref="feat").column("id").to_pylist()) == [1, 2, 3, 7, 8]
    assert not repo.fsck().problems


def test_gc_expires_old_reflog_entries(tmp_path):
    repo = fresh(tmp_path)
    repo.upsert("flights", T(id=[4], delay=[4]))
    repo.branches.reset("main", "main~1")
    gone = repo.reflog("main")[0].old
    assert repo.gc(retention="7d").commits_reclaimed == []
    report = repo.gc(retention=timedelta(0))
    assert gone in report.commits_reclaimed and report.reflog_entries_expired > 0
    assert repo.reflog("main") == []
    with pytest.raises(RefNotFoundError):
        repo.resolve("main@{1}")


def test_every_verb_on_each_backend(repo_uri):
    """Squash, per-table merge, rebase, reset, restore and the reflog, on a local disk and on S3."""
    uri, options = repo_uri
    repo = trimerge.Repository.init(uri, storage_options=options)
    repo.create_table("airports", T(faa=["JFK", "LGA"], name=["Kennedy", "LaGuardia"]), "faa")
    repo.create_table("flights", T(id=[1, 2], delay=[0, 5]), "id")
    repo.branches.create("feat")
    repo.upsert("flights", T(id=[3], delay=[30]), branch="feat")
    repo.upsert("airports", T(faa=["SFO"], name=["SF"]), branch="feat")
    repo.upsert("flights", T(id=[1], delay=[1]))
    assert merge("feat", "main", repo=repo, tables=["airports"]).commit.metadata["merge.tables"] == "airports"
    assert rebase("feat", "main", repo=repo).status == "rebased"
    assert merge("feat", "main", repo=repo, squash=True).status == "merged"
    assert repo.read("flights").num_rows == 3 and repo.read("airports").num_rows == 3
    assert repo.restore("airports", "main~2").action == "restored" and repo.read("airports").num_rows == 2
    repo.branches.reset("main", "main~1")
    assert repo.read("airports").num_rows == 3
    repo.branches.reset("main", "main@{1}")
    assert repo.read("airports").num_rows == 2
    assert [e.reason.split(":")[0] for e in repo.reflog("main", limit=2)] == ["reset", "reset"]
    assert repo.gc().commits_reclaimed == [] and not repo.fsck().problems
