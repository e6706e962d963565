"""Azure Blob storage on a real server (Azurite on 127.0.0.1, started by the ``azure_server``
fixture): the walkthrough, the CLI, racing writers and remotes, with explicit storage options (the
account's name, key and endpoint) and nothing from the environment."""

from __future__ import annotations

import json
import subprocess
import sys

import lance
import pytest

import trimerge
from trimerge.diff import diff
from trimerge.merge import merge

from conftest import T, rows

pytestmark = pytest.mark.azure


def test_the_walkthrough_on_azure_and_pylance_reads_every_ref_exactly(az_uri):
    uri, options = az_uri
    repo = trimerge.Repository.init(uri, storage_options=options)
    repo.create_table("t", T(id=[1, 2, 3], v=["a", "b", "c"]), "id")
    repo.create_index("t", "v", "btree")
    repo.tags.create("v0", "main")
    repo.branches.create("dev")
    repo.upsert("t", T(id=[2, 4], v=["B", "d"]), branch="dev")
    repo.delete("t", "id = 1")
    changes = diff("main", "dev", repo=repo).tables["t"].rows().to_pylist()
    assert sorted((r["id"], r["change"]) for r in changes) == [(1, "insert"), (2, "update"), (4, "insert")]
    assert merge("dev", "main", repo=repo).status == "merged"
    assert rows(repo.read("t"), "id") == [{"id": 2, "v": "B"}, {"id": 3, "v": "c"}, {"id": 4, "v": "d"}]
    assert rows(repo.read("t", "v0"), "id")[0] == {"id": 1, "v": "a"}
    assert repo.read("t", "main", where="v = 'B'").num_rows == 1
    for ref in ("main", "main~1", "dev", "v0"):  # a client nobody here wrote, at each ref's exact version
        tv = repo.table_version("t", ref)
        ds = lance.dataset(repo.dataset_path(tv), storage_options=options)
        ds = ds.checkout_version((tv.lance_branch, tv.version) if tv.lance_branch else tv.version)
        assert sorted(ds.to_table().to_pylist(), key=lambda r: r["id"]) == rows(repo.read("t", ref), "id")
    assert repo.fsck().problems == []
    repo.branches.delete("dev", force=True)
    repo.gc("now")
    assert repo.fsck().problems == []
    again = trimerge.Repository.open(uri, read_only=True, storage_options=options)
    assert rows(again.read("t", "v0"), "id") == rows(repo.read("t", "v0"), "id")


def test_the_cli_on_azure_and_a_wrong_key_is_one_line_exit_2(az_uri, cli, tmp_path):
    uri, options = az_uri
    flags = [a for k, v in options.items() for a in ("--storage-option", f"{k}={v}")]
    (tmp_path / "p.csv").write_text("sku,price\nA1,1.10\nB2,2.50\n")
    cli(*flags, "init", uri, ok=True)
    cli(*flags, "-C", uri, "table", "create", "p", tmp_path / "p.csv", "-k", "sku", ok=True)
    out = cli(*flags, "read", f"{uri}::main::p", "--format", "json", ok=True).stdout
    assert sorted(r["sku"] for r in json.loads(out)) == ["A1", "B2"]
    wrong = [a if not a.startswith("account_key=") else "account_key=" + "QUJD" * 22 for a in flags]
    res = cli(*wrong, "-C", uri, "log")
    assert res.exit_code == 2 and len(res.stderr_lines) == 1, res.stderr
    assert "QUJD" not in res.stderr  # the key is never echoed


WRITER = """
import json, sys, pyarrow as pa, trimerge
from trimerge.lineage.errors import ConcurrentWriteError
uri, options, wid, n = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
repo = trimerge.Repository.open(uri, lock_timeout=60, storage_options=options)
for i in range(n):
    for attempt in range(20):
        try:
            print(repo.append("t", pa.table({"id": [wid * 1000 + i], "w": [wid]})).id, flush=True)
            break
        except ConcurrentWriteError:
            continue
"""


def test_four_processes_committing_to_one_branch_lose_nothing(az_uri):
    uri, options = az_uri
    repo = trimerge.Repository.init(uri, storage_options=options)
    repo.create_table("t", T(id=[-1], w=[-1]), "id")
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, uri, json.dumps(options), str(w), "4"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for w in range(4)]
    acknowledged = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        acknowledged += out.split()
    assert len(acknowledged) == 16
    assert set(acknowledged) <= {c.id for c in repo.log()}  # every acknowledged commit is on main
    ids = repo.read("t").column("id").to_pylist()
    assert len(ids) == len(set(ids)) == 17  # no duplicate key, no lost row


def test_clone_to_azure_and_back_keeps_the_endpoint_not_the_key(az_uri, tmp_path):
    uri, options = az_uri
    origin = trimerge.Repository.init(tmp_path / "origin")
    origin.create_table("t", T(k=[1, 2], v=["a", "b"]), "k")
    up = trimerge.Repository.clone(origin.uri, uri, dst_storage_options=options).repository
    back = trimerge.Repository.clone(uri, tmp_path / "back", storage_options=options).repository
    kept = back.remotes.get("origin").storage_options
    assert kept == {k: v for k, v in options.items() if k != "account_key"}
    key = {"account_key": options["account_key"]}
    back.upsert("t", T(k=[3], v=["c"]))
    assert back.push(storage_options=key).status == "fast-forward"
    assert rows(up.read("t"), "k")[-1] == {"k": 3, "v": "c"}
    up.upsert("t", T(k=[1], v=["A"]))
    back.pull(storage_options=key)
    assert rows(back.read("t"), "k") == rows(up.read("t"), "k")
    assert up.fsck().problems == [] and back.fsck().problems == []


def test_environment_variables_alone_configure_the_cli(azure_server, tmp_path):
    from conftest import run_trimerge_subprocess

    uri = azure_server.uri(f"env-only-{tmp_path.name}/repo")
    options = azure_server.storage_options
    env = {"AZURE_STORAGE_ACCOUNT_NAME": options["account_name"], "AZURE_STORAGE_ACCOUNT_KEY": options["account_key"],
           "AZURE_STORAGE_ENDPOINT": options["endpoint"]}
    res = run_trimerge_subprocess("init", uri, env=env, cwd=tmp_path)  # plain http is refused unless allowed
    assert res.exit_code == 2 and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert "AZURE_ALLOW_HTTP=true" in res.stderr
    env["AZURE_ALLOW_HTTP"] = "true"
    assert run_trimerge_subprocess("init", uri, env=env, cwd=tmp_path).exit_code == 0
    (tmp_path / "p.csv").write_text("sku,price\nA1,1.10\n")
    res = run_trimerge_subprocess("-C", uri, "table", "create", "p", tmp_path / "p.csv", "-k", "sku", env=env, cwd=tmp_path)
    assert res.exit_code == 0, res.stderr
    res = run_trimerge_subprocess("read", f"{uri}::main::p", "--format", "json", env=env, cwd=tmp_path)
    assert res.exit_code == 0 and json.loads(res.stdout) == [{"sku": "A1", "price": 1.1}], res.stderr


@pytest.mark.spark
def test_a_spark_diff_reads_azure_with_the_options_carried_by_the_tasks(az_uri, spark):
    uri, options = az_uri
    repo = trimerge.Repository.init(uri, storage_options=options)
    repo.create_table("t", T(id=list(range(50)), v=[f"v{i}" for i in range(50)]), "id")
    repo.branches.create("dev")
    repo.upsert("t", T(id=[3, 60], v=["three", "sixty"]), branch="dev")
    repo.delete("t", "id = 7", branch="dev")
    local = diff("main", "dev", repo=repo).tables["t"]
    remote = diff("main", "dev", repo=repo, engine="spark", spark=spark).tables["t"]
    assert remote.engine == "spark"
    key = lambda r: r["id"]  # noqa: E731
    assert sorted(remote.rows().to_pylist(), key=key) == sorted(local.rows().to_pylist(), key=key)
    assert [r["change"] for r in sorted(local.rows().to_pylist(), key=key)] == ["update", "delete", "insert"]
