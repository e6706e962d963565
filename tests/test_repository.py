"""Repository basics: init/open, commits, reads, the one-commit write shortcuts and typed errors."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import polars as pl
import pyarrow as pa
import pytest

import trimerge
from trimerge.lineage.commit import Commit, TableVersion, digest
from trimerge.lineage.errors import (
    AlreadyExistsError,
    CorruptRepositoryError,
    BranchNotFoundError,
    InvalidNameError,
    InvalidOperationError,
    NotFoundError,
    PrimaryKeyError,
    ReadOnlyRefError,
    RefNotFoundError,
    RepositoryNotFoundError,
    SchemaMismatchError,
    TableNotFoundError,
    TagNotFoundError,
    TrimergeError,
)

from conftest import AIRLINES, T, as_map, rows


def roots(repo):
    return [c for c in repo.all_commits() if not c.parents]


# ---------------------------------------------------------------------------------------------- init / open

def test_init_creates_one_root_commit_on_main(tmp_path):
    repo = trimerge.Repository.init(tmp_path / "r", actor="tester")
    assert repo.branches.names() == ["main"]
    root = repo.resolve("main")
    assert root.message == "Repository created"
    assert root.parents == ()
    assert root.branch == "main"
    assert root.actor == "tester"
    assert root.tables == {}
    assert root.generation == 1
    assert repo.log("main") == [root]
    assert roots(repo) == [root]
    assert repo.tables() == []
    assert repo.current_branch == "main"
    assert Path(repo.uri) == tmp_path / "r"


def test_init_twice_fails(tmp_path):
    trimerge.Repository.init(tmp_path / "r")
    with pytest.raises(AlreadyExistsError):
        trimerge.Repository.init(tmp_path / "r")


def test_init_never_writes_over_an_existing_or_half_made_repository(tmp_path):
    import os

    repo = trimerge.Repository.init(tmp_path / "r")
    repo.create_table("t", T(k=[1]), primary_key="k")
    with pytest.raises(AlreadyExistsError):
        trimerge.Repository.init(tmp_path / "r")
    os.remove(tmp_path / "r" / "_trimerge" / "repo.json")  # init died before its last step, or damage
    with pytest.raises(CorruptRepositoryError) as exc:
        trimerge.Repository.open(tmp_path / "r")
    assert "do not run init" in str(exc.value) and "repo.json" in str(exc.value)
    with pytest.raises(AlreadyExistsError) as exc:
        trimerge.Repository.init(tmp_path / "r")
    assert "_trimerge" in str(exc.value)
    assert len(list((tmp_path / "r" / "_trimerge" / "commits").rglob("*.json"))) == 2  # history untouched


def test_init_refuses_inside_another_repository(tmp_path):
    trimerge.Repository.init(tmp_path / "outer")
    for inner in ("inner", "tables/x", "a/b/c"):
        with pytest.raises(InvalidOperationError) as exc:
            trimerge.Repository.init(tmp_path / "outer" / inner)
        assert "inside the trimerge repository" in str(exc.value)
    trimerge.Repository.init(tmp_path / "beside")  # a sibling is fine


def test_open_missing_repository(tmp_path):
    with pytest.raises(RepositoryNotFoundError) as exc:
        trimerge.Repository.open(tmp_path / "nothing")
    assert isinstance(exc.value, NotFoundError)
    assert isinstance(exc.value, TrimergeError)
    (tmp_path / "empty").mkdir()
    with pytest.raises(RepositoryNotFoundError):
        trimerge.Repository.open(tmp_path / "empty")


def test_open_sees_everything_and_uri(seeded):
    again = trimerge.Repository.open(seeded.uri)
    assert again.uri == seeded.uri
    assert again.tables() == ["airlines", "airports"]
    assert [c.id for c in again.log()] == [c.id for c in seeded.log()]
    ro = trimerge.Repository.open(seeded.uri, read_only=True)
    assert ro.read("airlines").num_rows == 3
    also = trimerge.Repository.open(f"file://{seeded.uri}")
    assert also.read("airports").num_rows == 3


def test_read_only_repository_refuses_writes(seeded):
    ro = trimerge.Repository.open(seeded.uri, read_only=True)
    with pytest.raises(InvalidOperationError):
        ro.upsert("airlines", T(carrier=["ZZ"], name=["z"]))
    with pytest.raises(InvalidOperationError):
        ro.branches.create("x")
    with pytest.raises(InvalidOperationError):
        ro.tags.create("v1")
    with pytest.raises(InvalidOperationError):
        ro.cleanup()
    assert len(seeded.log()) == 3


def test_remote_uris_are_refused_with_a_typed_error(tmp_path):
    with pytest.raises(TrimergeError):
        trimerge.Repository.init("s3://bucket/repo")


# ---------------------------------------------------------------------------------------------- commits

def test_commit_fields(seeded):
    before = datetime.now(timezone.utc)
    c = seeded.upsert("airlines", T(carrier=["ZZ"], name=["Zed"]), actor="alice", message="add zed")
    after = datetime.now(timezone.utc)
    assert len(c.id) == 64 and all(ch in "0123456789abcdef" for ch in c.id)
    assert len(c.ulid) == 26
    assert c.actor == "alice"
    assert c.message == "add zed"
    assert c.branch == "main"
    assert c.created_at.tzinfo is not None and c.created_at.utcoffset() == timedelta(0)
    assert before - timedelta(seconds=1) <= c.created_at <= after + timedelta(seconds=1)
    parent = seeded.resolve("main~1")
    assert c.parents == (parent.id,)
    assert isinstance(c.parents, tuple)
    assert c.generation == parent.generation + 1
    assert set(c.tables) == {"airlines", "airports"}
    tv = c.tables["airlines"]
    assert isinstance(tv, TableVersion)
    assert tv.primary_key == ("carrier",)
    assert tv.lance_branch == "main"
    assert tv.owner == seeded.branches.get("main").id
    # Untouched tables keep their location.
    assert c.tables["airports"] == parent.tables["airports"]
    assert c.tables["airlines"].version > parent.tables["airlines"].version
    assert seeded.resolve("main") == c
    assert seeded.commit(c.id) is not None and seeded.commit(c.id).id == c.id


def test_commit_id_is_the_sha256_of_the_content(seeded):
    for c in seeded.all_commits():
        assert c.id == digest(c.body())
        stored = json.loads((Path(seeded.uri) / "_trimerge" / "commits" / c.id[:2] / f"{c.id[2:]}.json").read_text())
        assert stored["id"] == c.id
        body = {k: v for k, v in stored.items() if k != "id"}
        assert digest(body) == c.id
        assert Commit.from_json(stored).id == c.id
        assert Commit.from_json(stored).body() == c.body()


def test_commit_id_is_stable_and_content_sensitive(seeded):
    c = seeded.resolve("main")
    fields = dict(ulid=c.ulid, parents=c.parents, actor=c.actor, created_at=c.created_at, message=c.message,
                  metadata=dict(c.metadata), branch=c.branch, generation=c.generation, tables=dict(c.tables))
    assert Commit.build(**fields).id == c.id
    assert Commit.build(**fields).id == Commit.build(**fields).id
    variants = [
        {"message": c.message + "!"},
        {"actor": "mallory"},
        {"metadata": {"k": "v"}},
        {"parents": ()},
        {"branch": "other"},
        {"generation": c.generation + 1},
        {"created_at": c.created_at + timedelta(microseconds=1)},
        {"ulid": "01" + c.ulid[2:] if not c.ulid.startswith("01") else "02" + c.ulid[2:]},
        {"tables": {}},
        {"tables": {**c.tables, "airlines": TableVersion(c.tables["airlines"].dataset, "main",
                                                           c.tables["airlines"].version + 1,
                                                           c.tables["airlines"].owner, ("carrier",))}},
    ]
    ids = {c.id}
    for change in variants:
        other = Commit.build(**{**fields, **change})
        assert other.id not in ids, change
        ids.add(other.id)
    # Metadata order does not matter (canonical encoding).
    a = Commit.build(**{**fields, "metadata": {"a": "1", "b": "2"}})
    b = Commit.build(**{**fields, "metadata": {"b": "2", "a": "1"}})
    assert a.id == b.id


def test_commit_metadata_roundtrip(repo):
    with repo.transaction(actor="bot", message="load", metadata={"source": "test", "n": 3}) as tx:
        tx.create_table("t", T(k=[1]), primary_key="k")
    c = trimerge.Repository.open(repo.uri).resolve("main")
    assert c.metadata == {"source": "test", "n": "3"}
    assert c.id == tx.commit.id


def test_non_ascii_commit_content_round_trips(repo):
    with repo.transaction(actor="zoë@exämple", message="café ☕ 文字", metadata={"clé": "välue"}) as tx:
        tx.create_table("t", T(k=["ü"], v=["ß"]), primary_key="k")
    c = trimerge.Repository.open(repo.uri).resolve("main")
    assert (c.actor, c.message, dict(c.metadata)) == ("zoë@exämple", "café ☕ 文字", {"clé": "välue"})
    assert c.id == tx.commit.id == digest(c.body())
    assert repo.read("t").to_pylist() == [{"k": "ü", "v": "ß"}]


def test_every_write_appends_exactly_one_commit(seeded):
    n = len(seeded.log())
    ops = [
        lambda: seeded.append("airlines", T(carrier=["B6"], name=["JetBlue"])),
        lambda: seeded.upsert("airlines", T(carrier=["B6", "AS"], name=["JetBlue Airways", "Alaska"])),
        lambda: seeded.delete("airlines", "carrier = 'AS'"),
        lambda: seeded.overwrite("airports", T(faa=["JFK"], name=["Kennedy"])),
        lambda: seeded.add_columns("airports", pa.field("alt", pa.int32())),
        lambda: seeded.alter_column("airports", "alt", pa.int64()),
        lambda: seeded.drop_columns("airports", ["alt"]),
        lambda: seeded.create_table("planes", T(tailnum=["N1"], seats=[100]), primary_key="tailnum"),
        lambda: seeded.drop_table("planes"),
    ]
    for op in ops:
        tip = seeded.resolve("main")
        c = op()
        n += 1
        assert len(seeded.log()) == n
        assert c.parents == (tip.id,)
        assert seeded.resolve("main") == c
    assert len(roots(seeded)) == 1
    assert len(seeded.all_commits()) == n


def test_log_order_and_filters(seeded):
    seeded.upsert("airlines", T(carrier=["ZZ"], name=["z"]), actor="alice")
    seeded.upsert("airlines", T(carrier=["ZY"], name=["y"]), actor="bob")
    log = seeded.log()
    assert [c.actor for c in log[:2]] == ["bob", "alice"]
    assert [c.generation for c in log] == sorted((c.generation for c in log), reverse=True)
    assert [c.actor for c in seeded.log(actor="alice")] == ["alice"]
    assert len(seeded.log(limit=2)) == 2
    assert seeded.log("main~2")[0] == seeded.resolve("main~2")
    assert seeded.log(since=log[1].created_at)[-1].created_at >= log[1].created_at


# ---------------------------------------------------------------------------------------------- reading

def test_create_and_read_table(seeded):
    got = seeded.read("airlines")
    assert isinstance(got, pa.Table)
    assert rows(got, "carrier") == rows(T(**AIRLINES), "carrier")
    assert seeded.tables() == ["airlines", "airports"]
    assert seeded.tables(ref="main~1") == ["airlines"]
    assert seeded.tables(ref="main~2") == []
    assert seeded.primary_key("airlines") == ("carrier",)
    assert seeded.read("airlines", columns=["carrier"]).column_names == ["carrier"]
    assert seeded.read("airlines", filter="carrier = 'AA'").to_pylist() == [{"carrier": "AA", "name": "American"}]
    # Key columns are declared non-null in the schema.
    assert not seeded.schema("airlines").field("carrier").nullable


def test_create_table_from_polars(repo):
    df = pl.DataFrame({"carrier": ["AA", "UA"], "name": ["American", "United"], "n": [1, 2]})
    repo.create_table("airlines", df, primary_key=["carrier"])
    got = repo.read("airlines")
    assert rows(got, "carrier") == [{"carrier": "AA", "name": "American", "n": 1},
                                    {"carrier": "UA", "name": "United", "n": 2}]
    assert got.schema.field("carrier").type in (pa.string(), pa.large_string())
    repo.upsert("airlines", pl.DataFrame({"carrier": ["DL"], "name": ["Delta"], "n": [3]}))
    assert repo.read("airlines").num_rows == 3


@pytest.mark.parametrize("source", ["polars", "large_string"])
def test_entity_on_large_string_keys(repo, source):
    data = (pl.DataFrame({"k": ["x", "y"], "v": [1, 2]}) if source == "polars"
            else pa.table({"k": pa.array(["x", "y"], pa.large_string()), "v": [1, 2]}))
    repo.create_table("a", data, primary_key="k")
    assert repo.read("a", filter="k = 'x'").num_rows == 1  # SQL filters work
    assert repo.entity("a", "x") == {"k": "x", "v": 1}
    assert len(repo.entity_history("a", "x")) == 1


def test_composite_primary_key(repo):
    repo.create_table("weather", T(origin=["JFK", "JFK", "LGA"], hour=[1, 2, 1], temp=[1.0, 2.0, 3.0]),
                      primary_key=["origin", "hour"])
    repo.upsert("weather", T(origin=["JFK", "LGA"], hour=[2, 2], temp=[20.0, 4.0]))
    got = {(r["origin"], r["hour"]): r["temp"] for r in repo.read("weather").to_pylist()}
    assert got == {("JFK", 1): 1.0, ("JFK", 2): 20.0, ("LGA", 1): 3.0, ("LGA", 2): 4.0}
    assert repo.entity("weather", ("JFK", 2)) == {"origin": "JFK", "hour": 2, "temp": 20.0}
    assert repo.entity("weather", {"origin": "LGA", "hour": 1})["temp"] == 3.0
    with pytest.raises(PrimaryKeyError):
        repo.entity("weather", "JFK")
    with pytest.raises(PrimaryKeyError):
        repo.append("weather", T(origin=["JFK"], hour=[1], temp=[0.0]))


def test_reads_at_old_refs(seeded):
    seeded.upsert("airlines", T(carrier=["AA"], name=["American Airlines"]))
    seeded.delete("airlines", "carrier = 'UA'")
    assert as_map(seeded.read("airlines", ref="main~2"), "carrier", "name") == dict(zip(*AIRLINES.values()))
    assert as_map(seeded.read("airlines", ref="main~1"), "carrier", "name")["AA"] == "American Airlines"
    assert "UA" not in as_map(seeded.read("airlines", ref="main"), "carrier", "name")
    old = seeded.resolve("main~2").id
    assert seeded.read("airlines", ref=old).num_rows == 3
    assert seeded.read("airlines", ref=old[:10]).num_rows == 3


def test_entity_and_entity_history(seeded):
    c_create = seeded.resolve("main~1")
    c_update = seeded.upsert("airlines", T(carrier=["AA"], name=["American Airlines"]), message="rename AA")
    seeded.upsert("airlines", T(carrier=["UA"], name=["United Airlines"]), message="rename UA")
    seeded.upsert("airlines", T(carrier=["AA"], name=["American Airlines"]), message="no-op")  # identical
    seeded.upsert("airports", T(faa=["EWR"], name=["Newark"]), message="other table")
    c_delete = seeded.delete("airlines", "carrier = 'AA'", message="drop AA")
    assert seeded.entity("airlines", "AA") is None
    assert seeded.entity("airlines", "AA", ref="main~1") == {"carrier": "AA", "name": "American Airlines"}
    assert seeded.entity("airlines", "UA") == {"carrier": "UA", "name": "United Airlines"}
    hist = seeded.entity_history("airlines", "AA")
    assert [c.id for c in hist] == [c_delete.id, c_update.id, c_create.id]
    assert [c.message for c in seeded.entity_history("airlines", "AA", ref="main~1")] == ["rename AA",
                                                                                          "Create table airlines"]
    assert seeded.entity_history("airlines", "ZZ") == []


def test_upsert_of_identical_values_is_not_an_error(seeded):
    before = seeded.read("airlines")
    c = seeded.upsert("airlines", T(carrier=["AA", "UA"], name=["American", "United"]))
    assert isinstance(c, trimerge.Commit)
    assert rows(seeded.read("airlines"), "carrier") == rows(before, "carrier")
    c2 = seeded.upsert("airlines", T(carrier=["AA"], name=["American"]))
    assert c2.parents == (c.id,)


def test_empty_upsert_and_append(seeded):
    empty = pa.table({"carrier": pa.array([], pa.string()), "name": pa.array([], pa.string())})
    seeded.upsert("airlines", empty)
    seeded.append("airlines", empty)
    assert seeded.read("airlines").num_rows == 3


def test_overwrite_and_delete(seeded):
    seeded.overwrite("airports", T(faa=["EWR"], name=["Newark"], alt=[18]))
    assert seeded.read("airports").to_pylist() == [{"faa": "EWR", "name": "Newark", "alt": 18}]
    assert seeded.primary_key("airports") == ("faa",)
    assert seeded.read("airports", ref="main~1").num_rows == 3
    seeded.delete("airlines", "carrier IN ('AA', 'UA')")
    assert seeded.read("airlines").to_pylist() == [{"carrier": "DL", "name": "Delta"}]
    seeded.delete("airlines", "true")
    assert seeded.read("airlines").num_rows == 0


def test_schema_evolution(seeded):
    seeded.add_columns("airports", [pa.field("alt", pa.int32()), pa.field("tz", pa.string())])
    got = seeded.read("airports")
    assert got.column_names == ["faa", "name", "alt", "tz"]
    assert got.column("alt").null_count == 3
    seeded.upsert("airports", T(faa=["JFK"], name=["Kennedy"], alt=[13], tz=["America/New_York"]))
    seeded.alter_column("airports", "alt", pa.int64())
    assert seeded.schema("airports").field("alt").type == pa.int64()
    assert seeded.entity("airports", "JFK")["alt"] == 13
    seeded.drop_columns("airports", ["tz"])
    assert seeded.read("airports").column_names == ["faa", "name", "alt"]
    # Old versions keep their schema.
    assert seeded.read("airports", ref="main~4").column_names == ["faa", "name"]
    # Widening to the same type is a no-op, not an error.
    seeded.alter_column("airports", "alt", pa.int64())


def test_drop_table_keeps_history(seeded):
    seeded.drop_table("airports")
    assert seeded.tables() == ["airlines"]
    with pytest.raises(TableNotFoundError):
        seeded.read("airports")
    assert seeded.read("airports", ref="main~1").num_rows == 3
    # The name can be used again.
    seeded.create_table("airports", T(faa=["EWR"], name=["Newark"]), primary_key="faa")
    assert seeded.read("airports").num_rows == 1
    assert seeded.read("airports", ref="main~2").num_rows == 3


# ---------------------------------------------------------------------------------------------- typed errors

def test_unknown_table_branch_tag_ref(seeded):
    with pytest.raises(TableNotFoundError):
        seeded.read("nope")
    with pytest.raises(TableNotFoundError):
        seeded.upsert("nope", T(k=[1]))
    with pytest.raises(TableNotFoundError):
        seeded.delete("nope", "true")
    with pytest.raises(TableNotFoundError):
        seeded.drop_table("nope")
    with pytest.raises(RefNotFoundError):
        seeded.read("airlines", ref="nope")
    with pytest.raises(RefNotFoundError):
        seeded.resolve("nope")
    with pytest.raises(RefNotFoundError):
        seeded.log("nope")
    with pytest.raises(RefNotFoundError):
        seeded.resolve("main~99")
    with pytest.raises(BranchNotFoundError):
        seeded.branches.get("nope")
    with pytest.raises(BranchNotFoundError):
        seeded.upsert("airlines", T(carrier=["X"], name=["x"]), branch="nope")
    with pytest.raises(BranchNotFoundError):
        seeded.switch("nope")
    with pytest.raises(TagNotFoundError):
        seeded.tags.get("nope")
    with pytest.raises(TagNotFoundError):
        seeded.tags.delete("nope")
    with pytest.raises(RefNotFoundError):
        seeded.branches.create("x", from_ref="nope")
    with pytest.raises(RefNotFoundError):
        seeded.tags.create("v1", ref="nope")
    for exc_type in (TableNotFoundError, RefNotFoundError, BranchNotFoundError, TagNotFoundError):
        assert issubclass(exc_type, TrimergeError)
        assert issubclass(exc_type, NotFoundError)


def test_invalid_table_names_rejected(repo):
    for bad in ["1x", "a-b", "", "a b", "a.b"]:
        with pytest.raises(InvalidNameError):
            repo.create_table(bad, T(k=[1]), primary_key="k")
    assert repo.tables() == []
    assert len(repo.log()) == 1


def test_create_existing_table(seeded):
    with pytest.raises(AlreadyExistsError):
        seeded.create_table("airlines", T(carrier=["X"]), primary_key="carrier")


@pytest.mark.parametrize("data,key", [
    (T(k=[1, 2], v=["a", "b"]), "missing"),                       # key column not in the data
    (T(k=[1, 1], v=["a", "b"]), "k"),                             # duplicate keys
    (pa.table({"k": pa.array([1, None]), "v": ["a", "b"]}), "k"),  # null key
    (T(k=[1.0, 2.0], v=["a", "b"]), "k"),                         # float key
    (T(k=[1, 2], v=["a", "b"]), []),                              # no key
    (T(a=["x", "x"], b=[1, 1], v=[1, 2]), ["a", "b"]),            # duplicate composite key
])
def test_create_table_primary_key_errors(repo, data, key):
    with pytest.raises(PrimaryKeyError):
        repo.create_table("t", data, primary_key=key)
    assert repo.tables() == []
    assert len(repo.log()) == 1


def test_load_primary_key_errors(seeded):
    with pytest.raises(PrimaryKeyError):
        seeded.append("airlines", T(carrier=["AA"], name=["again"]))  # existing key
    with pytest.raises(PrimaryKeyError):
        seeded.append("airlines", T(carrier=["ZZ", "ZZ"], name=["a", "b"]))
    with pytest.raises(PrimaryKeyError):
        seeded.upsert("airlines", T(carrier=["ZZ", "ZZ"], name=["a", "b"]))
    with pytest.raises(PrimaryKeyError):
        seeded.overwrite("airlines", T(carrier=["ZZ", "ZZ"], name=["a", "b"]))
    with pytest.raises(PrimaryKeyError):
        seeded.overwrite("airlines", T(name=["a", "b"]))
    with pytest.raises(PrimaryKeyError):
        seeded.drop_columns("airlines", ["carrier"])
    assert rows(seeded.read("airlines"), "carrier") == rows(T(**AIRLINES), "carrier")
    assert len(seeded.log()) == 3


@pytest.mark.parametrize("op", ["append", "upsert"])
def test_null_key_in_loaded_data_is_a_primary_key_error(seeded, op):
    data = pa.table({"carrier": pa.array(["ZZ", None]), "name": ["a", "b"]})
    with pytest.raises(PrimaryKeyError):
        getattr(seeded, op)("airlines", data)


def test_null_key_in_overwrite_is_a_primary_key_error(seeded):
    with pytest.raises(PrimaryKeyError):
        seeded.overwrite("airlines", pa.table({"carrier": pa.array(["ZZ", None]), "name": ["a", "b"]}))


@pytest.mark.parametrize("data", [
    T(carrier=["ZZ"], name=["z"], extra=[1]),        # extra column
    T(carrier=["ZZ"]),                               # missing column
    T(carrier=["ZZ"], name=[[1, 2]]),                # list into a string column
])
def test_schema_mismatch_on_load(seeded, data):
    # An append fills a missing nullable column with nulls (issue 54, tests/test_habits_round2.py)
    for op in (seeded.upsert,) if data.column_names == ["carrier"] else (seeded.append, seeded.upsert):
        with pytest.raises(SchemaMismatchError):
            op("airlines", data)
    assert len(seeded.log()) == 3


def test_bad_types_on_load(repo):
    repo.create_table("t", T(k=[1, 2], n=[10, 20]), primary_key="k")
    with pytest.raises(SchemaMismatchError):
        repo.upsert("t", T(k=["abc"], n=[1]))       # not a number
    with pytest.raises(SchemaMismatchError):
        repo.upsert("t", T(k=[3], n=[1.5]))         # lossy float -> int
    with pytest.raises(SchemaMismatchError):
        repo.append("t", T(k=[3], n=[2 ** 70 // 2 ** 10 * 2 ** 10 * 1.0]))  # overflow
    with pytest.raises(SchemaMismatchError):
        repo.upsert("t", T(k=[3], n=[[1]]))
    # Lossless casts are fine, columns may come in any order.
    repo.upsert("t", pa.table({"n": pa.array([30], pa.int32()), "k": pa.array([3], pa.int8())}))
    assert repo.entity("t", 3) == {"k": 3, "n": 30}
    assert repo.schema("t").field("n").type == pa.int64()


def test_unsupported_data_type(repo):
    with pytest.raises(SchemaMismatchError):
        repo.create_table("t", [{"k": 1}], primary_key="k")


def test_writes_to_tags_and_commit_ids_are_read_only(seeded):
    seeded.tags.create("v1", ref="main")
    cid = seeded.resolve("main").id
    for target in ("v1", cid, cid[:12], "main~1", "main^"):
        with pytest.raises(ReadOnlyRefError):
            seeded.upsert("airlines", T(carrier=["ZZ"], name=["z"]), branch=target)
        with pytest.raises(ReadOnlyRefError):
            seeded.transaction(branch=target).__enter__()
    assert len(seeded.log()) == 3


def test_alter_column_only_widens(seeded):
    seeded.add_columns("airports", pa.field("alt", pa.int32()))
    for bad in (pa.int16(), pa.string(), pa.bool_(), pa.uint32()):
        with pytest.raises(SchemaMismatchError):
            seeded.alter_column("airports", "alt", bad)
    with pytest.raises(SchemaMismatchError):
        seeded.alter_column("airports", "name", pa.int64())
    with pytest.raises(SchemaMismatchError):
        seeded.alter_column("airports", "nope", pa.int64())
    assert len(seeded.log()) == 4
    seeded.alter_column("airports", "alt", pa.int64())
    assert seeded.schema("airports").field("alt").type == pa.int64()
    seeded.alter_column("airports", "name", pa.large_string())
    assert seeded.schema("airports").field("name").type == pa.large_string()
    assert len(seeded.log()) == 6


def _sample(t: pa.DataType) -> pa.Array:
    if pa.types.is_string(t):
        return pa.array(["x", None], t)
    if pa.types.is_binary(t):
        return pa.array([b"x", None], t)
    if pa.types.is_floating(t):
        return pa.array([1.5, None], pa.float64()).cast(t)
    return pa.array([7, None], t)


def _widening_cases():
    from trimerge.lineage.tables.conversion import _WIDENINGS

    for old, news in _WIDENINGS.items():
        for new in sorted(news, key=str):
            yield pytest.param(old, new, id=f"{old}->{new}")


@pytest.mark.parametrize("old,new", list(_widening_cases()))
def test_every_allowed_widening_works(repo, old, new):
    repo.create_table("t", pa.table({"k": [1, 2], "c": _sample(old)}), primary_key="k")
    repo.alter_column("t", "c", new)
    got = repo.read("t")
    assert got.schema.field("c").type == new
    assert got.sort_by("k").column("c").to_pylist() == _sample(old).cast(new).to_pylist()
    assert repo.read("t", ref="main~1").schema.field("c").type == old


def test_int_to_float_is_refused_with_a_typed_error(repo):
    # Lance cannot cast int columns to float in place, so trimerge does not offer it.
    repo.create_table("t", pa.table({"k": [1], "c": pa.array([1], pa.int32())}), primary_key="k")
    with pytest.raises(SchemaMismatchError):
        repo.alter_column("t", "c", pa.float64())


def test_add_and_drop_column_errors(seeded):
    with pytest.raises(SchemaMismatchError):
        seeded.add_columns("airports", pa.field("name", pa.string()))
    with pytest.raises(SchemaMismatchError):
        seeded.add_columns("airports", pa.field("x", pa.int64(), nullable=False))
    with pytest.raises(SchemaMismatchError):
        seeded.drop_columns("airports", ["nope"])


def test_delete_predicate_errors(seeded):
    with pytest.raises(InvalidOperationError):
        seeded.delete("airlines", "")
    with pytest.raises(InvalidOperationError):
        seeded.delete("airlines", "carrier ==== 'x'")
    with pytest.raises(InvalidOperationError):
        seeded.delete("airlines", "nope = 1")
    assert seeded.read("airlines").num_rows == 3
    assert len(seeded.log()) == 3
    seeded.delete("airlines", "carrier = 'nobody'")  # matches nothing: still fine


def test_all_user_errors_are_trimerge_errors():
    import trimerge.lineage.errors as errors

    for name in dir(errors):
        obj = getattr(errors, name)
        if isinstance(obj, type) and issubclass(obj, Exception) and obj.__module__ == errors.__name__:
            assert issubclass(obj, TrimergeError)
    assert errors.ConcurrentWriteError.retryable is True
    assert errors.TrimergeError.retryable is False


# ---------------------------------------------------------------------------------------------- graph queries

def test_merge_bases_and_ancestry(seeded):
    fork = seeded.resolve("main")
    seeded.branches.create("a", from_ref="main")
    seeded.branches.create("b", from_ref="main")
    seeded.upsert("airlines", T(carrier=["A1"], name=["a"]), branch="a")
    seeded.upsert("airlines", T(carrier=["B1"], name=["b"]), branch="b")
    seeded.upsert("airlines", T(carrier=["B2"], name=["b"]), branch="b")
    assert seeded.merge_base("a", "b") == fork
    assert seeded.merge_bases("a", "b") == [fork]
    assert seeded.is_ancestor("main", "a")
    assert seeded.is_ancestor("b~2", "b")
    assert seeded.is_ancestor("b", "b")
    assert not seeded.is_ancestor("a", "b")
    assert not seeded.is_ancestor("b", "main")
    assert seeded.merge_base("b", "b~1") == seeded.resolve("b~1")

    # A merge commit (destination first) made with a transaction.
    with seeded.transaction(branch="a", message="merge b into a") as tx:
        tx.add_parent(seeded.resolve("b").id)
        tx.upsert("airlines", T(carrier=["B1", "B2"], name=["b", "b"]))
    merge = tx.commit
    assert merge.parents == (seeded.resolve("a~1").id, seeded.resolve("b").id)
    assert merge.is_merge
    assert seeded.resolve("a^2") == seeded.resolve("b")
    assert seeded.is_ancestor("b", "a")
    assert seeded.merge_base("a", "b") == seeded.resolve("b")
    assert len(seeded.log("a", first_parent=True)) == len(seeded.log("main")) + 2
    assert len(seeded.log("a")) == len(seeded.log("main")) + 4
