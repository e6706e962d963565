"""The metadata store's contract, checked table-driven on every backend that needs no server
(the in-memory fake and the local disk; the S3 backend runs the same cases in test_s3.py)."""

from __future__ import annotations

import json
import threading
import time

import pytest

from trimerge.lineage.storage.backends import LocalBackend, MemoryBackend
from trimerge.lineage.storage.documents import NONCE, Documents
from trimerge.lineage.errors import ConcurrentWriteError, CorruptRepositoryError
from trimerge.lineage.storage.lease import Holder, Lease


@pytest.fixture(params=["memory", "local"])
def backend(request, tmp_path):
    return MemoryBackend() if request.param == "memory" else LocalBackend(tmp_path / "meta")


def check_backend_contract(b) -> None:
    """Shared by the S3 tests: the five operations and the folder operations."""
    assert b.get("a/x.json") is None
    v1 = b.create("a/x.json", b"one")
    assert v1 is not None
    assert b.create("a/x.json", b"two") is None  # create-if-absent
    got = b.get("a/x.json")
    assert got.data == b"one" and got.version == v1
    v2 = b.swap("a/x.json", b"two", v1)
    assert v2 is not None and b.get("a/x.json").data == b"two"
    assert b.swap("a/x.json", b"three", v1) is None  # stale version loses
    assert b.get("a/x.json").data == b"two"
    assert b.swap("a/missing.json", b"x", v1) is None  # swap never creates
    b.create("a/y.json", b"y")
    b.create("a/sub/z.json", b"z")
    assert b.list("a") == ["a/x.json", "a/y.json"]  # direct children only
    assert b.children("a") == ["sub", "x.json", "y.json"]
    assert b.tree_size("a") == len(b"two") + 2
    b.delete("a/y.json")
    b.delete("a/y.json")  # idempotent
    assert b.get("a/y.json") is None
    b.delete_tree("a")
    assert b.list("a") == [] and b.get("a/sub/z.json") is None


def test_backend_contract(backend):
    check_backend_contract(backend)


def test_content_versions_allow_aba_without_a_nonce():
    """Why documents carry a nonce: with content-hash versions (like S3 ETags) A→B→A looks unchanged."""
    b = MemoryBackend()
    v_a = b.create("ref", b"A")
    stale = v_a
    v_b = b.swap("ref", b"B", v_a)
    b.swap("ref", b"A", v_b)
    assert b.swap("ref", b"C", stale) is not None  # the stale writer wins: the hazard


def test_documents_defeat_aba_with_a_nonce(backend):
    docs = Documents(backend, "test")
    docs.create("ref.json", {"commit": "A"})
    stale = docs.read("ref.json")
    current = docs.read("ref.json")
    v = docs.swap("ref.json", {"commit": "B"}, current.version)
    docs.swap("ref.json", {"commit": "A"}, v)  # back to the same content
    assert docs.get("ref.json")["commit"] == "A"
    assert docs.swap("ref.json", {"commit": "C"}, stale.version) is None  # the stale writer loses
    assert docs.get("ref.json")["commit"] == "A"


def test_every_swapped_document_gets_a_fresh_nonce(backend):
    docs = Documents(backend, "test")
    v = docs.create("d.json", {"x": 1})
    n1 = docs.get("d.json")[NONCE]
    docs.swap("d.json", {"x": 1}, v)
    assert docs.get("d.json")[NONCE] != n1


def test_commits_are_written_without_nonce(backend):
    docs = Documents(backend, "test")
    docs.create("c.json", {"id": "x"}, nonce=False)
    assert docs.get("c.json") == {"id": "x"}


def test_write_reports_lost_ownership_as_retryable(backend):
    docs = Documents(backend, "test")
    v = docs.write("intent.json", {"a": 1}, None)
    docs.write("intent.json", {"a": 2}, v)
    with pytest.raises(ConcurrentWriteError) as exc:
        docs.write("intent.json", {"a": 3}, v)
    assert exc.value.retryable


def test_damaged_json_names_the_document(backend):
    backend.create("bad.json", b'{"trunc')
    docs = Documents(backend, "REPO/_trimerge")
    with pytest.raises(CorruptRepositoryError, match="REPO/_trimerge/bad.json"):
        docs.get("bad.json")
    assert docs.read("bad.json", damaged_as_none=True).doc is None


# ------------------------------------------------------------------------------------------ leases
def test_lease_is_exclusive_and_released_by_swap(backend):
    docs = Documents(backend, "test")
    a = Lease(docs, "locks/b.lock", "a")
    b = Lease(docs, "locks/b.lock", "b")
    assert a.try_acquire()
    assert not b.try_acquire()
    a.release()
    assert Holder.from_json(docs.get("locks/b.lock")).released
    assert b.try_acquire()
    assert b.holder().token == b.token


def test_release_never_frees_a_lease_taken_over_meanwhile(backend):
    docs = Documents(backend, "test")
    slow = Lease(docs, "l", "slow", seconds=0.05)
    assert slow.try_acquire()
    time.sleep(0.1)  # the slow holder's lease expires (it is "dead" to others)
    taken = []
    fast = Lease(docs, "l", "fast")
    assert fast.try_acquire(on_dead_holder=taken.append)
    assert [h.token for h in taken] == [slow.token]  # told whom it took over, while holding the lease
    with pytest.raises(ConcurrentWriteError):
        slow.renew_if_due()  # due (its lease ran out) but lost: the writer learns it must stop
    slow.held = True
    slow.release()  # a stale release: its swap names a version that is gone
    assert fast.holder().token == fast.token and not fast.holder().released


def test_released_lease_is_taken_without_the_dead_holder_callback(backend):
    docs = Documents(backend, "test")
    first = Lease(docs, "l", "first")
    first.try_acquire()
    first.release()
    called = []
    assert Lease(docs, "l", "second").try_acquire(on_dead_holder=called.append)
    assert called == []


def test_damaged_lease_is_an_error_not_a_dead_holder(backend):
    """A lease is written whole: one that does not parse was damaged, and taking it over could let
    two writers in (issue 29)."""
    backend.create("l", b"{oops")
    called = []
    with pytest.raises(CorruptRepositoryError, match="t/l is damaged.*delete that file"):
        Lease(Documents(backend, "t"), "l", "x").try_acquire(on_dead_holder=called.append)
    assert called == [] and backend.get("l").data == b"{oops"


def test_lease_renewal_extends_expiry(backend):
    docs = Documents(backend, "test")
    lease = Lease(docs, "l", "long", seconds=0.2)
    lease.try_acquire()
    before = lease.holder().expires_at
    time.sleep(0.12)
    lease.renew_if_due()
    assert lease.holder().expires_at > before
    assert lease.holder().token == lease.token


def test_acquire_times_out_with_a_retryable_error_naming_the_holder(backend):
    docs = Documents(backend, "test")
    Lease(docs, "l", "busy writer").try_acquire()
    with pytest.raises(ConcurrentWriteError, match="busy writer") as exc:
        Lease(docs, "l", "me").acquire(0.1, "branch 'x'")
    assert exc.value.exit_code == 3


def test_racing_threads_never_share_a_lease(backend):
    docs = Documents(backend, "test")
    inside, overlaps, rounds = [0], [], 40

    def worker(i: int) -> None:
        for _ in range(rounds // 4):
            lease = Lease(docs, "race", f"w{i}").acquire(10, "race")
            inside[0] += 1
            overlaps.append(inside[0])
            time.sleep(0.001)
            inside[0] -= 1
            lease.release()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(overlaps) == rounds and max(overlaps) == 1


def test_holder_json_roundtrip():
    h = Holder.new("purpose", 10)
    assert Holder.from_json(json.loads(json.dumps(h.to_json()))) == h
    assert Holder.from_json({"token": "x"}) is None
