"""`repo.sql` / `trimerge sql` never fail on column names (issue 50, item 4).

DuckDB lets a query name two columns alike (``SELECT [1,2] AS a, [3] AS a``, a self-join's ``*``):
the rows come back with the repeats renamed ``a_1``, ``a_2``, … — in the API's Arrow table and in
every output format of the CLI, none dropping a column. Nested values go into CSV as JSON text; a
name a Lance dataset cannot hold is refused in one line.
"""

from __future__ import annotations

import json

import lance
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import trimerge
from trimerge.lineage.tables.sql import unique_names
from conftest import run_trimerge_subprocess


@pytest.fixture
def vectors(tmp_path):
    """Table ``v`` (key ``id``, a 2-float vector ``emb``) on main, two commits."""
    repo = trimerge.Repository.init(tmp_path / "repo")
    emb = pa.list_(pa.float32(), 2)
    repo.create_table("v", pa.table({"id": [1, 2], "emb": pa.array([[1.0, 2.0], [3.0, 4.0]], emb)}), primary_key="id")
    repo.upsert("v", pa.table({"id": [2], "emb": pa.array([[30.0, 40.0]], emb)}))
    return repo


def test_repeated_list_columns_are_renamed_in_the_api(vectors):
    got = vectors.sql("SELECT [1,2] AS a, [3] AS a")
    assert got.column_names == ["a", "a_1"]
    assert got.to_pylist() == [{"a": [1, 2], "a_1": [3]}]


def test_a_new_name_never_takes_an_existing_one(vectors):
    got = vectors.sql("SELECT 1 AS a, 2 AS a, 3 AS a_1, 4 AS a")
    assert got.column_names == ["a", "a_2", "a_1", "a_3"]
    assert got.to_pylist() == [{"a": 1, "a_2": 2, "a_1": 3, "a_3": 4}]


def test_a_self_join_at_another_ref_keeps_both_sides(vectors):
    got = vectors.sql('SELECT * FROM v a JOIN "v@main~1" b ON a.id = b.id ORDER BY a.id')
    assert got.column_names == ["id", "emb", "id_1", "emb_1"]
    rows = got.to_pylist()
    assert rows[1] == {"id": 2, "emb": [30.0, 40.0], "id_1": 2, "emb_1": [3.0, 4.0]}


@given(st.lists(st.sampled_from(["a", "a_1", "a_2", "b", "a_1_1", "A"]), min_size=1, max_size=12))
@settings(max_examples=300, deadline=None)
def test_unique_names_property(names):
    out = unique_names(names)
    assert len(out) == len(names) and len(set(out)) == len(out)
    first = {}
    for i, n in enumerate(names):
        first.setdefault(n, i)
    for i, (old, new) in enumerate(zip(names, out)):
        if first[old] == i:
            assert new == old  # the first of equal names keeps it
        else:
            assert new.startswith(old + "_") and new[len(old) + 1:].isdigit() and new not in names


QUERY = "SELECT [1,2] AS a, [3] AS a, {'x': 1} AS s, 7 AS n, 8 AS n"
EXPECTED = {"a": [1, 2], "a_1": [3], "s": {"x": 1}, "n": 7, "n_1": 8}


def test_cli_text_and_json_formats_keep_every_column(vectors, cli):
    path = str(vectors.path)
    text = cli("-C", path, "sql", QUERY, ok=True)
    assert "a_1" in text.stdout and "n_1" in text.stdout and text.stderr == ""
    assert cli("-C", path, "--json", "sql", QUERY, ok=True).json() == [EXPECTED]
    assert cli("-C", path, "sql", QUERY, "--format", "json", ok=True).json() == [EXPECTED]
    jsonl = cli("-C", path, "sql", QUERY, "--format", "jsonl", ok=True).stdout
    assert [json.loads(line) for line in jsonl.splitlines()] == [EXPECTED]


def test_cli_csv_writes_nested_values_as_json_text(vectors, cli, tmp_path):
    path = str(vectors.path)
    out = cli("-C", path, "sql", QUERY, "--format", "csv", ok=True).stdout.splitlines()
    assert out[0] == "a,a_1,s,n,n_1"
    assert out[1] == '"[1, 2]",[3],"{""x"": 1}",7,8'
    # `read` of a vector table shares the writer: the vector column used to stop it (exit 4)
    cli("-C", path, "read", "v", "-o", tmp_path / "v.csv", ok=True)
    assert (tmp_path / "v.csv").read_text().splitlines()[1:] == ['1,"[1.0, 2.0]"', '2,"[30.0, 40.0]"']


def test_cli_parquet_and_lance_keep_every_column(vectors, cli, tmp_path):
    path = str(vectors.path)
    cli("-C", path, "sql", QUERY, "-o", tmp_path / "out.parquet", ok=True)
    assert pq.read_table(tmp_path / "out.parquet").to_pylist() == [EXPECTED]
    cli("-C", path, "sql", 'SELECT * FROM v a JOIN "v@main~1" b USING (id) ORDER BY id', "-o", tmp_path / "out.lance",
        ok=True)
    written = lance.dataset(str(tmp_path / "out.lance")).to_table()
    assert written.column_names == ["id", "emb", "emb_1"]
    assert written.num_rows == 2


def test_a_name_lance_refuses_is_one_line_and_writes_nothing(vectors, cli, tmp_path):
    res = cli("-C", str(vectors.path), "sql", 'SELECT 1 AS "a.b"', "-o", tmp_path / "dot.lance")
    assert res.exit_code == 2 and len(res.stderr_lines) == 1 and "'a.b'" in res.stderr
    assert not (tmp_path / "dot.lance").exists()


def test_the_installed_command_exits_0_on_repeated_list_names(vectors):
    """The issue's case, as a user runs it (a real process, its real exit code)."""
    res = run_trimerge_subprocess("-C", vectors.path, "--json", "sql", "SELECT [1,2] AS a, [3] AS a")
    assert res.exit_code == 0, res.stderr
    assert json.loads(res.stdout) == [{"a": [1, 2], "a_1": [3]}]
