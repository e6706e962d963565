"""Hostile input: every call ends in success or one clear TrimergeError, and a rejected call leaves
the repository byte for byte as it was. Hypothesis drives the API and the CLI (in-process and, for
raw argv bytes and closed pipes, real subprocesses)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pyarrow as pa
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import trimerge
from trimerge.cli import cli as trimerge_cli
from trimerge.lineage.errors import TrimergeError

from conftest import trimerge_command

EDGE_TEXT = ["", " ", ".", "..", "a`b", "a.b", "_rowid", "_rowaddr", "x" * 300, "é" * 200, "a\x00b", "a\udcffb",
             "main", "t", "id", "v", "main~1", "main^2", "HEAD", "id = ?", "id = $1", "(" * 200 + "true" + ")" * 200,
             " OR ".join(f"id = {i}" for i in range(1200)), "id = 1", "v = 'x'", "id > 'a'", "nosuch = 1",
             "'unterminated", "-5", "99999999999999999999", "t-01kzzzzzzzzzzzzzzzzzzzzzzz", "../../etc", "a/b",
             "__schema_apply_lock__", "repo::main::t"]
hostile_text = st.one_of(st.sampled_from(EDGE_TEXT), st.text(max_size=40),
                         st.text(st.characters(codec=None, exclude_categories=()), max_size=12))
values = st.one_of(st.none(), st.integers(-2**70, 2**70), st.text(max_size=8), st.floats(allow_nan=True),
                   st.booleans(), st.binary(max_size=4))


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def fresh_repo() -> trimerge.Repository:
    repo = trimerge.Repository.init(Path(tempfile.mkdtemp(prefix="hostile-")) / "repo")
    repo.create_table("t", pa.table({"id": pa.array([1, 2, 3], pa.int64()), "v": ["a", "b", None]}), "id")
    repo.branches.create("dev")
    repo.upsert("t", pa.table({"id": pa.array([4], pa.int64()), "v": ["d"]}), branch="dev")
    return repo


def column_table(names: list[str], rows: list) -> object:
    try:
        return pa.Table.from_arrays([pa.array([r for r in rows]) for _ in names], names=names)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError, ValueError):
        return {"id": rows}


def string_field(name: object) -> object:
    """A pyarrow field named ``name`` when pyarrow can make one, else ``name`` itself (hostile too)."""
    try:
        return pa.field(name, pa.string())
    except (TypeError, UnicodeError, ValueError):
        return name


def operations(repo: trimerge.Repository):
    return {
        "create_table": lambda a, b, c: repo.create_table(a, column_table([b, c], [1, 2]), b),
        "upsert": lambda a, b, c: repo.upsert(a, column_table(["id", b], [c, c]), branch=c if isinstance(c, str) else None),
        "append": lambda a, b, c: repo.append("t", column_table(["id", "v"], [a, b])),
        "delete": lambda a, b, c: repo.delete(a, b),
        "delete_keys": lambda a, b, c: repo.delete_keys("t", column_table(["id"], [a, b, c])),
        "read": lambda a, b, c: repo.read(a, ref=b if isinstance(b, str) else None, filter=c if isinstance(c, str) else None),
        "read_columns": lambda a, b, c: repo.read("t", columns=[a, b]),
        "entity": lambda a, b, c: repo.entity("t", a, ref=c if isinstance(c, str) else None),
        "resolve": lambda a, b, c: repo.resolve(a),
        "branch_create": lambda a, b, c: repo.branches.create(a, from_ref=b if isinstance(b, str) else None),
        "branch_delete": lambda a, b, c: repo.branches.delete(a),
        "tag_create": lambda a, b, c: repo.tags.create(a, ref=b if isinstance(b, str) else None),
        "add_columns": lambda a, b, c: repo.add_columns("t", [string_field(a)]),
        "alter_column": lambda a, b, c: repo.alter_column("t", a, pa.large_string()),
        "drop_columns": lambda a, b, c: repo.drop_columns("t", [a]),
        "switch": lambda a, b, c: repo.switch(a),
        "log": lambda a, b, c: repo.log(a, limit=3),
        "merge_base": lambda a, b, c: repo.merge_bases(a, b),
        "diff": lambda a, b, c: __import__("trimerge.diff", fromlist=["diff"]).diff(a, b, repo=repo).tables,
        "merge": lambda a, b, c: __import__("trimerge.merge", fromlist=["merge"]).merge(a, b, repo=repo),
    }


OPS = sorted(operations(None))


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_the_api_answers_hostile_input_with_a_trimerge_error_and_changes_nothing(data):
    repo = fresh_repo()
    root = Path(repo.uri)
    ops = operations(repo)
    for _ in range(3):
        op = data.draw(st.sampled_from(OPS), label="op")
        args = [data.draw(st.one_of(hostile_text, values), label=f"arg{i}") for i in range(3)]
        before = snapshot(root)
        try:
            ops[op](*args)
        except TrimergeError as exc:
            assert str(exc) and "\n" not in str(exc).strip(), f"{op}{args}: multi-line message {exc!r}"
            after = snapshot(root)
            changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
            assert not changed, f"{op}{args} was rejected ({exc}) but changed {changed[:5]}"


CLI_VERBS = [
    ["read", "{a}"], ["read", "t", "--where", "{a}"], ["read", "t", "--columns", "{a}"], ["read", "t", "--limit", "{a}"],
    ["read", "{a}", "--ref", "{b}"], ["delete", "t", "--where", "{a}"], ["log", "{a}"], ["log", "-n", "{a}"],
    ["rev-parse", "{a}"], ["merge-base", "{a}", "{b}"], ["branch", "create", "{a}"], ["branch", "create", "x", "--from", "{a}"],
    ["branch", "delete", "{a}"], ["tag", "create", "{a}", "{b}"], ["tag", "delete", "{a}"], ["switch", "{a}"],
    ["diff", "{a}", "{b}"], ["diff", "main", "dev", "--columns", "{a}"], ["diff", "main", "dev", "--limit", "{a}"],
    ["merge", "{a}", "--into", "{b}"], ["table", "create", "{a}", "{b}", "-k", "id"], ["table", "drop", "{a}"],
    ["load", "{a}", "{b}", "--mode", "upsert"], ["commit", "show", "{a}"], ["gc", "--retention", "{a}"],
    ["revert", "{a}"], ["cherry-pick", "{a}"], ["table", "list", "--ref", "{a}"],
]


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(verb=st.sampled_from(CLI_VERBS), a=hostile_text, b=hostile_text, as_json=st.booleans())
def test_the_cli_answers_hostile_input_with_exit_0_to_3_and_one_line(verb, a, b, as_json):
    repo = fresh_repo()
    root = Path(repo.uri)
    argv = ["-C", str(root), *(["--json"] if as_json else []), *[part.format(a=a, b=b) for part in verb]]
    before = snapshot(root)
    result = CliRunner().invoke(trimerge_cli, argv)
    code = result.exit_code
    assert code in (0, 1, 2, 3), f"trimerge {argv!r} -> {code}: {result.output[-500:]} {result.exception!r}"
    if code == 2:
        stderr = result.stderr.strip()
        assert "\n" not in stderr, f"trimerge {argv!r}: {stderr!r}"
        if as_json:
            assert json.loads(stderr)["exit_code"] == 2, stderr
        else:
            assert stderr.startswith("error:"), f"trimerge {argv!r}: {stderr!r}"
        after = snapshot(root)
        assert before == after, f"trimerge {argv!r} was rejected but changed the repository"


def _run(args: list, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([*trimerge_command(), *args], capture_output=True, timeout=120, **kwargs)


def test_raw_argv_bytes_that_are_not_utf8_are_one_clear_line(tmp_path):
    repo = fresh_repo()
    for args in ([b"rev-parse", b"ma\xffin"], [b"read", b"t\xfe"], [b"branch", b"create", b"b\xc3("],
                 [b"read", b"t", b"--where", b"v = '\xff'"], [b"-C", b"/tmp/\xff/nowhere", b"log"]):
        res = _run([b"-C", repo.uri.encode(), *args] if args[0] != b"-C" else args)
        assert res.returncode in (1, 2), (args, res.returncode, res.stderr)
        err = res.stderr.decode("utf-8", "replace").strip()
        assert err.startswith("error:") and "\n" not in err and "Traceback" not in err, (args, err)


def test_a_closed_pipe_ends_quietly_like_git(tmp_path):
    repo = fresh_repo()
    for i in range(200):
        repo.upsert("t", pa.table({"id": pa.array([i], pa.int64()), "v": [str(i)]}))
    for args in (["log"], ["read", "t", "--format", "csv"], ["commit", "list"]):
        for _ in range(3):
            shell = " ".join([*map(str, trimerge_command()), "-C", repo.uri, *args]) + " | head -c 10 >/dev/null"
            res = subprocess.run(["bash", "-o", "pipefail", "-c", shell], capture_output=True, text=True, timeout=120)
            assert res.stderr == "", (args, res.stderr)
            assert res.returncode in (0, 141), (args, res.returncode)


@pytest.mark.parametrize("code, lance", [(28, False), (13, False), (28, True)])  # ENOSPC, EACCES; as Lance says it
def test_environment_failures_are_one_clear_line(code, lance, monkeypatch, tmp_path):
    repo = fresh_repo()

    def fail(*args, **kwargs):
        if lance:
            raise OSError(f"LanceError(IO): Generic LocalFileSystem error: Unable to write /some/file: "
                          f"{os.strerror(code)} (os error {code})")
        raise OSError(code, os.strerror(code), "/some/file")

    from trimerge.lineage import transaction

    monkeypatch.setattr(transaction.Transaction, "upsert", fail)
    csv = tmp_path / "rows.csv"
    csv.write_text("id,v\n9,z\n")
    result = CliRunner().invoke(trimerge_cli, ["-C", repo.uri, "load", "t", str(csv), "--mode", "upsert"])
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("error: ") and "/some/file" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert sys.exc_info() == (None, None, None)
