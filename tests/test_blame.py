"""Blame (lineage/gates/blame.py) against a brute-force walk of the history on random histories, plus
its API, CLI and bad input."""

from __future__ import annotations

import json
import math
import os
import tempfile

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, reject, settings
from hypothesis import strategies as st

import trimerge
from trimerge.merge import merge

from histories import KEYS, HistoryBuilder, random_operations

EXAMPLES = int(os.environ.get("TRIMERGE_LONG_TESTS", "1")) * 6


def norm(v):
    if isinstance(v, float):
        return "nan" if math.isnan(v) else (0.0 if v == 0 else v)
    if isinstance(v, list):
        return tuple(norm(x) for x in v)
    return v


def rows_at(repo, commit, table, columns, cache):
    """key -> values of ``columns`` (None where the column is absent) in ``table`` at ``commit``."""
    ck = (commit.id, table, columns)
    if ck not in cache:
        out = {}
        if table in commit.tables:
            t = repo.read(table, ref=commit.id)
            key = list(commit.tables[table].primary_key)
            data = t.to_pylist()
            for row in data:
                out[tuple(row[k] for k in key)] = tuple(norm(row.get(c)) for c in columns)
        cache[ck] = out
    return cache[ck]


def brute_blame(repo, commit, table, key, columns, cache):
    """git blame's rule, commit by commit: pass the blame to the first parent with the same value."""
    value = rows_at(repo, commit, table, columns, cache)[key]
    while True:
        for p in commit.parents:
            parent = repo.commit(p)
            if rows_at(repo, parent, table, columns, cache).get(key, object()) == value:
                commit = parent
                break
        else:
            return commit.id


def check_blame(repo, ref):
    cache: dict = {}
    head = repo.resolve(ref)
    for table in sorted(head.tables):
        key = list(head.tables[table].primary_key)
        values = tuple(n for n in repo.schema(table, ref=head.id).names if n not in key)
        got = repo.blame(table, ref=head.id).to_pylist()
        current = rows_at(repo, head, table, values, cache)
        assert sorted(tuple(r[k] for k in key) for r in got) == sorted(current, key=repr) or \
            {tuple(r[k] for k in key) for r in got} == set(current)
        for r in got:
            k = tuple(r[c] for c in key)
            assert r["commit"] == brute_blame(repo, head, table, k, values, cache), (table, k, "row")
        cells = repo.blame(table, ref=head.id, columns=list(values[:2])).to_pylist()
        for r in cells:
            k = tuple(r[c] for c in key)
            assert r["commit"] == brute_blame(repo, head, table, k, (r["column"],), cache), (table, k, r["column"])


@settings(max_examples=EXAMPLES, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(seed=st.integers(0, 2**32 - 1), n_ops=st.integers(8, 14))
def test_blame_matches_a_brute_force_walk_of_random_histories(seed, n_ops):
    with tempfile.TemporaryDirectory(prefix="trimerge-blame-") as tmp:
        builder = HistoryBuilder(os.path.join(tmp, "repo"), init_seed=seed)
        try:
            for kind, branch, op_seed in random_operations(seed, n_ops):
                builder.apply(kind, branch, op_seed)
        except KeyError:  # histories.py cannot name a commit it did not record (its bug, not blame's)
            reject()
        try:
            for b in builder.branches[:3]:
                if builder.repo.branches.exists(b):
                    check_blame(builder.repo, b)
        except AssertionError as exc:
            exc.add_note("The history, as a script:\n" + builder.script())
            raise


def test_blame_rows_cells_merges_and_where(tmp_path):
    repo = trimerge.Repository.init(str(tmp_path / "r"))
    repo.create_table("t", pa.table({"id": [1, 2, 3], "v": ["a", "b", "c"], "w": [1, 2, 3]}), "id", actor="alice")
    repo.update("t", pa.table({"id": [2], "v": ["B"]}), actor="bob", message="B")
    repo.branches.create("f")
    repo.update("t", pa.table({"id": [3], "w": [30]}), branch="f", actor="carol", message="w30")
    repo.upsert("t", pa.table({"id": [1], "v": ["A"], "w": [1]}), actor="dave", message="A")
    merge("f", "main", repo=repo, actor="merger")
    rows = repo.blame("t")
    assert rows.column_names == ["id", "commit", "actor", "time", "message"]
    assert [(r["id"], r["actor"]) for r in rows.to_pylist()] == [(1, "dave"), (2, "bob"), (3, "carol")]
    cells = repo.blame("t", columns=["w"], where="id >= 2").to_pylist()
    assert [(r["id"], r["column"], r["actor"]) for r in cells] == [(2, "w", "alice"), (3, "w", "carol")]
    assert repo.blame("t", ref="main~1").column("actor").to_pylist() == ["dave", "bob", "alice"]


def test_blame_bad_input_is_one_line(tmp_path, cli):
    repo = trimerge.Repository.init(str(tmp_path / "r"))
    repo.create_table("t", pa.table({"id": [1], "v": ["a"]}), "id")
    for call in (lambda: repo.blame("nope"), lambda: repo.blame("t", columns=["zz"]),
                 lambda: repo.blame("t", where="zz > 1"), lambda: repo.blame("t", where="id >")):
        with pytest.raises(trimerge.TrimergeError):
            call()
    for args in (["blame", "nope"], ["blame", "t", "--columns", "zz"], ["blame", "t", "--where", "id >"]):
        res = cli(*args, "-C", str(tmp_path / "r"))
        assert res.exit_code == 2, res.stdout + res.stderr
    res = cli("blame", "t", "--json", "-C", str(tmp_path / "r"))
    assert res.exit_code == 0 and json.loads(res.stdout)[0]["id"] == 1


def test_blame_compares_values_as_git_does_nan_nulls_lists_and_no_op_writes(tmp_path):
    repo = trimerge.Repository.init(str(tmp_path / "r"))
    t = pa.table({"k": ["a", "b", "c", "d"], "f": [float("nan"), 0.0, None, 1.0],
                  "l": pa.array([[1], None, [2, 3], []], pa.list_(pa.int64()))})
    repo.create_table("t", t, "k", actor="alice")
    repo.upsert("t", pa.table({"k": ["a", "b", "c"], "f": [float("nan"), -0.0, None],
                               "l": pa.array([[1], None, [2, 3]], pa.list_(pa.int64()))}), actor="bob")  # no-ops
    repo.update("t", pa.table({"k": ["d"], "l": pa.array([[9]], pa.list_(pa.int64()))}), actor="carol")
    rows = repo.blame("t")
    assert [(r["k"], r["actor"]) for r in rows.to_pylist()] == [("a", "alice"), ("b", "alice"), ("c", "alice"),
                                                                ("d", "carol")]
    cells = repo.blame("t", columns=["l", "f"], where="k = 'd'").to_pylist()
    assert [(r["column"], r["actor"]) for r in cells] == [("f", "alice"), ("l", "carol")]
    assert repo.blame("t", where="k = 'zz'").num_rows == 0
