"""The ports (issue 43, item 2): managers run over the small Protocols of
:mod:`trimerge.lineage.ports` — here over the in-memory fakes of ``tests/fakes.py``, without a
repository on disk — and the fakes, the real stores and the facade all satisfy those Protocols."""

from __future__ import annotations

import contextvars
import os
import subprocess
import sys
import tempfile
import textwrap
from datetime import timedelta
from pathlib import Path

import pytest

from fakes import MemoryCommits, MemoryDocuments, MemoryRefs, MemoryRepository
from trimerge.lineage import ports
from trimerge.lineage.errors import (BranchNotFoundError, ConcurrentWriteError, CorruptRepositoryError,
                                     DataReclaimedError, InvalidOperationError, ProtectedBranchError,
                                     RefNotFoundError)
from trimerge.lineage.history import graph
from trimerge.lineage.history.commits import CommitStore, commit_key
from trimerge.lineage.history.names import MAIN
from trimerge.lineage.history.reflog import Reflog, list_entries
from trimerge.lineage.history.refs import Branch, RefStore, now
from trimerge.lineage.history.reset import reset
from trimerge.lineage.history.protection import Protection, refuse
from trimerge.lineage.history.retention import DeletionLog, ReclaimedCommits
from trimerge.lineage.safety.temporaries import JOURNAL, OWNER_SUFFIX, TemporaryBranch, sweep
from trimerge.lineage.storage.backends import MemoryBackend
from trimerge.lineage.storage.documents import Documents

ROOT = Path(__file__).resolve().parent.parent


# ------------------------------------------------------------------ the fakes are the ports
def test_fakes_and_real_stores_satisfy_the_ports_at_run_time():
    real_docs = Documents(MemoryBackend(), "mem")
    for docs in (MemoryDocuments(), real_docs):
        assert isinstance(docs, ports.DocumentStore)
    for commits in (MemoryCommits(), CommitStore(MemoryDocuments()), CommitStore(real_docs)):
        assert isinstance(commits, ports.CommitStore)
        assert isinstance(commits, graph.CommitGraph)
    for refs in (MemoryRefs(), RefStore(real_docs)):
        assert isinstance(refs, ports.RefStore)
        assert isinstance(refs.reflog, ports.ReflogStore)
    assert not isinstance(object(), ports.DocumentStore)
    assert not isinstance(graph.DictGraph({"a": ()}), ports.CommitStore)  # a graph only, not a store


CONFORMANCE = '''
from __future__ import annotations

from fakes import MemoryRepository
from trimerge.lineage import hosts, ports
from trimerge.lineage.history.commits import CommitStore
from trimerge.lineage.history.reflog import Reflog
from trimerge.lineage.history.refs import RefStore
from trimerge.lineage.repository import Repository
from trimerge.lineage.storage.documents import Documents


def fakes(m: MemoryRepository) -> None:
    docs: ports.DocumentStore = m.docs
    commits: ports.CommitStore = m.commits
    refs: ports.RefStore = m.refs
    leases: ports.Leases = m.leases
    reflog: ports.ReflogHost = m
    protection: ports.ProtectionHost = m
    temporaries: ports.TemporariesHost = m
    reset: ports.ResetHost = m
    print(docs, commits, refs, leases, reflog, protection, temporaries, reset)


def real(repo: Repository, docs: Documents) -> None:
    stores: tuple[ports.DocumentStore, ports.CommitStore, ports.RefStore, ports.ReflogStore] = (
        docs, CommitStore(docs), RefStore(docs), Reflog(docs))
    facade: tuple[ports.ReflogHost, ports.ProtectionHost, ports.TemporariesHost, ports.ResetHost,
                  ports.BranchesHost, ports.RestoreHost, ports.Leases] = (repo, repo, repo, repo, repo, repo, repo)
    above: tuple[hosts.RecoveryHost, hosts.HistoryReader, hosts.ChecksHost, hosts.SqlHost, hosts.TableLocations,
                 hosts.TransactionHost, hosts.ServedHost] = (repo, repo, repo, repo, repo, repo, repo)
    print(stores, facade, above)
'''


def test_fakes_and_the_facade_satisfy_the_ports_for_mypy(tmp_path):
    """Checked statically too: mypy accepts the fakes and the Repository wherever a port is asked for."""
    pytest.importorskip("mypy")
    sys.path.insert(0, str(ROOT / "tests"))
    from test_typing import untyped_pyarrow

    (tmp_path / "conformance.py").write_text(textwrap.dedent(CONFORMANCE))
    stubs = untyped_pyarrow(Path(tempfile.gettempdir()) / "trimerge-untyped-pyarrow")
    env = {**os.environ, "MYPYPATH": os.pathsep.join([str(stubs), str(ROOT / "tests")])}
    proc = subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
                           "--cache-dir", str(Path(tempfile.gettempdir()) / "trimerge-mypy-cache-ports"),
                           str(tmp_path / "conformance.py")], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600)
    mine = [line for line in proc.stdout.splitlines() if "conformance.py:" in line or "fakes.py:" in line]
    assert not mine, "\n".join(mine)
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr


# ------------------------------------------------------------------ the commit store and its graph
@pytest.mark.parametrize("make", [MemoryCommits, lambda: CommitStore(MemoryDocuments())], ids=["fake", "real"])
def test_commit_store_and_graph_algorithms(make):
    store = make()

    def commit(message, *parents):
        c = store.build(parents=parents, actor="a", message=message, metadata={"k": 1}, branch=MAIN, tables={},
                        created_at=now())
        store.put(c)
        return c.id

    root = commit("root")
    a, b = commit("a", root), commit("b", root)
    m = commit("merge", a, b)
    assert store.get(m).parents == (a, b) and store.get(m).generation == 3
    assert store.get(m).metadata == {"k": "1"}
    assert graph.merge_base(store, a, b) == root
    assert graph.merge_bases(store, m, b) == [b]
    assert graph.is_ancestor(store, root, m) and not graph.is_ancestor(store, a, b)
    assert list(graph.iter_history(store, [m]))[0] == m and set(graph.iter_history(store, [m])) == {root, a, b, m}
    assert store.exists(a) and not store.exists("0" * 64)
    assert sorted(store.all_ids()) == sorted([root, a, b, m])
    assert store.ids_with_prefix(a[:6]) == [a]
    assert len(graph.shortest_unique_prefix(a, store.ids_with_prefix)) >= 7
    with pytest.raises(RefNotFoundError):
        store.get("f" * 64)


def test_the_real_commit_store_refuses_an_edited_commit_document():
    docs = MemoryDocuments()
    store = CommitStore(docs)
    c = store.build(parents=(), actor="a", message="root", metadata={}, branch=MAIN, tables={}, created_at=now())
    store.put(c)
    doc = docs.get(commit_key(c.id))
    docs.docs[commit_key(c.id)] = ({**doc, "message": "edited"}, 0)
    with pytest.raises(CorruptRepositoryError, match="does not match"):
        CommitStore(docs).get(c.id)  # a fresh store: nothing cached


# ------------------------------------------------------------------ the reflog
def test_reflog_lists_every_move_and_drops_moves_that_never_happened():
    repo = MemoryRepository.with_history(["root", "one", "two"])
    tips = repo.commits.all_ids()
    main = repo.refs.branch(MAIN)
    entries = list_entries(repo, MAIN, None)
    assert [e.reason for e in entries] == ["commit: two", "commit: one", "branch: created"]
    assert entries[0].new == main.commit_id and entries[-1].old is None
    assert repo.refs.reflog.nth(MAIN, 0, main.commit_id) == main.commit_id
    assert repo.refs.reflog.nth(MAIN, 2, main.commit_id) == entries[-1].new
    assert set(e.new for e in entries) == set(tips)

    # A move whose process died after its entry and before the swap: kept in raw, not in the log.
    repo.refs.reflog.record(MAIN, main.commit_id, "0" * 64, "ghost", "reset: never happened")
    assert len(repo.refs.reflog.raw(MAIN)) == 4
    assert [e.actor for e in list_entries(repo, MAIN, None)] == ["tester"] * 3
    assert len(list_entries(repo, None, 2)) == 2
    with pytest.raises(BranchNotFoundError):
        list_entries(repo, "nope", None)
    with pytest.raises(InvalidOperationError):
        list_entries(repo, MAIN, -1)
    with pytest.raises(RefNotFoundError):
        repo.refs.reflog.nth(MAIN, 9, main.commit_id)
    assert repo.refs.reflog.expire(timedelta(0), now()) == 4
    assert list_entries(repo, MAIN, None) == [] and repo.refs.reflog.refs() == []


def test_reflog_stores_entries_as_documents_under_logs():
    docs = MemoryDocuments()
    log = Reflog(docs)
    key = log.record("feature/x", None, "a" * 64, "alice", "branch: created")
    assert key.startswith("logs/feature%2Fx/") and docs.get(key)["actor"] == "alice"
    assert log.refs() == ["feature/x"]
    log.discard(key)
    assert log.raw("feature/x") == []
    docs.damage("logs/main/01JXXXXXXXXXXXXXXXXXXXXXXX.json", b'{"ref": "main"}')
    with pytest.raises(CorruptRepositoryError):
        log.raw("main")


# ------------------------------------------------------------------ branch reset
def test_reset_moves_a_branch_and_the_reflog_undoes_it():
    repo = MemoryRepository.with_history(["root", "one", "two"])
    two = repo.refs.branch(MAIN).commit_id
    root = repo.resolve("main~2").id
    dry = reset(repo, MAIN, "main~2", dry_run=True)
    assert (dry.old, dry.new, dry.unreachable, dry.dry_run) == (two, root, 2, True)
    assert repo.refs.branch(MAIN).commit_id == two  # a dry run moves nothing

    done = reset(repo, MAIN, "main~2", actor="alice")
    assert done.moved and repo.refs.branch(MAIN).commit_id == root and repo.docs.list("locks") == ["locks/main.lock"]
    assert list_entries(repo, MAIN, 1)[0].reason == "reset: moving to main~2"
    assert reset(repo, MAIN, "main@{1}").new == two  # the reflog undoes it
    assert repo.refs.branch(MAIN).commit_id == two

    Protection(repo).change(MAIN, True)
    with pytest.raises(ProtectedBranchError):
        reset(repo, MAIN, "main~1")
    Protection(repo).change(MAIN, False)
    repo.reclaimed.write({root: "reclaimed"}, None)  # gc condemned the target meanwhile: the move is undone
    with pytest.raises(DataReclaimedError):
        reset(repo, MAIN, root[:10])
    assert repo.refs.branch(MAIN).commit_id == two
    with pytest.raises(BranchNotFoundError):
        reset(repo, "nope", "main")


# ------------------------------------------------------------------ branch protection
def test_protection_records_changes_and_refuses_direct_writes():
    repo = MemoryRepository.with_history()
    repo.refs.create_branch(Branch("dev", repo.refs.branch(MAIN).commit_id, "x", now(), MAIN))
    protection = Protection(repo)
    assert protection.names() == set()
    refuse(repo, "dev", "a direct write")  # not protected: nothing happens
    assert protection.change("dev", True, "alice").protected
    with pytest.raises(ProtectedBranchError, match="dev"):
        refuse(repo, "dev", "a direct write")
    assert protection.is_protected("dev") and not protection.is_protected(MAIN)
    assert [b.protected for b in protection.marked(repo.branches.list())] == [True, False]  # dev, main
    assert protection.change("dev", True).protected  # already: nothing recorded
    protection.change("dev", False)
    assert [(h.action, h.branch, h.actor) for h in protection.history()] == [
        ("protect", "dev", "alice"), ("unprotect", "dev", "tester")]
    with pytest.raises(BranchNotFoundError):
        protection.change("nope", True)
    with pytest.raises(InvalidOperationError, match="read-only"):
        Protection(MemoryRepository.with_history(read_only=True)).change(MAIN, True)


def test_protection_retries_when_another_process_changes_it_meanwhile():
    repo = MemoryRepository.with_history()
    other = Protection(repo)
    real_create = repo.docs.create
    raced = []

    def racing_create(key, doc, **kwargs):
        if not raced:  # another process protects main between our read and our write
            raced.append(real_create(key, {"protected": {"x": {}}, "history": []}))
        return real_create(key, doc, **kwargs)

    repo.docs.create = racing_create  # type: ignore[method-assign]
    other.change(MAIN, True, "bob")
    assert other.names() == {"x", MAIN} and raced


# ------------------------------------------------------------------ temporary branches and their cleanup
def in_own_context(test):
    """Run ``test`` in a copy of the context: a temporary branch makes itself addressable there."""
    return lambda *args: contextvars.copy_context().run(test, *args)


@in_own_context
def test_temporary_branches_are_removed_only_when_their_owner_is_dead():
    repo = MemoryRepository.with_history()
    tip = repo.refs.branch(MAIN).commit_id

    done = TemporaryBranch(repo, "rebase", "rebase of dev")
    assert done.create(tip).name == done.name and repo.refs.branch(done.name) is not None
    assert len(repo.docs.list(JOURNAL)) == 1 and repo.branches.names() == [MAIN]  # hidden from listings
    done.remove()
    assert repo.refs.branch(done.name) is None and repo.docs.list(JOURNAL) == [] and repo.docs.list("locks") == []

    alive, dead, busy = (TemporaryBranch(repo, "rebase", f"rebase of {n}") for n in ("a", "b", "c"))
    for t in (alive, dead, busy):
        t.create(tip)
    assert sweep(repo) == []  # every owner lives
    repo.leases.kill(dead.name + OWNER_SUFFIX)
    repo.leases.kill(busy.name + OWNER_SUFFIX)
    repo.docs.create("intents/01J.json", {"branch": busy.name})  # an interrupted write still names it
    assert sweep(repo) == [dead.name]
    assert repo.refs.branch(dead.name) is None
    assert repo.refs.branch(alive.name) is not None and repo.refs.branch(busy.name) is not None
    assert [e for e in repo.refs.reflog.refs() if "__trimerge__" in e] == []  # temporary moves are not logged


@in_own_context
def test_a_temporary_branch_waits_for_nobody_when_its_name_is_taken():
    repo = MemoryRepository.with_history()
    t = TemporaryBranch(repo, "rebase", "rebase of x")
    repo.refs.create_branch(Branch(t.name, repo.refs.branch(MAIN).commit_id, "y", now(), None))
    with pytest.raises(ConcurrentWriteError):
        t.create(repo.refs.branch(MAIN).commit_id)


# ------------------------------------------------------------------ retention records
def test_deletion_log_and_reclaimed_commits_over_memory_documents():
    docs = MemoryDocuments()
    log = DeletionLog(docs)
    key = log.record("branch", "dev", "a" * 64, now())
    assert [(r.kind, r.name, r.key) for r in log.records()] == [("branch", "dev", key)]
    assert log.latest("branch", "dev").commit_id == "a" * 64
    log.remove(log.records()[0])
    assert log.records() == []

    reclaimed = ReclaimedCommits(docs)
    reclaimed.check(["b" * 64])  # nothing condemned
    version = reclaimed.write({"b" * 64: "run1"}, None)
    with pytest.raises(ConcurrentWriteError):
        reclaimed.check(["b" * 64])
    reclaimed.write({"b" * 64: "reclaimed"}, version)
    with pytest.raises(DataReclaimedError):
        reclaimed.check(["b" * 64, "c" * 64])
    with pytest.raises(ConcurrentWriteError):
        reclaimed.write({}, version)  # a stale version loses the swap
