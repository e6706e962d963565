"""Merges on Spark agree with local merges: the rows written, the statistics and the conflicts.

The row merge runs on executors (classify, resolve, Lance fragments written there, one commit from
the driver); these tests compare it with the local merge on random histories, check the conflict
cap and the conflicts file, hand resolutions, the CLI, and separate executor processes."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given

import trimerge
from trimerge.lineage.errors import InvalidOperationError
from trimerge.merge import MergeConflictError, merge
from test_merge_properties import Side, base_strategy, prop_settings, script, to_table

pytestmark = pytest.mark.spark


def rows(repo: trimerge.Repository, ref: str, table: str = "t") -> list[str]:
    """The table's rows as sorted JSON texts (NaN equals NaN there)."""
    return sorted(json.dumps(r, sort_keys=True, default=str) for r in repo.read(table, ref=ref).to_pylist())


def conflicts(result) -> list[dict]:
    return sorted((c.to_json() for c in result.conflicts), key=lambda c: json.dumps(c, sort_keys=True))


def stats(result) -> dict:
    return {n: s.to_json() for n, s in result.stats.items()}


@pytest.fixture(scope="module")
def workdir():
    with tempfile.TemporaryDirectory() as d:
        yield Path(d)


@prop_settings(4)
@given(base=base_strategy, edits_a=script, edits_b=script)
def test_spark_merge_equals_local_merge(workdir, spark, base, edits_a, edits_b):
    repo = trimerge.Repository.init(Path(tempfile.mkdtemp(dir=workdir)) / "repo")
    repo.create_table("t", to_table(base, ["a", "b", "f"]), ["id"])
    for b in ("a", "b"):
        repo.branches.create(b, from_ref="main")
    Side(repo, "a").apply(edits_a)
    Side(repo, "b").apply(edits_b)
    for name in ("b_local", "b_spark", "b_local_dest", "b_spark_dest"):
        repo.branches.create(name, from_ref="b")

    for granularity in ("cell", "row"):
        local = merge("a", "b", repo=repo, dry_run=True, engine="local", granularity=granularity)
        remote = merge("a", "b", repo=repo, dry_run=True, engine="spark", spark=spark, granularity=granularity)
        assert (remote.status, stats(remote), conflicts(remote)) == (local.status, stats(local), conflicts(local))

    for strategy, suffix in (("source-wins", ""), ("dest-wins", "_dest")):
        local = merge("a", f"b_local{suffix}", repo=repo, strategy=strategy, engine="local")
        remote = merge("a", f"b_spark{suffix}", repo=repo, strategy=strategy, engine="spark", spark=spark)
        assert (remote.status, stats(remote)) == (local.status, stats(local))
        assert rows(repo, f"b_spark{suffix}") == rows(repo, f"b_local{suffix}")
        assert remote.commit.parents == (repo.resolve("b").id, repo.resolve("a").id)


@pytest.fixture
def conflicted(tmp_path):
    """20 rows both sides changed differently, 10 the source changed alone, 5 dest deleted."""
    repo = trimerge.Repository.init(tmp_path / "repo")
    n = 100
    repo.create_table("t", pa.table({"k": list(range(n)), "v": [f"v{i}" for i in range(n)],
                                     "w": list(range(n))}), primary_key="k")
    repo.branches.create("src")
    repo.upsert("t", pa.table({"k": list(range(30)), "v": [f"s{i}" for i in range(30)],
                              "w": list(range(30))}), branch="src")
    repo.upsert("t", pa.table({"k": list(range(20)), "v": [f"d{i}" for i in range(20)],
                              "w": list(range(20))}), branch="main")
    repo.delete("t", "k >= 95", branch="main")
    repo.upsert("t", pa.table({"k": [96], "v": ["s96"], "w": [0]}), branch="src")
    return repo


def test_conflicts_capped_in_the_result_and_all_in_the_file(conflicted, spark, tmp_path):
    repo = conflicted
    for engine in ("local", "spark"):
        path = tmp_path / f"conflicts-{engine}.jsonl"
        with pytest.raises(MergeConflictError) as caught:
            merge("src", "main", repo=repo, engine=engine, spark=spark, max_conflicts=5, conflicts_file=str(path))
        result = caught.value.result
        assert len(result.conflicts) == 5 and result.conflicts_total == 21
        assert "21 conflict(s)" in str(caught.value)
        written = [json.loads(line) for line in path.read_text().splitlines()]
        assert len(written) == 21  # one cell each: column v, plus the delete/modify of 96
        assert {r["kind"] for r in written} == {"row.update_update", "row.delete_modify"}
    assert (tmp_path / "conflicts-local.jsonl").read_text().count("\n") == \
        (tmp_path / "conflicts-spark.jsonl").read_text().count("\n")


def test_hand_resolutions_apply_on_executors(conflicted, spark, tmp_path):
    repo = conflicted
    # A column both sides added differently: a schema conflict, resolved by hand before any row is.
    with repo.transaction("src") as tx:
        tx.add_columns("t", pa.field("z", pa.int64()))
    with repo.transaction("main") as tx:
        tx.add_columns("t", pa.field("z", pa.string()))
    repo.branches.create("main2", from_ref="main")
    path = tmp_path / "conflicts.jsonl"
    dry = merge("src", "main", repo=repo, dry_run=True, engine="spark", spark=spark, conflicts_file=str(path))
    table = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(table) == dry.conflicts_total == 22
    for r in table:
        if r["kind"] in ("row.delete_modify", "schema.column"):
            r["resolution"] = "ours"
        elif json.loads(r["key"])["k"] % 2:
            r["resolution"], r["value"] = "value", json.dumps({"v": "by hand"})
        else:
            r["resolution"] = "theirs"
    resolutions = pa.Table.from_pylist(table)
    remote = merge("src", "main", repo=repo, engine="spark", spark=spark, resolutions=resolutions)
    local = merge("src", "main2", repo=repo, engine="local", resolutions=resolutions)
    assert stats(remote) == stats(local)
    assert rows(repo, "main") == rows(repo, "main2")
    assert remote.commit.metadata["merge.resolved_by_hand"] == local.commit.metadata["merge.resolved_by_hand"] == "22"
    got = {r["k"]: r["v"] for r in map(json.loads, rows(repo, "main"))}
    assert (got[1], got[2], got[25], 96 in got) == ("by hand", "s2", "s25", False)


def test_unused_resolution_is_refused_on_spark(conflicted, spark):
    stray = pa.table({"kind": ["row.update_update"], "table": ["t"], "key": ['{"k": 50}'], "column": ["v"],
                      "resolution": ["theirs"]})
    with pytest.raises(InvalidOperationError, match="match no conflict"):
        merge("src", "main", repo=conflicted, engine="spark", spark=spark, strategy="source-wins", resolutions=stray)


def test_cli_merge_engine_spark(conflicted, spark, tmp_path):
    from click.testing import CliRunner

    from trimerge.cli import cli

    path = tmp_path / "c.csv"
    res = CliRunner().invoke(cli, ["-C", str(conflicted.path), "merge", "src", "--into", "main", "--engine", "spark",
                                   "--conflicts", str(path)])
    assert res.exit_code == 1, res.output
    assert "21 conflict(s); nothing published" in res.output
    assert len(path.read_text().splitlines()) == 22  # header + one line per conflict
    res = CliRunner().invoke(cli, ["-C", str(conflicted.path), "--json", "merge", "src", "--into", "main",
                                   "--engine", "spark", "--strategy", "source-wins"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert out["status"] == "merged" and out["stats"]["t"]["rows_from_source"] == 31


def test_spark_merge_on_separate_executors(conflicted, local_cluster):
    """local-cluster: executor JVMs and Python workers of their own run the fold and the writes."""
    conflicted.branches.create("main2", from_ref="main")
    out = local_cluster.run(f"""
        import sys
        import trimerge
        from trimerge.merge import merge
        repo = trimerge.Repository.open({str(conflicted.path)!r})
        remote = merge("src", "main", repo=repo, engine="spark", spark=spark, strategy="source-wins")
        executors = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1
        print("EXECUTORS", executors, remote.stats["t"].rows_from_source)
    """)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "EXECUTORS 2 31" in out.stdout
    local = merge("src", "main2", repo=conflicted, engine="local", strategy="source-wins")
    assert local.stats["t"].rows_from_source == 31
    assert rows(conflicted, "main") == rows(conflicted, "main2")


def test_table_added_on_both_sides_merges_alike(tmp_path, spark):
    """No base: both diffs are whole added tables; max_conflicts=0 still counts the conflict."""
    repo = trimerge.Repository.init(tmp_path / "repo")
    repo.create_table("t", pa.table({"k": [1]}), ["k"])
    repo.branches.create("src")
    repo.create_table("n", pa.table({"k": [1, 2, 3], "v": ["a", "b", "c"]}), ["k"], branch="src")
    repo.create_table("n", pa.table({"k": [2, 3, 4], "v": ["b", "X", "d"]}), ["k"], branch="main")
    repo.branches.create("main2")
    with pytest.raises(MergeConflictError, match="1 conflict\\(s\\) in n") as caught:
        merge("src", "main", repo=repo, engine="spark", spark=spark, max_conflicts=0)
    assert caught.value.result.conflicts == [] and caught.value.result.conflicts_total == 1
    remote = merge("src", "main", repo=repo, engine="spark", spark=spark, strategy="source-wins")
    local = merge("src", "main2", repo=repo, engine="local", strategy="source-wins")
    assert stats(remote) == stats(local)
    assert rows(repo, "main", "n") == rows(repo, "main2", "n")


@pytest.mark.parametrize("on_stale", ["report", "conflict"])
def test_stale_derived_rows_are_found_on_executors_as_locally(tmp_path, spark, on_stale):
    """Derived columns: a cell merge that leaves a derived value and its inputs from different
    sides is reported (or made a conflict) by a Spark merge exactly as by a local one."""
    from test_derived import docs_repo, stale_history

    repo = docs_repo(tmp_path / "repo")
    stale_history(repo)
    repo.branches.create("main2")
    outcomes = []
    for dest, engine in (("main", "spark"), ("main2", "local")):
        try:
            result = merge("reembed", dest, repo=repo, engine=engine, spark=spark, on_stale=on_stale)
        except MergeConflictError as exc:
            result = exc.result
        outcomes.append((result.stale, stats(result), conflicts(result), result.stats["docs"].stale))
    assert outcomes[0] == outcomes[1]
    assert outcomes[0][3] == 2
    if on_stale == "report":
        assert outcomes[0][0] == {"docs": [{"id": 2}, {"id": 3}]}
        assert rows(repo, "main", "docs") == rows(repo, "main2", "docs")
    else:
        assert [c["kind"] for c in outcomes[0][2]] == ["row.stale_derived"] * 2
