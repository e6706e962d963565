"""Incremental checks (issue 44.3): a row-local check gating a merge runs on the rows the merge
wrote when the table is known to pass it, with the verdict a whole-table run gives. Real Lance
data in temporary directories; the property test compares against ``repo.checks.run`` (always
the whole table) over random tables, changes and row-local checks."""

from __future__ import annotations

import os

import duckdb
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import trimerge
from trimerge.lineage.gates.checkscope import row_local
from trimerge.merge import MergeCheckError, merge

SCHEMA = pa.schema([("id", pa.int64()), ("a", pa.int64()), ("b", pa.float64()), ("s", pa.string())])
COLUMNS = SCHEMA.names


def rows(ids, a=None, b=None, s=None) -> pa.Table:
    n = len(ids)
    return pa.table({"id": list(ids), "a": a if a is not None else [0] * n, "b": b if b is not None else [0.0] * n,
                     "s": s if s is not None else ["x"] * n}, schema=SCHEMA)


def start(path, n=200, checks=None, gates=("main",)) -> trimerge.Repository:
    repo = trimerge.Repository.init(str(path))
    repo.create_table("t", rows(range(n), a=[i % 7 for i in range(n)]), "id")
    for name, sql in (checks or {"no_negative_a": "SELECT * FROM t WHERE a < 0"}).items():
        repo.checks.add(name, "t", sql, gates=list(gates))
    return repo


def outcome(repo, source, dest, **kwargs):
    try:
        return merge(source, dest, repo=repo, **kwargs)
    except MergeCheckError as err:
        return err.result


def verdicts(results):
    return sorted((c.name, c.passed, c.failing_rows, c.sample_keys) for c in results)


# ---------------------------------------------------------------------------------------------- the rule
@pytest.mark.parametrize("sql", [
    "SELECT * FROM t WHERE a < 0",
    "SELECT id, a FROM t AS x WHERE x.a < 0 AND s IS NOT NULL ORDER BY id",
    "FROM t WHERE b BETWEEN 1 AND 2 OR lower(s) LIKE 'x%'",
    "SELECT t.* FROM t WHERE CASE WHEN a > 0 THEN b ELSE -1 END > 2.5",
    "SELECT * EXCLUDE (s) FROM T WHERE A IN (1, 2) AND isnan(b)",
    "SELECT * FROM t WHERE ts > DATE '2020-01-01' + INTERVAL 1 DAY".replace("ts", "a::TIMESTAMP"),
])
def test_row_local_queries(sql):
    assert row_local(sql, "t", COLUMNS)


@pytest.mark.parametrize("sql", [
    "SELECT id FROM t GROUP BY id HAVING count(*) > 1",                  # aggregate
    "SELECT * FROM t WHERE a > (SELECT avg(a) FROM t)",                  # subquery
    "SELECT * FROM t WHERE id IN (SELECT id FROM u)",                    # another table
    "SELECT t.* FROM t JOIN u USING (id)",                               # join
    "SELECT * FROM t, t AS v",                                           # join
    "SELECT * FROM t QUALIFY row_number() OVER (PARTITION BY a) > 1",    # window
    "SELECT id, count(*) OVER () FROM t",                                # window
    "SELECT * FROM t WHERE a < 0 LIMIT 3",
    "SELECT * FROM t WHERE a < 0 OFFSET 1",
    "SELECT DISTINCT id FROM t",
    "SELECT DISTINCT ON (a) * FROM t",
    "SELECT * FROM t WHERE a < 0 UNION SELECT * FROM t WHERE b > 1",     # set operation
    "WITH x AS (SELECT * FROM t) SELECT * FROM x",
    "SELECT * FROM t USING SAMPLE 10%",
    "SELECT * FROM t WHERE random() < 0.5",                              # volatile
    "SELECT * FROM t WHERE a::TIMESTAMP < now()",
    "SELECT * FROM t WHERE a::DATE < current_date",
    "SELECT * FROM t WHERE today() > a::DATE",
    "SELECT *, uuid() FROM t",
    "SELECT * FROM t WHERE nextval('seq') > a",
    "SELECT * FROM t WHERE current_setting('threads') = '2'",
    "SELECT unnest([a, a]) AS id FROM t",                                # a row becomes many
    "SELECT * FROM t WHERE rowid < 3",                                   # not a column of the table
    "SELECT * FROM t AS x(p, q)",                                        # renamed columns
    "SELECT * FROM main.t",
    "SELECT * FROM t WHERE a < $1",
    "SELECT * FROM t WHERE a <",                                         # does not parse
    "SELECT 1; SELECT 2",
])
def test_not_row_local_queries(sql):
    assert not row_local(sql, "t", COLUMNS)


# ---------------------------------------------------------------------------------------------- behaviour
def test_a_merge_checks_only_the_rows_it_wrote_once_dest_is_known_to_pass(tmp_path):
    repo = start(tmp_path / "r", checks={"no_negative_a": "SELECT * FROM t WHERE a < 0",
                                         "above_mean": "SELECT id FROM t WHERE a > (SELECT avg(a) FROM t) + 100"})
    repo.branches.create("feat")
    repo.upsert("t", rows([3, 500], a=[-1, 2]), branch="feat")
    cold = outcome(repo, "feat", "main", dry_run=True)  # nothing recorded yet: the whole table
    assert [(c.name, c.scope) for c in cold.checks] == [("above_mean", "table"), ("no_negative_a", "table")]
    assert all(r.passed for r in repo.checks.run("main"))  # recorded: both pass on main's table
    failed = outcome(repo, "feat", "main")
    assert failed.status == "check_failed" and verdicts(failed.checks) == verdicts(cold.checks)
    scopes = {c.name: c.scope for c in failed.checks}
    assert scopes["above_mean"] == "table" and scopes["no_negative_a"].startswith("rows written since version ")
    assert failed.to_json()["checks"][1]["scope"] == scopes["no_negative_a"]
    assert [(c.failing_rows, c.sample_keys) for c in failed.checks if c.name == "no_negative_a"] == [(1, [{"id": 3}])]
    repo.update("t", rows([3], a=[4]), branch="feat")
    ok = merge("feat", "main", repo=repo)
    assert ok.status == "merged" and all(c.passed for c in ok.checks)
    # The merge recorded its own result: the next merge starts from there.
    repo.upsert("t", rows([7, 8], a=[-3, -4]), branch="feat")
    again = outcome(repo, "feat", "main", dry_run=True)
    check = next(c for c in again.checks if c.name == "no_negative_a")
    assert check.scope.startswith("rows written since") and (check.failing_rows, check.sample_keys) == \
        (2, [{"id": 7}, {"id": 8}])


def test_rows_dest_wrote_after_its_last_check_run_are_checked_too(tmp_path):
    repo = start(tmp_path / "r")
    assert repo.checks.run("main")[0].passed
    repo.upsert("t", rows([11], a=[-9]))                    # main: direct write, never checked
    repo.branches.create("feat", from_ref="main~1")
    repo.upsert("t", rows([12], a=[-8]), branch="feat")
    result = outcome(repo, "feat", "main")
    [c] = result.checks
    assert c.scope.startswith("rows written since") and (c.failing_rows, c.sample_keys) == (2, [{"id": 11}, {"id": 12}])


def test_a_failing_dest_runs_on_the_whole_table(tmp_path):
    repo = start(tmp_path / "r")
    repo.upsert("t", rows([1], a=[-5]))
    assert not repo.checks.run("main")[0].passed            # nothing recorded for a failure
    repo.branches.create("feat")
    repo.upsert("t", rows([2], a=[-6]), branch="feat")
    [c] = outcome(repo, "feat", "main").checks
    assert (c.scope, c.failing_rows, c.sample_keys) == ("table", 2, [{"id": 1}, {"id": 2}])


def test_a_changed_query_or_schema_finds_no_record(tmp_path):
    repo = start(tmp_path / "r")
    assert repo.checks.run("main")[0].passed
    repo.branches.create("feat")
    repo.checks.remove("no_negative_a", branch="feat")
    repo.checks.add("no_negative_a", "t", "SELECT * FROM t WHERE a < -1", gates=["main"], branch="feat")
    repo.upsert("t", rows([1], a=[-5]), branch="feat")
    [c] = outcome(repo, "feat", "main", dry_run=True).checks
    assert (c.scope, c.failing_rows) == ("table", 1)        # the merged definition never ran on main
    repo.branches.create("wide")
    repo.add_columns("t", [pa.field("note", pa.string())], branch="wide")
    repo.upsert("t", repo.read("t", ref="wide").slice(0, 1), branch="wide")
    [c] = outcome(repo, "wide", "main", dry_run=True).checks
    assert c.scope == "table" and c.passed


def test_a_damaged_or_unwritable_record_only_costs_time(tmp_path):
    repo = start(tmp_path / "r")
    assert repo.checks.run("main")[0].passed
    records = [os.path.join(d, f) for d, _, fs in os.walk(tmp_path / "r") for f in fs if "checks/passed" in d]
    assert len(records) == 1
    with open(records[0], "w") as f:
        f.write("{not json")
    repo.branches.create("feat")
    repo.upsert("t", rows([1], a=[-5]), branch="feat")
    [c] = outcome(repo, "feat", "main", dry_run=True).checks
    assert (c.scope, c.failing_rows) == ("table", 1)
    assert repo.checks.run("main")[0].passed                 # the damaged document is replaced
    [c] = outcome(repo, "feat", "main", dry_run=True).checks
    assert c.scope.startswith("rows written") and c.failing_rows == 1
    reader = trimerge.Repository.open(str(tmp_path / "r"), read_only=True)
    before = open(records[0]).read()
    assert reader.checks.run("feat")[0].failing_rows == 1 and open(records[0]).read() == before


def test_concurrent_check_runs_each_see_their_own_table(tmp_path):
    """Checks share one DuckDB database per process; each run registers its table on its own
    connection, so two runs of same-named tables never see each other's rows."""
    from concurrent.futures import ThreadPoolExecutor

    repos = [start(tmp_path / f"r{i}", n=50) for i in range(2)]
    repos[1].upsert("t", rows([1, 2, 3], a=[-1, -2, -3]))

    def run(repo):
        return [(r.failing_rows, r.sample_keys) for r in repo.checks.run("main")]

    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(run, repos * 4))
    assert got == [[(0, [])], [(3, [{"id": 1}, {"id": 2}, {"id": 3}])]] * 4


# ---------------------------------------------------------------------------------------------- the property
INTS = st.one_of(st.none(), st.integers(-4, 6))
FLOATS = st.one_of(st.none(), st.sampled_from([float("nan"), float("inf"), -0.0, 2.5]),
                   st.floats(-4, 6, allow_nan=False))
STRINGS = st.one_of(st.none(), st.text(alphabet="aAbé_", max_size=3))
ROW = st.tuples(st.integers(0, 260), INTS, FLOATS, STRINGS)


@st.composite
def predicates(draw, depth: int = 0) -> str:
    if depth < 2 and draw(st.integers(0, 2)) == 0:
        op = draw(st.sampled_from(["AND", "OR", "NOT"]))
        if op == "NOT":
            return f"NOT ({draw(predicates(depth + 1))})"
        return f"({draw(predicates(depth + 1))}) {op} ({draw(predicates(depth + 1))})"
    i, j = draw(st.integers(-4, 6)), draw(st.integers(-4, 6))
    f = draw(st.sampled_from(["-1.5", "0.0", "2.5", "'nan'::DOUBLE", "'inf'::DOUBLE"]))
    c = draw(st.sampled_from(["a", "b", "é", ""]))
    cmp = draw(st.sampled_from(["<", "<=", "=", "<>", ">", ">="]))
    return draw(st.sampled_from([
        f"a {cmp} {i}", f"b {cmp} {f}", f"s {cmp} '{c}'", "a IS NULL", "b IS NOT NULL", "isnan(b)",
        f"a IN ({i}, {j})", f"a BETWEEN {min(i, j)} AND {max(i, j)}", f"lower(s) LIKE '{c}%'",
        f"coalesce(a, {i}) % 3 = {j % 3}", f"CASE WHEN a > {i} THEN b ELSE {f} END > {j}",
        f"length(s) > {abs(i) % 3}", f"a + {i} > b", f"s || 'x' = '{c}x'"]))


@st.composite
def checks(draw) -> str:
    projection = draw(st.sampled_from(["*", "id, a", "id", "t.*"]))
    order = draw(st.sampled_from(["", " ORDER BY a"]))
    return f"SELECT {projection} FROM t WHERE {draw(predicates())}{order}"


def changes(size: int):
    """A side's writes: (upserted rows, deleted keys), a few at a time."""
    return st.lists(st.tuples(st.lists(ROW, min_size=1, max_size=size), st.lists(st.integers(0, 260), max_size=4)),
                    min_size=1, max_size=2)


def apply(repo, branch: str, writes) -> None:
    for upserts, deletes in writes:
        fresh = {}
        for key, a, b, s in upserts:
            fresh[key] = (a, b, s)
        if fresh:
            keys = sorted(fresh)
            repo.upsert("t", pa.table({"id": keys, "a": [fresh[k][0] for k in keys], "b": [fresh[k][1] for k in keys],
                                       "s": [fresh[k][2] for k in keys]}, schema=SCHEMA), branch=branch)
        gone = sorted(set(deletes) - set(fresh))
        if gone:
            repo.delete_keys("t", pa.table({"id": pa.array(gone, pa.int64())}), branch=branch)


def failing_ids(table: pa.Table, sql: str) -> list[int]:
    con = duckdb.connect()
    con.register("t", table)
    return [r[0] for r in con.sql(f"SELECT id FROM ({sql})").fetchall()]


# Each example builds a repository and merges twice, so no shrinking (minutes); the example that
# fails is printed whole. A deeper search: TRIMERGE_CHECK_EXAMPLES=150 (≈ 5 min).
@settings(max_examples=int(os.environ.get("TRIMERGE_CHECK_EXAMPLES", "20")), deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
          phases=[Phase.explicit, Phase.reuse, Phase.generate])
@given(seed=st.integers(0, 2**16), sqls=st.lists(checks(), min_size=1, max_size=3),
       dest=st.lists(st.tuples(st.lists(ROW, max_size=6), st.lists(st.integers(0, 260), max_size=4)), max_size=1),
       rounds=st.lists(changes(12), min_size=1, max_size=2))
def test_incremental_verdicts_equal_whole_table_verdicts(tmp_path_factory, seed, sqls, dest, rounds):
    """Over random tables, row-local checks and merges (both sides changing): the verdicts of a
    gated merge (dry run and real) equal ``checks.run`` on the merged result, which reads the
    whole table; and a check that passed on dest before ran incrementally."""
    import random

    rng = random.Random(seed)
    repo = trimerge.Repository.init(str(tmp_path_factory.mktemp("prop") / "r"))
    n = 200
    repo.create_table("t", pa.table({
        "id": list(range(n)), "a": [rng.choice([None, *range(-4, 7)]) for _ in range(n)],
        "b": [rng.choice([None, float("nan"), -1.5, 0.0, 2.5, 7.0]) for _ in range(n)],
        "s": [rng.choice([None, "a", "B", "é", "ab", ""]) for _ in range(n)]}, schema=SCHEMA), "id")
    names = [f"c{i}" for i in range(len(sqls))]
    for name, sql in zip(names, sqls):
        assert row_local(sql, "t", COLUMNS), sql
        repo.checks.add(name, "t", sql, gates=["main"])
    table = repo.read("t")
    bad = sorted({k for sql in sqls for k in failing_ids(table, sql)})
    if bad:  # dest passes every check before the first merge: the incremental path has a record
        repo.delete_keys("t", pa.table({"id": pa.array(bad, pa.int64())}))
    before = {r.name: r.passed for r in repo.checks.run("main")}
    assert all(before.values())
    repo.branches.create("feat")
    apply(repo, "main", dest)  # rows dest writes after its last check run are written since then too
    for writes in rounds:
        apply(repo, "feat", writes)
        dry = outcome(repo, "feat", "main", strategy="source-wins", dry_run=True)
        real = outcome(repo, "feat", "main", strategy="source-wins")
        if real.status == "up-to-date":  # the writes changed nothing: no result to check
            continue
        if real.status == "check_failed":
            merge("feat", "main", repo=repo, strategy="source-wins", checks=False)
        whole = repo.checks.run("main")
        assert verdicts(dry.checks) == verdicts(real.checks) == verdicts(whole), (sqls, dry.checks, whole)
        for c in real.checks:
            if before[c.name]:
                assert c.scope.startswith("rows written since"), (c.name, c.scope)
        before = {r.name: r.passed for r in whole}
        merge("main", "feat", repo=repo, strategy="source-wins", checks=False)


def test_gc_forgets_the_records_of_tables_it_removes(tmp_path):
    repo = start(tmp_path / "r", checks={})
    repo.branches.create("scratch")
    repo.create_table("u", rows([1, 2], a=[1, 2]), primary_key="id", branch="scratch")
    repo.checks.add("no_negative_u", "u", "SELECT * FROM u WHERE a < 0", branch="scratch")
    assert all(r.passed for r in repo.checks.run("scratch"))
    dataset = repo.table_version("u", "scratch").dataset
    assert repo.docs.list(f"checks/passed/{dataset}")
    repo.branches.delete("scratch", force=True)
    report = repo.gc(retention="now")
    assert dataset in report.datasets_removed
    assert repo.docs.list(f"checks/passed/{dataset}") == []
