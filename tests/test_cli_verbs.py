"""CLI verbs users expect (table alter, load --mode update, HEAD, read --sort) and the library pieces
the CLI now stands on (graph layout, history filter, TableDiff.head, diff writers)."""

from __future__ import annotations

import json

import lance
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import trimerge
from trimerge.diff import diff, writers
from trimerge.lineage.history.graphlayout import graph_lines

from conftest import T


@pytest.fixture
def R(tmp_path, cli):
    repo = trimerge.Repository.init(tmp_path / "repo")
    repo.create_table("t", T(id=[3, 1, 2], v=["c", "a", "b"], n=[30, 10, 20]), primary_key="id")
    return repo


def test_table_alter_adds_drops_and_widens_in_one_commit(R, cli):
    res = cli("-C", R.uri, "table", "alter", "t", "--add-column", "note:string", "--add-column", "k:int32",
              "--drop-column", "v", ok=True)
    assert "Alter table t" in res.stdout
    cli("-C", R.uri, "table", "alter", "t", "--widen", "k:int64", "--widen", "n:int64", ok=True)
    schema = R.schema("t")
    assert schema.names == ["id", "n", "note", "k"] and schema.field("k").type == pa.int64()
    assert len(R.log()) == 4  # root, create, two alters
    for bad in (["--widen", "n:int8"], ["--add-column", "x:nosuch"], ["--add-column", "nocolon"], [],
                ["--drop-column", "id"], ["--add-column", "a.b:int64"]):
        res = cli("-C", R.uri, "table", "alter", "t", *bad)
        assert res.exit_code == 2 and res.stderr.startswith("error:"), (bad, res.stderr)
    assert len(R.log()) == 4


def test_load_update_changes_only_the_given_columns(R, cli, tmp_path):
    csv = tmp_path / "upd.csv"
    csv.write_text("id,n\n2,99\n3,98\n")
    cli("-C", R.uri, "load", "t", str(csv), "--mode", "update", ok=True)
    assert sorted(R.read("t").to_pylist(), key=lambda r: r["id"]) == [
        {"id": 1, "v": "a", "n": 10}, {"id": 2, "v": "b", "n": 99}, {"id": 3, "v": "c", "n": 98}]
    csv.write_text("id,n\n7,1\n")
    res = cli("-C", R.uri, "load", "t", str(csv), "--mode", "update")
    assert res.exit_code == 2 and "do not exist" in res.stderr


def test_head_is_the_current_branch_everywhere(R, cli):
    cli("-C", R.uri, "branch", "create", "dev", ok=True)
    cli("-C", R.uri, "switch", "dev", ok=True)
    cli("-C", R.uri, "delete", "t", "--where", "id = 1", "-b", "HEAD", ok=True)
    assert R.read("t", ref="dev").num_rows == 2 and R.read("t", ref="main").num_rows == 3
    assert cli("-C", R.uri, "rev-parse", "HEAD", ok=True).stdout.strip() == R.resolve("dev").id
    assert cli("-C", R.uri, "rev-parse", "HEAD~1", ok=True).stdout.strip() == R.resolve("main").id
    assert cli("-C", R.uri, "--json", "read", "t", "--ref", "HEAD", "--sort", ok=True).json()[0]["id"] == 2
    cli("-C", R.uri, "switch", "main", ok=True)
    cli("-C", R.uri, "merge", "dev", "--into", "HEAD", ok=True)
    assert R.read("t", ref="main").num_rows == 2
    assert R.log("HEAD")[0].parents[1] == R.resolve("dev").id
    with pytest.raises(trimerge.InvalidNameError):
        R.branches.create("HEAD")


def test_read_sorts_by_key_for_tables_and_keeps_storage_order_otherwise(R, cli):
    table = cli("-C", R.uri, "read", "t", ok=True).stdout
    assert table.index("│ 1") < table.index("│ 2") < table.index("│ 3")
    stored = [r["id"] for r in cli("-C", R.uri, "--json", "read", "t", ok=True).json()]
    assert stored == [3, 1, 2]
    assert [r["id"] for r in cli("-C", R.uri, "--json", "read", "t", "--sort", ok=True).json()] == [1, 2, 3]


# ---------------------------------------------------------------------------------------------- library pieces
class DictGraph:
    """The commit-graph interface over plain dicts (generation and time from the drawing order)."""

    def __init__(self, parents: dict[str, tuple[str, ...]]):
        self._parents = parents
        self._gen: dict[str, int] = {}

    def parents(self, c: str) -> tuple[str, ...]:
        return self._parents[c]

    def generation(self, c: str) -> int:
        if c not in self._gen:
            self._gen[c] = 1 + max((self.generation(p) for p in self._parents[c]), default=0)
        return self._gen[c]

    def created_at(self, c: str) -> float:
        return float(ord(c[0]))


@pytest.mark.parametrize("parents, starts, expected", [
    ({"a": (), "b": ("a",), "c": ("b",)}, ["c"], ["* c", "* b", "* a"]),
    ({"a": (), "b": ("a",), "c": ("a",), "m": ("b", "c")}, ["m"],
     ["*   m", "|\\", "| * c", "* | b", "|/", "* a"]),
    ({"a": (), "b": ("a",), "c": ("a",)}, ["b", "c"], ["* c", "| * b", "|/", "* a"]),
])
def test_graph_layout_on_dicts(parents, starts, expected):
    got = [line.rstrip() for line in graph_lines(DictGraph(parents), starts, label=lambda c: c)]
    assert [" ".join(g.split()) for g in got] == [" ".join(e.split()) for e in expected]


def test_one_history_filter_for_log_and_commit_list(R):
    R.upsert("t", T(id=[4], v=["d"], n=[40]), actor="alice", message="add four")
    R.branches.create("dev")
    R.upsert("t", T(id=[5], v=["e"], n=[50]), branch="dev", actor="bob", message="add five")
    assert [c.message for c in R.log(refs=["main", "dev"], actor="bob")] == ["add five"]
    assert [c.message for c in R.log(refs=["main", "dev"], message="add")] == ["add five", "add four"]
    assert [c.branch for c in R.log("dev", branch="dev")] == ["dev"]
    with pytest.raises(trimerge.TrimergeError):
        R.log(limit=-1)


def test_table_diff_head_and_writers(R, tmp_path):
    R.branches.create("dev")
    R.upsert("t", T(id=[9, 8, 1], v=["i", "h", "A"], n=[90, 80, 11]), branch="dev")
    td = diff("main", "dev", repo=R).tables["t"]
    assert [r["id"] for r in td.head(2).to_pylist()] == [1, 8]
    assert td.head(0).num_rows == 0
    with pytest.raises(trimerge.TrimergeError):
        td.head(-1)
    writers.write(td, str(tmp_path / "d.parquet"), "parquet")
    assert pq.read_table(tmp_path / "d.parquet").num_rows == 3
    writers.write(td, str(tmp_path / "d.lance"), "lance", limit=2)
    assert lance.dataset(str(tmp_path / "d.lance")).count_rows() == 2
    writers.write(td, str(tmp_path / "d.jsonl"), "jsonl", columns=["n"])
    rows = [json.loads(line) for line in (tmp_path / "d.jsonl").read_text().splitlines()]
    assert len(rows) == 3 and all("v" not in (r.get("after") or {}) for r in rows)
    with pytest.raises(trimerge.TrimergeError):
        writers.write(td, str(tmp_path / "x"), "xml")


# ---------------------------------------------------------------------------------------------- issue 12, item 3 (part)
def test_usage_errors_git_also_refuses(R, cli):
    cli("-C", R.uri, "branch", "create", "dev", ok=True)
    for args in (["merge-base", "--is-ancestor", "--all", "main", "dev"],
                 ["merge-base", "--independent", "--all", "main", "dev"],
                 ["merge-base", "--is-ancestor", "--octopus", "main", "dev"],
                 ["revert", "main", "--engine", "spark"], ["cherry-pick", "main", "--engine", "local"]):
        res = cli("-C", R.uri, *args)
        assert res.exit_code == 2 and res.stderr.startswith("error:"), (args, res.stderr)
    assert cli("-C", R.uri, "merge-base", "--octopus", "--all", "main", "dev").exit_code == 0


def test_a_strategy_naming_an_unknown_table_is_an_error(R, cli):
    from trimerge.merge import merge

    R.branches.create("dev")
    R.upsert("t", T(id=[1], v=["dev"], n=[1]), branch="dev")
    R.upsert("t", T(id=[1], v=["main"], n=[2]))
    with pytest.raises(trimerge.TrimergeError, match="nosuch"):
        merge("dev", "main", repo=R, strategy={"nosuch": "source-wins"})
    res = cli("-C", R.uri, "merge", "dev", "--strategy", "nosuch=source-wins")
    assert res.exit_code == 2 and "nosuch" in res.stderr
    assert merge("dev", "main", repo=R, strategy={"t": "source-wins", "*": "dest-wins"}).status == "merged"


@pytest.mark.parametrize("narrow, wide", [(pa.string(), pa.large_string()), (pa.binary(), pa.large_binary())])
def test_a_widening_is_a_schema_change_that_merges_and_reverts_keep(R, narrow, wide):
    from trimerge.merge import merge, revert

    R.create_table("w", pa.table({"id": [1, 2], "x": pa.array([b"a", b"b"] if narrow == pa.binary() else ["a", "b"],
                                                              narrow)}), primary_key="id")
    R.branches.create("dev")
    R.alter_column("w", "x", wide, branch="dev")
    td = diff("main", "dev", repo=R).tables["w"]
    assert td.changed and [(c.kind, c.column) for c in td.schema_changes] == [("type_changed", "x")]
    R.upsert("w", pa.table({"id": [3], "x": pa.array([b"c"] if narrow == pa.binary() else ["c"], narrow)}))
    assert merge("dev", "main", repo=R).status == "merged"
    assert R.schema("w").field("x").type == wide and R.read("w").num_rows == 3
    change = R.upsert("w", pa.table({"id": [4], "x": pa.array([b"d"] if narrow == pa.binary() else ["d"], wide)}))
    revert(change.id, "main", repo=R)
    assert R.schema("w").field("x").type == wide and R.read("w").num_rows == 3


def _rekey(repo, branch, rows, key):
    with repo.transaction(branch) as tx:
        tx.drop_table("k")
        tx.create_table("k", pa.table(rows), key)


def test_primary_key_changes_converge_when_identical_and_conflict_by_column_otherwise(R):
    from trimerge.merge import merge

    R.create_table("k", pa.table({"id": [1, 2, 3], "code": ["a", "b", "c"], "v": [1, 2, 3]}), "id")
    R.branches.create("dev")
    R.branches.create("other")
    _rekey(R, "dev", {"id": [1, 2, 3], "code": ["a", "b", "c"], "v": [1, 20, 3]}, "code")
    _rekey(R, "main", {"id": [1, 2, 3], "code": ["a", "b", "c"], "v": [1, 2, 30]}, "code")
    assert merge("dev", "main", repo=R).status == "merged"
    assert R.primary_key("k") == ("code",)
    assert sorted((r["code"], r["v"]) for r in R.read("k").to_pylist()) == [("a", 1), ("b", 20), ("c", 30)]
    _rekey(R, "other", {"id": [1, 2, 3], "code": ["a", "b", "c"], "v": [1, 2, 3]}, ["id", "code"])
    result = merge("other", "main", repo=R, dry_run=True)
    assert [(c.kind, c.columns) for c in result.conflicts] == [("schema.primary_key", ("code", "id"))]


def test_a_key_column_whose_type_changed_is_a_reported_conflict(R):
    from trimerge.merge import merge

    R.branches.create("dev")
    R.overwrite("t", pa.table({"id": ["1", "2", "3"], "v": ["a", "b", "c"], "n": [10, 20, 30]}), branch="dev")
    R.upsert("t", T(id=[4], v=["d"], n=[40]))
    result = merge("dev", "main", repo=R, dry_run=True)
    assert [(c.kind, c.columns) for c in result.conflicts] == [("schema.primary_key", ("id",))]
    assert merge("dev", "main", repo=R, strategy="source-wins").status == "merged"
    assert R.schema("t").field("id").type in (pa.string(), pa.large_string())


def test_conflict_lines_show_base_dest_and_source_values(R, cli):
    R.branches.create("dev")
    R.upsert("t", T(id=[2], v=["b-dev"], n=[20]), branch="dev")
    R.upsert("t", T(id=[2], v=["b-main" + "x" * 80], n=[20]))
    res = cli("-C", R.uri, "merge", "dev")
    assert res.exit_code == 1
    lines = res.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("CONFLICT row.update_update in t[id=2]"))
    assert lines[at + 1].startswith('    v: base "b", dest "b-mainxxx') and lines[at + 1].endswith('source "b-dev"')
    assert "…" in lines[at + 1] and len(lines[at + 1]) < 120
