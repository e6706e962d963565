"""Deletes whose filter names whole keys take the key index, and delete exactly what Lance would."""

from __future__ import annotations

import itertools

import lance
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import trimerge
from trimerge.lineage.tables import keyed
from trimerge.lineage.tables.keyfilter import pinned_keys

SCHEMA = pa.schema([("id", pa.int64()), ("s", pa.string()), ("v", pa.float64())])


@pytest.mark.parametrize("where, keys", [
    ("id = 7", [7]), ("7 = id", [7]), ("((id = 7))", [7]), ("id IN (1, 2, 2)", [1, 2]),
    ("id = 1 OR id = 3 OR id = 1", [1, 3]), ("id = -4", [-4]), ('"id" = 7', [7]), ("`id` = 7", [7]),
])
def test_filters_naming_whole_keys_give_the_keys(where, keys):
    assert pinned_keys(where, SCHEMA, ["id"]).column("id").to_pylist() == keys


@pytest.mark.parametrize("where", [
    "id > 7", "id = 7 AND v = 1", "id = 7 OR v = 1", "s = 'x'", "id = 'x'", "id = 7.0", "ID = 7", "t.id = 7",
    "id = 99999999999999999999", "id = 1 AND id = 2", "NOT id = 7", "id = NULL", "id IN (1, v)", "id = 0x10",
    "id = 1; id = 2",
])
def test_other_filters_are_left_to_lance(where):
    assert pinned_keys(where, SCHEMA, ["id"]) is None


def test_composite_keys_need_every_key_column():
    schema = pa.schema([("a", pa.int32()), ("b", pa.string())])
    assert pinned_keys("a = 1", schema, ["a", "b"]) is None
    got = pinned_keys("(a IN (1, 2) AND b = 'it''s') OR (b = 'y' AND a = 3)", schema, ["a", "b"])
    assert got.to_pylist() == [{"a": 1, "b": "it's"}, {"a": 2, "b": "it's"}, {"a": 3, "b": "y"}]
    assert got.schema == schema


@pytest.fixture(scope="module")
def indexed(tmp_path_factory):
    """A table large enough for a key index (``index.key_min_rows``), and the same rows in plain Lance."""
    root = tmp_path_factory.mktemp("keyfilter")
    n = 30_000
    data = pa.table({"id": pa.array(np.arange(n) * 3, pa.int64()), "v": pa.array(np.arange(n) % 11, pa.int64())})
    repo = trimerge.Repository.init(str(root / "repo"))
    repo.settings.set("index.key_min_rows", 1000)
    repo.create_table("t", data, primary_key="id")
    assert keyed.key_indexed(repo.dataset("t"), ["id"]), "the test needs the keyed path"
    return repo, data


_branch_numbers = itertools.count()
_key = st.integers(min_value=-3, max_value=90_010)
_filters = st.one_of(
    _key.map(lambda k: f"id = {k}"),
    st.lists(_key, min_size=1, max_size=6).map(lambda ks: f"id IN ({', '.join(map(str, ks))})"),
    st.lists(_key, min_size=2, max_size=4).map(lambda ks: " OR ".join(f"(id = {k})" for k in ks)),
    _key.map(lambda k: f"id = {k} AND v = 3"),  # not whole keys: Lance's own delete
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(where=_filters)
def test_delete_by_filter_deletes_what_lance_deletes(indexed, where, tmp_path_factory):
    repo, data = indexed
    branch = f"b{next(_branch_numbers)}"
    repo.branches.create(branch, from_ref="main")
    repo.delete("t", where, branch=branch)
    plain = str(tmp_path_factory.mktemp("plain") / "t.lance")
    ds = lance.write_dataset(data, plain)
    ds.delete(where)
    expected = lance.dataset(plain).to_table().sort_by("id")
    assert repo.read("t", ref=branch).sort_by("id").select(["id", "v"]).to_pydict() == expected.to_pydict()


def test_upsert_of_existing_keys_into_a_key_only_indexed_table(tmp_path):
    """Found by the model test: a key-only table's upsert through the key index compared no value
    columns and crashed (IndexError) when some keys existed."""
    repo = trimerge.Repository.init(str(tmp_path / "repo"))
    repo.settings.set("index.key_min_rows", 5)
    repo.create_table("k", pa.table({"id": pa.array(np.arange(10), pa.int64())}), primary_key="id")
    assert keyed.key_indexed(repo.dataset("k"), ["id"])
    repo.upsert("k", pa.table({"id": pa.array([0, 1, 2], pa.int64())}))  # all exist: nothing to write
    assert sorted(repo.read("k").column("id").to_pylist()) == list(range(10))
    repo.upsert("k", pa.table({"id": pa.array([2, 30], pa.int64())}))
    assert sorted(repo.read("k").column("id").to_pylist()) == [*range(10), 30]
