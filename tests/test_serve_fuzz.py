"""A schema-driven fuzz of ``trimerge serve`` (issue 50, point 3).

schemathesis generates requests for every operation of the Lance REST Namespace's own OpenAPI
document (``fixtures/lance-namespace/spec.yaml``, unchanged from the spec's repository) — valid ones
and ones that break the schema (wrong types, missing fields, odd ids and query parameters) — and
sends them to real server processes on 127.0.0.1 serving a real repository. Half the cases aimed at
an operation the server serves name a real table or ref, so filters, projections, vectors and
numbers reach Lance. A hypothesis property test adds what the schema does not describe: any method,
any path (percent-encoded control characters, ``..``, bytes that are not UTF-8), nested JSON,
expressions far past the limits. The rule, for every answer:

* no 5xx: nothing a client sends is a server error;
* every 4xx is the spec's ``ErrorResponse``: a JSON object with a one-line text ``error``, an
  integer ``code`` that is a Lance Namespace error code and a text ``detail``; a 405 names the
  allowed method in ``Allow``;
* one log line per request, and no crash: the servers still answer afterwards, and stop on
  SIGTERM with exit 0 and no traceback.

Requests go to an open server (no token file) and, with a read token, to one with tokens. Bounded
for CI (about a minute on 2 cores); ``TRIMERGE_LONG_TESTS=1`` runs every schemathesis phase (also
"coverage": each property missing, of the wrong type, at its bounds, and each undeclared method)
with many more examples, against both servers each time.
"""

from __future__ import annotations

import http.client
import itertools
import json
import os
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

schemathesis = pytest.importorskip("schemathesis")
pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

from schemathesis.checks import not_a_server_error, unsupported_method  # noqa: E402
from test_serve import READ, TOKENS, Server, build, call, started  # noqa: E402

SPEC = Path(__file__).resolve().parent.parent / "fixtures" / "lance-namespace" / "spec.yaml"
LONG = bool(os.environ.get("TRIMERGE_LONG_TESTS"))
#: The operations trimerge serve answers; every other route of the spec is refused by its path alone.
SERVED = ["ListNamespaces", "DescribeNamespace", "NamespaceExists", "ListTables", "DescribeTable", "TableExists",
          "CountTableRows", "QueryTable", "ListTableVersions", "DescribeTableVersion", "CreateTableVersion"]
#: Ids that exist in the fuzzed repository (``[]`` is the root namespace).
REAL_IDS = [["items"], ["main", "items"], ["feat~1", "items"], ["v1", "items"], ["w", "items"], ["feat"], []]

spec = schemathesis.openapi.from_path(SPEC)
spec.config.generation.update(modes=list(schemathesis.GenerationMode))
spec.config.update(request_timeout=60)
if not LONG:  # "coverage" generates hundreds of cases for each large schema: minutes, not seconds
    spec.config.phases.update(phases=["examples", "fuzzing"])
# The spec's bulk writes send Arrow IPC streams (refused here whatever the bytes): sent as bytes.
schemathesis.serializer.alias("application/vnd.apache.arrow.stream", "application/octet-stream")
served_ops = spec.include(operation_id=SERVED)
other_ops = spec.exclude(operation_id=SERVED)


@served_ops.hook
def flatmap_case(context, case):
    """Half the cases name a real table or ref (in the path and, when it has one, the body's id)."""
    def aim(ident):
        if ident is None or "id" not in case.path_parameters:
            return case
        case.path_parameters = {**case.path_parameters, "id": "$".join(ident) or "$"}
        if isinstance(case.query, dict) and "delimiter" in case.query:
            case.query = {**case.query, "delimiter": "$"}
        if isinstance(case.body, dict) and "id" in case.body:
            case.body = {**case.body, "id": ident}
        return case

    return st.one_of(st.none(), st.sampled_from(REAL_IDS)).map(aim)


#: The namespace error codes (ErrorResponse.code) a 4xx may carry.
CODES = range(0, 24)
TURNS = itertools.count()  # in CI each case goes to one of the two servers, in turn
REQUEST_LINE = re.compile(r"\d{4}-\d\d-\d\dT[\d:]+Z 127\.0\.0\.1 [A-Z]+ /\S* \d{3} [\d.]+ms \S+")


def assert_error_body(status: int, content_type: str, content: bytes, head: bool = False) -> dict:
    """The spec's ErrorResponse of a 4xx (HEAD answers carry none)."""
    assert 400 <= status < 500, (status, content[:300])
    assert content_type.startswith("application/json"), (status, content_type, content[:300])
    if head:
        return {}
    body = json.loads(content)
    assert isinstance(body, dict) and set(body) == {"error", "code", "detail"}, body
    assert isinstance(body["error"], str) and body["error"] and "\n" not in body["error"], body
    assert isinstance(body["code"], int) and body["code"] in CODES and isinstance(body["detail"], str), body
    return body


@schemathesis.check
def spec_error_body(ctx, response, case) -> None:
    """Every 4xx carries the spec's ErrorResponse, one line."""
    if 400 <= response.status_code < 500:
        assert_error_body(response.status_code, response.headers.get("content-type", [""])[0], response.content,
                          head=case.method.upper() == "HEAD")


CHECKS = [not_a_server_error, spec_error_body, unsupported_method]


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    repo = build(str(tmp_path_factory.mktemp("fuzz") / "repo"))
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


def send(case, servers) -> None:
    open_server, authed = servers
    turn = next(TURNS)
    if LONG or turn % 2 == 0:
        case.call_and_validate(base_url=open_server.url, checks=CHECKS)
    if LONG or turn % 2 == 1:
        case.call_and_validate(base_url=authed.url, checks=CHECKS, headers={"Authorization": f"Bearer {READ}"})


FUZZ = settings(deadline=None, suppress_health_check=list(HealthCheck), database=None,
                max_examples=300 if LONG else 12)
REFUSED_FUZZ = settings(FUZZ, max_examples=100 if LONG else 2)  # answered from the path alone


@pytest.mark.slow
@served_ops.parametrize()
@FUZZ
def test_fuzzed_requests_to_served_operations(case, servers):
    send(case, servers)


@pytest.mark.slow
@other_ops.parametrize()
@REFUSED_FUZZ
def test_fuzzed_requests_to_the_other_operations_of_the_spec(case, servers):
    send(case, servers)


# ---------------------------------------------------------------------------------------------- beyond the schema
METHODS = ["GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD", "TRACE", "PROPFIND", "BREW"]
ACTIONS = ["namespace/{}/list", "namespace/{}/describe", "namespace/{}/table/list", "table/{}/describe",
           "table/{}/query", "table/{}/count_rows", "table/{}/version/list", "table/{}/version/create",
           "table/{}/drop", "table/{}/index/{}/stats", "table", "table/batch-commit", "nothing/{}/here", "{}"]
IDS = st.one_of(st.sampled_from(["items", "main$items", "feat~1$items", "$", "..", "%2e%2e", "main$..", "%0A",
                                 "items%0A", "%00", "%FF%FE", "a%2Fb", "", "x" * 3000]),
                st.binary(max_size=40).map(lambda b: "".join(f"%{c:02X}" for c in b)))


def nested(depth: int) -> str:
    return '{"a":' * depth + "1" + "}" * depth


def long_expression(n: int) -> str:
    return " + ".join(["id"] * n)


BODIES = st.one_of(
    st.none(),
    st.builds(lambda d: nested(d).encode(), st.integers(1, 3000)),
    st.builds(lambda d: (b"[" * d + b"]" * d), st.integers(1, 30000)),
    st.builds(lambda n, where: json.dumps({"id": ["items"], "k": 5, "vector": {}, where: long_expression(n)}
                                          if where == "filter" else
                                          {"id": ["items"], "k": 5, "vector": {},
                                           "columns": {"column_aliases": {"x": long_expression(n)}}}).encode(),
              st.integers(1, 3000), st.sampled_from(["filter", "columns"])),
    st.recursive(st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=20)),
                 lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner,
                                                                                       max_size=4)),
                 max_leaves=20).map(lambda v: json.dumps(v).encode()),
    st.binary(max_size=200),
)


@pytest.mark.slow
@settings(deadline=None, suppress_health_check=list(HealthCheck), database=None, max_examples=400 if LONG else 60)
@given(method=st.sampled_from(METHODS), action=st.sampled_from(ACTIONS), ident=IDS, body=BODIES,
       authed=st.booleans())
def test_any_method_path_and_body_gets_a_4xx_with_the_error_body_or_an_answer(servers, method, action, ident, body,
                                                                               authed):
    server = servers[1] if authed else servers[0]
    path = "/v1/" + action.format(ident, ident) if action != "{}" else "/" + ident
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    headers = {"Authorization": f"Bearer {READ}"} if authed else {}
    try:
        conn.request(method, path, body=body, headers=headers)
        response = conn.getresponse()
        content = response.read()
    finally:
        conn.close()
    assert response.status < 500, (method, path[:200], response.status, content[:300])
    if response.status >= 400:
        assert_error_body(response.status, response.getheader("content-type") or "", content, head=method == "HEAD")
    if response.status == 405:  # (the exact method of each spec route: test_serve_hostile.py)
        assert response.getheader("allow"), response.getheaders()


@pytest.mark.slow
def test_the_servers_still_answer_after_the_fuzz(servers):
    for one in servers:
        assert one.proc.poll() is None, one.stderr()[-3000:]
        status, answer = call(one.url, "/v1/table/items/describe", {"id": ["items"]},
                              token=READ if one is servers[1] else None)
        assert status == 200 and answer["version"] > 0, answer
