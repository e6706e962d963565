"""Hostile requests to ``trimerge serve`` (issue 50, point 3), each against a real server process
on 127.0.0.1 (``trimerge -C REPO serve``, stopped with SIGTERM):

* every expression a query sends — the filter, each column alias (a projection) — goes through the
  filter guard: ``{"x": "id+id+…"}`` of 3,000 terms from a read token no longer reaches Lance (it
  crashed the server), ``{"x": "id; select 1"}`` is refused, not cut at the ``;``; expressions at
  every limit run in Lance without crashing or taking long;
* malformed and deeply nested bodies are 400 with the spec's error body (a 40 KB nested body was a
  500);
* every path, ``%0A`` included, answers the spec's error body and logs one line;
* only the spec's methods are served: ``DELETE …/describe`` is 405 with ``Allow: POST`` (it was
  answered as the operation), for every route of the spec document;
* the loopback rule checks the addresses a host resolves to (``--host localhost`` is not trusted
  by its name);
* a token file's ACTOR is plain printable text.

And clients nobody here wrote (LanceDB pushing its queries down, pylance's REST client) still work.
"""

from __future__ import annotations

import http.client
import ipaddress
import json
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import lance_namespace as ln
import pyarrow as pa
import pytest
import yaml

import trimerge

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

from test_filter_limits import (CHAIN_OPS, MAX_FILTER_DEPTH, MAX_FILTER_NESTING, MAX_FILTER_TERMS,  # noqa: E402
                                NESTINGS, chain_filter, deepest, nest_filter)
from test_serve import READ, TOKENS, WRITE, Server, build, client, free_port, started  # noqa: E402

SPEC = Path(__file__).resolve().parent.parent / "fixtures" / "lance-namespace" / "spec.yaml"
REQUEST_LINE = re.compile(r"\d{4}-\d\d-\d\dT[\d:]+Z 127\.0\.0\.1 [A-Z]+ /\S* \d{3} [\d.]+ms \S+")
QUERY = {"k": 100, "vector": {}}  # the fields a QueryTableRequest requires (a scan: no vector)


def probe_table(n: int = 50) -> pa.Table:
    """The columns the filter-limit expressions (test_filter_limits) name."""
    return pa.table({"id": pa.array(range(n), pa.int64()), "f": [i / 3 for i in range(n)],
                     "v": [str(i) for i in range(n)], "b": [i % 2 == 0 for i in range(n)],
                     "tags": [["a"] if i % 2 else ["b"] for i in range(n)]})


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> trimerge.Repository:
    repo = build(str(tmp_path_factory.mktemp("hostile") / "repo"))
    repo.create_table("probe", probe_table(), primary_key="id")
    return repo


@pytest.fixture(scope="module")
def servers(repo, tmp_path_factory):
    """An open server (no tokens) and one with tokens; both must stop cleanly, every line of their
    logs a request line."""
    tokens = tmp_path_factory.mktemp("tokens") / "tokens"
    tokens.write_text(TOKENS)
    pair = started(Server(repo.uri), Server(repo.uri, "--token-file", str(tokens)))
    yield pair
    stopped = [one.stop() for one in pair]
    for code, log in stopped:
        assert code == 0 and "Traceback" not in log, log[-3000:]
        lines = log.strip().splitlines()
        assert lines[-1] == "trimerge serve: stopped", lines[-3:]
        odd = [line for line in lines[:-1] if not REQUEST_LINE.fullmatch(line) and "WARN" not in line]
        assert not odd, odd[:5]


def send(server: Server, method: str, path: str, body: object = None, *, raw: bytes | None = None,
         token: str | None = None) -> tuple[int, dict[str, str], bytes]:
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=120)
    try:
        conn.request(method, path, body=data, headers={"Authorization": f"Bearer {token}"} if token else {})
        response = conn.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        conn.close()


def error_of(status: int, headers: dict[str, str], content: bytes, head: bool = False) -> dict:
    """The spec's ErrorResponse of a 4xx: ``{"error": one line, "code": N, "detail": TYPE}``."""
    assert 400 <= status < 500, (status, content[:500])
    assert headers.get("content-type", "").startswith("application/json"), (headers, content[:300])
    if head:
        return {}
    body = json.loads(content)
    assert set(body) == {"error", "code", "detail"}, body
    assert isinstance(body["error"], str) and body["error"] and "\n" not in body["error"], body
    assert body["code"] in {int(c) for c in ln.ErrorCode} and isinstance(body["detail"], str), body
    return body


def refused(server: Server, path: str, body: object, token: str | None = None, *, status: int = 400,
            code: int = 13) -> str:
    got = send(server, "POST", path, body, token=token)
    answer = error_of(*got)
    assert (got[0], answer["code"]) == (status, code), (path, str(body)[:300], answer)
    return answer["error"]


def arrow_rows(content: bytes) -> list[dict]:
    return pa.ipc.open_file(pa.py_buffer(content)).read_all().to_pylist()


def alive(server: Server, token: str | None = None) -> None:
    assert server.proc.poll() is None, server.stderr()[-3000:]
    status, _, content = send(server, "POST", "/v1/table/items/describe", {"id": ["items"]}, token=token)
    assert status == 200 and json.loads(content)["version"] > 0


def request_lines(server: Server) -> list[str]:
    return [line for line in server.stderr().splitlines() if REQUEST_LINE.fullmatch(line)]


# ---------------------------------------------------------------------------------------------- expressions
def aliased(expression: object, table: str = "items") -> dict:
    return {"id": [table], **QUERY, "columns": {"column_aliases": {"x": expression}}}


EXPRESSION_CASES = [  # (body, words in the refusal)
    (aliased(" + ".join(["id"] * 3000)), "3,001 operators deep (the limit is 128)"),  # the crash
    (aliased("+".join(["id"] * 3000)), "operators deep"),
    (aliased("id; select 1"), "one SQL expression, not statements"),  # answered 200 before
    (aliased("id garbage"), "not one SQL expression"),
    (aliased("id, name"), "one SQL expression"),
    (aliased("(" * 40 + "id" + ")" * 40), "nests 40 levels"),
    (aliased("CAST(" * 60 + "id" + " AS BIGINT)" * 60), "nests"),
    (aliased("coalesce(" * 12 + "id" + ", 1)" * 12), "coalesce"),
    (aliased(""), "at least 1 character"),
    (aliased("nope + 1"), "nope"),
    (aliased("id = ?"), "placeholders"),
    (aliased("'unterminated"), "unterminated"),
    ({"id": ["items"], **QUERY, "columns": {"column_aliases": {f"x{i}": " + ".join(["id"] * 120)
                                                              for i in range(90)}}}, "together"),
    ({"id": ["items"], **QUERY, "filter": " + ".join(["id"] * 3000) + " > 0"}, "operators deep"),
    ({"id": ["items"], **QUERY, "filter": "id > 0; select 1"}, "one SQL expression"),
    ({"id": ["items"], **QUERY, "columns": {"column_names": ["id\x00"]}}, "printable"),
    ({"id": ["items"], **QUERY, "columns": {"column_names": ["x" * 2000]}}, "1 to 1024"),
    ({"id": ["items"], **QUERY, "columns": {"column_names": ["id"] * 2000}}, "2,000 columns"),
    ({"id": ["items"], **QUERY, "columns": {"column_aliases": {"\x1b[31m": "id"}}}, "printable"),
    ({"id": ["items"], "k": 3, "vector": {"single_vector": [1.0, 0.5]}, "vector_column": "v\x07"}, "printable"),
    ({"id": ["items"], **QUERY, "offset": 2**70}, "offset"),
    ({"id": ["items"], "k": 3, "vector": {"single_vector": [1.0, 0.5]}, "ef": 2**40}, "ef must be"),
    ({"id": ["items"], "k": 3, "vector": {"single_vector": [1.0, 0.5]}, "refine_factor": 2**33}, "refine_factor"),
    ({"id": ["items"], "k": -1, "vector": {}}, "greater than or equal to 0"),
]


@pytest.mark.slow
def test_every_expression_a_query_sends_is_checked_like_a_filter(servers, repo):
    authed = servers[1]
    for body, words in EXPRESSION_CASES:
        message = refused(authed, "/v1/table/items/query", body, token=READ)  # a read token is enough
        assert words in message, (str(body)[:200], message)
    predicate = {"id": ["items"], "predicate": " + ".join(["id"] * 3000) + " > 0"}
    assert "operators deep" in refused(authed, "/v1/table/items/count_rows", predicate, token=READ)
    alive(authed, READ)
    # an ordinary projection and filter answer the ref's rows
    status, headers, content = send(authed, "POST", "/v1/table/main$items/query",
                                    {"id": ["main", "items"], **QUERY, "filter": "id >= 2",
                                     "columns": {"column_aliases": {"twice": "id * 2", "tag": "name || '!'"}}},
                                    token=READ)
    assert status == 200 and headers["content-type"] == "application/vnd.apache.arrow.file", content[:300]
    expected = sorted(repo.read("items", ref="main").to_pylist(), key=lambda r: r["id"])
    assert sorted(arrow_rows(content), key=lambda r: r["twice"]) == [
        {"twice": 2 * r["id"], "tag": r["name"] + "!"} for r in expected if r["id"] >= 2]


def at_limits() -> list[str]:
    """Expressions at each limit of the guard: every chained operator, every kind of nesting."""
    texts = [deepest(lambda k, op=op: chain_filter(op, k), MAX_FILTER_TERMS + MAX_FILTER_DEPTH + 10)[1]
             for op in CHAIN_OPS]
    return texts + [deepest(lambda k, kind=kind: nest_filter(kind, k), MAX_FILTER_NESTING + 5)[1]
                    for kind in sorted(NESTINGS)]


@pytest.mark.slow
def test_expressions_at_every_limit_run_in_lance_through_the_server(servers):
    """What the guard lets through, Lance plans and runs as a filter, a projection and a count
    predicate, without crashing the server or taking long."""
    server = servers[0]
    slowest = 0.0
    texts = at_limits()
    many = {f"x{i}": " + ".join(["id"] * (MAX_FILTER_DEPTH - 8)) for i in range(80)}  # near the total, at once
    bodies = [({"id": ["probe"], **QUERY, "filter": text}, "query") for text in texts]
    bodies += [(aliased(text, "probe"), "query") for text in texts]
    bodies += [({"id": ["probe"], "predicate": text}, "count_rows") for text in texts]
    bodies += [({"id": ["probe"], **QUERY, "columns": {"column_aliases": many}}, "query")]
    for body, action in bodies:
        started_at = time.monotonic()
        status, headers, content = send(server, "POST", f"/v1/table/probe/{action}", body)
        slowest = max(slowest, time.monotonic() - started_at)
        assert status in (200, 400), (status, str(body)[:300], content[:300])
        if status == 400:  # a type Lance refuses (one error, as it should be), never a crash
            assert "operators deep" not in error_of(status, headers, content)["error"]
    alive(server)
    assert slowest < 20, slowest


# ---------------------------------------------------------------------------------------------- bodies
def nested_object(depth: int) -> bytes:
    return b'{"id": ["items"], "context": ' + b'{"a": ' * depth + b'"x"' + b"}" * depth + b"}"


BODIES = [  # (raw body, words)
    (b"[" * 20000 + b"]" * 20000, "nests hundreds of levels"),  # 40 KB: a 500 (RecursionError) before
    (b"{" + b'"a":{' * 8000 + b"}" * 8001, "nests hundreds of levels"),
    (nested_object(40), "nests 41 levels deep"),
    (b'{"id": ["items"], "version": NaN}', "not JSON"),
    (b'{"id": ["items"], "version": Infinity}', "not JSON"),
    (b"\xff\xfe{}", "not JSON"),
    (b'{"id": ["items"]', "not JSON"),
    (b'"items"', "must be a JSON object"),
    (b'{"id": [["items"]]}', "must be text"),
    (b'{"id": ["items"], "version": {"a": [1, 2]}}', "version"),
]


@pytest.mark.slow
def test_malformed_or_deep_bodies_are_400_with_the_error_body(servers, repo):
    server = servers[0]
    for raw, words in BODIES:
        got = send(server, "POST", "/v1/table/items/describe", raw=raw)
        answer = error_of(*got)
        assert (got[0], answer["code"]) == (400, 13) and words in answer["error"], (raw[:60], answer)
    within = send(server, "POST", "/v1/table/items/describe", raw=nested_object(20))
    assert within[0] in (200, 400), within  # within the depth limit: the model decides
    alive(server)


# ---------------------------------------------------------------------------------------------- paths
# Paths no added route claims (the web view has "/" and "/ui/", merge requests "/v1/trimerge/..."):
# everything here comes to the namespace's handler, however it decodes.
PATHS = ["/v1/table/items%0A/describe", "/v1/table/%0A/describe", "/v1/table/items/describe%0A", "/v1%0A",
         "/v1", "/v1/", "/v1//", "/v1/table/items/describe/", "/v1/table/items/%2e%2e/describe", "/%00", "/%FF%FE",
         "/v1/table/%0D%0AX-Injected:%201/describe", "/v1/" + "a" * 5000, "/v1/namespace/%24/list%0A",
         "/v1/table/items/index/x/y/z", "/v1/table/%20/describe", "/v1/trimerge%0A/requests", "/v1/%0A%0A/x",
         "/v2/table/items/describe", "/v1/table/items/describe%00"]


@pytest.mark.slow
def test_every_path_answers_the_error_body_and_logs_one_line(servers):
    for server, token in ((servers[0], None), (servers[1], READ)):
        before = len(request_lines(server))
        sent = 0
        for path in PATHS:
            for method in ("GET", "POST"):
                status, headers, content = send(server, method, path, {"id": ["items"]}, token=token)
                sent += 1
                answer = error_of(status, headers, content)
                assert "x-injected" not in headers and "\n" not in answer["error"], (path, headers)
        lines = request_lines(server)
        assert len(lines) == before + sent, lines[before:][-5:]  # one line each, none split by a newline
        assert any("/v1/table/items%0A/describe" in line for line in lines[before:])


# ---------------------------------------------------------------------------------------------- methods
def spec_routes() -> list[tuple[str, str]]:
    """(path with ids filled in, the one method the spec gives it) of every route of the spec."""
    document = yaml.safe_load(SPEC.read_text())
    routes = []
    for template, item in document["paths"].items():
        methods = [m.upper() for m in item if m in ("get", "post", "put", "delete", "patch", "head", "options")]
        assert len(methods) == 1, (template, methods)
        routes.append((template.replace("{id}", "main$items").replace("{index_name}", "idx"), methods[0]))
    return routes


METHODS = ["GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD", "TRACE", "PURGE"]


@pytest.mark.slow
def test_only_the_spec_methods_are_served(servers, repo):
    server = servers[0]
    before = Path(repo.uri)
    files = {str(p): p.stat().st_mtime_ns for p in before.rglob("*") if p.is_file()}
    routes = spec_routes()
    assert len(routes) >= 50
    for path, allowed in routes:
        for method in METHODS:
            body = {"id": ["main", "items"]} if method not in ("GET", "HEAD") else None
            status, headers, content = send(server, method, path, body)
            if method == allowed:
                assert status != 405, (method, path, content[:300])
                continue
            assert status == 405 and headers.get("allow") == allowed, (method, path, status, headers)
            answer = error_of(status, headers, content, head=method == "HEAD")
            assert method == "HEAD" or ("takes " + allowed) in answer["error"], answer
    status, headers, content = send(server, "DELETE", "/v1/table/items/describe", {"id": ["items"]})
    assert status == 405 and headers["allow"] == "POST"  # the reproduction: it was a 200
    assert {str(p): p.stat().st_mtime_ns for p in before.rglob("*") if p.is_file()} == files
    alive(server)


# ---------------------------------------------------------------------------------------------- loopback
def resolved_all_loopback(host: str) -> bool:
    infos = socket.getaddrinfo(host, 0, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    return all(ipaddress.ip_address(info[4][0].split("%")[0]).is_loopback for info in infos)


def test_the_loopback_rule_follows_the_resolver():
    from trimerge.serve.runner import is_loopback

    for host in ("localhost", "127.0.0.1", "::1", "[::1]", "0.0.0.0", socket.gethostname(), "127.1.2.3"):
        assert is_loopback(host) == resolved_all_loopback(host.strip("[]")), host
    assert not is_loopback("no-such-host.invalid") and not is_loopback("")


def unshare_available() -> bool:
    try:
        return subprocess.run(["unshare", "-m", "true"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.mark.slow
def test_localhost_is_checked_by_the_address_it_resolves_to(repo, tmp_path):
    """In a mount namespace whose /etc/hosts sends ``localhost`` to another host, ``serve --host
    localhost`` without tokens refuses to start (it listened on that address before)."""
    if not unshare_available():
        pytest.skip("needs unshare -m (a private mount namespace) to give localhost another address")
    hosts = tmp_path / "hosts"
    hosts.write_text("10.9.8.7 localhost\n")
    script = (f"mount --bind {hosts} /etc/hosts && exec {sys.executable} -m trimerge.cli -C {repo.uri} serve "
              f"--host localhost --port {free_port()}")
    proc = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert len(proc.stderr.strip().splitlines()) == 1 and "resolves to 10.9.8.7" in proc.stderr, proc.stderr
    assert "listening" not in proc.stdout
    # the real localhost resolves to loopback: the server starts there
    server = Server(repo.uri, "--host", "localhost")
    first = server.proc.stdout.readline()
    code, log = server.stop()
    assert first.strip() == f"listening on http://127.0.0.1:{server.port}" and code == 0, (first, log)


# ---------------------------------------------------------------------------------------------- token actors
@pytest.mark.parametrize("actor", ["bot\x1b[31mred", "bot\x1ex", "a\u202eb", "a\u2028b", "bot\x07", "a\x0bb"])
def test_a_token_file_actor_with_a_control_character_is_refused_naming_its_line(repo, tmp_path, actor):
    tokens = tmp_path / "tokens"
    tokens.write_text(f"# tokens\n{READ} read\n{WRITE} write * {actor}\n", encoding="utf-8")
    proc = subprocess.run([sys.executable, "-m", "trimerge.cli", "-C", repo.uri, "serve", "--port", str(free_port()),
                           "--token-file", str(tokens)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "listening" not in proc.stdout, (proc.stdout, proc.stderr)
    assert len(proc.stderr.strip().splitlines()) == 1 and "line 3" in proc.stderr, proc.stderr
    assert "printable" in proc.stderr and actor not in proc.stderr


def test_plain_actors_are_kept_and_the_namespace_refuses_control_characters(repo):
    from trimerge.namespace.service import TrimergeNamespace
    from trimerge.serve import TokenFileError, parse_tokens

    grants = parse_tokens(f"{WRITE}\twrite\tingest/*\tingest-bøt\r\n{READ} read")
    assert [(g.actor, g.branches, g.line) for g in grants] == [("ingest-bøt", "ingest/*", 1), (None, "*", 2)]
    with pytest.raises(TokenFileError, match="at most 200"):
        parse_tokens(f"{WRITE} write * {'a' * 201}")
    with pytest.raises(ln.InvalidInputError, match="printable"):
        TrimergeNamespace(root=repo.uri, actor="bot\nInjected-Line")


# ---------------------------------------------------------------------------------------------- real clients
@pytest.mark.slow
def test_clients_nobody_here_wrote_still_work_after_the_checks(repo, servers):
    open_server, authed = servers
    out = client(f"""
        from lance_namespace_urllib3_client.models import QueryTableRequestColumns, QueryTableRequestVector
        ns = RestNamespace(uri={open_server.url!r})  # pylance's REST client: a query with projections
        def query(aliases, where=None):
            request = ln.QueryTableRequest(id=["feat~1", "items"], k=100, vector=QueryTableRequestVector(),
                                           columns=QueryTableRequestColumns(column_aliases=aliases), filter=where)
            try:
                return pa.ipc.open_file(pa.py_buffer(ns.query_table(request).data)).read_all().to_pylist()
            except Exception as exc:
                return str(exc)
        out["projected"] = sorted(query({{"twice": "id * 2", "name": "name || '!'"}}, "id >= 2"),
                                  key=lambda r: r["twice"])
        out["deep"] = query({{"x": " + ".join(["id"] * 3000)}})
        out["cut"] = query({{"x": "id; select 1"}})
        out["tables"] = ns.list_tables(ln.ListTablesRequest(id=["feat"])).tables
        out["pylance"] = rows(lance.dataset(namespace_client=ns, table_id=["feat~1", "items"]).to_table())
        # LanceDB pushing its queries down to the server with a read token
        pushed = lancedb.connect_namespace("rest", {{"uri": {authed.url!r}, "headers.Authorization": "Bearer {READ}"}},
                                           namespace_client_pushdown_operations=["QueryTable"])
        table = pushed.open_table("items", namespace_path=["feat~1"])
        out["filtered"] = sorted(table.search().where("id >= 2").select(["id"]).limit(100).to_arrow()
                                 .column("id").to_pylist())
        out["nearest"] = [r["id"] for r in table.search([1.0, 0.5]).limit(2).select(["id"]).to_list()]
        try:
            table.search().where(" + ".join(["id"] * 3000) + " > 0").limit(5).to_arrow()
            out["deep_where"] = "answered"
        except Exception as exc:
            out["deep_where"] = str(exc)
        out["after"] = len(table.search().limit(100).to_arrow())
    """)
    at = sorted(repo.read("items", ref="feat~1").to_pylist(), key=lambda r: r["id"])
    assert out["projected"] == [{"twice": 2 * r["id"], "name": r["name"] + "!"} for r in at if r["id"] >= 2]
    assert "operators deep" in out["deep"] and "one SQL expression" in out["cut"], out
    assert out["tables"] == ["items"] and out["pylance"] == [{"id": r["id"], "name": r["name"]} for r in at]
    assert out["filtered"] == [r["id"] for r in at if r["id"] >= 2]
    nearest = sorted(at, key=lambda r: (r["vec"][0] - 1.0) ** 2 + (r["vec"][1] - 0.5) ** 2)[:2]
    assert out["nearest"] == [r["id"] for r in nearest]
    assert "operators deep" in out["deep_where"] and out["after"] == len(at), out


@pytest.mark.slow
def test_a_trailing_newline_never_reaches_an_added_route(servers):
    """Starlette's route patterns end in ``$``, which matches before a trailing newline: without the
    guard ``/ui%0A`` was the web view's ``/ui`` and ``/v1/trimerge/requests%0A`` the requests route."""
    for server, token in ((servers[0], None), (servers[1], READ)):
        before = len(request_lines(server))
        paths = ["/ui%0A", "/%0A", "/ui/%0A", "/v1/trimerge/requests%0A", "/v1/trimerge/requests%0D%0A"]
        for path in paths:
            status, headers, content = send(server, "GET", path, token=token)
            answer = error_of(status, headers, content)
            assert status in (400, 404, 406) and "\n" not in answer["error"], (path, status)
        assert len(request_lines(server)) == before + len(paths)
