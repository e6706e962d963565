"""The two row-merge plans against each other (issue 22): ``dest`` (the source's changes written
into dest's table) and ``source`` (dest's changes written onto the source's table,
``trimerge.merge.sourceside``), forced with ``TRIMERGE_MERGE_PLAN``, on random histories.

Whichever plan runs, a merge gives the same status, counts, conflicts (kind, key, columns and the
three sides' values), stale rows and merged rows — dry or real, at cell and row granularity, with
strategies and with hand resolutions. ``tests/test_merge_properties.py`` checks the merges against
an independent reference; this module checks that the choice of plan never shows.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import event, given
from hypothesis import strategies as st

import trimerge
from trimerge.lineage.errors import InvalidOperationError
from trimerge.merge import MergeConflictError, merge, sourceside
from test_merge_properties import Side, base_strategy, prop_settings, script, to_table

OPTIONS = [{}, {"granularity": "row"}, {"strategy": "source-wins"}, {"strategy": "dest-wins"}]


def conflict_view(result) -> list:
    def plain(value):
        if isinstance(value, float) and math.isnan(value):
            return "NaN"
        if isinstance(value, dict):
            return {k: plain(v) for k, v in value.items()}
        return value

    return sorted((json.dumps([c.kind, c.table, c.key, list(c.columns), plain(c.base), plain(c.ours),
                               plain(c.theirs)], sort_keys=True, default=str) for c in result.conflicts))


def outcome(result) -> tuple:
    stale = {t: sorted(json.dumps(k, sort_keys=True, default=str) for k in keys)
             for t, keys in (result.stale or {}).items()}
    return (result.status, {t: s.to_json() for t, s in sorted(result.stats.items())}, conflict_view(result), str(stale))


def rows(repo: trimerge.Repository, ref: str) -> list:
    table = repo.read("t", ref=ref).sort_by("id")
    return [json.dumps(r, sort_keys=True, default=str).replace("NaN", '"NaN"') for r in table.to_pylist()]


def run(monkeypatch, plan: str, *args, **kwargs):
    monkeypatch.setenv("TRIMERGE_MERGE_PLAN", plan)
    try:
        return merge(*args, **kwargs)
    except MergeConflictError as exc:
        return exc.result


@prop_settings(20)
@given(base=base_strategy, edits_a=script, edits_b=script)
def test_both_plans_give_the_same_merge(monkeypatch, base, edits_a, edits_b):
    with tempfile.TemporaryDirectory() as tmp:
        repo = trimerge.Repository.init(Path(tmp) / "repo")
        repo.create_table("t", to_table(base, ["a", "b", "f"]), ["id"])
        for branch, edits in (("a", edits_a), ("b", edits_b)):
            repo.branches.create(branch, from_ref="main")
            Side(repo, branch).apply(edits)
        used = set()
        for source, dest in (("a", "b"), ("b", "a")):
            # dest's keys are found in the source's table by the key index, or by a scan of the keys
            monkeypatch.setattr(sourceside, "SCAN_KEYS", 1000 if source == "a" else 0)
            for options in OPTIONS:
                dry = {plan: run(monkeypatch, plan, source, dest, repo=repo, dry_run=True, **options)
                       for plan in ("dest", "source")}
                assert outcome(dry["dest"]) == outcome(dry["source"]), (source, dest, options)
                used |= {s.plan for s in dry["source"].stats.values()}
                real = {}
                for plan in ("dest", "source"):
                    copy = f"{dest}-{plan}-{len(repo.branches.list())}"
                    repo.branches.create(copy, from_ref=dest)
                    real[plan] = (run(monkeypatch, plan, source, copy, repo=repo, **options), copy)
                assert outcome(real["dest"][0]) == outcome(real["source"][0])
                if real["dest"][0].commit is not None:
                    assert rows(repo, real["dest"][1]) == rows(repo, real["source"][1])
                    assert repo.fsck().ok
        event("source plan used" if "source" in used else "source plan not applicable")


def test_hand_resolutions_and_derived_columns_under_both_plans(monkeypatch, tmp_path):
    """Conflicts resolved by hand, and a derived column made stale, come out alike."""
    repo = trimerge.Repository.init(tmp_path / "repo")
    n = 60
    repo.create_table("t", pa.table({"id": list(range(n)), "x": list(range(n)), "y": [2 * i for i in range(n)]}),
                      ["id"])
    repo.set_derived("t", "y", inputs=["x"])
    repo.branches.create("src", from_ref="main")
    repo.upsert("t", pa.table({"id": list(range(n)), "x": [i + 100 for i in range(n)],
                               "y": [2 * i + 200 for i in range(n)]}), branch="src")
    repo.upsert("t", pa.table({"id": [0, 1, 2], "x": [-1, -2, -3], "y": [0, 1, 4]}), branch="main")
    repo.upsert("t", pa.table({"id": [3], "x": [3], "y": [7]}), branch="main")  # y only: stale with src's x
    first = run(monkeypatch, "dest", "src", "main", repo=repo, dry_run=True)
    assert first.conflicts
    table = first.conflicts_table()
    resolutions = table.append_column("resolution", pa.array(["theirs" if i % 2 else "ours"
                                                              for i in range(table.num_rows)]))
    results = {}
    for plan in ("dest", "source"):
        copy = f"main-{plan}"
        repo.branches.create(copy, from_ref="main")
        results[plan] = (run(monkeypatch, plan, "src", copy, repo=repo, resolutions=resolutions, strategy="dest-wins"),
                         copy)
    assert results["source"][0].stats["t"].plan == "source"
    assert outcome(results["dest"][0]) == outcome(results["source"][0])
    assert rows(repo, results["dest"][1]) == rows(repo, results["source"][1])


def test_auto_chooses_the_source_plan_for_a_large_source_change(monkeypatch, tmp_path):
    repo = trimerge.Repository.init(tmp_path / "repo")
    monkeypatch.setattr(sourceside, "MIN_SOURCE_ROWS", 100_000)  # the rule, on a smaller table
    n = 120_000
    ids = np.arange(n, dtype=np.int64)
    repo.create_table("t", pa.table({"id": ids, "v": ids * 2, "s": pa.array([f"r{i}" for i in range(n)])}), ["id"])
    repo.branches.create("src", from_ref="main")
    repo.upsert("t", pa.table({"id": ids, "v": ids * 3, "s": pa.array([f"r{i}" for i in range(n)])}), branch="src")
    repo.upsert("t", pa.table({"id": [5, n + 1], "v": [-5, -1], "s": ["dest", "new"]}), branch="main")
    monkeypatch.delenv("TRIMERGE_MERGE_PLAN", raising=False)
    result = merge("src", "main", repo=repo, strategy="dest-wins")
    assert result.stats["t"].plan == "source" and result.stats["t"].rows_from_source == n - 2  # id 0 kept its value; 5 both changed
    got = repo.read("t", ref="main").sort_by("id")
    assert got.num_rows == n + 1
    row5 = got.filter(pa.compute.equal(got.column("id"), 5)).to_pylist()[0]
    assert row5 == {"id": 5, "v": -5, "s": "dest"}  # both changed v: dest wins
    assert got.column("v").to_pylist()[6] == 18 and got.column("v").to_pylist()[-1] == -1
    assert repo.fsck().ok
    # the merge commit's table is the source's Lance version plus dest's keys: a diff against the
    # source names only dest's two changes
    d = trimerge.diff.diff("src", "main", repo=repo).tables["t"]
    assert (d.counts.inserted, d.counts.updated, d.counts.deleted) == (1, 1, 0)
    # small changes keep the usual plan
    repo.branches.create("small", from_ref="main")
    repo.upsert("t", pa.table({"id": [7], "v": [0], "s": ["x"]}), branch="small")
    assert merge("small", "main", repo=repo).stats["t"].plan == "dest"


def test_bad_plan_name_is_refused_with_one_line(monkeypatch, tmp_path):
    repo = trimerge.Repository.init(tmp_path / "repo")
    repo.create_table("t", pa.table({"id": [1, 2], "v": [1, 2]}), ["id"])
    repo.branches.create("x", from_ref="main")
    repo.upsert("t", pa.table({"id": [1], "v": [9]}), branch="x")
    repo.upsert("t", pa.table({"id": [2], "v": [9]}), branch="main")
    monkeypatch.setenv("TRIMERGE_MERGE_PLAN", "sideways")
    tip = repo.resolve("main").id
    with pytest.raises(InvalidOperationError, match="TRIMERGE_MERGE_PLAN"):
        merge("x", "main", repo=repo)
    assert repo.resolve("main").id == tip


KILLED_MERGE = r"""
import os, sys
import trimerge
from trimerge.merge import merge
os.environ["TRIMERGE_MERGE_PLAN"] = "source"
os.environ["TRIMERGE_CRASH_AT"] = sys.argv[2]
merge("src", "main", repo=trimerge.Repository.open(sys.argv[1]))
"""


@pytest.mark.parametrize("point", ["before_fork", "before_publish"])
def test_kill_during_a_source_side_merge_is_all_or_nothing(tmp_path, point):
    """Killed while writing dest's keys onto the source's table (before_fork) the merge is rolled
    back; killed once the commit is prepared (before_publish) it is completed: never half."""
    repo = trimerge.Repository.init(tmp_path / "repo")
    n = 2000
    repo.create_table("t", pa.table({"id": list(range(n)), "v": list(range(n))}), ["id"])
    repo.branches.create("src", from_ref="main")
    repo.upsert("t", pa.table({"id": list(range(n)), "v": [-i for i in range(n)]}), branch="src")
    repo.upsert("t", pa.table({"id": [n + 5], "v": [5]}), branch="main")
    repo.branches.create("expected", from_ref="main")
    assert merge("src", "expected", repo=repo).stats["t"].plan in ("source", "dest")
    tip, before = repo.resolve("main").id, repo.read("t", ref="main").sort_by("id")
    merged = repo.read("t", ref="expected").sort_by("id")
    proc = subprocess.run([sys.executable, "-c", KILLED_MERGE, str(tmp_path / "repo"), point], env=dict(os.environ),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == -9, proc.stdout + proc.stderr  # killed at the crash point
    reopened = trimerge.Repository.open(tmp_path / "repo")  # a read-write open recovers
    now = reopened.resolve("main")
    action = now.metadata.get("recovery.action")
    assert action == ("rolled_back" if point == "before_fork" else "completed")
    assert reopened.read("t", ref="main").sort_by("id").equals(before if action == "rolled_back" else merged)
    assert (now.parents == (tip,)) if action == "rolled_back" else (reopened.resolve("main~1").parents[0] == tip)
    assert reopened.fsck().ok
