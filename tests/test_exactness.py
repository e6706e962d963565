"""Issue 25's reproductions: histories whose metadata shortcuts used to miss rows, crash or lose
values. Each is checked against the brute-force diff (both snapshots read whole, joined by key)."""

from __future__ import annotations

import pyarrow as pa
import pytest

import trimerge
import trimerge.merge.result
from trimerge.diff import diff
from trimerge.merge import merge, revert
from diffref import engine_rows, reference_diff


def rows(items):
    return pa.Table.from_pylist(items)


def check_diff(repo, a, b, table="t", key=("id",)):
    """The engine's diff of ``table`` from ``a`` to ``b`` equals the brute-force one."""
    before = repo.read(table, ref=a) if table in repo.resolve(a).tables else None
    after = repo.read(table, ref=b) if table in repo.resolve(b).tables else None
    want = reference_diff(before, after, list(key))
    got = engine_rows(diff(a, b, repo=repo).tables[table].rows(), list(key))
    assert got == want, (a, b)
    return got


@pytest.fixture
def reverted(repo):
    """Issue 25's first history: C updates key 2, a revert brings it back, then any commit."""
    repo.create_table("t", rows([{"id": 1, "s": "x"}, {"id": 2, "s": "b"}]), primary_key="id")
    repo.upsert("t", rows([{"id": 2, "s": "a"}]))
    c = repo.resolve("main").id
    revert("main", "main", repo=repo)
    repo.delete("t", "s = 'zzz'")
    return repo, c


def test_diff_across_a_revert_then_a_commit(reverted):
    repo, c = reverted
    assert check_diff(repo, c, "main~1") == {(2,): ("update", ("s",))}
    assert check_diff(repo, c, "main") == {(2,): ("update", ("s",))}
    assert check_diff(repo, "main", c) == {(2,): ("update", ("s",))}
    assert diff(c, "main", repo=repo).tables["t"].plan.method != "delta"


def test_reverted_delete_in_both_directions(repo):
    repo.create_table("t", rows([{"id": 1, "s": "x"}, {"id": 2, "s": "b"}]), primary_key="id")
    repo.delete("t", "id = 2")
    c = repo.resolve("main").id
    revert("main", "main", repo=repo)
    repo.delete("t", "s = 'zzz'")
    assert check_diff(repo, c, "main") == {(2,): ("insert", ())}
    assert check_diff(repo, "main", c) == {(2,): ("delete", ())}


def test_update_after_a_revived_row_does_not_crash(repo):
    repo.create_table("t", rows([{"id": 1, "s": "x"}, {"id": 2, "s": "b"}]), primary_key="id")
    repo.delete("t", "id = 2")
    c = repo.resolve("main").id
    revert("main", "main", repo=repo)
    repo.upsert("t", rows([{"id": 2, "s": "c"}]))
    assert check_diff(repo, c, "main") == {(2,): ("insert", ())}
    assert check_diff(repo, "main", c) == {(2,): ("delete", ())}
    check_diff(repo, "main~1", "main")


def test_merge_keeps_a_reverted_change_as_a_conflict(repo):
    repo.create_table("t", rows([{"id": 1, "s": "x"}, {"id": 2, "s": "b"}]), primary_key="id")
    repo.upsert("t", rows([{"id": 2, "s": "a"}]))
    repo.branches.create("feature", from_ref="main")
    revert("main", "main", repo=repo)
    repo.delete("t", "s = 'zzz'")
    repo.upsert("t", rows([{"id": 2, "s": "z"}]), branch="feature")
    result = merge("feature", "main", repo=repo, dry_run=True)
    assert result.status == "conflicts"
    assert [c.kind for c in result.conflicts] == ["row.update_update"]
    with pytest.raises(trimerge.merge.result.MergeConflictError):
        merge("feature", "main", repo=repo)
    assert repo.read("t").sort_by("id").column("s").to_pylist() == ["x", "b"]


def test_column_only_after_is_a_change(repo):
    repo.create_table("t", rows([{"id": 1, "s": "x", "i": 7}, {"id": 2, "s": "y", "i": None}]), primary_key="id")
    repo.branches.create("b1", from_ref="main")
    repo.drop_columns("t", ["i"])
    assert check_diff(repo, "main", "b1") == {(1,): ("update", ("i",))}
    assert check_diff(repo, "b1", "main") == {}


def test_dropped_and_re_added_column_is_a_change(repo):
    repo.create_table("t", rows([{"id": 1, "f": 1.5}, {"id": 2, "f": None}]), primary_key="id")
    before = repo.resolve("main").id
    repo.drop_columns("t", ["f"])
    repo.add_columns("t", pa.field("f", pa.float64()))
    d = diff(before, "main", repo=repo)
    assert d.tables["t"].status == "modified"
    assert check_diff(repo, before, "main") == {(1,): ("update", ("f",))}
    assert check_diff(repo, "main", before) == {(1,): ("update", ("f",))}


def test_merge_that_restores_a_dropped_column_keeps_every_value(repo):
    repo.create_table("t", rows([{"id": 1, "s": "s1", "f": 1.0}, {"id": 2, "s": "s2", "f": 2.0}]), primary_key="id")
    repo.branches.create("src", from_ref="main")
    repo.upsert("t", rows([{"id": 2, "s": "S2", "f": 20.0}, {"id": 1, "s": "s1", "f": 10.0}]), branch="src")
    repo.drop_columns("t", ["s"])
    repo.upsert("t", rows([{"id": 1, "f": 11.0}]))
    merge("src", "main", repo=repo, strategy="source-wins")
    got = {r["id"]: r for r in repo.read("t").to_pylist()}
    for k, r in got.items():
        for col, value in r.items():
            held = {row.get(col) for ref in ("main~1", "src", "main^1") for row in repo.read("t", ref=ref).to_pylist()
                    if row["id"] == k and col in row}
            assert value in held, (k, col, value, held)
    assert got[2]["s"] == "S2"
    assert got[1]["s"] == "s1"


def test_update_after_widening_a_string_key(repo):
    repo.create_table("t", rows([{"k": "a", "v": 1}, {"k": "b", "v": 2}]), primary_key="k")
    repo.alter_column("t", "k", pa.large_string())
    repo.update("t", rows([{"k": "a", "v": 5}]))
    repo.delete("t", "k = 'b'")
    assert repo.read("t").to_pylist() == [{"k": "a", "v": 5}]


def test_one_sided_key_widening_merges(repo):
    repo.create_table("t", pa.table({"id": pa.array([1, 2], pa.int32()), "v": ["a", "b"]}), primary_key="id")
    repo.branches.create("wide", from_ref="main")
    repo.alter_column("t", "id", pa.int64(), branch="wide")
    repo.upsert("t", pa.table({"id": pa.array([3], pa.int64()), "v": ["c"]}), branch="wide")
    repo.upsert("t", pa.table({"id": pa.array([1], pa.int32()), "v": ["A"]}))
    result = merge("wide", "main", repo=repo)
    assert result.status == "merged"
    out = repo.read("t")
    assert out.schema.field("id").type == pa.int64()
    assert sorted(out.to_pylist(), key=lambda r: r["id"]) == [{"id": 1, "v": "A"}, {"id": 2, "v": "b"},
                                                             {"id": 3, "v": "c"}]


def test_write_after_reverting_a_column_re_add_keeps_the_values(repo):
    """The revert points the table back at a version whose column ``f`` is another Lance field
    than the latest's: the next write must build on the reverted content, not on nulls."""
    repo.create_table("t", rows([{"id": 1, "f": 1.5}, {"id": 2, "f": None}]), primary_key="id")
    repo.drop_columns("t", ["f"])
    repo.add_columns("t", pa.field("f", pa.float64()))
    repo.branches.create("b", from_ref="main~2")
    # revert the two schema commits on main by merging main~2's state back (table-level revert)
    revert("main", "main", repo=repo, strategy="source-wins")
    revert("main~2", "main", repo=repo, strategy="source-wins")
    repo.upsert("t", rows([{"id": 3, "f": 3.0}]))
    got = {r["id"]: r["f"] for r in repo.read("t").to_pylist()}
    assert got == {1: 1.5, 2: None, 3: 3.0}
    check_diff(repo, "main~3", "main")
    check_diff(repo, "b", "main")


@pytest.mark.parametrize("widened", ["source", "dest"])
def test_key_widening_on_either_side_matches_rows_by_value(repo, widened):
    repo.create_table("t", pa.table({"id": pa.array([1, 2, 3], pa.int32()), "v": ["a", "b", "c"]}), primary_key="id")
    repo.branches.create("src", from_ref="main")
    wide_branch = "src" if widened == "source" else "main"
    repo.alter_column("t", "id", pa.int64(), branch=wide_branch)
    repo.upsert("t", rows([{"id": 1, "v": "S"}, {"id": 4, "v": "new"}]), branch="src")
    repo.delete("t", "id = 3", branch="src")
    repo.upsert("t", rows([{"id": 1, "v": "D"}, {"id": 2, "v": "D2"}]))
    check_diff(repo, "main", "src")
    result = merge("src", "main", repo=repo, dry_run=True)
    assert [(c.kind, c.key) for c in result.conflicts] == [("row.update_update", {"id": 1})]
    merge("src", "main", repo=repo, strategy="source-wins")
    out = repo.read("t")
    assert out.schema.field("id").type == pa.int64()
    assert sorted(out.to_pylist(), key=lambda r: r["id"]) == [
        {"id": 1, "v": "S"}, {"id": 2, "v": "D2"}, {"id": 4, "v": "new"}]


def test_every_plan_gives_the_same_rows_and_verify_agrees(reverted):
    repo, c = reverted
    for plan in ("auto", "delta", "fragments", "full"):
        for a, b in ((c, "main"), ("main", c), ("main~2", "main")):
            d = diff(a, b, repo=repo, plan=plan, verify=True)
            assert engine_rows(d.tables["t"].rows(), ["id"]) == reference_diff(
                repo.read("t", ref=a), repo.read("t", ref=b), ["id"])
    forced = diff(c, "main", repo=repo, plan="full").tables["t"]
    forced.rows()
    assert forced.plan.method == "full"
    with pytest.raises(trimerge.lineage.errors.InvalidOperationError):
        diff(c, "main", repo=repo, plan="nosuch")


def test_verify_names_the_plan_and_the_first_key(reverted, monkeypatch):
    """A planner that wrongly trusts the delta (the old precondition) is caught by verify."""
    from trimerge.diff import DiffVerificationError
    from trimerge.lineage.commit import TableVersion

    repo, c = reverted
    monkeypatch.setattr(TableVersion, "delta_exact_from", lambda self, version: True)
    assert diff(c, "main", repo=repo).tables["t"].counts.rows_changed == 0  # the old, wrong answer
    with pytest.raises(DiffVerificationError) as info:
        diff(c, "main", repo=repo, verify=True).tables["t"].rows()
    assert info.value.plan == "delta" and info.value.key == {"id": 2} and info.value.exit_code == 4
    monkeypatch.setenv("TRIMERGE_VERIFY", "1")
    with pytest.raises(DiffVerificationError):
        diff(c, "main", repo=repo).tables["t"].counts
    with pytest.raises(DiffVerificationError):  # merges check the diffs they use
        revert(c, "main", repo=repo, dry_run=True)


def test_a_row_id_the_delta_promised_falls_back_instead_of_crashing(repo, monkeypatch, caplog):
    from trimerge.lineage.commit import TableVersion

    repo.create_table("t", rows([{"id": 1, "s": "x"}, {"id": 2, "s": "b"}]), primary_key="id")
    repo.delete("t", "id = 2")
    c = repo.resolve("main").id
    revert("main", "main", repo=repo)
    repo.upsert("t", rows([{"id": 2, "s": "c"}]))  # the revived row, updated
    monkeypatch.setattr(TableVersion, "delta_exact_from", lambda self, version: True)
    d = diff(c, "main", repo=repo)
    assert engine_rows(d.tables["t"].rows(), ["id"]) == {(2,): ("insert", ())}
    assert d.tables["t"].plan.fallback_from == "delta"
    assert "does not hold" in caplog.text


def test_fsck_deep_verifies_every_commit(reverted, cli, monkeypatch):
    repo, c = reverted
    doc = cli("-C", repo.uri, "fsck", "--deep", "--json", ok=True).json()
    assert doc["ok"] and doc["diffs_verified"] >= 4
    assert "table diff(s) verified: ok" in cli("-C", repo.uri, "fsck", "--deep", ok=True).stdout
    from trimerge.diff.engine import TableDiff

    # A delta reader that misses every row: each commit's planned diff disagrees with brute force.
    monkeypatch.setattr(TableDiff, "_read_deltas", lambda self, common, out: None)
    res = cli("-C", repo.uri, "fsck", "--deep", "--json")
    assert res.exit_code == 1
    problems = res.json()["problems"]
    assert problems and all("delta plan disagrees with the brute-force diff" in p for p in problems)


def test_cli_plan_and_verify_flags(reverted, cli, monkeypatch):
    repo, c = reverted
    for plan in ("delta", "fragments", "full"):
        doc = cli("-C", repo.uri, "diff", c, "main", "--plan", plan, "--verify", "--json", ok=True).json()
        assert doc["tables"]["t"]["updated"] == 1
    assert cli("-C", repo.uri, "diff", c, "main", "--plan", "nosuch").exit_code == 2
    from trimerge.lineage.commit import TableVersion

    monkeypatch.setattr(TableVersion, "delta_exact_from", lambda self, version: True)
    res = cli("-C", repo.uri, "diff", c, "main", "--verify")
    assert res.exit_code == 4 and "brute-force" in res.stderr
    res = cli("-C", repo.uri, "revert", c, "--verify", "--dry-run")
    assert res.exit_code == 4


def test_update_with_nested_columns_and_a_composite_key(repo):
    vec = pa.list_(pa.float32(), 3)
    repo.create_table("t", pa.table({"k1": [1, 1, 2], "k2": ["a", "b", "a"], "v": pa.array([[1, 2, 3]] * 3, vec),
                                     "l": [[1], None, []], "s": ["x", "y", "z"]}), primary_key=["k1", "k2"])
    repo.update("t", pa.table({"k1": [1], "k2": ["b"], "s": ["Y"]}))
    repo.update("t", pa.table({"k1": [2], "k2": ["a"], "v": pa.array([[0, 0, 1]], vec)}))
    got = {(r["k1"], r["k2"]): r for r in repo.read("t").to_pylist()}
    assert got[(1, "b")]["s"] == "Y" and got[(1, "b")]["v"] == [1, 2, 3] and got[(1, "b")]["l"] is None
    assert got[(2, "a")]["v"] == [0, 0, 1] and got[(2, "a")]["s"] == "z"
    assert got[(1, "a")] == {"k1": 1, "k2": "a", "v": [1, 2, 3], "l": [1], "s": "x"}


def test_criss_cross_merge_with_schema_changes_does_not_wait_on_itself(repo):
    """The virtual base's scratch transaction used to keep the schema lock the merge then needed."""
    import time

    repo.create_table("t", pa.table({"id": [1, 2, 3], "s": ["a", "b", "c"], "n": [1, 2, 3]}), primary_key="id")
    repo.branches.create("a", from_ref="main")
    repo.branches.create("b", from_ref="main")
    a1 = repo.upsert("t", pa.table({"id": [1], "s": ["A"], "n": [1]}), branch="a").id
    b1 = repo.drop_columns("t", ["n"], branch="b").id
    merge(b1, "a", repo=repo, strategy="source-wins")
    merge(a1, "b", repo=repo, strategy="source-wins")
    repo.drop_columns("t", ["s"], branch="a")
    repo.upsert("t", pa.table({"id": [3], "s": ["C"]}), branch="b")
    started = time.monotonic()
    result = merge("a", "b", repo=repo, strategy="source-wins", verify=True)
    assert result.status == "merged" and result.virtual_base
    assert time.monotonic() - started < 10
    assert repo.read("t", ref="b").column_names == ["id"]
