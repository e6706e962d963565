"""Object-store specifics, on the SeaweedFS server of ``s3server.py``: the metadata store's contract
over real conditional requests, racing writer processes, configuration from the environment only,
bad locations, and Spark executors reading the bucket."""

from __future__ import annotations

import json
import time

import pytest

import trimerge
from trimerge.lineage.storage.backends import ObjectStoreBackend
from trimerge.lineage.storage.documents import Documents
from trimerge.lineage.errors import StorageError, TrimergeError
from trimerge.lineage.storage.location import Location

from conftest import T, run_python, run_trimerge_subprocess
from test_metastore import check_backend_contract

pytestmark = pytest.mark.s3


def backend_for(uri: str, options: dict) -> ObjectStoreBackend:
    return Location.parse(uri, options).backend("meta")


def test_object_store_backend_contract(s3_uri):
    check_backend_contract(backend_for(*s3_uri))


def test_stale_swap_loses_after_a_to_b_to_a(s3_uri):
    docs = Documents(backend_for(*s3_uri), "s3")
    docs.create("ref.json", {"commit": "A"})
    stale = docs.read("ref.json")
    v = docs.swap("ref.json", {"commit": "B"}, stale.version)
    docs.swap("ref.json", {"commit": "A"}, v)
    assert docs.swap("ref.json", {"commit": "C"}, stale.version) is None
    assert docs.get("ref.json")["commit"] == "A"


WRITER = """
import sys, pyarrow as pa, trimerge
from trimerge.lineage.errors import ConcurrentWriteError
uri, wid, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
repo = trimerge.Repository.open(uri, lock_timeout=60)
for i in range(n):
    for attempt in range(20):
        try:
            c = repo.append("t", pa.table({"id": [wid * 1000 + i], "w": [wid]}), message=f"w{wid}-{i}")
            print(c.id, flush=True)
            break
        except ConcurrentWriteError:
            continue
"""


def test_four_processes_committing_to_one_branch_lose_nothing(s3_uri, s3_server):
    uri, options = s3_uri
    repo = trimerge.Repository.init(uri, storage_options=options)
    repo.create_table("t", T(id=[-1], w=[-1]), "id")
    import subprocess
    import sys
    import os

    env = {**os.environ, **s3_server.env}
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, uri, str(w), "5"], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for w in range(4)]
    acknowledged = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        acknowledged += out.split()
    assert len(acknowledged) == 20
    log = {c.id for c in repo.log()}
    assert set(acknowledged) <= log  # every acknowledged commit is on main
    ids = repo.read("t").column("id").to_pylist()
    assert len(ids) == len(set(ids)) == 21  # no duplicate key, no lost row


def test_environment_variables_alone_configure_the_cli(s3_server):
    uri = s3_server.uri(f"env-only-{time.time_ns()}/repo")
    env = s3_server.env
    assert run_trimerge_subprocess("init", uri, env=env).exit_code == 0
    proc = run_python(f"""
import pyarrow as pa, trimerge
repo = trimerge.Repository.open({uri!r})
repo.create_table("t", pa.table({{"id": [1, 2]}}), "id")
""", env=env)
    assert proc.returncode == 0, proc.stderr
    res = run_trimerge_subprocess("read", f"{uri}::main::t", "--format", "json", env=env)
    assert res.exit_code == 0, res.stderr
    assert sorted(r["id"] for r in json.loads(res.stdout)) == [1, 2]


def bad_locations(server) -> dict[str, tuple[str, dict]]:
    good = server.storage_options
    return {
        "wrong secret": (server.uri("bad/repo"), {**good, "aws_secret_access_key": "wrong"}),
        "unreachable endpoint": (server.uri("bad/repo"), {**good, "aws_endpoint": "http://127.0.0.1:9"}),
        # No keys at all: the client would ask the instance-metadata service, pointed at a closed
        # local port here so the test never leaves this machine.
        "missing credentials": (server.uri("bad/repo"),
                                {k: v for k, v in good.items() if k not in ("aws_access_key_id", "aws_secret_access_key")}
                                | {"aws_metadata_endpoint": "http://127.0.0.1:9"}),
        "missing bucket": ("s3://no-such-bucket/repo", good),
    }


@pytest.mark.parametrize("case", ["wrong secret", "unreachable endpoint", "missing credentials", "missing bucket"])
@pytest.mark.parametrize("operation", ["init", "open"])
def test_bad_locations_fail_fast_with_one_clear_error(s3_server, case, operation):
    uri, options = bad_locations(s3_server)[case]
    t0 = time.monotonic()
    with pytest.raises(StorageError) as exc:
        getattr(trimerge.Repository, operation)(uri, storage_options=options)
    assert time.monotonic() - t0 < 30
    message = str(exc.value)
    assert "\n" not in message and uri.split("/")[2] in message
    expected = {"wrong secret": "access denied", "unreachable endpoint": "cannot be reached",
                "missing credentials": "no credentials", "missing bucket": "does not exist"}[case]
    assert expected in message


def test_bad_locations_on_the_cli_exit_2(s3_server, cli):
    uri, options = bad_locations(s3_server)["wrong secret"]
    opts = [a for k, v in options.items() for a in ("--storage-option", f"{k}={v}")]
    res = cli("-C", uri, *opts, "log")
    assert res.exit_code == 2 and len(res.stderr_lines) == 1 and "access denied" in res.stderr
    res = cli("-C", "ftp://host/repo", "log")
    assert res.exit_code == 2 and "unknown scheme" in res.stderr
    res = cli("-C", uri, "--storage-option", "novalue", "log")
    assert res.exit_code == 2 and "KEY=VALUE" in res.stderr


def test_storage_options_are_refused_for_local_paths(tmp_path):
    with pytest.raises(TrimergeError, match="object-store"):
        trimerge.Repository.init(tmp_path / "r", storage_options={"aws_region": "x"})


@pytest.mark.spark
def test_spark_diff_of_an_s3_repository_matches_the_local_engine(s3_uri, spark):
    from trimerge.diff import diff

    uri, options = s3_uri
    repo = trimerge.Repository.init(uri, storage_options=options)
    repo.create_table("t", T(id=list(range(200)), v=[i * 2 for i in range(200)]), "id")
    repo.branches.create("feature")
    repo.upsert("t", T(id=[5, 500], v=[-5, 500]), branch="feature")
    repo.delete("t", "id < 3", branch="feature")
    local = diff("main", "feature", repo=repo, engine="local").tables["t"].rows()
    on_spark = diff("main", "feature", repo=repo, engine="spark", spark=spark).tables["t"]
    assert on_spark.engine == "spark"
    assert on_spark.rows().to_pylist() == local.to_pylist()
    assert sorted(r["id"] for r in local.to_pylist()) == [0, 1, 2, 5, 500]


@pytest.mark.spark
def test_local_cluster_reads_s3_with_options_carried_by_the_tasks(s3_uri, local_cluster):
    """Separate executor JVMs and Python workers with no AWS_* environment: the storage options
    travel inside the tasks. The spark-submit entry point writes its Lance output to the bucket."""
    uri, options = s3_uri
    repo = trimerge.Repository.init(uri, storage_options=options)
    repo.create_table("t", T(id=list(range(300)), v=list(range(300))), "id")
    repo.branches.create("feature")
    repo.upsert("t", T(id=[7, 1000], v=[-7, 1000]), branch="feature")
    out_uri = uri.rsplit("/", 1)[0] + "/out/diff.lance"
    # The cluster's driver process runs without AWS_* variables (see tests/sparkcluster.py).
    proc = local_cluster.run(f"""
        import os
        import sys
        import lance
        import trimerge
        from trimerge.diff import diff
        from trimerge.cli import spark_job
        assert not [k for k in os.environ if k.startswith("AWS_")]
        options = {options!r}
        repo = trimerge.Repository.open({uri!r}, read_only=True, storage_options=options)
        remote = diff("main", "feature", repo=repo, engine="spark", spark=spark).tables["t"].rows()
        local = diff("main", "feature", repo=repo, engine="local").tables["t"].rows()
        args = [{uri!r}, "main", "feature", "-o", {out_uri!r}]
        for k, v in options.items():
            args += ["--storage-option", f"{{k}}={{v}}"]
        try:
            spark_job.main(args)
        except SystemExit as exc:
            assert not exc.code, exc.code
        written = lance.dataset({out_uri!r}, storage_options=options).to_table()
        ok = remote.to_pylist() == local.to_pylist() and remote.num_rows == 2 and written.num_rows == 2
        sys.exit(0 if ok else 1)
    """)
    assert proc.returncode == 0, proc.stderr[-3000:]
