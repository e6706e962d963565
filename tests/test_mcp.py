"""``trimerge mcp`` (issue 54, point 8): the repository as a Model Context Protocol server, tested
with the official SDK's own client — ``mcp.ClientSession`` over ``stdio_client`` (the server a
child process started as ``trimerge -C REPO mcp``) and over ``streamable_http_client`` against
``trimerge -C REPO mcp --http`` on 127.0.0.1 — on a real repository: every tool, then hostile
calls (missing and forged tokens, a read token writing, oversized limits, SQL and rows, bad refs,
SQL that writes or reads files), each one line and nothing changed."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import trimerge

mcp = pytest.importorskip("mcp")
pytest.importorskip("uvicorn")

from mcp import ClientSession, StdioServerParameters  # noqa: E402
from mcp.client.stdio import stdio_client  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402
from mcp.shared._httpx_utils import create_mcp_http_client  # noqa: E402

import anyio  # noqa: E402

WRITE, READ, FEAT = "w" * 8 + "-write-token", "r" * 8 + "-read-token-", "f" * 8 + "-feat-token-"
TOKENS = f"{WRITE} write * writer-bot\n{READ} read\n{FEAT} write feat* feat-bot\n"


def items(ids: list[int], suffix: str = "") -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "name": [f"item{i}{suffix}" for i in ids],
                     "price": pa.array([i * 1.5 for i in ids], pa.float64())})


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> trimerge.Repository:
    """main: items 1-4 (2 changed later); ``feat`` changes 3 and adds 5; ``target``: a branch to merge into."""
    repo = trimerge.Repository.init(str(tmp_path_factory.mktemp("mcp") / "repo"))
    repo.create_table("items", items([1, 2, 3, 4]), primary_key="id")
    repo.branches.create("feat", from_ref="main")
    repo.upsert("items", items([5]), branch="feat")
    repo.upsert("items", items([3], " feat"), branch="feat")
    repo.branches.create("target", from_ref="main")
    return repo


@pytest.fixture(scope="module")
def token_file(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("tokens") / "tokens"
    path.write_text(TOKENS)
    return str(path)


def state(repo: trimerge.Repository) -> dict[str, Any]:
    """What a refused call must leave alone: every branch tip and the merge requests."""
    return {"branches": {b.name: b.commit_id for b in repo.branches.list()},
            "requests": [r.to_json()["id"] for r in repo.requests.list()]}


def answer(result: Any) -> dict[str, Any]:
    assert not result.is_error, result.content[0].text
    return json.loads(result.content[0].text)


def refusal(result: Any) -> str:
    assert result.is_error, result.content[0].text[:300]
    text = result.content[0].text
    assert "\n" not in text and "Traceback" not in text, text
    return text


async def stdio_calls(repo_uri: str, calls: list, *, extra: list[str] = (),
                      env: dict[str, str] | None = None) -> list[Any]:
    """Run ``calls`` in one stdio session of ``trimerge -C REPO mcp``; the raw results (a callable
    among the calls is called in between, its value taken as its result)."""
    params = StdioServerParameters(command=sys.executable, args=["-m", "trimerge.cli", "-C", repo_uri, "mcp", *extra],
                                   env=env)
    out = []
    with tempfile.TemporaryFile("w+") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                out.append(await session.list_tools())
                for call in calls:
                    out.append(call() if callable(call) else await session.call_tool(*call))
        errlog.seek(0)
        assert "Traceback" not in errlog.read()
    return out


async def http_calls(url: str, token: str | None, calls: list[tuple[str, dict]]) -> list[Any]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    out = []
    async with create_mcp_http_client(headers=headers) as client:
        async with streamable_http_client(url, http_client=client) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                for name, args in calls:
                    out.append(await session.call_tool(name, args))
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def http_server(repo, token_file):
    """``trimerge -C REPO mcp --http`` on 127.0.0.1 with the token file; stopped with SIGTERM."""
    port = free_port()
    log = tempfile.TemporaryFile("w+")
    proc = subprocess.Popen([sys.executable, "-m", "trimerge.cli", "-C", repo.uri, "mcp", "--http", "--port", str(port),
                             "--token-file", token_file], stdout=subprocess.PIPE, stderr=log, text=True)
    line = proc.stdout.readline()
    url = f"http://127.0.0.1:{port}/mcp"
    if line.strip() != f"listening on {url}":
        proc.kill()
        log.seek(0)
        raise AssertionError(f"the server did not start: {line!r} {log.read()}")
    yield url
    proc.send_signal(signal.SIGTERM)
    code = proc.wait(timeout=20)
    log.seek(0)
    text = log.read()
    assert code == 0 and "Traceback" not in text and text.strip().endswith("trimerge mcp: stopped"), text


# ------------------------------------------------------------------------------------------ stdio
FLOW = [
    ("list_branches", {}),
    ("list_tables", {"ref": "feat"}),
    ("read_table", {"table": "items", "ref": "feat", "columns": ["id", "name"], "where": "id >= 3", "limit": 2}),
    ("diff", {"a": "main", "b": "feat"}),
    ("sql", {"query": "SELECT count(*) AS n, max(price) AS top FROM items"}),
    ("sql", {"query": "SELECT * FROM diff('main', 'feat', 'items') ORDER BY id"}),
    ("create_branch", {"name": "agent", "from_ref": "main"}),
    ("upsert_rows", {"table": "items", "branch": "agent",
                     "rows": [{"id": 9, "name": "item9", "price": 13.5}, {"id": 1, "name": "item1 agent"}]}),
    ("delete_rows", {"table": "items", "branch": "agent", "where": "id = 4"}),
    ("diff", {"a": "main...agent", "limit": 10}),
    ("open_request", {"source": "agent", "into": "main", "title": "agent change", "body": "from a test"}),
    ("merge", {"source": "agent", "into": "target", "message": "merge agent"}),
    ("read_table", {"table": "items", "ref": "target", "limit": 100}),
]

STOLEN = os.path.join(tempfile.gettempdir(), f"trimerge-mcp-test-{os.getpid()}.csv")
HOSTILE = [
    ("read_table", {"table": "items", "limit": 10**30}),
    ("read_table", {"table": "items", "limit": -1}),
    ("read_table", {"table": "items", "limit": "all"}),
    ("diff", {"a": "main", "b": "feat", "limit": 1_000_001}),
    ("sql", {"query": "SELECT " + "1+" * 15_000 + "1"}),
    ("read_table", {"table": "items", "where": "id = 1 OR " * 3_000 + "true"}),
    ("upsert_rows", {"table": "items", "branch": "feat", "rows": [{"id": 100 + i, "name": "x"} for i in range(10_001)]}),
    ("upsert_rows", {"table": "items", "branch": "feat", "rows": [{"id": 1, "name": "x" * 4_500_000}]}),
    ("upsert_rows", {"table": "items", "branch": "feat", "rows": [{"id": 1, "colour": "red"}]}),
    ("upsert_rows", {"table": "items", "branch": "feat", "rows": [{"id": "one"}]}),
    ("read_table", {"table": "items", "ref": "main~99"}),
    ("read_table", {"table": "items", "ref": "no such ref"}),
    ("read_table", {"table": "items", "ref": "nope"}),
    ("read_table", {"table": "/etc/passwd::main::items"}),
    ("list_tables", {"ref": "../../etc"}),
    ("create_branch", {"name": "bad..name"}),
    ("create_branch", {"name": "feat"}),
    ("sql", {"query": "DELETE FROM items"}),
    ("sql", {"query": "CREATE TABLE t AS SELECT 1"}),
    ("sql", {"query": "SELECT * FROM read_csv('/etc/passwd')"}),
    ("sql", {"query": "SELECT * FROM '/etc/passwd'"}),
    ("sql", {"query": f"COPY items TO '{STOLEN}'"}),
    ("sql", {"query": "ATTACH '/tmp/x.db' AS x"}),
    ("delete_rows", {"table": "items", "branch": "feat", "where": "id = 1; DROP TABLE items"}),
    ("merge", {"source": "nope", "into": "main"}),
    ("no_such_tool", {}),
]


@pytest.fixture(scope="module")
def stdio_session(repo) -> dict[str, Any]:
    """One stdio session (each costs a second or more to start): the hostile calls first, with the
    repository's state before and after them, then an agent's round through every tool."""
    out = anyio.run(stdio_calls, repo.uri, [lambda: state(repo), *HOSTILE, lambda: state(repo),
                                            lambda: repo.resolve("main").id, *FLOW])
    tools, before, *rest = out
    hostile, (after, main_before), flow = rest[:len(HOSTILE)], rest[len(HOSTILE):len(HOSTILE) + 2], \
        rest[len(HOSTILE) + 2:]
    return {"tools": tools, "before": before, "after": after, "hostile": hostile, "main_before": main_before,
            "flow": flow}


def test_stdio_every_tool_on_a_real_repository(repo, stdio_session):
    """One agent's round: look, branch, change, diff, query, open a request, merge."""
    tools, results, main_before = stdio_session["tools"], stdio_session["flow"], stdio_session["main_before"]
    assert {t.name for t in tools.tools} == {"list_branches", "list_tables", "read_table", "diff", "sql",
                                             "create_branch", "upsert_rows", "delete_rows", "merge", "open_request"}
    read_only = {t.name for t in tools.tools if t.annotations and t.annotations.read_only_hint}
    assert read_only == {"list_branches", "list_tables", "read_table", "diff", "sql"}
    (branches, tables, read, diff, count, sqldiff, created, upserted, deleted, diff2, request, merged,
     target) = [answer(r) for r in results]
    assert [b["name"] for b in branches["branches"]] == ["main", "feat", "target"]
    assert branches["current"] == "main"
    assert tables["tables"] == [{"name": "items", "primary_key": ["id"],
                                 "columns": {"id": "int64", "name": "string", "price": "double"}}]
    assert read["truncated"] is True and len(read["rows"]) == 2 and read["columns"] == ["id", "name"]
    assert all(r["id"] >= 3 for r in read["rows"])
    items_diff = diff["tables"]["items"]
    assert (items_diff["inserted"], items_diff["updated"], items_diff["deleted"]) == (1, 1, 0)
    assert {r["id"]: r["change"] for r in items_diff["rows"]} == {3: "update", 5: "insert"}
    assert count["rows"] == [{"n": 4, "top": 6.0}]
    assert [r["id"] for r in sqldiff["rows"]] == [3, 5]
    assert created["branch"] == "agent"
    assert upserted["branch"] == "agent" and deleted["branch"] == "agent"
    changes = {r["id"]: r["change"] for r in diff2["tables"]["items"]["rows"]}
    assert changes == {1: "update", 4: "delete", 9: "insert"}
    assert request["source"] == "agent" and request["into"] == "main" and request["state"] == "open"
    assert merged["status"] == "merged" and merged["commit"] == repo.resolve("target").id
    assert sorted(r["id"] for r in target["rows"]) == [1, 2, 3, 9]
    assert {r["id"]: r["name"] for r in target["rows"]}[1] == "item1 agent"
    assert repo.resolve("main").id == main_before  # the request is open: main untouched
    assert repo.read("items", "agent").num_rows == 4


def test_stdio_hostile_calls_are_one_line_and_change_nothing(stdio_session):
    results, calls = stdio_session["hostile"], HOSTILE
    lines = [refusal(r) for r in results]
    assert "maximum of 1,000 rows" in lines[0] and "read_table" in lines[0]
    assert "limit" in lines[1] and "limit" in lines[2]
    assert "maximum of 1,000 rows" in lines[3]
    assert "query is" in lines[4] and "limit is 20,000" in lines[4]
    assert "where is" in lines[5]
    assert "10,001 rows" in lines[6]
    assert "characters of JSON" in lines[7]
    assert "colour" in lines[8] and "'id'" in lines[9]
    assert all(t.startswith(name + ":") for t, (name, _) in zip(lines, calls))
    assert "addresses" in lines[13]
    assert stdio_session["after"] == stdio_session["before"]
    assert not os.path.exists(STOLEN)


def test_stdio_token_scopes(repo, token_file):
    """Over stdio the token comes from $TRIMERGE_MCP_TOKEN (or --token): a token for feat* sees and
    writes feat* only (its reads of other refs, SQL and writes elsewhere refused)."""
    before = state(repo)
    env = {**os.environ, "TRIMERGE_MCP_TOKEN": FEAT}
    calls = [("list_branches", {}), ("read_table", {"table": "items", "ref": "main"}),
             ("sql", {"query": "SELECT 1"}), ("delete_rows", {"table": "items", "branch": "main", "where": "id = 1"}),
             ("create_branch", {"name": "other"}), ("merge", {"source": "feat", "into": "target"}),
             ("read_table", {"table": "items", "ref": "feat~1", "limit": 1})]
    _, listed, *rest = anyio.run(lambda: stdio_calls(repo.uri, calls, extra=["--token-file", token_file], env=env))
    assert [b["name"] for b in answer(listed)["branches"]] == ["feat"]
    assert "may name only branches matching 'feat*'" in refusal(rest[0])
    assert "sql" in refusal(rest[1])
    assert all("may write only branches matching 'feat*'" in refusal(r) for r in rest[2:5])
    assert answer(rest[5])["rows"]
    assert state(repo) == before


def test_cli_refuses_bad_setups(repo, token_file):
    """One line, exit 2, before any client connects: no token file over HTTP, a token file without a
    token, a forged token, a token without a file, a token file that is not one, a missing repository."""
    from click.testing import CliRunner

    from trimerge.cli import cli

    bad_file = Path(token_file).with_name("bad-tokens")
    bad_file.write_text("short read\n")
    cases = [(["-C", repo.uri, "mcp", "--http"], "needs --token-file"),
             (["-C", repo.uri, "mcp", "--token-file", token_file], "no token"),
             (["-C", repo.uri, "mcp", "--token-file", token_file, "--token", "forged-token-0123456789"], "not one of"),
             (["-C", repo.uri, "mcp", "--token", READ], "needs --token-file"),
             (["-C", repo.uri, "mcp", "--http", "--token-file", token_file, "--token", READ], "for stdio"),
             (["-C", repo.uri, "mcp", "--token-file", str(bad_file), "--token", READ], "line 1"),
             (["-C", str(Path(token_file).parent / "no-repo"), "mcp"], "no-repo")]
    for args, words in cases:
        done = CliRunner().invoke(cli, args, env={"TRIMERGE_MCP_TOKEN": None})
        assert done.exit_code == 2, (args, done.output)
        assert words in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr


# ------------------------------------------------------------------------------------------- HTTP
def test_http_tools_with_a_write_token(repo, http_server):
    calls = [("list_tables", {}), ("read_table", {"table": "items", "ref": "feat", "limit": 10}),
             ("create_branch", {"name": "via-http", "from_ref": "feat"}),
             ("upsert_rows", {"table": "items", "branch": "via-http", "rows": [{"id": 7, "name": "seven", "price": 1}]}),
             ("merge", {"source": "via-http", "into": "feat", "dry_run": True})]
    tables, read, created, upserted, preview = [answer(r) for r in anyio.run(http_calls, http_server, WRITE, calls)]
    assert tables["tables"][0]["name"] == "items" and len(read["rows"]) == 5
    assert created["branch"] == "via-http"
    assert repo.resolve("via-http").actor == "writer-bot" and upserted["commit"] == repo.resolve("via-http").id
    assert preview["dry_run"] is True and preview["commit"] is None


def test_http_refuses_missing_forged_and_read_tokens(repo, http_server):
    import httpx

    before = state(repo)
    body = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}
    for headers in ({}, {"Authorization": "Bearer forged-token-0123456789"}, {"Authorization": f"Basic {WRITE}"},
                    {"Authorization": f"Bearer {WRITE}x"}):
        resp = httpx.post(http_server, json=body, headers={"Accept": "application/json, text/event-stream", **headers})
        assert resp.status_code == 401 and len(resp.json()["error"].splitlines()) == 1, resp.text
    with pytest.raises(BaseException):  # the SDK's client gets no session without a token
        anyio.run(http_calls, http_server, "forged-token-0123456789", [("list_branches", {})])
    writes = [("create_branch", {"name": "by-reader"}), ("delete_rows", {"table": "items", "branch": "feat",
                                                                        "where": "true"}),
              ("open_request", {"source": "feat", "into": "main", "title": "t"}),
              ("merge", {"source": "feat", "into": "target"})]
    results = anyio.run(http_calls, http_server, READ, [("read_table", {"table": "items", "limit": 1}), *writes])
    assert answer(results[0])["rows"]
    assert all("read-only token" in refusal(r) for r in results[1:])
    results = anyio.run(http_calls, http_server, WRITE, [
        ("read_table", {"table": "items", "limit": 5_000}),
        ("sql", {"query": "INSERT INTO items VALUES (99, 'x', 1.0)"}),
        ("upsert_rows", {"table": "items", "branch": "feat", "rows": [{"id": i} for i in range(10_001)]})])
    lines = [refusal(r) for r in results]
    assert "maximum" in lines[0] and "nothing may write" in lines[1] and "10,001 rows" in lines[2], lines
    from trimerge.agents.mcp_server import MAX_BODY

    huge = httpx.post(http_server, content=b"[" + b" " * MAX_BODY + b"]", timeout=60,
                      headers={"Authorization": f"Bearer {WRITE}", "Content-Type": "application/json",
                               "Accept": "application/json, text/event-stream"})
    assert huge.status_code == 413, huge.text[:300]
    assert state(repo) == before


def test_error_line_is_one_line_for_any_failure():
    from trimerge.agents.tools import AgentRefusal, error_line

    assert error_line(ValueError("boom\n  at somewhere")) == "internal error: ValueError: boom"
    assert error_line(trimerge.ConcurrentWriteError("lost a race")) == "lost a race (retry)"
    assert error_line(AgentRefusal("too big\nreally")) == "too big\\nreally"
    assert error_line(OSError(28, "No space left on device")).startswith("no space left")
