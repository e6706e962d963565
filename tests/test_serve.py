"""``trimerge serve`` (issue 40, point 3): a Lance REST Namespace over HTTP, tested with clients
nobody here wrote — pylance's ``lance.namespace.RestNamespace`` and LanceDB's
``connect_namespace("rest", ...)`` — run in a process where ``import trimerge`` fails, against a
server started as ``trimerge -C REPO serve`` on 127.0.0.1 and stopped with SIGTERM.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import urllib.error
import urllib.request
from pathlib import Path

import pyarrow as pa
import pytest

import trimerge

pytest.importorskip("lancedb")
pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

WRITE, READ, FEAT = "w" * 8 + "-write-token", "r" * 8 + "-read-token-", "f" * 8 + "-feat-token-"
TOKENS = f"# tokens of the test server\n{WRITE} write * writer-bot\n{READ} read\n{FEAT} write feat* feat-bot\n"
# The client processes: trimerge cannot be imported there, so the clients see only HTTP and storage.
BLOCK_TRIMERGE = textwrap.dedent("""
    import importlib.abc, sys
    class _NoTrimerge(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == "trimerge" or name.startswith("trimerge."):
                raise ImportError("trimerge is blocked in this client process")
    sys.meta_path.insert(0, _NoTrimerge())
    try:
        import trimerge
    except ImportError:
        pass
    else:
        raise SystemExit("trimerge imported in the client process")
    import json, lance, lancedb, lance_namespace as ln, pyarrow as pa
    from lance.namespace import RestNamespace
    def rows(table):
        return sorted(table.select(["id", "name"]).to_pylist(), key=lambda r: r["id"])
    def items(ids, suffix=""):
        return pa.table({"id": pa.array(ids, pa.int64()), "name": [f"item{i}{suffix}" for i in ids],
                         "vec": pa.array([[float(i), i / 2] for i in ids], pa.list_(pa.float32(), 2))})
    out = {}
""")


def items(ids: list[int], suffix: str = "") -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "name": [f"item{i}{suffix}" for i in ids],
                     "vec": pa.array([[float(i), i / 2] for i in ids], pa.list_(pa.float32(), 2))})


def rows(table: pa.Table) -> list[dict]:
    return sorted(table.select(["id", "name"]).to_pylist(), key=lambda r: r["id"])


def build(uri: str, options: dict | None = None) -> trimerge.Repository:
    """main with history and a tag; ``feat`` forks items (an older fork state, ``feat~1``, differs
    from the newest); ``w``: a branch the write tests use."""
    repo = trimerge.Repository.init(uri, storage_options=options)
    repo.create_table("items", items([1, 2, 3, 4]), primary_key="id")
    repo.upsert("items", items([2], " v2"))
    repo.tags.create("v1")
    repo.branches.create("feat", from_ref="main")
    repo.upsert("items", items([5]), branch="feat")
    repo.upsert("items", items([3], " feat"), branch="feat")
    repo.upsert("items", items([6, 7], " zebra"), branch="feat")
    repo.branches.create("w", from_ref="main")
    repo.upsert("items", items([8]), branch="w")
    repo.delete("items", "id = 1")
    return repo


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """``trimerge -C ROOT serve`` in a subprocess; :func:`started` waits until it listens."""

    def __init__(self, root: str, *args: str):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = tempfile.TemporaryFile("w+")  # (a pipe nobody reads would fill up with the request log)
        self.proc = subprocess.Popen([sys.executable, "-m", "trimerge.cli", "-C", root, "serve", "--port",
                                      str(self.port), *args], stdout=subprocess.PIPE, stderr=self.log, text=True)

    def stderr(self) -> str:
        self.log.seek(0)
        return self.log.read()

    def wait_ready(self) -> None:
        line = self.proc.stdout.readline()  # printed once the socket listens
        if line.strip() != f"listening on {self.url}":
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"the server did not start: {line!r} {self.stderr()}")

    def stop(self) -> tuple[int, str]:
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise
        return code, self.stderr()


def started(*servers: Server) -> tuple[Server, ...]:
    """The servers (started together: each takes seconds to import its stack), once all listen."""
    try:
        for one in servers:
            one.wait_ready()
    except AssertionError:
        for one in servers:
            one.proc.kill()
        raise
    return servers


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> trimerge.Repository:
    return build(str(tmp_path_factory.mktemp("serve") / "repo"))


@pytest.fixture(scope="module")
def server(repo, tmp_path_factory):
    """An open server (no token file: loopback only) and one with tokens; both stop cleanly."""
    tokens = tmp_path_factory.mktemp("tokens") / "tokens"
    tokens.write_text(TOKENS)
    open_server, authed = started(Server(repo.uri), Server(repo.uri, "--token-file", str(tokens)))
    yield open_server, authed
    stopped = [one.stop() for one in (open_server, authed)]  # both, before any assertion
    for code, log in stopped:
        assert code == 0, log
        lines = log.strip().splitlines()
        assert lines[-1] == "trimerge serve: stopped" and "Traceback" not in log
        requests = [line for line in lines if REQUEST_LINE.fullmatch(line)]
        assert requests and all(REQUEST_LINE.fullmatch(line) or "WARN" in line for line in lines[:-1]), log


def client(code: str, timeout: float = 60) -> dict:
    """Run ``code`` in a fresh Python where ``import trimerge`` fails; its ``out`` dict as JSON."""
    script = BLOCK_TRIMERGE + textwrap.dedent(code) + "\nprint(json.dumps(out))\n"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PYTHONWARNINGS": "ignore"}, cwd="/")
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def call(url: str, path: str, body: object = None, token: str | None = None, method: str = "POST",
         raw: bytes | None = None) -> tuple[int, dict]:
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    req = urllib.request.Request(url + path, data=data, method=method,
                                 headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def files(root: str) -> dict[str, float]:
    return {str(p): p.stat().st_mtime for p in Path(root).rglob("*") if p.is_file()}


#: One line per request on the server's stderr: time, client, method, path, status, duration, token.
REQUEST_LINE = re.compile(r"\d{4}-\d\d-\d\dT[\d:]+Z 127\.0\.0\.1 (GET|POST) /\S* \d{3} [\d.]+ms \S+")
REFS = ["main", "main~1", "v1", "feat", "feat~1", "feat~2"]


@pytest.fixture(scope="module")
def reads(repo, server) -> dict:
    """What pylance's REST client (open server) and LanceDB (with a token) read, in one client
    process (each client process pays the ~2 s import of lancedb)."""
    return client(f"""
        ns = RestNamespace(uri={server[0].url!r})
        out["namespaces"] = ns.list_namespaces(ln.ListNamespacesRequest(id=[])).namespaces
        out["tables"] = ns.list_tables(ln.ListTablesRequest(id=["feat"])).tables
        out["pylance"] = {{ref: rows(lance.dataset(namespace_client=ns, table_id=[ref, "items"]).to_table())
                          for ref in {REFS + [repo.resolve("feat~1").id]!r}}}
        out["pylance_root"] = rows(lance.dataset(namespace_client=ns, table_id=["items"]).to_table())
        d = ns.describe_table(ln.DescribeTableRequest(id=["feat~1", "items"]))
        out["described"] = [d.version, d.managed_versioning, d.storage_options]

        db = lancedb.connect_namespace("rest", {{"uri": {server[1].url!r}, "headers.Authorization": "Bearer {READ}"}})
        out["db_tables"] = list(db.list_tables(namespace_path=["feat"]).tables)
        out["db_namespaces"] = sorted(db.list_namespaces().namespaces)
        out["lancedb"] = {{ref: rows(db.open_table("items", namespace_path=[ref]).to_arrow()) for ref in {REFS!r}}}
        older = db.open_table("items", namespace_path=["feat~1"])  # an older state of a forked branch
        out["older_filtered"] = rows(older.search().where("id >= 3").to_arrow())
        out["plain"] = rows(db.open_table("items").to_arrow())
        # LanceDB pushing its queries down: the server runs them at the ref (an Arrow IPC answer)
        pushed = lancedb.connect_namespace("rest", {{"uri": {server[1].url!r}, "headers.Authorization": "Bearer {READ}"}},
                                           namespace_client_pushdown_operations=["QueryTable"])
        out["pushed"] = {{ref: rows(pushed.open_table("items", namespace_path=[ref]).search().where("id >= 2")
                                   .limit(100).to_arrow()) for ref in {REFS!r}}}
        out["pushed_vector"] = [r["id"] for r in pushed.open_table("items", namespace_path=["feat~1"])
                                .search([1.0, 0.5]).limit(2).select(["id", "name"]).to_list()]
        try:
            pushed.open_table("items", namespace_path=["main"]).search().where("id = 1; DROP TABLE items").limit(5).to_arrow()
            out["pushed_bad"] = "answered"
        except Exception as exc:
            out["pushed_bad"] = str(exc)
    """)


@pytest.mark.slow
def test_pylance_rest_client_reads_exactly_each_ref(repo, reads):
    assert sorted(reads["namespaces"]) == ["feat", "main", "v1", "w"]
    assert reads["tables"] == ["items"]
    for ref in REFS + [repo.resolve("feat~1").id]:
        assert reads["pylance"][ref] == rows(repo.read("items", ref=ref)), ref
    assert reads["pylance_root"] == rows(repo.read("items", ref="main"))  # the server's ref: the current branch
    assert reads["described"] == [repo.table_version("items", "feat~1").version, True, None]


@pytest.mark.slow
def test_lancedb_over_rest_with_a_token_lists_opens_and_reads_refs(repo, reads):
    assert reads["db_tables"] == ["items"] and reads["db_namespaces"] == ["feat", "main", "v1", "w"]
    for ref in REFS:
        assert reads["lancedb"][ref] == rows(repo.read("items", ref=ref)), ref
    older = rows(repo.read("items", ref="feat~1"))
    assert not any("zebra" in r["name"] for r in reads["lancedb"]["feat~1"]) and reads["lancedb"]["feat~1"] == older
    assert reads["older_filtered"] == [r for r in older if r["id"] >= 3]
    assert reads["plain"] == rows(repo.read("items", ref="main"))


@pytest.mark.slow
def test_lancedb_queries_pushed_down_to_the_server_read_exactly_each_ref(repo, reads):
    for ref in REFS:
        assert reads["pushed"][ref] == [r for r in rows(repo.read("items", ref=ref)) if r["id"] >= 2], ref
    at = repo.read("items", ref="feat~1").to_pylist()
    nearest = sorted(at, key=lambda r: (r["vec"][0] - 1.0) ** 2 + (r["vec"][1] - 0.5) ** 2)[:2]
    assert reads["pushed_vector"] == [r["id"] for r in nearest]
    assert "one SQL expression" in reads["pushed_bad"]


@pytest.mark.slow
def test_tokens_writes_become_commits_or_are_refused(repo, server):
    url = server[1].url
    before = trimerge.Repository.open(repo.uri).log("w")[0].id
    out = client(f"""
        def db(token):
            props = {{"uri": {url!r}}}
            if token:
                props["headers.Authorization"] = "Bearer " + token
            return lancedb.connect_namespace("rest", props)
        for name, token in (("missing", None), ("wrong", "x" * 24)):
            try:
                db(token).list_tables(namespace_path=["main"])
                out[name] = "listed"
            except Exception as exc:
                out[name] = str(exc)
        for name, token, ref in (("read", {READ!r}, "w"), ("other_branch", {FEAT!r}, "w")):
            try:
                db(token).open_table("items", namespace_path=[ref]).add(items([90]))
                out[name] = "written"
            except Exception as exc:
                out[name] = str(exc)
        table = db({WRITE!r}).open_table("items", namespace_path=["w"])
        table.add(items([91]))
        out["after"] = rows(db({READ!r}).open_table("items", namespace_path=["w"]).to_arrow())
        out["feat_reads_main"] = None
        try:
            db({FEAT!r}).open_table("items", namespace_path=["main"])
        except Exception as exc:
            out["feat_reads_main"] = str(exc)
    """)
    assert "no token" in out["missing"] and "not one of this server's tokens" in out["wrong"]
    for name in ("read", "other_branch"):
        assert out[name] != "written"  # Lance reports the refused commit as an unknown outcome
    assert "may name only branches matching 'feat*'" in out["feat_reads_main"]
    fresh = trimerge.Repository.open(repo.uri)
    log = fresh.log("w")
    assert log[1].id == before and log[0].actor == "writer-bot"  # exactly one commit: the write token's
    assert [r["id"] for r in out["after"]] == [1, 2, 3, 4, 8, 91] == [r["id"] for r in rows(fresh.read("items", "w"))]
    assert not list(Path(repo.uri).rglob("*.manifest-*"))  # the refused writes' staging manifests are gone
    assert fresh.fsck().ok


BAD = [  # (method, path, body, status, code, words in the message)
    ("POST", "/v1/table/nope/describe", {"id": ["nope"]}, 404, 4, "no table 'nope' at main"),
    ("POST", "/v1/table/nope~3$items/describe", {"id": ["nope~3", "items"]}, 400, 13, "does not resolve"),
    ("GET", "/v1/namespace/nope/table/list", None, 404, 1, "not a ref"),
    ("POST", "/v1/table/..$items/describe", {"id": ["..", "items"]}, 400, 13, "does not resolve"),
    ("POST", "/v1/table/main$../describe", {"id": ["main", ".."]}, 400, 13, "invalid table name"),
    ("POST", "/v1/table/main$a%2Fb/describe", {"id": ["main", "a/b"]}, 400, 13, "invalid table name"),
    ("POST", "/v1/table/main$a%00b/describe", {"id": ["main", "a\x00b"]}, 400, 13, "control character"),
    ("POST", "/v1/table/x/describe", {"id": ["x" * 10240]}, 400, 13, "10240 characters"),
    ("POST", "/v1/table/items/describe", {"id": "items"}, 400, 13, "id must be a list"),
    ("POST", "/v1/table/items/describe", {"id": ["items"], "version": "two"}, 400, 13, "version"),
    ("POST", "/v1/table/items/describe", [1, 2], 400, 13, "must be a JSON object"),
    ("POST", "/v1/table/a$b$c/describe", {"id": ["a", "b", "c"]}, 404, 4, "one level of child namespaces"),
    ("POST", "/v1/table/items/count_rows", {"id": ["items"], "predicate": "id = 1; DROP TABLE items"}, 400, 13,
     "one SQL expression"),
    ("POST", "/v1/table/items/count_rows", {"id": ["items"], "predicate": "id = 1) OR (1 = 1"}, 400, 13, ""),
    ("POST", "/v1/table/items/drop", {"id": ["items"]}, 406, 0, "read-only"),
    ("POST", "/v1/table/items/create", None, 406, 0, "read-only"),
    ("POST", "/v1/nothing/here", None, 406, 0, "not an operation"),
    ("POST", "/v1/table/items/version/list?limit=-1", None, 400, 13, "limit"),
]


@pytest.mark.slow
def test_bad_input_is_a_4xx_with_one_message_and_writes_nothing(repo, server):
    url = server[0].url
    call(url, "/v1/table/w$items/describe", {"id": ["w", "items"]})  # (a fork's pinned copy: a cache made once)
    before = files(repo.uri)
    for method, path, body, status, code, words in BAD:
        got, answer = call(url, path, body, method=method)
        assert (got, answer.get("code")) == (status, code), (path, body, answer)
        assert words in answer["error"] and "\n" not in answer["error"] and len(answer["error"]) < 2100, answer
    got, answer = call(url, "/v1/table/items/describe", raw=b"{not json")
    assert got == 400 and "not JSON" in answer["error"]
    conn = http.client.HTTPConnection("127.0.0.1", server[0].port, timeout=30)
    conn.putrequest("POST", "/v1/table/items/describe")
    conn.putheader("Content-Length", str(2 << 20))  # refused on its declared size, before any body is sent
    conn.endheaders()
    answer_of_size = conn.getresponse()
    assert answer_of_size.status == 400 and "at most" in json.loads(answer_of_size.read())["error"]
    conn.close()
    # tokens: the server with a token file refuses before anything else
    authed = server[1].url
    assert call(authed, "/v1/table/items/describe", {"id": ["items"]})[0] == 401
    assert call(authed, "/v1/table/items/describe", {"id": ["items"]}, token="y" * 20)[0] == 401
    got, answer = call(authed, "/v1/table/w$items/version/create", {"id": ["w", "items"], "version": 99,
                                                                    "manifest_path": "x"}, token=READ)
    assert (got, answer["code"]) == (403, 15) and "read-only token" in answer["error"]
    assert files(repo.uri) == before
    got, answer = call(url, "/v1/table/items/describe", {"id": ["items"]})  # and the server goes on
    assert got == 200 and answer["version"] == repo.table_version("items", "main").version


def test_token_file_format():
    from trimerge.serve import TokenFileError, parse_tokens

    grants = parse_tokens(TOKENS)
    assert [(g.write, g.branches, g.actor, g.line) for g in grants] == [
        (True, "*", "writer-bot", 2), (False, "*", None, 3), (True, "feat*", "feat-bot", 4)]
    feat = grants[2]
    branches = {"feat", "feat/x", "main"}
    assert [feat.may_name(r, branches) for r in ("feat", "feat~2", "feat@{1}", "feat/x^", "main", "v1")] == \
        [True, True, True, True, False, False]
    for text, words in (("short", "at least 16"), (f"{READ} admin", "'read' or 'write'"),
                        (f"{READ}\n{READ}", "earlier line"), ("# nothing\n", "no token"),
                        (f"{READ} read * a b", "fields")):
        with pytest.raises(TokenFileError, match=words):
            parse_tokens(text)


@pytest.mark.slow
def test_refuses_to_start_without_a_safe_setup(repo, tmp_path):
    bad_tokens = tmp_path / "tokens"
    bad_tokens.write_text("short read\n")
    cases = [(["--host", "0.0.0.0"], "loopback only"), (["--token-file", str(bad_tokens)], "at least 16"),
             (["--token-file", str(tmp_path / "absent")], "cannot read"), (["--ref", "nope~1"], "does not resolve")]
    procs = [subprocess.Popen([sys.executable, "-m", "trimerge.cli", "-C", repo.uri, "serve", "--port",
                               str(free_port()), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for args, _ in cases]
    for proc, (args, words) in zip(procs, cases):
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 2, (args, out, err)
        assert len(err.strip().splitlines()) == 1 and words in err, (args, err)
        assert "listening" not in out


@pytest.mark.s3
def test_serves_an_object_store_repository_without_handing_out_credentials(s3_uri):
    uri, options = s3_uri
    repo = build(uri, options)
    args = [arg for k, v in options.items() for arg in ("--storage-option", f"{k}={v}")]
    plain, sharing = started(Server(uri, *args), Server(uri, *args, "--share-storage-options"))
    try:
        out = client(f"""
            for name, url in (("plain", {plain.url!r}), ("sharing", {sharing.url!r})):
                ns = RestNamespace(uri=url)
                d = ns.describe_table(ln.DescribeTableRequest(id=["feat~1", "items"]))
                out[name] = [d.location, d.storage_options]
            # a client with its own credentials reads through the plain server
            ds = lance.dataset(namespace_client=RestNamespace(uri={plain.url!r}), table_id=["feat~1", "items"],
                               storage_options={options!r})
            out["rows"] = rows(ds.to_table())
        """)
    finally:
        stopped = [one.stop() for one in (plain, sharing)]
    assert [code for code, _ in stopped] == [0, 0], stopped
    assert out["plain"][0].startswith("s3://") and out["plain"][1] is None
    assert out["sharing"][1] == options
    assert out["rows"] == rows(repo.read("items", ref="feat~1"))


def query(url: str, ref: str, body: dict) -> tuple[int, object]:
    """``query_table`` over HTTP: the rows (an Arrow IPC file), or the status and error."""
    req = urllib.request.Request(f"{url}/v1/table/{ref}$items/query", data=json.dumps(
        {"id": [ref, "items"], "vector": {}, **body}).encode(), method="POST")
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            assert resp.headers["Content-Type"] == "application/vnd.apache.arrow.file"
            return resp.status, pa.ipc.open_file(pa.py_buffer(resp.read())).read_all()
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


@pytest.mark.slow
def test_a_branch_that_moves_is_queried_at_its_new_state(repo, server):
    url = server[0].url
    repo.branches.create("moving", from_ref="main")
    try:
        got, first = query(url, "moving", {"k": 100, "filter": "id > 1"})
        assert got == 200 and rows(first) == [r for r in rows(repo.read("items", "moving")) if r["id"] > 1]
        repo.upsert("items", items([70], " moved"), branch="moving")
        got, second = query(url, "moving", {"k": 100, "filter": "id > 1", "columns": {"column_names": ["id", "name"]}})
        assert got == 200 and second.column_names == ["id", "name"]
        assert rows(second) == [r for r in rows(repo.read("items", "moving")) if r["id"] > 1] != rows(first)
        got, old = query(url, "moving~1", {"k": 2, "offset": 1})  # the old state stays readable by its ref
        assert got == 200 and old.num_rows == 2
        stale = repo.table_version("items", "moving~1").version
        got, answer = query(url, "moving", {"k": 5, "version": stale})  # a handle opened before the move
        assert got == 404 and "open the table again" in answer["error"]
        got, answer = query(url, "moving", {"k": 5, "full_text_query": {"string_query": {"query": "x"}}})
        assert got == 406 and "full-text" in answer["error"]
    finally:
        repo.branches.delete("moving", force=True)
