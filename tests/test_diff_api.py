"""The diff API by example: ``trimerge.diff.diff`` and its ``Diff`` / ``TableDiff`` results.

Every test builds a tiny repository, edits one or two branches and checks exact statuses, schema
changes, counts and rows (key columns, ``change``, ``changed_columns``, ``before``/``after``
structs). The last part covers bounded memory: with ``memory_budget`` (or env
``TRIMERGE_DIFF_MEMORY``) exceeded, candidates spill to key-hash buckets on disk and every result
must stay the same."""

from __future__ import annotations

import gc
import json
import math
from pathlib import Path
from typing import Any, Sequence

import polars as pl
import pyarrow as pa
import pytest

import trimerge
from trimerge.diff import Diff, DiffCounts, SchemaChange, TableDiff, diff
from trimerge.lineage.errors import (
    InvalidOperationError,
    RefNotFoundError,
    RefSyntaxError,
    TableNotFoundError,
    TrimergeError,
)
from trimerge.merge import merge

ROWS_META = [("change", pa.string()), ("changed_columns", pa.list_(pa.string()))]


# ---------------------------------------------------------------------------------------------- helpers
def tbl(**columns: Sequence[Any]) -> pa.Table:
    return pa.table({k: list(v) for k, v in columns.items()})


def new_repo(tmp_path: Path, tables: dict[str, tuple[pa.Table, Sequence[str]]],
             branches: Sequence[str] = ("feature",)) -> trimerge.Repository:
    """Tables created on main in one commit, then branches forked from main."""
    repo = trimerge.Repository.init(tmp_path / "repo", actor="setup")
    with repo.transaction("main", actor="setup", message="base") as tx:
        for name, (data, key) in tables.items():
            tx.create_table(name, data, list(key))
    for b in branches:
        repo.branches.create(b, from_ref="main")
    return repo


def base_t() -> pa.Table:
    return tbl(id=[1, 2, 3, 4], a=[10, 20, 30, 40], s=["w", "x", "y", "z"])


def summary(td: TableDiff, key: Sequence[str] = ("id",)) -> list[tuple]:
    """(key..., change, changed_columns) per row, in the order rows() returns them."""
    return [(*[r[k] for k in key], r["change"], r["changed_columns"]) for r in td.rows().to_pylist()]


def rows_schema(key: list[tuple[str, pa.DataType]], before: list[tuple[str, pa.DataType]],
                after: list[tuple[str, pa.DataType]] | None = None) -> pa.Schema:
    after = before if after is None else after
    return pa.schema(key + ROWS_META + [("before", pa.struct(before)), ("after", pa.struct(after))])


def batch_rows(td: TableDiff, **kwargs: Any) -> list[dict]:
    return [r for b in td.iter_batches(**kwargs) for r in b.to_pylist()]


def canonical(rows: list[dict]) -> list[str]:
    """Rows as sorted JSON strings (order-free comparison; NaN survives as a token)."""
    return sorted(json.dumps(r, sort_keys=True, default=str) for r in rows)


# ---------------------------------------------------------------------------------------------- modified tables
def test_modified_table_rows_columns_types_and_counts(tmp_path):
    repo = new_repo(tmp_path, {"t": (base_t(), ["id"])})
    repo.upsert("t", tbl(id=[1, 5], a=[11, 50], s=["w", "v"]), branch="feature")
    repo.delete_keys("t", tbl(id=[2]), branch="feature")
    repo.upsert("t", tbl(id=[3], a=[31], s=["Y"]), branch="feature")

    d = diff("main", "feature", repo=repo)
    assert isinstance(d, Diff) and set(d.tables) == {"t"}
    td = d.tables["t"]
    assert td.status == "modified"
    assert td.schema_changes == []
    assert td.counts == DiffCounts(inserted=1, deleted=1, updated=2, cells_changed=3)
    assert td.counts.rows_changed == 4
    assert td.changed is True
    assert td.primary_key == ("id",)

    rows = td.rows()
    assert isinstance(rows, pa.Table)
    assert rows.schema == rows_schema([("id", pa.int64())], [("a", pa.int64()), ("s", pa.string())])
    assert rows.to_pylist() == [
        {"id": 1, "change": "update", "changed_columns": ["a"], "before": {"a": 10, "s": "w"},
         "after": {"a": 11, "s": "w"}},
        {"id": 2, "change": "delete", "changed_columns": [], "before": {"a": 20, "s": "x"}, "after": None},
        {"id": 3, "change": "update", "changed_columns": ["a", "s"], "before": {"a": 30, "s": "y"},
         "after": {"a": 31, "s": "Y"}},
        {"id": 5, "change": "insert", "changed_columns": [], "before": None, "after": {"a": 50, "s": "v"}},
    ]
    # The reverse direction swaps inserts and deletes and before/after.
    back = diff("feature", "main", repo=repo).tables["t"]
    assert back.counts == DiffCounts(inserted=1, deleted=1, updated=2, cells_changed=3)
    assert summary(back) == [(1, "update", ["a"]), (2, "insert", []), (3, "update", ["a", "s"]),
                             (5, "delete", [])]
    assert back.rows().to_pylist()[0]["before"] == {"a": 11, "s": "w"}


def test_rows_columns_projection_keeps_keys_and_restricts_structs(tmp_path):
    repo = new_repo(tmp_path, {"t": (base_t(), ["id"])})
    repo.upsert("t", tbl(id=[1, 5], a=[11, 50], s=["W", "v"]), branch="feature")
    repo.delete_keys("t", tbl(id=[4]), branch="feature")
    td = diff("main", "feature", repo=repo).tables["t"]
    only_s = td.rows(columns=["s"])
    assert only_s.schema == rows_schema([("id", pa.int64())], [("s", pa.string())])
    assert only_s.to_pylist() == [
        {"id": 1, "change": "update", "changed_columns": ["a", "s"], "before": {"s": "w"}, "after": {"s": "W"}},
        {"id": 4, "change": "delete", "changed_columns": [], "before": {"s": "z"}, "after": None},
        {"id": 5, "change": "insert", "changed_columns": [], "before": None, "after": {"s": "v"}},
    ]
    # The full rows are unaffected by an earlier projection.
    assert td.rows().column("after").type == pa.struct([("a", pa.int64()), ("s", pa.string())])
    assert batch_rows(td, columns=["a"]) == td.rows(columns=["a"]).to_pylist()


def test_each_table_status(tmp_path):
    repo = new_repo(tmp_path, {"mod": (base_t(), ["id"]), "same": (base_t(), ["id"]),
                               "gone": (base_t(), ["id"])})
    repo.upsert("mod", tbl(id=[4], a=[41], s=["z"]), branch="feature")
    repo.create_table("fresh", tbl(k=["p", "q"], v=[1.5, None]), ["k"], branch="feature")
    repo.drop_table("gone", branch="feature")

    d = diff("main", "feature", repo=repo)
    assert {n: td.status for n, td in d.tables.items()} == {
        "fresh": "added", "gone": "dropped", "mod": "modified", "same": "unchanged"}
    assert list(d.tables) == ["fresh", "gone", "mod", "same"]
    assert d.tables["fresh"].before_version is None and d.tables["fresh"].after_version is not None
    assert d.tables["gone"].after_version is None and d.tables["gone"].before_version is not None
    assert all(td.schema_changes == [] for td in d.tables.values())
    assert d.tables["same"].changed is False
    assert d.tables["fresh"].changed is True and d.tables["gone"].changed is True
    assert d.tables["same"].plan.method == "none"

    # Seen the other way round, added and dropped swap.
    back = diff("feature", "main", repo=repo)
    assert {n: td.status for n, td in back.tables.items()} == {
        "fresh": "dropped", "gone": "added", "mod": "modified", "same": "unchanged"}


def test_added_table_lists_every_row_as_insert(tmp_path):
    repo = new_repo(tmp_path, {"t": (base_t(), ["id"])})
    repo.create_table("fresh", tbl(k=["q", "p"], v=[None, 1.5]), ["k"], branch="feature")
    td = diff("main", "feature", repo=repo).tables["fresh"]
    assert td.counts == DiffCounts(inserted=2, deleted=0, updated=0, cells_changed=0)
    assert td.rows().schema == rows_schema([("k", pa.string())], [("v", pa.float64())])
    assert td.rows().to_pylist() == [
        {"k": "p", "change": "insert", "changed_columns": [], "before": None, "after": {"v": 1.5}},
        {"k": "q", "change": "insert", "changed_columns": [], "before": None, "after": {"v": None}},
    ]
    assert td.plan.method == "added"


def test_dropped_table_lists_every_row_as_delete(tmp_path):
    repo = new_repo(tmp_path, {"t": (base_t(), ["id"]), "gone": (tbl(k=["p", "q"], x=[1, 2]), ["k"])})
    repo.drop_table("gone", branch="feature")
    d = diff("main", "feature", repo=repo)
    td = d.tables["gone"]
    assert td.status == "dropped"
    assert td.counts == DiffCounts(inserted=0, deleted=2, updated=0, cells_changed=0)
    assert td.rows().to_pylist() == [
        {"k": "p", "change": "delete", "changed_columns": [], "before": {"x": 1}, "after": None},
        {"k": "q", "change": "delete", "changed_columns": [], "before": {"x": 2}, "after": None},
    ]
    assert d.stat().to_pylist()[0]["deleted"] == 2


def test_dropped_empty_table_has_no_rows(tmp_path):
    repo = new_repo(tmp_path, {"t": (base_t(), ["id"]),
                               "empty": (pa.table({"k": pa.array([], pa.int64()), "x": pa.array([], pa.int64())}),
                                         ["k"])})
    repo.drop_table("empty", branch="feature")
    td = diff("main", "feature", repo=repo).tables["empty"]
    assert td.status == "dropped" and td.changed is True
    assert td.counts == DiffCounts()
    assert td.rows().num_rows == 0


def test_key_only_table_inserts_and_deletes(tmp_path):
    repo = new_repo(tmp_path, {"tags": (tbl(tag=["a", "b"]), ["tag"])})
    repo.append("tags", tbl(tag=["c"]), branch="feature")
    repo.delete_keys("tags", tbl(tag=["a"]), branch="feature")
    td = diff("main", "feature", repo=repo).tables["tags"]
    assert td.counts == DiffCounts(inserted=1, deleted=1, updated=0, cells_changed=0)
    assert [(r["tag"], r["change"]) for r in td.rows().to_pylist()] == [("a", "delete"), ("c", "insert")]


def test_unchanged_table_has_empty_rows_and_zero_counts(tmp_path):
    repo = new_repo(tmp_path, {"t": (base_t(), ["id"])})
    td = diff("main", "feature", repo=repo).tables["t"]
    assert td.status == "unchanged"
    assert td.counts == DiffCounts()
    rows = td.rows()
    assert rows.num_rows == 0
    assert rows.schema == rows_schema([("id", pa.int64())], [("a", pa.int64()), ("s", pa.string())])
    assert td.spilled is False


# ---------------------------------------------------------------------------------------------- schema changes
def test_schema_changes_added_dropped_and_widened_columns(tmp_path):
    base = pa.table({"id": [1, 2, 3], "a": pa.array([1, 2, 3], pa.int32()), "s": ["x", "y", "z"]})
    repo = new_repo(tmp_path, {"t": (base, ["id"])})
    repo.add_columns("t", pa.field("n", pa.string()), branch="feature")
    repo.drop_columns("t", ["s"], branch="feature")
    repo.alter_column("t", "a", pa.int64(), branch="feature")

    td = diff("main", "feature", repo=repo).tables["t"]
    assert td.status == "modified"
    assert td.schema_changes == [
        SchemaChange("type_changed", "a", "int32", "int64"),
        SchemaChange("added", "n", None, "string"),
        SchemaChange("dropped", "s", "string", None),
    ]
    assert [c.to_json() for c in td.schema_changes] == [
        {"kind": "type_changed", "column": "a", "before": "int32", "after": "int64"},
        {"kind": "added", "column": "n", "before": None, "after": "string"},
        {"kind": "dropped", "column": "s", "before": "string", "after": None},
    ]
    # A widened value is the same value, an added all-null column changes no row, a dropped column
    # is a schema change only: no row differs yet.
    assert td.counts == DiffCounts()
    assert td.changed is True  # the schema differs

    repo.upsert("t", pa.table({"id": [2], "a": [2], "n": ["hello"]}), branch="feature")
    td = diff("main", "feature", repo=repo).tables["t"]
    assert td.counts == DiffCounts(inserted=0, deleted=0, updated=1, cells_changed=1)
    rows = td.rows()
    assert rows.schema == rows_schema([("id", pa.int64())], [("a", pa.int32()), ("s", pa.string())],
                                      [("a", pa.int64()), ("n", pa.string())])
    assert rows.to_pylist() == [{"id": 2, "change": "update", "changed_columns": ["n"],
                                 "before": {"a": 2, "s": "y"}, "after": {"a": 2, "n": "hello"}}]


def test_primary_key_declaration_change_is_a_schema_change(tmp_path):
    repo = new_repo(tmp_path, {"t": (tbl(id=[1, 2], g=["a", "b"], v=[1, 2]), ["id", "g"])})
    repo.drop_table("t", branch="feature")
    repo.create_table("t", tbl(id=[1, 2], g=["a", "b"], v=[1, 3]), ["id"], branch="feature")
    td = diff("main", "feature", repo=repo).tables["t"]
    assert td.status == "modified"
    assert SchemaChange("primary_key_changed", "id", "id,g", "id") in td.schema_changes
    assert td.primary_key == ("id",)
    assert summary(td) == [(2, "update", ["v"])]
    assert td.plan.method == "full"  # unrelated datasets: both read


# ---------------------------------------------------------------------------------------------- semantics
def test_changing_a_primary_key_is_a_delete_plus_an_insert(tmp_path):
    repo = new_repo(tmp_path, {"t": (base_t(), ["id"])})
    repo.overwrite("t", tbl(id=[1, 20, 3, 4], a=[10, 20, 30, 40], s=["w", "x", "y", "z"]), branch="feature")
    td = diff("main", "feature", repo=repo).tables["t"]
    assert td.counts == DiffCounts(inserted=1, deleted=1, updated=0, cells_changed=0)
    assert td.rows().to_pylist() == [
        {"id": 2, "change": "delete", "changed_columns": [], "before": {"a": 20, "s": "x"}, "after": None},
        {"id": 20, "change": "insert", "changed_columns": [], "before": None, "after": {"a": 20, "s": "x"}},
    ]


def test_composite_keys(tmp_path):
    base = tbl(id=[1, 1, 2, 3], g=["a", "b", "a", "a"], v=[10, 11, 20, None])
    repo = new_repo(tmp_path, {"t": (base, ["id", "g"])})
    # (2, a) -> (2, z) changes part of the key; (1, b) changes a value; (3, a) stays null.
    repo.overwrite("t", tbl(id=[1, 1, 2, 3], g=["a", "b", "z", "a"], v=[10, 12, 20, None]), branch="feature")
    td = diff("main", "feature", repo=repo).tables["t"]
    assert td.primary_key == ("id", "g")
    assert td.counts == DiffCounts(inserted=1, deleted=1, updated=1, cells_changed=1)
    rows = td.rows()
    assert rows.schema == rows_schema([("id", pa.int64()), ("g", pa.string())], [("v", pa.int64())])
    assert rows.to_pylist() == [
        {"id": 1, "g": "b", "change": "update", "changed_columns": ["v"], "before": {"v": 11}, "after": {"v": 12}},
        {"id": 2, "g": "a", "change": "delete", "changed_columns": [], "before": {"v": 20}, "after": None},
        {"id": 2, "g": "z", "change": "insert", "changed_columns": [], "before": None, "after": {"v": 20}},
    ]


@pytest.mark.parametrize("rewrite", ["overwrite", "upsert", "compact", "delete_and_reinsert"])
def test_noop_rewrite_is_not_a_change(tmp_path, rewrite):
    repo = new_repo(tmp_path, {"t": (base_t(), ["id"])})
    if rewrite == "overwrite":
        repo.overwrite("t", base_t(), branch="feature")
    elif rewrite == "upsert":
        repo.upsert("t", base_t(), branch="feature")
    elif rewrite == "compact":
        repo.append("t", tbl(id=[9], a=[9], s=["n"]), branch="feature")
        repo.delete_keys("t", tbl(id=[9]), branch="feature")
        repo.compact("t", branch="feature")
    else:
        with repo.transaction("feature", message="move rows") as tx:
            tx.delete_keys("t", tbl(id=[2, 3]))
            tx.append("t", tbl(id=[3, 2], a=[30, 20], s=["y", "x"]))
    assert repo.resolve("feature").id != repo.resolve("main").id
    d = diff("main", "feature", repo=repo)
    td = d.tables["t"]
    assert td.counts == DiffCounts()
    assert td.rows().num_rows == 0
    assert td.changed is False
    assert d.changed_tables() == []
    assert td.status == "unchanged"  # no row or column differs
    if rewrite in ("overwrite", "compact", "delete_and_reinsert"):
        assert td.storage_status == "modified"  # but the Lance version moved


def test_values_compare_null_safely(tmp_path):
    base = tbl(id=[1, 2, 3, 4, 5], a=[None, None, 3, 4, None], s=[None, "x", None, "y", "z"])
    repo = new_repo(tmp_path, {"t": (base, ["id"])})
    # 1: null stays null (no change); 2: a null -> 7; 3: a 3 -> null and s null -> "n";
    # 4: unchanged; 5: s "z" -> null.
    repo.overwrite("t", tbl(id=[1, 2, 3, 4, 5], a=[None, 7, None, 4, None], s=[None, "x", "n", "y", None]),
                   branch="feature")
    td = diff("main", "feature", repo=repo).tables["t"]
    assert summary(td) == [(2, "update", ["a"]), (3, "update", ["a", "s"]), (5, "update", ["s"])]
    assert td.counts == DiffCounts(inserted=0, deleted=0, updated=3, cells_changed=4)
    by_id = {r["id"]: r for r in td.rows().to_pylist()}
    assert by_id[3]["before"] == {"a": 3, "s": None} and by_id[3]["after"] == {"a": None, "s": "n"}
    assert by_id[5]["after"] == {"a": None, "s": None}


def test_floats_compare_exactly_with_nan_equal_to_nan(tmp_path):
    nan = float("nan")
    before = [0.3, nan, nan, 1.0, None, nan, 0.0, 1e300, 1.0, 2.5]
    after = [0.1 + 0.2, nan, 1.0, nan, nan, None, -0.0, 1e300, 1.0000000000000002, 2.5]
    ids = list(range(1, 11))
    repo = new_repo(tmp_path, {"t": (tbl(id=ids, f=before), ["id"])})
    repo.overwrite("t", tbl(id=ids, f=after), branch="feature")
    td = diff("main", "feature", repo=repo).tables["t"]
    # Changed: 0.3 vs 0.1+0.2 (exact), NaN -> 1.0, 1.0 -> NaN, null -> NaN, NaN -> null, 1.0 -> next float.
    # Not changed: NaN -> NaN, 0.0 -> -0.0 (README: equal), 1e300 -> 1e300, 2.5 -> 2.5.
    assert [r[0] for r in summary(td)] == [1, 3, 4, 5, 6, 9]
    assert td.counts == DiffCounts(inserted=0, deleted=0, updated=6, cells_changed=6)
    rows = {r["id"]: r for r in td.rows().to_pylist()}
    assert rows[1]["after"]["f"] == 0.30000000000000004 and rows[1]["before"]["f"] == 0.3
    assert math.isnan(rows[3]["before"]["f"]) and rows[3]["after"]["f"] == 1.0
    assert rows[5]["before"]["f"] is None and math.isnan(rows[5]["after"]["f"])


# ---------------------------------------------------------------------------------------------- ranges
def _diverged(tmp_path) -> trimerge.Repository:
    """feature: id 1 updated, id 5 inserted; main (after the fork): id 2 updated, id 6 inserted, id 4 deleted."""
    repo = new_repo(tmp_path, {"t": (base_t(), ["id"]), "u": (tbl(k=[1], v=["a"]), ["k"])})
    repo.upsert("t", tbl(id=[1, 5], a=[11, 50], s=["w", "v"]), branch="feature")
    repo.upsert("t", tbl(id=[2, 6], a=[21, 60], s=["x", "q"]), branch="main")
    repo.delete_keys("t", tbl(id=[4]), branch="main")
    repo.upsert("u", tbl(k=[1], v=["b"]), branch="main")
    return repo


def test_two_dot_compares_tips_and_three_dot_the_merge_base(tmp_path):
    repo = _diverged(tmp_path)
    two = diff("main", "feature", repo=repo)
    dots = diff("main..feature", repo=repo)
    three = diff("main...feature", repo=repo)
    base = repo.merge_base("main", "feature")

    assert two.before.id == dots.before.id == repo.resolve("main").id
    assert two.after.id == dots.after.id == three.after.id == repo.resolve("feature").id
    assert three.before.id == base.id != repo.resolve("main").id
    assert (two.three_dot, dots.three_dot, three.three_dot) == (False, False, True)

    expected_two = [(1, "update", ["a"]), (2, "update", ["a"]), (4, "insert", []), (5, "insert", []),
                    (6, "delete", [])]
    assert summary(two.tables["t"]) == expected_two
    assert summary(dots.tables["t"]) == expected_two
    assert two.to_json() == dots.to_json()
    assert {n: td.status for n, td in two.tables.items()} == {"t": "modified", "u": "modified"}
    assert summary(two.tables["u"], key=("k",)) == [(1, "update", ["v"])]

    # Three-dot: only what feature did since the fork; main's edits (and table u) are not in it.
    assert summary(three.tables["t"]) == [(1, "update", ["a"]), (5, "insert", [])]
    assert three.tables["u"].status == "unchanged"
    assert three.tables["t"].counts == DiffCounts(inserted=1, deleted=0, updated=1, cells_changed=1)

    other = diff("feature...main", repo=repo)
    assert other.before.id == base.id and other.after.id == repo.resolve("main").id
    assert summary(other.tables["t"]) == [(2, "update", ["a"]), (4, "delete", []), (6, "insert", [])]
    assert summary(other.tables["u"], key=("k",)) == [(1, "update", ["v"])]


def test_range_sides_default_to_main(tmp_path):
    repo = _diverged(tmp_path)
    assert diff("..feature", repo=repo).to_json() == diff("main", "feature", repo=repo).to_json()
    assert diff("feature..", repo=repo).to_json() == diff("feature", "main", repo=repo).to_json()
    assert diff("main", "main", repo=repo).changed_tables() == []


def test_diff_across_lance_lineages_after_merges(tmp_path):
    """Sibling branches fork the table; after merges the two sides live on different Lance
    branches forked from the same main version, so both are described by a delta from there."""
    repo = new_repo(tmp_path, {"t": (tbl(id=list(range(1, 11)), v=[f"v{i}" for i in range(1, 11)]), ["id"])},
                    branches=("feature", "dev"))
    repo.upsert("t", tbl(id=[1, 11], v=["A", "k"]), branch="feature")
    repo.upsert("t", tbl(id=[2], v=["B"]), branch="dev")
    repo.delete_keys("t", tbl(id=[3]), branch="dev")
    assert merge("feature", "dev", repo=repo).status == "merged"
    # Both branches change again after the merge.
    repo.upsert("t", tbl(id=[4, 12], v=["D", "m"]), branch="dev")
    repo.upsert("t", tbl(id=[5], v=["E"]), branch="feature")
    repo.delete_keys("t", tbl(id=[6]), branch="feature")

    for budget in (None, 1):
        two = diff("feature", "dev", repo=repo, memory_budget=budget).tables["t"]
        assert summary(two) == [(2, "update", ["v"]), (3, "delete", []), (4, "update", ["v"]),
                                (5, "update", ["v"]), (6, "insert", []), (12, "insert", [])]
        # delta, or the fragment plan when the merges wrote their source-only updates as columns
        assert two.plan.method in ("delta", "fragments")
        assert two.rows().to_pylist()[3] == {"id": 5, "change": "update", "changed_columns": ["v"],
                                             "before": {"v": "E"}, "after": {"v": "v5"}}
        assert two.spilled is (budget == 1)
        # Since the merge base (feature's tip when merged): dev brings its own edits only.
        to_dev = diff("feature...dev", repo=repo, memory_budget=budget).tables["t"]
        assert summary(to_dev) == [(2, "update", ["v"]), (3, "delete", []), (4, "update", ["v"]),
                                   (12, "insert", [])]
        to_feature = diff("dev...feature", repo=repo, memory_budget=budget).tables["t"]
        assert summary(to_feature) == [(5, "update", ["v"]), (6, "delete", [])]

    # Merge dev back: then the tips agree row for row.
    assert merge("dev", "feature", repo=repo).status == "merged"
    d = diff("dev", "feature", repo=repo)
    assert summary(d.tables["t"]) == [(5, "update", ["v"]), (6, "delete", [])]
    assert diff("feature", "feature~1", repo=repo).tables["t"].counts == DiffCounts(
        inserted=1, deleted=1, updated=2, cells_changed=2)


# ---------------------------------------------------------------------------------------------- selection, addresses
def test_tables_filter(tmp_path):
    repo = _diverged(tmp_path)
    assert list(diff("main", "feature", repo=repo, tables=["u"]).tables) == ["u"]
    assert list(diff("main...feature", repo=repo, tables=["t", "u"]).tables) == ["t", "u"]
    with pytest.raises(TableNotFoundError, match="zz"):
        diff("main", "feature", repo=repo, tables=["t", "zz"])


def test_addresses_and_ref_objects(tmp_path):
    repo = _diverged(tmp_path)
    expected = summary(diff("main", "feature", repo=repo).tables["t"])
    d = diff("main::t", "feature::t", repo=repo)
    assert list(d.tables) == ["t"] and summary(d.tables["t"]) == expected
    assert list(diff("main::t", "feature", repo=repo).tables) == ["t"]
    assert list(diff("main::t", "feature::u", repo=repo).tables) == ["t", "u"]
    three = diff("main...feature::t", repo=repo)
    assert three.three_dot and list(three.tables) == ["t"]
    assert summary(three.tables["t"]) == [(1, "update", ["a"]), (5, "insert", [])]
    # A repository-qualified address carries the repository: no repo= needed.
    qualified = diff(f"{repo.uri}::main::t", f"{repo.uri}::feature::t")
    assert list(qualified.tables) == ["t"] and summary(qualified.tables["t"]) == expected
    # Ref objects carry it too.
    refs = diff(repo.ref("main"), repo.ref("feature"))
    assert sorted(refs.tables) == ["t", "u"] and summary(refs.tables["t"]) == expected
    with pytest.raises(TableNotFoundError):
        diff("main::nope", "feature", repo=repo)


@pytest.mark.parametrize("args, kwargs, error", [
    (("main", "nope"), {}, RefNotFoundError),
    (("nope...main",), {}, RefNotFoundError),
    (("main..nope",), {}, RefNotFoundError),
    (("mainfeature",), {}, InvalidOperationError),  # one argument must be a range
    (("main", "feature"), {"tables": ["zz"]}, TableNotFoundError),
    (("main", "feature"), {"engine": "bogus"}, InvalidOperationError),
    (("::t", "feature"), {}, RefSyntaxError),  # an address without a ref
])
def test_bad_input_raises_typed_errors(tmp_path, args, kwargs, error):
    repo = _diverged(tmp_path)
    with pytest.raises(error) as info:
        diff(*args, repo=repo, **kwargs)
    assert isinstance(info.value, TrimergeError)
    assert info.value.exit_code == 2
    assert str(info.value) and "\n" not in str(info.value)


def test_diff_without_a_repository_is_an_error():
    with pytest.raises(InvalidOperationError, match="repo"):
        diff("main", "feature")


# ---------------------------------------------------------------------------------------------- stat, json, progress
def test_stat_one_row_per_table(tmp_path):
    repo = new_repo(tmp_path, {"t": (base_t(), ["id"]), "same": (base_t(), ["id"])})
    repo.upsert("t", tbl(id=[1, 5], a=[11, 50], s=["W", "v"]), branch="feature")
    repo.delete_keys("t", tbl(id=[2]), branch="feature")
    repo.add_columns("t", pa.field("n", pa.int64()), branch="feature")
    repo.create_table("fresh", tbl(k=[1, 2, 3], v=["a", "b", "c"]), ["k"], branch="feature")
    st = diff("main", "feature", repo=repo).stat()
    assert st.schema == pa.schema([("table", pa.string()), ("status", pa.string()), ("inserted", pa.int64()),
                                   ("deleted", pa.int64()), ("updated", pa.int64()),
                                   ("cells_changed", pa.int64()), ("schema_changes", pa.int64()),
                                   ("index_changes", pa.int64()), ("method", pa.string()),
                                   ("columns", pa.string())])
    rows = st.to_pylist()
    assert [r.pop("columns") for r in rows] == ["", "", "a 1, s 1"]
    assert rows == [
        {"table": "fresh", "status": "added", "inserted": 3, "deleted": 0, "updated": 0, "cells_changed": 0,
         "schema_changes": 0, "index_changes": 0, "method": "added"},
        {"table": "same", "status": "unchanged", "inserted": 0, "deleted": 0, "updated": 0, "cells_changed": 0,
         "schema_changes": 0, "index_changes": 0, "method": "none"},
        {"table": "t", "status": "modified", "inserted": 1, "deleted": 1, "updated": 1, "cells_changed": 2,
         "schema_changes": 1, "index_changes": 0, "method": "delta"},
    ]


def test_to_json_summary_and_rows(tmp_path):
    repo = _diverged(tmp_path)
    d = diff("main...feature", repo=repo)
    doc = d.to_json()
    assert doc["before"] == repo.merge_base("main", "feature").id
    assert doc["after"] == repo.resolve("feature").id
    assert sorted(doc["tables"]) == ["t", "u"]
    t = doc["tables"]["t"]
    assert {k: t[k] for k in ("table", "status", "inserted", "deleted", "updated", "cells_changed",
                              "schema_changes")} == {
        "table": "t", "status": "modified", "inserted": 1, "deleted": 0, "updated": 1, "cells_changed": 1,
        "schema_changes": []}
    assert t["plan"]["method"] == "delta" and "rows" not in t
    assert doc["tables"]["u"]["status"] == "unchanged" and doc["tables"]["u"]["inserted"] == 0
    json.dumps(doc)  # serializable as is

    with_rows = d.to_json(rows=True)
    assert with_rows["tables"]["u"]["rows"] == []
    assert with_rows["tables"]["t"]["rows"] == [
        {"id": 1, "change": "update", "changed_columns": ["a"], "before": {"a": 10, "s": "w"},
         "after": {"a": 11, "s": "w"}},
        {"id": 5, "change": "insert", "changed_columns": [], "before": None, "after": {"a": 50, "s": "v"}},
    ]


def test_progress_callback_reports_each_table(tmp_path):
    repo = _diverged(tmp_path)
    calls: list[tuple[str, str]] = []
    d = diff("main", "feature", repo=repo, progress=lambda name, what: calls.append((name, what)))
    assert calls == [("t", "start"), ("t", "done"), ("u", "start"), ("u", "done")]
    assert d.tables["t"].counts.rows_changed == 5


# ---------------------------------------------------------------------------------------------- bounded memory
N = 240


def _bigger(tmp_path, scenario: str) -> tuple[trimerge.Repository, str, str, tuple[str, ...]]:
    """A few hundred rows with updates (incl. nulls and NaN), deletes and inserts, composite key."""
    ids = list(range(N))
    base = pa.table({"id": pa.array(ids, pa.int32()), "g": [f"g{i % 3}" for i in ids],
                     "f": [i * 0.5 if i % 9 else float("nan") for i in ids],
                     "s": [None if i % 7 == 0 else f"s{i}" for i in ids]})
    repo = new_repo(tmp_path, {"t": (base, ["id", "g"])}, branches=("feature", "dev"))
    upd = [i for i in ids if i % 4 == 0]
    changes = pa.table({"id": pa.array(upd, pa.int32()), "g": [f"g{i % 3}" for i in upd],
                        "f": [i * 0.5 if i % 8 else float("nan") for i in upd],
                        "s": [f"S{i}" if i % 3 else None for i in upd]})
    if scenario == "added":
        repo.create_table("t2", base, ["id", "g"], branch="feature")
        return repo, "main", "feature", ("t2",)
    repo.upsert("t", changes, branch="feature")
    repo.delete("t", "id % 11 = 5", branch="feature")
    repo.append("t", pa.table({"id": pa.array(range(N, N + 30), pa.int32()), "g": ["n"] * 30,
                               "f": [1.0] * 30, "s": ["new"] * 30}), branch="feature")
    if scenario == "widened_key":
        repo.alter_column("t", "id", pa.int64(), branch="feature")
    if scenario == "siblings":
        repo.upsert("t", changes.slice(0, 20).set_column(3, "s", pa.array(["dev"] * 20)), branch="dev")
        return repo, "dev", "feature", ("t",)
    return repo, "main", "feature", ("t",)


@pytest.mark.parametrize("scenario", ["delta", "widened_key", "siblings", "added"])
def test_memory_budget_spills_with_identical_results(tmp_path, scenario):
    repo, a, b, names = _bigger(tmp_path, scenario)
    (name,) = names
    mem = diff(a, b, repo=repo).tables[name]
    disk = diff(a, b, repo=repo, memory_budget=1).tables[name]
    assert mem.spilled is False
    assert disk.spilled is True
    # Counts are computed from the spilled batches, before anything is materialized.
    assert disk.counts == mem.counts
    assert mem.counts.rows_changed > 60
    if scenario == "delta":
        assert mem.counts == DiffCounts(inserted=30, deleted=22, updated=52, cells_changed=77)
    # Streamed rows: the same set, every batch bounded and ordered by key within itself.
    key = list(mem.primary_key)
    streamed = list(disk.iter_batches(max_rows=7))
    assert streamed and all(0 < b.num_rows <= 7 for b in streamed)
    assert sum(b.num_rows for b in streamed) == mem.counts.rows_changed
    for batch in disk.iter_batches():
        ks = [tuple(r[k] for k in key) for r in batch.to_pylist()]
        assert ks == sorted(ks)
    assert canonical(batch_rows(disk)) == canonical(mem.rows().to_pylist())
    assert canonical(batch_rows(disk, columns=["s"])) == canonical(mem.rows(columns=["s"]).to_pylist())
    assert streamed[0].schema == mem.rows().schema
    # rows() is the full table sorted by key, exactly as in memory.
    rows = disk.rows()
    assert rows.schema == mem.rows().schema
    assert canonical(rows.to_pylist()) == canonical(mem.rows().to_pylist())
    got = [tuple(r[k] for k in key) for r in rows.to_pylist()]
    assert got == sorted(got) == [tuple(r[k] for k in key) for r in mem.rows().to_pylist()]
    assert disk.rows(columns=["f"]).column("before").type == pa.struct([("f", pa.float64())])


def test_memory_budget_from_environment(tmp_path, monkeypatch):
    repo, a, b, _ = _bigger(tmp_path, "delta")
    monkeypatch.setenv("TRIMERGE_DIFF_MEMORY", "1")
    td = diff(a, b, repo=repo).tables["t"]
    assert td.spilled is True
    assert diff(a, b, repo=repo, memory_budget=1 << 30).tables["t"].spilled is False  # argument wins
    st_env = diff(a, b, repo=repo).stat()
    monkeypatch.delenv("TRIMERGE_DIFF_MEMORY")
    assert diff(a, b, repo=repo).tables["t"].spilled is False
    assert st_env.equals(diff(a, b, repo=repo).stat())


def test_budget_large_enough_keeps_rows_in_memory(tmp_path, monkeypatch):
    spill = tmp_path / "spill"
    spill.mkdir()
    monkeypatch.setenv("TRIMERGE_SPILL_DIR", str(spill))
    repo = new_repo(tmp_path, {"t": (base_t(), ["id"])})
    repo.upsert("t", tbl(id=[1], a=[0], s=["w"]), branch="feature")
    td = diff("main", "feature", repo=repo, memory_budget=10_000).tables["t"]
    assert td.counts.updated == 1 and td.spilled is False
    assert list(spill.iterdir()) == []


def test_spill_files_are_removed_with_the_diff(tmp_path, monkeypatch):
    spill = tmp_path / "spill"
    spill.mkdir()
    monkeypatch.setenv("TRIMERGE_SPILL_DIR", str(spill))
    repo, a, b, _ = _bigger(tmp_path, "delta")
    d = diff(a, b, repo=repo, memory_budget=1)
    td = d.tables["t"]
    assert td.counts.rows_changed == 104
    assert td.spilled
    # While the diff lives, its rows sit in one spill directory (the candidate buckets are gone).
    live = [p for p in spill.iterdir() if p.name.startswith("trimerge-diff-")]
    assert len(live) == 1 and any(live[0].iterdir())
    assert td.rows().num_rows == 104
    del td, d
    gc.collect()
    assert [p.name for p in spill.iterdir() if p.name.startswith("trimerge-diff-")] == []


@pytest.mark.parametrize("text, expected", [("1", 1), ("4096", 4096), ("512M", 512 << 20), ("1GB", 1 << 30),
                                            ("2GiB", 2 << 30), ("1.5k", 1536)])
def test_memory_budget_accepts_bytes_and_sizes(text, expected):
    from trimerge.diff.spill import memory_budget

    assert memory_budget(text) == expected


@pytest.mark.parametrize("text", ["lots", "0", "-5", "G", ""])
def test_memory_budget_rejects_nonsense(text):
    from trimerge.diff.spill import memory_budget
    from trimerge.lineage.errors import InvalidOperationError

    with pytest.raises(InvalidOperationError):
        memory_budget(text)


def test_diff_between_a_fork_of_a_fork_and_a_sibling_reads_fragments(tmp_path):
    """A branch of a branch lives on a fork of a fork; pylance reads deltas only inside a fork's own
    tree, so against a sibling the engine compares fragments (data files and deletion vectors)."""
    repo = new_repo(tmp_path, {"t": (tbl(id=list(range(1, 11)), v=[f"v{i}" for i in range(1, 11)]), ["id"])},
                    branches=("feature", "dev"))
    repo.upsert("t", tbl(id=[1], v=["A"]), branch="feature")
    repo.branches.create("sub", from_ref="feature")
    repo.upsert("t", tbl(id=[2, 11], v=["B", "k"]), branch="sub")
    repo.delete_keys("t", tbl(id=[3]), branch="sub")
    repo.upsert("t", tbl(id=[4], v=["D"]), branch="dev")
    for budget in (None, 1):
        d = diff("dev", "sub", repo=repo, memory_budget=budget).tables["t"]
        assert summary(d) == [(1, "update", ["v"]), (2, "update", ["v"]), (3, "delete", []), (4, "update", ["v"]),
                              (11, "insert", [])]
        assert d.plan.method == "fragments" and d.plan.fragments_read


def test_one_function_picks_the_engine_for_diff_and_merge():
    from trimerge.diff.planner import CandidatePlan, choose_engine

    big = CandidatePlan("fragments", estimated_rows=10)
    assert choose_engine("auto", big, threshold=5) == "spark"
    assert choose_engine("auto", big, threshold=50) == "local"
    assert choose_engine("spark", CandidatePlan("none")) == "local"  # nothing to compute
    assert choose_engine("spark", big) == "spark" and choose_engine("local", big) == "local"


def test_auto_hands_work_to_spark_only_when_spark_can_bring_machines(monkeypatch):
    """Above the default threshold, ``auto`` starts no Spark of its own on this machine (a 20M-row
    merge: 15 s locally, 425 s through a local Spark); a given session, an active one, a named
    master or a threshold set by hand let it hand work over."""
    from trimerge.diff.planner import DEFAULT_SPARK_THRESHOLD, CandidatePlan, choose_engine, spark_at_hand

    huge = CandidatePlan("fragments", estimated_rows=DEFAULT_SPARK_THRESHOLD + 1)
    assert choose_engine("auto", huge, at_hand=False) == "local"
    assert choose_engine("auto", huge, at_hand=True) == "spark"
    assert choose_engine("auto", huge, threshold=0, at_hand=False) == "spark"  # asked for by hand
    assert choose_engine("spark", huge, at_hand=False) == "spark"
    monkeypatch.delenv("TRIMERGE_SPARK_MASTER", raising=False)
    monkeypatch.delenv("TRIMERGE_SPARK_THRESHOLD", raising=False)
    assert spark_at_hand(object())
    monkeypatch.setenv("TRIMERGE_SPARK_MASTER", "spark://127.0.0.1:7077")
    assert spark_at_hand()
    monkeypatch.delenv("TRIMERGE_SPARK_MASTER")
    monkeypatch.setenv("TRIMERGE_SPARK_THRESHOLD", "1000")
    assert spark_at_hand()
    monkeypatch.delenv("TRIMERGE_SPARK_THRESHOLD")
    import subprocess
    import sys

    fresh = subprocess.run([sys.executable, "-c", "from trimerge.diff.planner import spark_at_hand; "
                            "print(spark_at_hand())"], capture_output=True, text=True, check=True)
    assert fresh.stdout.strip() == "False"  # no session in a fresh process: auto stays local


def test_a_key_named_like_a_diff_column_is_a_clear_error(tmp_path):
    from trimerge.lineage.errors import InvalidOperationError

    repo = new_repo(tmp_path, {"t": (tbl(change=[1, 2], v=["a", "b"]), ["change"])}, branches=("feature",))
    repo.upsert("t", tbl(change=[1], v=["c"]), branch="feature")
    with pytest.raises(InvalidOperationError, match="share a name with the diff's own columns"):
        diff("main", "feature", repo=repo).tables["t"].rows()


def test_stat_counts_without_building_rows_and_agrees_with_the_rows(tmp_path):
    """``Diff.stat()`` counts tables whose rows nobody asked for (the count-only paths, the
    row-id-aligned one included); its numbers are those of the rows built afterwards."""
    import numpy as np

    n = 3000
    rng = np.random.default_rng(11)
    table = pa.table({"id": np.arange(n, dtype=np.int64), "a": rng.integers(0, 9, n),
                      "s": pa.array([f"r{i}" for i in range(n)])})
    repo = trimerge.Repository.init(tmp_path / "r", actor="t")
    repo.create_table("t", table, ["id"])
    repo.branches.create("feature", from_ref="main")
    picked = np.sort(rng.choice(n, n // 2, replace=False))
    changed = table.take(pa.array(picked))
    repo.upsert("t", changed.set_column(1, "a", pa.array(changed.column("a").to_numpy() + 1)), branch="feature")
    repo.delete_keys("t", pa.table({"id": pa.array([0, 7, 99], pa.int64())}), branch="feature")
    repo.upsert("t", pa.table({"id": pa.array([n + 1], pa.int64()), "a": [1], "s": ["new"]}), branch="feature")
    counted = diff("main", "feature", repo=repo)
    stat = counted.stat().to_pylist()
    built = diff("main", "feature", repo=repo)
    rows = built.tables["t"].rows()
    assert built.stat().to_pylist() == stat
    change = rows.column("change").to_pylist()
    assert (stat[0]["inserted"], stat[0]["deleted"], stat[0]["updated"]) == \
        (change.count("insert"), change.count("delete"), change.count("update")) == \
        (1, 3, n // 2 - len({0, 7, 99} & set(picked.tolist())))
