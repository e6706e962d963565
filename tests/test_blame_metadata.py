"""Blame from the chain's row images (lineage/gates/blame_images.py) gives what the exact walk gives
(``method="exact"``: keyed lookups only) on random histories of every kind of write, and on
histories built to hit each fallback: no-op writes, a key deleted and brought back with its old
values, column writes, compaction, merges on the chain and restores."""

from __future__ import annotations

import os
import tempfile

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, reject, settings
from hypothesis import strategies as st

import trimerge
from trimerge.lineage.gates import blame_images
from trimerge.lineage.gates.blame import blame
from trimerge.merge import merge

from histories import HistoryBuilder, random_operations

EXAMPLES = int(os.environ.get("TRIMERGE_LONG_TESTS", "1")) * 8


def same_blame(repo, ref, table, **kw):
    exact = blame(repo, table, ref=ref, method="exact", **kw)
    for method in ("images", "auto"):
        got = blame(repo, table, ref=ref, method=method, **kw)
        assert got.equals(exact), (method, ref, table, kw, got.to_pylist(), exact.to_pylist())


def check_all(repo, ref):
    head = repo.resolve(ref)
    for table in sorted(head.tables):
        key = list(head.tables[table].primary_key)
        values = [n for n in repo.schema(table, ref=head.id).names if n not in key]
        same_blame(repo, head.id, table)
        if values:
            same_blame(repo, head.id, table, columns=values[:2])
        first = key[0]
        some = repo.read(table, ref=head.id, columns=[first]).column(first).to_pylist()[:3]
        if some and all(isinstance(v, int) for v in some):
            same_blame(repo, head.id, table, where=f"{first} IN ({', '.join(map(str, some))})")


@settings(max_examples=EXAMPLES, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(seed=st.integers(0, 2**32 - 1), n_ops=st.integers(8, 16))
def test_images_blame_matches_the_exact_walk_on_random_histories(seed, n_ops):
    with tempfile.TemporaryDirectory(prefix="trimerge-blame-images-") as tmp:
        builder = HistoryBuilder(os.path.join(tmp, "repo"), init_seed=seed)
        try:
            for kind, branch, op_seed in random_operations(seed, n_ops):
                builder.apply(kind, branch, op_seed)
        except KeyError:  # histories.py cannot name a commit it did not record (its bug, not blame's)
            reject()
        try:
            for b in builder.branches[:3]:
                if builder.repo.branches.exists(b):
                    check_all(builder.repo, b)
        except AssertionError as exc:
            exc.add_note("The history, as a script:\n" + builder.script())
            raise


OPS = st.lists(st.tuples(st.sampled_from(["upsert", "upsert", "delete", "columns", "rows", "compact", "merge"]),
                         st.lists(st.integers(0, 11), min_size=1, max_size=4, unique=True), st.integers(0, 1)),
               min_size=4, max_size=10)


@settings(max_examples=EXAMPLES, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(ops=OPS, eager=st.booleans())
def test_images_blame_matches_the_exact_walk_on_long_chains_of_small_values(ops, eager):
    """Values drawn from {0, 1}: writes that change nothing, and keys deleted then written back
    with their old values, are the rule here — the cases where the chain must check that the
    parent really holds the row."""
    with tempfile.TemporaryDirectory(prefix="trimerge-blame-chain-") as tmp:
        repo = trimerge.Repository.init(os.path.join(tmp, "r"))
        if eager:
            repo.settings.set("index.key_min_rows", 5)
            repo.settings.set("compaction.max_small_fragments", 3)
        repo.create_table("t", small(range(8), 0), "id")
        repo.branches.create("side")
        for i, (kind, keys, value) in enumerate(ops):
            if kind == "upsert":
                repo.upsert("t", small(keys, value), message=str(i))
            elif kind == "delete":
                repo.delete("t", f"id IN ({', '.join(map(str, keys))})", message=str(i))
            elif kind in ("columns", "rows"):
                present = set(repo.read("t", columns=["id"]).column("id").to_pylist())
                mine = [k for k in keys if k in present]
                if mine:
                    repo.update("t", pa.table({"id": pa.array(mine, pa.int64()), "w": pa.array([value] * len(mine), pa.int64())}),
                                write=kind, message=str(i))
            elif kind == "compact":
                repo.compact("t", message=str(i))
            else:
                repo.upsert("t", small(keys, 1 - value), branch="side", message=f"side {i}")
                try:
                    merge("side", "main", repo=repo, strategy="source-wins")
                except trimerge.TrimergeError:
                    pass
        same_blame(repo, "main", "t")
        same_blame(repo, "main", "t", columns=["w", "v"])
        same_blame(repo, "main", "t", where="id < 5")


def small(ids, value):
    ids = list(ids)
    return pa.table({"id": pa.array(ids, pa.int64()), "v": [str(value)] * len(ids), "w": pa.array([value] * len(ids), pa.int64())})


@pytest.fixture
def walks(monkeypatch):
    """How many times the chain's walk ran (so a test knows the images path was taken)."""
    calls = []
    original = blame_images.ChainImages.walk

    def counted(self, cols):
        calls.append(cols)
        return original(self, cols)

    monkeypatch.setattr(blame_images.ChainImages, "walk", counted)
    return calls


def rows(ids, v="x", w=0):
    return pa.table({"id": pa.array(ids, pa.int64()), "v": [f"{v}{i}" for i in ids], "w": pa.array([w] * len(ids), pa.int64())})


@pytest.mark.parametrize("eager", [False, True])
def test_no_op_writes_deletes_reinserts_column_writes_and_compaction(tmp_path, walks, eager):
    repo = trimerge.Repository.init(str(tmp_path / "r"))
    if eager:  # keyed writes through the key index, and compaction on every publish
        repo.settings.set("index.key_min_rows", 5)
        repo.settings.set("compaction.max_small_fragments", 3)
    repo.create_table("t", rows(range(40)), "id", actor="a0")
    repo.upsert("t", rows([1, 2, 3], v="y"), actor="a1")
    repo.upsert("t", rows([1, 2, 4]), actor="a2")  # 1, 2 go back to their first values (a2's, as git says); 4: no-op
    repo.delete("t", "id IN (5, 6)", actor="a3")
    repo.upsert("t", rows([5]), actor="a4")  # back with the values it had: blamed here, not at a0
    repo.update("t", pa.table({"id": pa.array([7, 8], pa.int64()), "w": pa.array([0, 9], pa.int64())}),
                write="columns", actor="a5")  # 7: a no-op column write
    repo.update("t", pa.table({"id": pa.array([9, 10], pa.int64()), "v": ["z9", "x10"]}), write="rows", actor="a6")
    repo.compact("t", actor="a7")
    repo.upsert("t", rows([11, 12], v="q"), actor="a8")
    for kw in ({}, {"columns": ["w"]}, {"columns": ["v", "w"]}, {"where": "id < 12"}):
        same_blame(repo, "main", "t", **kw)
    assert walks
    got = {r["id"]: r["actor"] for r in blame(repo, "t", method="images").to_pylist()}
    assert (got[1], got[2], got[3], got[4], got[5], got[7], got[8], got[9], got[10], got[11]) == \
        ("a2", "a2", "a1", "a0", "a4", "a0", "a5", "a6", "a0", "a8")


def test_merges_on_the_chain_and_restores(tmp_path, walks):
    repo = trimerge.Repository.init(str(tmp_path / "r"))
    repo.create_table("t", rows(range(30)), "id", actor="a0")
    repo.branches.create("f")
    repo.upsert("t", rows([1, 2], v="f"), branch="f", actor="f1")
    repo.upsert("t", rows([3], v="f", w=3), branch="f", actor="f2")
    repo.upsert("t", rows([4, 5], v="m"), actor="m1")
    merge("f", "main", repo=repo, actor="merger")
    repo.upsert("t", rows([2], v="f"), actor="m2")  # a no-op: the merge brought this value
    repo.upsert("t", rows([6], v="m"), actor="m3")
    same_blame(repo, "main", "t")
    same_blame(repo, "main", "t", columns=["w", "v"])
    got = {r["id"]: r["actor"] for r in blame(repo, "t", method="images").to_pylist()}
    assert (got[1], got[2], got[3], got[4], got[6], got[7]) == ("f1", "f1", "f2", "m1", "m3", "a0")
    before = repo.resolve("main~1").id
    repo.upsert("t", rows([7, 8], v="r"), actor="m4")
    repo.restore("t", before, actor="restorer")
    repo.upsert("t", rows([9], v="s"), actor="m5")
    same_blame(repo, "main", "t")
    same_blame(repo, "main", "t", columns=["v"])
    assert walks


def test_forks_on_other_lance_branches(tmp_path, walks):
    repo = trimerge.Repository.init(str(tmp_path / "r"))
    repo.create_table("t", rows(range(20)), "id", actor="a0")
    repo.upsert("t", rows([1], v="m"), actor="m1")
    repo.branches.create("f")
    repo.upsert("t", rows([2], v="f"), branch="f", actor="f1")  # forks the Lance branch
    repo.upsert("t", rows([1, 3], v="f"), branch="f", actor="f2")
    repo.upsert("t", rows([4], v="m"), actor="m2")
    repo.branches.create("g", from_ref="f")
    repo.upsert("t", rows([1], v="m"), branch="g", actor="g1")  # back to main's value at the fork
    for ref in ("f", "g", "main"):
        same_blame(repo, ref, "t")
        same_blame(repo, ref, "t", columns=["v"])
    assert walks


def test_epochs_read_in_one_scan_through_the_ref_keep_each_fragment_apart(tmp_path, walks, monkeypatch):
    """The chain's epochs are read through the ref's table in one scan where they can be: a
    fragment rewritten by a column write is two epochs with one fragment id (two scans), and tables
    of another schema (a column added on the chain) are read through their own table."""
    scans = []
    original = blame_images.ChainImages._scans

    def recorded(self):
        out = original(self)
        scans.append([[self.epochs.fragment[e] for e in members] for _, members, _ in out])
        return out

    monkeypatch.setattr(blame_images.ChainImages, "_scans", recorded)
    repo = trimerge.Repository.init(str(tmp_path / "r"))
    repo.create_table("t", rows(range(60)), "id", actor="a0")
    repo.upsert("t", rows([1, 2], v="y"), actor="a1")
    repo.update("t", pa.table({"id": pa.array([3, 4], pa.int64()), "w": pa.array([7, 0], pa.int64())}),
                write="columns", actor="a2")  # fragment 0 again, with new data files: a second epoch
    repo.upsert("t", rows([1, 5], v="z"), actor="a3")
    repo.upsert("t", rows([6], v="y"), actor="a4")
    for kw in ({}, {"columns": ["w"]}, {"where": "id < 8"}):
        same_blame(repo, "main", "t", **kw)
    assert walks and scans
    assert all(len(ids) == len(set(ids)) for plan in scans for ids in plan)  # a fragment id once per scan
    assert any(len(plan) < sum(len(ids) for ids in plan) for plan in scans)  # several epochs in one scan
    got = {r["id"]: r["actor"] for r in blame(repo, "t", method="images").to_pylist()}
    assert (got[0], got[1], got[2], got[3], got[4], got[5], got[6]) == ("a0", "a3", "a1", "a2", "a0", "a3", "a4")
    repo.add_columns("t", pa.schema([pa.field("extra", pa.int64())]), actor="a5")
    repo.upsert("t", pa.table({"id": pa.array([7], pa.int64()), "v": ["x7"], "w": pa.array([0], pa.int64()),
                               "extra": pa.array([1], pa.int64())}), actor="a6")
    for kw in ({}, {"columns": ["extra", "v"]}):
        same_blame(repo, "main", "t", **kw)
