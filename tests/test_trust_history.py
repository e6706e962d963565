"""Issue 39, points 2 and 4: trimerge's temporary branches never collide with users' branches, and
gates (data checks, derived-column declarations) survive history editing.

Real Lance data in temporary directories; kill -9 in subprocesses (``TRIMERGE_CRASH_AT``)."""

from __future__ import annotations

import json
import subprocess

import pyarrow as pa
import pytest

import trimerge
from trimerge.lineage.errors import InvalidNameError, InvalidOperationError
from trimerge.lineage.storage.lease import Holder
from trimerge.lineage.history.names import SCHEMA_LOCK_BRANCH
from trimerge.lineage.history.refs import Branch, now
from trimerge.merge import merge, rebase
from trimerge.merge.result import MergeCheckError

from conftest import run_python


def T(**cols) -> pa.Table:
    return pa.table(cols)


def fresh(tmp_path, name="repo") -> trimerge.Repository:
    repo = trimerge.Repository.init(tmp_path / name)
    repo.create_table("flights", T(id=[1, 2, 3], delay=[0, 5, 10]), "id")
    return repo


def with_feature(tmp_path) -> trimerge.Repository:
    """main and ``feat`` each with their own commits: a rebase of feat onto main replays two."""
    repo = fresh(tmp_path)
    repo.branches.create("feat")
    repo.upsert("flights", T(id=[7], delay=[7]), branch="feat")
    repo.upsert("flights", T(id=[8], delay=[8]), branch="feat")
    repo.upsert("flights", T(id=[9], delay=[9]))
    return repo


def stored_branches(repo: trimerge.Repository) -> list[str]:
    """Every branch document, hidden ones too (but the schema lock, which always exists)."""
    return [b.name for b in repo.branches.list(include_internal=True) if b.name != SCHEMA_LOCK_BRANCH]


def dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


# ---------------------------------------------------------------------------------------------- point 2
USER_LOOKALIKE = "rebasing/01jb6gq0s3v7x2k9m4n8p5r1t0"  # shaped like an older version's temporaries


def test_a_rebase_never_deletes_a_users_branch_named_like_its_temporaries(tmp_path):
    repo = with_feature(tmp_path)
    for name in ("rebasing/x", USER_LOOKALIKE):
        repo.branches.create(name)
    rebase("feat", "main", repo=repo)
    names = repo.branches.names()
    assert "rebasing/x" in names and USER_LOOKALIKE in names
    again = trimerge.Repository.open(tmp_path / "repo")  # recovery leaves them alone too
    assert {"rebasing/x", USER_LOOKALIKE} <= set(again.branches.names())
    assert not [d for d in again.branches.deleted()]


@pytest.mark.parametrize("name", ["__trimerge__/rebase/x", "__trimerge__", "a/__tmp__/b", "x/__y__"])
def test_the_internal_name_space_cannot_be_created_by_users(tmp_path, name, cli):
    repo = fresh(tmp_path)
    with pytest.raises(InvalidNameError, match="reserved"):
        repo.branches.create(name)
    out = cli("-C", tmp_path / "repo", "branch", "create", name)
    assert out.exit_code == 2 and len(out.stderr.strip().splitlines()) == 1


def test_a_rebase_leaves_no_temporary_branch_or_lease(tmp_path):
    repo = with_feature(tmp_path)
    seen = []
    from trimerge.lineage.storage import faults

    with faults.at("rebase_replayed", lambda: seen.append(repo.branches.names())):
        rebase("feat", "main", repo=repo)
    assert seen and seen[0] == ["main", "feat"]  # hidden even while the rebase runs
    assert stored_branches(repo) == ["main", "feat"]
    assert not [k for k in repo.docs.list("locks") if "__trimerge__" in k or "rebasing" in k]
    assert repo.reflog("feat")[0].reason.startswith("rebase: onto main")
    assert not [e for e in repo.reflog() if "__trimerge__" in e.ref]


CRASH = """
import sys, trimerge
from trimerge.merge import rebase
repo = trimerge.Repository.open(sys.argv[1])
rebase("feat", "main", repo=repo)
"""


@pytest.mark.parametrize("point", ["temporary_recorded", "rebase_replay", "before_publish", "rebase_replayed",
                                   "rebase_moved"])
def test_a_killed_rebase_leaves_no_visible_trace_after_recovery(tmp_path, point, cli):
    repo = with_feature(tmp_path)
    repo.branches.create("rebasing/x")
    before = repo.resolve("feat").id
    proc = run_python(CRASH, tmp_path / "repo", env={"TRIMERGE_CRASH_AT": point})
    assert proc.returncode == -9, proc.stderr
    again = trimerge.Repository.open(tmp_path / "repo")  # the read-write open recovers
    assert stored_branches(again) == ["main", "feat", "rebasing/x"]
    assert not [k for k in again.docs.list("locks") if "__trimerge__" in k]
    assert again.docs.list("temporaries") == [] and again.docs.list("intents") == []
    assert point == "temporary_recorded" or again.last_recovery.temporaries_removed
    assert not again.fsck().problems
    listed = json.loads(cli("-C", tmp_path / "repo", "--json", "branch", "list", ok=True).stdout)
    assert sorted(b["name"] for b in listed) == ["feat", "main", "rebasing/x"]
    assert (again.resolve("feat").id != before) == (point == "rebase_moved")
    r = rebase("feat", "main", repo=again)
    assert r.status in ("rebased", "up-to-date")
    assert sorted(again.read("flights", ref="feat").column("id").to_pylist()) == [1, 2, 3, 7, 8, 9]
    assert "rebasing/x" in again.branches.names()


def test_an_older_versions_leftover_goes_only_when_its_rebase_record_proves_it(tmp_path):
    repo = with_feature(tmp_path)
    tip = repo.resolve("main").id
    leftover = "rebasing/01jb6gq0s3v7x2k9m4n8p5r1t9"
    # What a rebase of the older version left when killed: its branch and its owner's lease.
    repo.refs.create_branch(Branch(leftover, tip, "01JB6GQ0S3V7X2K9M4N8P5R1T9", now(), None))
    holder = Holder(**{**Holder.new("rebase of feat", 600).to_json(), "pid": dead_pid()})
    repo.docs.create(repo.branch_lease(leftover + "-owner", "").key, holder.to_json())
    repo.branches.create(USER_LOOKALIKE)  # a user's, with no such record
    again = trimerge.Repository.open(tmp_path / "repo")
    names = stored_branches(again)
    assert leftover not in names and USER_LOOKALIKE in names
    assert not [k for k in again.docs.list("locks") if "rebasing" in k]


def test_a_live_rebase_temporary_is_never_swept(tmp_path):
    """Another process's rebase in flight: a read-write open beside it leaves its branch alone."""
    repo = with_feature(tmp_path)
    from trimerge.lineage.storage import faults

    seen = []

    def open_beside():
        other = trimerge.Repository.open(tmp_path / "repo")
        seen.append(stored_branches(other))

    with faults.at("rebase_replayed", open_beside):
        r = rebase("feat", "main", repo=repo)
    assert r.status == "rebased"
    assert len(seen[0]) == 3 and any(n.startswith("__trimerge__/rebase/") for n in seen[0])


def test_a_branch_an_older_version_created_with_a_reserved_segment_still_works(tmp_path):
    repo = fresh(tmp_path)
    tip = repo.resolve("main").id
    repo.refs.create_branch(Branch("feat/__wip__", tip, "01JB6GQ0S3V7X2K9M4N8P5R1T8", now(), "main"))
    again = trimerge.Repository.open(tmp_path / "repo")
    assert "feat/__wip__" in again.branches.names()
    again.upsert("flights", T(id=[4], delay=[4]), branch="feat/__wip__")
    assert sorted(again.read("flights", ref="feat/__wip__").column("id").to_pylist()) == [1, 2, 3, 4]


def test_gc_removes_an_older_versions_dead_scratch_lease(tmp_path):
    repo = fresh(tmp_path)
    holder = Holder(**{**Holder.new("scratch 01JB6GQ0S3V7X2K9M4N8P5R1T7", 600).to_json(), "pid": dead_pid()})
    key = repo.branch_lease("__scratch_01jb6gq0s3v7x2k9m4n8p5r1t7__", "").key
    repo.docs.create(key, holder.to_json())
    assert repo.gc(retention="now").stale_leases_removed == 1
    assert key not in repo.docs.list("locks")


# ---------------------------------------------------------------------------------------------- point 4
def gated(tmp_path) -> trimerge.Repository:
    """Table t on protected main: a check forbidding v < 0 and w declared derived from v, both
    added after the commit main~3 names."""
    repo = trimerge.Repository.init(tmp_path / "repo")
    repo.create_table("t", T(id=[1, 2], v=[1, 2], w=[10, 20]), "id")
    repo.upsert("t", T(id=[3], v=[3], w=[30]))  # main~3
    repo.checks.add("no_negative", "t", "SELECT * FROM t WHERE v < 0")
    repo.set_derived("t", "w", ["v"])
    repo.upsert("t", T(id=[4], v=[4], w=[40]))
    repo.branches.protect("main")
    repo.branches.create("f")
    return repo


def test_a_restore_keeps_the_tables_checks_and_derived_declarations(tmp_path):
    repo = gated(tmp_path)
    r = repo.restore("t", "main~3", branch="f")
    assert r.action == "restored"
    assert sorted(repo.read("t", ref="f").column("id").to_pylist()) == [1, 2, 3]
    assert [c.name for c in repo.checks.list("f")] == ["no_negative"]
    assert repo.derived("t", "f") == {"w": ("v",)}


def test_a_restore_then_a_merge_never_publishes_what_the_check_forbids(tmp_path):
    repo = gated(tmp_path)
    repo.restore("t", "main~3", branch="f")
    repo.upsert("t", T(id=[5], v=[-1], w=[0]), branch="f")
    with pytest.raises(MergeCheckError):
        merge("f", "main", repo=repo)
    assert [c.name for c in repo.checks.list("main")] == ["no_negative"]
    assert -1 not in repo.read("t", ref="main").column("v").to_pylist()


def test_a_restore_dropping_a_gated_table_is_refused_unless_asked(tmp_path):
    repo = gated(tmp_path)
    repo.create_table("u", T(id=[1]), "id", branch="f")
    repo.checks.add("u_pos", "u", "SELECT * FROM u WHERE id < 0", branch="f")
    with pytest.raises(InvalidOperationError, match="keep_gates=False"):
        repo.restore("u", "main", branch="f")
    assert repo.restore("u", "main", branch="f", keep_gates=False).action == "dropped"
    assert "u" not in repo.tables("f")


def test_a_restore_takes_the_refs_gates_only_when_asked(tmp_path):
    repo = gated(tmp_path)
    r = repo.restore("t", "main~3", branch="f", keep_gates=False)
    assert r.action == "restored"
    assert repo.checks.list("f") == [] and repo.derived("t", "f") == {}
    with pytest.raises(InvalidOperationError, match="keep_gates"):
        repo.restore("t", "main~3", branch="f", keep_gates="yes")


def test_a_restore_that_cannot_keep_a_declaration_is_refused(tmp_path, cli):
    repo = trimerge.Repository.init(tmp_path / "repo")
    repo.create_table("t", T(id=[1], v=[1]), "id")
    repo.add_columns("t", [pa.field("w", pa.int64())])
    repo.set_derived("t", "w", ["v"])
    tip = repo.resolve("main").id
    with pytest.raises(InvalidOperationError, match="keep_gates=False"):
        repo.restore("t", "main~2")
    with pytest.raises(InvalidOperationError, match="keep_gates=False"):
        repo.restore("t", "main~2", dry_run=True)
    out = cli("-C", tmp_path / "repo", "table", "restore", "t", "--ref", "main~2")
    assert out.exit_code == 2 and "--no-keep-gates" in out.stderr and len(out.stderr.strip().splitlines()) == 1
    assert repo.resolve("main").id == tip
    assert repo.restore("t", "main~2", keep_gates=False).action == "restored"


def test_a_merge_into_a_gated_branch_is_judged_by_the_gate_it_removes(tmp_path):
    repo = gated(tmp_path)
    repo.checks.remove("no_negative", branch="f")
    repo.upsert("t", T(id=[5], v=[-1], w=[0]), branch="f")
    with pytest.raises(MergeCheckError, match="no_negative"):
        merge("f", "main", repo=repo)
    assert [c.name for c in repo.checks.list("main")] == ["no_negative"]
    dry = merge("f", "main", repo=repo, dry_run=True)
    assert dry.status == "check_failed"
    done = merge("f", "main", repo=repo, checks=False)  # asked for: the removal goes through
    assert done.status == "merged" and repo.checks.list("main") == []


def test_a_merge_removing_a_gate_publishes_when_the_data_passes_it(tmp_path):
    repo = gated(tmp_path)
    repo.checks.remove("no_negative", branch="f")
    r = merge("f", "main", repo=repo)
    assert r.status == "merged" and [c.name for c in r.checks] == ["no_negative"]
    assert repo.checks.list("main") == []


def test_cli_restore_keeps_gates_unless_told(tmp_path, cli):
    repo = gated(tmp_path)
    where = tmp_path / "repo"
    cli("-C", where, "table", "restore", "t", "--ref", "main~3", "-b", "f", ok=True)
    assert [c.name for c in repo.checks.list("f")] == ["no_negative"]
    cli("-C", where, "table", "restore", "t", "--ref", "main", "-b", "f", ok=True)
    out = cli("-C", where, "--json", "table", "restore", "t", "--ref", "main~3", "-b", "f", "--no-keep-gates",
              ok=True)
    assert json.loads(out.stdout)["keep_gates"] is False
    assert repo.checks.list("f") == []
    bad = cli("-C", where, "table", "restore", "t", "--ref", "main~3", "-b", "f", "--keep-gates=maybe")
    assert bad.exit_code == 2
