"""``trimerge diff`` by example: ranges, every option and output format, exit codes, and bounded
memory (``TRIMERGE_DIFF_MEMORY``) giving the same output as an in-memory diff."""

from __future__ import annotations

import gc
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import trimerge

# ---------------------------------------------------------------------------------------------- helpers

def tbl(**columns) -> pa.Table:
    return pa.table({k: list(v) for k, v in columns.items()})


def assert_one_line_error(res, code=2):
    assert res.exit_code == code, (res.exit_code, res.stdout, res.stderr)
    assert "Traceback" not in res.stderr + res.stdout
    assert len(res.stderr_lines) == 1, res.stderr
    assert res.stderr_lines[0].startswith("error:"), res.stderr
    assert res.stdout == "", res.stdout


def jsonl(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


@pytest.fixture
def R(tmp_path) -> Path:
    """t (key id) and u (key k) and same on main; feature forks, then both sides change:

    feature: t id 1 a 10->11, id 2 deleted, id 5 inserted;
    main:    t id 3 s 'y'->'Y', id 6 inserted; u k 1 v 'a'->'b'."""
    path = tmp_path / "repo"
    repo = trimerge.Repository.init(path, actor="setup")
    with repo.transaction("main", message="base") as tx:
        tx.create_table("t", tbl(id=[1, 2, 3, 4], a=[10, 20, 30, 40], s=["w", "x", "y", "z"]), ["id"])
        tx.create_table("u", tbl(k=[1, 2], v=["a", "c"]), ["k"])
        tx.create_table("same", tbl(k=[1], v=[1.5]), ["k"])
    repo.branches.create("feature", from_ref="main")
    repo.upsert("t", tbl(id=[1, 5], a=[11, 50], s=["w", "v"]), branch="feature")
    repo.delete_keys("t", tbl(id=[2]), branch="feature")
    repo.upsert("t", tbl(id=[3, 6], a=[30, 60], s=["Y", "q"]), branch="main")
    repo.upsert("u", tbl(k=[1], v=["b"]), branch="main")
    return path


TWO_DOT_TEXT = """\
=== t (modified: +1 -2 ~2)
  ~ id=1: a: 10 -> 11
  - id=2
  ~ id=3: s: "Y" -> "y"
  + id=5
  - id=6
=== u (modified: +0 -0 ~1)
  ~ k=1: v: "b" -> "a"
"""

THREE_DOT_TEXT = """\
=== t (modified: +1 -1 ~1)
  ~ id=1: a: 10 -> 11
  - id=2
  + id=5
"""


def open_repo(path: Path) -> trimerge.Repository:
    return trimerge.Repository.open(path, read_only=True)


# ---------------------------------------------------------------------------------------------- ranges and text
def test_two_refs_equal_two_dot_and_differ_from_three_dot(R, cli):
    two = cli("-C", R, "diff", "main", "feature", ok=True)
    dots = cli("-C", R, "diff", "main..feature", ok=True)
    three = cli("-C", R, "diff", "main...feature", ok=True)
    assert two.stdout == TWO_DOT_TEXT
    assert dots.stdout == TWO_DOT_TEXT
    assert three.stdout == THREE_DOT_TEXT
    back = cli("-C", R, "diff", "feature...main", ok=True)
    assert back.stdout == ("=== t (modified: +1 -0 ~1)\n  ~ id=3: s: \"y\" -> \"Y\"\n  + id=6\n"
                           "=== u (modified: +0 -0 ~1)\n  ~ k=1: v: \"a\" -> \"b\"\n")
    assert cli("-C", R, "diff", "main", "main", ok=True).stdout == "no changes\n"
    assert cli("-C", R, "diff", "..feature", ok=True).stdout == TWO_DOT_TEXT  # an empty side is main


def test_default_output_shows_status_and_schema_changes(R, cli):
    repo = trimerge.Repository.open(R)
    repo.add_columns("t", pa.field("n", pa.string()), branch="feature")
    repo.drop_columns("t", ["s"], branch="feature")
    repo.create_table("fresh", tbl(k=["p"], v=[1]), ["k"], branch="feature")
    res = cli("-C", R, "diff", "main...feature", ok=True)
    assert res.stdout == (
        "=== fresh (added: +1 -0 ~0)\n"
        "  + k=\"p\"\n"
        "=== t (modified: +1 -1 ~1)\n"
        "  schema: added n  -> string\n"
        "  schema: dropped s string -> \n"
        "  ~ id=1: a: 10 -> 11\n"
        "  - id=2\n"
        "  + id=5\n")


def test_address_arguments(R, cli, tmp_path):
    res = cli("-C", R, "diff", "main::t", "feature::t", ok=True)
    assert res.stdout == TWO_DOT_TEXT.split("=== u")[0]
    res = cli("-C", R, "diff", "main::u", "feature", ok=True)
    assert res.stdout == "=== u (modified: +0 -0 ~1)\n  ~ k=1: v: \"b\" -> \"a\"\n"
    # A repository-qualified address needs no -C.
    res = cli("diff", f"{R}::main...feature::t", ok=True)
    assert res.stdout == THREE_DOT_TEXT


def test_global_options_before_or_after_the_verb(R, cli):
    a = cli("-C", R, "--json", "diff", "main...feature", ok=True)
    b = cli("diff", "main...feature", "-C", R, "--json", ok=True)
    assert a.json() == b.json()


# ---------------------------------------------------------------------------------------------- --json and formats
def test_json_output_structure(R, cli):
    repo = open_repo(R)
    doc = cli("-C", R, "--json", "diff", "main...feature", ok=True).json()
    assert set(doc) == {"before", "after", "tables"}
    assert doc["before"] == repo.merge_base("main", "feature").id
    assert doc["after"] == repo.resolve("feature").id
    assert sorted(doc["tables"]) == ["same", "t", "u"]
    t = doc["tables"]["t"]
    assert {k: t[k] for k in ("table", "status", "inserted", "deleted", "updated", "cells_changed",
                              "schema_changes")} == {"table": "t", "status": "modified", "inserted": 1,
                                                     "deleted": 1, "updated": 1, "cells_changed": 1,
                                                     "schema_changes": []}
    assert t["plan"]["method"] == "delta"
    assert t["rows"] == [
        {"id": 1, "change": "update", "changed_columns": ["a"], "before": {"a": 10, "s": "w"},
         "after": {"a": 11, "s": "w"}},
        {"id": 2, "change": "delete", "changed_columns": [], "before": {"a": 20, "s": "x"}, "after": None},
        {"id": 5, "change": "insert", "changed_columns": [], "before": None, "after": {"a": 50, "s": "v"}},
    ]
    for name in ("same", "u"):  # unchanged tables: a summary, no rows
        assert doc["tables"][name]["status"] == "unchanged" and "rows" not in doc["tables"][name]
    # --format json without --json is the same document.
    assert cli("-C", R, "diff", "main...feature", "--format", "json", ok=True).json() == doc


def test_format_json_with_table_limit_and_columns(R, cli):
    doc = cli("-C", R, "diff", "main", "feature", "--format", "json", "--table", "t", "--limit", "2",
              "--columns", "s", ok=True).json()
    assert list(doc["tables"]) == ["t"]
    assert doc["tables"]["t"]["inserted"] == 1 and doc["tables"]["t"]["deleted"] == 2  # counts stay whole
    assert doc["tables"]["t"]["rows"] == [
        {"id": 1, "change": "update", "changed_columns": ["a"], "before": {"s": "w"}, "after": {"s": "w"}},
        {"id": 2, "change": "delete", "changed_columns": [], "before": {"s": "x"}, "after": None},
    ]


def test_format_jsonl_to_stdout_and_file(R, cli, tmp_path):
    res = cli("-C", R, "diff", "main", "feature", "--format", "jsonl", ok=True)
    lines = jsonl(res.stdout)
    assert [(r["table"], r.get("id", r.get("k")), r["change"]) for r in lines] == [
        ("t", 1, "update"), ("t", 2, "delete"), ("t", 3, "update"), ("t", 5, "insert"), ("t", 6, "delete"),
        ("u", 1, "update")]
    assert lines[0] == {"table": "t", "id": 1, "change": "update", "changed_columns": ["a"],
                        "before": {"a": 10, "s": "w"}, "after": {"a": 11, "s": "w"}}
    out = tmp_path / "d.jsonl"
    res = cli("-C", R, "diff", "main", "feature", "--format", "jsonl", "-o", out, ok=True)
    assert res.stdout == ""
    assert jsonl(out.read_text()) == lines
    limited = jsonl(cli("-C", R, "diff", "main", "feature", "--format", "jsonl", "--limit", "1",
                        "--columns", "a", ok=True).stdout)
    assert len(limited) == 2  # one row per table
    assert limited[0] == {"table": "t", "id": 1, "change": "update", "changed_columns": ["a"],
                          "before": {"a": 10}, "after": {"a": 11}}
    # u has no column a: its row keeps key, change and changed_columns.
    assert {k: limited[1][k] for k in ("table", "k", "change", "changed_columns")} == {
        "table": "u", "k": 1, "change": "update", "changed_columns": ["v"]}


def test_format_parquet_one_table_is_a_file(R, cli, tmp_path):
    out = tmp_path / "t.parquet"
    res = cli("-C", R, "diff", "main...feature", "--format", "parquet", "-o", out, ok=True)
    assert res.stdout == ""
    table = pq.read_table(out)
    assert table.column_names == ["id", "change", "changed_columns", "before", "after"]
    assert table.schema.field("before").type == pa.struct([("a", pa.int64()), ("s", pa.string())])
    assert table.to_pylist() == [
        {"id": 1, "change": "update", "changed_columns": ["a"], "before": {"a": 10, "s": "w"},
         "after": {"a": 11, "s": "w"}},
        {"id": 2, "change": "delete", "changed_columns": [], "before": {"a": 20, "s": "x"}, "after": None},
        {"id": 5, "change": "insert", "changed_columns": [], "before": None, "after": {"a": 50, "s": "v"}},
    ]
    out2 = tmp_path / "cols.parquet"
    cli("-C", R, "diff", "main...feature", "--format", "parquet", "-o", out2, "--columns", "a", ok=True)
    assert pq.read_table(out2).schema.field("after").type == pa.struct([("a", pa.int64())])


def test_format_parquet_several_tables_is_a_directory(R, cli, tmp_path):
    out = tmp_path / "outdir"
    cli("-C", R, "diff", "main", "feature", "--format", "parquet", "-o", out, ok=True)
    assert sorted(p.name for p in out.iterdir()) == ["t.parquet", "u.parquet"]
    assert [(r["id"], r["change"]) for r in pq.read_table(out / "t.parquet").to_pylist()] == [
        (1, "update"), (2, "delete"), (3, "update"), (5, "insert"), (6, "delete")]
    assert pq.read_table(out / "u.parquet").to_pylist() == [
        {"k": 1, "change": "update", "changed_columns": ["v"], "before": {"v": "b"}, "after": {"v": "a"}}]


def test_table_format_to_a_file(R, cli, tmp_path):
    out = tmp_path / "d.txt"
    res = cli("-C", R, "diff", "main...feature", "-o", out, ok=True)
    assert res.stdout == ""
    assert out.read_text() == THREE_DOT_TEXT
    out_json = tmp_path / "d.json"
    cli("-C", R, "diff", "main...feature", "--format", "json", "-o", out_json, ok=True)
    assert json.loads(out_json.read_text())["tables"]["t"]["inserted"] == 1


def test_format_parquet_respects_limit(R, cli, tmp_path):
    out = tmp_path / "t.parquet"
    cli("-C", R, "diff", "main", "feature", "--table", "t", "--format", "parquet", "-o", out, "--limit", "2",
        ok=True)
    assert [(r["id"], r["change"]) for r in pq.read_table(out).to_pylist()] == [(1, "update"), (2, "delete")]


def test_parquet_with_columns_absent_from_a_table_is_not_an_internal_error(R, cli, tmp_path):
    out = tmp_path / "x.parquet"
    res = cli("-C", R, "diff", "main", "feature", "--table", "u", "--format", "parquet", "-o", out,
              "--columns", "a")
    assert "internal error" not in res.stderr
    assert res.exit_code in (0, 2), res.stderr
    if res.exit_code == 0:
        assert [(r["k"], r["change"]) for r in pq.read_table(out).to_pylist()] == [(1, "update")]


# ---------------------------------------------------------------------------------------------- --stat, --name-only, --table, --limit
def test_stat(R, cli, tmp_path):
    res = cli("-C", R, "diff", "main", "feature", "--stat", ok=True)
    assert res.stdout == ("t                    modified  +1 -2 ~2 (2 cells: a 1, s 1)\n"
                          "u                    modified  +0 -0 ~1 (1 cells: v 1)\n")
    stat = cli("-C", R, "diff", "main...feature", "--stat", "--json", ok=True).json()
    # the shape of a table in `--json diff` (issue 54): counts, columns as an object, lists of changes
    whole = cli("-C", R, "--json", "diff", "main...feature", ok=True).json()["tables"]
    for t in stat:  # the plan's figures depend on whether rows were built; its keys do not
        full = {k: v for k, v in whole[t["table"]].items() if k != "rows"}
        assert {**t, "plan": t["plan"]["method"]} == {**full, "plan": full["plan"]["method"]}
        assert t["plan"].keys() == full["plan"].keys()
    assert [(t["table"], t["inserted"], t["deleted"], t["updated"], t["columns"], t["schema_changes"],
             t["plan"]["method"]) for t in stat] == [("same", 0, 0, 0, {}, [], "none"), ("t", 1, 1, 1, {"a": 1}, [], "delta"),
                                                     ("u", 0, 0, 0, {}, [], "none")]
    assert jsonl(cli("-C", R, "diff", "main...feature", "--stat", "--format", "jsonl", ok=True).stdout) == stat
    rows = [  # tabular formats keep the flat columns
        {"table": "same", "status": "unchanged", "inserted": 0, "deleted": 0, "updated": 0, "cells_changed": 0,
         "schema_changes": 0, "index_changes": 0, "method": "none", "columns": ""},
        {"table": "t", "status": "modified", "inserted": 1, "deleted": 1, "updated": 1, "cells_changed": 1,
         "schema_changes": 0, "index_changes": 0, "method": "delta", "columns": "a 1"},
        {"table": "u", "status": "unchanged", "inserted": 0, "deleted": 0, "updated": 0, "cells_changed": 0,
         "schema_changes": 0, "index_changes": 0, "method": "none", "columns": ""},
    ]
    out = tmp_path / "stat.parquet"
    cli("-C", R, "diff", "main...feature", "--stat", "--format", "parquet", "-o", out, ok=True)
    assert pq.read_table(out).to_pylist() == rows
    repo = trimerge.Repository.open(R)
    repo.add_columns("t", pa.field("n", pa.int64()), branch="feature")
    res = cli("-C", R, "diff", "main...feature", "--stat", ok=True)
    assert res.stdout == "t                    modified  +1 -1 ~1 (1 cells: a 1, schema changed)\n"


def test_stat_format_json_prints_the_stat(R, cli):
    res = cli("-C", R, "diff", "main...feature", "--stat", "--format", "json", ok=True)
    assert [r["table"] for r in json.loads(res.stdout)] == ["same", "t", "u"]


def test_name_only(R, cli):
    assert cli("-C", R, "diff", "main", "feature", "--name-only", ok=True).stdout == "t\nu\n"
    assert cli("-C", R, "diff", "main...feature", "--name-only", ok=True).stdout == "t\n"
    assert cli("-C", R, "diff", "main...feature", "--name-only", "--json", ok=True).json() == ["t"]
    assert cli("-C", R, "diff", "main", "main", "--name-only", ok=True).stdout == ""
    assert cli("-C", R, "diff", "main", "main", "--name-only", "--json", ok=True).json() == []


def test_name_only_skips_tables_without_real_changes(R, cli):
    repo = trimerge.Repository.open(R)
    repo.overwrite("same", tbl(k=[1], v=[1.5]), branch="feature")  # same values rewritten
    from trimerge.diff import diff
    assert diff("main...feature", repo=open_repo(R)).changed_tables() == ["t"]
    assert cli("-C", R, "diff", "main...feature", "--name-only", ok=True).stdout == "t\n"


def test_noop_rewrite_shows_no_rows(R, cli):
    repo = trimerge.Repository.open(R)
    repo.overwrite("same", tbl(k=[1], v=[1.5]), branch="feature")
    doc = cli("-C", R, "diff", "main...feature", "--json", "--table", "same", ok=True).json()
    same = doc["tables"]["same"]
    assert (same["inserted"], same["deleted"], same["updated"], same["cells_changed"]) == (0, 0, 0, 0)
    assert same.get("rows", []) == []
    assert cli("-C", R, "diff", "main...feature", "--table", "same", "--format", "jsonl", ok=True).stdout == ""


def test_table_option_is_repeatable(R, cli):
    assert cli("-C", R, "diff", "main", "feature", "--table", "u", ok=True).stdout == \
        "=== u (modified: +0 -0 ~1)\n  ~ k=1: v: \"b\" -> \"a\"\n"
    doc = cli("-C", R, "--json", "diff", "main", "feature", "--table", "u", "--table", "same", ok=True).json()
    assert sorted(doc["tables"]) == ["same", "u"]


def test_limit_and_columns_in_the_table_format(R, cli):
    res = cli("-C", R, "diff", "main", "feature", "--limit", "2", ok=True)
    assert res.stdout == (
        "=== t (modified: +1 -2 ~2)\n"
        "  ~ id=1: a: 10 -> 11\n"
        "  - id=2\n"
        "  ... 3 more rows (use --limit or --format)\n"
        "=== u (modified: +0 -0 ~1)\n"
        "  ~ k=1: v: \"b\" -> \"a\"\n")
    res = cli("-C", R, "diff", "main", "feature", "--limit", "0", "--table", "t", ok=True)
    assert res.stdout == "=== t (modified: +1 -2 ~2)\n  ... 5 more rows (use --limit or --format)\n"
    # --columns s: the update of a (not shown) keeps its line without cells; s's update is shown.
    res = cli("-C", R, "diff", "main", "feature", "--columns", "s", "--table", "t", ok=True)
    assert res.stdout.splitlines()[1:4] == ["  ~ id=1: ", "  - id=2", "  ~ id=3: s: \"Y\" -> \"y\""]


def _many(tmp_path: Path, n: int = 70) -> Path:
    path = tmp_path / "many"
    repo = trimerge.Repository.init(path)
    repo.create_table("t", tbl(id=list(range(n)), v=[f"v{i}" for i in range(n)], x=[i * 0.25 for i in range(n)]),
                      ["id"])
    repo.branches.create("feature", from_ref="main")
    repo.upsert("t", tbl(id=list(range(0, n, 2)), v=["X"] * len(range(0, n, 2)),
                         x=[i * 0.25 for i in range(0, n, 2)]), branch="feature")
    repo.delete("t", "id % 5 = 1", branch="feature")
    repo.append("t", tbl(id=list(range(n, n + 25)), v=["new"] * 25, x=[None] * 25), branch="feature")
    return path


def test_table_format_shows_fifty_rows_then_a_count(tmp_path, cli):
    path = _many(tmp_path)
    res = cli("-C", path, "diff", "main", "feature", ok=True)
    lines = res.stdout.splitlines()
    # 28 updates (even ids, less the 7 deleted) + 14 deletes (id % 5 = 1) + 25 inserts = 67 rows.
    assert lines[0] == "=== t (modified: +25 -14 ~28)"
    assert len(lines) == 1 + 50 + 1
    assert lines[1] == "  ~ id=0: v: \"v0\" -> \"X\""
    assert lines[2] == "  - id=1"
    assert lines[-1] == "  ... 17 more rows (use --limit or --format)"


# ---------------------------------------------------------------------------------------------- errors
@pytest.mark.parametrize("args, fragment", [
    (("main", "nope"), "nope"),
    (("nope...main",), "nope"),
    (("main", "feature", "--table", "zz"), "zz"),
    (("main.feature",), "not a range"),
    (("main", "feature", "main"), "no table main"),  # names after the refs are tables
    (("main", "feature", "--format", "xml"), "xml"),
    (("main", "feature", "--limit", "many"), "many"),
    (("main", "feature", "--format", "parquet"), "-o"),
    (("::t", "feature"), "address"),
    ((), "Missing argument"),
])
def test_bad_input_is_one_line_and_exit_2(R, cli, args, fragment):
    res = cli("-C", R, "diff", *args)
    assert_one_line_error(res, 2)
    assert fragment in res.stderr


def test_not_a_repository_is_exit_2(tmp_path, cli):
    res = cli("-C", tmp_path / "nowhere", "diff", "main", "feature")
    assert_one_line_error(res, 2)
    assert "no trimerge repository" in res.stderr


def test_real_process_exit_codes(R, run_trimerge):
    res = run_trimerge("-C", R, "diff", "main", "nope")
    assert_one_line_error(res, 2)
    res = run_trimerge("-C", R, "diff", "main...feature", "--name-only")
    assert (res.exit_code, res.stdout, res.stderr) == (0, "t\n", "")


def test_dropped_table_cli(R, cli):
    trimerge.Repository.open(R).drop_table("u", branch="feature")
    res = cli("-C", R, "diff", "main...feature")
    assert res.exit_code == 0, res.stderr
    assert res.stdout == THREE_DOT_TEXT + "=== u (dropped: +0 -2 ~0)\n  - k=1\n  - k=2\n"


def test_malformed_memory_budget_is_bad_input(R, cli):
    res = cli("-C", R, "diff", "main", "feature", env={"TRIMERGE_DIFF_MEMORY": "lots"})
    assert "Traceback" not in res.stderr
    assert len(res.stderr_lines) == 1
    assert res.exit_code == 2, res.stderr


# ---------------------------------------------------------------------------------------------- bounded memory
SPILL = {"TRIMERGE_DIFF_MEMORY": "1"}


def test_spilled_diff_gives_the_same_output(tmp_path, cli):
    path = _many(tmp_path)
    spill_dir = tmp_path / "spill"
    spill_dir.mkdir()
    spill = {**SPILL, "TRIMERGE_SPILL_DIR": str(spill_dir)}
    base = ("-C", path, "diff", "main", "feature")

    # jsonl: the same lines (order within the stream may differ: buckets).
    mem = cli(*base, "--format", "jsonl", ok=True).stdout.splitlines()
    disk = cli(*base, "--format", "jsonl", ok=True, env=spill).stdout.splitlines()
    assert len(mem) == 67 and sorted(disk) == sorted(mem)
    assert sorted(cli(*base, "--format", "jsonl", "--columns", "v", ok=True, env=spill).stdout.splitlines()) == \
        sorted(cli(*base, "--format", "jsonl", "--columns", "v", ok=True).stdout.splitlines())

    # parquet through the streaming writer: the same rows once sorted by key.
    cli(*base, "--format", "parquet", "-o", tmp_path / "mem.parquet", ok=True)
    cli(*base, "--format", "parquet", "-o", tmp_path / "disk.parquet", ok=True, env=spill)
    a, b = pq.read_table(tmp_path / "mem.parquet"), pq.read_table(tmp_path / "disk.parquet")
    assert a.schema == b.schema and a.num_rows == b.num_rows == 67
    assert b.sort_by("id").to_pylist() == a.sort_by("id").to_pylist()

    # json and --stat: identical documents (rows() is sorted by key either way).
    assert cli(*base, "--json", ok=True, env=spill).json() == cli(*base, "--json", ok=True).json()
    assert cli(*base, "--stat", ok=True, env=spill).stdout == cli(*base, "--stat", ok=True).stdout

    # The table format and --limit show the first rows by key, spilled or not.
    mem_t = cli(*base, ok=True).stdout.splitlines()
    disk_t = cli(*base, ok=True, env=spill).stdout.splitlines()
    assert disk_t == mem_t and mem_t[-1] == "  ... 17 more rows (use --limit or --format)"
    assert len(mem_t) == 52
    limited = cli(*base, "--format", "jsonl", "--limit", "5", ok=True, env=spill).stdout
    assert limited == cli(*base, "--format", "jsonl", "--limit", "5", ok=True).stdout
    assert len(jsonl(limited)) == 5

    gc.collect()
    assert [p.name for p in spill_dir.iterdir() if p.name.startswith("trimerge-diff-")] == []


def test_spilled_diff_of_several_tables_to_a_parquet_directory(R, cli, tmp_path):
    cli("-C", R, "diff", "main", "feature", "--format", "parquet", "-o", tmp_path / "mem", ok=True)
    cli("-C", R, "diff", "main", "feature", "--format", "parquet", "-o", tmp_path / "disk", ok=True, env=SPILL)
    for name in ("t.parquet", "u.parquet"):
        a, b = pq.read_table(tmp_path / "mem" / name), pq.read_table(tmp_path / "disk" / name)
        key = a.column_names[0]
        assert b.sort_by(key).to_pylist() == a.sort_by(key).to_pylist() and a.num_rows > 0
    # Everything fits the first 50 rows: the same lines, in bucket order within each table.
    disk = cli("-C", R, "diff", "main", "feature", ok=True, env=SPILL).stdout
    assert sorted(disk.splitlines()) == sorted(TWO_DOT_TEXT.splitlines())
    assert disk.index("=== u") > disk.index("  - id=6")
