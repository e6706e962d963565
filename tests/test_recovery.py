"""Crash recovery: a writer killed (SIGKILL) at each crash point is repaired by a read-write open."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import lance
import pyarrow as pa
import pytest

import trimerge
from trimerge.lineage.tables import conversion as tbl
from trimerge.lineage.errors import ConcurrentWriteError, CorruptRepositoryError
from trimerge.lineage.storage.lease import HOSTNAME, Holder

from conftest import T, all_lance_branches, rows, run_python

RECOVERY = "trimerge:recovery"

# The writer: prints its transaction's ulid, then runs a 3-table transaction on a branch.
WRITER = r"""
import sys
import pyarrow as pa
import trimerge

path, branch, scenario = sys.argv[1], sys.argv[2], sys.argv[3]
repo = trimerge.Repository.open(path)
with repo.transaction(branch=branch, actor="writer", message="crashy " + scenario) as tx:
    print(tx.ulid, flush=True)
    if scenario == "three-tables":
        tx.upsert("airlines", pa.table({"carrier": ["AA", "NEW"], "name": ["American (new)", "New Air"]}))
        tx.delete("airports", "faa = 'XYZ'")
        tx.append("planes", pa.table({"tailnum": ["N3"], "seats": [300]}))
    elif scenario == "create":
        tx.create_table("fleet", pa.table({"id": [1, 2], "size": [10, 20]}), primary_key="id")
        tx.upsert("airlines", pa.table({"carrier": ["NEW"], "name": ["New Air"]}))
    elif scenario == "schema":
        tx.add_columns("planes", pa.field("year", pa.int64()))
        tx.upsert("planes", pa.table({"tailnum": ["N1"], "seats": [101], "year": [1999]}))
print("DONE", tx.commit.id, flush=True)
"""

CRASH_POINTS = ["before_fork", "after_write_1", "after_write_2", "before_publish", "after_commit_object",
                "after_publish"]
ROLLED_BACK = {"before_fork", "after_write_1", "after_write_2"}
COMPLETED = {"before_publish", "after_commit_object", "after_publish"}


def state(repo, ref):
    c = repo.resolve(ref)
    return {name: rows(repo.read(name, ref=c.id), list(tv.primary_key)) for name, tv in c.tables.items()}


def owned_latest_matches(repo, branch):
    c = repo.resolve(branch)
    owner = repo.branches.get(branch).id
    for name, tv in c.tables.items():
        if tv.owner != owner:
            continue
        path = repo.dataset_path(tv)
        latest = tbl.open_version(path, tv.lance_branch, None)
        committed = tbl.open_version(path, tv.lance_branch, tv.version)
        assert rows(latest.to_table(), list(tv.primary_key)) == rows(committed.to_table(), list(tv.primary_key))


def meta_files(repo, folder):
    return sorted(p.name for p in (Path(repo.uri) / "_trimerge" / folder).glob("*")
                  if not p.name.startswith(".tmp-")) if (Path(repo.uri) / "_trimerge" / folder).exists() else []


def live_locks(repo):
    """Locks that would block a writer: held by a live holder and not released (leases stay as
    documents once taken; a dead holder's lease is taken over by the next writer)."""
    folder = Path(repo.uri) / "_trimerge" / "locks"
    out = []
    for p in sorted(folder.glob("*.lock")) if folder.exists() else []:
        holder = Holder.from_json(json.loads(p.read_bytes() or b"null")) if p.read_bytes().strip().startswith(b"{") else None
        if holder is not None and not holder.released and not holder.is_dead():
            out.append(p.name)
    return out


def lock_taken_or_free(path):
    """True once a lock file is released or replaced by a newer holder's (never left to a dead one)."""
    holder = Holder.from_json(json.loads(path.read_bytes()))
    return holder is not None and (holder.released or holder.token != "01STALE")


def run_writer(repo, branch, scenario, crash_at=None):
    env = {"TRIMERGE_CRASH_AT": crash_at} if crash_at else {"TRIMERGE_CRASH_AT": ""}
    return run_python(WRITER, repo.uri, branch, scenario, env=env)


@pytest.fixture
def crash_repo(tmp_path):
    repo = trimerge.Repository.init(tmp_path / "repo")
    repo.create_table("airlines", T(carrier=["AA", "UA"], name=["American", "United"]), primary_key="carrier")
    repo.create_table("airports", T(faa=["JFK", "XYZ"], name=["Kennedy", "Nowhere"]), primary_key="faa")
    repo.create_table("planes", T(tailnum=["N1", "N2"], seats=[100, 200]), primary_key="tailnum")
    repo.branches.create("feat", from_ref="main")
    # feat owns a fork of airlines already (the crashed write restores it), the others fork in the write.
    repo.upsert("airlines", T(carrier=["UA"], name=["United (feat)"]), branch="feat")
    return repo


PRE_FEAT = {
    "airlines": [{"carrier": "AA", "name": "American"}, {"carrier": "UA", "name": "United (feat)"}],
    "airports": [{"faa": "JFK", "name": "Kennedy"}, {"faa": "XYZ", "name": "Nowhere"}],
    "planes": [{"tailnum": "N1", "seats": 100}, {"tailnum": "N2", "seats": 200}],
}
POST_FEAT = {
    "airlines": [{"carrier": "AA", "name": "American (new)"}, {"carrier": "NEW", "name": "New Air"},
                 {"carrier": "UA", "name": "United (feat)"}],
    "airports": [{"faa": "JFK", "name": "Kennedy"}],
    "planes": [{"tailnum": "N1", "seats": 100}, {"tailnum": "N2", "seats": 200}, {"tailnum": "N3", "seats": 300}],
}


def test_writer_script_without_crash(crash_repo):
    proc = run_writer(crash_repo, "feat", "three-tables")
    assert proc.returncode == 0, proc.stderr
    assert "DONE" in proc.stdout
    repo = trimerge.Repository.open(crash_repo.uri)
    assert state(repo, "feat") == POST_FEAT
    assert repo.log(actor=RECOVERY) == []
    assert repo.last_recovery.completed == repo.last_recovery.rolled_back == []


@pytest.mark.parametrize("crash_at", CRASH_POINTS)
def test_kill_during_multi_table_transaction(crash_repo, crash_at, cli):
    main_before = state(crash_repo, "main")
    tip_before = crash_repo.resolve("feat")
    forks_before = all_lance_branches(crash_repo)
    assert state(crash_repo, "feat") == PRE_FEAT

    proc = run_writer(crash_repo, "feat", "three-tables", crash_at)
    assert proc.returncode == -signal.SIGKILL, (proc.returncode, proc.stderr)
    ulid = proc.stdout.split()[0]
    assert "DONE" not in proc.stdout

    # Before repair, readers still see a consistent branch (old or new).
    ro = trimerge.Repository.open(crash_repo.uri, read_only=True)
    assert state(ro, "feat") in (PRE_FEAT, POST_FEAT)

    repo = trimerge.Repository.open(crash_repo.uri)  # read-write: recovers
    log = repo.log("feat")
    by_ulid = [c for c in log if c.ulid == ulid]
    recovery = repo.log("feat", actor=RECOVERY)

    if crash_at in ROLLED_BACK:
        assert state(repo, "feat") == PRE_FEAT
        assert by_ulid == []
        assert len(recovery) == 1
        assert recovery[0].metadata["recovery.action"] == "rolled_back"
        assert recovery[0].metadata["recovery.ulid"] == ulid
        assert recovery[0].parents == (tip_before.id,)
        assert repo.last_recovery.rolled_back == [ulid]
    else:
        assert state(repo, "feat") == POST_FEAT
        assert len(by_ulid) == 1, "the interrupted commit is completed under its original ulid"
        done = by_ulid[0]
        assert done.actor == "writer" and done.message == "crashy three-tables"
        assert done.parents == (tip_before.id,)
        if crash_at == "after_publish":
            assert log[0] == done  # it was published; only the sidecar was left behind
        else:
            assert len(recovery) == 1
            assert recovery[0].metadata["recovery.action"] == "completed"
            assert recovery[0].metadata["recovery.ulid"] == ulid
            assert recovery[0].parents == (done.id,)
            assert log[0] == recovery[0]
            assert repo.last_recovery.completed == [ulid]
    assert all(c.actor == RECOVERY for c in recovery)

    # Consistent everywhere: every commit readable, main untouched, nothing left over.
    for c in log:
        for name in c.tables:
            repo.read(name, ref=c.id)
    assert state(repo, "main") == main_before
    owned_latest_matches(repo, "feat")
    assert meta_files(repo, "intents") == []
    assert live_locks(repo) == []
    if crash_at in ROLLED_BACK:
        assert all_lance_branches(repo) == forks_before  # forks of the failed write dropped
        repo.cleanup()
        assert all_lance_branches(repo) == forks_before

    # The CLI finds the repair too.
    res = cli("commit", "list", "-C", repo.uri, "--filter", f"actor={RECOVERY}", "--json", ok=True)
    listed = res.json()
    assert [c["id"] for c in listed] == [c.id for c in recovery]
    assert all(c["actor"] == RECOVERY for c in listed)

    # And the next transaction works on top.
    with repo.transaction(branch="feat", actor="after") as tx:
        tx.upsert("airlines", T(carrier=["Z1"], name=["z"]))
        tx.upsert("airports", T(faa=["Z1"], name=["z"]))
        tx.upsert("planes", T(tailnum=["Z1"], seats=[1]))
    after = state(repo, "feat")
    expected = PRE_FEAT if crash_at in ROLLED_BACK else POST_FEAT
    for table, extra in (("airlines", {"carrier": "Z1", "name": "z"}), ("airports", {"faa": "Z1", "name": "z"}),
                         ("planes", {"tailnum": "Z1", "seats": 1})):
        key = next(iter(extra))
        assert after[table] == sorted(expected[table] + [extra], key=lambda r: r[key])
    owned_latest_matches(repo, "feat")
    for table in ("airlines", "airports", "planes"):
        ds = lance.dataset(repo.dataset_path(repo.table_version(table, "feat")))
        assert len(ds.branches.list()) == 1  # exactly one fork per table for feat


@pytest.mark.parametrize("crash_at", ["after_write_1", "after_commit_object"])
def test_kill_during_create_table_on_main(crash_repo, crash_at):
    datasets_before = sorted(p.name for p in (Path(crash_repo.uri) / "tables").iterdir())
    proc = run_writer(crash_repo, "main", "create", crash_at)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    ulid = proc.stdout.split()[0]
    repo = trimerge.Repository.open(crash_repo.uri)
    if crash_at == "after_write_1":
        assert repo.tables("main") == ["airlines", "airports", "planes"]
        assert sorted(p.name for p in (Path(repo.uri) / "tables").iterdir()) == datasets_before
        assert repo.log("main", actor=RECOVERY)[0].metadata["recovery.action"] == "rolled_back"
    else:
        assert repo.tables("main") == ["airlines", "airports", "fleet", "planes"]
        assert repo.read("fleet").num_rows == 2
        assert [c.ulid for c in repo.log("main")].count(ulid) == 1
        assert "NEW" in {r["carrier"] for r in repo.read("airlines").to_pylist()}
    repo.create_table("fleet2", T(id=[1]), primary_key="id")
    assert repo.read("fleet2").num_rows == 1


@pytest.mark.parametrize("crash_at", ["after_write_1", "after_write_2", "before_publish"])
def test_kill_during_schema_change(crash_repo, crash_at):
    proc = run_writer(crash_repo, "feat", "schema", crash_at)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert (Path(crash_repo.uri) / "_trimerge" / "locks" / "__schema_apply_lock__.lock").exists()
    repo = trimerge.Repository.open(crash_repo.uri, lock_timeout=5)
    assert live_locks(repo) == []
    planes = repo.read("planes", ref="feat")
    if crash_at == "before_publish":
        assert planes.column_names == ["tailnum", "seats", "year"]
        assert {r["tailnum"]: r["year"] for r in planes.to_pylist()} == {"N1": 1999, "N2": None}
    else:
        assert planes.column_names == ["tailnum", "seats"]
        assert state(repo, "feat") == PRE_FEAT
    owned_latest_matches(repo, "feat")
    # Schema changes work again, on this branch and on main.
    repo.add_columns("airports", pa.field("alt", pa.int64()), branch="feat")
    repo.add_columns("planes", pa.field("model", pa.string()), branch="main")
    assert repo.read("planes").column_names == ["tailnum", "seats", "model"]


def test_read_only_open_does_not_repair(crash_repo):
    proc = run_writer(crash_repo, "feat", "three-tables", "after_write_2")
    assert proc.returncode == -signal.SIGKILL
    ro = trimerge.Repository.open(crash_repo.uri, read_only=True)
    assert state(ro, "feat") == PRE_FEAT
    assert len(meta_files(ro, "intents")) == 1
    assert ro.log("feat", actor=RECOVERY) == []
    rw = trimerge.Repository.open(crash_repo.uri)
    assert meta_files(rw, "intents") == []
    assert len(rw.log("feat", actor=RECOVERY)) == 1


def test_lance_head_moved_behind_our_back_is_healed_by_the_next_write(crash_repo):
    """Even without a sidecar, a stray Lance version on an owned branch never leaks into a commit."""
    tv = crash_repo.table_version("airlines", "feat")
    ds = tbl.open_version(crash_repo.dataset_path(tv), tv.lance_branch, None)
    lance.write_dataset(pa.table({"carrier": ["ROGUE"], "name": ["x"]}, schema=ds.schema), ds, mode="append")
    assert "ROGUE" in {r["carrier"] for r in tbl.open_version(crash_repo.dataset_path(tv), tv.lance_branch,
                                                                   None).to_table().to_pylist()}
    assert state(crash_repo, "feat") == PRE_FEAT
    crash_repo.upsert("airlines", T(carrier=["OK"], name=["fine"]), branch="feat")
    assert {r["carrier"] for r in crash_repo.read("airlines", ref="feat").to_pylist()} == {"AA", "UA", "OK"}


def test_writes_after_a_crash_repair_on_demand(crash_repo):
    """A repository object opened before the crash repairs it when its next write meets the dead lock."""
    early = trimerge.Repository.open(crash_repo.uri)
    proc = run_writer(crash_repo, "feat", "three-tables", "after_write_2")
    assert proc.returncode == -signal.SIGKILL
    early.upsert("planes", T(tailnum=["N9"], seats=[9]), branch="feat")
    got = state(early, "feat")
    assert got["airports"] == PRE_FEAT["airports"]
    assert got["airlines"] == PRE_FEAT["airlines"]
    assert {r["tailnum"] for r in got["planes"]} == {"N1", "N2", "N9"}
    assert len(early.log("feat", actor=RECOVERY)) == 1


def test_cli_lists_recovery_commits_via_console_script(crash_repo, run_trimerge):
    proc = run_writer(crash_repo, "feat", "three-tables", "before_publish")
    assert proc.returncode == -signal.SIGKILL
    res = run_trimerge("commit", "list", "--filter", f"actor={RECOVERY}", "--json", "-C", crash_repo.uri)
    assert res.exit_code == 0, res.stderr
    listed = json.loads(res.stdout)
    assert len(listed) == 1 and listed[0]["actor"] == RECOVERY
    assert listed[0]["metadata"]["recovery.action"] == "completed"


# ---------------------------------------------------------------------------------------------- damaged state

@pytest.mark.parametrize("content", [b"\x00garbage{{{", b"", b"[]", b"{}", b'{"branch": "feat"}',
                                     b'{"branch": "nope", "lock_token": "t", "ulid": "u"}'])
def test_damaged_sidecar_is_quarantined(crash_repo, content):
    intents = Path(crash_repo.uri) / "_trimerge" / "intents"
    intents.mkdir(exist_ok=True)
    (intents / "x.json").write_bytes(content)
    before = state(crash_repo, "feat")
    repo = trimerge.Repository.open(crash_repo.uri)
    assert not (intents / "x.json").exists()
    quarantined = list((Path(repo.uri) / "_trimerge" / "quarantine").iterdir())
    assert len(quarantined) == 1 and quarantined[0].name.startswith("x.json")
    assert quarantined[0].read_bytes() == content
    assert repo.last_recovery.quarantined == ["intents/x.json"]
    assert state(repo, "feat") == before
    repo.upsert("airports", T(faa=["EWR"], name=["Newark"]), branch="feat")
    assert len(state(repo, "feat")["airports"]) == 3
    repo.cleanup()


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _write_lock(repo, branch, **fields):
    doc = {"token": "01STALE", "pid": _dead_pid(), "host": HOSTNAME, "acquired_at": time.time(),
           "purpose": "test"}
    doc.update(fields)
    lock = Path(repo.uri) / "_trimerge" / "locks" / f"{branch}.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    lock.write_text(json.dumps(doc))
    return lock


def test_stale_lock_of_a_dead_pid_does_not_block_after_open(crash_repo):
    lock = _write_lock(crash_repo, "feat")
    repo = trimerge.Repository.open(crash_repo.uri, lock_timeout=1)
    assert live_locks(repo) == []
    repo.upsert("airports", T(faa=["EWR"], name=["Newark"]), branch="feat")
    assert lock_taken_or_free(lock)


def test_stale_lock_of_a_dead_pid_is_broken_by_the_next_writer(crash_repo):
    repo = trimerge.Repository.open(crash_repo.uri, lock_timeout=5)
    lock = _write_lock(crash_repo, "feat")
    t0 = time.monotonic()
    repo.upsert("airports", T(faa=["EWR"], name=["Newark"]), branch="feat")
    assert time.monotonic() - t0 < 5
    assert lock_taken_or_free(lock)


def test_damaged_lock_file_is_an_error_until_removed(crash_repo):
    """A lease is written whole, so an unparsable one is damage, not a dead holder (issue 29)."""
    lock = Path(crash_repo.uri) / "_trimerge" / "locks" / "feat.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    lock.write_bytes(b'{"tok')
    repo = trimerge.Repository.open(crash_repo.uri, lock_timeout=5)
    with pytest.raises(CorruptRepositoryError, match="feat.lock is damaged"):
        repo.upsert("airports", T(faa=["EWR"], name=["Newark"]), branch="feat")
    lock.unlink()
    repo.upsert("airports", T(faa=["EWR"], name=["Newark"]), branch="feat")
    assert lock_taken_or_free(lock)


def test_live_lock_is_respected(crash_repo):
    lock = _write_lock(crash_repo, "feat", pid=os.getpid())  # alive: this very process
    repo = trimerge.Repository.open(crash_repo.uri, lock_timeout=0.3)
    assert lock.exists()
    with pytest.raises(ConcurrentWriteError) as exc:
        repo.upsert("airports", T(faa=["EWR"], name=["Newark"]), branch="feat")
    assert exc.value.retryable
    assert exc.value.exit_code == 3
    # Other branches are not blocked.
    repo.upsert("airports", T(faa=["EWR"], name=["Newark"]), branch="main")
    lock.unlink()
    repo.upsert("airports", T(faa=["EWR"], name=["Newark"]), branch="feat")


def test_lock_from_another_host_expires_with_its_lease(crash_repo):
    lock = _write_lock(crash_repo, "feat", host="elsewhere.invalid", pid=1, acquired_at=time.time() - 3600)
    repo = trimerge.Repository.open(crash_repo.uri, lock_timeout=2)
    repo.upsert("airports", T(faa=["EWR"], name=["Newark"]), branch="feat")
    assert lock_taken_or_free(lock)
    fresh = _write_lock(crash_repo, "feat", host="elsewhere.invalid", pid=1, acquired_at=time.time())
    repo = trimerge.Repository.open(crash_repo.uri, lock_timeout=0.3)
    assert fresh.exists()
    with pytest.raises(ConcurrentWriteError):
        repo.upsert("airports", T(faa=["EWR"], name=["Newark"]), branch="feat")


# ------------------------------------------------------------------------------------------ virtual bases
def _criss_cross(path: Path) -> trimerge.Repository:
    """main and feature each merged the other's first change: two merge bases that disagree on t."""
    from trimerge.merge import merge

    repo = trimerge.Repository.init(path, actor="setup")
    repo.create_table("t", pa.table({"id": [1, 2, 3], "v": ["a", "b", "c"]}), ["id"])
    repo.branches.create("feature", from_ref="main")
    a1 = repo.upsert("t", pa.table({"id": [1], "v": ["main"]}), branch="main")
    b1 = repo.upsert("t", pa.table({"id": [2], "v": ["feature"]}), branch="feature")
    merge(b1.id, "main", repo=repo)
    merge(a1.id, "feature", repo=repo)
    repo.upsert("t", pa.table({"id": [3], "v": ["later"]}), branch="feature")
    assert len(repo.merge_bases("feature", "main")) == 2
    return repo


MERGER = r"""
import sys
import trimerge
from trimerge.merge import merge
merge("feature", "main", repo=trimerge.Repository.open(sys.argv[1]))
"""


@pytest.mark.parametrize("crash_at", ["before_fork", "after_write_1"])
def test_kill_while_building_a_virtual_base_drops_its_forks_on_the_next_open(tmp_path, crash_at):
    repo = _criss_cross(tmp_path / "repo")
    forks = all_lance_branches(repo)
    tip = repo.resolve("main").id
    proc = run_python(MERGER, repo.uri, env={"TRIMERGE_CRASH_AT": crash_at})
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert repo.docs.list("intents")  # the scratch's intent, left by the killed merge

    reopened = trimerge.Repository.open(repo.uri)  # read-write: recovers
    assert not reopened.docs.list("intents")
    assert all_lance_branches(reopened) == forks  # the virtual base's forks are gone
    assert reopened.resolve("main").id == tip  # nothing was published, no recovery note on any branch
    assert not reopened.docs.list("quarantine")
    from trimerge.merge import merge

    assert any("__trimerge__%2Fscratch%2F" in key for key in reopened.docs.list("locks"))  # the dead scratch's lease
    assert reopened.gc(retention="now").stale_leases_removed == 1
    assert not any("__trimerge__%2Fscratch%2F" in key for key in reopened.docs.list("locks"))
    result = merge("feature", "main", repo=reopened)
    assert result.virtual_base and not result.conflicts
    assert {r["id"]: r["v"] for r in reopened.read("t", "main").to_pylist()} == {1: "main", 2: "feature", 3: "later"}


def test_gc_leaves_the_lease_of_a_live_scratch_alone(tmp_path):
    from trimerge.lineage.scratch import ScratchTransaction

    repo = _criss_cross(tmp_path / "repo")
    tip = repo.resolve("main")
    scratch = ScratchTransaction(repo, tip.tables, tip, "test")
    scratch.begin()
    try:
        assert repo.gc(retention="now").stale_leases_removed == 0
        assert any("__trimerge__%2Fscratch%2F" in key for key in repo.docs.list("locks"))
    finally:
        scratch.close()
    assert not any("__trimerge__%2Fscratch%2F" in key for key in repo.docs.list("locks"))
