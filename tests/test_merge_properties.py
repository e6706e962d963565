"""Properties of the three-way merge on small random tables with nulls (and NaN).

A random base table, then random edit scripts on two branches ``a`` and ``b`` (upserts of whole
rows, updates of single cells, deletes, re-inserts, compaction, rewrites of identical rows under
new row ids, an added column), then merges in
both directions, dry and real, checked against a pure-Python three-way reference that reads the
three snapshots completely and shares no code with the engine."""

from __future__ import annotations

import math
import os
import shutil
import tempfile
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

import trimerge
from trimerge.merge import MergeConflictError, merge
from diffref import same

# Deterministic by default (the same examples on every run, so CI is stable). For a deeper, random
# search: TRIMERGE_MERGE_EXAMPLES=10 (a multiplier) TRIMERGE_MERGE_RANDOM=1 pytest tests/test_merge_properties.py
SCALE = int(os.environ.get("TRIMERGE_MERGE_EXAMPLES", "1"))
RANDOM = os.environ.get("TRIMERGE_MERGE_RANDOM") == "1"


def prop_settings(examples: int) -> settings:
    return settings(max_examples=examples * SCALE, deadline=None, derandomize=not RANDOM, print_blob=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                           HealthCheck.data_too_large, HealthCheck.filter_too_much])


SETTINGS = prop_settings(30)
SCHEMA = pa.schema([("id", pa.int64()), ("a", pa.int64()), ("b", pa.string()), ("f", pa.float64())])
KEYS = list(range(6))  # few keys: both sides often touch the same rows
DOMAINS = {"a": [None, 0, 1, 2], "b": [None, "p", "q"], "f": [None, 0.5, -1.0, float("nan")], "c": [None, 7, 8]}
VALUES = {c: st.sampled_from(d) for c, d in DOMAINS.items()}


def changed_value(column: str, value, current):
    """``value``, or the next one of the column's domain if it equals ``current`` (a set always changes)."""
    if not same(value, current):
        return value
    domain = DOMAINS[column]
    i = next(i for i, v in enumerate(domain) if same(v, value))
    return domain[(i + 1) % len(domain)]


def row_strategy(columns=("a", "b", "f")):
    return st.fixed_dictionaries({c: VALUES[c] for c in columns})


base_strategy = st.dictionaries(st.sampled_from(KEYS), row_strategy(), min_size=2, max_size=6)
HOT = [0, 1, 2]  # both sides edit cells of these rows often: cell merges and cell conflicts


@st.composite
def set_op(draw):
    keys = draw(st.lists(st.sampled_from(KEYS), min_size=1, max_size=3, unique=True))
    column = draw(st.sampled_from(["a", "b", "f", "c"]))
    return ("set", (keys, column, draw(VALUES[column])))


cells_op = st.tuples(st.just("cells"), st.dictionaries(
    st.sampled_from(HOT), st.dictionaries(st.sampled_from(["a", "b", "f"]), st.sampled_from([0, 1, 2]),
                                          min_size=1, max_size=2), min_size=1, max_size=3))


edit = st.one_of(
    cells_op, cells_op, set_op(), cells_op,  # cell edits are the interesting case for cell merges: make them likely
    st.tuples(st.just("upsert"), st.dictionaries(st.sampled_from(KEYS), row_strategy(("a", "b", "f", "c")),
                                                  min_size=1, max_size=3)),
    st.tuples(st.just("delete"), st.lists(st.sampled_from(KEYS), min_size=1, max_size=2, unique=True)),
    st.tuples(st.just("compact"), st.none()),
    st.tuples(st.just("rewrite"), st.none()),  # overwrite with the same rows: new row ids, no change
    st.tuples(st.just("add_column"), st.none()),
)
script = st.lists(st.lists(edit, min_size=1, max_size=3), min_size=1, max_size=2)  # commits of edits


# ---------------------------------------------------------------------------------------------- building
def to_table(rows: dict[int, dict], columns: list[str]) -> pa.Table:
    fields = [SCHEMA.field(c) if c in SCHEMA.names else pa.field(c, pa.int64()) for c in ["id", *columns]]
    data = {"id": sorted(rows)}
    for c in columns:
        data[c] = [rows[k].get(c) for k in sorted(rows)]
    return pa.table(data, schema=pa.schema(fields))


class Side:
    """Applies an edit script to one branch, tracking nothing but the column list (values are read back)."""

    def __init__(self, repo: trimerge.Repository, branch: str):
        self.repo, self.branch = repo, branch

    def columns(self) -> list[str]:
        return [c for c in self.repo.schema("t", self.branch).names if c != "id"]

    def current(self) -> dict[int, dict]:
        return {r["id"]: {c: v for c, v in r.items() if c != "id"} for r in self.repo.read("t", self.branch).to_pylist()}

    def apply(self, commits: list[list[tuple]]) -> None:
        for ops in commits:
            with self.repo.transaction(self.branch, message="edit") as tx:
                for kind, arg in ops:
                    cols = [c for c in tx.schema("t").names if c != "id"]
                    if kind == "add_column":
                        if "c" not in cols:
                            tx.add_columns("t", pa.field("c", pa.int64()))
                    elif kind == "compact":
                        tx.compact("t")
                    elif kind == "rewrite":
                        tx.overwrite("t", tx.read("t"))
                    elif kind == "delete":
                        tx.delete_keys("t", pa.table({"id": pa.array(arg, pa.int64())}))
                    elif kind == "upsert":
                        rows = {k: {c: v.get(c) for c in cols} for k, v in arg.items()}
                        tx.upsert("t", to_table(rows, cols))
                    elif kind == "cells":  # {key: {column: index into the column's other values}}
                        current = {r["id"]: r for r in tx.read("t").to_pylist()}
                        rows = {}
                        for k, changes in arg.items():
                            if k in current:
                                row = {c: current[k][c] for c in cols}
                                for column, i in changes.items():
                                    others = [v for v in DOMAINS[column] if not same(v, row[column])]
                                    row[column] = others[i % len(others)]
                                rows[k] = row
                        if rows:
                            tx.upsert("t", to_table(rows, cols))
                    elif kind == "set":
                        keys, column, value = arg
                        if column not in cols:
                            continue
                        current = {r["id"]: r for r in tx.read("t").to_pylist()}
                        rows = {k: {**{c: current[k][c] for c in cols},
                                    column: changed_value(column, value, current[k][column])}
                                for k in keys if k in current}
                        if rows:
                            tx.upsert("t", to_table(rows, cols))


# ---------------------------------------------------------------------------------------------- reference
def snapshot(repo: trimerge.Repository, ref: str) -> tuple[dict[int, dict], list[str]]:
    t = repo.read("t", ref)
    return ({r["id"]: {c: v for c, v in r.items() if c != "id"} for r in t.to_pylist()},
            [c for c in t.column_names if c != "id"])


def full(row: dict | None, columns: list[str]) -> dict | None:
    """A row over all columns; a column a side does not have is null there."""
    return None if row is None else {c: row.get(c) for c in columns}


def same_row(x: dict | None, y: dict | None) -> bool:
    if x is None or y is None:
        return x is None and y is None
    return x.keys() == y.keys() and all(same(x[c], y[c]) for c in x)


def reference_merge(base: dict, ours: dict, theirs: dict, columns: list[str], granularity: str = "cell",
                    winner: str | None = None) -> tuple[dict, set, int]:
    """(merged rows, conflicts {(kind, key, sorted columns)}, converged count) of theirs into ours."""
    merged: dict[int, dict] = {}
    conflicts = set()
    converged = 0
    for k in sorted(base.keys() | ours.keys() | theirs.keys()):
        b, o, t = (full(x.get(k), columns) for x in (base, ours, theirs))
        if same_row(t, b):
            result = o
        elif same_row(o, b):
            result = t
        elif o is None and t is None:
            result, converged = None, converged + 1
        elif o is None or t is None:
            conflicts.add(("row.delete_modify", k, ()))
            result = t if winner == "source" else o
        elif same_row(o, t):
            result, converged = o, converged + 1
        elif b is None or granularity == "row":
            differing = tuple(sorted(c for c in columns if not same(o[c], t[c])))
            conflicts.add(("row.insert_insert" if b is None else "row.update_update", k, differing))
            result = t if winner == "source" else o
        else:
            result = dict(o)
            clash = []
            for c in columns:
                if not same(t[c], b[c]):
                    if same(o[c], b[c]):
                        result[c] = t[c]
                    elif not same(o[c], t[c]):
                        clash.append(c)
                        if winner == "source":
                            result[c] = t[c]
            if clash:
                conflicts.add(("row.update_update", k, tuple(sorted(clash))))
        if result is not None:
            merged[k] = result
    return merged, conflicts, converged


def engine_conflicts(result) -> set:
    out = set()
    for c in result.conflicts:
        assert c.table == "t"
        out.add((c.kind, c.key["id"], tuple(sorted(c.columns)) if c.kind != "row.delete_modify" else ()))
    return out


def table_as_rows(repo: trimerge.Repository, ref: str, columns: list[str]) -> dict[int, dict]:
    rows, cols = snapshot(repo, ref)
    assert set(cols) == set(columns), (cols, columns)
    return {k: full(v, columns) for k, v in rows.items()}


def assert_rows_equal(got: dict, want: dict) -> None:
    assert got.keys() == want.keys(), (sorted(got), sorted(want))
    for k in got:
        assert same_row(got[k], want[k]), (k, got[k], want[k])


def commit_count(repo: trimerge.Repository) -> int:
    return len(repo.all_commits())


# ---------------------------------------------------------------------------------------------- the properties
@pytest.fixture
def workdir():
    d = Path(tempfile.mkdtemp(prefix="merge-props-"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


TWO_ROWS = {0: {"a": 0, "b": "p", "f": None}, 1: {"a": None, "b": None, "f": 0.5}}


@SETTINGS
@given(base=base_strategy, edits_a=script, edits_b=script)
@example(base=TWO_ROWS, edits_a=[[("cells", {0: {"a": 1}})]], edits_b=[[("cells", {0: {"b": 0}})]])  # cell merge
@example(base=TWO_ROWS, edits_a=[[("cells", {0: {"a": 0}}), ("delete", [1])]],                    # conflicts,
         edits_b=[[("add_column", None), ("cells", {0: {"a": 1}}), ("set", ([1], "c", 7))]])      # added column
@example(base=TWO_ROWS, edits_a=[[("rewrite", None), ("cells", {1: {"f": 2}})], [("compact", None)]],
         edits_b=[[("upsert", {1: {"a": 2, "b": "q", "f": 0.5, "c": None}, 5: {"a": 1, "b": None, "f": None,
                                                                               "c": None}})]])
def test_three_way_merge_matches_reference_in_both_directions(workdir, base, edits_a, edits_b):
    path = Path(tempfile.mkdtemp(dir=workdir))
    repo = trimerge.Repository.init(path / "repo")
    repo.create_table("t", to_table(base, ["a", "b", "f"]), ["id"])
    for b in ("a", "b"):
        repo.branches.create(b, from_ref="main")
    for side, edits in (("a", edits_a), ("b", edits_b)):
        # a table of its own on each side: the histories always diverge (and table adds get merged too)
        repo.create_table(f"only_{side}", pa.table({"id": [1]}), ["id"], branch=side)
        Side(repo, side).apply(edits)
    for copy, of in (("a2", "a"), ("b2", "b")):
        repo.branches.create(copy, from_ref=of)

    snap_base, cols_base = snapshot(repo, "main")
    snap_a, cols_a = snapshot(repo, "a")
    snap_b, cols_b = snapshot(repo, "b")
    # merged schema: dest's columns plus the ones only the source has (column order is irrelevant)
    columns = sorted(set(cols_a) | set(cols_b))
    want_ab, conflicts_ab, converged_ab = reference_merge(snap_base, snap_b, snap_a, columns)  # a into b
    want_ba, conflicts_ba, converged_ba = reference_merge(snap_base, snap_a, snap_b, columns)  # b into a
    # the reference itself is symmetric
    assert {(k, key) for k, key, _ in conflicts_ab} == {(k, key) for k, key, _ in conflicts_ba}

    tips = {b.name: b.commit_id for b in repo.branches.list()}
    n_commits = commit_count(repo)

    # -- dry runs in both directions find exactly the reference's conflicts and publish nothing
    dry_ab = merge("a", "b", repo=repo, dry_run=True)
    dry_ba = merge("b", "a", repo=repo, dry_run=True)
    assert engine_conflicts(dry_ab) == conflicts_ab
    assert engine_conflicts(dry_ba) == conflicts_ba
    assert {(c.kind, c.key["id"]) for c in dry_ab.conflicts} == {(c.kind, c.key["id"]) for c in dry_ba.conflicts}
    assert dry_ab.status == ("conflicts" if conflicts_ab else "merged") and dry_ab.commit is None
    dry_row = merge("a", "b", repo=repo, dry_run=True, granularity="row")
    assert engine_conflicts(dry_row) == reference_merge(snap_base, snap_b, snap_a, columns, "row")[1]
    assert {b.name: b.commit_id for b in repo.branches.list()} == tips
    assert commit_count(repo) == n_commits

    event("conflicts" if conflicts_ab else "clean")
    if dry_ab.stats["t"].cells_merged:
        event("cells merged")
    if not conflicts_ab:
        assert dry_ab.stats["t"].converged == converged_ab
        # -- real merges agree with the dry runs and with the reference, in both directions
        real_ab = merge("a", "b2", repo=repo)
        real_ba = merge("b", "a2", repo=repo)
        for real, dry in ((real_ab, dry_ab), (real_ba, dry_ba)):
            assert real.status == "merged" and real.commit is not None and not real.conflicts
            assert real.stats["t"].to_json() == dry.stats["t"].to_json()
        assert real_ab.commit.parents == (tips["b"], tips["a"])
        assert real_ba.commit.parents == (tips["a"], tips["b"])
        got_ab = table_as_rows(repo, "b2", columns)
        got_ba = table_as_rows(repo, "a2", columns)
        assert_rows_equal(got_ab, want_ab)
        assert_rows_equal(got_ba, want_ba)
        assert_rows_equal(got_ab, got_ba)  # merge(A into B) == merge(B into A)
        assert set(repo.tables("a2")) == set(repo.tables("b2")) == {"t", "only_a", "only_b"}
    else:
        with pytest.raises(MergeConflictError) as info:
            merge("a", "b2", repo=repo)
        assert engine_conflicts(info.value.result) == conflicts_ab
        assert repo.resolve("b2").id == tips["b2"]
        # -- strategies: a wins both ways round
        real_ab = merge("a", "b2", repo=repo, strategy="source-wins")
        real_ba = merge("b", "a2", repo=repo, strategy="dest-wins")
        assert sum(s.resolved for s in real_ab.stats.values()) == len(conflicts_ab)
        want, _, _ = reference_merge(snap_base, snap_b, snap_a, columns, winner="source")
        got_ab = table_as_rows(repo, "b2", columns)
        got_ba = table_as_rows(repo, "a2", columns)
        assert_rows_equal(got_ab, want)
        assert_rows_equal(got_ba, want)

    # -- a merge never loses a change made on only one side
    for side_rows, other_rows in ((snap_a, snap_b), (snap_b, snap_a)):
        for k in snap_base.keys() | side_rows.keys():
            b_row, s_row, o_row = (full(x.get(k), columns) for x in (snap_base, side_rows, other_rows))
            if not same_row(b_row, s_row) and same_row(b_row, o_row):
                for got in (got_ab, got_ba):
                    assert same_row(got.get(k), s_row), (k, got.get(k), s_row)

    # -- merging a branch into itself or into a descendant is up to date
    for source, dest in (("a", "a"), ("main", "a"), ("main", "b2"), ("a", "b2"), ("b", "b2"), ("b2", "b2")):
        before = repo.resolve(dest).id
        r = merge(source, dest, repo=repo)
        assert r.status == "up-to-date" and r.commit is None, (source, dest)
        assert repo.resolve(dest).id == before


@prop_settings(15)
@given(base=base_strategy, edits=script, more=script)
def test_merging_twice_or_back_converges(workdir, base, edits, more):
    """Merge a into main, then main back into a: both branches hold the same rows, and any further
    merge between them is up to date."""
    path = Path(tempfile.mkdtemp(dir=workdir))
    repo = trimerge.Repository.init(path / "repo")
    repo.create_table("t", to_table(base, ["a", "b", "f"]), ["id"])
    repo.branches.create("a", from_ref="main")
    repo.create_table("only_a", pa.table({"id": [1]}), ["id"], branch="a")
    Side(repo, "a").apply(edits)
    Side(repo, "main").apply(more)
    first = merge("a", "main", repo=repo, strategy="source-wins")
    assert first.status == "merged"
    back = merge("main", "a", repo=repo)
    assert back.status == "merged" and not back.conflicts
    cols = sorted(snapshot(repo, "main")[1])
    assert_rows_equal(table_as_rows(repo, "a", cols), table_as_rows(repo, "main", cols))
    assert merge("main", "a", repo=repo).status == "up-to-date"
    # a holds the back-merge commit main lacks: merging it is a (content-free) merge commit, never a fast-forward
    tip_main, tip_a = repo.resolve("main").id, repo.resolve("a").id
    again = merge("a", "main", repo=repo)
    assert again.status == "merged" and again.commit.parents == (tip_main, tip_a)
    assert_rows_equal(table_as_rows(repo, "main", cols), table_as_rows(repo, "a", cols))
    assert merge("a", "main", repo=repo).status == "up-to-date"


@prop_settings(12)
@given(base=base_strategy,
       rounds=st.lists(st.tuples(script, script, st.sampled_from(["ab", "ba", "both"]),
                                 st.sampled_from([None, "source-wins", "dest-wins"])), min_size=1, max_size=3))
@example(base={1: {"a": 1, "b": "p", "f": 0.5}},  # a merge back across sibling Lance forks
         rounds=[([[("set", ([1], "a", 2))]], [[("upsert", {2: {"a": 0, "b": None, "f": None, "c": None}})]],
                  "both", None)])
def test_repeated_merges_in_both_directions_match_reference(workdir, base, rounds):
    """Rounds of edits on a and b, each followed by merges a->b, b->a or both (with a strategy or
    none): every merge equals the reference computed from its own merge base. Later rounds diff
    tables across sibling Lance forks and versions taken over by earlier merges."""
    path = Path(tempfile.mkdtemp(dir=workdir))
    repo = trimerge.Repository.init(path / "repo")
    repo.create_table("t", to_table(base, ["a", "b", "f"]), ["id"])
    for b in ("a", "b"):
        repo.branches.create(b, from_ref="main")
    winner = {"source-wins": "source", "dest-wins": "dest"}
    for n, (edits_a, edits_b, direction, strategy) in enumerate(rounds):
        for side, edits in (("a", edits_a), ("b", edits_b)):
            repo.create_table(f"round{n}_{side}", pa.table({"id": [1]}), ["id"], branch=side)
            Side(repo, side).apply(edits)
        pairs = {"ab": [("a", "b")], "ba": [("b", "a")], "both": [("a", "b"), ("b", "a")]}[direction]
        for source, dest in pairs:
            if repo.is_ancestor(source, dest):
                assert merge(source, dest, repo=repo).status == "up-to-date"
                continue
            (base_commit,) = repo.merge_bases(source, dest)
            snap_base, _ = snapshot(repo, base_commit.id)
            snap_dest, cols_dest = snapshot(repo, dest)
            snap_src, cols_src = snapshot(repo, source)
            columns = sorted(set(cols_dest) | set(cols_src))
            want, conflicts, _ = reference_merge(snap_base, snap_dest, snap_src, columns,
                                                 winner=winner.get(strategy))
            dry = merge(source, dest, repo=repo, dry_run=True)
            assert engine_conflicts(dry) == conflicts
            if conflicts and strategy is None:
                with pytest.raises(MergeConflictError):
                    merge(source, dest, repo=repo)
                continue
            tips = (repo.resolve(dest).id, repo.resolve(source).id)
            result = merge(source, dest, repo=repo, strategy=strategy)
            assert result.commit.parents == tips
            assert_rows_equal(table_as_rows(repo, dest, columns), want)


def test_reference_merge_sanity():
    """The reference on a hand-made case (so a broken reference cannot make the properties vacuous)."""
    base = {1: {"a": 1, "b": "p"}, 2: {"a": 2, "b": "p"}, 3: {"a": 3, "b": None}}
    ours = {1: {"a": 10, "b": "p"}, 2: {"a": 2, "b": "q"}, 4: {"a": 4, "b": None}}
    theirs = {1: {"a": 1, "b": "z"}, 2: {"a": 2, "b": "r"}, 3: {"a": 3, "b": None}, 4: {"a": 5, "b": None}}
    merged, conflicts, converged = reference_merge(base, ours, theirs, ["a", "b"])
    assert conflicts == {("row.update_update", 2, ("b",)), ("row.insert_insert", 4, ("a",))}
    assert merged[1] == {"a": 10, "b": "z"} and 3 not in merged and converged == 0
    assert math.isnan(full({"f": float("nan")}, ["f"])["f"]) and same_row({"f": float("nan")}, {"f": float("nan")})
