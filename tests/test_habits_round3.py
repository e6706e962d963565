"""Habits, round three (issue 54, points 3, 4 and 7): filters that compare dates with text the way
DuckDB users write them, one JSON shape per diff, no Python reprs in text, ``read`` and ``show``
saying what they print, and notebook forms of a diff's rows and of a conflicting merge. Through
the CLI and the API, on real Lance data."""

from __future__ import annotations

import contextlib
import datetime as dt
import io
import json

import polars as pl
import pyarrow as pa
import pytest

import trimerge
from trimerge.diff import diff
from trimerge.lineage.errors import InvalidOperationError
from trimerge.merge import MergeConflictError, merge

DAY = [dt.date(2000, 1, 1), dt.date(2001, 6, 1), dt.date(2002, 1, 1)]
AT = [dt.datetime(2000, 1, 1, 9, 30), dt.datetime(2001, 6, 1), dt.datetime(2002, 1, 1, 23, 59, 59)]


def one_line_error(res, code=2):
    assert res.exit_code == code, (res.exit_code, res.stdout, res.stderr)
    assert "Traceback" not in res.stderr + res.stdout
    assert len(res.stderr_lines) == 1, res.stderr
    assert res.stderr_lines[0].startswith("error:"), res.stderr
    return res.stderr_lines[0]


def state(repo):
    """Every branch tip and every commit: what bad input must leave as it was."""
    return ({b.name: b.commit_id for b in repo.branches.list()}, sorted(c.id for c in repo.all_commits()))


@pytest.fixture
def stocks(tmp_path):
    """``stocks``: a date32 ``date`` (named as in the issue), timestamps without and with a zone, in
    ns, a date64 and a text column; ``feat`` updates row 1's dates and inserts row 4."""
    repo = trimerge.Repository.init(tmp_path / "repo")
    repo.create_table("stocks", pa.table({
        "id": [1, 2, 3], "date": pa.array(DAY, pa.date32()), "at": pa.array(AT, pa.timestamp("us")),
        "atz": pa.array(AT, pa.timestamp("us", tz="UTC")), "ns": pa.array(AT, pa.timestamp("ns")),
        "d64": pa.array(DAY, pa.date64()), "name": ["a", "b", "c"]}), primary_key="id")
    repo.branches.create("feat", from_ref="main")
    repo.upsert("stocks", pa.table({
        "id": [1, 4], "date": pa.array([dt.date(2000, 1, 2), dt.date(2003, 1, 1)], pa.date32()),
        "at": pa.array([dt.datetime(2000, 1, 2), dt.datetime(2003, 1, 1)], pa.timestamp("us")),
        "atz": pa.array([dt.datetime(2000, 1, 2), dt.datetime(2003, 1, 1)], pa.timestamp("us", tz="UTC")),
        "ns": pa.array([dt.datetime(2000, 1, 2), dt.datetime(2003, 1, 1)], pa.timestamp("ns")),
        "d64": pa.array([dt.date(2000, 1, 2), dt.date(2003, 1, 1)], pa.date64()), "name": ["a", "d"]}),
        branch="feat", message="shift")
    return repo


def ids(table):
    return sorted(table.column("id").to_pylist())


# ---------------------------------------------------------------------------------------------- point 3: filters
@pytest.mark.parametrize("where, expect", [
    ("date < '2001-01-01'", [1]),
    ("'2001-01-01' > date", [1]),
    ("DATE <= '2001-6-1'", [1, 2]),  # unquoted names in any case, a month without its zero
    ("`date` >= '2001-06-01' AND name <> 'c'", [2]),
    ("date IN ('2000-01-01', NULL, '2002-01-01')", [1, 3]),
    ("date NOT BETWEEN '2000-06-01' AND '2001-12-31'", [1, 3]),
    ("d64 = '2001-06-01'", [2]),
    ("at < '2000-01-01 10:00'", [1]),  # no seconds: DataFusion needs them, they are added
    ("at > '2002-01-01T23:59:58.5'", [3]),
    ("atz < '2000-01-01T09:00:00Z' OR atz > '2002-01-02 00:59:00+02:00'", [3]),
    ("ns BETWEEN '2001-01-01' AND '2001-12-31'", [2]),
    ("at < '2001-01-01' OR (date = '2002-01-01')", [1, 3]),
    ("NOT date = '2000-01-01' /* a comment */", [2, 3]),
    ("date < date '2001-01-01'", [1]),  # typed literals as they were
    ("name < '2001-01-01' OR name = 'b'", [2]),  # a text column compares text
])
def test_read_casts_text_compared_with_dates(stocks, cli, where, expect):
    assert ids(stocks.read("stocks", where=where)) == expect
    rows = cli("-C", stocks.path, "read", "stocks", "--where", where, "--format", "jsonl", ok=True).stdout
    assert sorted(json.loads(line)["id"] for line in rows.splitlines()) == expect


def test_delete_where_with_a_date_text_deletes_those_rows(stocks, cli):
    res = cli("-C", stocks.path, "delete", "stocks", "--where", "date < '2001-01-01'", ok=True)
    assert "Delete from stocks where date < '2001-01-01'" in res.stdout  # the message keeps what was typed
    assert ids(stocks.read("stocks")) == [2, 3]
    stocks.delete("stocks", "at BETWEEN '2001-01-01' AND '2001-12-31 23:59'", branch="feat")
    assert ids(stocks.read("stocks", ref="feat")) == [1, 3, 4]


def test_diff_and_blame_filters_cast_too(stocks, cli):
    d = diff("main", "feat", repo=stocks, where="date >= '2002-06-01'")
    assert [r["id"] for r in d.tables["stocks"].rows().to_pylist()] == [4]
    doc = cli("-C", stocks.path, "--json", "diff", "main", "feat", "--where", "at < '2000-06-01'", ok=True).json()
    assert doc["where"] == "at < '2000-06-01'" and [r["id"] for r in doc["tables"]["stocks"]["rows"]] == [1]
    blamed = cli("-C", stocks.path, "--json", "blame", "stocks", "--where", "date = '2001-06-01'", ok=True).json()
    assert [r["id"] for r in blamed] == [2]


@pytest.mark.parametrize("where, words", [
    ("date < 'yesterday'", ["column 'date' is date32", "'yesterday' is not a date", "'2001-01-31'"]),
    ("date = '2001-02-30'", ["column 'date' is date32", "'2001-02-30' is not a date"]),
    ("at > '2001-13-01'", ["column 'at' is timestamp[us]", "is not a time", "'2001-01-31 08:30:00'"]),
    ("at > '2001-01-01 25:00'", ["column 'at' is timestamp[us]", "is not a time"]),
    ("atz > '2001-01-01 10:00+24:00'", ["timestamp[us, tz=UTC]", "is not a time"]),
    ("date IN ('2000-01-01', 'soon')", ["'soon' is not a date"]),
    ("date BETWEEN '2000-01-01' AND '20O1-01-01'", ["'20O1-01-01' is not a date"]),
    ("ns < '2263-01-01'", ["timestamp[ns]", "1677-09-22 to 2262-04-10", "'2263-01-01'"]),  # DataFusion wraps it
    ("ns > '1600-01-01'", ["timestamp[ns]", "'1600-01-01'"]),
    ("date < 'it''s'", ["'it''s' is not a date"]),
    ("date < '" + "9" * 5000 + "'", ["is not a date"]),
    ("date < '２００１-01-01'", ["is not a date"]),  # full-width digits are not ISO
    # a comparison cast_literals leaves to Lance (an expression on one side): Lance's refusal, reworded
    ("date IN ('2000-01-01', name)", ["compared with a Date32 value", "write date '2000-01-01'"]),
])
def test_a_text_that_is_no_date_is_one_line_naming_the_type(stocks, cli, where, words):
    before = state(stocks)
    for verb in (["read", "stocks"], ["delete", "stocks"]):
        line = one_line_error(cli("-C", stocks.path, *verb, "--where", where))
        assert all(w in line for w in words), line
        assert len(line) < 600
    with pytest.raises(InvalidOperationError) as err:
        stocks.read("stocks", where=where)
    assert all(w in str(err.value) for w in words)
    assert state(stocks) == before and ids(stocks.read("stocks")) == [1, 2, 3]


def test_long_lists_of_dates_are_typed_and_bounded(stocks, cli):
    """A long IN list is read as one run of items (not token by token); typed, it must still fit the
    filter length limit, and a list past it is one line saying so."""
    days = [f"'{1990 + i % 30}-{1 + i % 12:02d}-{1 + i % 28:02d}'" for i in range(5_000)]
    mixed = ", ".join(days + ["NULL", "date '2001-06-01'", "'2002-01-01'"])
    assert ids(stocks.read("stocks", where=f"date IN ({mixed})")) == [2, 3]
    keys = ", ".join(str(k) for k in range(3, 20_000))
    stocks.delete("stocks", f"id IN ({keys}) AND date >= '2002-01-01'")
    assert ids(stocks.read("stocks")) == [1, 2]
    before = state(stocks)
    huge = ", ".join(["'2001-06-01'"] * 60_000)  # 840,000 characters; typed, 1,140,000
    line = one_line_error(cli("-C", stocks.path, "delete", "stocks", "--where", f"date IN ({huge})"))
    assert "with its 60,000 dates and times typed" in line and "the limit is 1,000,000" in line
    assert state(stocks) == before


def test_a_transaction_types_a_date_text_as_every_delete_does(stocks):
    """Transaction.delete types the filter as Repository.delete does; a text that is no date is
    refused in one line naming the column's type, and changes nothing."""
    before = state(stocks)
    with pytest.raises(InvalidOperationError, match=r"column 'date' is date32 and 'someday' is not a date"):
        with stocks.transaction() as tx:
            tx.delete("stocks", "date < 'someday'")
    assert state(stocks) == before
    with stocks.transaction() as tx:
        tx.delete("stocks", "date < '2001-01-01'")
    assert ids(stocks.read("stocks")) == [2, 3] and len(state(stocks)[1]) == len(before[1]) + 1


def test_double_quotes_are_text_in_lance_as_the_docs_say(stocks):
    assert ids(stocks.read("stocks", where="\"name\" = 'name'")) == [1, 2, 3]  # the text 'name', not the column
    assert ids(stocks.read("stocks", where="`name` = 'b'")) == [2]


# ---------------------------------------------------------------------------------------------- point 4: output
def test_stat_json_is_a_subset_of_the_json_diff(stocks, cli):
    stocks.add_columns("stocks", pa.field("note", pa.string()), branch="feat")
    where = str(stocks.path)
    for args in (["main...feat"], ["main", "feat", "stocks"]):
        stat = cli("-C", where, "diff", *args, "--stat", "--json", ok=True).json()
        assert stat == cli("-C", where, "--json", "diff", *args, "--stat", ok=True).json()
        whole = cli("-C", where, "--json", "diff", *args, ok=True).json()["tables"]
        for t in stat:
            full = whole[t["table"]]
            assert set(t) == set(full) - {"rows"}
            assert {k: v for k, v in t.items() if k != "plan"} == {k: v for k, v in full.items() if k not in ("plan", "rows")}
            assert t["plan"].keys() == full["plan"].keys()
        s = stat[0]
        assert s["columns"] == {"at": 1, "atz": 1, "d64": 1, "date": 1, "ns": 1}
        assert [c["column"] for c in s["schema_changes"]] == ["note"] and isinstance(s["index_changes"], list)
    shown = cli("-C", where, "--json", "show", "feat", ok=True).json()["diff"]
    assert [t["columns"] for t in shown] == [{}]  # the column added: a schema change, no value changed
    assert isinstance(shown[0]["schema_changes"], list) and shown[0]["schema_changes"][0]["column"] == "note"


def test_diff_text_prints_values_as_jsonl_does(stocks, cli):
    text = cli("-C", stocks.path, "diff", "main", "feat", ok=True).stdout
    assert "datetime" not in text and "Timestamp" not in text
    assert '~ id=1: date: "2000-01-01" -> "2000-01-02"; at: "2000-01-01 09:30:00" -> "2000-01-02 00:00:00"' in text
    jsonl = cli("-C", stocks.path, "diff", "main", "feat", "--format", "jsonl", ok=True).stdout
    update = next(json.loads(line) for line in jsonl.splitlines() if json.loads(line)["change"] == "update")
    assert json.dumps(update["before"]["at"]) == '"2000-01-01 09:30:00"'  # the same spelling
    stocks.upsert("stocks", pa.table({"id": [1], "date": pa.array([DAY[0]]), "at": pa.array([AT[0]]),
                                      "atz": pa.array([AT[0]], pa.timestamp("us", tz="UTC")),
                                      "ns": pa.array([AT[0]], pa.timestamp("ns")), "d64": pa.array([DAY[0]], pa.date64()),
                                      "name": ["Zürich"]}))
    text = cli("-C", stocks.path, "diff", "main~1", "main", ok=True).stdout
    assert 'name: "a" -> "Zürich"' in text


def test_merge_conflict_lines_show_values_without_reprs(stocks, cli):
    stocks.upsert("stocks", pa.table({"id": [1], "date": pa.array([dt.date(1999, 1, 1)]), "at": pa.array([AT[0]]),
                                      "atz": pa.array([AT[0]], pa.timestamp("us", tz="UTC")),
                                      "ns": pa.array([AT[0]], pa.timestamp("ns")),
                                      "d64": pa.array([DAY[0]], pa.date64()), "name": ["a"]}))
    res = cli("-C", stocks.path, "merge", "feat")
    assert res.exit_code == 1
    assert 'date: base "2000-01-01", dest "1999-01-01", source "2000-01-02"' in res.stdout
    assert "datetime" not in res.stdout


def test_read_help_states_the_text_bound_and_formats_print_every_row(tmp_path, cli):
    repo = trimerge.Repository.init(tmp_path / "big")
    repo.create_table("t", pa.table({"id": list(range(60)), "v": [f"v{i}" for i in range(60)]}), primary_key="id")
    helptext = " ".join(cli("read", "--help", ok=True).stdout.split())
    assert "default: all" not in helptext
    assert "first and last 25 of more than 50 rows" in helptext and "prints every row" in helptext
    text = cli("-C", repo.path, "read", "t", ok=True).stdout
    assert "shape: (60, 2)" in text and "│ 24 " in text and "│ 35 " in text and "│ 30 " not in text
    assert len(cli("-C", repo.path, "read", "t", "--format", "jsonl", ok=True).stdout.splitlines()) == 60
    csv = cli("-C", repo.path, "read", "t", "--format", "csv", ok=True).stdout
    assert [line for line in csv.splitlines() if line][-1] == "59,v59" and csv.count("\n") >= 61
    assert len(cli("-C", repo.path, "read", "t", "--limit", "5", "--format", "jsonl", ok=True).stdout.splitlines()) == 5


def test_show_prints_table_versions_without_lance_branch_ids(stocks, cli):
    tv = stocks.resolve("feat").tables["stocks"]
    assert tv.lance_branch != "main"  # the branch's writes live on a Lance branch of their own
    for ref in ("feat", "main"):
        text = cli("-C", stocks.path, "show", ref, ok=True).stdout
        assert tv.lance_branch not in text and "f-0" not in text
        version = stocks.resolve(ref).tables["stocks"].version
        assert f"stocks               version {version}  key (id)" in text
        assert tv.lance_branch not in cli("-C", stocks.path, "commit", "show", ref, ok=True).stdout
    # machine output keeps where the table lives
    assert cli("-C", stocks.path, "--json", "commit", "show", "feat", ok=True).json()["tables"]["stocks"][
        "lance_branch"] == tv.lance_branch


# ---------------------------------------------------------------------------------------------- point 7: notebooks
def test_table_diff_to_polars_is_sqls_flat_diff(stocks):
    td = diff("main", "feat", repo=stocks).tables["stocks"]
    frame = td.to_polars()
    assert isinstance(frame, pl.DataFrame)
    assert frame.columns[:3] == ["id", "change", "changed_columns"]
    assert {"before_date", "after_date", "before_at", "after_at", "before_name", "after_name"} <= set(frame.columns)
    via_sql = pl.from_arrow(stocks.sql("SELECT * FROM diff('main', 'feat', 'stocks') ORDER BY id"))
    assert frame.columns == via_sql.columns  # DuckDB spells the zone Etc/UTC: compare the values
    assert frame.sort("id").to_dicts() == via_sql.to_dicts()
    assert frame.filter(pl.col("id") == 1).select("before_date", "after_date").row(0) == (DAY[0], dt.date(2000, 1, 2))
    assert frame.filter(pl.col("id") == 4)["before_date"].to_list() == [None]
    narrow = td.to_polars(["date"])
    assert [c for c in narrow.columns if c.startswith(("before_", "after_"))] == ["before_date", "after_date"]
    shown = repr(narrow)
    assert "before_date" in shown and "after_date" in shown and "2000-01-02" in shown
    assert "{" not in shown  # no struct dump, as rows() shows
    with pytest.raises(InvalidOperationError):
        td.to_polars("everything")


@pytest.fixture
def conflicting(stocks):
    stocks.upsert("stocks", pa.table({"id": [1], "date": pa.array([dt.date(1999, 1, 1)]), "at": pa.array([AT[0]]),
                                      "atz": pa.array([AT[0]], pa.timestamp("us", tz="UTC")),
                                      "ns": pa.array([AT[0]], pa.timestamp("ns")),
                                      "d64": pa.array([DAY[0]], pa.date64()), "name": ["a"]}))
    return stocks


def test_a_conflicting_merge_in_ipython_shows_the_conflicts_not_a_traceback(conflicting):
    interactive = pytest.importorskip("IPython.core.interactiveshell")
    shell = interactive.InteractiveShell.instance()
    shell.user_ns.update(merge=merge, repo=conflicting)
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        run = shell.run_cell("merge('feat', 'main', repo=repo)")
    text = out.getvalue()
    assert isinstance(run.error_in_exec, MergeConflictError)
    assert "Traceback" not in text and "File " not in text
    assert text.startswith("MergeConflictError: merge of 'feat' into 'main' has 1 conflict(s) in stocks")
    assert "CONFLICT row.update_update in stocks[id=1] columns" in text
    assert 'date: base "2000-01-01", dest "1999-01-01", source "2000-01-02"' in text
    assert "strategy='source-wins' | 'dest-wins'" in text and "dry_run=True" in text
    assert conflicting.resolve("main").id == state(conflicting)[0]["main"]  # nothing published


def test_the_conflict_error_is_one_line_as_text_and_a_report_as_a_value(conflicting):
    with pytest.raises(MergeConflictError) as err:
        merge("feat", "main", repo=conflicting)
    e = err.value
    assert "\n" not in str(e)  # what the CLI prints as its one-line error
    pretty = pytest.importorskip("IPython.lib.pretty")
    shown = pretty.pretty(e)
    assert shown.startswith("MergeConflictError: ") and "CONFLICT row.update_update" in shown
    assert "<table" in e._repr_html_() and "MergeConflictError" in e._repr_html_()
    lines = e._render_traceback_()
    assert all("\n" not in line for line in lines) and len(lines) < 40


def test_many_conflicts_are_cut_in_the_notebook_view(tmp_path):
    repo = trimerge.Repository.init(tmp_path / "many")
    repo.create_table("t", pa.table({"id": list(range(50)), "v": [0] * 50}), primary_key="id")
    repo.branches.create("b", from_ref="main")
    repo.upsert("t", pa.table({"id": list(range(50)), "v": [1] * 50}), branch="b")
    repo.upsert("t", pa.table({"id": list(range(50)), "v": [2] * 50}))
    with pytest.raises(MergeConflictError) as err:
        merge("b", "main", repo=repo)
    lines = err.value._render_traceback_()
    assert sum(line.startswith("  CONFLICT") for line in lines) == 10
    assert any("40 more" in line for line in lines) and len("\n".join(lines)) < 5000
