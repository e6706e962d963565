"""The three-way merge table, one row per case: base/dest/source values of one key → the expected
outcome under every strategy and granularity.

All cases live in one table (one key each), so each (strategy, granularity) pair is one merge.
A row is ``(a, b)``; ``None`` is "no row". An expected outcome is a row, ``None`` (deleted), or a
conflict kind (only without a strategy)."""

from __future__ import annotations

import pyarrow as pa
import pytest

import trimerge
from trimerge.merge import MergeConflictError, merge

UD, DM, II = "row.update_update", "row.delete_modify", "row.insert_insert"

#       case                      base     dest     source   | none: cell, row | source-wins: cell, row | dest-wins: cell, row
CASES = [
    ("unchanged",                (1, 1),  (1, 1),  (1, 1),    (1, 1), (1, 1),   (1, 1), (1, 1),   (1, 1), (1, 1)),
    ("source only",              (1, 1),  (1, 1),  (2, 1),    (2, 1), (2, 1),   (2, 1), (2, 1),   (2, 1), (2, 1)),
    ("dest only",                (1, 1),  (2, 1),  (1, 1),    (2, 1), (2, 1),   (2, 1), (2, 1),   (2, 1), (2, 1)),
    ("changed alike",            (1, 1),  (2, 2),  (2, 2),    (2, 2), (2, 2),   (2, 2), (2, 2),   (2, 2), (2, 2)),
    ("different cells",          (1, 1),  (2, 1),  (1, 2),    (2, 2), UD,       (2, 2), (1, 2),   (2, 2), (2, 1)),
    ("same cell differently",    (1, 1),  (2, 1),  (3, 1),    UD, UD,           (3, 1), (3, 1),   (2, 1), (2, 1)),
    ("one cell each, one both",  (1, 1),  (2, 2),  (3, 1),    UD, UD,           (3, 2), (3, 1),   (2, 2), (2, 2)),
    ("null to value",            (None, 1), (2, 1), (None, 3), (2, 3), UD,      (2, 3), (None, 3), (2, 3), (2, 1)),
    ("deleted on both",          (1, 1),  None,    None,      None, None,       None, None,       None, None),
    ("deleted on source",        (1, 1),  (1, 1),  None,      None, None,       None, None,       None, None),
    ("deleted on dest",          (1, 1),  None,    (1, 1),    None, None,       None, None,       None, None),
    ("dest deletes, source edits", (1, 1), None,   (2, 1),    DM, DM,           (2, 1), (2, 1),   None, None),
    ("dest edits, source deletes", (1, 1), (2, 1), None,      DM, DM,           None, None,       (2, 1), (2, 1)),
    ("inserted on source",       None,    None,    (5, 5),    (5, 5), (5, 5),   (5, 5), (5, 5),   (5, 5), (5, 5)),
    ("inserted alike",           None,    (5, 5),  (5, 5),    (5, 5), (5, 5),   (5, 5), (5, 5),   (5, 5), (5, 5)),
    ("inserted differently",     None,    (5, 5),  (6, 5),    II, II,           (6, 5), (6, 5),   (5, 5), (5, 5)),
]
COLUMNS = {(None, "cell"): 4, (None, "row"): 5, ("source-wins", "cell"): 6, ("source-wins", "row"): 7,
           ("dest-wins", "cell"): 8, ("dest-wins", "row"): 9}


def _table(side: int) -> pa.Table:
    rows = [(k, case[side]) for k, case in enumerate(CASES) if case[side] is not None]
    return pa.table({"id": pa.array([k for k, _ in rows], pa.int64()),
                     "a": pa.array([r[0] for _, r in rows], pa.int64()),
                     "b": pa.array([r[1] for _, r in rows], pa.int64())})


def _history(path) -> trimerge.Repository:
    repo = trimerge.Repository.init(path / "repo", actor="t")
    repo.create_table("t", _table(1), ["id"])
    repo.branches.create("feature", from_ref="main")
    for branch, side in (("main", 2), ("feature", 3)):
        want = _table(side)
        present = set(want.column("id").to_pylist())
        gone = [k for k, case in enumerate(CASES) if case[1] is not None and k not in present]
        changed = [k for k, case in enumerate(CASES) if case[side] is not None and case[side] != case[1]]
        if gone:
            repo.delete_keys("t", pa.table({"id": pa.array(gone, pa.int64())}), branch=branch)
        if changed:
            repo.upsert("t", want.filter(pa.compute.is_in(want.column("id"), pa.array(changed, pa.int64()))),
                        branch=branch)
    return repo


@pytest.fixture(scope="module")
def history(tmp_path_factory) -> trimerge.Repository:
    return _history(tmp_path_factory.mktemp("cases"))


@pytest.mark.parametrize("granularity", ["cell", "row"])
def test_conflicts_without_a_strategy(history, granularity):
    result = merge("feature", "main", repo=history, dry_run=True, granularity=granularity)
    got = {c.key["id"]: c.kind for c in result.conflicts}
    want = {k: case[COLUMNS[(None, granularity)]] for k, case in enumerate(CASES)
            if isinstance(case[COLUMNS[(None, granularity)]], str)}
    assert {CASES[k][0]: v for k, v in got.items()} == {CASES[k][0]: v for k, v in want.items()}
    for c in result.conflicts:
        if c.kind == DM:  # says which side deleted
            want_message = "deleted on dest, changed on source" if CASES[c.key["id"]][2] is None else \
                "deleted on source, changed on dest"
            assert c.message == want_message and c.ours != c.theirs
    with pytest.raises(MergeConflictError) as info:
        merge("feature", "main", repo=history, granularity=granularity)
    assert len(info.value.result.conflicts) == len(want)


@pytest.mark.parametrize("memory", ["in memory", "spilled"])
@pytest.mark.parametrize("strategy", ["source-wins", "dest-wins"])
@pytest.mark.parametrize("granularity", ["cell", "row"])
def test_outcome_under_each_strategy(history, strategy, granularity, memory, monkeypatch):
    if memory == "spilled":  # a 1-byte budget: diffs, their pairing by key and the written rows all go to disk
        monkeypatch.setenv("TRIMERGE_DIFF_MEMORY", "1")
    branch = f"into-{strategy}-{granularity}-{memory.replace(' ', '-')}"
    history.branches.create(branch, from_ref="main")
    dry = merge("feature", branch, repo=history, dry_run=True, strategy=strategy, granularity=granularity)
    result = merge("feature", branch, repo=history, strategy=strategy, granularity=granularity)
    assert result.stats["t"].to_json() == dry.stats["t"].to_json()  # a dry run is the real run, unwritten
    got = {r["id"]: (r["a"], r["b"]) for r in history.read("t", branch).to_pylist()}
    column = COLUMNS[(strategy, granularity)]
    for k, case in enumerate(CASES):
        assert got.get(k) == case[column], (case[0], strategy, granularity)
    unresolved = COLUMNS[(None, granularity)]
    assert result.stats["t"].resolved == sum(isinstance(case[unresolved], str) for case in CASES)



@pytest.mark.parametrize("strategy", [None, "source-wins", "dest-wins"])
def test_table_granularity_takes_whole_tables(history, strategy):
    """At table granularity a table changed on both sides is one conflict; a strategy takes one
    side's table as it is."""
    branch = f"into-table-{strategy}"
    history.branches.create(branch, from_ref="main")
    result = merge("feature", branch, repo=history, dry_run=strategy is None, strategy=strategy, granularity="table")
    if strategy is None:
        assert [c.kind for c in result.conflicts] == ["table.update_update"]
        return
    side = "feature" if strategy == "source-wins" else "main"
    assert history.read("t", branch).sort_by("id").equals(history.read("t", side).sort_by("id"))
    assert result.stats["t"].resolved == 1


def test_columns_named_like_the_merge_s_own_columns_merge_normally(tmp_path):
    """Keys and value columns called ``op``, ``take_cols``, ``conflict_cols``… cannot collide with
    the fold's working columns."""
    names = ["take_cols", "conflict_cols", "has_b", "dest_rowid", "differing", "choice"]
    repo = trimerge.Repository.init(tmp_path / "repo", actor="t")
    repo.create_table("t", pa.table({"op": [1, 2], **{n: [0, 0] for n in names}}), ["op"])
    repo.branches.create("feature", from_ref="main")
    repo.upsert("t", pa.table({"op": [1], **{n: [1 if i % 2 else 0] for i, n in enumerate(names)}}), branch="main")
    repo.upsert("t", pa.table({"op": [1], **{n: [0 if i % 2 else 2] for i, n in enumerate(names)}}), branch="feature")
    repo.upsert("t", pa.table({"op": [2], **{n: [5] for n in names}}), branch="feature")
    result = merge("feature", "main", repo=repo)
    assert not result.conflicts and result.stats["t"].cells_merged == 3
    rows = {r["op"]: r for r in repo.read("t", "main").to_pylist()}
    assert [rows[1][n] for n in names] == [2, 1, 2, 1, 2, 1] and all(rows[2][n] == 5 for n in names)
    repo.upsert("t", pa.table({"op": [2], **{n: [6] for n in names}}), branch="main")
    repo.upsert("t", pa.table({"op": [2], **{n: [7] for n in names}}), branch="feature")
    clash = merge("feature", "main", repo=repo, dry_run=True)
    assert [(c.kind, c.key, c.columns) for c in clash.conflicts] == [("row.update_update", {"op": 2}, tuple(names))]
