"""Checks over the whole commit (issue 51.3): a check may read every table of the ref it judges —
joins, EXISTS, aggregates across tables — still returning failing rows of its own table. Such a
check runs on the whole would-be result (``scope`` ``whole result: ...``); row-local checks stay
incremental. Real Lance data in temporary directories, through the API and the CLI."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import trimerge
from trimerge.lineage.gates.checkscope import tables_read
from trimerge.merge import MergeCheckError, merge

KNOWN = "SELECT s.* FROM stocks s LEFT JOIN companies c USING (symbol) WHERE c.symbol IS NULL"
# A company may not be delisted while stocks of it trade (a check on companies reading stocks).
LISTED = ("SELECT c.* FROM companies c WHERE NOT c.listed "
          "AND EXISTS (SELECT 1 FROM stocks s WHERE s.symbol = c.symbol)")
# The stocks of a company are worth no more than its cap (an aggregate across the two tables).
CAPPED = ("SELECT c.symbol FROM companies c JOIN stocks s USING (symbol) "
          "GROUP BY c.symbol, c.cap HAVING sum(s.px) > c.cap")


def companies(symbols, listed=None, cap=None) -> pa.Table:
    n = len(symbols)
    return pa.table({"symbol": pa.array(symbols, pa.string()),
                     "listed": pa.array(listed if listed is not None else [True] * n, pa.bool_()),
                     "cap": pa.array(cap if cap is not None else [100.0] * n, pa.float64())})


def stocks(ids, symbols, px=None) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "symbol": pa.array(symbols, pa.string()),
                     "px": pa.array(px if px is not None else [1.0] * len(ids), pa.float64())})


def market(path, checks=None, protect=True, more=0) -> trimerge.Repository:
    """main with companies A, B and stocks 1-3 of them (and ``more`` of B, ids from 100);
    ``checks`` (name -> (table, sql); default: the referential one) gate main."""
    repo = trimerge.Repository.init(str(path))
    repo.create_table("companies", companies(["A", "B"]), "symbol")
    ids = [1, 2, 3, *range(100, 100 + more)]
    repo.create_table("stocks", stocks(ids, ["A", "B", "A", *["B"] * more]), "id")
    for name, (table, sql) in ({"known_symbol": ("stocks", KNOWN)} if checks is None else checks).items():
        repo.checks.add(name, table, sql)
    if protect:
        repo.branches.protect("main")
    repo.branches.create("feat")
    return repo


def attempt(repo, source="feat", dest="main", **kw):
    try:
        return merge(source, dest, repo=repo, **kw)
    except MergeCheckError as err:
        return err.result


def state(repo):
    """What a refused change must leave alone: every branch tip and the number of commits."""
    return ({b.name: b.commit_id for b in repo.branches.list()}, len(repo.all_commits()))


# ---------------------------------------------------------------------------------------------- what a check reads
@pytest.mark.parametrize("sql, table, reads", [
    (KNOWN, "stocks", ("companies",)),
    (LISTED, "companies", ("stocks",)),
    (CAPPED, "companies", ("stocks",)),
    ("SELECT * FROM stocks WHERE a < 0", "stocks", ()),
    ("SELECT * FROM STOCKS s, stocks t WHERE s.id = t.id", "stocks", ()),        # itself, any case
    ("WITH c AS (SELECT * FROM companies) SELECT * FROM stocks WHERE symbol NOT IN (SELECT symbol FROM c)",
     "stocks", ("companies",)),                                                # a CTE body, not the CTE's name
    ("SELECT * FROM stocks WHERE symbol IN (FROM Companies SELECT symbol) "
     "OR symbol IN (SELECT symbol FROM companies)", "stocks", ("Companies",)),  # once, as first written
    ("SELECT * FROM read_csv('/etc/passwd')", "stocks", ()),                   # a table function: DuckDB's
    ("SELECT * FROM information_schema.tables", "stocks", ()),                # DuckDB's catalog
    ("SELECT * FROM '/etc/passwd'", "stocks", ("/etc/passwd",)),              # a path is a table name here
    ("SELECT * FROM stocks WHERE", "stocks", ()),                              # does not parse
])
def test_the_tables_a_check_reads(sql, table, reads):
    assert tables_read(sql, table) == reads


# ---------------------------------------------------------------------------------------------- judged on the result
def test_a_referential_check_blocks_an_unknown_symbol_and_passes_when_companies_gets_it_in_the_same_merge(tmp_path):
    repo = market(tmp_path / "r")
    [check] = repo.checks.list()
    assert check.reads() == ("companies",) and check.to_json()["reads"] == ["companies"]
    repo.upsert("stocks", stocks([4, 5], ["Z", "B"]), branch="feat")
    before = state(repo)
    failed = attempt(repo)
    assert failed.status == "check_failed" and state(repo) == before          # nothing published
    [c] = failed.checks
    assert (c.name, c.table, c.failing_rows, c.sample_keys) == ("known_symbol", "stocks", 1, [{"id": 4}])
    assert c.scope == "whole result: stocks, companies" and c.reads == ("companies",) and c.reason is None
    assert "reads companies" in c.describe() and failed.to_json()["checks"][0]["scope"] == c.scope
    # The dry run judges the same would-be result.
    dry = attempt(repo, dry_run=True)
    assert dry.status == "check_failed" and [(x.failing_rows, x.sample_keys) for x in dry.checks] == [(1, [{"id": 4}])]
    # Both tables change in the one merge: the check reads the result's companies, not main's.
    repo.upsert("companies", companies(["Z"]), branch="feat")
    assert [r.passed for r in repo.checks.run("feat")] == [True] and not repo.checks.run("main")[0].reason
    ok = merge("feat", "main", repo=repo)
    assert ok.status == "merged" and [(x.passed, x.scope) for x in ok.checks] == [(True, c.scope)]
    assert sorted(repo.read("companies").column("symbol").to_pylist()) == ["A", "B", "Z"]
    assert sorted(repo.read("stocks").column("id").to_pylist()) == [1, 2, 3, 4, 5]


def test_names_match_tables_as_duckdb_does_ignoring_case(tmp_path):
    repo = market(tmp_path / "r", {"known_symbol": ("stocks", KNOWN.replace("companies c", "COMPANIES c"))})
    repo.upsert("stocks", stocks([4], ["Z"]), branch="feat")
    [c] = attempt(repo).checks
    assert (c.reads, c.failing_rows, c.sample_keys) == (("COMPANIES",), 1, [{"id": 4}])


def test_a_merge_changing_only_the_other_table_is_judged_too(tmp_path):
    repo = market(tmp_path / "r")
    repo.delete("companies", "symbol = 'B'", branch="feat")                   # stock 2 is left without a company
    [c] = attempt(repo).checks
    assert (c.passed, c.failing_rows, c.sample_keys) == (False, 1, [{"id": 2}])
    assert repo.read("companies").num_rows == 2


def test_an_exists_check_on_the_other_side(tmp_path):
    repo = market(tmp_path / "r", {"listed_while_trading": ("companies", LISTED)})
    repo.upsert("companies", companies(["A", "B"], listed=[True, False]), branch="feat")
    [c] = attempt(repo).checks
    assert (c.table, c.failing_rows, c.sample_keys, c.reads) == ("companies", 1, [{"symbol": "B"}], ("stocks",))
    repo.delete("stocks", "symbol = 'B'", branch="feat")                      # nothing of B trades any more
    assert merge("feat", "main", repo=repo).status == "merged"


def test_an_aggregate_across_two_tables(tmp_path):
    repo = market(tmp_path / "r", {"capped": ("companies", CAPPED)})
    repo.upsert("stocks", stocks([4, 5], ["A", "B"], px=[60.0, 99.0]), branch="feat")   # A: 1+1+60 ≤ 100; B: 1+99
    assert attempt(repo, dry_run=True).checks[0].passed
    repo.upsert("stocks", stocks([6], ["A"], px=[40.0]), branch="feat")                 # A: 102 > 100
    [c] = attempt(repo).checks
    assert (c.failing_rows, c.sample_keys) == (1, [{"symbol": "A"}])
    repo.update("companies", companies(["A"], cap=[500.0]), branch="feat")              # raised in the same merge
    assert merge("feat", "main", repo=repo).status == "merged"


def test_a_table_the_judged_commit_lacks_fails_the_check_with_its_reason(tmp_path, cli):
    repo = market(tmp_path / "r", protect=False)
    repo.drop_table("companies", branch="feat")
    [r] = repo.checks.run("feat")
    assert not r.passed and r.failing_rows == 0 and "'companies'" in r.reason and r.reads == ("companies",)
    assert r.to_json()["reason"] == r.reason and "failed: it reads table 'companies'" in r.describe()
    repo.branches.protect("main")
    before = state(repo)
    failed = attempt(repo)                                                    # the merge would drop companies
    assert failed.status == "check_failed" and failed.checks[0].reason and state(repo) == before
    out = cli("-C", tmp_path / "r", "check", "run", "--ref", "feat")
    assert out.exit_code == 1 and "FAILED check known_symbol on stocks (reads companies): failed:" in out.stdout
    out = cli("-C", tmp_path / "r", "merge", "feat")
    assert out.exit_code == 1 and "Traceback" not in out.stdout + out.stderr and state(repo) == before


# ---------------------------------------------------------------------------------------------- refused when added
@pytest.mark.parametrize("sql, message", [
    ("SELECT s.* FROM stocks s LEFT JOIN nope c USING (symbol) WHERE c.symbol IS NULL", "reads table 'nope'"),
    ("SELECT * FROM stocks WHERE symbol NOT IN (SELECT symbol FROM \"/etc/passwd\")", "reads table '/etc/passwd'"),
    ("SELECT * FROM stocks WHERE symbol NOT IN (SELECT symbol FROM '/etc/passwd')", "reads table '/etc/passwd'"),
    ("SELECT * FROM stocks WHERE symbol NOT IN (SELECT symbol FROM '../companies/data')", "reads table '../companies"),
    ("SELECT * FROM stocks JOIN \"companies@main~1\" USING (symbol)", "not at other refs"),
    ("SELECT * FROM stocks WHERE symbol IN (SELECT content FROM read_text('/etc/passwd'))", "does not run"),
    ("SELECT s.* FROM stocks s JOIN read_csv('/etc/hosts') c ON true", "does not run"),
    ("SELECT * FROM stocks WHERE symbol IN (SELECT * FROM glob('/*'))", "does not run"),
    ("SELECT * FROM stocks WHERE symbol NOT IN (SELECT symbol FROM query_table('companies'))", "does not run"),
    ("SELECT * FROM stocks WHERE symbol IN (SELECT symbol FROM query('SELECT * FROM companies'))", "does not run"),
    ("SELECT * FROM stocks WHERE id IN (SELECT 1 FROM companies); DROP TABLE companies", "one query"),
    ("SELECT symbol FROM companies", "key column"),                            # companies' rows, not stocks'
])
def test_a_check_naming_what_the_branch_lacks_is_refused_in_one_line(tmp_path, cli, sql, message):
    repo = market(tmp_path / "r", protect=False)
    before = state(repo)
    with pytest.raises(trimerge.TrimergeError, match=message) as info:
        repo.checks.add("bad", "stocks", sql, branch="feat")
    assert len(str(info.value).splitlines()) == 1 and info.value.exit_code == 2 and state(repo) == before
    out = cli("-C", tmp_path / "r", "check", "add", "bad", "--table", "stocks", "--sql", sql, "-b", "feat")
    assert out.exit_code == 2 and len(out.stderr_lines) == 1 and "Traceback" not in out.stderr
    assert state(repo) == before


@given(name=st.text(min_size=1, max_size=30).filter(lambda s: s.lower() not in ("companies", "stocks")
                                                     and "\x00" not in s))
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_any_other_table_name_is_refused_and_changes_nothing(tmp_path_factory, name):
    repo = _shared_market(tmp_path_factory)
    quoted = '"' + name.replace('"', '""') + '"'
    before = state(repo)
    with pytest.raises(trimerge.TrimergeError) as info:
        repo.checks.add("bad", "stocks", f"SELECT s.* FROM stocks s JOIN {quoted} c USING (symbol)", branch="feat")
    assert len(str(info.value).splitlines()) == 1 and info.value.exit_code == 2 and state(repo) == before


_MARKETS: dict[str, trimerge.Repository] = {}


def _shared_market(factory) -> trimerge.Repository:
    if "m" not in _MARKETS:
        _MARKETS["m"] = market(factory.mktemp("fuzz") / "r", protect=False)
    return _MARKETS["m"]


def test_the_cli_adds_the_issues_check_and_reports_what_it_read(tmp_path, cli):
    market(tmp_path / "r", checks={}, protect=False)
    c = lambda *a, **k: cli("-C", tmp_path / "r", *a, **k)  # noqa: E731
    added = c("--json", "check", "add", "known_symbol", "--table", "stocks", "--sql", KNOWN, ok=True).json()
    assert added["reads"] == ["companies"]
    [run] = c("--json", "check", "run", ok=True).json()
    assert (run["passed"], run["scope"], run["reason"]) == (True, "whole result: stocks, companies", None)
    c("branch", "protect", "main", ok=True)
    path = tmp_path / "z.csv"
    path.write_text("id,symbol,px\n9,Z,1.0\n")
    c("load", "stocks", path, "--mode", "upsert", "-b", "feat", ok=True)
    out = c("merge", "feat")
    assert out.exit_code == 1 and '{"id": 9}' in out.stdout + out.stderr
    out = c("--json", "merge", "feat", "--dry-run")
    assert out.exit_code == 1 and json.loads(out.stdout)["checks"][0]["sample_keys"] == [{"id": 9}]


# ---------------------------------------------------------------------------------------------- row-local stays incremental
def test_a_row_local_check_beside_a_multi_table_one_still_runs_on_the_written_rows(tmp_path):
    repo = market(tmp_path / "r", {"known_symbol": ("stocks", KNOWN),
                                   "positive": ("stocks", "SELECT * FROM stocks WHERE px <= 0")}, more=100)
    assert all(r.passed for r in repo.checks.run("main"))                     # main is known to pass both
    repo.upsert("stocks", stocks([4, 5], ["Z", "A"], px=[1.0, -2.0]), branch="feat")
    failed = attempt(repo)
    scopes = {c.name: c.scope for c in failed.checks}
    assert scopes["positive"].startswith("rows written since version ")      # read the two written rows only
    assert scopes["known_symbol"] == "whole result: stocks, companies"
    assert {c.name: (c.failing_rows, c.sample_keys) for c in failed.checks} == \
        {"known_symbol": (1, [{"id": 4}]), "positive": (1, [{"id": 5}])}
    # The verdicts equal those on the whole table, as `check run` (always whole) gives on the source.
    assert sorted((r.name, r.failing_rows, r.sample_keys) for r in repo.checks.run("feat")) == \
        sorted((c.name, c.failing_rows, c.sample_keys) for c in failed.checks)


def test_restoring_a_table_keeps_a_check_that_reads_another(tmp_path):
    repo = market(tmp_path / "r", protect=False)
    repo.upsert("stocks", stocks([4], ["B"]))
    result = repo.restore("stocks", "main~2")              # before the check was added: kept, bound with companies
    assert result.action == "restored" and [c.name for c in repo.checks.list()] == ["known_symbol"]
    assert repo.read("stocks").num_rows == 3 and repo.checks.run()[0].passed


def test_concurrent_runs_each_see_their_own_other_tables(tmp_path):
    """Checks share one DuckDB database per process; the tables a check reads are registered on its
    own connection, so runs over same-named tables of two repositories never mix."""
    repos = [market(tmp_path / f"r{i}", protect=False) for i in range(2)]
    repos[1].delete("companies", "symbol = 'A'")

    def run(repo):
        return [(r.failing_rows, r.sample_keys) for r in repo.checks.run("main")]

    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(run, repos * 4))
    assert got == [[(0, [])], [(2, [{"id": 1}, {"id": 3}])]] * 4
