"""Hostile input, round three (issue 39, points 1 and 6): filters that are more than one
expression, namespace predicates, data checks that never end or return no keys, reflog names,
repeated blame columns, and the files a write refused through the namespace leaves behind.
The outcome rule of test_hostile_input.py holds: success, or one line with exit 2 (bad input)
and nothing changed.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from dataclasses import replace
from pathlib import Path

import lance_namespace as ln
import pyarrow as pa
import pytest
from click.testing import CliRunner

import trimerge
from trimerge.cli import cli as trimerge_cli
from trimerge.lineage.gates.checks import Check, as_record
from trimerge.lineage.errors import InvalidNameError, InvalidOperationError
from trimerge.merge import MergeCheckError, merge

from conftest import run_trimerge_subprocess, trimerge_command
from test_hostile_input import fresh_repo, snapshot


def invoke(repo: trimerge.Repository, *args: str):
    return CliRunner().invoke(trimerge_cli, ["-C", repo.uri, *map(str, args)])


def assert_refused(result, code: int = 2, fragment: str | None = None) -> str:
    stderr = result.stderr.strip()
    assert result.exit_code == code, (result.exit_code, result.output, result.exception)
    assert "\n" not in stderr and stderr.startswith("error:"), stderr
    if fragment is not None:
        assert fragment in stderr, stderr
    return stderr


@pytest.fixture
def repo() -> trimerge.Repository:
    """``t`` (key id; v 'a', 'b', null) on main; dev adds id 4."""
    return fresh_repo()


def ids(table: pa.Table) -> list[int]:
    return sorted(table.column("id").to_pylist())


# ---------------------------------------------------------------------------------------------- 1. one expression
def test_the_issues_typo_deletes_nothing(repo):
    before = snapshot(Path(repo.uri))
    with pytest.raises(InvalidOperationError, match="';'"):
        repo.delete("t", "id > 0; AND v < 0")
    assert snapshot(Path(repo.uri)) == before
    assert ids(repo.read("t")) == [1, 2, 3]


def test_the_issues_read_is_refused_on_the_command_line(repo):
    assert_refused(invoke(repo, "read", "t", "--where", "v = 'a'; not sql at all"), fragment="one SQL expression")


NOT_ONE = ["id > 0; AND v < 0", "id > 0;", "id = 1 ;", "v = 'a'; not sql at all", "id = 1; DELETE FROM t",
           "id = 1 garbage", "id = 1 garbage here", "id = 1 AS x", "id = 1 id = 2", "id = 1 ORDER BY id",
           "id = 1 LIMIT 1", "id = 1 WHERE id = 2", "id = 1 SELECT 1", "id = 1)", "(id = 1", "id = 1, v = 'a'",
           "id IN (1, 2]", "id = 1 (2)"]


def entry_points(repo: trimerge.Repository, text: str) -> dict:
    ns = trimerge.TrimergeNamespace(root=repo.uri)

    def in_transaction():
        with repo.transaction("main") as tx:
            tx.delete("t", text)

    return {"read": lambda: repo.read("t", filter=text), "read where": lambda: repo.read("t", where=text),
            "delete": lambda: repo.delete("t", text),
            "transaction delete": in_transaction, "search": lambda: repo.search("t", vector=[0.0], where=text),
            "blame": lambda: repo.blame("t", where=text),
            "namespace count": lambda: ns.count_table_rows(ln.CountTableRowsRequest(id=["t"], predicate=text))}


@pytest.mark.parametrize("text", NOT_ONE)
def test_anything_but_one_expression_is_refused_at_every_entry_point(repo, text):
    before = snapshot(Path(repo.uri))
    for name, call in entry_points(repo, text).items():
        with pytest.raises((InvalidOperationError, ln.InvalidInputError)) as info:
            call()
        message = str(info.value)
        assert "\n" not in message and ("one SQL expression" in message or "never closed" in message), (name, message)
    assert snapshot(Path(repo.uri)) == before


@pytest.mark.parametrize("args", [
    ["read", "t", "--where", "id = 1; x"], ["delete", "t", "--where", "id > 0; AND v < 0"],
    ["blame", "t", "--where", "id = 1 garbage"], ["search", "t", "--vector", "0", "--where", "id = 1;"],
    ["read", "t", "--where", "id = 1)"],
])
def test_the_command_line_refuses_them_with_one_line(repo, args):
    before = snapshot(Path(repo.uri))
    assert_refused(invoke(repo, *args))
    assert snapshot(Path(repo.uri)) == before


@pytest.mark.parametrize("text, expected", [
    ("v = ';'", []), ("v = 'a;b' OR id = 1", [1]), ("id = 1 -- ; a comment", [1]), ("id = 1 /* ; */", [1]),
    ("(id = 1) OR (id = 2)", [1, 2]), ("id IN (1, 3)", [1, 3]), ("v IS NULL", [3]), ("id = 2\n-- trailing", [2]),
])
def test_one_expression_still_reads_and_counts(repo, text, expected):
    assert ids(repo.read("t", filter=text)) == expected
    ns = trimerge.TrimergeNamespace(root=repo.uri)
    assert ns.count_table_rows(ln.CountTableRowsRequest(id=["t"], predicate=text)).count == len(expected)
    assert ids(repo.blame("t", where=text)) == expected


# ---------------------------------------------------------------------------------------------- 6. namespace predicates
def test_a_bad_namespace_predicate_is_the_namespaces_own_error(repo):
    ns = trimerge.TrimergeNamespace(root=repo.uri)
    with pytest.raises(ln.InvalidInputError, match="No field named nope"):
        ns.count_table_rows(ln.CountTableRowsRequest(id=["t"], predicate="nope = 1"))
    with pytest.raises(ln.InvalidInputError, match="deep"):
        ns.count_table_rows(ln.CountTableRowsRequest(id=["t"], predicate="id = " + "+".join(["1"] * 1000)))
    assert ns.count_table_rows(ln.CountTableRowsRequest(id=["t"])).count == 3


def test_a_5000_term_namespace_predicate_does_not_crash_the_process(repo):
    code = textwrap.dedent(f"""
        import lance_namespace as ln, trimerge
        ns = trimerge.TrimergeNamespace(root={repo.uri!r})
        try:
            ns.count_table_rows(ln.CountTableRowsRequest(id=["t"], predicate="id = " + "+".join(["1"] * 5000)))
        except ln.InvalidInputError as exc:
            print("refused:", exc)
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-500:])
    assert proc.stdout.startswith("refused:") and "deep" in proc.stdout


# ---------------------------------------------------------------------------------------------- 6. data checks
ENDLESS = ("SELECT * FROM t WHERE id < (WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r) "
           "SELECT count(*) FROM r)")


def test_checks_timeout_is_a_setting():
    repo = fresh_repo()
    assert repo.settings.get("checks.timeout") == 10
    repo.settings.set("checks.timeout", 0.5)
    for bad in (0, -1, "10", True, float("inf")):
        with pytest.raises(InvalidOperationError, match="checks.timeout"):
            repo.settings.set("checks.timeout", bad)


def test_an_endless_check_is_stopped_and_fails(repo):
    repo.settings.set("checks.timeout", 1)
    repo.checks.add("endless", "t", ENDLESS)
    started = time.monotonic()
    with pytest.raises(InvalidOperationError, match=r"did not finish within 1 s.*checks\.timeout"):
        repo.checks.run()
    assert time.monotonic() - started < 8
    res = run_trimerge_subprocess("-C", repo.uri, "check", "run", timeout=60)
    assert res.exit_code == 2 and len(res.stderr.strip().splitlines()) == 1, (res.exit_code, res.stderr)
    assert "did not finish within 1 s" in res.stderr


def test_an_endless_check_fails_a_gated_merge_and_releases_the_lease(repo):
    repo.settings.set("checks.timeout", 1)
    repo.checks.add("endless", "t", ENDLESS)
    repo.branches.protect("main")
    repo.upsert("t", pa.table({"id": pa.array([5], pa.int64()), "v": ["e"]}), branch="dev")
    tip = repo.branches.get("main").commit_id
    res = run_trimerge_subprocess("-C", repo.uri, "merge", "dev", "--into", "main", timeout=60)
    assert res.exit_code == 2 and "did not finish within 1 s" in res.stderr, (res.exit_code, res.stderr)
    assert len(res.stderr.strip().splitlines()) == 1
    with pytest.raises(InvalidOperationError, match="did not finish within 1 s"):
        merge("dev", "main", repo=repo)
    assert repo.branches.get("main").commit_id == tip
    repo.branches.unprotect("main")
    fast = trimerge.Repository.open(repo.uri, lock_timeout=2)  # a lease still held would make this wait, then fail
    fast.upsert("t", pa.table({"id": pa.array([6], pa.int64()), "v": ["f"]}), branch="main")
    assert ids(fast.read("t")) == [1, 2, 3, 6]


def test_a_check_must_return_the_key_columns(repo):
    before = snapshot(Path(repo.uri))
    with pytest.raises(InvalidOperationError, match="key column"):
        repo.checks.add("nokey", "t", "SELECT v FROM t WHERE v = 'zz'")
    assert_refused(invoke(repo, "check", "add", "nokey", "-t", "t", "--sql", "SELECT count(*) AS n FROM t"), fragment="key column")
    assert snapshot(Path(repo.uri)) == before
    repo.checks.add("keyed", "t", "SELECT id, v FROM t WHERE v = 'zz'")


def test_a_stored_check_without_keys_never_crashes_a_run_or_a_merge(repo):
    legacy = Check("nokey", "t", "SELECT v FROM t WHERE v = 'b'")
    for branch in ("main", "dev"):  # as an older trimerge accepted it
        with repo.transaction(branch) as tx:
            tx.set_table("t", replace(tx.table_version("t"), checks=as_record({"nokey": legacy})))
    [result] = repo.checks.run()
    assert result.failing_rows == 1 and result.sample_keys == []
    res = run_trimerge_subprocess("-C", repo.uri, "check", "run", timeout=60)
    assert res.exit_code == 1 and "1 failing row" in res.stdout, (res.exit_code, res.stderr)
    repo.branches.protect("main")
    outcome = merge("dev", "main", repo=repo, dry_run=True)
    assert outcome.status == "check_failed" and outcome.checks[0].failing_rows == 1
    with pytest.raises(MergeCheckError):
        merge("dev", "main", repo=repo)


# ---------------------------------------------------------------------------------------------- 6. reflog names
@pytest.mark.parametrize("name", ["x" * 300, "a/" * 120 + "b", "é", "a b", "a\x00b"])
def test_reflog_names_are_checked_like_branch_names(repo, name):
    with pytest.raises(InvalidNameError):
        repo.reflog(name)
    with pytest.raises(trimerge.TrimergeError) as info:
        repo.resolve(name + "@{1}")
    assert not isinstance(info.value, OSError)
    assert_refused(invoke(repo, "reflog", name))


def test_reflog_names_that_are_not_utf8_are_one_line():
    repo = fresh_repo()
    for args in ([b"reflog", b"\xff\xfe"], [b"read", b"t", b"--ref", b"\xff@{1}"], [b"reflog", b"x" * 300]):
        proc = subprocess.run([*map(os.fsencode, trimerge_command()), b"-C", repo.uri.encode(), *args],
                              capture_output=True, timeout=120)
        assert proc.returncode == 2, (args, proc.returncode, proc.stderr[-400:])
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_the_reflog_of_real_refs_still_works(repo):
    assert repo.reflog("dev") and repo.reflog("main") is not None and repo.reflog("HEAD") is not None
    assert repo.resolve("dev@{1}").id == repo.resolve("dev~1").id


# ---------------------------------------------------------------------------------------------- 6. blame
def test_a_column_named_twice_is_blamed_once(repo):
    once = repo.blame("t", columns=["v"])
    assert repo.blame("t", columns=["v", "v", "v"]).equals(once)
    assert repo.blame("t", columns=["v", "id", "v"]).num_rows == 2 * once.num_rows
    twice = invoke(repo, "--json", "blame", "t", "--columns", "v,v")
    assert twice.exit_code == 0 and twice.stdout == invoke(repo, "--json", "blame", "t", "--columns", "v").stdout


# ---------------------------------------------------------------------------------------------- 6. refused writes' files
lancedb = pytest.importorskip("lancedb")


def table_files(repo: trimerge.Repository) -> dict[str, int]:
    root = Path(repo.uri) / "tables"
    return {str(p.relative_to(root)): p.stat().st_size for p in sorted(root.rglob("*")) if p.is_file()}


def every_ref(repo: trimerge.Repository) -> dict:
    refs = [b.name for b in repo.branches.list()] + [t.name for t in repo.tags.list()] + ["main~1", "feat~1"]
    out = {}
    for ref in refs:
        for table in sorted(repo.resolve(ref).tables):
            data = repo.read(table, ref=ref)
            out[(ref, table)] = data.sort_by([(data.column_names[0], "ascending")]).to_pylist()
    return out


def refused_lancedb_add(repo: trimerge.Repository) -> None:
    """A LanceDB write the namespace refuses (main is protected): Lance has written its data,
    transaction and staging manifest before it asks the namespace to commit."""
    from test_namespace import items

    repo.branches.protect("main")
    table = lancedb.connect_namespace("trimerge", {"root": repo.uri}).open_table("items")
    with pytest.raises(RuntimeError, match="Commit result for version .* is unknown"):
        table.add(items(list(range(100, 5000))))


def age(repo: trimerge.Repository, keys, seconds: float) -> None:
    then = time.time() - seconds
    for key in keys:
        os.utime(Path(repo.uri) / "tables" / key, (then, then))


@pytest.fixture
def items_repo(tmp_path) -> trimerge.Repository:
    from test_namespace import build

    return build(str(tmp_path / "repo"))


def test_a_write_refused_through_the_namespace_leaves_no_file(items_repo):
    repo = items_repo
    before = table_files(repo)
    refused_lancedb_add(repo)
    assert table_files(repo) == before
    report = trimerge.Repository.open(repo.uri).fsck()
    assert report.ok and report.orphans == []


def test_gc_removes_the_files_an_older_version_left_and_fsck_reports_them(items_repo, monkeypatch):
    repo = items_repo
    monkeypatch.setattr(trimerge.TrimergeNamespace, "_discard_refused_write", lambda self, request: None)
    before, data = table_files(repo), every_ref(repo)
    refused_lancedb_add(repo)  # as trimerge before issue 39 left it: data, transaction and staging manifest
    left = sorted(set(table_files(repo)) - set(before))
    assert len(left) == 3 and any(".manifest-" in k for k in left) and any(k.endswith(".txn") for k in left)
    report = trimerge.Repository.open(repo.uri).fsck()
    assert report.ok and report.orphans == [f"tables/{k}" for k in left] and report.orphan_bytes > 0
    res = run_trimerge_subprocess("-C", repo.uri, "fsck", timeout=120)
    assert res.exit_code == 0 and "3 file(s) no version uses" in res.stdout, res.stdout

    assert repo.gc(retention="now").orphan_files_removed == 0  # just written: a writer may still be at work
    age(repo, left, 2 * 3600)
    assert repo.gc(retention="7d").orphan_files_removed == 0  # younger than the retention
    gc = repo.gc(retention="now")
    assert gc.orphan_files_removed == 3 and gc.bytes_freed >= sum(table_files(repo).get(k, 0) for k in left)
    assert sorted(set(table_files(repo)) - set(before)) == []
    fresh = trimerge.Repository.open(repo.uri)
    assert every_ref(fresh) == data
    report = fresh.fsck()
    assert report.ok and report.orphans == []


def test_gc_never_removes_a_file_a_version_names(items_repo):
    repo = items_repo
    repo.create_index("items", "id", "BTREE")
    repo.delete("items", "id = 2", branch="feat")
    merge("feat", "main", repo=repo)
    repo.compact("items")
    repo.tags.create("v2")
    data = every_ref(repo)
    assert repo.fsck().orphans == []
    age(repo, table_files(repo), 2 * 3600)  # everything old enough to go, were it unreferenced
    repo.gc(retention="now")
    fresh = trimerge.Repository.open(repo.uri)
    assert every_ref(fresh) == data
    report = fresh.fsck()
    assert report.ok and report.orphans == [], report.problems


def test_orphans_on_every_backend(repo_uri, monkeypatch):
    from trimerge.lineage.safety import gc as gc_module

    uri, options = repo_uri
    repo = trimerge.Repository.init(uri, storage_options=options)
    repo.create_table("t", pa.table({"id": pa.array([1, 2], pa.int64())}), "id")
    repo.upsert("t", pa.table({"id": pa.array([3], pa.int64())}))
    dataset = repo.resolve("main").tables["t"].dataset
    files = repo.table_store.files
    left = [f"{dataset}/_versions/18446744073709551611.manifest-0b7c1f3e-2a4d-4c5e-9f60-123456789abc",
            f"{dataset}/_transactions/2-0b7c1f3e-2a4d-4c5e-9f60-123456789abc.txn",
            f"{dataset}/data/0101-not-named-by-any-version.lance"]
    for key in left:
        files.create(key, b"left by a refused write")
    report = repo.fsck()
    assert report.ok and sorted(report.orphans) == sorted(f"tables/{k}" for k in left)
    assert repo.gc(retention="now").orphan_files_removed == 0  # younger than the grace
    monkeypatch.setattr(gc_module, "ORPHAN_GRACE_SECONDS", 0.0)
    assert repo.gc(retention="now").orphan_files_removed == 3
    assert repo.fsck().orphans == [] and ids(repo.read("t")) == [1, 2, 3]
    assert ids(repo.read("t", ref="main~1")) == [1, 2]
