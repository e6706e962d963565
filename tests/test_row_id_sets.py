"""Sets of stable row ids (lineage.fragments.RowIdSet, IdIndex) against Python sets, and the C heap
settings a large read relies on (lineage.memory)."""

import os
import subprocess
import sys

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from trimerge.lineage.tables.fragments import IdIndex, RowIdSet
from trimerge.lineage.storage.memory import release_freed_memory

ids_lists = st.lists(st.integers(0, 5000), unique=True, max_size=400)


@settings(max_examples=200, deadline=None)
@given(ids=ids_lists, split=st.integers(1, 7), probe=st.lists(st.integers(0, 6000), max_size=100),
       far=st.booleans())
def test_a_row_id_set_answers_like_a_python_set(ids, split, probe, far):
    if far:  # a few ids far apart: the set stays sorted ids, not a byte per id
        ids = [i * 1_000_003 for i in ids]
        probe = [p * 1_000_003 for p in probe] + probe
    s = RowIdSet()
    for part in np.array_split(np.array(ids, dtype=np.uint64), split):
        s.add(part)
    assert len(s) == len(ids)
    assert s.ids().tolist() == sorted(ids)
    want = set(ids)
    assert s.contains(np.array(probe, dtype=np.uint64)).tolist() == [p in want for p in probe]
    index = IdIndex(np.array(ids, dtype=np.uint64))
    assert index.find(np.array(probe, dtype=np.uint64))[0].tolist() == [p in want for p in probe]


def test_a_dense_set_holds_a_byte_per_id_not_the_ids():
    s = RowIdSet()
    for start in range(0, 4_000_000, 131072):
        s.add(np.arange(start, min(start + 131072, 4_000_000), dtype=np.uint64))
    assert len(s) == 4_000_000
    held = sum(a.nbytes for a in vars(s).values() if isinstance(a, np.ndarray))
    assert held <= 8_000_000  # 4 MB of bytes, where the ids are 32 MB
    assert s.contains(np.array([0, 3_999_999, 4_000_000], dtype=np.uint64)).tolist() == [True, True, False]


def test_trimerge_imports_under_any_arena_setting():
    release_freed_memory()  # harmless anywhere
    code = "import trimerge, ctypes; print('ok')"
    for env in ({}, {"MALLOC_ARENA_MAX": "4"}, {"TRIMERGE_MALLOC_ARENAS": "0"}, {"TRIMERGE_MALLOC_ARENAS": "x"}):
        out = subprocess.run([sys.executable, "-c", code], env={**os.environ, **env}, capture_output=True, text=True)
        assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_a_row_cache_serves_the_rows_read_before_and_reads_only_the_rest(tmp_path, monkeypatch):
    """Two readers of one snapshot (a merge's two diffs from one base): the rows both want are
    read from Lance once, and each gets exactly the rows it asked for."""
    import pyarrow as pa
    import trimerge
    from trimerge.diff import reads
    from trimerge.diff.planner import Snapshot

    n = 5000
    repo = trimerge.Repository.init(tmp_path / "r", actor="t")
    repo.create_table("t", pa.table({"id": np.arange(n, dtype=np.int64), "v": [f"v{i}" for i in range(n)]}), ["id"])
    snap = Snapshot(repo, repo.resolve("main").tables["t"], reads.RowCache())
    plain = Snapshot(repo, repo.resolve("main").tables["t"])
    taken: list[int] = []
    real_take = reads.take
    monkeypatch.setattr(reads, "take", lambda s, ids, cols: (taken.append(len(ids)), real_take(s, ids, cols))[1])
    first = pa.array(np.arange(0, 200, 2, dtype=np.uint64))
    second = pa.array(np.arange(100, 200, dtype=np.uint64)[::-1].copy())  # half of it read already, unsorted
    for ids in (first, second):
        got = pa.concat_tables([t for _, t in reads.take_all([(snap, ids)])]).sort_by(reads.ROWID)
        want = pa.concat_tables([t for _, t in reads.take_all([(plain, ids)])]).sort_by(reads.ROWID)
        assert got.equals(want) and got.column("id").to_pylist() == sorted(ids.to_pylist())
    assert sum(taken) == 2 * (100 + 100) - 50  # the plain snapshot read all; the cached one skipped 50


@settings(max_examples=300, deadline=None)
@given(a=st.lists(st.integers(0, 3000), max_size=300), b=st.lists(st.integers(0, 3000), max_size=300),
       run=st.tuples(st.integers(0, 3000), st.integers(0, 400)), offset=st.sampled_from([0, 5_000_000, 2**40]))
def test_set_minus_answers_like_python_sets_for_dense_and_sparse_ids(a, b, run, offset):
    """Row-id set difference (diff.planner.set_minus): a dense right side (a run of ids, as a
    fragment's) goes through a byte mask over its range, a sparse one through sorted lookups."""
    import pyarrow as pa

    from trimerge.diff.planner import set_minus

    dense = list(range(run[0], run[0] + run[1]))
    for right in (b, dense, b + dense):
        left = [x + offset for x in a + dense[::3]]
        right = [x + offset for x in right]
        got = set_minus(pa.array(left, pa.uint64()), pa.array(right, pa.uint64())).to_pylist()
        assert got == sorted(set(left) - set(right))
