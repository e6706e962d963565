"""Integrity: tampered, truncated and emptied files are named, never trusted; fsck finds them all;
paths read from documents stay inside the repository; recovery never quarantines a valid note
because of a transient error; a read-only open never writes."""

from __future__ import annotations

import errno
import json
from pathlib import Path

import pytest

import trimerge
from trimerge.lineage.commit import TableVersion
from trimerge.lineage.errors import CorruptRepositoryError, InvalidOperationError
from trimerge.lineage.history.refs import publish

from conftest import T, run_python

CRASHING_WRITER = """
import sys, pyarrow as pa, trimerge
repo = trimerge.Repository.open(sys.argv[1])
with repo.transaction("main") as tx:
    tx.upsert("t", pa.table({"k": [9], "v": ["crashed"]}))
"""


@pytest.fixture
def small(tmp_path):
    repo = trimerge.Repository.init(tmp_path / "repo")
    repo.create_table("t", T(k=[1, 2], v=["a", "b"]), primary_key="k")
    repo.branches.create("dev")
    repo.upsert("t", T(k=[3], v=["dev"]), branch="dev")
    return repo


def meta(repo, *parts) -> Path:
    return Path(repo.uri, "_trimerge", *parts)


def commit_file(repo, commit_id) -> Path:
    return meta(repo, "commits", commit_id[:2], commit_id[2:] + ".json")


def test_a_clean_repository_passes_fsck(small, cli):
    report = small.fsck()
    assert report.ok and report.commits == 3 and report.table_versions >= 2
    res = cli("-C", small.uri, "fsck", ok=True)
    assert "ok" in res.stdout


def test_an_edited_commit_is_refused_and_named(small, cli):
    tip = small.resolve("dev").id
    path = commit_file(small, tip)
    doc = json.loads(path.read_text())
    doc["message"] = "rewritten history"
    path.write_text(json.dumps(doc))
    fresh = trimerge.Repository.open(small.uri)
    with pytest.raises(CorruptRepositoryError) as exc:
        fresh.resolve("dev")
    assert path.name in str(exc.value)
    report = fresh.fsck()
    assert any(tip in p for p in report.problems) and not report.ok
    res = cli("-C", small.uri, "fsck")
    assert res.exit_code == 1 and tip[:10] in res.stdout
    res = cli("-C", small.uri, "log", "dev")
    assert res.exit_code == 2 and len(res.stderr_lines) == 1 and path.name in res.stderr


@pytest.mark.parametrize("content", [b"", b"{\"name\": \"dev\", \"commit", b"[]", b"\xff\xfe"])
def test_truncated_emptied_or_invalid_ref_files_are_named(small, cli, content):
    path = meta(small, "refs", "branches", "dev.json")
    path.write_bytes(content)
    fresh = trimerge.Repository.open(small.uri)
    with pytest.raises(CorruptRepositoryError) as exc:
        fresh.resolve("dev")
    assert "dev.json" in str(exc.value)
    assert any("branch dev" in p for p in fresh.fsck().problems)
    res = cli("-C", small.uri, "branch", "list")
    assert res.exit_code == 2 and "dev.json" in res.stderr and len(res.stderr_lines) == 1


def test_fsck_names_bad_recovery_notes_and_missing_data(small, cli):
    meta(small, "intents").mkdir(exist_ok=True)
    (meta(small, "intents") / "x.json").write_text("{\"ulid\": 1}")
    tv = small.table_version("t", "dev")
    data = next((Path(small.dataset_path(tv)) / "tree" / tv.lance_branch / "data").glob("*.lance"))
    data.unlink()
    problems = trimerge.Repository.open(small.uri, read_only=True).fsck().problems
    assert any("intents/x.json" in p for p in problems)
    assert any("data file(s) missing" in p and "table t" in p for p in problems)
    doc = cli("-C", small.uri, "fsck", "--json").json()
    assert doc["ok"] is False and len(doc["problems"]) == 2


def test_paths_in_documents_stay_inside_tables(small):
    tip = small.resolve("main")
    escaped = TableVersion("../../elsewhere", "main", 1, "x", ("k",))
    evil = small.commits.build(parents=[tip.id], actor="mallory", message="escape", metadata={}, branch="main",
                               tables={**tip.tables, "t": escaped}, created_at=tip.created_at)
    publish(small.commits, small.refs, small.refs.branch("main"), evil)
    with pytest.raises(CorruptRepositoryError) as exc:
        small.read("t")
    assert "elsewhere" in str(exc.value)
    with pytest.raises(CorruptRepositoryError):
        small.upsert("t", T(k=[5], v=["e"]))
    assert any("elsewhere" in p for p in small.fsck().problems)


def test_read_only_open_never_writes(small, run_script):
    res = run_python(CRASHING_WRITER, small.uri, env={"TRIMERGE_CRASH_AT": "after_write_1"})
    assert res.returncode == -9
    before = sorted((p, p.stat().st_mtime_ns) for p in Path(small.uri).rglob("*") if p.is_file())
    ro = trimerge.Repository.open(small.uri, read_only=True)
    with pytest.raises(InvalidOperationError):
        ro.recover()
    with pytest.raises(InvalidOperationError):
        ro.gc()
    ro.fsck()
    assert sorted((p, p.stat().st_mtime_ns) for p in Path(small.uri).rglob("*") if p.is_file()) == before


def test_a_transient_error_during_recovery_keeps_the_note_for_later(small, monkeypatch):
    res = run_python(CRASHING_WRITER, small.uri, env={"TRIMERGE_CRASH_AT": "after_write_1"})
    assert res.returncode == -9
    assert len(list(meta(small, "intents").glob("*.json"))) == 1
    from trimerge.lineage.tables.tablestore import TableStore

    def disk_full(self, tv):
        raise OSError(errno.ENOSPC, "No space left on device")

    with monkeypatch.context() as patch:
        patch.setattr(TableStore, "writable_head", disk_full)
        repo = trimerge.Repository.open(small.uri)
        assert len(repo.last_recovery.retry_later) == 1 and repo.last_recovery.quarantined == []
    assert len(list(meta(small, "intents").glob("*.json"))) == 1
    assert not meta(small, "quarantine").exists() or not any(meta(small, "quarantine").iterdir())
    repo = trimerge.Repository.open(small.uri)  # the disk has room again
    assert len(repo.last_recovery.rolled_back) == 1
    assert list(meta(small, "intents").glob("*.json")) == []
    assert repo.read("t").num_rows == 2 and repo.fsck().ok
