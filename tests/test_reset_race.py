"""A ref moves only from the tip its caller saw (issue 50, item 6), with the interleavings injected.

``branches.reset("c", "c~1")`` used to resolve its target before it took the branch's lease and
then move the branch from whatever tip it found there: a commit another writer published in between
(acknowledged to it) was dropped, and nobody was told. It also read the tip once for "where the
branch is" and once more inside the resolution, so a commit landing between the two reads made it
answer "already there" — an acknowledged reset that moved nothing and left no reflog entry. Here the
commit is published at exactly those points (``trimerge.lineage.storage.faults.at`` and a wrapped
``resolve``): it is never dropped, and the reset either moves from the tip it resolved at or fails
with the retryable :class:`ConcurrentWriteError`, having changed nothing.

The reflog half: moves racing from several processes are all in the reflog, in order, and a gc
killed while it trims the reflog leaves each reflog a contiguous run of its newest entries.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pytest

import trimerge
from trimerge.lineage.errors import ConcurrentWriteError, RefNotFoundError, RefSyntaxError
from trimerge.lineage.storage import faults


def row(key: str) -> pa.Table:
    return pa.table({"k": [key], "v": [len(key)]})


@pytest.fixture
def chain(repo):
    """Branch ``c`` three commits past main's table creation."""
    repo.create_table("t", row("seed"), primary_key="k")
    repo.branches.create("c", from_ref="main")
    for i in range(3):
        repo.upsert("t", row(f"c{i}"), branch="c")
    return repo


def snapshot(repo) -> dict[str, bytes]:
    root = Path(repo.path) / "_trimerge"
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_a_commit_published_after_the_target_was_resolved_is_never_dropped(chain):
    tip = chain.branches.get("c").commit_id
    landed = []
    with faults.at("reset_resolved", lambda: landed.append(chain.upsert("t", row("late"), branch="c"))):
        with pytest.raises(ConcurrentWriteError, match="moved .* after 'c~1' was resolved") as caught:
            chain.branches.reset("c", "c~1")
    assert caught.value.retryable and caught.value.exit_code == 3
    late = landed[0]
    assert late.parents == (tip,)
    assert chain.branches.get("c").commit_id == late.id  # the concurrent commit is still the tip
    assert [e.new for e in chain.reflog("c", limit=1)] == [late.id]  # the reset logged nothing
    # retried, it resolves from the tip it now sees and says so: nothing dropped unseen
    again = chain.branches.reset("c", "c~1")
    assert (again.old, again.new, again.moved) == (late.id, tip, True)
    assert (chain.reflog("c", limit=1)[0].old, chain.reflog("c", limit=1)[0].new) == (late.id, tip)


def test_a_commit_landing_while_the_target_is_resolved_is_seen_not_answered_as_done(chain, monkeypatch):
    """The old code read the tip (T), then resolved ``c~1`` after a commit N had landed (N~1 = T)
    and answered "c is at T already": acknowledged, nothing moved, no reflog entry."""
    tip = chain.branches.get("c").commit_id
    resolve = chain.resolve
    landed = []

    def resolve_after_a_commit(expr):
        if not landed:
            landed.append(chain.upsert("t", row("racer"), branch="c"))
        return resolve(expr)

    monkeypatch.setattr(chain, "resolve", resolve_after_a_commit)
    result = chain.branches.reset("c", "c~1")
    racer = landed[0]
    assert (result.old, result.new, result.moved) == (racer.id, tip, True)  # from the tip c~1 was resolved at
    assert chain.branches.get("c").commit_id == tip
    top = chain.reflog("c", limit=2)
    assert [(e.old, e.new) for e in top] == [(racer.id, tip), (tip, racer.id)]  # both moves, in order


def test_a_branch_that_keeps_moving_while_resolving_is_a_retryable_error(chain, monkeypatch):
    resolve = chain.resolve
    monkeypatch.setattr(chain, "resolve", lambda expr: (chain.upsert("t", row("busy"), branch="c"), resolve(expr))[1])
    before = chain.branches.get("c").commit_id
    with pytest.raises(ConcurrentWriteError, match="kept moving"):
        chain.branches.reset("c", "c~1")
    log = [c.id for c in chain.log("c")]
    assert before in log and len(log) >= 4  # every commit made meanwhile is there


def test_expected_tip_is_a_compare_and_swap(chain):
    path = Path(chain.path)
    old_tip = chain.resolve("c~1").id
    tip = chain.branches.get("c").commit_id
    before = snapshot(chain)
    with pytest.raises(ConcurrentWriteError, match="not at"):
        chain.branches.reset("c", "c~2", expected_tip=old_tip)  # the caller saw an older tip
    assert snapshot(chain) == before  # nothing written, not even a lease
    for bad, error in ((123, RefSyntaxError), ("", RefSyntaxError), ("no-such-ref", RefNotFoundError)):
        with pytest.raises(error):
            chain.branches.reset("c", "c~2", expected_tip=bad)
        assert snapshot(chain) == before
    done = chain.branches.reset("c", "c~2", expected_tip=tip[:12])
    assert (done.old, done.moved) == (tip, True) and path.exists()


def test_cli_expect_exits_3_and_moves_nothing(chain, cli):
    path = str(chain.path)
    tip = chain.branches.get("c").commit_id
    stale = chain.resolve("c~1").id
    res = cli("-C", path, "branch", "reset", "c", "c~2", "--expect", stale)
    assert res.exit_code == 3 and len(res.stderr_lines) == 1 and "retry" in res.stderr and res.stdout == ""
    assert chain.branches.get("c").commit_id == tip
    ok = cli("-C", path, "--json", "branch", "reset", "c", "c~2", "--expect", tip, ok=True).json()
    assert ok["old"] == tip and ok["moved"] is True


# ---------------------------------------------------------------------------------------------- the reflog
MOVER = r"""
import json, os, sys, time
import pyarrow as pa
import trimerge
from trimerge.lineage.errors import ConcurrentWriteError

path, wid, n, barrier = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
repo = trimerge.Repository.open(path, lock_timeout=60)
open(os.path.join(barrier, wid), "w").close()
while len(os.listdir(barrier)) < int(sys.argv[5]):
    time.sleep(0.001)
acked = []
for i in range(n):
    try:
        if i % 3 == 2:
            r = repo.branches.reset("c", "c~1")
            acked.append(["reset", r.old, r.new, r.moved])
        else:
            c = repo.upsert("t", pa.table({"k": [f"w{wid}-{i}"], "v": [i]}), branch="c")
            acked.append(["commit", c.parents[0], c.id, True])
    except ConcurrentWriteError:
        pass
print(json.dumps(acked))
"""


def check_reflog(repo, acked) -> None:
    """Every acknowledged move is an entry of ``c``'s reflog, and the entries chain from the tip."""
    entries = repo.reflog("c")
    tip = repo.branches.get("c").commit_id
    assert entries[0].new == tip
    for newer, older in zip(entries, entries[1:]):
        assert newer.old == older.new, "the reflog's chain is broken"
    moves = {(e.old, e.new) for e in entries}
    missing = [a for a in acked if a[3] and (a[1], a[2]) not in moves]
    assert not missing, f"{len(missing)} acknowledged moves are not in the reflog: {missing[:3]}"


def test_moves_racing_from_processes_are_all_in_the_reflog_in_order(chain, tmp_path):
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    procs = [subprocess.Popen([sys.executable, "-c", MOVER, str(chain.path), str(w), "12", str(barrier), "3"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for w in range(3)]
    acked = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        acked += json.loads(out.strip().splitlines()[-1])
    assert sum(1 for a in acked if a[0] == "reset") >= 3 and sum(1 for a in acked if a[0] == "commit") >= 6
    for kind, old, new, moved in acked:
        if kind == "reset":
            assert moved and new == chain.commit(old).parents[0]  # c~1 of the tip it moved from
    check_reflog(chain, acked)


def test_a_gc_killed_while_trimming_the_reflog_leaves_its_newest_entries(chain, tmp_path):
    for i in range(4):
        chain.branches.reset("c", "c~1")
        chain.upsert("t", row(f"again{i}"), branch="c")
    entries = chain.reflog("c")
    assert len(entries) >= 10
    script = ("import sys, trimerge; repo = trimerge.Repository.open(sys.argv[1]); "
              "repo.gc(retention=0)")
    env = {**os.environ, "TRIMERGE_CRASH_AT": "reflog_entry_expired"}
    proc = subprocess.run([sys.executable, "-c", script, str(chain.path)], env=env, capture_output=True, timeout=300)
    assert proc.returncode == -9, proc.stderr  # killed after its first deletion
    left = chain.refs.reflog.raw("c")
    # the oldest went first: what is left is the newest run, contiguous, and still chains from the tip
    everything = sorted({e.key for e in entries} | {e.key for e in left}, reverse=True)
    assert [e.key for e in left] == everything[:len(left)]
    assert chain.reflog("c")[0].new == chain.branches.get("c").commit_id
    kept = chain.reflog("c")
    for newer, older in zip(kept, kept[1:]):
        assert newer.old == older.new
    report = chain.gc(retention=timedelta(0))  # a rerun finishes the trim
    assert report.reflog_entries_expired >= 1 and chain.reflog("c") == []


def test_restore_refuses_when_the_table_changed_after_it_was_read(chain):
    """A restore read the table, then another writer changed it: restoring now would undo that
    change unseen (a lost update), so the restore fails retryably and the change stays."""
    landed = []
    with faults.at("restore_read", lambda: landed.append(chain.upsert("t", row("late"), branch="c"))):
        with pytest.raises(ConcurrentWriteError):
            chain.restore("t", "c~2", branch="c")
    assert landed and chain.branches.get("c").commit_id == landed[0].id
    assert "late" in chain.read("t", ref="c").column("k").to_pylist()
    chain.restore("t", "c~3", branch="c")  # the retry, from the tip it now sees
    assert "late" not in chain.read("t", ref="c").column("k").to_pylist()


def test_restore_goes_on_when_another_table_changed(chain):
    chain.create_table("u", row("u0"), primary_key="k", branch="c")
    with faults.at("restore_read", lambda: chain.upsert("u", row("u1"), branch="c")):
        result = chain.restore("t", "main", branch="c")
    assert result.commit is not None
    assert sorted(chain.read("u", ref="c").column("k").to_pylist()) == ["u0", "u1"]
