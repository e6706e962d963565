"""Counting a diff by stable row id (``trimerge.diff.aligned``) against counting its rows.

A merge counts the source's diff without building its rows (``TableDiff.count_first``); from the
merge base, the rows the source updated are paired with their before images by stable row id.
On random edit scripts (upserts that keep or renew row ids, inserts, deletes, column writes,
compaction, added columns) the counts — per change kind and per column — must be those of the
diff's rows, and the aligned count must actually run.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pyarrow as pa
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import trimerge
from trimerge.diff import aligned, diff

KEYS = list(range(40))
edit = st.one_of(
    st.tuples(st.just("upsert"), st.lists(st.sampled_from(KEYS), min_size=1, max_size=30, unique=True),
              st.integers(0, 3)),
    st.tuples(st.just("insert"), st.lists(st.integers(100, 140), min_size=1, max_size=5, unique=True),
              st.integers(0, 3)),
    st.tuples(st.just("delete"), st.lists(st.sampled_from(KEYS), min_size=1, max_size=4, unique=True),
              st.integers(0, 3)),
    st.tuples(st.just("update"), st.lists(st.sampled_from(KEYS), min_size=1, max_size=40, unique=True),
              st.integers(0, 3)),
    st.tuples(st.just("compact"), st.just([]), st.just(0)),
    st.tuples(st.just("add_column"), st.just([]), st.just(0)),
)


def apply(repo: trimerge.Repository, ops: list) -> None:
    for kind, keys, salt in ops:
        cols = repo.schema("t", "side").names
        current = {r["k"]: r for r in repo.read("t", ref="side").to_pylist()}
        if kind in ("upsert", "insert"):
            rows = [{c: (current.get(k, {}).get(c) if c not in ("k", "v") else None) for c in cols} | {"k": k}
                    for k in keys]
            for r in rows:
                r["v"] = (r["k"] * 7 + salt) % 5  # often the same value: no-op rewrites happen
            repo.upsert("t", pa.Table.from_pylist(rows, schema=repo.schema("t", "side")), branch="side")
        elif kind == "delete":
            present = [k for k in keys if k in current]
            if present:
                repo.delete_keys("t", pa.table({"k": pa.array(present, pa.int64())}), branch="side")
        elif kind == "update":  # a column write where it pays (write="auto")
            present = [k for k in keys if k in current]
            if present:
                repo.update("t", pa.table({"k": pa.array(present, pa.int64()),
                                           "s": pa.array([f"s{(k + salt) % 3}" for k in present])}), branch="side")
        elif kind == "compact":
            repo.compact("t", branch="side")
        elif kind == "add_column" and "x" not in cols:
            with repo.transaction("side") as tx:
                tx.add_columns("t", pa.field("x", pa.int64()))


@settings(max_examples=25, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(ops=st.lists(edit, min_size=1, max_size=5))
def test_counts_by_row_id_equal_the_rows_counts(ops):
    ran = []
    real = aligned.count_aligned

    def spy(*args, **kwargs):
        out = real(*args, **kwargs)
        ran.append(out is not None)
        return out

    aligned.count_aligned = spy
    try:
        check(ops)
    finally:
        aligned.count_aligned = real
    event(f"aligned count ran: {any(ran)}")


def check(ops: list) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        repo = trimerge.Repository.init(Path(tmp) / "repo")
        repo.create_table("t", pa.table({"k": pa.array(KEYS, pa.int64()), "v": [k % 5 for k in KEYS],
                                         "s": [f"s{k % 3}" for k in KEYS]}), ["k"])
        repo.branches.create("side", from_ref="main")
        apply(repo, ops)
        rows = diff("main", "side", repo=repo, engine="local").tables["t"]
        want = rows.counts if rows.storage_status != "unchanged" else None
        rows.rows()
        counted = diff("main", "side", repo=repo, engine="local").tables["t"]
        counted.count_first = True
        if want is None:
            return
        got = counted.counts
        assert (got, got.by_column) == (want, want.by_column), ops


def test_window_gives_up_on_streams_out_of_order(monkeypatch, tmp_path):
    """A window that outgrows its bound counts the usual way, with the same answer."""
    repo = trimerge.Repository.init(tmp_path / "repo")
    n = 3000
    repo.create_table("t", pa.table({"k": list(range(n)), "v": list(range(n))}), ["k"])
    repo.branches.create("side", from_ref="main")
    repo.upsert("t", pa.table({"k": list(range(n - 1, -1, -1)), "v": [-k for k in range(n - 1, -1, -1)]}),
                branch="side")
    want = diff("main", "side", repo=repo).tables["t"].counts
    monkeypatch.setattr(aligned, "WINDOW_ROWS", 10)
    counted = diff("main", "side", repo=repo).tables["t"]
    counted.count_first = True
    assert counted.counts == want and want.updated == n - 1  # k=0 kept its value
