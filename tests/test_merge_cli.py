"""The merge verbs of the CLI: ``trimerge merge``, ``revert`` and ``cherry-pick``.

Exit codes: 0 merged or up to date, 1 conflicts, 2 bad input or usage, 3 lost a race. Errors are
one line on stderr, never a traceback."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pyarrow as pa
import pytest
from click.testing import CliRunner

import trimerge
from trimerge.cli import cli
from trimerge.merge import merge
from trimerge.merge import plan as merge_plan
from trimerge.merge import publish as merge_publish

SRC, DST = "feature", "main"


class Run:
    def __init__(self, res):
        self.exit_code = res.exit_code
        self.stdout = res.stdout
        self.stderr = res.stderr
        self.exception = res.exception

    def json(self):
        return json.loads(self.stdout)


def run_cli(repo_path: Path | str, *args: str, env: dict | None = None) -> Run:
    res = CliRunner().invoke(cli, ["-C", str(repo_path), *[str(a) for a in args]], env=env, catch_exceptions=True)
    out = Run(res)
    if out.exception is not None and not isinstance(out.exception, SystemExit):
        raise AssertionError(f"trimerge {' '.join(map(str, args))} raised {out.exception!r}") from out.exception
    assert "Traceback" not in out.stderr and "Traceback" not in out.stdout
    return out


def tbl(**columns) -> pa.Table:
    return pa.table({k: list(v) for k, v in columns.items()})


def values(repo: trimerge.Repository, ref: str = DST, table: str = "t") -> dict:
    return {r["id"]: r["a"] for r in repo.read(table, ref).to_pylist()}


def make_repo(tmp_path: Path, conflict: bool) -> trimerge.Repository:
    """t(id, a, b) and u(id, a, b) on main; feature changes id 1 and 2; main changes id 3 and, for a
    conflict, id 1 as well."""
    repo = trimerge.Repository.init(tmp_path / "repo", actor="setup")
    base = tbl(id=[1, 2, 3], a=[1, 2, 3], b=["x", "y", "z"])
    with repo.transaction(message="base") as tx:
        tx.create_table("t", base, ["id"])
        tx.create_table("u", base, ["id"])
    repo.branches.create(SRC)
    with repo.transaction(SRC, message="feature work") as tx:
        tx.upsert("t", tbl(id=[1, 2], a=[10, 20], b=["x", "y"]))
        tx.upsert("u", tbl(id=[1], a=[10], b=["x"]))
    with repo.transaction(DST, message="main work") as tx:
        tx.upsert("t", tbl(id=[3], a=[30], b=["z"]))
        if conflict:
            tx.upsert("t", tbl(id=[1], a=[11], b=["x"]))
            tx.upsert("u", tbl(id=[1], a=[11], b=["x"]))
    repo.tags.create("v1", DST)
    return repo


@pytest.fixture
def clean_repo(tmp_path) -> trimerge.Repository:
    return make_repo(tmp_path, conflict=False)


@pytest.fixture
def conflict_repo(tmp_path) -> trimerge.Repository:
    return make_repo(tmp_path, conflict=True)


# ---------------------------------------------------------------------------------------------- exit 0
def test_merge_publishes_a_merge_commit_and_exits_0(clean_repo):
    repo = clean_repo
    dest_tip, src_tip = repo.resolve(DST).id, repo.resolve(SRC).id
    res = run_cli(repo.uri, "merge", SRC, "--into", DST, "--actor", "ci-bot")
    assert res.exit_code == 0, res.stderr
    assert "Merge 'feature' into 'main'" in res.stdout
    commit = repo.resolve(DST)
    assert commit.parents == (dest_tip, src_tip) and commit.actor == "ci-bot"
    assert values(repo) == {1: 10, 2: 20, 3: 30}


def test_merge_json_output(clean_repo):
    res = run_cli(clean_repo.uri, "merge", SRC, "--into", DST, "--json", "-m", "ship it")
    assert res.exit_code == 0
    doc = res.json()
    assert doc["status"] == "merged" and doc["commit"] == clean_repo.resolve(DST).id
    assert doc["source"]["ref"] == SRC and doc["dest"]["branch"] == DST
    assert clean_repo.resolve(DST).message == "ship it"
    assert doc["stats"]["t"]["rows_from_source"] == 2


def test_merge_defaults_to_the_current_branch(clean_repo):
    clean_repo.branches.create("other", from_ref=DST)
    clean_repo.switch("other")
    res = run_cli(clean_repo.uri, "merge", SRC)
    assert res.exit_code == 0
    assert values(clean_repo, "other") == {1: 10, 2: 20, 3: 30}
    assert values(clean_repo, DST) == {1: 1, 2: 2, 3: 30}


def test_up_to_date_exits_0_without_a_commit(clean_repo):
    tip = clean_repo.resolve(DST).id
    res = run_cli(clean_repo.uri, "merge", "v1", "--into", DST)
    assert res.exit_code == 0 and "up to date" in res.stdout.lower()
    assert run_cli(clean_repo.uri, "merge", DST, "--into", DST, "--json").json()["status"] == "up-to-date"
    assert clean_repo.resolve(DST).id == tip


def test_dry_run_exits_0_and_publishes_nothing(clean_repo):
    tip = clean_repo.resolve(DST).id
    res = run_cli(clean_repo.uri, "merge", SRC, "--into", DST, "--dry-run")
    assert res.exit_code == 0
    assert "dry run" in res.stdout
    assert clean_repo.resolve(DST).id == tip
    doc = run_cli(clean_repo.uri, "merge", SRC, "--into", DST, "--dry-run", "--json").json()
    assert doc["dry_run"] is True and doc["commit"] is None and doc["status"] == "merged"
    assert clean_repo.resolve(DST).id == tip


# ---------------------------------------------------------------------------------------------- exit 1
def test_conflicts_exit_1_and_publish_nothing(conflict_repo):
    tip = conflict_repo.resolve(DST).id
    res = run_cli(conflict_repo.uri, "merge", SRC, "--into", DST)
    assert res.exit_code == 1
    assert "CONFLICT row.update_update in t[id=1] columns a" in res.stdout
    assert "CONFLICT row.update_update in u[id=1] columns a" in res.stdout
    assert conflict_repo.resolve(DST).id == tip
    dry = run_cli(conflict_repo.uri, "merge", SRC, "--into", DST, "--dry-run", "--json")
    assert dry.exit_code == 1
    assert [(c["kind"], c["table"], c["key"]) for c in dry.json()["conflicts"]] == [
        ("row.update_update", "t", {"id": 1}), ("row.update_update", "u", {"id": 1})]
    assert conflict_repo.resolve(DST).id == tip


def test_granularity_row_turns_a_cell_merge_into_a_conflict(tmp_path):
    repo = make_repo(tmp_path, conflict=False)
    repo.upsert("t", tbl(id=[2], a=[2], b=["dest"]), branch=DST)  # feature changed a of id 2, main b
    res = run_cli(repo.uri, "merge", SRC, "--into", DST, "--granularity", "row", "--dry-run")
    assert res.exit_code == 1 and "row.update_update in t[id=2]" in res.stdout
    res = run_cli(repo.uri, "merge", SRC, "--into", DST, "--granularity", "table", "--dry-run")
    assert res.exit_code == 1 and "table.update_update" in res.stdout
    assert run_cli(repo.uri, "merge", SRC, "--into", DST, "--granularity", "cell").exit_code == 0
    assert {r["id"]: (r["a"], r["b"]) for r in repo.read("t", DST).to_pylist()}[2] == (20, "dest")


# ---------------------------------------------------------------------------------------------- strategies
def test_strategy_resolves_conflicts(conflict_repo):
    res = run_cli(conflict_repo.uri, "merge", SRC, "--into", DST, "--strategy", "source-wins")
    assert res.exit_code == 0
    assert values(conflict_repo) == {1: 10, 2: 20, 3: 30}
    assert values(conflict_repo, table="u")[1] == 10


def test_per_table_strategies(conflict_repo):
    res = run_cli(conflict_repo.uri, "merge", SRC, "--into", DST, "--strategy", "t=dest-wins",
                  "--strategy", "*=source-wins")
    assert res.exit_code == 0, res.stderr
    assert values(conflict_repo)[1] == 11
    assert values(conflict_repo, table="u")[1] == 10


def test_per_table_strategy_leaving_a_table_unresolved_exits_1(conflict_repo):
    res = run_cli(conflict_repo.uri, "merge", SRC, "--into", DST, "--strategy", "t=dest-wins", "--json")
    assert res.exit_code == 1
    assert {c["table"] for c in res.json()["conflicts"]} == {"u"}


# ---------------------------------------------------------------------------------------------- reports
def test_reports_to_files_and_stdout(conflict_repo, tmp_path):
    junit, sarif, md = tmp_path / "merge.xml", tmp_path / "merge.sarif", tmp_path / "summary.md"
    res = run_cli(conflict_repo.uri, "merge", SRC, "--into", DST, "--report", f"junit:{junit}",
                  "--report", f"sarif:{sarif}", "--report", f"markdown:{md}", "--report", "json")
    assert res.exit_code == 1
    report = res.json()  # only the stdout report goes to stdout
    assert report["format"] == "trimerge-merge-report" and len(report["conflicts"]) == 2
    root = ET.parse(junit).getroot()
    assert sum(1 for tc in root.iter("testcase") if tc.find("failure") is not None) == 2
    assert len(json.loads(sarif.read_text())["runs"][0]["results"]) == 2
    assert "| table |" in md.read_text()


def test_github_report_on_stdout(conflict_repo):
    res = run_cli(conflict_repo.uri, "merge", SRC, "--into", DST, "--report", "github")
    assert res.exit_code == 1
    errors = [line for line in res.stdout.splitlines() if line.startswith("::error title=")]
    assert len(errors) == 2


def test_reports_of_a_clean_merge(clean_repo, tmp_path):
    junit = tmp_path / "ok.xml"
    res = run_cli(clean_repo.uri, "merge", SRC, "--into", DST, "--report", f"junit:{junit}")
    assert res.exit_code == 0 and "Merge 'feature' into 'main'" in res.stdout
    root = ET.parse(junit).getroot()
    assert not any(tc.find("failure") is not None for tc in root.iter("testcase"))


def test_unwritable_report_path_is_bad_input_and_publishes_nothing(clean_repo, tmp_path):
    tip = clean_repo.resolve(DST).id
    res = run_cli(clean_repo.uri, "merge", SRC, "--into", DST, "--report", f"junit:{tmp_path}/no/such/dir/r.xml")
    assert res.exit_code == 2, (res.exit_code, res.stderr)
    assert clean_repo.resolve(DST).id == tip


# ---------------------------------------------------------------------------------------------- exit 2
@pytest.mark.parametrize("args", [
    ["merge", SRC, "--into", DST, "--strategy", "theirs"],
    ["merge", SRC, "--into", DST, "--strategy", "t=mine"],
    ["merge", SRC, "--into", DST, "--strategy", "source-wins", "--strategy", "dest-wins"],
    ["merge", SRC, "--into", DST, "--granularity", "column"],
    ["merge", SRC, "--into", DST, "--report", "xml"],
    ["merge", "no-such-ref", "--into", DST],
    ["merge", SRC, "--into", "no-such-branch"],
    ["merge", SRC, "--into", "v1"],
    ["merge", SRC, "--into", "main~1"],
    ["merge"],
    ["revert", "no-such-ref"],
    ["cherry-pick", SRC, "--into", "v1"],
], ids=lambda a: " ".join(a))
def test_bad_input_exits_2_with_one_line_and_publishes_nothing(conflict_repo, args):
    tips = {b.name: b.commit_id for b in conflict_repo.branches.list()}
    res = run_cli(conflict_repo.uri, *args)
    assert res.exit_code == 2, (res.stdout, res.stderr)
    assert res.stderr.strip(), "an error message on stderr"
    assert {b.name: b.commit_id for b in conflict_repo.branches.list()} == tips


def test_missing_repository_exits_2(tmp_path):
    res = run_cli(tmp_path / "nowhere", "merge", SRC, "--into", DST)
    assert res.exit_code == 2
    assert len([line for line in res.stderr.splitlines() if line.strip()]) == 1


# ---------------------------------------------------------------------------------------------- exit 3
def test_lost_race_exits_3(clean_repo, monkeypatch):
    original = merge_plan.ThreeWay.run
    writer = trimerge.Repository.open(clean_repo.uri)

    def run_then_move_dest(self):
        original(self)
        writer.upsert("t", tbl(id=[2], a=[200], b=["y"]), branch=DST)

    monkeypatch.setattr(merge_plan.ThreeWay, "run", run_then_move_dest)
    res = run_cli(clean_repo.uri, "merge", SRC, "--into", DST)
    assert res.exit_code == 3
    assert "retry" in res.stderr
    assert clean_repo.resolve(DST).message != "Merge 'feature' into 'main'"


# ---------------------------------------------------------------------------------------------- revert, cherry-pick
def test_revert_and_cherry_pick_commands(clean_repo):
    repo = clean_repo
    feature_commit = repo.resolve(SRC).id
    res = run_cli(repo.uri, "cherry-pick", feature_commit, "--into", DST)
    assert res.exit_code == 0, res.stderr
    picked = repo.resolve(DST)
    assert len(picked.parents) == 1 and values(repo) == {1: 10, 2: 20, 3: 30}
    res = run_cli(repo.uri, "revert", picked.id, "--into", DST, "--json")
    assert res.exit_code == 0
    assert res.json()["status"] == "merged"
    assert len(repo.resolve(DST).parents) == 1
    assert values(repo) == {1: 1, 2: 2, 3: 30}


def test_revert_conflict_exits_1(clean_repo):
    repo = clean_repo
    bad = repo.upsert("t", tbl(id=[3], a=[33], b=["z"]), branch=DST)
    repo.upsert("t", tbl(id=[3], a=[34], b=["z"]), branch=DST)
    tip = repo.resolve(DST).id
    res = run_cli(repo.uri, "revert", bad.id, "--into", DST, "--report", "github")
    assert res.exit_code == 1
    assert res.stdout.count("::error title=") == 1
    assert repo.resolve(DST).id == tip
    assert run_cli(repo.uri, "revert", bad.id, "--into", DST, "--strategy", "source-wins").exit_code == 0
    assert values(repo)[3] == 30


# ---------------------------------------------------------------------------------------------- real process
def test_console_script_exits_1_on_conflicts_without_traceback(conflict_repo, tmp_path):
    exe = shutil.which("trimerge")
    cmd = [exe] if exe else [sys.executable, "-m", "trimerge.cli"]
    env = {k: v for k, v in os.environ.items() if k != "TRIMERGE_DEBUG"}
    junit = tmp_path / "junit.xml"
    proc = subprocess.run([*cmd, "-C", conflict_repo.uri, "merge", SRC, "--into", DST, "--report", f"junit:{junit}"],
                          capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    assert "CONFLICT" in proc.stdout
    assert ET.parse(junit).getroot().iter("failure") is not None
    assert sum(1 for _ in ET.parse(junit).getroot().iter("failure")) == 2


def test_a_criss_cross_merge_says_it_merges_against_a_virtual_base(tmp_path):
    repo = trimerge.Repository.init(tmp_path / "repo", actor="t")
    repo.create_table("t", tbl(id=[1, 2, 3], a=[1, 2, 3], b=["x", "y", "z"]), ["id"])
    repo.branches.create(SRC, from_ref=DST)
    a1 = repo.upsert("t", tbl(id=[1], a=[10], b=["x"]), branch=DST)
    b1 = repo.upsert("t", tbl(id=[2], a=[20], b=["y"]), branch=SRC)
    merge(b1.id, DST, repo=repo)
    merge(a1.id, SRC, repo=repo)
    repo.upsert("t", tbl(id=[3], a=[30], b=["z"]), branch=SRC)
    res = run_cli(repo.uri, "merge", SRC, "--into", DST)
    assert res.exit_code == 0, res.stderr
    assert "2 merge bases" in res.stdout and "virtual base" in res.stdout
    doc = run_cli(repo.uri, "merge", SRC, "--into", DST, "--json").json()
    assert doc["status"] == "up-to-date"
    assert sorted(r["a"] for r in repo.read("t", DST).to_pylist()) == [10, 20, 30]
