"""gc: what it keeps, what it reclaims, and that no interleaving with writers loses reachable data.

Deterministic interleavings run an action at each step of gc (and gc at each step of an action)
through :func:`trimerge.lineage.storage.faults.at`; racing processes run gc in a loop beside writers.
"""

from __future__ import annotations

import json
import os
from datetime import timedelta
from pathlib import Path

import pytest

import trimerge
from trimerge.lineage.errors import ConcurrentWriteError, DataReclaimedError, TrimergeError
from trimerge.lineage.storage.faults import at
from trimerge.lineage.history.refs import now
from trimerge.merge import cherry_pick, merge

from conftest import T

NOW = timedelta(0)
GC_STEPS = ["gc_listed", "gc_intents_read", "gc_roots_read", "gc_condemned", "gc_confirmed"]


def reachable_commits(repo: trimerge.Repository) -> list:
    tips = [b.commit_id for b in repo.branches.list()] + [t.commit_id for t in repo.tags.list()]
    return [repo.commit(c) for c in dict.fromkeys(c.id for tip in tips for c in repo.log(tip))]


def assert_everything_reachable_is_readable(repo: trimerge.Repository) -> None:
    again = trimerge.Repository.open(repo.uri, storage_options=repo.location.storage_options or None)
    for commit in reachable_commits(again):
        for table in commit.tables:
            again.read(table, ref=commit.id)
    assert again.fsck().problems == []


@pytest.fixture
def history(repo_uri):
    """main with a table; branch 'gone' (a fork, a new table, two commits) force-deleted; its tip."""
    uri, options = repo_uri
    repo = trimerge.Repository.init(uri, storage_options=options)
    return repo, _deleted_branch(repo)


def _deleted_branch(repo: trimerge.Repository):
    repo.create_table("t", T(k=[1, 2], v=["a", "b"]), primary_key="k")
    repo.branches.create("gone")
    repo.upsert("t", T(k=[3], v=["gone"]), branch="gone")
    repo.create_table("extra", T(k=[1]), primary_key="k", branch="gone")
    tip = repo.resolve("gone")
    repo.branches.delete("gone", force=True)
    return tip


def other(repo: trimerge.Repository) -> trimerge.Repository:
    """A second handle, as another process would have."""
    return trimerge.Repository.open(repo.uri, storage_options=repo.location.storage_options or None)


# ---------------------------------------------------------------------------------------------- keep / reclaim
def test_retention_keeps_deleted_branches_and_expired_records_go(history):
    repo, tip = history
    assert repo.gc().commits_reclaimed == []  # 7 days by default
    assert repo.gc(retention=timedelta(hours=1)).commits_reclaimed == []
    assert repo.read("extra", ref=tip.id).num_rows == 1
    # A deletion recorded two hours ago is past a one-hour retention.
    for record in repo.deletions.records():
        repo.deletions.remove(record)
    for entry in repo.refs.reflog.raw("gone"):  # its reflog keeps it too, for as long
        repo.refs.reflog.discard(entry.key)
    repo.deletions.record("branch", "gone", tip.id, now() - timedelta(hours=2))
    report = repo.gc(retention=timedelta(hours=1))
    assert tip.id in report.commits_reclaimed and report.deletion_records_expired == 1
    assert len(report.datasets_removed) == 1 and len(report.forks_removed) == 1
    with pytest.raises(DataReclaimedError):
        repo.read("extra", ref=tip.id)
    with pytest.raises(DataReclaimedError):
        repo.branches.create("back", from_ref=tip.id)
    assert not repo.branches.exists("back")
    assert repo.read("t").num_rows == 2
    assert_everything_reachable_is_readable(repo)


def test_tags_and_other_branches_keep_commits_and_deleted_tags_keep_them_for_the_retention(history):
    repo, tip = history
    repo.branches.create("again", from_ref=tip.id)  # within the retention: restorable
    repo.tags.create("v1", ref="again")
    repo.branches.delete("again")  # the tag reaches it: no force needed
    assert repo.gc(retention=NOW).commits_reclaimed == []
    repo.tags.delete("v1")
    assert repo.gc().commits_reclaimed == []  # the tag's deletion is recent
    assert repo.read("extra", ref=tip.id).num_rows == 1
    assert tip.id in repo.gc(retention=NOW).commits_reclaimed


def test_gc_is_idempotent_and_never_touches_what_refs_reach(history):
    repo, tip = history
    first = repo.gc(retention=NOW)
    second = repo.gc(retention=NOW)
    assert first.commits_reclaimed and second.commits_reclaimed == []
    assert second.datasets_removed == second.forks_removed == [] and second.versions_removed == 0
    assert_everything_reachable_is_readable(repo)


def test_a_transaction_in_flight_keeps_its_data(history):
    repo, _ = history
    repo.branches.create("b")
    with repo.transaction("b") as tx:
        tx.create_table("planes", T(n=["N1"]), primary_key="n")
        tx.upsert("t", T(k=[9], v=["b"]))
        tx.upsert("t", T(k=[10], v=["b"]))  # an intermediate version of the transaction
        report = other(repo).gc(retention=NOW)
        assert report.datasets_removed and all("planes" not in d for d in report.datasets_removed)
    assert repo.read("planes", ref="b").num_rows == 1 and repo.read("t", ref="b").num_rows == 4
    other(repo).gc(retention=NOW)
    assert_everything_reachable_is_readable(repo)


# ---------------------------------------------------------------------------------------------- storage bound
def tables_size(repo: trimerge.Repository) -> int:
    return sum(f.stat().st_size for f in (Path(repo.uri) / "tables").rglob("*") if f.is_file())


def _live_history(repo: trimerge.Repository, aborted_overwrites: int) -> None:
    repo.create_table("t", T(k=list(range(20_000)), v=["x" * 40] * 20_000), primary_key="k")
    for _ in range(aborted_overwrites):
        with pytest.raises(RuntimeError):
            with repo.transaction() as tx:
                tx.overwrite("t", T(k=list(range(20_000)), v=["y" * 40] * 20_000))
                raise RuntimeError("abort")
    with repo.transaction() as tx:  # an intermediate version inside one transaction
        tx.upsert("t", T(k=[1], v=["one"]))
        tx.upsert("t", T(k=[2], v=["two"]))


def test_aborted_writes_and_intermediate_versions_are_reclaimed(tmp_path):
    twin = trimerge.Repository.init(tmp_path / "twin")  # the same commits, never an aborted write
    _live_history(twin, 0)
    twin.gc(retention=NOW)
    live = tables_size(twin)
    repo = trimerge.Repository.init(tmp_path / "repo")
    _live_history(repo, 8)
    assert tables_size(repo) > 3 * live
    report = repo.gc(retention=NOW)
    assert report.versions_removed == 8 * 2 + 1  # each abort: the overwrite and its undo; one intermediate
    assert tables_size(repo) <= 1.3 * live
    assert repo.read("t").num_rows == 20_000 and repo.entity("t", 2)["v"] == "two"
    assert_everything_reachable_is_readable(repo)


# ---------------------------------------------------------------------------------------------- only its own files
def test_strays_under_tables_are_left_alone_and_never_followed(history, tmp_path):
    repo, tip = history
    if not repo.location.is_local:
        pytest.skip("symlinks exist on local disks only")
    tables = Path(repo.uri) / "tables"
    outside = tmp_path / "outside"
    (outside / "data").mkdir(parents=True)
    (outside / "data" / "precious.txt").write_text("keep me")
    (tables / "notes.txt").write_text("a stray file")
    (tables / "foreign").mkdir()
    (tables / "foreign" / "x.bin").write_bytes(b"x")
    (tables / "link").symlink_to(outside)
    (tables / "t-01kzzzzzzzzzzzzzzzzzzzzzzz").symlink_to(outside)  # named like ours, but a symlink
    warnings: list[str] = []
    report = repo.gc(retention=NOW, warn=warnings.append)
    assert tip.id in report.commits_reclaimed
    assert sorted(report.left_alone) == ["tables/foreign", "tables/link", "tables/notes.txt",
                                         "tables/t-01kzzzzzzzzzzzzzzzzzzzzzzz"]
    assert len(warnings) == 4 and all("left alone" in w for w in warnings)
    assert (outside / "data" / "precious.txt").read_text() == "keep me"
    assert (tables / "notes.txt").exists() and (tables / "foreign" / "x.bin").exists()
    problems = repo.fsck().problems  # fsck reports the links (issue 29), and only them
    assert len(problems) == 2 and all("symbolic link" in p for p in problems), problems
    (tables / "link").unlink()
    (tables / "t-01kzzzzzzzzzzzzzzzzzzzzzzz").unlink()
    assert_everything_reachable_is_readable(repo)


# ---------------------------------------------------------------------------------------------- interleavings
def _actions(repo: trimerge.Repository, tip):
    """Things other processes do while gc runs; each either succeeds or raises a TrimergeError."""
    def branch_at_deleted_tip():
        other(repo).branches.create("restored", from_ref=tip.id)

    def tag_at_deleted_tip():
        other(repo).tags.create("late", ref=tip.id)

    def cherry_pick_deleted_tip():
        cherry_pick(tip.id, "main", repo=other(repo))

    def merge_deleted_tip():
        merge(tip.id, "main", repo=other(repo))

    def commit_on_main():
        other(repo).upsert("t", T(k=[7], v=["new"]))

    def first_write_to_new_branch():
        r = other(repo)
        r.branches.create("fresh")
        r.upsert("t", T(k=[8], v=["fresh"]), branch="fresh")

    def create_table():
        other(repo).create_table("planes", T(n=["N1"]), primary_key="n")

    def delete_branch():
        r = other(repo)
        r.branches.create("short")
        r.upsert("t", T(k=[5], v=["short"]), branch="short")
        r.branches.delete("short", force=True)

    return {f.__name__: f for f in (branch_at_deleted_tip, tag_at_deleted_tip, cherry_pick_deleted_tip,
                                    merge_deleted_tip, commit_on_main, first_write_to_new_branch, create_table,
                                    delete_branch)}


ACTIONS = list(_actions(None, None))


def _run_interleaved(repo, tip, point, action, gc_first: bool):
    outcome: list[object] = []

    def act():
        try:
            action()
            outcome.append("ok")
        except TrimergeError as exc:
            outcome.append(exc)

    if gc_first:
        with at(point, act):
            repo.gc(retention=NOW)
    else:
        with at(point, lambda: outcome.append(other(repo).gc(retention=NOW))):
            act()
    return outcome


@pytest.mark.parametrize("step", GC_STEPS)
@pytest.mark.parametrize("action", ACTIONS)
def test_any_action_at_any_step_of_gc_loses_nothing_a_ref_reaches(repo, step, action):
    tip = _deleted_branch(repo)
    outcome = _run_interleaved(repo, tip, step, _actions(repo, tip)[action], gc_first=True)
    assert len(outcome) == 1, "the action ran"
    if outcome[0] != "ok":
        assert isinstance(outcome[0], (ConcurrentWriteError, DataReclaimedError)), outcome[0]
    assert_everything_reachable_is_readable(repo)
    if action in ("commit_on_main", "first_write_to_new_branch", "create_table", "delete_branch"):
        assert outcome == ["ok"]  # gc never gets in the way of writes that do not revive old commits


@pytest.mark.parametrize("point, action", [
    ("branch_resolved", "branch_at_deleted_tip"), ("branch_ref_created", "branch_at_deleted_tip"),
    ("tag_resolved", "tag_at_deleted_tip"), ("tag_ref_created", "tag_at_deleted_tip"),
    ("intent_planned", "cherry_pick_deleted_tip"), ("intent_planned", "merge_deleted_tip"),
])
def test_gc_at_any_step_of_reviving_an_old_commit(history, point, action):
    repo, tip = history
    outcome = _run_interleaved(repo, tip, point, _actions(repo, tip)[action], gc_first=False)
    assert len(outcome) == 2, "gc ran inside the action"
    result = outcome[-1]
    if point.endswith("_resolved"):
        # gc finished before the ref existed: the commit is condemned and the creator backs out.
        assert isinstance(result, DataReclaimedError)
        assert not repo.branches.exists("restored") and repo.tags.get_or_none("late") is None
    elif result == "ok":
        assert tip.id not in outcome[0].commits_reclaimed  # gc saw the new reference and kept it
    else:
        assert isinstance(result, (ConcurrentWriteError, DataReclaimedError))
    assert_everything_reachable_is_readable(repo)


def test_a_crashed_gc_is_finished_by_the_next(history, run_script):
    repo, tip = history
    script = """
import sys, datetime, trimerge
trimerge.Repository.open(sys.argv[1]).gc(retention=datetime.timedelta(0))
"""
    if not repo.location.is_local:
        pytest.skip("the crash test runs on the local backend")
    res = run_script(script, repo.uri, env={"TRIMERGE_CRASH_AT": "gc_confirmed", "TRIMERGE_LEASE_SECONDS": "600"})
    assert res.returncode == -9
    commits, _ = repo.reclaimed.read()
    assert commits.get(tip.id) not in (None, "reclaimed")  # condemned, not yet done
    with pytest.raises(ConcurrentWriteError):  # reviving it is refused while the verdict stands
        repo.branches.create("back", from_ref=tip.id)
    report = repo.gc()  # even with a retention that would have kept it
    assert tip.id in report.commits_reclaimed and report.datasets_removed
    assert repo.reclaimed.read()[0][tip.id] == "reclaimed"
    assert_everything_reachable_is_readable(repo)


def test_gc_refuses_to_guess_when_a_ref_is_damaged(history):
    repo, tip = history
    if not repo.location.is_local:
        pytest.skip("edits files on disk")
    (Path(repo.uri) / "_trimerge" / "refs" / "branches" / "main.json").write_text("")
    with pytest.raises(trimerge.lineage.errors.CorruptRepositoryError) as exc:
        repo.gc(retention=NOW)
    assert "main.json" in str(exc.value)
    assert repo.reclaimed.read()[0] == {}  # nothing condemned
    assert os.path.isdir(Path(repo.uri) / "tables")


# ---------------------------------------------------------------------------------------------- racing processes
WRITER = r"""
import json, sys, time, pyarrow as pa, trimerge
from trimerge.lineage.errors import TrimergeError
from trimerge.merge import merge
uri, wid, rounds, opts = sys.argv[1], sys.argv[2], int(sys.argv[3]), json.loads(sys.argv[4]) or None
repo = trimerge.Repository.open(uri, storage_options=opts, lock_timeout=60)
acked = []
for i in range(rounds):
    name = f"w{wid}-{i}"
    try:
        repo.branches.create(name, from_ref="main")
        c = repo.upsert("t", pa.table({"k": [1000 * int(wid) + i], "v": [name]}), branch=name)
        acked.append([name, c.id])
        c = repo.create_table(f"n{wid}_{i}", pa.table({"k": [i]}), primary_key="k", branch=name)
        acked.append([name, c.id])
        if i % 2 == 0:
            r = merge(name, "main", repo=repo)
            acked.append(["main", r.commit.id])
            repo.branches.delete(name)
        else:
            repo.tags.create(f"tag-{name}", ref=name)
            repo.branches.delete(name, force=True)
            acked.append([f"tag-{name}", c.id])
    except TrimergeError as exc:
        acked.append(["error", f"{type(exc).__name__}: {exc}"])
print(json.dumps(acked))
"""

GC_LOOP = r"""
import json, os, sys, time, datetime, trimerge
uri, seconds, opts, stop = sys.argv[1], float(sys.argv[2]), json.loads(sys.argv[3]) or None, sys.argv[4]
repo = trimerge.Repository.open(uri, storage_options=opts, lock_timeout=60)
end, runs = time.time() + seconds, 0
# Collects for as long as the writers write (at most ``seconds``), then once more after them.
while time.time() < end and (runs < 2 or not os.path.exists(stop)):
    repo.gc(retention=datetime.timedelta(0))
    runs += 1
repo.gc(retention=datetime.timedelta(0))
print(runs + 1)
"""


@pytest.mark.slow
def test_gc_in_a_loop_beside_writers_loses_no_acknowledged_commit(repo_uri, tmp_path):
    import subprocess
    import sys

    uri, options = repo_uri
    repo = trimerge.Repository.init(uri, storage_options=options)
    repo.create_table("t", T(k=[0], v=["root"]), primary_key="k")
    opts = json.dumps(options or {})
    rounds = "6" if options else "8"
    env = {**os.environ, "TRIMERGE_LEASE_SECONDS": "120"}
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, uri, str(w), rounds, opts], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for w in (1, 2)]
    stop = tmp_path / "writers-done"
    collector = subprocess.Popen([sys.executable, "-c", GC_LOOP, uri, "15", opts, str(stop)], env=env,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    outputs = [w.communicate(timeout=300) for w in writers]
    stop.touch()  # the collector stops once the writers are done (it used to run 15 s whatever they did)
    gc_out, gc_err = collector.communicate(timeout=300)
    assert collector.returncode == 0, gc_err
    assert int(gc_out) >= 2
    acked = []
    for (out, err), w in zip(outputs, writers):
        assert w.returncode == 0, err
        acked += json.loads(out)
    errors = [a for a in acked if a[0] == "error"]
    assert len(errors) <= len(acked) // 4, errors
    repo = other(repo)
    for ref, commit_id in acked:
        if ref == "main" or ref.startswith("tag-"):
            commit = repo.commit(commit_id)
            assert repo.is_ancestor(commit_id, repo.resolve(ref).id)
            for table in commit.tables:
                repo.read(table, ref=commit_id)
    assert_everything_reachable_is_readable(repo)
