"""`repo.sql` / `trimerge sql`: one read-only DuckDB query over tables at refs and diffs between refs."""

from __future__ import annotations

import json
import time

import numpy as np
import pyarrow as pa
import pytest

import trimerge
from trimerge.lineage.errors import InvalidOperationError, RefNotFoundError, TableNotFoundError


@pytest.fixture
def shop(tmp_path):
    repo = trimerge.Repository.init(tmp_path / "repo")
    repo.create_table("p", pa.table({"sku": ["A", "B", "C"], "price": [1.0, 2.0, 3.0]}), primary_key="sku")
    repo.tags.create("v1", "main")
    repo.branches.create("f", from_ref="main")
    repo.upsert("p", pa.table({"sku": ["A", "D"], "price": [1.5, 4.0]}), branch="f")
    repo.delete("p", "sku = 'B'", branch="f")
    repo.upsert("p", pa.table({"sku": ["C"], "price": [3.5]}))  # main moves too
    return repo


def test_plain_names_read_the_ref(shop):
    assert shop.sql("SELECT sum(price) AS s FROM p").to_pylist() == [{"s": 6.5}]
    assert shop.sql("SELECT sku FROM p ORDER BY sku", ref="f").column("sku").to_pylist() == ["A", "C", "D"]


def test_table_at_ref_names(shop):
    got = shop.sql('SELECT a.sku, a.price AS old, b.price AS new FROM "p@v1" a JOIN "p@f" b USING (sku) '
                   "WHERE a.price <> b.price ORDER BY sku")
    assert got.to_pylist() == [{"sku": "A", "old": 1.0, "new": 1.5}]
    assert shop.sql('SELECT count(*) AS n FROM "p@main~1"').to_pylist() == [{"n": 3}]


def test_diff_table_function(shop):
    two_dot = shop.sql("SELECT * FROM diff('main', 'f', 'p') ORDER BY sku").to_pylist()
    assert [(r["sku"], r["change"]) for r in two_dot] == [("A", "update"), ("B", "delete"), ("C", "update"),
                                                          ("D", "insert")]
    assert two_dot[0]["before_price"] == 1.0 and two_dot[0]["after_price"] == 1.5
    three_dot = shop.sql("SELECT sku, change FROM diff('main...f', 'p') d WHERE d.change <> 'update' ORDER BY sku")
    assert three_dot.to_pylist() == [{"sku": "B", "change": "delete"}, {"sku": "D", "change": "insert"}]


@pytest.mark.parametrize("query, error", [
    ("DELETE FROM p", "nothing may write"),
    ("SELECT 1; SELECT 2", "exactly one query"),
    ("SELECT * FROM p; DROP TABLE p", "exactly one query"),
    ("COPY p TO '/tmp/out.csv'", "nothing may write"),
    ("ATTACH 'other.db'", "nothing may write"),
    ("SELECT * FROM read_csv('/etc/passwd')", "unknown table function 'read_csv'"),
    ("SELECT * FROM diff('main')", "diff takes"),
    ("SELECT * FROM main.p", "name a table"),
    ("SELECT * FROM p WHERE", "does not parse"),
    ("", "non-empty"),
])
def test_bad_queries_are_one_clear_error(shop, query, error):
    with pytest.raises(InvalidOperationError, match=error):
        shop.sql(query)


def test_unknown_tables_and_refs(shop):
    with pytest.raises(TableNotFoundError):
        shop.sql("SELECT * FROM nosuch")
    with pytest.raises(RefNotFoundError):
        shop.sql('SELECT * FROM "p@nosuch"')


def test_no_file_access_from_scalar_functions(shop, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("x")
    with pytest.raises(InvalidOperationError):
        shop.sql(f"SELECT content FROM read_text('{secret}')")
    with pytest.raises(trimerge.TrimergeError):  # a quoted path is a table name, and no table has it
        shop.sql(f"SELECT (SELECT count(*) FROM '{secret}') AS n FROM p")


def test_a_query_past_the_time_limit_is_stopped(tmp_path):
    repo = trimerge.Repository.init(tmp_path / "repo")
    repo.create_table("big", pa.table({"id": pa.array(np.arange(20_000), pa.int64())}), primary_key="id")
    repo.settings.set("checks.timeout", 1)
    t0 = time.perf_counter()
    with pytest.raises(InvalidOperationError, match="did not finish within 1 s"):
        repo.sql("SELECT count(*) FROM big a, big b, big c WHERE a.id + b.id + c.id = -1")
    assert time.perf_counter() - t0 < 15


def test_cli_sql(shop, cli):
    path = str(shop.path)
    rows = json.loads(cli("-C", path, "--json", "sql", "SELECT sku FROM p ORDER BY sku", "--ref", "f", ok=True).stdout)
    assert [r["sku"] for r in rows] == ["A", "C", "D"]
    text = cli("-C", path, "sql", "SELECT change, count(*) AS n FROM diff('v1', 'f', 'p') GROUP BY 1 ORDER BY 1",
               ok=True).stdout
    assert "delete" in text and "insert" in text
    bad = cli("-C", path, "sql", "DROP TABLE p")
    assert bad.exit_code == 2 and len(bad.stderr.strip().splitlines()) == 1 and bad.stdout == ""
    assert shop.read("p").num_rows == 3
