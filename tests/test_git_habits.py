"""git and Dolt habits (issue 42): bare `branch`/`tag` list, `log --oneline`, `diff A B TABLE...`,
short ids in blame's text, and `--json` always one JSON document on stdout."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

import trimerge


@pytest.fixture
def two_tables(tmp_path):
    repo = trimerge.Repository.init(tmp_path / "repo")
    repo.create_table("products", pa.table({"sku": ["A", "B"], "name": ["apple", "bread"]}), primary_key="sku")
    repo.create_table("stores", pa.table({"id": [1], "city": ["Oslo"]}), primary_key="id")
    repo.branches.create("feat", from_ref="main")
    repo.upsert("products", pa.table({"sku": ["A"], "name": ["APPLE"]}), branch="feat", message="shout")
    repo.upsert("stores", pa.table({"id": [2], "city": ["Rome"]}), branch="feat")
    repo.tags.create("v1", "main")
    return repo


def test_bare_branch_and_tag_list(two_tables, cli):
    path = str(two_tables.path)
    assert cli("-C", path, "branch", ok=True).stdout == cli("-C", path, "branch", "list", ok=True).stdout
    assert "feat" in cli("-C", path, "branch", ok=True).stdout
    assert cli("-C", path, "tag", ok=True).stdout.startswith("v1\t")
    listed = json.loads(cli("-C", path, "--json", "branch", ok=True).stdout)
    assert {b["name"] for b in listed} == {"main", "feat"} and len(listed[0]["commit"]) == 64


def test_log_oneline(two_tables, cli):
    lines = cli("-C", str(two_tables.path), "log", "--oneline", "feat", ok=True).stdout.splitlines()
    tip = two_tables.resolve("feat")
    assert lines[1] == f"{two_tables.short_id(tip.parents[0])} shout"
    assert lines[0].startswith(two_tables.short_id(tip.id) + " ")
    assert all(len(line.split(" ", 1)[0]) >= 7 for line in lines)


@pytest.mark.parametrize("args", [["main", "feat", "products"], ["main..feat", "products"],
                                  ["main", "feat", "--table", "products"]])
def test_diff_takes_tables_after_the_refs(two_tables, cli, args):
    out = json.loads(cli("-C", str(two_tables.path), "--json", "diff", *args, "--stat", ok=True).stdout)
    assert [r["table"] for r in out if r["status"] != "unchanged"] == ["products"]


def test_diff_with_an_unknown_table_is_one_line(two_tables, cli):
    res = cli("-C", str(two_tables.path), "diff", "main", "feat", "nosuch")
    assert res.exit_code == 2 and len(res.stderr.strip().splitlines()) == 1, res.stderr


def test_blame_text_shows_short_ids_json_full(two_tables, cli):
    path = str(two_tables.path)
    text = cli("-C", path, "blame", "products", "--ref", "feat", ok=True).stdout
    tip = two_tables.resolve("feat~1").id  # "shout" changed products
    assert two_tables.short_id(tip) in text and tip not in text
    rows = json.loads(cli("-C", path, "--json", "blame", "products", "--ref", "feat", ok=True).stdout)
    assert tip in {r["commit"] for r in rows}


def test_json_is_one_document_even_with_reports(two_tables, cli, tmp_path):
    path = str(two_tables.path)
    two_tables.upsert("products", pa.table({"sku": ["A"], "name": ["Apple"]}))
    res = cli("-C", path, "--json", "merge", "feat", "--dry-run", "--report", "markdown")
    assert res.exit_code == 2 and res.stdout == "" and "--report markdown:PATH" in res.stderr
    sarif = cli("-C", path, "--json", "merge", "feat", "--dry-run", "--report", "sarif")
    assert json.loads(sarif.stdout)["version"] == "2.1.0"
    both = cli("-C", path, "--json", "merge", "feat", "--dry-run", "--report", "sarif", "--report", "json")
    assert both.exit_code == 2 and both.stdout == ""
    to_file = cli("-C", path, "--json", "merge", "feat", "--dry-run", "--report", f"markdown:{tmp_path / 'r.md'}")
    assert json.loads(to_file.stdout)["status"] in ("conflicts", "merged") and (tmp_path / "r.md").exists()


def test_read_takes_where_like_every_other_filter(two_tables):
    from trimerge.lineage.errors import InvalidOperationError

    assert two_tables.read("products", where="sku = 'B'").to_pylist() == [{"sku": "B", "name": "bread"}]
    assert two_tables.read("products", filter="sku = 'B'").num_rows == 1  # the older name still works
    with pytest.raises(InvalidOperationError, match="not both"):
        two_tables.read("products", where="sku = 'B'", filter="sku = 'A'")
