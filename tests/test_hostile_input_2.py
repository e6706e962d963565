"""Hostile input, round two (issue 23): deep filters, output paths, file encodings, unknown
strategy tables, output formats from extensions, ``status``/``show``, branch deletion with
children. The outcome rule of test_hostile_input.py holds throughout: success, or one line with
exit 1/2/3 and the repository byte for byte unchanged (and, for a refused output, nothing written).
"""

from __future__ import annotations

import codecs
import json
import os
import subprocess
from pathlib import Path

import lance
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import trimerge
from trimerge.cli import cli as trimerge_cli
from trimerge.lineage.errors import InvalidOperationError

from conftest import run_trimerge_subprocess
from test_hostile_input import fresh_repo, snapshot

ROOT = os.geteuid() == 0


def invoke(repo: trimerge.Repository, *args: str, as_json: bool = False):
    """Run the CLI in-process on ``repo``; the result (exit code, stdout, stderr)."""
    argv = ["-C", repo.uri, *(["--json"] if as_json else []), *map(str, args)]
    return CliRunner().invoke(trimerge_cli, argv)


def assert_refused(result, code: int = 2, fragment: str | None = None) -> str:
    """One line on stderr, exit ``code``; the line."""
    stderr = result.stderr.strip()
    assert result.exit_code == code, (result.exit_code, result.output, result.exception)
    assert "\n" not in stderr and stderr.startswith("error:"), stderr
    if fragment is not None:
        assert fragment in stderr, stderr
    return stderr


@pytest.fixture
def repo() -> trimerge.Repository:
    """``t`` (key id) on main; dev adds id 4."""
    return fresh_repo()


# ---------------------------------------------------------------------------------------------- 1. deep filters
@pytest.mark.parametrize("args", [
    ["read", "t", "--where", "id = " + "+".join(["1"] * 1000)],
    ["delete", "t", "--where", "id = " + "-".join(["1"] * 2000)],
    ["read", "t", "--where", "v = " + " || ".join(["'a'"] * 900)],
    ["delete", "t", "--where", "id = " + "coalesce(" * 20 + "id" + ", 1)" * 20],
    ["read", "t", "--where", "id = " + "CAST(" * 48 + "1" + " AS BIGINT)" * 48],
])
def test_the_issues_deep_filters_are_one_line_in_a_real_process(repo, args):
    before = snapshot(Path(repo.uri))
    res = run_trimerge_subprocess("-C", repo.uri, *args, timeout=60)
    assert res.exit_code == 2, (res.exit_code, res.stderr[-500:])
    assert res.stderr.startswith("error:") and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert snapshot(Path(repo.uri)) == before


def test_every_filter_entry_point_is_guarded(repo):
    deep = "id = " + "+".join(["1"] * 1000)
    before = snapshot(Path(repo.uri))
    for call in (lambda: repo.read("t", filter=deep), lambda: repo.delete("t", deep),
                 lambda: repo.search("t", vector=[0.0], where=deep)):
        with pytest.raises(InvalidOperationError, match="deep"):
            call()
    with pytest.raises(InvalidOperationError, match="deep"), repo.transaction("main") as tx:
        tx.delete("t", deep)
    assert snapshot(Path(repo.uri)) == before


# ---------------------------------------------------------------------------------------------- 2. output paths
# (args with {out}, the extension the output gets)
OUTPUT_COMMANDS = [
    (["read", "t", "-o", "{out}.csv"], ".csv"),
    (["read", "t", "-o", "{out}.lance"], ".lance"),
    (["diff", "main", "dev", "-o", "{out}.parquet"], ".parquet"),
    (["diff", "main", "dev", "--format", "jsonl", "-o", "{out}"], ""),
    (["diff", "main", "dev", "--stat", "-o", "{out}.json"], ".json"),
    (["show", "dev", "-o", "{out}.txt"], ".txt"),
    (["merge", "dev", "--conflicts", "{out}.csv"], ".csv"),
    (["merge", "dev", "--report", "json:{out}.json"], ".json"),
    (["merge", "dev", "--report", "junit:{out}"], ""),
]


@pytest.mark.parametrize("args, suffix", OUTPUT_COMMANDS)
@pytest.mark.parametrize("case", ["missing parent", "the wrong kind", "a file as parent"])
def test_every_output_is_checked_before_any_work(repo, tmp_path, args, suffix, case):
    if case == "missing parent":
        base = tmp_path / "no-such-folder" / "out"
    elif case == "a file as parent":
        (tmp_path / "a-file").write_text("x")
        base = tmp_path / "a-file" / "out"
    else:  # the wrong kind of entry stands where the output goes
        base = tmp_path / "taken"
        taken = Path(f"{base}{suffix}")
        if suffix == ".lance":
            taken.write_text("x")  # a Lance dataset is a directory: a file is the wrong kind
        else:
            taken.mkdir()
    before_repo, before_tmp = snapshot(Path(repo.uri)), sorted(tmp_path.rglob("*"))
    line = assert_refused(invoke(repo, *[a.replace("{out}", str(base)) for a in args]), 2)
    assert "cannot write" in line, line
    assert snapshot(Path(repo.uri)) == before_repo  # no merge ran, nothing published
    assert sorted(tmp_path.rglob("*")) == before_tmp  # nothing written


@pytest.mark.skipif(ROOT, reason="root writes anywhere")
def test_an_unwritable_folder_is_refused_up_front(repo, tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        for args in (["read", "t", "-o", locked / "x.csv"], ["merge", "dev", "--conflicts", locked / "c.csv"],
                     ["diff", "main", "dev", "-o", locked / "d.parquet"]):
            before = snapshot(Path(repo.uri))
            assert "permission denied" in assert_refused(invoke(repo, *args), 2)
            assert snapshot(Path(repo.uri)) == before
    finally:
        locked.chmod(0o700)


@pytest.fixture
def read_only_mount(tmp_path):
    """A read-only tmpfs (needs the right to mount: root in a container that allows it)."""
    point = tmp_path / "ro"
    point.mkdir()
    try:
        subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(point)], check=True,
                       capture_output=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        pytest.skip("cannot mount a read-only file system here")
    try:
        yield point
    finally:
        subprocess.run(["umount", str(point)], capture_output=True, timeout=30)


def test_a_read_only_file_system_is_refused_up_front(repo, read_only_mount):
    before = snapshot(Path(repo.uri))
    for args in (["read", "t", "-o", read_only_mount / "x.parquet"], ["merge", "dev", "--report",
                                                                     f"json:{read_only_mount / 'r.json'}"],
                 ["diff", "main", "dev", "-o", read_only_mount / "d.lance"]):
        assert "read-only file system" in assert_refused(invoke(repo, *args), 2)
    assert snapshot(Path(repo.uri)) == before


def test_a_path_no_check_can_judge_is_still_one_line(repo):
    res = run_trimerge_subprocess("-C", repo.uri, "read", "t", "-o", "/proc/trimerge-test.csv")
    assert res.exit_code == 2 and len(res.stderr.strip().splitlines()) == 1, res.stderr


# ---------------------------------------------------------------------------------------------- 3. input files
TEXT = "id,v\n7,é\n8,ü\n"


def encoded(encoding: str, bom: bool, text: str = TEXT) -> bytes:
    data = text.encode(encoding)
    marks = {"utf-16-le": codecs.BOM_UTF16_LE, "utf-16-be": codecs.BOM_UTF16_BE, "utf-32-le": codecs.BOM_UTF32_LE,
             "utf-32-be": codecs.BOM_UTF32_BE, "utf-8": codecs.BOM_UTF8}
    return (marks.get(encoding, b"") if bom else b"") + data


@pytest.mark.parametrize("encoding", ["utf-8", "utf-16-le", "utf-16-be", "utf-32-le", "utf-32-be"])
@pytest.mark.parametrize("suffix", [".csv", ".jsonl"])
def test_a_byte_order_mark_is_decoded(repo, tmp_path, encoding, suffix):
    text = TEXT if suffix == ".csv" else '{"id": 7, "v": "é"}\n{"id": 8, "v": "ü"}\n'
    path = tmp_path / f"rows{suffix}"
    path.write_bytes(encoded(encoding, True, text))
    res = invoke(repo, "load", "t", path, "--mode", "upsert")
    assert res.exit_code == 0, res.output
    assert {r["id"]: r["v"] for r in repo.read("t").to_pylist()}[7] == "é"
    res = invoke(repo, "table", "create", "u", path, "-k", "id")
    assert res.exit_code == 0, res.output
    assert repo.read("u").column_names == ["id", "v"]


@pytest.mark.parametrize("data, fragment", [
    (TEXT.encode("utf-16-le"), "UTF-16-LE text without a byte order mark"),
    (TEXT.encode("utf-32-be"), "UTF-32-BE text without a byte order mark"),
    (TEXT.encode("latin-1"), "byte 0xe9 at offset 7 (line 2)"),
    (TEXT.encode("utf-8")[:8], "ends in the middle of a character"),
    (encoded("utf-16-le", True)[:-1], "ends in the middle of a character"),
    (b"i\x00d,v\n1,a\n", "NUL"),
    (b"", "empty"),
])
def test_undecodable_files_are_one_line_naming_the_file(repo, tmp_path, data, fragment):
    path = tmp_path / "rows.csv"
    path.write_bytes(data)
    before = snapshot(Path(repo.uri))
    for args in (["load", "t", path], ["table", "create", "u", path, "-k", "id"]):
        line = assert_refused(invoke(repo, *args), 2, str(path))
        assert fragment in line, line
    assert snapshot(Path(repo.uri)) == before


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(text=st.text(st.characters(codec="utf-8", exclude_characters="\r"), max_size=40),
       encoding=st.sampled_from(["utf-8", "utf-16-le", "utf-16-be", "utf-32-le", "utf-32-be", "latin-1"]),
       bom=st.booleans(), cut=st.integers(0, 3), suffix=st.sampled_from([".csv", ".jsonl", ".json"]))
def test_any_file_content_is_loaded_or_refused_in_one_line(text, encoding, bom, cut, suffix):
    repo = fresh_repo()
    try:
        data = encoded(encoding, bom, "id,v\n1," + text + "\n")
    except UnicodeEncodeError:
        data = text.encode("utf-8", "replace")
    data = data[:len(data) - cut] if cut else data
    path = Path(repo.uri).parent / f"rows{suffix}"
    path.write_bytes(data)
    before = snapshot(Path(repo.uri))
    res = invoke(repo, "load", "t", path, "--mode", "upsert")
    assert res.exit_code in (0, 1, 2, 3), (res.exit_code, res.output, res.exception)
    if res.exit_code:
        assert_refused(res, res.exit_code)
        assert snapshot(Path(repo.uri)) == before


def test_a_panic_no_input_explains_is_an_internal_error(repo, monkeypatch):
    class PanicException(BaseException):  # what pyo3 raises for a Rust panic
        pass

    def panics(*args, **kwargs):
        raise PanicException("called `Option::unwrap()` on a `None` value")

    monkeypatch.setattr(trimerge.Repository, "resolve", panics)
    res = invoke(repo, "rev-parse", "main")
    assert res.exit_code == 4, res.output
    assert res.stderr.startswith("internal error: PanicException") and len(res.stderr.strip().splitlines()) == 1


# ---------------------------------------------------------------------------------------------- 4. strategies
@pytest.mark.parametrize("source, into", [("main", "dev"), ("dev", "main")])
def test_an_unknown_strategy_table_is_refused_with_or_without_work(repo, source, into):
    before = snapshot(Path(repo.uri))
    res = invoke(repo, "merge", source, "--into", into, "--strategy", "nosuch=source-wins", "--dry-run")
    assert "nosuch" in assert_refused(res, 2)
    assert snapshot(Path(repo.uri)) == before


# ---------------------------------------------------------------------------------------------- 5. formats from extensions
def test_read_writes_the_format_its_file_names(repo, tmp_path):
    expected = repo.read("t").sort_by("id").to_pylist()
    for suffix in (".parquet", ".jsonl", ".json", ".csv", ".lance", ".txt", ""):
        out = tmp_path / f"rows{suffix}"
        assert invoke(repo, "read", "t", "-o", out).exit_code == 0
        if suffix == ".parquet":
            assert pq.read_table(out).sort_by("id").to_pylist() == expected
        elif suffix == ".jsonl":
            written = [json.loads(line) for line in out.read_text().splitlines()]
            assert sorted(written, key=lambda r: r["id"]) == expected
        elif suffix == ".json":
            assert sorted(json.loads(out.read_text()), key=lambda r: r["id"]) == expected
        elif suffix == ".csv":
            assert out.read_text().splitlines()[0] == "id,v"
        elif suffix == ".lance":
            assert lance.dataset(str(out)).to_table().sort_by("id").to_pylist() == expected
        else:
            assert "shape: (3, 2)" in out.read_text()  # the text rendering


def test_diff_writes_the_format_its_file_names(repo, tmp_path):
    rows = invoke(repo, "diff", "main", "dev", "--format", "jsonl").stdout
    for suffix in (".parquet", ".jsonl", ".json", ".lance", ".txt"):
        out = tmp_path / f"d{suffix}"
        assert invoke(repo, "diff", "main", "dev", "--engine", "local", "-o", out).exit_code == 0
        if suffix == ".parquet":  # the issue: this was the text rendering
            assert pq.read_table(out).to_pylist()[0]["change"] == "insert"
        elif suffix == ".jsonl":
            assert out.read_text() == rows
        elif suffix == ".json":
            assert json.loads(out.read_text())["tables"]["t"]["rows"][0]["change"] == "insert"
        elif suffix == ".lance":
            assert lance.dataset(str(out)).to_table().num_rows == 1
        else:
            assert out.read_text().startswith("=== t (modified: +1 -0 ~0)")
    stat = tmp_path / "stat.csv"
    assert invoke(repo, "diff", "main", "dev", "--stat", "-o", stat).exit_code == 0
    assert stat.read_text().startswith("table,status,inserted")


@pytest.mark.parametrize("args, fragment", [
    (["read", "t", "--format", "csv", "-o", "{tmp}/x.parquet"], "contradicts"),
    (["read", "t", "-o", "{tmp}/x.xlsx"], "'.xlsx'"),
    (["read", "t", "--format", "parquet"], "needs -o"),
    (["diff", "main", "dev", "--format", "json", "-o", "{tmp}/x.jsonl"], "contradicts"),
    (["diff", "main", "dev", "-o", "{tmp}/x.csv"], "CSV cannot hold"),
    (["diff", "main", "dev", "-o", "{tmp}/x.tar.gz"], "'.gz'"),
    (["show", "dev", "--rows", "-o", "{tmp}/x.csv"], "CSV cannot hold"),
    (["show", "dev", "--rows", "--stat"], "cannot be combined"),
])
def test_formats_that_contradict_the_file_are_refused_up_front(repo, tmp_path, args, fragment):
    before = snapshot(Path(repo.uri))
    assert_refused(invoke(repo, *[a.replace("{tmp}", str(tmp_path)) for a in args]), 2, fragment)
    assert list(tmp_path.iterdir()) == [] and snapshot(Path(repo.uri)) == before


# ---------------------------------------------------------------------------------------------- 6. status and show
def test_status_names_the_branch_its_tip_and_what_is_in_flight(repo):
    root = Path(repo.uri)
    res = invoke(repo, "status")
    assert res.exit_code == 0
    tip = repo.resolve("main")
    assert res.stdout.splitlines() == ["On branch main", f"Tip {repo.short_id(tip.id)} {tip.message}",
                                       "No write in flight, nothing to recover"]
    lease = repo.branch_lease("dev", "upsert t")
    assert lease.try_acquire()
    try:
        state = json.loads(invoke(repo, "status", as_json=True).stdout)
        assert [(w["lock"], w["purpose"], w["pid"]) for w in state["in_flight"]] == [("dev", "upsert t", os.getpid())]
        assert "Write in flight: dev held by pid" in invoke(repo, "status").stdout
    finally:
        lease.release()
    # An interrupted write: an intent whose branch no live writer holds. status only reports it.
    repo.docs.create("intents/01JTESTINTENT0000000000000.json",
                     {"ulid": "01JTESTINTENT0000000000000", "branch": "dev", "lock_token": "gone", "touched": []})
    before = snapshot(root)
    out = invoke(repo, "status").stdout
    assert "Recovery pending: write 01JTESTINTENT0000000000000 on branch dev" in out
    assert snapshot(root) == before  # read-only: the next write repairs it, not status


def test_show_is_commit_show_and_the_diff_against_the_first_parent(repo, tmp_path):
    tip = repo.resolve("dev")
    res = invoke(repo, "show", "dev")
    assert res.exit_code == 0
    head = invoke(repo, "commit", "show", "dev").stdout
    assert res.stdout.startswith(head)
    assert res.stdout[len(head):].strip() == "t                    modified  +1 -0 ~0 (0 cells)"
    rows = invoke(repo, "show", "dev", "--rows").stdout
    assert "=== t (modified: +1 -0 ~0)" in rows and "+ id=4" in rows
    doc = json.loads(invoke(repo, "show", "dev", as_json=True).stdout)
    assert doc["commit"]["id"] == tip.id and doc["first_parent"] == tip.parents[0]
    assert [r["table"] for r in doc["diff"] if r["status"] != "unchanged"] == ["t"]
    assert json.loads(invoke(repo, "show", "dev", "--format", "json", "--name-only").stdout)["diff"] == ["t"]
    assert invoke(repo, "show", "dev", "--rows", "-o", tmp_path / "r.parquet").exit_code == 0
    assert pq.read_table(tmp_path / "r.parquet").num_rows == 1
    root = repo.log("main")[-1]
    assert "(root commit" in invoke(repo, "show", root.id).stdout
    assert_refused(invoke(repo, "show", "nosuch"), 2)


# ---------------------------------------------------------------------------------------------- 7. branches with children
def test_a_branch_with_children_is_deleted_only_with_force(repo):
    invoke(repo, "branch", "create", "kid", "--from", "dev")
    invoke(repo, "branch", "create", "kid2", "--from", "dev")
    before = snapshot(Path(repo.uri))
    line = assert_refused(invoke(repo, "branch", "delete", "dev"), 2, "'kid', 'kid2' were created from it")
    assert "-D dev" in line and snapshot(Path(repo.uri)) == before
    listed = invoke(repo, "branch", "list", "-v").stdout.splitlines()
    assert any(line.split()[0] == "kid" and line.endswith("from dev") for line in listed), listed
    assert invoke(repo, "branch", "delete", "-D", "dev").exit_code == 0
    listed = invoke(repo, "branch", "list", "-v").stdout
    assert "from dev (deleted)" in listed
    repo.upsert("t", pa.table({"id": pa.array([5], pa.int64()), "v": ["e"]}), branch="kid")  # kids keep working
    assert sorted(repo.read("t", ref="kid")["id"].to_pylist()) == [1, 2, 3, 4, 5]
    rows = json.loads(invoke(repo, "branch", "list", as_json=True).stdout)
    assert {r["name"]: r["parent"] for r in rows}["kid2"] == "dev"
    # A branch of the same name created later is not the kids' parent.
    invoke(repo, "branch", "create", "dev", "--from", "main")
    assert repo.branches.children("dev") == []
    assert invoke(repo, "branch", "delete", "dev").exit_code == 0



@pytest.mark.spark
def test_diff_on_spark_writes_the_format_its_file_names(repo, tmp_path, spark):
    from trimerge.diff import diff

    local = diff("main", "dev", repo=repo, engine="local").tables["t"].rows().to_pylist()
    for suffix in (".parquet", ".jsonl", ".json", ".lance"):
        out = tmp_path / f"d{suffix}"
        res = invoke(repo, "diff", "main", "dev", "--engine", "spark", "-o", out)
        assert res.exit_code == 0, res.output
        if suffix == ".parquet":  # written by the executors: a Parquet directory
            assert pq.read_table(out).to_pylist() == local
        elif suffix == ".jsonl":
            assert [json.loads(line)["id"] for line in out.read_text().splitlines()] == [r["id"] for r in local]
        elif suffix == ".json":
            assert json.loads(out.read_text())["tables"]["t"]["rows"] == local
        else:
            assert lance.dataset(str(out)).to_table().num_rows == len(local)


# ---------------------------------------------------------------------------------------------- hostile paths, new verbs
HOSTILE_PATHS = ["", ".", "..", "/", "/nonexistent/x.csv", "/proc/x.csv", "/dev/null", "x" * 300 + ".csv",
                 "a\x00b.csv", "out.parquet", "out.lance", "out.xlsx", "out.txt", "dir/", "~/nope/x.json", "é.csv",
                 "x.csv/", "out", "-", "a b.jsonl", "out.JSON", "..csv", "sub/../out.csv"]
PATH_VERBS = [["read", "t", "-o", "{a}"], ["diff", "main", "dev", "-o", "{a}"], ["show", "dev", "-o", "{a}"],
              ["diff", "main", "dev", "--stat", "-o", "{a}"], ["merge", "dev", "--conflicts", "{a}"],
              ["merge", "dev", "--report", "json:{a}"], ["read", "t", "--format", "csv", "-o", "{a}"],
              ["show", "{a}"], ["status"], ["branch", "list", "-v"], ["branch", "delete", "{a}"],
              ["merge", "{a}", "--strategy", "{a}=source-wins", "--dry-run"]]


@settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(verb=st.sampled_from(PATH_VERBS), a=st.one_of(st.sampled_from(HOSTILE_PATHS), st.text(max_size=20)),
       as_json=st.booleans())
def test_path_options_and_new_verbs_answer_hostile_input_in_one_line(verb, a, as_json, tmp_path_factory):
    repo = fresh_repo()
    cwd = tmp_path_factory.mktemp("cwd")
    before = snapshot(Path(repo.uri))
    old = os.getcwd()
    os.chdir(cwd)  # relative outputs land here, never in the project
    try:
        res = invoke(repo, *[part.replace("{a}", a) for part in verb], as_json=as_json)
    finally:
        os.chdir(old)
    assert res.exit_code in (0, 1, 2, 3), (verb, a, res.exit_code, res.output, res.exception)
    if res.exit_code:
        stderr = res.stderr.strip()
        assert "\n" not in stderr and "Traceback" not in stderr, (verb, a, stderr)
        if not as_json:
            assert stderr.startswith("error:"), (verb, a, stderr)
        if res.exit_code == 2:
            assert snapshot(Path(repo.uri)) == before, (verb, a)


@pytest.mark.parametrize("verb", [["merge", "dev", "--report", "json:{a}"], ["read", "t", "-o", "{a}"]])
def test_a_file_output_ending_in_a_slash_is_refused_before_any_work(verb, tmp_path):
    """``dir/`` names a folder: refused up front (pathlib would drop the slash, open() would not)."""
    repo = fresh_repo()
    before = snapshot(Path(repo.uri))
    old = os.getcwd()
    os.chdir(tmp_path)
    try:
        res = invoke(repo, *[part.replace("{a}", "out/") for part in verb])
    finally:
        os.chdir(old)
    assert res.exit_code == 2 and "cannot end with '/'" in res.stderr, (res.exit_code, res.output)
    assert snapshot(Path(repo.uri)) == before and not (tmp_path / "out").exists()
