"""The repository on both storage backends: a representative path through every family of
operations, run once on a local directory and once on the S3 test server (``repo_uri``)."""

from __future__ import annotations

from datetime import timedelta

import json
import signal

import pyarrow as pa
import pytest

import trimerge
from trimerge.diff import diff
from trimerge.merge import cherry_pick, merge, revert

from conftest import T, rows


def open_repo(uri, options, **kw):
    return trimerge.Repository.open(uri, storage_options=options, **kw)


@pytest.fixture
def flights(repo_uri):
    uri, options = repo_uri
    repo = trimerge.Repository.init(uri, storage_options=options, actor="setup")
    with repo.transaction(message="seed") as tx:
        tx.create_table("airlines", T(carrier=["AA", "UA", "DL"], name=["American", "United", "Delta"]), "carrier")
        tx.create_table("planes", T(tailnum=["N1", "N2", "N3"], seats=[100, 200, 300]), "tailnum")
    return repo


def test_init_open_and_refuse_twice(repo_uri):
    uri, options = repo_uri
    repo = trimerge.Repository.init(uri, storage_options=options)
    assert [c.message for c in repo.log()] == ["Repository created"]
    with pytest.raises(trimerge.AlreadyExistsError):
        trimerge.Repository.init(uri, storage_options=options)
    again = open_repo(uri, options)
    assert again.resolve("main").id == repo.resolve("main").id


def test_transaction_branch_fork_tag_time_travel_and_history(flights, repo_uri):
    uri, options = repo_uri
    repo = flights
    seed = repo.resolve("main")
    repo.branches.create("fix")
    repo.upsert("planes", T(tailnum=["N2"], seats=[222]), branch="fix")  # first write: a lazy fork
    assert repo.table_version("planes", "fix").lance_branch.startswith("f-")
    assert repo.table_version("airlines", "fix") == repo.table_version("airlines", "main")  # not forked
    repo.tags.create("v1", "fix")
    repo.upsert("planes", T(tailnum=["N2"], seats=[2222]), branch="fix")
    reopened = open_repo(uri, options, read_only=True)
    assert {r["tailnum"]: r["seats"] for r in reopened.read("planes", "v1").to_pylist()}["N2"] == 222
    assert reopened.entity("planes", "N2", "fix")["seats"] == 2222
    assert reopened.entity("planes", "N2", seed.id)["seats"] == 200
    assert len(reopened.entity_history("planes", "N2", "fix")) == 3
    assert [c.message for c in reopened.log("fix", limit=2)][1].startswith("Upsert")
    assert rows(reopened.read(f"{uri}::main::planes"), "tailnum") == rows(repo.read("planes", seed.id), "tailnum")


def test_diff_merge_revert_cherry_pick(flights):
    repo = flights
    repo.branches.create("feature")
    repo.upsert("planes", T(tailnum=["N1", "N4"], seats=[111, 400]), branch="feature")
    repo.delete("airlines", "carrier = 'DL'", branch="feature")
    d = diff("main", "feature", repo=repo)
    planes, airlines = d.tables["planes"].counts, d.tables["airlines"].counts
    assert (planes.inserted, planes.updated, planes.deleted) == (1, 1, 0)
    assert (airlines.inserted, airlines.updated, airlines.deleted) == (0, 0, 1)
    repo.upsert("planes", T(tailnum=["N3"], seats=[333]), branch="main")
    result = merge(repo.ref("feature"), repo.ref("main"))
    assert result.commit.parents[1] == repo.resolve("feature").id
    seats = {r["tailnum"]: r["seats"] for r in repo.read("planes").to_pylist()}
    assert seats == {"N1": 111, "N2": 200, "N3": 333, "N4": 400}
    undo = repo.upsert("planes", T(tailnum=["N2"], seats=[7]), branch="main")
    revert(undo.id, "main", repo=repo)
    assert repo.entity("planes", "N2")["seats"] == 200
    repo.branches.create("hotfix", from_ref=repo.log(limit=4)[-1].id)
    cherry_pick(undo.id, "hotfix", repo=repo)
    assert repo.entity("planes", "N2", "hotfix")["seats"] == 7


def test_cleanup_keeps_every_reachable_commit_readable(flights):
    repo = flights
    repo.branches.create("tmp")
    repo.upsert("planes", T(tailnum=["N9"], seats=[9]), branch="tmp")
    repo.branches.create("keep")
    repo.upsert("planes", T(tailnum=["N8"], seats=[8]), branch="keep")
    repo.branches.delete("tmp", force=True)
    report = repo.gc(retention=timedelta(0))
    assert len(report.forks_removed) == 1 and len(report.commits_reclaimed) == 1
    assert repo.fsck().problems == []
    for c in repo.log("keep"):
        for t in c.tables:
            repo.read(t, c.id)


def test_recovery_after_kill(flights, repo_uri, run_script):
    uri, options = repo_uri
    script = f"""
import os, pyarrow as pa, trimerge
os.environ["TRIMERGE_CRASH_AT"] = "before_publish"
repo = trimerge.Repository.open({uri!r}, storage_options={options!r})
with repo.transaction(message="doomed") as tx:
    tx.upsert("planes", pa.table({{"tailnum": ["N5"], "seats": [5]}}))
    tx.upsert("airlines", pa.table({{"carrier": ["ZZ"], "name": ["Zed"]}}))
"""
    proc = run_script(script)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    repo = open_repo(uri, options)
    assert repo.last_recovery.completed  # every table write had finished: completed under its id
    assert repo.entity("planes", "N5")["seats"] == 5
    assert repo.log(limit=2)[1].message == "doomed"


def test_cli_on_the_backend(flights, repo_uri, cli):
    uri, options = repo_uri
    opts = [a for k, v in (options or {}).items() for a in ("--storage-option", f"{k}={v}")]
    res = cli("-C", uri, *opts, "log", "--json", ok=True)
    assert [c["message"] for c in res.json()][0] == "seed"
    res = cli(*opts, "read", f"{uri}::main::planes", "--format", "json", ok=True)
    assert len(json.loads(res.stdout)) == 3
    cli("-C", uri, *opts, "branch", "create", "b2", ok=True)
    assert "b2" in open_repo(uri, options).branches.names()


def test_schema_change_on_the_backend(flights):
    flights.add_columns("planes", pa.field("year", pa.int64()))
    assert flights.schema("planes").names == ["tailnum", "seats", "year"]


def test_moved_repository_reads_main_and_names_the_old_location_for_forks(tmp_path):
    import shutil

    old, new = tmp_path / "old", tmp_path / "new"
    repo = trimerge.Repository.init(old)
    repo.create_table("t", T(id=[1, 2], v=[1, 2]), "id")
    repo.branches.create("b")
    repo.upsert("t", T(id=[2], v=[20]), branch="b")
    shutil.move(old, new)
    moved = trimerge.Repository.open(new, read_only=True)  # a read-only open cannot relocate it
    assert rows(moved.read("t"), "id") == [{"id": 1, "v": 1}, {"id": 2, "v": 2}]  # main has no fork
    with pytest.raises(trimerge.lineage.RepositoryMovedError, match=f"trimerge relocate {new}"):
        moved.read("t", "b")
    assert trimerge.Repository.open(new).entity("t", 2, "b")["v"] == 20  # a read-write open relocates it
    shutil.move(new, old)  # moved back: relocated back
    assert trimerge.Repository.open(old).entity("t", 2, "b")["v"] == 20
