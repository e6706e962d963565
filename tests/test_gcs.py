"""Google Cloud Storage on a real server (fake-gcs-server on 127.0.0.1 behind the adapter of
``gcsserver.py``, started by the ``gcs_server`` fixture): the metadata store's contract, racing
conditional requests, the walkthrough, the CLI, racing writer processes and remotes, with explicit
storage options (a service-account key that names the endpoint) and nothing from the environment."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import lance
import pytest

import trimerge
from trimerge.diff import diff
from trimerge.lineage.storage.documents import Documents
from trimerge.lineage.storage.location import Location
from trimerge.merge import merge

from conftest import T, rows
from test_metastore import check_backend_contract

pytestmark = pytest.mark.gcs


def test_object_store_backend_contract_on_gcs(gs_uri):
    check_backend_contract(Location.parse(*gs_uri).backend("meta"))


def test_racing_conditional_writes_have_exactly_one_winner(gs_uri):
    """The server, not the client, decides a race: 16 threads creating one key, then 16 swapping it
    from the same version, each round has exactly one winner (GCS's ``x-goog-if-generation-match``)."""
    backend = Location.parse(*gs_uri).backend("race")
    for round_ in range(10):
        created: list[bool] = []
        start = threading.Barrier(16)

        def create(i: int, key: str = f"c{round_}.json") -> None:
            start.wait()
            created.append(backend.create(key, f"{i}".encode()) is not None)

        threads = [threading.Thread(target=create, args=(i,)) for i in range(16)]
        [t.start() for t in threads]
        [t.join() for t in threads]
        assert created.count(True) == 1, created
        base = backend.get(f"c{round_}.json")
        swapped: list[bool] = []

        def swap(i: int, key: str = f"c{round_}.json") -> None:
            start.wait()
            swapped.append(backend.swap(key, f"s{i}".encode(), base.version) is not None)

        threads = [threading.Thread(target=swap, args=(i,)) for i in range(16)]
        [t.start() for t in threads]
        [t.join() for t in threads]
        assert swapped.count(True) == 1, swapped


def test_stale_swap_loses_after_a_to_b_to_a_on_gcs(gs_uri):
    docs = Documents(Location.parse(*gs_uri).backend("meta"), "gs")
    docs.create("ref.json", {"commit": "A"})
    stale = docs.read("ref.json")
    v = docs.swap("ref.json", {"commit": "B"}, stale.version)
    docs.swap("ref.json", {"commit": "A"}, v)
    assert docs.swap("ref.json", {"commit": "C"}, stale.version) is None
    assert docs.get("ref.json")["commit"] == "A"


def test_the_walkthrough_on_gcs_and_pylance_reads_every_ref_exactly(gs_uri):
    uri, options = gs_uri
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
    assert rows(repo.read("t", "v0"), "id")[0] == {"id": 1, "v": "a"}  # time travel to a tag
    assert rows(repo.read("t", "main~1"), "id")[0] == {"id": 2, "v": "b"}  # and to a commit
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


def test_a_data_file_written_in_parts_reads_back(gs_uri):
    """Lance writes a large file as a multipart upload (XML API parts, then one completion)."""
    uri, options = gs_uri
    repo = trimerge.Repository.init(uri, storage_options=options)
    n = 400_000
    repo.create_table("big", T(id=list(range(n)), v=[os.urandom(16).hex() for _ in range(n)]), "id")
    assert repo.read("big").num_rows == n
    assert repo.read("big", where="id = 399999").column("id").to_pylist() == [399999]
    assert repo.fsck().problems == []


def test_the_cli_on_gcs(gs_uri, cli, tmp_path):
    uri, options = gs_uri
    flags = [a for k, v in options.items() for a in ("--storage-option", f"{k}={v}")]
    (tmp_path / "p.csv").write_text("sku,price\nA1,1.10\nB2,2.50\n")
    cli(*flags, "init", uri, ok=True)
    cli(*flags, "-C", uri, "table", "create", "p", tmp_path / "p.csv", "-k", "sku", ok=True)
    out = cli(*flags, "read", f"{uri}::main::p", "--format", "json", ok=True).stdout
    assert sorted(r["sku"] for r in json.loads(out)) == ["A1", "B2"]


@pytest.mark.parametrize("key", ['{"private_key": "SECRETSECRET"', '["SECRETSECRET"]',
                                 '{"client_email": "a@b", "private_key": "SECRETSECRET", "private_key_id": "k"}'],
                         ids=["truncated", "not-an-object", "not-pem"])
@pytest.mark.parametrize("verb", ["init", "log"])
def test_a_malformed_service_account_key_is_one_line_exit_2_and_never_echoed(gs_uri, cli, key, verb):
    uri, _options = gs_uri
    flags = ["--storage-option", f"service_account_key={key}", "--storage-option", "allow_http=true"]
    res = cli(*flags, "init", uri) if verb == "init" else cli(*flags, "-C", uri, "log")
    assert res.exit_code == 2 and len(res.stderr_lines) == 1, res.stderr
    assert "service-account key" in res.stderr and "SECRETSECRET" not in res.stderr


WRITER = r"""
import json, os, sys, time, pyarrow as pa, trimerge
from trimerge.lineage.errors import ConcurrentWriteError
uri, options, wid, n, barrier = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
repo = trimerge.Repository.open(uri, lock_timeout=0.0, storage_options=options)
out = {"ok": [], "failed": []}
for i in range(n):
    open(os.path.join(barrier, f"{i}-{wid}"), "w").close()  # both start each commit together
    while len([f for f in os.listdir(barrier) if f.startswith(f"{i}-")]) < 2:
        time.sleep(0.001)
    key = wid * 1000 + i
    try:
        out["ok"].append([key, repo.append("t", pa.table({"id": [key], "w": [wid]}), branch="b").id])
    except ConcurrentWriteError as exc:
        out["failed"].append([key, exc.retryable])
print(json.dumps(out))
"""


def test_two_processes_racing_commits_on_one_branch(gs_uri, tmp_path):
    """Two writers without waiting, each commit started together: one wins, the other is refused with
    the retryable ConcurrentWriteError (its row absent); history stays linear and nothing is lost."""
    uri, options = gs_uri
    repo = trimerge.Repository.init(uri, storage_options=options)
    repo.create_table("t", T(id=[-1], w=[-1]), "id")
    repo.branches.create("b")
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, uri, json.dumps(options), str(w), "8", str(tmp_path)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for w in range(2)]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        results.append(json.loads(out.strip().splitlines()[-1]))
    ok = [tuple(x) for r in results for x in r["ok"]]
    failed = [tuple(x) for r in results for x in r["failed"]]
    assert len(ok) + len(failed) == 16
    assert all(retryable is True for _key, retryable in failed)
    for i in range(8):  # started together: every round has a winner, and the race is real (a loser somewhere)
        assert {i, 1000 + i} & {key for key, _cid in ok}, (i, results)
    assert failed, results
    log = repo.log("b")
    assert {cid for _key, cid in ok} <= {c.id for c in log}
    assert len(log) == 2 + len(ok) and all(len(c.parents) == 1 for c in log[:-1])  # root, create, one per win
    ids = repo.read("t", "b").column("id").to_pylist()
    assert sorted(ids) == sorted([-1] + [key for key, _cid in ok])  # no lost, phantom or duplicate row


RETRYING_WRITER = """
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


def test_four_processes_committing_to_one_branch_lose_nothing(gs_uri):
    uri, options = gs_uri
    repo = trimerge.Repository.init(uri, storage_options=options)
    repo.create_table("t", T(id=[-1], w=[-1]), "id")
    procs = [subprocess.Popen([sys.executable, "-c", RETRYING_WRITER, uri, json.dumps(options), str(w), "4"],
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


def test_clone_to_gcs_and_back_keeps_the_connection_not_the_key(gs_uri, tmp_path):
    uri, options = gs_uri
    origin = trimerge.Repository.init(tmp_path / "origin")
    origin.create_table("t", T(k=[1, 2], v=["a", "b"]), "k")
    origin.branches.create("dev")
    origin.upsert("t", T(k=[9], v=["dev"]), branch="dev")
    up = trimerge.Repository.clone(origin.uri, uri, dst_storage_options=options).repository
    assert rows(up.read("t", "origin/dev"), "k") == rows(origin.read("t", "dev"), "k")
    back = trimerge.Repository.clone(uri, tmp_path / "back", storage_options=options).repository
    kept = back.remotes.get("origin").storage_options
    assert kept == {"allow_http": "true"}  # the service-account key is a credential: never written down
    key = {"service_account_key": options["service_account_key"]}
    back.upsert("t", T(k=[3], v=["c"]))
    assert back.push(storage_options=key).status == "fast-forward"
    assert rows(up.read("t"), "k")[-1] == {"k": 3, "v": "c"}
    up.upsert("t", T(k=[1], v=["A"]))
    back.fetch(storage_options=key)
    assert rows(back.read("t", "origin/main"), "k") == rows(up.read("t"), "k")
    back.pull(storage_options=key)
    assert rows(back.read("t"), "k") == rows(up.read("t"), "k")
    assert up.pull("origin", "dev").status == "created"  # the gs:// clone pulls from and pushes to its local origin
    up.upsert("t", T(k=[4], v=["gs"]), branch="dev")
    assert up.push("origin", "dev").status == "fast-forward"
    assert rows(origin.read("t", "dev"), "k")[-1] == {"k": 9, "v": "dev"} and {"k": 4, "v": "gs"} in rows(origin.read("t", "dev"), "k")
    assert up.fsck().problems == [] and back.fsck().problems == []


def test_clone_gcs_to_gcs_streams_and_pushes_back(gcs_server, tmp_path, monkeypatch):
    monkeypatch.setattr("trimerge.remotes.copying.STREAM_BYTES", 1)  # every file through a spool file
    monkeypatch.setattr("trimerge.remotes.transfer.STREAM_BYTES", 1)
    options = dict(gcs_server.storage_options)
    src = trimerge.Repository.init(gcs_server.uri(f"gg-{tmp_path.name}-a/repo"), storage_options=options)
    src.create_table("t", T(k=[1, 2], v=["a", "b"]), "k")
    dst = trimerge.Repository.clone(src.uri, gcs_server.uri(f"gg-{tmp_path.name}-b/repo"), storage_options=options,
                                    dst_storage_options=options).repository
    dst.upsert("t", T(k=[3], v=["c"]))
    assert dst.push(storage_options=options).status == "fast-forward"
    assert rows(src.read("t"), "k") == rows(dst.read("t"), "k") == [{"k": 1, "v": "a"}, {"k": 2, "v": "b"},
                                                                      {"k": 3, "v": "c"}]
    assert src.fsck().problems == [] and dst.fsck().problems == []


def test_environment_variables_alone_configure_the_cli(gcs_server, tmp_path):
    from conftest import run_trimerge_subprocess

    uri = gcs_server.uri(f"env-only-{tmp_path.name}-{time.monotonic_ns()}/repo")
    env = {"GOOGLE_SERVICE_ACCOUNT_KEY": gcs_server.storage_options["service_account_key"]}
    res = run_trimerge_subprocess("init", uri, env=env, cwd=tmp_path)  # plain http is refused unless allowed
    assert res.exit_code == 2 and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert "GOOGLE_ALLOW_HTTP=true" in res.stderr
    env["GOOGLE_ALLOW_HTTP"] = "true"
    res = run_trimerge_subprocess("init", uri, env=env, cwd=tmp_path)
    assert res.exit_code == 0, res.stderr
    (tmp_path / "p.csv").write_text("sku,price\nA1,1.10\n")
    res = run_trimerge_subprocess("-C", uri, "table", "create", "p", tmp_path / "p.csv", "-k", "sku", env=env, cwd=tmp_path)
    assert res.exit_code == 0, res.stderr
    res = run_trimerge_subprocess("read", f"{uri}::main::p", "--format", "json", env=env, cwd=tmp_path)
    assert res.exit_code == 0 and json.loads(res.stdout) == [{"sku": "A1", "price": 1.1}], res.stderr


@pytest.mark.spark
def test_a_spark_diff_reads_gcs_with_the_options_carried_by_the_tasks(gs_uri, spark):
    uri, options = gs_uri
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
