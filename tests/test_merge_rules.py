"""The three-way merge rules, one lakeFS row at a time: table, schema, row and cell level.

Every test builds a tiny repository (one base commit on ``main``, a ``feature`` branch from it),
edits both sides and merges ``feature`` into ``main``. Results are compared by primary key so the
physical row order never matters."""

from __future__ import annotations

import json

from pathlib import Path
from typing import Any, Sequence

import pyarrow as pa
import pytest

import trimerge
from trimerge.lineage.errors import (
    ConcurrentWriteError,
    InvalidOperationError,
    ReadOnlyRefError,
    RefNotFoundError,
    TrimergeError,
)
from trimerge.merge import Conflict, MergeConflictError, MergeResult, cherry_pick, merge, revert
from trimerge.merge import plan as merge_plan
from trimerge.merge import publish as merge_publish

SRC, DST = "feature", "main"


# ---------------------------------------------------------------------------------------------- helpers
def tbl(**columns: Sequence[Any]) -> pa.Table:
    return pa.table({k: list(v) for k, v in columns.items()})


def base_t() -> pa.Table:
    """The standard base table ``t``: key id, int a, string b."""
    return tbl(id=[1, 2, 3, 4, 5, 6], a=[1, 2, 3, 4, 5, 6], b=["x1", "x2", "x3", "x4", "x5", "x6"])


def new_repo(tmp_path: Path, tables: dict[str, tuple[pa.Table, Sequence[str]]] | None = None,
             branches: Sequence[str] = (SRC,)) -> trimerge.Repository:
    repo = trimerge.Repository.init(tmp_path / "repo", actor="setup")
    tables = {"t": (base_t(), ["id"])} if tables is None else tables
    if tables:
        with repo.transaction("main", actor="setup", message="base") as tx:
            for name, (data, key) in tables.items():
                tx.create_table(name, data, list(key))
    for b in branches:
        repo.branches.create(b, from_ref="main")
    return repo


def keyed(repo: trimerge.Repository, table: str, ref: str = DST, key: Sequence[str] = ("id",)) -> dict:
    """key tuple (or scalar for one-column keys) -> row dict without the key columns."""
    out = {}
    for r in repo.read(table, ref).to_pylist():
        k = tuple(r[c] for c in key)
        out[k[0] if len(k) == 1 else k] = {c: v for c, v in r.items() if c not in key}
    return out


def lance_state(repo: trimerge.Repository) -> dict:
    """Every dataset's Lance branches and their latest versions (what a write would change)."""
    import lance

    out = {}
    for d in sorted((Path(repo.uri) / "tables").iterdir()):
        ds = lance.dataset(str(d))
        out[d.name] = {"main": ds.latest_version,
                       **{b: ds.checkout_version((b, None)).version for b in ds.branches.list()}}
    return out


def attempt(source: str = SRC, dest: str = DST, **kw: Any) -> MergeResult:
    """merge(), returning the result of a conflicting merge instead of raising."""
    try:
        return merge(source, dest, **kw)
    except MergeConflictError as exc:
        return exc.result


def kinds(result: MergeResult) -> list[tuple[str, str]]:
    return sorted((c.kind, c.table) for c in result.conflicts)


def upsert(repo, branch, table="t", **columns):
    return repo.upsert(table, tbl(**columns), branch=branch)


def delete(repo, branch, ids, table="t"):
    return repo.delete_keys(table, tbl(id=list(ids)), branch=branch)


# ---------------------------------------------------------------------------------------------- shape of a merge
def test_merge_commit_has_parents_dest_then_source_and_default_message(tmp_path):
    repo = new_repo(tmp_path)
    src = upsert(repo, SRC, id=[1], a=[10], b=["x1"])
    dst = upsert(repo, DST, id=[2], a=[20], b=["x2"])
    base = repo.merge_base(SRC, DST)
    result = merge(SRC, DST, repo=repo, actor="merger", metadata={"ticket": "T-1"})
    assert result.status == "merged"
    assert result.commit is not None
    assert result.commit.parents == (dst.id, src.id)
    assert result.commit.message == "Merge 'feature' into 'main'"
    assert result.commit.actor == "merger"
    assert result.commit.metadata["ticket"] == "T-1"
    assert repo.resolve(DST).id == result.commit.id
    assert repo.resolve(SRC).id == src.id  # the source is not moved
    assert [b.id for b in result.base] == [base.id] == [repo.log(SRC)[1].id]
    assert result.source.id == src.id and result.dest_commit.id == dst.id
    assert keyed(repo, "t")[1]["a"] == 10 and keyed(repo, "t")[2]["a"] == 20


def test_merge_is_never_a_fast_forward(tmp_path):
    repo = new_repo(tmp_path)
    base = repo.resolve(DST)
    src = upsert(repo, SRC, id=[1], a=[10], b=["x1"])
    result = merge(SRC, DST, repo=repo, message="bring feature in")
    assert result.status == "merged"
    assert result.commit.parents == (base.id, src.id)
    assert result.commit.id != src.id
    assert result.commit.message == "bring feature in"
    # Only the source changed t: dest now points at the source's table version, no data written.
    assert repo.table_version("t", DST).location == repo.table_version("t", SRC).location
    assert result.stats["t"].action == "taken"


def test_merge_accepts_refs_that_carry_their_repository(tmp_path):
    repo = new_repo(tmp_path)
    upsert(repo, SRC, id=[1], a=[10], b=["x1"])
    result = merge(repo.ref(SRC), repo.ref(DST))
    assert result.status == "merged" and result.dest == DST and result.source_ref == SRC
    assert keyed(repo, "t")[1]["a"] == 10


def test_source_already_contained_in_dest_is_up_to_date(tmp_path):
    repo = new_repo(tmp_path)
    tip = repo.resolve(DST)
    for source in (DST, SRC):  # itself; an ancestor (feature has not moved)
        result = merge(source, DST, repo=repo)
        assert result.status == "up-to-date" and result.commit is None and not result.conflicts
    assert repo.resolve(DST).id == tip.id
    upsert(repo, SRC, id=[1], a=[10], b=["x1"])
    first = merge(SRC, DST, repo=repo)
    assert first.status == "merged"
    again = merge(SRC, DST, repo=repo)
    assert again.status == "up-to-date" and again.commit is None
    assert repo.resolve(DST).id == first.commit.id
    # dest (now a descendant of feature) merged into feature: feature gains the merge commit's content
    back = merge(DST, SRC, repo=repo)
    assert back.status == "merged"
    assert keyed(repo, "t", SRC) == keyed(repo, "t", DST)


def test_conflicts_publish_nothing_and_raise_with_the_result(tmp_path):
    repo = new_repo(tmp_path)
    upsert(repo, SRC, id=[1], a=[10], b=["x1"])
    upsert(repo, DST, id=[1], a=[20], b=["x1"])
    tip = repo.resolve(DST)
    with pytest.raises(MergeConflictError) as info:
        merge(SRC, DST, repo=repo)
    assert isinstance(info.value, TrimergeError)
    assert info.value.exit_code == 1
    result = info.value.result
    assert result.status == "conflicts" and result.commit is None
    assert [(c.kind, c.table, dict(c.key), c.columns) for c in result.conflicts] == \
        [("row.update_update", "t", {"id": 1}, ("a",))]
    assert repo.resolve(DST).id == tip.id


def test_dry_run_computes_everything_and_publishes_nothing(tmp_path):
    repo = new_repo(tmp_path)
    upsert(repo, SRC, id=[1, 2], a=[10, 2], b=["x1", "S"])
    upsert(repo, DST, id=[1], a=[20], b=["x1"])
    tip = repo.resolve(DST)
    storage = lance_state(repo)
    dry = merge(SRC, DST, repo=repo, dry_run=True)
    assert dry.dry_run and dry.status == "conflicts" and dry.commit is None
    assert kinds(dry) == [("row.update_update", "t")]
    assert repo.resolve(DST).id == tip.id
    clean = merge(SRC, DST, repo=repo, dry_run=True, strategy="source-wins")
    assert clean.status == "merged" and clean.commit is None
    assert clean.stats["t"].resolved == 1
    assert repo.resolve(DST).id == tip.id
    assert keyed(repo, "t")[2]["b"] == "x2"
    assert lance_state(repo) == storage  # not even invisible Lance versions or forks were written
    real = merge(SRC, DST, repo=repo, strategy="source-wins")
    assert real.commit is not None
    assert {n: s.to_json() for n, s in real.stats.items()} == {n: s.to_json() for n, s in clean.stats.items()}


def test_conflicts_table_has_one_row_per_conflicting_cell_row_or_table(tmp_path):
    repo = new_repo(tmp_path, {"t": (base_t(), ["id"]), "gone": (tbl(id=[1], v=[1]), ["id"])})
    upsert(repo, SRC, id=[1, 2], a=[10, 20], b=["s1", "s2"])
    upsert(repo, DST, id=[1, 2], a=[11, 2], b=["d1", "d2"])
    delete(repo, SRC, [3])
    upsert(repo, DST, id=[3], a=[33], b=["x3"])
    repo.drop_table("gone", branch=SRC)
    upsert(repo, DST, table="gone", id=[1], v=[2])
    result = attempt(repo=repo)
    assert sorted((c.kind, c.table, c.key and c.key["id"], c.columns) for c in result.conflicts) == [
        ("row.delete_modify", "t", 3, ()),
        ("row.update_update", "t", 1, ("a", "b")),
        ("row.update_update", "t", 2, ("b",)),
        ("table.drop_modify", "gone", None, ()),
    ]
    ct = result.conflicts_table()
    assert isinstance(ct, pa.Table)
    assert {"kind", "table", "key", "column", "base", "ours", "theirs"} <= set(ct.column_names)
    assert ct.num_rows == 5  # id 1: two cells, id 2: one cell, id 3: one row, gone: one table
    rows = ct.to_pylist()
    cells = sorted((r["key"], r["column"], r["base"], r["ours"], r["theirs"])
                   for r in rows if r["kind"] == "row.update_update")
    assert cells == [('{"id": 1}', "a", '{"a": 1}', '{"a": 11}', '{"a": 10}'),
                     ('{"id": 1}', "b", '{"b": "x1"}', '{"b": "d1"}', '{"b": "s1"}'),
                     ('{"id": 2}', "b", '{"b": "x2"}', '{"b": "d2"}', '{"b": "s2"}')]
    (table_row,) = [r for r in rows if r["kind"] == "table.drop_modify"]
    assert table_row["table"] == "gone" and table_row["key"] is None and table_row["column"] is None


def test_source_may_be_any_ref(tmp_path):
    repo = new_repo(tmp_path)
    first = upsert(repo, SRC, id=[1], a=[10], b=["x1"])
    second = upsert(repo, SRC, id=[2], a=[20], b=["x2"])
    repo.tags.create("rc1", first.id)
    repo.branches.create("m2", from_ref=DST)
    repo.branches.create("m3", from_ref=DST)
    by_tag = merge("rc1", DST, repo=repo)
    assert by_tag.commit.parents[1] == first.id and by_tag.commit.message == "Merge 'rc1' into 'main'"
    assert keyed(repo, "t")[1]["a"] == 10 and keyed(repo, "t")[2]["a"] == 2
    by_expr = merge("feature~1", "m2", repo=repo)
    assert by_expr.commit.parents[1] == first.id
    by_id = merge(second.id[:12], "m3", repo=repo)
    assert by_id.commit.parents[1] == second.id
    assert keyed(repo, "t", "m3")[2]["a"] == 20


def test_merges_leave_no_intents_or_locks_behind(tmp_path):
    repo = new_repo(tmp_path)
    upsert(repo, SRC, id=[1], a=[10], b=["x1"])
    upsert(repo, DST, id=[1], a=[11], b=["x1"])
    attempt(repo=repo)
    merge(SRC, DST, repo=repo, dry_run=True)
    merge(SRC, DST, repo=repo, strategy="source-wins")
    meta = Path(repo.uri) / "_trimerge"
    assert not list((meta / "intents").iterdir())
    leases = [json.loads(p.read_bytes()) for p in (meta / "locks").iterdir() if p.name.endswith(".lock")]
    assert leases and all(lease["released"] for lease in leases)  # leases stay as documents, released


def test_dest_rewriting_rows_without_changing_them_does_not_confuse_the_merge(tmp_path):
    """Dest deleted and re-inserted identical rows, or overwrote the table with the same content:
    no change on dest, but its rows live under new row ids now."""
    repo = new_repo(tmp_path, branches=(SRC, "dev", "dev2"))
    with repo.transaction("dev") as tx:
        tx.delete_keys("t", tbl(id=[1, 2]))
        tx.append("t", tbl(id=[1, 2], a=[1, 2], b=["x1", "x2"]))
    repo.overwrite("t", base_t(), branch="dev2")
    upsert(repo, SRC, id=[1, 3], a=[10, 30], b=["x1", "x3"])
    delete(repo, SRC, [2])
    expected = keyed(repo, "t", SRC)
    for dest in ("dev", "dev2"):
        result = merge(SRC, dest, repo=repo)
        assert not result.conflicts
        assert keyed(repo, "t", dest) == expected, dest
        assert repo.read("t", dest).num_rows == len(expected)


# ---------------------------------------------------------------------------------------------- tables
def test_table_unchanged_on_both_sides_is_left_alone(tmp_path):
    repo = new_repo(tmp_path, {"t": (base_t(), ["id"]), "u": (tbl(id=[1], v=["a"]), ["id"])})
    before = repo.table_version("u", DST)
    upsert(repo, SRC, id=[1], a=[10], b=["x1"])
    result = merge(SRC, DST, repo=repo)
    assert result.stats["u"].action == "unchanged"
    assert repo.table_version("u", DST) == before


def test_table_added_on_source_only_is_added(tmp_path):
    repo = new_repo(tmp_path)
    repo.create_table("n", tbl(k=["a", "b"], v=[1, None]), ["k"], branch=SRC)
    result = merge(SRC, DST, repo=repo)
    assert result.stats["n"].action == "added"
    assert result.stats["n"].rows_from_source == 2
    assert repo.table_version("n", DST).location == repo.table_version("n", SRC).location
    assert keyed(repo, "n", key=("k",)) == {"a": {"v": 1}, "b": {"v": None}}
    assert repo.primary_key("n", DST) == ("k",)


def test_table_added_on_dest_only_is_kept(tmp_path):
    repo = new_repo(tmp_path)
    repo.create_table("n", tbl(k=["a"], v=[1]), ["k"], branch=DST)
    upsert(repo, SRC, id=[1], a=[10], b=["x1"])
    before = repo.table_version("n", DST)
    result = merge(SRC, DST, repo=repo)
    assert result.stats["n"].action == "kept"
    assert repo.table_version("n", DST) == before


def test_table_added_on_both_with_same_rows_converges(tmp_path):
    repo = new_repo(tmp_path)
    data = tbl(k=["a", "b", "c"], v=[1, None, 3])
    repo.create_table("n", data, ["k"], branch=SRC)
    repo.create_table("n", data, ["k"], branch=DST)
    result = merge(SRC, DST, repo=repo)
    assert not result.conflicts
    assert result.stats["n"].converged == 3
    assert result.stats["n"].rows_from_source == 0
    assert keyed(repo, "n", key=("k",)) == {"a": {"v": 1}, "b": {"v": None}, "c": {"v": 3}}


def test_table_added_on_both_is_merged_row_by_row_against_an_empty_base(tmp_path):
    repo = new_repo(tmp_path)
    repo.create_table("n", tbl(k=["a", "b", "s"], v=[1, 2, 3]), ["k"], branch=SRC)
    # same schema, columns in another order
    repo.create_table("n", pa.table({"v": [1, 20, 4], "k": ["a", "b", "d"]}), ["k"], branch=DST)
    result = attempt(repo=repo)
    assert [(c.kind, c.table, dict(c.key), c.columns, c.base, dict(c.ours), dict(c.theirs))
            for c in result.conflicts] == [("row.insert_insert", "n", {"k": "b"}, ("v",), None, {"v": 20}, {"v": 2})]
    assert result.stats["n"].converged == 1
    merge(SRC, DST, repo=repo, strategy="source-wins")
    assert {k: r["v"] for k, r in keyed(repo, "n", key=("k",)).items()} == {"a": 1, "b": 2, "s": 3, "d": 4}


def test_table_added_on_both_with_different_keys_is_add_add(tmp_path):
    repo = new_repo(tmp_path)
    repo.create_table("n", tbl(k=["a"], j=[1], v=[1]), ["k", "j"], branch=SRC)
    repo.create_table("n", tbl(k=["a"], j=[1], v=[1]), ["k"], branch=DST)
    result = attempt(repo=repo)
    assert kinds(result) == [("table.add_add", "n")]
    merge(SRC, DST, repo=repo, strategy="dest-wins", dry_run=True)
    merge(SRC, DST, repo=repo, strategy="source-wins")
    assert repo.primary_key("n", DST) == ("k", "j")


def test_table_added_on_both_with_different_schemas_is_add_add(tmp_path):
    repo = new_repo(tmp_path)
    repo.create_table("n", tbl(k=["a"], v=["1"]), ["k"], branch=SRC)
    repo.create_table("n", tbl(k=["a"], v=[1]), ["k"], branch=DST)
    assert kinds(attempt(repo=repo)) == [("table.add_add", "n")]
    result = merge(SRC, DST, repo=repo, strategy="dest-wins")
    assert result.stats["n"].action == "kept" and result.stats["n"].resolved == 1
    assert repo.schema("n", DST).field("v").type == pa.int64()


@pytest.mark.parametrize("dropper", [SRC, DST])
def test_table_dropped_on_one_side_and_unchanged_on_the_other_is_dropped(tmp_path, dropper):
    repo = new_repo(tmp_path, {"t": (base_t(), ["id"]), "u": (tbl(id=[1], v=[1]), ["id"])})
    repo.drop_table("u", branch=dropper)
    other = DST if dropper == SRC else SRC
    repo.append("u", tbl(id=[2], v=[2]), branch=other)  # new versions with the same content in the
    repo.delete("u", "id = 2", branch=other)              # end are no modification
    upsert(repo, SRC, id=[1], a=[10], b=["x1"])
    result = merge(SRC, DST, repo=repo)
    assert not result.conflicts
    assert result.stats["u"].action == "dropped"
    assert "u" not in repo.tables(DST)


def test_table_dropped_on_both_sides_is_dropped(tmp_path):
    repo = new_repo(tmp_path, {"t": (base_t(), ["id"]), "u": (tbl(id=[1], v=[1]), ["id"])})
    repo.drop_table("u", branch=SRC)
    repo.drop_table("u", branch=DST)
    result = merge(SRC, DST, repo=repo)
    assert not result.conflicts
    assert "u" not in repo.tables(DST)
    assert result.stats["u"].conflicts == 0


def test_table_dropped_on_both_sides_is_reported_as_dropped(tmp_path):
    repo = new_repo(tmp_path, {"t": (base_t(), ["id"]), "u": (tbl(id=[1], v=[1]), ["id"])})
    repo.drop_table("u", branch=SRC)
    repo.drop_table("u", branch=DST)
    result = merge(SRC, DST, repo=repo, dry_run=True)
    assert result.stats["u"].action == "dropped"


@pytest.mark.parametrize("dropper", [SRC, DST])
def test_table_dropped_vs_modified_is_drop_modify(tmp_path, dropper):
    repo = new_repo(tmp_path)
    modifier = DST if dropper == SRC else SRC
    repo.drop_table("t", branch=dropper)
    upsert(repo, modifier, id=[1], a=[10], b=["x1"])
    result = attempt(repo=repo)
    assert [(c.kind, c.table) for c in result.conflicts] == [("table.drop_modify", "t")]
    assert result.stats["t"].action == "conflict"
    assert ("t" in repo.tables(DST)) == (dropper == SRC)  # nothing published
    # source-wins: the source's state of the table
    src_wins = merge(SRC, DST, repo=repo, strategy="source-wins", dry_run=True)
    assert not src_wins.conflicts
    dest_wins = merge(SRC, DST, repo=repo, strategy="dest-wins", dry_run=True)
    assert dest_wins.stats["t"].action == "kept"
    merge(SRC, DST, repo=repo, strategy="source-wins")
    if dropper == SRC:
        assert "t" not in repo.tables(DST)
    else:
        assert keyed(repo, "t")[1] == {"a": 10, "b": "x1"} and len(keyed(repo, "t")) == 6


def test_table_drop_modify_dest_wins_keeps_dests_state(tmp_path):
    repo = new_repo(tmp_path)
    repo.drop_table("t", branch=SRC)
    upsert(repo, DST, id=[1], a=[10], b=["x1"])
    merge(SRC, DST, repo=repo, strategy="dest-wins")
    assert keyed(repo, "t")[1] == {"a": 10, "b": "x1"}


def test_table_granularity_conflicts_when_a_table_changed_on_both_sides(tmp_path):
    repo = new_repo(tmp_path, {"t": (base_t(), ["id"]), "u": (tbl(id=[1, 2], v=[1, 2]), ["id"])})
    upsert(repo, SRC, id=[1], a=[10], b=["x1"])  # different rows: would merge at cell/row level
    upsert(repo, DST, id=[2], a=[20], b=["x2"])
    upsert(repo, SRC, table="u", id=[1], v=[10])  # u changed on the source only
    result = attempt(repo=repo, granularity="table")
    assert [(c.kind, c.table, c.key) for c in result.conflicts] == [("table.update_update", "t", None)]
    assert result.stats["u"].action == "taken"
    assert not merge(SRC, DST, repo=repo, granularity="row", dry_run=True).conflicts
    merge(SRC, DST, repo=repo, granularity="table", strategy="source-wins")
    assert keyed(repo, "t") == keyed(repo, "t", SRC)
    assert keyed(repo, "u") == {1: {"v": 10}, 2: {"v": 2}}


def test_table_granularity_dest_wins_keeps_dests_table(tmp_path):
    repo = new_repo(tmp_path)
    upsert(repo, SRC, id=[1], a=[10], b=["x1"])
    upsert(repo, DST, id=[2], a=[20], b=["x2"])
    expected = keyed(repo, "t", DST)
    merge(SRC, DST, repo=repo, granularity="table", strategy="dest-wins")
    assert keyed(repo, "t") == expected


# ---------------------------------------------------------------------------------------------- schema
def test_column_added_on_source_is_added_and_dest_rows_get_nulls(tmp_path):
    repo = new_repo(tmp_path)
    repo.add_columns("t", pa.field("c", pa.string()), branch=SRC)
    upsert(repo, SRC, id=[1, 2], a=[1, 2], b=["x1", "x2"], c=["c1", "c2"])
    upsert(repo, DST, id=[3, 9], a=[30, 9], b=["x3", "x9"])
    result = merge(SRC, DST, repo=repo)
    assert any("c" in s for s in result.stats["t"].schema_changes)
    assert repo.schema("t", DST).names == ["id", "a", "b", "c"]
    rows = keyed(repo, "t")
    assert rows[1] == {"a": 1, "b": "x1", "c": "c1"} and rows[2]["c"] == "c2"
    assert rows[3] == {"a": 30, "b": "x3", "c": None}
    assert rows[9] == {"a": 9, "b": "x9", "c": None}
    assert rows[4] == {"a": 4, "b": "x4", "c": None}


def test_column_added_on_dest_is_kept_and_source_rows_get_nulls(tmp_path):
    repo = new_repo(tmp_path)
    repo.add_columns("t", pa.field("c", pa.int64()), branch=DST)
    upsert(repo, DST, id=[1, 3], a=[1, 3], b=["x1", "x3"], c=[100, 300])
    upsert(repo, SRC, id=[2, 3, 9], a=[20, 30, 9], b=["x2", "x3", "x9"])
    result = merge(SRC, DST, repo=repo)
    assert not result.conflicts
    rows = keyed(repo, "t")
    assert rows[1] == {"a": 1, "b": "x1", "c": 100}
    assert rows[2] == {"a": 20, "b": "x2", "c": None}
    assert rows[3] == {"a": 30, "b": "x3", "c": 300}  # cell merge: a from source, c from dest
    assert rows[9] == {"a": 9, "b": "x9", "c": None}


def test_same_column_added_on_both_sides_with_same_type_is_one_column(tmp_path):
    repo = new_repo(tmp_path)
    for branch in (SRC, DST):
        repo.add_columns("t", pa.field("c", pa.int64()), branch=branch)
    upsert(repo, SRC, id=[1, 3], a=[1, 3], b=["x1", "x3"], c=[1, 33])
    upsert(repo, DST, id=[2, 3], a=[2, 3], b=["x2", "x3"], c=[2, 33])
    result = merge(SRC, DST, repo=repo)
    assert not result.conflicts
    assert repo.schema("t", DST).names.count("c") == 1
    assert result.stats["t"].converged == 1
    assert {k: r["c"] for k, r in keyed(repo, "t").items()} == {1: 1, 2: 2, 3: 33, 4: None, 5: None, 6: None}


def test_same_column_added_with_different_values_conflicts_per_row(tmp_path):
    repo = new_repo(tmp_path)
    for branch in (SRC, DST):
        repo.add_columns("t", pa.field("c", pa.int64()), branch=branch)
    upsert(repo, SRC, id=[1], a=[1], b=["x1"], c=[1])
    upsert(repo, DST, id=[1], a=[1], b=["x1"], c=[2])
    result = attempt(repo=repo)
    assert [(c.kind, dict(c.key), c.columns) for c in result.conflicts] == [("row.update_update", {"id": 1}, ("c",))]


def test_same_column_added_with_different_types_is_schema_column(tmp_path):
    repo = new_repo(tmp_path)
    repo.add_columns("t", pa.field("c", pa.string()), branch=SRC)
    repo.add_columns("t", pa.field("c", pa.int64()), branch=DST)
    upsert(repo, SRC, id=[2], a=[2], b=["x2"], c=["7"])
    upsert(repo, DST, id=[1], a=[1], b=["x1"], c=[5])
    result = attempt(repo=repo)
    schema_conflicts = [c for c in result.conflicts if c.kind.startswith("schema.")]
    assert [(c.kind, c.table, c.columns) for c in schema_conflicts] == [("schema.column", "t", ("c",))]
    c = schema_conflicts[0]
    assert c.base is None and c.ours == {"type": "int64"} and c.theirs == {"type": "string"}


def test_schema_column_conflict_with_uncastable_values_is_reported_not_crashed(tmp_path):
    repo = new_repo(tmp_path)
    repo.add_columns("t", pa.field("c", pa.string()), branch=SRC)
    repo.add_columns("t", pa.field("c", pa.int64()), branch=DST)
    upsert(repo, SRC, id=[2], a=[2], b=["x2"], c=["not a number"])
    upsert(repo, DST, id=[1], a=[1], b=["x1"], c=[5])
    with pytest.raises(MergeConflictError) as info:
        merge(SRC, DST, repo=repo)
    assert ("schema.column", "t") in kinds(info.value.result)


def test_schema_column_conflict_with_out_of_range_values_is_reported_not_crashed(tmp_path):
    repo = new_repo(tmp_path, {"t": (pa.table({"id": [1, 2], "a": pa.array([1, 2], pa.int16())}), ["id"])})
    repo.alter_column("t", "a", pa.int32(), branch=DST)
    repo.alter_column("t", "a", pa.int64(), branch=SRC)
    repo.upsert("t", pa.table({"id": [2], "a": [2 ** 40]}), branch=SRC)
    result = merge(SRC, DST, repo=repo, dry_run=True)
    assert ("schema.column", "t") in kinds(result)


def test_types_widened_differently_conflict_and_strategies_keep_row_changes(tmp_path):
    repo = new_repo(tmp_path, {"t": (pa.table({"id": [1, 2, 3], "a": pa.array([1, 2, 3], pa.int16()),
                                               "b": ["x1", "x2", "x3"]}), ["id"])})
    repo.alter_column("t", "a", pa.int32(), branch=DST)
    repo.upsert("t", pa.table({"id": [1], "a": pa.array([1], pa.int32()), "b": ["dest"]}), branch=DST)
    repo.alter_column("t", "a", pa.int64(), branch=SRC)
    repo.upsert("t", pa.table({"id": [2], "a": [222], "b": ["x2"]}), branch=SRC)
    result = attempt(repo=repo)
    assert [(c.kind, c.columns) for c in result.conflicts] == [("schema.column", ("a",))]
    assert result.conflicts[0].ours == {"type": "int32"} and result.conflicts[0].theirs == {"type": "int64"}
    repo.branches.create("main2", from_ref=DST)
    # source-wins: the wider source type, and the row changes of both sides
    merge(SRC, DST, repo=repo, strategy="source-wins")
    assert repo.schema("t", DST).field("a").type == pa.int64()
    assert keyed(repo, "t") == {1: {"a": 1, "b": "dest"}, 2: {"a": 222, "b": "x2"}, 3: {"a": 3, "b": "x3"}}
    # dest-wins: dest's type stays, and the row changes of both sides are still there
    merge(SRC, "main2", repo=repo, strategy="dest-wins")
    assert repo.schema("t", "main2").field("a").type == pa.int32()
    assert keyed(repo, "t", "main2") == {1: {"a": 1, "b": "dest"}, 2: {"a": 222, "b": "x2"}, 3: {"a": 3, "b": "x3"}}


def test_column_dropped_on_one_side_unchanged_on_the_other_is_dropped(tmp_path):
    repo = new_repo(tmp_path)
    repo.drop_columns("t", ["b"], branch=SRC)
    upsert(repo, DST, id=[1], a=[10], b=["x1"])  # dest changes a, not b
    result = merge(SRC, DST, repo=repo)
    assert not result.conflicts
    assert repo.schema("t", DST).names == ["id", "a"]
    assert keyed(repo, "t")[1] == {"a": 10}


@pytest.mark.parametrize("dropper", [SRC, DST])
def test_column_dropped_vs_values_changed_is_schema_drop_modify(tmp_path, dropper):
    repo = new_repo(tmp_path)
    changer = DST if dropper == SRC else SRC
    repo.drop_columns("t", ["b"], branch=dropper)
    upsert(repo, changer, id=[1], a=[1], b=["changed"])
    result = attempt(repo=repo)
    assert [(c.kind, c.table, c.columns) for c in result.conflicts] == [("schema.drop_modify", "t", ("b",))]
    repo.branches.create("main2", from_ref=DST)
    merge(SRC, DST, repo=repo, strategy="source-wins")
    merge(SRC, "main2", repo=repo, strategy="dest-wins")
    winner_keeps_b = {DST: dropper == DST, "main2": dropper == SRC}  # source-wins / dest-wins
    for branch, keeps in winner_keeps_b.items():
        names = repo.schema("t", branch).names
        assert ("b" in names) == keeps, (branch, names)
        if keeps:
            assert keyed(repo, "t", branch)[1]["b"] == "changed"


@pytest.mark.parametrize("dropper", [SRC, DST])
def test_column_dropped_vs_rows_inserted_with_values_in_it_is_schema_drop_modify(tmp_path, dropper):
    repo = new_repo(tmp_path)
    inserter = DST if dropper == SRC else SRC
    repo.drop_columns("t", ["b"], branch=dropper)
    upsert(repo, inserter, id=[9], a=[9], b=["new"])
    result = merge(SRC, DST, repo=repo, dry_run=True)
    assert [(c.kind, c.columns) for c in result.conflicts] == [("schema.drop_modify", ("b",))]


def test_schema_drop_modify_source_wins_keeps_row_changes_of_both_sides(tmp_path):
    """Dest dropped b, the source changed b: source-wins restores b with the source's values, and
    the dest's other row changes stay."""
    repo = new_repo(tmp_path)
    repo.drop_columns("t", ["b"], branch=DST)
    upsert(repo, DST, id=[2], a=[20])
    upsert(repo, SRC, id=[1, 3], a=[1, 30], b=["changed", "x3"])
    merge(SRC, DST, repo=repo, strategy="source-wins")
    rows = keyed(repo, "t")
    assert rows[1] == {"a": 1, "b": "changed"}
    assert rows[2]["a"] == 20
    assert rows[3]["a"] == 30


def test_schema_drop_modify_source_wins_restores_the_sources_column_values(tmp_path):
    repo = new_repo(tmp_path)
    repo.drop_columns("t", ["b"], branch=DST)
    upsert(repo, SRC, id=[1], a=[1], b=["changed"])
    merge(SRC, DST, repo=repo, strategy="source-wins")
    assert {k: r["b"] for k, r in keyed(repo, "t").items()} == \
        {1: "changed", 2: "x2", 3: "x3", 4: "x4", 5: "x5", 6: "x6"}


def test_schema_drop_modify_dest_wins_keeps_row_changes_of_both_sides(tmp_path):
    repo = new_repo(tmp_path)
    repo.drop_columns("t", ["b"], branch=SRC)
    upsert(repo, SRC, id=[2], a=[20])
    upsert(repo, DST, id=[1], a=[1], b=["changed"])
    merge(SRC, DST, repo=repo, strategy="dest-wins")
    rows = keyed(repo, "t")
    assert rows[1] == {"a": 1, "b": "changed"}
    assert rows[2] == {"a": 20, "b": "x2"}


@pytest.mark.parametrize("widener", [SRC, DST])
def test_type_widened_on_one_side_is_applied(tmp_path, widener):
    repo = new_repo(tmp_path, {"t": (pa.table({"id": [1, 2, 3], "a": pa.array([1, 2, 3], pa.int32()),
                                               "b": ["x1", "x2", "x3"]}), ["id"])})
    other = DST if widener == SRC else SRC
    repo.alter_column("t", "a", pa.int64(), branch=widener)
    repo.upsert("t", pa.table({"id": [1], "a": [2 ** 40], "b": ["x1"]}), branch=widener)
    repo.upsert("t", pa.table({"id": [2], "a": pa.array([2], pa.int32()), "b": ["other"]}), branch=other)
    result = merge(SRC, DST, repo=repo)
    assert not result.conflicts
    assert repo.schema("t", DST).field("a").type == pa.int64()
    assert keyed(repo, "t") == {1: {"a": 2 ** 40, "b": "x1"}, 2: {"a": 2, "b": "other"}, 3: {"a": 3, "b": "x3"}}


def test_primary_key_change_is_schema_primary_key(tmp_path):
    """``overwrite`` cannot change a key, but dropping and re-creating a table in one transaction can."""
    repo = new_repo(tmp_path)
    with repo.transaction(SRC, message="re-key t") as tx:
        tx.drop_table("t")
        tx.create_table("t", base_t(), ["id", "b"])
    upsert(repo, DST, id=[1], a=[10], b=["x1"])
    result = attempt(repo=repo)
    assert [(c.kind, c.table, c.columns) for c in result.conflicts] == [("schema.primary_key", "t", ("b",))]
    repo.branches.create("main2", from_ref=DST)
    merge(SRC, DST, repo=repo, strategy="source-wins")
    assert repo.primary_key("t", DST) == ("id", "b")
    merge(SRC, "main2", repo=repo, strategy="dest-wins")
    assert repo.primary_key("t", "main2") == ("id",)
    assert keyed(repo, "t", "main2")[1]["a"] == 10


def test_primary_key_changed_on_source_while_dest_only_rewrote_identical_rows_is_taken(tmp_path):
    repo = new_repo(tmp_path)
    with repo.transaction(SRC, message="re-key t") as tx:
        tx.drop_table("t")
        tx.create_table("t", base_t(), ["id", "b"])
    repo.overwrite("t", base_t(), branch=DST)  # same rows, new version: no change
    result = merge(SRC, DST, repo=repo, dry_run=True)
    assert not result.conflicts
    merge(SRC, DST, repo=repo)
    assert repo.primary_key("t", DST) == ("id", "b")


def test_primary_key_changed_on_one_side_only_is_taken(tmp_path):
    repo = new_repo(tmp_path, {"t": (base_t(), ["id"]), "u": (tbl(id=[1], v=[1]), ["id"])})
    with repo.transaction(SRC, message="re-key t") as tx:
        tx.drop_table("t")
        tx.create_table("t", base_t(), ["id", "b"])
    upsert(repo, DST, table="u", id=[1], v=[2])
    result = merge(SRC, DST, repo=repo)
    assert not result.conflicts
    assert repo.primary_key("t", DST) == ("id", "b")


# ---------------------------------------------------------------------------------------------- rows
def test_rows_changed_on_one_side_are_taken(tmp_path):
    repo = new_repo(tmp_path)
    upsert(repo, SRC, id=[1, 7], a=[10, 7], b=["x1", "s7"])
    delete(repo, SRC, [2])
    upsert(repo, DST, id=[3, 8], a=[3, 8], b=["d3", "d8"])
    delete(repo, DST, [4])
    result = merge(SRC, DST, repo=repo)
    s = result.stats["t"]
    assert (s.action, s.rows_from_source, s.converged, s.cells_merged, s.conflicts) == ("merged", 3, 0, 0, 0)
    assert keyed(repo, "t") == {1: {"a": 10, "b": "x1"}, 3: {"a": 3, "b": "d3"}, 5: {"a": 5, "b": "x5"},
                                6: {"a": 6, "b": "x6"}, 7: {"a": 7, "b": "s7"}, 8: {"a": 8, "b": "d8"}}


def test_rows_changed_alike_are_kept_and_counted_as_converged(tmp_path):
    repo = new_repo(tmp_path)
    for branch in (SRC, DST):
        upsert(repo, branch, id=[1, 7], a=[10, 7], b=["x1", "same"])
        delete(repo, branch, [2])
    upsert(repo, SRC, id=[3], a=[30], b=["x3"])
    result = merge(SRC, DST, repo=repo)
    s = result.stats["t"]
    assert not result.conflicts
    assert s.converged == 3  # id 1 updated alike, id 7 inserted alike, id 2 deleted on both
    assert s.rows_from_source == 1
    rows = keyed(repo, "t")
    assert 2 not in rows and rows[1] == {"a": 10, "b": "x1"} and rows[7] == {"a": 7, "b": "same"}
    assert rows[3]["a"] == 30


def test_rows_deleted_on_both_sides_are_deleted(tmp_path):
    repo = new_repo(tmp_path)
    delete(repo, SRC, [1, 2])
    delete(repo, DST, [2, 3])
    merge(SRC, DST, repo=repo)
    assert sorted(keyed(repo, "t")) == [4, 5, 6]


@pytest.mark.parametrize("deleter", [SRC, DST])
def test_row_deleted_vs_changed_is_delete_modify(tmp_path, deleter):
    repo = new_repo(tmp_path)
    changer = DST if deleter == SRC else SRC
    delete(repo, deleter, [1])
    upsert(repo, changer, id=[1], a=[10], b=["x1"])
    result = attempt(repo=repo)
    assert len(result.conflicts) == 1
    c = result.conflicts[0]
    assert (c.kind, c.table, dict(c.key)) == ("row.delete_modify", "t", {"id": 1})
    assert dict(c.base) == {"a": 1, "b": "x1"}
    changed = {"a": 10, "b": "x1"}
    if deleter == SRC:
        assert c.theirs is None and dict(c.ours) == changed
    else:
        assert c.ours is None and dict(c.theirs) == changed
    repo.branches.create("main2", from_ref=DST)
    merge(SRC, DST, repo=repo, strategy="source-wins")
    merge(SRC, "main2", repo=repo, strategy="dest-wins")
    wins = {DST: deleter == SRC, "main2": deleter == DST}  # branch -> row deleted in the result
    for branch, deleted in wins.items():
        rows = keyed(repo, "t", branch)
        assert (1 not in rows) == deleted
        if not deleted:
            assert rows[1] == changed


def test_row_inserted_on_both_with_different_values_is_insert_insert(tmp_path):
    repo = new_repo(tmp_path)
    upsert(repo, SRC, id=[7], a=[70], b=["same"])
    upsert(repo, DST, id=[7], a=[71], b=["same"])
    result = attempt(repo=repo)
    assert [(c.kind, dict(c.key), c.columns, c.base, dict(c.ours), dict(c.theirs)) for c in result.conflicts] == \
        [("row.insert_insert", {"id": 7}, ("a",), None, {"a": 71}, {"a": 70})]
    repo.branches.create("main2", from_ref=DST)
    merge(SRC, DST, repo=repo, strategy="source-wins")
    merge(SRC, "main2", repo=repo, strategy="dest-wins")
    assert keyed(repo, "t")[7] == {"a": 70, "b": "same"}
    assert keyed(repo, "t", "main2")[7] == {"a": 71, "b": "same"}


def test_deleted_and_reinserted_row_on_source_is_an_update(tmp_path):
    repo = new_repo(tmp_path)
    delete(repo, SRC, [1])
    upsert(repo, SRC, id=[1], a=[1], b=["again"])
    upsert(repo, DST, id=[1], a=[10], b=["x1"])
    result = merge(SRC, DST, repo=repo)
    assert not result.conflicts
    assert keyed(repo, "t")[1] == {"a": 10, "b": "again"}


# ---------------------------------------------------------------------------------------------- cells
def test_different_cells_of_one_row_are_merged_cell_by_cell(tmp_path):
    repo = new_repo(tmp_path)
    upsert(repo, SRC, id=[1, 2], a=[10, 2], b=["x1", None])
    upsert(repo, DST, id=[1, 2], a=[1, 22], b=["d1", "x2"])
    result = merge(SRC, DST, repo=repo)
    assert not result.conflicts
    s = result.stats["t"]
    assert (s.cells_merged, s.rows_from_source, s.conflicts) == (2, 2, 0)
    rows = keyed(repo, "t")
    assert rows[1] == {"a": 10, "b": "d1"}
    assert rows[2] == {"a": 22, "b": None}  # a null written by the source is a change like any other


def test_row_granularity_makes_different_cells_an_update_update(tmp_path):
    repo = new_repo(tmp_path)
    upsert(repo, SRC, id=[1], a=[10], b=["x1"])
    upsert(repo, DST, id=[1], a=[1], b=["d1"])
    result = attempt(repo=repo, granularity="row")
    assert [(c.kind, dict(c.key), c.columns) for c in result.conflicts] == [("row.update_update", {"id": 1}, ("a", "b"))]
    repo.branches.create("main2", from_ref=DST)
    merge(SRC, DST, repo=repo, granularity="row", strategy="source-wins")
    merge(SRC, "main2", repo=repo, granularity="row", strategy="dest-wins")
    assert keyed(repo, "t")[1] == {"a": 10, "b": "x1"}
    assert keyed(repo, "t", "main2")[1] == {"a": 1, "b": "d1"}


def test_same_cell_changed_differently_is_update_update_listing_the_columns(tmp_path):
    repo = new_repo(tmp_path)
    upsert(repo, SRC, id=[1, 2], a=[10, 20], b=["s1", "x2"])
    upsert(repo, DST, id=[1, 2], a=[11, 21], b=["d1", "x2"])
    result = attempt(repo=repo)
    got = sorted((c.key["id"], c.columns, dict(c.base), dict(c.ours), dict(c.theirs)) for c in result.conflicts)
    assert got == [
        (1, ("a", "b"), {"a": 1, "b": "x1"}, {"a": 11, "b": "d1"}, {"a": 10, "b": "s1"}),
        (2, ("a",), {"a": 2}, {"a": 21}, {"a": 20}),
    ]
    assert all(c.kind == "row.update_update" for c in result.conflicts)


def test_same_cell_conflict_and_other_cell_merge_in_one_row(tmp_path):
    """Both change a differently; only the source changes b: dest-wins keeps dest's a and still
    takes the source's b."""
    repo = new_repo(tmp_path)
    upsert(repo, SRC, id=[1], a=[10], b=["s1"])
    upsert(repo, DST, id=[1], a=[11], b=["x1"])
    result = attempt(repo=repo)
    assert [(c.kind, c.columns) for c in result.conflicts] == [("row.update_update", ("a",))]
    repo.branches.create("main2", from_ref=DST)
    merge(SRC, DST, repo=repo, strategy="source-wins")
    merge(SRC, "main2", repo=repo, strategy="dest-wins")
    assert keyed(repo, "t")[1] == {"a": 10, "b": "s1"}
    assert keyed(repo, "t", "main2")[1] == {"a": 11, "b": "s1"}


def test_strategy_resolved_rows_do_not_wipe_dest_only_columns_of_cell_merged_rows(tmp_path):
    repo = new_repo(tmp_path, {"t": (tbl(id=[1, 2, 3], a=[1, 2, 3]), ["id"])})
    repo.add_columns("t", pa.field("c", pa.int64()), branch=DST)
    upsert(repo, DST, id=[3], a=[3], c=[7])   # dest sets its new column on id 3
    delete(repo, DST, [1])                    # dest deletes id 1 ...
    upsert(repo, SRC, id=[1, 3], a=[10, 30])  # ... which the source changes (delete_modify); a of id 3 merges
    result = merge(SRC, DST, repo=repo, strategy="source-wins")
    assert result.stats["t"].cells_merged == 1 and result.stats["t"].resolved == 1
    assert keyed(repo, "t") == {1: {"a": 10, "c": None}, 2: {"a": 2, "c": None}, 3: {"a": 30, "c": 7}}


def test_same_cell_changed_alike_plus_different_cells_merges(tmp_path):
    repo = new_repo(tmp_path, {"t": (pa.table({"id": [1], "a": [1], "b": ["x"], "c": pa.array([None], pa.int64())}),
                                      ["id"])})
    upsert(repo, SRC, id=[1], a=[5], b=["s"], c=[None])
    upsert(repo, DST, id=[1], a=[5], b=["x"], c=[3])
    result = merge(SRC, DST, repo=repo)
    assert not result.conflicts
    assert keyed(repo, "t")[1] == {"a": 5, "b": "s", "c": 3}


def test_nested_temporal_binary_and_decimal_values_merge_cell_by_cell(tmp_path):
    import datetime as dt
    from decimal import Decimal

    schema = pa.schema([("id", pa.string()), ("l", pa.list_(pa.int64())),
                        ("s", pa.struct([("x", pa.int64()), ("y", pa.string())])),
                        ("ts", pa.timestamp("us", tz="UTC")), ("d", pa.date32()), ("bin", pa.binary()),
                        ("dec", pa.decimal128(10, 2))])
    utc = dt.timezone.utc
    rows = [{"id": f"k{i}", "l": [i], "s": {"x": i, "y": "a"}, "ts": dt.datetime(2024, 1, 1, tzinfo=utc),
             "d": dt.date(2024, 1, i + 1), "bin": b"x", "dec": Decimal("1.50")} for i in range(4)]
    repo = new_repo(tmp_path, {"n": (pa.Table.from_pylist(rows, schema=schema), ["id"])})

    def edit(branch, i, **change):
        repo.upsert("n", pa.Table.from_pylist([{**rows[i], **change}], schema=schema), branch=branch)

    edit(SRC, 0, l=[1, 2], s={"x": 9, "y": "a"})
    edit(DST, 0, ts=dt.datetime(2025, 1, 1, tzinfo=utc), d=dt.date(2030, 1, 1))
    edit(SRC, 1, bin=b"yy", dec=Decimal("2.25"))
    edit(DST, 1, bin=b"zz")
    edit(SRC, 2, l=None, s=None)
    result = attempt(repo=repo)
    assert [(c.kind, dict(c.key), c.columns, dict(c.ours), dict(c.theirs)) for c in result.conflicts] == \
        [("row.update_update", {"id": "k1"}, ("bin",), {"bin": b"zz"}, {"bin": b"yy"})]
    for fmt in ("json", "sarif", "junit", "github", "markdown"):
        assert result.report(fmt)
    merge(SRC, DST, repo=repo, strategy="dest-wins")
    got = {r["id"]: r for r in repo.read("n", DST).to_pylist()}
    assert got["k0"]["l"] == [1, 2] and got["k0"]["s"] == {"x": 9, "y": "a"}
    assert got["k0"]["d"] == dt.date(2030, 1, 1) and got["k0"]["ts"].year == 2025
    assert got["k1"]["bin"] == b"zz" and got["k1"]["dec"] == Decimal("2.25")
    assert got["k2"]["l"] is None and got["k2"]["s"] is None
    assert got["k3"] == {**rows[3], "ts": got["k3"]["ts"]} and got["k3"]["ts"] == rows[3]["ts"]


def test_composite_keys_and_nulls(tmp_path):
    data = tbl(k1=[1, 1, 2], k2=["a", "b", "a"], v=[None, 1.5, 2.0], w=["p", None, "r"])
    repo = new_repo(tmp_path, {"c": (data, ["k1", "k2"])})
    repo.upsert("c", tbl(k1=[1, 2], k2=["a", "a"], v=[7.0, 2.0], w=["p", None]), branch=SRC)
    repo.upsert("c", tbl(k1=[1, 3], k2=["a", "z"], v=[None, None], w=["dest", None]), branch=DST)
    repo.delete_keys("c", tbl(k1=[1], k2=["b"]), branch=SRC)
    merge(SRC, DST, repo=repo)
    assert keyed(repo, "c", key=("k1", "k2")) == {
        (1, "a"): {"v": 7.0, "w": "dest"}, (2, "a"): {"v": 2.0, "w": None}, (3, "z"): {"v": None, "w": None}}


# ---------------------------------------------------------------------------------------------- strategies
def every_kind_repo(tmp_path: Path) -> trimerge.Repository:
    """One conflict of every kind (table granularity aside), each in its own table."""
    repo = new_repo(tmp_path, {
        "drop_mod": (tbl(id=[1, 2], v=[1, 2]), ["id"]),
        "schema_col": (tbl(id=[1, 2], v=[1, 2]), ["id"]),
        "schema_drop": (tbl(id=[1, 2], v=[1, 2], w=["a", "b"]), ["id"]),
        "pk": (tbl(id=[1, 2], v=[1, 2]), ["id"]),
        "rows": (base_t(), ["id"]),
    })
    # table.drop_modify
    repo.drop_table("drop_mod", branch=SRC)
    repo.upsert("drop_mod", tbl(id=[1], v=[10]), branch=DST)
    # table.add_add
    repo.create_table("add_add", tbl(id=[1], v=[1]), ["id", "v"], branch=SRC)
    repo.create_table("add_add", tbl(id=[1], v=[2]), ["id"], branch=DST)
    # schema.column (values castable either way)
    repo.add_columns("schema_col", pa.field("c", pa.string()), branch=SRC)
    repo.upsert("schema_col", tbl(id=[1], v=[1], c=["5"]), branch=SRC)
    repo.add_columns("schema_col", pa.field("c", pa.int64()), branch=DST)
    repo.upsert("schema_col", tbl(id=[2], v=[2], c=[6]), branch=DST)
    # schema.drop_modify
    repo.drop_columns("schema_drop", ["w"], branch=DST)
    repo.upsert("schema_drop", tbl(id=[1], v=[1], w=["changed"]), branch=SRC)
    # schema.primary_key
    with repo.transaction(SRC) as tx:
        tx.drop_table("pk")
        tx.create_table("pk", tbl(id=[1, 2], v=[1, 2]), ["id", "v"])
    repo.upsert("pk", tbl(id=[1], v=[10]), branch=DST)
    # rows: delete_modify both ways, insert_insert, update_update
    delete(repo, SRC, [1], table="rows")
    upsert(repo, DST, table="rows", id=[1], a=[10], b=["x1"])
    delete(repo, DST, [2], table="rows")
    upsert(repo, SRC, table="rows", id=[2], a=[20], b=["x2"])
    upsert(repo, SRC, table="rows", id=[3, 7], a=[30, 70], b=["x3", "s7"])
    upsert(repo, DST, table="rows", id=[3, 7], a=[31, 71], b=["x3", "d7"])
    return repo


ALL_KINDS = ["row.delete_modify", "row.delete_modify", "row.insert_insert", "row.update_update", "schema.column",
             "schema.drop_modify", "schema.primary_key", "table.add_add", "table.drop_modify"]


def test_every_conflict_kind_is_found(tmp_path):
    repo = every_kind_repo(tmp_path)
    result = attempt(repo=repo)
    assert sorted(c.kind for c in result.conflicts) == ALL_KINDS
    assert {c.kind: c.table for c in result.conflicts if not c.kind.startswith("row.")} == {
        "schema.column": "schema_col", "schema.drop_modify": "schema_drop", "schema.primary_key": "pk",
        "table.add_add": "add_add", "table.drop_modify": "drop_mod"}
    assert sum(s.conflicts for s in result.stats.values()) == len(ALL_KINDS)


def test_source_wins_resolves_every_kind(tmp_path):
    repo = every_kind_repo(tmp_path)
    result = merge(SRC, DST, repo=repo, strategy="source-wins")
    assert result.status == "merged" and not result.conflicts
    assert sum(s.resolved for s in result.stats.values()) == len(ALL_KINDS)
    assert result.commit.metadata.get("merge.strategy") == "source-wins"
    tables = repo.tables(DST)
    assert "drop_mod" not in tables
    assert repo.primary_key("add_add", DST) == ("id", "v")
    assert repo.primary_key("pk", DST) == ("id", "v")
    assert keyed(repo, "schema_drop")[1]["w"] == "changed"
    assert keyed(repo, "schema_col") == {1: {"v": 1, "c": 5}, 2: {"v": 2, "c": 6}}
    rows = keyed(repo, "rows")
    assert 1 not in rows and rows[2] == {"a": 20, "b": "x2"}
    assert rows[3] == {"a": 30, "b": "x3"} and rows[7] == {"a": 70, "b": "s7"}


def test_dest_wins_resolves_every_kind(tmp_path):
    repo = every_kind_repo(tmp_path)
    result = merge(SRC, DST, repo=repo, strategy="dest-wins")
    assert result.status == "merged" and not result.conflicts
    assert sum(s.resolved for s in result.stats.values()) == len(ALL_KINDS)
    assert keyed(repo, "drop_mod") == {1: {"v": 10}, 2: {"v": 2}}
    assert repo.primary_key("add_add", DST) == ("id",)
    assert repo.primary_key("pk", DST) == ("id",)
    assert "w" not in repo.schema("schema_drop", DST).names
    assert repo.schema("schema_col", DST).field("c").type == pa.int64()
    rows = keyed(repo, "rows")
    assert rows[1] == {"a": 10, "b": "x1"} and 2 not in rows
    assert rows[3] == {"a": 31, "b": "x3"} and rows[7] == {"a": 71, "b": "d7"}


def test_per_table_strategies_apply_per_table(tmp_path):
    repo = new_repo(tmp_path, {"t": (base_t(), ["id"]), "u": (base_t(), ["id"]), "w": (base_t(), ["id"])})
    for table in ("t", "u", "w"):
        upsert(repo, SRC, table=table, id=[1], a=[10], b=["x1"])
        upsert(repo, DST, table=table, id=[1], a=[11], b=["x1"])
    partial = attempt(repo=repo, strategy={"t": "source-wins"})
    assert kinds(partial) == [("row.update_update", "u"), ("row.update_update", "w")]
    assert partial.stats["t"].resolved == 1
    result = merge(SRC, DST, repo=repo, strategy={"t": "source-wins", "*": "dest-wins", "u": "dest-wins"})
    assert result.status == "merged"
    assert keyed(repo, "t")[1]["a"] == 10
    assert keyed(repo, "u")[1]["a"] == 11
    assert keyed(repo, "w")[1]["a"] == 11


# ---------------------------------------------------------------------------------------------- bad input, races
def test_dest_must_be_a_branch(tmp_path):
    repo = new_repo(tmp_path)
    upsert(repo, SRC, id=[1], a=[10], b=["x1"])
    repo.tags.create("v1", DST)
    tip = repo.resolve(DST)
    for dest in ("v1", tip.id, tip.id[:10], "main~0", "feature^"):
        with pytest.raises(ReadOnlyRefError) as info:
            merge(SRC, dest, repo=repo)
        assert isinstance(info.value, TrimergeError) and info.value.exit_code == 2
    assert repo.resolve(DST).id == tip.id


def test_unknown_refs_and_bad_options_are_typed_errors(tmp_path):
    repo = new_repo(tmp_path)
    upsert(repo, SRC, id=[1], a=[10], b=["x1"])
    with pytest.raises(RefNotFoundError):
        merge("nope", DST, repo=repo)
    with pytest.raises(RefNotFoundError):
        merge(SRC, "nope", repo=repo)
    with pytest.raises(InvalidOperationError):
        merge(SRC, DST, repo=repo, strategy="theirs")
    with pytest.raises(InvalidOperationError):
        merge(SRC, DST, repo=repo, strategy={"t": "ours"})
    with pytest.raises(InvalidOperationError):
        merge(SRC, DST, repo=repo, granularity="column")
    with pytest.raises(InvalidOperationError):
        merge(SRC, DST)  # no repository
    other = trimerge.Repository.init(tmp_path / "other")
    with pytest.raises(InvalidOperationError):
        merge(repo.ref(SRC), other.ref(DST))
    with pytest.raises(TrimergeError):
        merge(SRC, DST, repo=repo, dry_run=True).report("xml")


def test_dest_moving_during_the_merge_is_a_retryable_concurrent_write_error(tmp_path, monkeypatch):
    repo = new_repo(tmp_path)
    upsert(repo, SRC, id=[1], a=[10], b=["x1"])
    original = merge_plan.ThreeWay.run
    moved = {}

    def run_then_move_dest(self):
        original(self)
        if not moved:  # another writer publishes on dest after the plan was computed
            moved["commit"] = upsert(repo, DST, id=[2], a=[20], b=["x2"])

    monkeypatch.setattr(merge_plan.ThreeWay, "run", run_then_move_dest)
    with pytest.raises(ConcurrentWriteError) as info:
        merge(SRC, DST, repo=repo)
    assert info.value.retryable and info.value.exit_code == 3
    assert repo.resolve(DST).id == moved["commit"].id  # the merge published nothing
    result = merge(SRC, DST, repo=repo)  # a retry sees the new tip and succeeds
    assert result.commit.parents == (moved["commit"].id, repo.resolve(SRC).id)
    assert keyed(repo, "t")[1]["a"] == 10 and keyed(repo, "t")[2]["a"] == 20


def test_two_merges_racing_into_one_branch_publish_one_and_refuse_the_other(tmp_path, monkeypatch):
    import threading

    repo = new_repo(tmp_path, branches=(SRC, "other"))
    upsert(repo, SRC, id=[1], a=[10], b=["x1"])
    upsert(repo, "other", id=[2], a=[20], b=["x2"])
    tip = repo.resolve(DST).id
    barrier = threading.Barrier(2, timeout=60)
    original = merge_plan.ThreeWay.run

    def run_then_wait(self):
        original(self)
        barrier.wait()  # both plans are computed against the same dest tip before either publishes

    monkeypatch.setattr(merge_plan.ThreeWay, "run", run_then_wait)
    outcomes: dict[str, object] = {}

    def go(source):
        try:
            outcomes[source] = merge(source, DST, repo=trimerge.Repository.open(repo.uri))
        except Exception as exc:  # noqa: BLE001 - recorded and checked below
            outcomes[source] = exc

    threads = [threading.Thread(target=go, args=(s,)) for s in (SRC, "other")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    results = [o for o in outcomes.values() if isinstance(o, MergeResult)]
    errors = [o for o in outcomes.values() if not isinstance(o, MergeResult)]
    assert len(results) == 1 and len(errors) == 1, outcomes
    assert isinstance(errors[0], ConcurrentWriteError) and errors[0].retryable
    winner = results[0]
    assert winner.commit.parents[0] == tip
    assert repo.resolve(DST).id == winner.commit.id


def test_publish_with_a_stale_dest_tip_raises_and_leaves_no_trace(tmp_path):
    repo = new_repo(tmp_path)
    stale = repo.resolve(DST)
    upsert(repo, DST, id=[2], a=[20], b=["x2"])
    tip = repo.resolve(DST)
    with pytest.raises(ConcurrentWriteError):
        merge_publish.publish(repo, {}, DST, stale, [repo.resolve(SRC).id], [], "x", "m", {})
    assert repo.resolve(DST).id == tip.id
    upsert(repo, DST, id=[3], a=[30], b=["x3"])  # the branch is not left locked


def test_criss_cross_history_merges_through_a_virtual_base_and_leaves_no_scratch(tmp_path):
    repo = new_repo(tmp_path, {"t": (base_t(), ["id"]), "u": (base_t(), ["id"])})
    a1 = upsert(repo, DST, id=[1], a=[10], b=["x1"])
    b1 = upsert(repo, SRC, table="u", id=[1], a=[10], b=["x1"])
    merge(b1.id, DST, repo=repo)
    merge(a1.id, SRC, repo=repo)
    assert len(repo.merge_bases(SRC, DST)) == 2
    upsert(repo, SRC, id=[5], a=[50], b=["x5"])
    result = merge(SRC, DST, repo=repo)
    assert result.virtual_base and result.status == "merged" and not result.conflicts
    assert result.commit.metadata["merge.virtual_base"] == "recursive"
    assert keyed(repo, "t")[1]["a"] == 10 and keyed(repo, "t")[5]["a"] == 50
    assert keyed(repo, "u")[1]["a"] == 10
    assert not repo.docs.list("intents")  # the scratch that held the virtual base is gone
    assert not any("scratch" in key for key in repo.docs.list("locks"))
    assert not any(name.startswith("__scratch") for name in repo.refs.branch_names(include_internal=True))


def test_merge_back_between_sibling_branches(tmp_path):
    """feature and dev both fork t from main; merge feature into dev, then dev back into feature
    (the diff then reads whole fragments of sibling Lance forks)."""
    repo = new_repo(tmp_path, branches=(SRC, "dev"))
    upsert(repo, SRC, id=[1], a=[10], b=["x1"])
    upsert(repo, "dev", id=[2], a=[20], b=["x2"])
    merge(SRC, "dev", repo=repo)
    back = merge("dev", SRC, repo=repo)
    assert back.status == "merged" and not back.conflicts
    assert keyed(repo, "t", SRC) == keyed(repo, "t", "dev")
    assert keyed(repo, "t", SRC)[1]["a"] == 10 and keyed(repo, "t", SRC)[2]["a"] == 20


# ---------------------------------------------------------------------------------------------- revert, cherry-pick
def test_cherry_pick_applies_one_commits_changes_as_a_one_parent_commit(tmp_path):
    repo = new_repo(tmp_path)
    upsert(repo, SRC, id=[1], a=[10], b=["x1"])
    picked = upsert(repo, SRC, id=[2, 7], a=[20, 7], b=["x2", "s7"])
    upsert(repo, DST, id=[3], a=[30], b=["x3"])
    tip = repo.resolve(DST)
    result = cherry_pick(picked.id, DST, repo=repo)
    assert result.status == "merged"
    assert result.commit.parents == (tip.id,)
    assert result.commit.metadata["cherry_pick.commit"] == picked.id
    rows = keyed(repo, "t")
    assert rows[1]["a"] == 1  # the earlier feature commit is not picked
    assert rows[2]["a"] == 20 and rows[7] == {"a": 7, "b": "s7"} and rows[3]["a"] == 30
    with pytest.raises(InvalidOperationError):
        cherry_pick(repo.log(DST)[-1].id, DST, repo=repo)  # the root commit


def test_revert_undoes_one_commits_changes(tmp_path):
    repo = new_repo(tmp_path)
    bad = upsert(repo, DST, id=[1, 7], a=[10, 7], b=["x1", "s7"])
    upsert(repo, DST, id=[2], a=[20], b=["x2"])
    tip = repo.resolve(DST)
    result = revert(bad.id, DST, repo=repo)
    assert result.commit.parents == (tip.id,)
    assert result.commit.metadata["revert.commit"] == bad.id
    rows = keyed(repo, "t")
    assert rows[1] == {"a": 1, "b": "x1"} and 7 not in rows and rows[2]["a"] == 20


def test_cherry_pick_and_revert_of_table_creation_and_drop(tmp_path):
    repo = new_repo(tmp_path)
    created = repo.create_table("z", tbl(id=[1, 2], v=[1, 2]), ["id"], branch=SRC)
    result = cherry_pick(created.id, DST, repo=repo)
    assert result.stats["z"].action == "added" and keyed(repo, "z") == {1: {"v": 1}, 2: {"v": 2}}
    result = revert(created.id, DST, repo=repo)
    assert result.stats["z"].action == "dropped" and "z" not in repo.tables(DST)
    dropped = repo.drop_table("t", branch=DST)
    revert(dropped.id, DST, repo=repo)
    assert keyed(repo, "t") == keyed(repo, "t", SRC)


def test_revert_of_a_row_changed_again_conflicts(tmp_path):
    repo = new_repo(tmp_path)
    bad = upsert(repo, DST, id=[1], a=[10], b=["x1"])
    upsert(repo, DST, id=[1], a=[11], b=["x1"])
    with pytest.raises(MergeConflictError) as info:
        revert(bad.id, DST, repo=repo)
    c = info.value.result.conflicts[0]
    assert (c.kind, c.key, c.base, c.ours, c.theirs) == ("row.update_update", {"id": 1}, {"a": 10}, {"a": 11}, {"a": 1})
    revert(bad.id, DST, repo=repo, strategy="source-wins")
    assert keyed(repo, "t")[1]["a"] == 1
    with pytest.raises(ReadOnlyRefError):
        revert(bad.id, bad.id, repo=repo)


def test_conflict_is_a_frozen_value_with_a_description():
    c = Conflict("row.update_update", "t", {"id": 1}, ("a",), {"a": 1}, {"a": 2}, {"a": 3})
    assert "row.update_update" in c.describe() and "id=1" in c.describe()
    assert c.to_json()["columns"] == ["a"]
    with pytest.raises(Exception):
        c.kind = "x"  # type: ignore[misc]
