"""Remotes on the S3 test server (SeaweedFS): clone local → S3 and S3 → local, push and pull both
ways, S3 → S3, and a push killed mid-transfer (see tests/test_remotes.py for the local cases)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import trimerge
from trimerge.lineage.errors import NonFastForwardError
from trimerge.lineage.storage.location import Location

from conftest import T
from test_remotes import make_origin, rows

pytestmark = pytest.mark.s3


def _names_nothing_of(uri: str, options: dict, old: str) -> None:
    backend = Location.parse(uri, options).backend("tables")
    bare = old.split("://", 1)[-1]
    for key in backend.keys_below(""):
        if key.endswith((".manifest", ".txn")):
            assert bare.encode() not in backend.get(key).data, key


@pytest.mark.parametrize("stream_bytes", [None, 1], ids=["in-memory", "streamed"])
def test_clone_local_to_s3_and_back_with_push_and_pull(tmp_path, s3_uri, s3_server, monkeypatch, stream_bytes):
    if stream_bytes is not None:  # every file streamed: local -> S3, S3 -> local, S3 -> S3
        monkeypatch.setattr("trimerge.remotes.copying.STREAM_BYTES", stream_bytes)
        monkeypatch.setattr("trimerge.remotes.transfer.STREAM_BYTES", stream_bytes)
    uri, options = s3_uri
    for k, v in s3_server.env.items():
        monkeypatch.setenv(k, v)
    origin = make_origin(tmp_path / "origin")
    up = trimerge.Repository.clone(origin.uri, uri, dst_storage_options=options)
    remote = up.repository
    assert remote.fsck().ok
    for ref, theirs in (("origin/dev/x", "dev/x"), ("v1", "v1"), ("main", "main")):
        for table in remote.tables(ref):
            assert remote.read(table, ref=ref).equals(origin.read(table, ref=theirs)), (ref, table)
    _names_nothing_of(uri, options, origin.uri)
    # S3 -> local.
    down = trimerge.Repository.clone(uri, tmp_path / "down", storage_options=options).repository
    assert down.remotes.get("origin").uri == remote.uri
    assert rows(down, ref="v1") == rows(origin, ref="v1") and rows(down, ref="origin/main") == rows(origin)
    assert down.fsck().ok
    _names_nothing_of(down.uri, {}, remote.uri)
    # local -> S3 push, S3 -> local pull.
    down.upsert("t", T(k=[2], v=["from-down"]))
    assert down.push(storage_options=options).status == "fast-forward"
    assert {r["k"]: r["v"] for r in rows(remote)}[2] == "from-down"
    remote.upsert("t", T(k=[3], v=["on-s3"]))
    down.upsert("t", T(k=[4], v=["local"]))
    with pytest.raises(NonFastForwardError):
        down.push(storage_options=options)
    assert down.pull(storage_options=options).status == "merged"
    assert down.push(storage_options=options).status == "fast-forward"
    values = {r["k"]: r["v"] for r in rows(remote)}
    assert (values[2], values[3], values[4]) == ("from-down", "on-s3", "local")
    # The S3 repository pulls from its own origin (local) and pushes a branch there.
    origin.upsert("t", T(k=[5], v=["origin"]), branch="dev/x")
    assert remote.pull("origin", "dev/x").status == "created"
    assert {r["k"]: r["v"] for r in rows(remote, ref="dev/x")}[5] == "origin"
    remote.upsert("t", T(k=[6], v=["s3"]), branch="dev/x")
    assert remote.push("origin", "dev/x").status == "fast-forward"
    assert {r["k"]: r["v"] for r in rows(origin, ref="dev/x")}[6] == "s3"
    for repo in (origin, remote, down):
        assert repo.fsck().ok


def test_clone_s3_to_s3_and_a_killed_push_is_finished(tmp_path, s3_server, monkeypatch):
    monkeypatch.setattr("trimerge.remotes.copying.STREAM_BYTES", 1)  # S3 -> S3 through a spool file
    monkeypatch.setattr("trimerge.remotes.transfer.STREAM_BYTES", 1)
    options = dict(s3_server.storage_options)
    src = s3_server.uri(f"rs-{os.getpid()}-a/repo")
    dst = s3_server.uri(f"rs-{os.getpid()}-b/repo")
    origin = make_origin(tmp_path / "seed")
    first = trimerge.Repository.clone(origin.uri, src, dst_storage_options=options).repository
    second = trimerge.Repository.clone(src, dst, storage_options=options, dst_storage_options=options).repository
    assert second.fsck().ok and rows(second, ref="v1") == rows(first, ref="v1")
    _names_nothing_of(dst, options, src)
    second.upsert("t", T(k=[7], v=["seven"]))
    tip = first.resolve("main").id
    env = {**os.environ, **s3_server.env, "TRIMERGE_CRASH_AT": "transfer_manifests_copied"}
    crashed = subprocess.run([sys.executable, "-m", "trimerge.cli", "-C", dst, "push"], env=env,
                             capture_output=True, text=True, timeout=300)
    assert crashed.returncode == -9, crashed.stderr
    assert trimerge.Repository.open(src, storage_options=options).resolve("main").id == tip
    env.pop("TRIMERGE_CRASH_AT")
    again = subprocess.run([sys.executable, "-m", "trimerge.cli", "-C", dst, "push"], env=env,
                           capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    reopened = trimerge.Repository.open(src, storage_options=options)
    assert reopened.resolve("main").id == second.resolve("main").id and reopened.fsck().ok
    assert {r["k"]: r["v"] for r in rows(reopened)}[7] == "seven"


def test_unreachable_or_missing_remote_is_one_line_exit_2(tmp_path, s3_server):
    from conftest import run_trimerge_subprocess

    missing = s3_server.uri(f"rs-{os.getpid()}-none/repo")
    res = run_trimerge_subprocess("clone", missing, tmp_path / "c", env=s3_server.env, cwd=tmp_path)
    assert res.exit_code == 2 and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert not (tmp_path / "c").exists()
    env = {**s3_server.env, "AWS_ENDPOINT": "http://127.0.0.1:9", "AWS_ENDPOINT_URL": "http://127.0.0.1:9",
           "TRIMERGE_STORE_RETRIES": "0", "TRIMERGE_STORE_CONNECT_TIMEOUT": "1s"}
    res = run_trimerge_subprocess("clone", missing, tmp_path / "c", env=env, cwd=tmp_path)
    assert res.exit_code == 2 and len(res.stderr.strip().splitlines()) == 1, res.stderr
    origin = make_origin(tmp_path / "origin")
    res = run_trimerge_subprocess("-C", origin.uri, "remote", "add", "up", missing, env=env, cwd=tmp_path)
    assert res.exit_code == 2 and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert trimerge.Repository.open(origin.uri).remotes.list() == []


def test_a_remote_keeps_how_to_connect_and_never_the_credentials(tmp_path, s3_uri, s3_server, monkeypatch, cli):
    """A clone's origin, and a remote added with --storage-option, keep the endpoint, region and
    allow_http for fetch, pull and push; keys and secrets are never written into the repository."""
    for k in s3_server.env:
        monkeypatch.delenv(k, raising=False)
    uri, options = s3_uri
    source = trimerge.Repository.init(uri, storage_options=options)
    source.create_table("t", T(k=[1, 2], v=["a", "b"]), primary_key="k")
    secrets = {k: v for k, v in options.items() if "key" in k}
    assert secrets and all(v not in (uri, s3_server.endpoint) for v in secrets.values())
    clone = trimerge.Repository.clone(uri, tmp_path / "c", storage_options=options).repository
    kept = clone.remotes.get("origin").storage_options
    assert kept == {k: v for k, v in options.items() if k not in secrets}
    written = [p for p in tmp_path.joinpath("c", "_trimerge").rglob("*") if p.is_file()]
    assert written and not [p for p in written for v in secrets.values() if v.encode() in p.read_bytes()]
    source.upsert("t", T(k=[3], v=["c"]))
    with pytest.raises(trimerge.lineage.errors.TrimergeError):
        clone.fetch("origin")  # no credentials anywhere: refused in one error, nothing changed
    assert clone.resolve("origin/main").id != source.resolve("main").id
    assert clone.fetch("origin", storage_options=secrets).status == "done"  # endpoint and region kept
    assert clone.resolve("origin/main").id == source.resolve("main").id
    clone.pull("origin", "main", storage_options=secrets)
    clone.upsert("t", T(k=[4], v=["d"]))
    assert clone.push("origin", "main", storage_options=secrets).status == "fast-forward"
    assert rows(source)[-1] == {"k": 4, "v": "d"}

    with pytest.raises(trimerge.lineage.errors.RemoteError, match=r"'aws_secret_access_key' \(a credential"):
        clone.remotes.add("api", uri, storage_options=options)  # the API refuses to write a credential
    assert "api" not in clone.remotes
    flags = [a for k, v in options.items() for a in ("--storage-option", f"{k}={v}")]
    res = cli("-C", clone.uri, "remote", "add", "up", uri, *flags, "--json", ok=True)
    assert res.json() == {"name": "up", "uri": uri, "storage_options": kept}
    text = cli("-C", clone.uri, "remote", "add", "up2", uri, *flags, ok=True).stdout
    assert "keeps" in text and "aws_secret_access_key" in text and secrets["aws_secret_access_key"] not in text
    assert cli("-C", clone.uri, "remote", "list", "--json", ok=True).json()[-1]["storage_options"] == kept
    keys = [a for k, v in secrets.items() for a in ("--storage-option", f"{k}={v}")]
    source.upsert("t", T(k=[5], v=["e"]))
    assert cli("-C", clone.uri, "fetch", "up", *keys, "--json", ok=True).json()["status"] == "done"
    copy = tmp_path / "cli-clone"  # one command's options reach the side that is an object store
    assert cli("clone", uri, copy, *flags, "--json", ok=True).json()["status"] == "done"
    assert trimerge.Repository.open(copy).remotes.get("origin").storage_options == kept
    written = [p for p in tmp_path.joinpath("c").rglob("*") if p.is_file()]
    assert not [p for p in written for v in secrets.values() if v.encode() in p.read_bytes()]
