"""Multi-table transactions: one commit, all-or-nothing, aborts leave Lance consistent."""

from __future__ import annotations

import shutil
import tempfile
import threading
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import trimerge
from trimerge.lineage.tables import conversion as tbl
from trimerge.lineage.errors import InvalidOperationError, PrimaryKeyError, SchemaMismatchError, TableNotFoundError

from conftest import AIRLINES, T, all_lance_branches, as_map, lance_branches, rows


class Boom(Exception):
    pass


def latest_matches_tip(repo: trimerge.Repository, ref: str) -> None:
    """Every Lance branch the branch ``ref`` owns: its latest version holds exactly the committed data
    (tables it has not written yet are shared with their source and not its business)."""
    commit = repo.resolve(ref)
    owner = repo.branches.get(ref).id
    for name, tv in commit.tables.items():
        if tv.owner != owner:
            continue
        path = repo.dataset_path(tv)
        latest = tbl.open_version(path, tv.lance_branch, None)
        committed = tbl.open_version(path, tv.lance_branch, tv.version)
        assert latest.version >= tv.version, name
        assert rows(latest.to_table(), list(tv.primary_key)) == rows(committed.to_table(), list(tv.primary_key)), name
        assert latest.schema == committed.schema, name


def snapshot(repo, ref="main"):
    c = repo.resolve(ref)
    return c.id, {name: rows(repo.read(name, ref=c.id), list(tv.primary_key)) for name, tv in c.tables.items()}


# ---------------------------------------------------------------------------------------------- basics

def test_multi_table_transaction_is_one_commit(seeded):
    n = len(seeded.log())
    seeded.branches.create("fix-names", from_ref="main")
    with seeded.transaction(branch="fix-names", actor="alice", message="fix names") as tx:
        tx.upsert("airlines", T(carrier=["AA"], name=["American Airlines"]))
        tx.delete("airports", "faa = 'XYZ'")
        tx.create_table("planes", T(tailnum=["N1", "N2"], seats=[100, 200]), primary_key="tailnum")
        assert tx.tables() == ["airlines", "airports", "planes"]
        assert tx.read("airports").num_rows == 2
        assert tx.read("planes").num_rows == 2
        # Not visible to anyone else yet.
        assert seeded.resolve("fix-names") == seeded.resolve("main")
    c = tx.commit
    assert c.actor == "alice" and c.message == "fix names" and c.branch == "fix-names"
    assert seeded.log("fix-names")[0] == c
    assert len(seeded.log("fix-names")) == n + 1
    assert len(seeded.log("main")) == n
    assert seeded.entity("airlines", "AA", ref="fix-names")["name"] == "American Airlines"
    assert seeded.entity("airports", "XYZ", ref="fix-names") is None
    assert seeded.tables(ref="fix-names") == ["airlines", "airports", "planes"]
    assert seeded.tables(ref="main") == ["airlines", "airports"]
    assert seeded.entity("airports", "XYZ", ref="main") is not None


def test_default_message_lists_operations(seeded):
    with seeded.transaction() as tx:
        tx.upsert("airlines", T(carrier=["ZZ"], name=["z"]))
        tx.delete("airports", "faa = 'XYZ'")
    assert "airlines" in tx.commit.message and "airports" in tx.commit.message


def test_several_operations_on_one_table(seeded):
    with seeded.transaction() as tx:
        tx.append("airlines", T(carrier=["B6"], name=["JetBlue"]))
        tx.upsert("airlines", T(carrier=["B6"], name=["JetBlue Airways"]))
        tx.delete("airlines", "carrier = 'AA'")
        tx.add_columns("airlines", pa.field("n", pa.int64()))
        tx.upsert("airlines", T(carrier=["UA"], name=["United"], n=[1]))
    got = as_map(seeded.read("airlines"), "carrier", "name")
    assert got == {"UA": "United", "DL": "Delta", "B6": "JetBlue Airways"}
    assert seeded.entity("airlines", "UA")["n"] == 1
    assert len(seeded.log()) == 4


def test_empty_transaction_publishes_nothing(seeded):
    n = len(seeded.log())
    with seeded.transaction() as tx:
        pass
    assert tx.commit is None
    assert len(seeded.log()) == n
    # The branch is free again.
    seeded.upsert("airlines", T(carrier=["ZZ"], name=["z"]))


def test_transaction_cannot_be_used_after_exit(seeded):
    with seeded.transaction() as tx:
        tx.upsert("airlines", T(carrier=["ZZ"], name=["z"]))
    with pytest.raises(InvalidOperationError):
        tx.upsert("airlines", T(carrier=["ZY"], name=["y"]))
    with pytest.raises(InvalidOperationError):
        seeded.transaction().upsert("airlines", T(carrier=["ZY"], name=["y"]))  # never entered


def test_transaction_writes_to_the_current_branch(seeded):
    seeded.branches.create("dev")
    seeded.switch("dev")
    assert seeded.current_branch == "dev"
    with seeded.transaction() as tx:
        tx.upsert("airlines", T(carrier=["ZZ"], name=["z"]))
    assert tx.commit.branch == "dev"
    assert seeded.read("airlines").num_rows == 4
    assert seeded.read("airlines", ref="main").num_rows == 3
    assert trimerge.Repository.open(seeded.uri).current_branch == "dev"


# ---------------------------------------------------------------------------------------------- aborts

@pytest.mark.parametrize("branch", ["main", "fix"])
@pytest.mark.parametrize("exc_type", [Boom, KeyboardInterrupt])
def test_exception_in_with_block_publishes_nothing(seeded, branch, exc_type):
    if branch != "main":
        seeded.branches.create(branch, from_ref="main")
    before_id, before = snapshot(seeded, branch)
    forks_before = all_lance_branches(seeded)
    datasets_before = sorted(p.name for p in (Path(seeded.uri) / "tables").iterdir())
    with pytest.raises(exc_type):
        with seeded.transaction(branch=branch, actor="alice") as tx:
            tx.upsert("airlines", T(carrier=["AA", "ZZ"], name=["changed", "new"]))
            tx.delete("airports", "true")
            tx.create_table("planes", T(tailnum=["N1"]), primary_key="tailnum")
            tx.add_columns("airlines", pa.field("extra", pa.int64()))
            raise exc_type()
    assert tx.commit is None
    assert snapshot(seeded, branch) == (before_id, before)
    assert seeded.tables(ref=branch) == ["airlines", "airports"]
    # Lance: latest versions restored, forks and datasets the transaction created are gone.
    latest_matches_tip(seeded, branch)
    assert all_lance_branches(seeded) == forks_before
    assert sorted(p.name for p in (Path(seeded.uri) / "tables").iterdir()) == datasets_before
    assert not list((Path(seeded.uri) / "_trimerge" / "intents").glob("*.json"))
    # A fresh open sees the same and the next write works.
    again = trimerge.Repository.open(seeded.uri)
    assert snapshot(again, branch) == (before_id, before)
    c = again.upsert("airlines", T(carrier=["ZY"], name=["y"]), branch=branch)
    assert c.parents == (before_id,)
    assert as_map(again.read("airlines", ref=branch), "carrier", "name") == {
        **dict(zip(AIRLINES["carrier"], AIRLINES["name"])), "ZY": "y"}
    assert again.read("airlines", ref=branch).column_names == ["carrier", "name"]
    if branch != "main":
        assert len(lance_branches(again, "airlines", branch)) == 1
        assert lance_branches(again, "airports", branch) == []


def test_typed_error_midway_aborts_the_whole_transaction(seeded):
    before_id, before = snapshot(seeded)
    with pytest.raises(PrimaryKeyError):
        with seeded.transaction() as tx:
            tx.upsert("airports", T(faa=["EWR"], name=["Newark"]))
            tx.append("airlines", T(carrier=["AA"], name=["dup"]))  # existing key
    assert snapshot(seeded) == (before_id, before)
    with pytest.raises(SchemaMismatchError):
        with seeded.transaction() as tx:
            tx.delete("airports", "faa = 'JFK'")
            tx.upsert("airlines", T(carrier=["AA"]))
    with pytest.raises(TableNotFoundError):
        with seeded.transaction() as tx:
            tx.delete("airports", "faa = 'JFK'")
            tx.upsert("nope", T(carrier=["AA"]))
    assert snapshot(seeded) == (before_id, before)
    latest_matches_tip(seeded, "main")
    seeded.delete("airports", "faa = 'JFK'")
    assert seeded.read("airports").num_rows == 2


def test_abort_after_repeated_writes_to_an_owned_fork(seeded):
    seeded.branches.create("b", from_ref="main")
    seeded.upsert("airlines", T(carrier=["B1"], name=["b"]), branch="b")
    assert len(lance_branches(seeded, "airlines", "b")) == 1
    before_id, before = snapshot(seeded, "b")
    with pytest.raises(Boom):
        with seeded.transaction(branch="b") as tx:
            for i in range(3):
                tx.upsert("airlines", T(carrier=[f"X{i}"], name=["x"]))
            tx.overwrite("airlines", T(carrier=["only"], name=["one"]))
            raise Boom
    assert snapshot(seeded, "b") == (before_id, before)
    latest_matches_tip(seeded, "b")
    assert len(lance_branches(seeded, "airlines", "b")) == 1
    seeded.upsert("airlines", T(carrier=["B2"], name=["b"]), branch="b")
    assert sorted(as_map(seeded.read("airlines", ref="b"), "carrier", "name")) == ["AA", "B1", "B2", "DL", "UA"]


def test_readers_do_not_see_uncommitted_writes(seeded):
    reader = trimerge.Repository.open(seeded.uri, read_only=True)
    before_id, before = snapshot(reader)
    with seeded.transaction() as tx:
        tx.upsert("airlines", T(carrier=["ZZ"], name=["z"]))
        assert snapshot(reader) == (before_id, before)
        tx.delete("airports", "true")
        assert snapshot(reader) == (before_id, before)
        # Even raw Lance "latest" has moved, readers follow commits.
        assert snapshot(trimerge.Repository.open(seeded.uri, read_only=True)) == (before_id, before)
    after_id, after = snapshot(reader)
    assert after_id == tx.commit.id
    assert len(after["airlines"]) == 4 and after["airports"] == []


def test_concurrent_reader_never_sees_half_a_commit(seeded):
    """A writer thread keeps both tables' counters equal in each commit; a reader checks every tip it sees."""
    seeded.create_table("a", T(k=[0], n=[0]), primary_key="k")
    seeded.create_table("b", T(k=[0], n=[0]), primary_key="k")
    reader = trimerge.Repository.open(seeded.uri, read_only=True)
    stop = threading.Event()
    errors: list[BaseException] = []
    seen: set[int] = set()

    def read_loop():
        try:
            while not stop.is_set():
                c = reader.resolve("main")
                a = reader.read("a", ref=c.id).to_pylist()
                b = reader.read("b", ref=c.id).to_pylist()
                assert a == b, (c.id, a, b)
                seen.add(a[0]["n"])
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    t = threading.Thread(target=read_loop)
    t.start()
    try:
        for i in range(1, 13):
            with pytest.raises(Boom) if i % 4 == 0 else _null():
                with seeded.transaction(message=f"step {i}") as tx:
                    tx.upsert("a", T(k=[0], n=[i]))
                    tx.upsert("b", T(k=[0], n=[i]))
                    if i % 4 == 0:
                        raise Boom
    finally:
        stop.set()
        t.join(30)
    assert not errors, errors[0]
    assert seen
    assert all(n % 4 for n in seen if n)  # aborted steps never became visible
    assert seeded.read("a").to_pylist() == seeded.read("b").to_pylist() == [{"k": 0, "n": 11}]


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


# ---------------------------------------------------------------------------------------------- model-based

TABLES = ("t1", "t2", "t3")
BRANCHES = ("main", "b")

_rows = st.dictionaries(st.integers(0, 5), st.integers(0, 3), min_size=1, max_size=3)
_op = st.one_of(
    st.tuples(st.just("upsert"), st.sampled_from(TABLES), _rows),
    st.tuples(st.just("append"), st.sampled_from(TABLES), _rows),  # fails (PrimaryKeyError) on an existing key
    st.tuples(st.just("overwrite"), st.sampled_from(TABLES), _rows),
    st.tuples(st.just("delete"), st.sampled_from(TABLES), st.integers(0, 5)),
)
_tx = st.tuples(
    st.sampled_from(BRANCHES),
    st.lists(_op, min_size=1, max_size=3),
    st.one_of(st.none(), st.integers(0, 3)),  # raise before this op index (>= len: after all ops)
)


def _arrow(d: dict) -> pa.Table:
    return pa.table({"k": pa.array(list(d), pa.int64()), "v": pa.array(list(d.values()), pa.int64())})


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(txs=st.lists(_tx, min_size=1, max_size=6))
def test_every_commit_is_fully_visible_or_absent(txs):
    """Random transactions over 3 tables and 2 branches, some failing midway: every commit in the log
    holds exactly the model's state after the transactions that succeeded, nothing of the others."""
    tmp = Path(tempfile.mkdtemp(prefix="trimerge-model-"))
    try:
        repo = trimerge.Repository.init(tmp / "repo")
        with repo.transaction(message="setup") as tx:
            for name in TABLES:
                tx.create_table(name, _arrow({0: 0}), primary_key="k")
        repo.branches.create("b", from_ref="main")
        model = {br: {name: {0: 0} for name in TABLES} for br in BRANCHES}
        expected: dict[str, dict] = {repo.resolve("main").id: {name: {0: 0} for name in TABLES}}
        reader = trimerge.Repository.open(repo.uri, read_only=True)
        n_ok = 0

        for branch, ops, fail_at in txs:
            tip = repo.resolve(branch).id
            state = {name: dict(m) for name, m in model[branch].items()}
            boom = fail_at is not None and fail_at <= len(ops)
            expect_failure = None
            try:
                with repo.transaction(branch=branch) as tx:
                    for i, (kind, table, arg) in enumerate(ops):
                        if boom and i == fail_at:
                            expect_failure = Boom
                            raise Boom
                        if kind == "upsert":
                            tx.upsert(table, _arrow(arg))
                            state[table].update(arg)
                        elif kind == "append":
                            if set(arg) & set(state[table]):
                                expect_failure = PrimaryKeyError
                            tx.append(table, _arrow(arg))
                            state[table].update(arg)
                        elif kind == "overwrite":
                            tx.overwrite(table, _arrow(arg))
                            state[table] = dict(arg)
                        else:
                            tx.delete(table, f"k = {arg}")
                            state[table].pop(arg, None)
                        assert tx.read(table).num_rows == len(state[table])
                    # Mid-transaction, another reader still sees the old tip completely.
                    assert reader.resolve(branch).id == tip
                    if boom:
                        expect_failure = Boom
                        raise Boom
            except (Boom, PrimaryKeyError) as exc:
                assert expect_failure is not None and isinstance(exc, expect_failure), (exc, expect_failure)
                assert repo.resolve(branch).id == tip
                latest_matches_tip(repo, branch)
            else:
                assert expect_failure is None
                assert tx.commit.parents == (tip,)
                model[branch] = state
                expected[tx.commit.id] = {name: dict(m) for name, m in state.items()}
                n_ok += 1

            # Every commit of every branch holds exactly what the model says it published.
            for br in BRANCHES:
                log = repo.log(br)
                assert [c.id for c in log if c.id in expected] == [c.id for c in log[:-1]]
                for c in log[:-1]:
                    for name in TABLES:
                        got = {r["k"]: r["v"] for r in reader.read(name, ref=c.id).to_pylist()}
                        assert got == expected[c.id][name], (br, c.message, name)
        assert len(repo.all_commits()) == 2 + n_ok
        assert not list((Path(repo.uri) / "_trimerge" / "intents").glob("*.json"))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
