"""Column types round-trip as the user wrote them (issue 29, item 2): ``large_string``,
``large_binary`` (also nested) are stored and read back as such, diffed and merged — also against
a plain ``string`` side; ``string_view``/``binary_view``, which Lance would store as the plain
types, are refused where they would define a schema (and cast where data goes into a table)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.feather as feather
import polars as pl
import pytest

import trimerge
from trimerge.diff import diff
from trimerge.lineage.errors import SchemaMismatchError
from trimerge.merge import merge

WIDE = pa.schema([
    pa.field("k", pa.large_string(), nullable=False),
    pa.field("s", pa.large_string()),
    pa.field("b", pa.large_binary()),
    pa.field("l", pa.list_(pa.large_string())),
    pa.field("st", pa.struct([("x", pa.large_string()), ("y", pa.int64())])),
])


def wide_rows(keys, tag="") -> pa.Table:
    return pa.table({"k": keys, "s": [f"s{k}{tag}" for k in keys], "b": [f"b{k}".encode() for k in keys],
                     "l": [[k, tag] for k in keys], "st": [{"x": k + tag, "y": 1} for k in keys]}, schema=WIDE)


def test_large_types_round_trip_through_writes_diff_and_merge(tmp_path):
    repo = trimerge.Repository.init(tmp_path / "r")
    repo.create_table("t", wide_rows(["a", "b", "c"]), primary_key="k")
    assert repo.schema("t") == WIDE
    assert repo.read("t").schema == WIDE
    assert repo.dataset("t").schema == WIDE
    repo.branches.create("feat", from_ref="main")
    # Plain-typed data (and a polars frame) go into the wide table: cast, the schema stays.
    plain = pa.table({"k": ["b"], "s": ["changed"], "b": [b"BB"], "l": [["x"]], "st": [{"x": "q", "y": 2}]})
    repo.upsert("t", plain, branch="feat", actor="a")
    repo.upsert("t", pl.DataFrame({"k": ["d"], "s": ["new"], "b": [b"d"], "l": [["d"]],
                                   "st": [{"x": "d", "y": 4}]}), branch="feat", actor="a")
    repo.delete("t", "k = 'c'", branch="main", actor="a")
    assert repo.read("t", ref="feat").schema == WIDE
    d = diff("main...feat", repo=repo).tables["t"]
    assert not d.schema_changes
    got = {r["k"]: (r["change"], sorted(r["changed_columns"] or [])) for r in d.rows().to_pylist()}
    assert got == {"b": ("update", ["b", "l", "s", "st"]), "d": ("insert", [])}
    result = merge("feat", "main", repo=repo)
    assert result.status == "merged"
    out = repo.read("t")
    assert out.schema == WIDE
    assert sorted(out.column("k").to_pylist()) == ["a", "b", "d"]
    assert repo.read("t", ref="main~1").schema == WIDE


def test_a_widening_by_overwrite_is_kept_and_compared_by_value(tmp_path):
    """One side rewrites a string table with large_string data (the same values but one): diff
    reports the schema change and only the row whose value changed; the merge keeps the widening
    and the other side's row change."""
    repo = trimerge.Repository.init(tmp_path / "r")
    repo.create_table("t", pa.table({"k": [1, 2, 3], "v": ["x", "y", "z"]}), primary_key="k")
    assert repo.schema("t").field("v").type == pa.string()
    repo.branches.create("wide", from_ref="main")
    repo.overwrite("t", pa.table({"k": [1, 2, 3], "v": pa.array(["x", "Y", "z"], pa.large_string())}),
                   branch="wide", actor="a")
    assert repo.schema("t", "wide").field("v").type == pa.large_string()
    repo.upsert("t", pa.table({"k": [3], "v": ["zz"]}), branch="main", actor="a")
    d = diff("main...wide", repo=repo).tables["t"]
    assert [c.column for c in d.schema_changes] == ["v"]
    assert {r["k"]: r["change"] for r in d.rows().to_pylist()} == {2: "update"}
    result = merge("wide", "main", repo=repo)
    assert result.status == "merged"
    out = repo.read("t")
    assert out.schema.field("v").type == pa.large_string()
    assert dict(zip(out.column("k").to_pylist(), out.column("v").to_pylist())) == {1: "x", 2: "Y", 3: "zz"}


def test_view_types_are_refused_where_they_define_a_schema(tmp_path):
    repo = trimerge.Repository.init(tmp_path / "r")
    view = pa.table({"k": [1], "v": pa.array(["x"], pa.string_view())})
    with pytest.raises(SchemaMismatchError, match="string_view.*Lance stores as string"):
        repo.create_table("t", view, primary_key="k")
    assert repo.tables() == []
    repo.create_table("t", pa.table({"k": [1], "v": ["x"]}), primary_key="k")
    tip = repo.branches.get("main").commit_id
    with pytest.raises(SchemaMismatchError, match="binary_view"):
        repo.add_columns("t", [pa.field("w", pa.list_(pa.binary_view()))])
    with pytest.raises(SchemaMismatchError, match="string_view"):
        repo.overwrite("t", view)
    assert repo.branches.get("main").commit_id == tip
    # Data into an existing table is cast to the stored type.
    repo.upsert("t", pa.table({"k": [2], "v": pa.array(["y"], pa.string_view())}))
    assert repo.read("t").schema.field("v").type == pa.string()
    assert repo.read("t").num_rows == 2


def test_polars_and_text_files_store_plain_strings_arrow_files_keep_theirs(tmp_path, cli):
    repo = trimerge.Repository.init(tmp_path / "r")
    repo.create_table("p", pl.DataFrame({"k": ["a"], "v": ["x"]}), primary_key="k")
    assert repo.schema("p").field("v").type == pa.string()  # polars' strings have no width of their own
    (tmp_path / "in.csv").write_text("k,v\na,x\n")
    feather.write_feather(pa.table({"k": pa.array(["a"], pa.large_string()), "v": pa.array([b"x"], pa.large_binary())}),
                          str(tmp_path / "in.arrow"))
    cli("-C", tmp_path / "r", "table", "create", "c", tmp_path / "in.csv", "-k", "k", ok=True)
    cli("-C", tmp_path / "r", "table", "create", "f", tmp_path / "in.arrow", "-k", "k", ok=True)
    repo = trimerge.Repository.open(tmp_path / "r")
    assert repo.schema("c").field("v").type == pa.string()
    assert repo.schema("f").field("k").type == pa.large_string()
    assert repo.schema("f").field("v").type == pa.large_binary()
