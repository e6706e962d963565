"""``diff(..., where=)`` and ``trimerge diff --where``: a diff restricted to the rows one filter
selects on either side.

A changed row is kept when its before or its after image matches (a row that left the filter's
range is an update); counts, ``--stat`` and every output format count the kept rows only; the
filter is the one ``read --where`` takes, refused in one line (exit 2) before any row is read; it
runs on the changed rows only (every plan, spilled or not, gives the same answer as filtering
the whole diff by hand)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

import pyarrow as pa
import pytest

import trimerge
from trimerge.diff import DiffCounts, TableDiff, diff
from trimerge.lineage.errors import InvalidOperationError


def tbl(**columns: Sequence[Any]) -> pa.Table:
    return pa.table({k: list(v) for k, v in columns.items()})


@pytest.fixture
def repo(tmp_path: Path) -> trimerge.Repository:
    """t (key id, price, name) and u (key k, v) on main; feat changes t across the line price = 10:

    id 1 price 5 -> 12 (enters), id 2 15 -> 9 (leaves), id 3 (25) deleted, id 4 (8) deleted,
    id 5 30 -> 31 (stays above), id 6 (50) inserted, id 7 (1) inserted, id 8 2 -> 3 (stays below);
    u k 1 'x' -> 'y'. Main then changes id 9 (price 40 -> 41) on its own."""
    r = trimerge.Repository.init(tmp_path / "repo", actor="setup")
    with r.transaction("main", message="base") as tx:
        tx.create_table("t", tbl(id=[1, 2, 3, 4, 5, 8, 9], price=[5.0, 15.0, 25.0, 8.0, 30.0, 2.0, 40.0],
                                 name=list("abcdehi")), ["id"])
        tx.create_table("u", tbl(k=[1, 2], v=["x", "z"]), ["k"])
    r.branches.create("feat", from_ref="main")
    r.update("t", tbl(id=[1, 2, 5, 8], price=[12.0, 9.0, 31.0, 3.0], name=list("abeh")), branch="feat")
    r.delete("t", "id = 3 OR id = 4", branch="feat")
    r.upsert("t", tbl(id=[6, 7], price=[50.0, 1.0], name=list("fg")), branch="feat")
    r.upsert("u", tbl(k=[1], v=["y"]), branch="feat")
    r.update("t", tbl(id=[9], price=[41.0], name=["i"]), branch="main")
    return r


def keys(td: TableDiff) -> list[tuple[int, str]]:
    return [(r["id"], r["change"]) for r in td.rows().to_pylist()]


def filtered_by_hand(td: TableDiff, test) -> list[dict]:
    """The unfiltered diff's rows whose before or after image passes ``test`` (a Python predicate)."""
    return [r for r in td.rows().to_pylist()
            if any(img is not None and test({"id": r["id"], **img}) for img in (r["before"], r["after"]))]


ABOVE_10 = [(1, "update"), (2, "update"), (3, "delete"), (5, "update"), (6, "insert")]


# ---------------------------------------------------------------------------------------------- API
def test_either_image_matching_keeps_the_row(repo):
    d = diff("main...feat", repo=repo, tables=["t"], where="price > 10")
    t = d.tables["t"]
    assert keys(t) == ABOVE_10  # 2 left the range (an update), 4, 7 and 8 never were in it
    assert t.counts == DiffCounts(inserted=1, deleted=1, updated=3, cells_changed=3)
    assert t.rows().to_pylist()[1] == {"id": 2, "change": "update", "changed_columns": ["price"],
                                       "before": {"price": 15.0, "name": "b"}, "after": {"price": 9.0, "name": "b"}}
    whole = diff("main...feat", repo=repo, tables=["t"]).tables["t"]
    assert t.rows().to_pylist() == filtered_by_hand(whole, lambda img: img["price"] > 10)
    assert d.stat().to_pylist()[0] | {"method": None} == {
        "table": "t", "status": "modified", "inserted": 1, "deleted": 1, "updated": 3, "cells_changed": 3,
        "schema_changes": 0, "index_changes": 0, "method": None, "columns": "price 3"}
    assert d.to_json()["where"] == "price > 10"
    assert d.to_json()["tables"]["t"]["updated"] == 3


@pytest.mark.parametrize("where, expected", [
    ("price < 10", [(1, "update"), (2, "update"), (4, "delete"), (7, "insert"), (8, "update")]),
    ("name IN ('b', 'f') OR id = 7", [(2, "update"), (6, "insert"), (7, "insert")]),
    ("id >= 5 AND price BETWEEN 30 AND 60", [(5, "update"), (6, "insert")]),
    ("name LIKE 'z%'", []),
    ("true", [(1, "update"), (2, "update"), (3, "delete"), (4, "delete"), (5, "update"), (6, "insert"),
              (7, "insert"), (8, "update")]),
])
def test_filters_on_keys_values_and_functions(repo, where, expected):
    t = diff("main...feat", repo=repo, tables=["t"], where=where).tables["t"]
    assert keys(t) == expected
    assert t.counts.rows_changed == len(expected)
    assert t.status == ("modified" if expected else "unchanged")


@pytest.mark.parametrize("plan", ["delta", "fragments", "full"])
def test_every_plan_and_a_spilled_diff_give_the_same_rows(repo, plan):
    mem = diff("main...feat", repo=repo, tables=["t"], where="price > 10", plan=plan).tables["t"]
    disk = diff("main...feat", repo=repo, tables=["t"], where="price > 10", plan=plan, memory_budget=1).tables["t"]
    assert keys(mem) == ABOVE_10
    assert disk.spilled and disk.counts == mem.counts
    assert sorted(r["id"] for b in disk.iter_batches() for r in b.to_pylist()) == [k for k, _ in ABOVE_10]
    assert disk.rows().to_pylist() == mem.rows().to_pylist()
    assert disk.head(2).to_pylist() == mem.rows().slice(0, 2).to_pylist()


def test_two_dot_range_and_the_other_direction(repo):
    # main..feat also holds main's own change to id 9 (41 on main, 40 on feat).
    t = diff("main..feat", repo=repo, tables=["t"], where="price > 10").tables["t"]
    assert keys(t) == ABOVE_10 + [(9, "update")]
    back = diff("feat", "main", repo=repo, tables=["t"], where="price > 10").tables["t"]
    assert keys(back) == [(1, "update"), (2, "update"), (3, "insert"), (5, "update"), (6, "delete"), (9, "update")]


def test_where_with_columns(repo):
    t = diff("main...feat", repo=repo, tables=["t"], where="name = 'b' OR name = 'f'").tables["t"]
    assert t.rows(columns="changed").to_pylist() == [
        {"id": 2, "change": "update", "changed_columns": ["price"], "before": {"price": 15.0, "name": "b"},
         "after": {"price": 9.0, "name": "b"}},
        {"id": 6, "change": "insert", "changed_columns": [], "before": None, "after": {"price": 50.0, "name": "f"}}]
    only_updates = diff("main...feat", repo=repo, tables=["t"], where="name = 'b'").tables["t"]
    assert only_updates.rows(columns="changed").column("after").type == pa.struct([("price", pa.float64())])
    # Filter on a column that is not shown.
    assert t.rows(columns=["price"]).to_pylist()[0]["after"] == {"price": 9.0}


def test_a_filter_applies_to_every_table_compared(repo):
    with pytest.raises(InvalidOperationError, match=r"table u.*price.*name the tables it is for"):
        diff("main...feat", repo=repo, where="price > 10")
    both = diff("main...feat", repo=repo, where="true")
    assert both.tables["u"].counts.updated == 1 and both.tables["t"].counts.rows_changed == 8
    u = diff("main...feat", repo=repo, tables=["u"], where="v = 'x'").tables["u"]
    assert [r["k"] for r in u.rows().to_pylist()] == [1]
    assert diff("main...feat", repo=repo, tables=["u"], where="k = 2").tables["u"].status == "unchanged"


def test_a_column_on_one_side_only_is_null_on_the_other(repo):
    repo.add_columns("t", [pa.field("tag", pa.string())], branch="feat")
    repo.update("t", tbl(id=[5], price=[31.0], name=["e"], tag=["hot"]), branch="feat")
    t = diff("main...feat", repo=repo, tables=["t"], where="tag = 'hot'").tables["t"]
    assert keys(t) == [(5, "update")]
    with pytest.raises(InvalidOperationError, match="No field named nope"):
        diff("main...feat", repo=repo, tables=["t"], where="tag = 'hot' OR nope = 1")


def test_added_and_dropped_tables_keep_their_matching_rows(repo):
    repo.create_table("n", tbl(id=[1, 2], price=[5.0, 15.0]), primary_key="id", branch="feat")
    repo.drop_table("u", branch="feat")
    n = diff("main", "feat", repo=repo, tables=["n"], where="price > 10").tables["n"]
    u = diff("main", "feat", repo=repo, tables=["u"], where="v = 'z'").tables["u"]
    assert [(r["id"], r["change"]) for r in n.rows().to_pylist()] == [(2, "insert")]
    assert [(r["k"], r["change"]) for r in u.rows().to_pylist()] == [(2, "delete")]
    assert (n.status, u.status, n.counts.inserted, u.counts.deleted) == ("added", "dropped", 1, 1)
    # One side, one image a row: the filter went into Lance's read (only the matching row was read).
    assert (n.plan.method, n.plan.rows_planned, u.plan.rows_planned) == ("added", 1, 1)


HOSTILE = [
    ("price > 10; DROP TABLE t", "';' at character 11"),
    ("price > 10 garbage", "not one SQL expression"),
    ("price > 10) OR (1 = 1", "unmatched"),
    ("nope = 1", "No field named nope"),
    ("price > 'a' AND", "not one SQL expression"),
    ("", "empty"),
    ("price > ?", "placeholders"),
    ("_rowid > 3", "_rowid names a row's place"),
    ("(" * 40 + "true" + ")" * 40, "nests 40 levels"),
]


@pytest.mark.parametrize("where, message", HOSTILE)
def test_hostile_filters_are_refused_before_any_row_is_read(repo, monkeypatch, where, message):
    def no_reads(self):
        raise AssertionError("rows were read")

    monkeypatch.setattr(TableDiff, "rows_with_row_ids", no_reads)
    monkeypatch.setattr(TableDiff, "counts", property(no_reads))
    with pytest.raises(InvalidOperationError, match=message):
        diff("main...feat", repo=repo, tables=["t"], where=where)


def test_where_must_be_text_and_runs_locally(repo):
    with pytest.raises(InvalidOperationError, match="SQL text, not int"):
        diff("main...feat", repo=repo, tables=["t"], where=3)  # type: ignore[arg-type]
    with pytest.raises(InvalidOperationError, match="local engine"):
        diff("main...feat", repo=repo, tables=["t"], where="true", engine="spark")


def test_verify_checks_the_whole_diff_then_filters(repo):
    t = diff("main...feat", repo=repo, tables=["t"], where="price > 10", verify=True).tables["t"]
    assert keys(t) == ABOVE_10


def test_cost_follows_the_change(tmp_path):
    """One changed row of 20,000: the filter runs on the candidates the plan read, not the table."""
    r = trimerge.Repository.init(tmp_path / "big", actor="setup")
    n = 20_000
    r.create_table("t", pa.table({"id": pa.array(range(n), pa.int64()), "price": pa.array([float(i % 100) for i in
                                                                                            range(n)])}), ["id"])
    r.branches.create("feat")
    r.update("t", tbl(id=[7], price=[99.0]), branch="feat")
    t = diff("main", "feat", repo=r, where="price > 50").tables["t"]
    assert keys(t) == [(7, "update")]
    assert t.plan.method == "delta" and t.plan.rows_planned <= 4


# ---------------------------------------------------------------------------------------------- CLI
def one_line_error(res, text: str) -> None:
    assert res.exit_code == 2, (res.exit_code, res.stdout, res.stderr)
    assert "Traceback" not in res.stderr + res.stdout
    assert len(res.stderr_lines) == 1 and res.stderr_lines[0].startswith("error:"), res.stderr
    assert text in res.stderr_lines[0]
    assert res.stdout == ""


def test_cli_text_and_stat(repo, cli):
    base = ("-C", repo.uri, "diff")
    out = cli(*base, "main...feat", "t", "--where", "price > 10", ok=True).stdout
    assert out == ("=== t (modified: +1 -1 ~3)\n"
                   "  ~ id=1: price: 5.0 -> 12.0\n"
                   "  ~ id=2: price: 15.0 -> 9.0\n"
                   "  - id=3\n"
                   "  ~ id=5: price: 30.0 -> 31.0\n"
                   "  + id=6\n")
    stat = cli(*base, "main", "feat", "--table", "t", "--where", "price < 3", "--stat", ok=True).stdout
    assert stat == "t                    modified  +1 -0 ~1 (1 cells: price 1)\n"
    assert cli(*base, "main...feat", "t", "--where", "name = 'zz'", ok=True).stdout == "no changes\n"


def test_cli_json_jsonl_and_columns(repo, cli, tmp_path):
    base = ("-C", repo.uri, "diff", "main...feat", "t", "--where", "price > 10")
    doc = cli(*base, "--json", ok=True).json()
    assert doc["where"] == "price > 10"
    assert [(r["id"], r["change"]) for r in doc["tables"]["t"]["rows"]] == ABOVE_10
    assert (doc["tables"]["t"]["inserted"], doc["tables"]["t"]["deleted"], doc["tables"]["t"]["updated"]) == (1, 1, 3)
    lines = [json.loads(x) for x in cli(*base, "--format", "jsonl", ok=True).stdout.splitlines()]
    assert [(r["id"], r["change"]) for r in lines] == ABOVE_10
    narrow = cli(*base, "--columns", "name", "--json", ok=True).json()["tables"]["t"]["rows"]
    assert narrow[0]["before"] == {"name": "a"} and narrow[0]["after"] == {"name": "a"}
    changed = cli("-C", repo.uri, "diff", "main...feat", "t", "--where", "name = 'b'", "--columns", "changed",
                  "--json", ok=True).json()["tables"]["t"]["rows"]
    assert changed == [{"id": 2, "change": "update", "changed_columns": ["price"], "before": {"price": 15.0},
                        "after": {"price": 9.0}}]
    stat = cli(*base, "--stat", "--json", ok=True).json()
    assert stat[0]["updated"] == 3 and stat[0]["columns"] == {"price": 3}
    cli(*base, "-o", tmp_path / "rows.parquet", ok=True)
    import pyarrow.parquet as pq

    assert pq.read_table(tmp_path / "rows.parquet").column("id").to_pylist() == [k for k, _ in ABOVE_10]


def test_cli_two_dot_range_and_named_tables(repo, cli):
    rows = cli("-C", repo.uri, "diff", "main..feat", "t", "--where", "price > 35", "--json",
               ok=True).json()["tables"]["t"]["rows"]
    assert [(r["id"], r["change"]) for r in rows] == [(6, "insert"), (9, "update")]
    both = cli("-C", repo.uri, "diff", "main", "feat", "--where", "true", "--name-only", ok=True).stdout
    assert both.split() == ["t", "u"]


@pytest.mark.parametrize("where, message", HOSTILE + [
    ("price > 10", "table u"),  # a filter for t, on a diff of every table
])
def test_cli_hostile_filters_one_line_exit_2(repo, cli, where, message):
    tables = () if message == "table u" else ("t",)
    one_line_error(cli("-C", repo.uri, "diff", "main...feat", *tables, "--where", where), message)


def test_cli_where_refused_before_the_refs_are_resolved(repo, cli):
    one_line_error(cli("-C", repo.uri, "diff", "main", "no-such-ref", "t", "--where", "a;b"), "';' at character 2")
    one_line_error(cli("-C", repo.uri, "diff", "main", "feat", "t", "--where", "true", "--engine", "spark"),
                   "local engine")


def test_cli_json_error_is_one_json_line(repo, cli):
    res = cli("-C", repo.uri, "--json", "diff", "main...feat", "t", "--where", "nope = 1")
    assert res.exit_code == 2 and res.stdout == ""
    err = json.loads(res.stderr)
    assert err["exit_code"] == 2 and "No field named nope" in err["error"]
