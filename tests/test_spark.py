"""Spark engine: the same rows as the local engine, read by executors, written without collecting."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import trimerge
from trimerge.diff import diff
from diffref import same
from test_diff_properties import SCHEMA, apply_random_op, make_rows, table_of

pytestmark = pytest.mark.spark


def both(repo, a, b, spark, table="t"):
    local = diff(a, b, repo=repo, engine="local").tables[table]
    remote = diff(a, b, repo=repo, engine="spark", spark=spark).tables[table]
    return local, remote


def assert_same(local, remote):
    assert remote.engine == "spark"
    lr, rr = local.rows(), remote.rows()
    assert rr.schema == lr.schema
    assert same(rr.to_pylist(), lr.to_pylist())  # NaN-aware: NaN equals NaN


@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data(), composite=st.booleans())
def test_spark_rows_equal_local_rows(tmp_path_factory, spark, data, composite):
    draw = data.draw
    repo = trimerge.Repository.init(tmp_path_factory.mktemp("s") / "repo")
    repo.create_table("t", table_of(make_rows(draw, range(6), composite), SCHEMA), primary_key=["k1", "k2"])
    repo.append("t", table_of(make_rows(draw, range(6, 10), composite), SCHEMA))
    repo.branches.create("feature")
    next_key, deleted = [100], set()
    for branch in draw(st.permutations(["main", "feature", "feature", "main", "feature"])):
        apply_random_op(draw, repo, branch, composite, next_key, deleted)
    for a, b in (("main", "feature"), ("feature", "main"), ("main~2", "feature")):
        local, remote = both(repo, a, b, spark)
        if local.status != "unchanged":
            assert_same(local, remote)


@pytest.fixture
def lineages(tmp_path):
    """main and feature on different Lance branches after a merge, both changed again."""
    from trimerge.merge import merge

    repo = trimerge.Repository.init(tmp_path / "repo")
    repo.create_table("t", pa.table({"k": list(range(50)), "v": [f"v{i}" for i in range(50)],
                                     "x": [float(i) if i % 7 else None for i in range(50)]}), primary_key="k")
    repo.branches.create("feature")
    repo.upsert("t", pa.table({"k": [1, 2, 60], "v": ["f1", "f2", "f60"], "x": [None, 2.5, 1.0]}), branch="feature")
    repo.upsert("t", pa.table({"k": [3], "v": ["m3"], "x": [3.0]}), branch="main")
    merge("feature", "main", repo=repo)
    repo.delete("t", "k IN (10, 11)", branch="main")
    repo.upsert("t", pa.table({"k": [1, 12], "v": ["F1", "f12"], "x": [9.0, None]}), branch="feature")
    return repo


def test_spark_equals_local_across_lineages(lineages, spark):
    local, remote = both(lineages, "main", "feature", spark)
    assert lineages.resolve("main").tables["t"].lance_branch != lineages.resolve("feature").tables["t"].lance_branch
    assert local.rows().num_rows > 0
    assert_same(local, remote)


def test_to_spark_and_outputs_without_collecting(lineages, spark, tmp_path):
    from trimerge.diff.spark import write_lance

    td = diff("main", "feature", repo=lineages, engine="spark", spark=spark).tables["t"]
    frame = td.to_spark()
    assert frame.count() == diff("main", "feature", repo=lineages, engine="local").tables["t"].rows().num_rows
    frame.write.parquet(str(tmp_path / "out.parquet"))
    write_lance(frame, str(tmp_path / "out.lance"))
    import lance
    import pyarrow.parquet as pq

    assert pq.read_table(tmp_path / "out.parquet").num_rows == frame.count()
    assert lance.dataset(str(tmp_path / "out.lance")).count_rows() == frame.count()


def test_auto_uses_spark_only_above_the_threshold(lineages, spark):
    low = diff("main", "feature", repo=lineages, engine="auto", spark=spark, spark_threshold=0).tables["t"]
    high = diff("main", "feature", repo=lineages, engine="auto", spark=spark, spark_threshold=10**9).tables["t"]
    assert (low.engine, high.engine) == ("spark", "local")
    assert low.rows().to_pylist() == high.rows().to_pylist()


def test_merge_with_spark_diffs_matches_local(lineages, spark):
    from trimerge.merge import merge

    lineages.branches.create("m2", from_ref="main")
    a = merge("feature", "main", repo=lineages, strategy="source-wins", engine="spark", spark=spark)
    b = merge("feature", "m2", repo=lineages, strategy="source-wins", engine="local")
    key = lambda r: r["k"]  # noqa: E731
    assert sorted(lineages.read("t", ref="main").to_pylist(), key=key) == \
        sorted(lineages.read("t", ref="m2").to_pylist(), key=key)
    assert [c.to_json() for c in a.conflicts] == [c.to_json() for c in b.conflicts]


def test_cli_diff_engine_spark(lineages, spark, tmp_path):
    from click.testing import CliRunner

    from trimerge.cli import cli

    res = CliRunner().invoke(cli, ["-C", str(lineages.path), "diff", "main", "feature", "--engine", "spark",
                                   "-o", str(tmp_path / "d.parquet")])
    assert res.exit_code == 0, res.output
    import pyarrow.parquet as pq

    assert pq.read_table(tmp_path / "d.parquet").num_rows == \
        diff("main", "feature", repo=lineages, engine="local").tables["t"].rows().num_rows


def test_clear_error_without_java(monkeypatch, spark):
    import shutil

    from trimerge.diff.spark import SparkUnavailableError, get_spark

    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(SparkUnavailableError, match="Java"):
        get_spark("local[1]")


def test_multi_executor_local_cluster(lineages, local_cluster):
    """Separate executor JVMs and Python workers: tasks and reader code must really be shipped."""
    out = local_cluster.run(f"""
        import sys
        import trimerge
        from trimerge.diff import diff
        repo = trimerge.Repository.open({str(lineages.path)!r}, read_only=True)
        remote = diff("main", "feature", repo=repo, engine="spark", spark=spark).tables["t"].rows()
        local = diff("main", "feature", repo=repo, engine="local").tables["t"].rows()
        executors = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1
        print("EXECUTORS", executors)
        sys.exit(0 if remote.to_pylist() == local.to_pylist() and remote.num_rows else 1)
    """)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "EXECUTORS 2" in out.stdout


def test_spark_logs_stay_off_stderr_unless_verbose(tmp_path):
    """A spark diff from the shell prints its result and nothing of the JVM's start-up chatter."""
    from conftest import T, run_trimerge_subprocess

    repo = trimerge.Repository.init(tmp_path / "repo")
    repo.create_table("t", T(k=[1, 2], v=["a", "b"]), primary_key="k")
    repo.branches.create("dev")
    repo.upsert("t", T(k=[2], v=["B"]), branch="dev")
    res = run_trimerge_subprocess("-C", repo.uri, "diff", "main", "dev", "--engine", "spark", "--stat")
    assert res.exit_code == 0, res.stderr
    assert "~1" in res.stdout and res.stderr == ""


def test_the_equality_rule_is_the_same_in_both_engines(spark):
    """``same_values`` (polars) and ``same_values_spark`` answer alike where engines usually
    disagree: NaN, nulls, signed zeros, empty strings, nested lists and structs, a widening."""
    import math

    import polars as pl
    from pyspark.sql import functions as F

    from trimerge.diff.rules import same_values, same_values_spark

    nan = math.nan
    pairs = pa.table({
        "f_l": pa.array([nan, nan, None, None, -0.0, 1.5, 2.0], pa.float64()),
        "f_r": pa.array([nan, 1.0, None, 0.0, 0.0, 1.5, 2.5], pa.float64()),
        "s_l": pa.array([None, "", "a", None, "b", "x", ""], pa.string()),
        "s_r": pa.array([None, None, "a", "", "B", "x", ""], pa.string()),
        "l_l": pa.array([[1, None], [], None, [1], [2, 3], [None], []], pa.list_(pa.int64())),
        "l_r": pa.array([[1, None], None, None, [1, 2], [2, 3], [None], []], pa.list_(pa.int64())),
        "i_l": pa.array([1, 2, None, 4, 5, 6, 7], pa.int32()),  # widened to int64 on the right
        "i_r": pa.array([1, 3, None, None, 5, 6, 8], pa.int64()),
    })
    frame = pl.from_arrow(pairs)
    from pyspark.sql.pandas.types import from_arrow_schema

    sdf = spark.createDataFrame([tuple(r.values()) for r in pairs.to_pylist()], from_arrow_schema(pairs.schema))
    for name in ("f", "s", "l", "i"):
        local = frame.select(same_values(pl.col(f"{name}_l"), pl.col(f"{name}_r"), frame.schema[f"{name}_l"],
                                         frame.schema[f"{name}_r"])).to_series().to_list()
        remote = [r[0] for r in sdf.select(same_values_spark(F.col(f"{name}_l"), F.col(f"{name}_r"),
                                                             sdf.schema[f"{name}_l"].dataType,
                                                             sdf.schema[f"{name}_r"].dataType)).collect()]
        assert local == remote, name


def test_spark_diffs_an_added_and_a_dropped_table(tmp_path, spark):
    repo = trimerge.Repository.init(tmp_path / "repo")
    repo.create_table("gone", pa.table({"id": [1, 2], "v": ["a", "b"]}), ["id"])
    repo.branches.create("feature", from_ref="main")
    repo.create_table("new", pa.table({"id": [1, 2, 3], "v": ["x", "y", "z"]}), ["id"], branch="feature")
    repo.drop_table("gone", branch="feature")
    for table in ("new", "gone"):
        local, remote = both(repo, "main", "feature", spark, table)
        assert_same(local, remote)
