"""The web view (issue 52) over HTTP: every address answers what the API answers for the same
question, sign-in and CSRF hold, actions need a write token whose glob covers the target, and
hostile input gets a page that says what is wrong — never a traceback, nothing changed.

Two real servers (``trimerge -C REPO serve``, one without tokens, one with ``--token-file``) on
127.0.0.1, driven with httpx; the same pages in Chromium: tests/test_pages_browser.py.
"""

from __future__ import annotations

import html
import json
import re
import subprocess
import sys
from collections import Counter
from contextlib import contextmanager
from typing import Iterator

import httpx
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import trimerge
from pagesite import FEAT, IMG, READ, REVIEWER, SCRIPT, WRITE, PageServer, build, csrf_of, items, start, tokens_file
from trimerge.lineage.history.graph import DictGraph
from trimerge.lineage.history.graphlayout import graph_lines

pytest.importorskip("starlette")
pytest.importorskip("jinja2")

from trimerge.pages.history import ahead_behind  # noqa: E402
from trimerge.pages.lanes import layout  # noqa: E402

REQUEST_LINE = re.compile(r"\S+Z \S+ (GET|POST|HEAD|PUT|DELETE|PATCH) /\S*(\.\.\.\(\d+ chars\))? \d{3} [0-9.]+ms \S+")


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> trimerge.Repository:
    return build(str(tmp_path_factory.mktemp("pages") / "repo"))


@pytest.fixture(scope="module")
def servers(repo, tmp_path_factory):
    """(a server without tokens, one with tokens); both stop cleanly, their logs one line a request."""
    tokens = tokens_file(tmp_path_factory.mktemp("tokens"))
    open_server, authed = start(PageServer(repo.uri), PageServer(repo.uri, "--token-file", tokens))
    yield open_server, authed
    stopped = [one.stop() for one in (open_server, authed)]
    for code, log in stopped:
        assert code == 0, log
        assert "Traceback" not in log and "pages:" not in log, log  # no internal error on any page
        lines = log.strip().splitlines()
        assert lines[-1] == "trimerge serve: stopped"
        assert all(REQUEST_LINE.fullmatch(line) or "WARN" in line for line in lines[:-1]), log


@pytest.fixture()
def anon(servers):
    with httpx.Client(base_url=servers[0].url, timeout=60) as client:
        yield client


@contextmanager
def signed_in(url: str, token: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=url, timeout=60) as client:
        form = client.get("/ui/login")
        answer = client.post("/ui/login", data={"csrf": csrf_of(form.text), "token": token, "next": "/ui/"})
        assert answer.status_code == 303, answer.text
        yield client


def text(page: httpx.Response) -> str:
    """The page's visible text, roughly (tags out, entities decoded)."""
    return html.unescape(re.sub(r"<[^>]+>", " ", page.text))


def error_of(page: httpx.Response) -> str:
    found = re.search(r'id="error-message">([^<]*)<', page.text)
    assert found is not None, page.text[:3000]
    return html.unescape(found.group(1))


def state(repo: trimerge.Repository) -> tuple:
    """What an action could change: every branch tip, every request's document."""
    return (tuple(sorted((b.name, b.commit_id) for b in repo.branches.list())),
            json.dumps([r.to_json() for r in repo.requests.list()], sort_keys=True, default=str))


# ------------------------------------------------------------------------------------------ pages
def test_home_lists_branches_with_ahead_behind_tags_tables_and_commits(repo, anon):
    page = anon.get("/ui/")
    assert page.status_code == 200
    shown = text(page)
    main = repo.resolve("main").id
    for b in repo.branches.list():
        ahead = len({c.id for c in repo.log(b.name)} - {c.id for c in repo.log("main")})
        behind = len({c.id for c in repo.log("main")} - {c.id for c in repo.log(b.name)})
        assert ahead_behind(repo.graph, b.commit_id, main)[:2] == (ahead, behind)
        row = re.search(rf'class="branch" href="[^"]*">{re.escape(b.name)}</a>.*?</tr>', page.text, re.S)
        assert row is not None and re.findall(r'class="num">(\d+)<', row.group(0))[:2] == [str(ahead), str(behind)]
    for name in repo.tables("main"):
        assert f"table={name}" in page.text and f"{repo.dataset(name, 'main').count_rows():,}" in shown
    assert "v1" in shown and "Rename item 1 on main" in shown
    assert 'href="/ui/log?ref=feat"' in page.text  # a branch is followed to its log


def test_log_draws_the_graph_with_labels(repo, anon):
    page = anon.get("/ui/log", params={"all": "1"})
    assert page.status_code == 200
    commits = re.findall(r'<tr data-commit="([0-9a-f]{64})"', page.text)
    assert commits == [c.id for c in repo.log(refs=repo.branches.names())]
    assert page.text.count("<svg") >= len(commits) and "<line" in page.text and "node c" in page.text
    assert page.text.count(' merge"/>') == sum(1 for c in repo.log(refs=repo.branches.names()) if c.is_merge) > 0
    assert ">feat</a>" in page.text and ">v1</a>" in page.text
    first = anon.get("/ui/log", params={"ref": "main", "per": "2"})
    second = anon.get("/ui/log", params={"ref": "main", "per": "2", "page": "2"})
    ids = re.findall(r'data-commit="([0-9a-f]{64})"', first.text) + re.findall(r'data-commit="([0-9a-f]{64})"', second.text)
    assert ids == [c.id for c in repo.log("main", limit=4)]


def test_commit_page_shows_the_commit_and_its_diff(repo, anon):
    c = repo.resolve("feat~1")  # the delete of item 4
    page = anon.get(f"/ui/commit/{c.id}")
    assert page.status_code == 200
    shown = text(page)
    assert c.message in shown and c.actor in shown and repo.short_id(c.parents[0]) in shown
    assert 'class="row-delete"' in page.text and re.search(r'<td class="key">4</td>', page.text)
    root = repo.log("main")[-1]
    assert anon.get(f"/ui/commit/{root.id[:12]}").status_code == 200


def compare_rows(page: httpx.Response) -> list[tuple[str, str, dict[str, str]]]:
    """(row class, key, {column: cell text of the changed cells}) of a diff page's rows."""
    out = []
    for cls, body in re.findall(r'<tr class="(row-\w+)" data-change="\w+">(.*?)</tr>', page.text, re.S):
        key = html.unescape(re.search(r'<td class="key">(.*?)</td>', body).group(1))
        changed = {col: html.unescape(v) for col, v in
                   re.findall(r'<td data-column="([^"]+)" class="changed \w+">(.*?)</td>', body)}
        out.append((cls, key, changed))
    return out


def test_compare_highlights_changed_cells_three_dot_and_two_dot(repo, anon):
    page = anon.get("/ui/compare", params={"base": "main", "head": "feat"})
    assert page.status_code == 200
    d = trimerge.diff.diff("main...feat", repo=repo)
    td = d.tables["items"]
    rows = compare_rows(page)
    after = {k: cells for cls, k, cells in rows if cls == "row-after"}
    for r in td.rows().to_pylist():
        if r["change"] == "update":
            assert set(after[str(r["id"])]) == set(r["changed_columns"])
            for col in r["changed_columns"]:
                assert after[str(r["id"])][col] == str(r["after"][col])
    assert {k for cls, k, _ in rows if cls == "row-insert"} == {"31"}
    assert {k for cls, k, _ in rows if cls == "row-delete"} == {"4"}
    first_columns = re.search(r'<table class="rows diff">\s*<thead><tr>(.*?)</tr>', page.text, re.S).group(1)
    headers = re.findall(r"<th>(\w+)</th>", first_columns)
    assert headers[:2] == ["price", "name"] or headers[:2] == ["name", "price"]  # touched columns first
    assert headers[-1] == "note"
    two = anon.get("/ui/compare", params={"base": "main", "head": "feat", "mode": "two-dot"})
    assert any(k == "1" for _, k, _ in compare_rows(two))  # main's own change shows two-dot only
    assert not any(k == "1" for _, k, _ in rows)


def test_compare_pages_and_filters_rows(repo, anon):
    td = trimerge.diff.diff("main...feat", repo=repo).tables["items"]
    keys = sorted(r["id"] for r in td.rows().to_pylist())
    seen: list[int] = []
    for n in range(1, len(keys) + 1):
        page = anon.get("/ui/compare", params={"base": "main", "head": "feat", "table": "items", "per": "1", "page": n})
        assert page.status_code == 200
        seen += {int(k) for _, k, _ in compare_rows(page)}
    assert sorted(seen) == keys
    past = anon.get("/ui/compare", params={"base": "main", "head": "feat", "table": "items", "per": "1",
                                           "page": len(keys) + 1})
    assert past.status_code == 404 and "past the end" in error_of(past)
    filtered = anon.get("/ui/compare", params={"base": "main", "head": "feat", "table": "items", "where": "price > 20"})
    kept = {int(k) for _, k, _ in compare_rows(filtered)}
    assert kept == {r["id"] for r in trimerge.diff.diff("main...feat", repo=repo, tables=["items"], where="price > 20")
                    .tables["items"].rows().to_pylist()} and kept
    other = anon.get("/ui/compare", params={"base": "main", "head": "feat", "where": "price > 20"})
    assert other.status_code == 400 and "name the tables" in error_of(other)  # teams has no price


def test_table_page_pages_sorts_and_filters(repo, anon):
    def ids(page: httpx.Response) -> list[int]:
        return [int(x) for x in re.findall(r'<tr><td class="key">(\d+)</td>', page.text)]

    everything = []
    for n in range(1, 5):
        page = anon.get("/ui/table", params={"ref": "main", "table": "items", "per": "8", "page": n})
        assert page.status_code == 200
        everything += ids(page)
    assert sorted(everything) == sorted(repo.read("items", "main").column("id").to_pylist())
    assert anon.get("/ui/table", params={"ref": "main", "table": "items", "per": "8", "page": 5}).status_code == 404
    desc = anon.get("/ui/table", params={"ref": "main", "table": "items", "sort": "price", "desc": "1", "per": "3"})
    assert ids(desc) == [30, 29, 28]
    where = anon.get("/ui/table", params={"ref": "feat", "table": "items", "where": "price > 2 AND id < 12"})
    assert sorted(ids(where)) == sorted(repo.read("items", "feat", where="price > 2 AND id < 12").column("id").to_pylist())
    teams = anon.get("/ui/table", params={"ref": "v1", "table": "teams"})
    assert teams.status_code == 200 and "ops" not in teams.text  # a tag reads the table as it was


def test_blame_page_names_each_rows_last_commit_and_cells_on_demand(repo, anon):
    blamed = {r["id"]: r["commit"] for r in repo.blame("items", ref="feat").to_pylist()}
    page = anon.get("/ui/blame", params={"ref": "feat", "table": "items", "per": "50"})
    assert page.status_code == 200
    rows = re.findall(r'<td class="key">(\d+)</td>\s*<td><a class="sha" href="/ui/commit/([0-9a-f]{64})"', page.text)
    assert {int(k): c for k, c in rows} == blamed
    cells = anon.get("/ui/blame", params={"ref": "feat", "table": "items", "cells": "1", "where": "id = 8"})
    expected = {r["column"]: r["commit"] for r in repo.blame("items", ref="feat", where="id = 8",
                                                              columns=["name", "price", "note"]).to_pylist()}
    got = re.findall(r'href="/ui/commit/([0-9a-f]{64})"', cells.text.split("<tbody>")[1])
    assert got == [expected["name"], expected["price"], expected["note"]]
    teams = anon.get("/ui/blame", params={"ref": "main", "table": "teams"})  # a two-column key
    assert teams.status_code == 200 and teams.text.count('<td class="key">') == 2 * repo.dataset("teams").count_rows()


def test_unknown_refs_tables_and_requests_answer_404_naming_them(anon):
    for path, params, named in [
        ("/ui/log", {"ref": "no-such-branch"}, "no-such-branch"),
        ("/ui/table", {"ref": "main", "table": "no_such_table"}, "no_such_table"),
        ("/ui/table", {"ref": "nowhere", "table": "items"}, "nowhere"),
        ("/ui/blame", {"ref": "main", "table": "ghost"}, "ghost"),
        ("/ui/compare", {"base": "main", "head": "phantom"}, "phantom"),
        ("/ui/compare", {"base": "main", "head": "feat", "table": "spectre"}, "spectre"),
        ("/ui/commit/" + "ab" * 32, {}, "ab" * 5),
        ("/ui/requests/4242", {}, "4242"),
        ("/ui/requests/abc", {}, "abc"),
        ("/ui/nowhere/at/all", {}, "/ui/nowhere/at/all"),
    ]:
        page = anon.get(path, params=params)
        assert page.status_code == 404, (path, params, page.text[:500])
        assert named in error_of(page), (path, error_of(page))


def test_every_value_is_escaped_and_nothing_comes_from_another_origin(repo, anon):
    pages = [anon.get("/ui/table", params={"ref": "main", "table": "items"}),
             anon.get("/ui/compare", params={"base": "v1", "head": "feat", "mode": "two-dot"}),
             anon.get("/ui/blame", params={"ref": "main", "table": "items", "where": "id = 3"}),
             anon.get("/ui/table", params={"ref": "main", "table": "items", "where": "name = '<script>'"})]
    for page in pages:
        assert page.status_code == 200
        assert SCRIPT not in page.text and IMG not in page.text and "<script>window" not in page.text
        assert re.findall(r"<script\b[^>]*>", page.text) == ['<script src="/ui/static/pages.js" defer>']
        assert not re.search(r'(src|href|action)="(https?:)?//', page.text)  # nothing from another origin
        csp = page.headers["content-security-policy"]
        assert "default-src 'self'" in csp and "unsafe-inline" not in csp
        assert page.headers["x-content-type-options"] == "nosniff" and page.headers["x-frame-options"] == "DENY"
        assert ' style="' not in page.text and "<style" not in page.text  # nothing inline for the CSP to allow
    assert html.escape(SCRIPT, quote=False) in pages[0].text
    for asset in ("pages.css", "pages.js", "favicon.svg"):
        got = anon.get(f"/ui/static/{asset}")
        assert got.status_code == 200 and "http" not in got.text.replace("http://www.w3.org/2000/svg", "")


# ------------------------------------------------------------------------------- sign-in, actions
def test_sign_in_sets_a_strict_expiring_http_only_cookie(servers):
    url = servers[1].url
    with httpx.Client(base_url=url, timeout=60) as client:
        first = client.get("/ui/table?ref=main&table=items")
        assert first.status_code == 303 and first.headers["location"].startswith("/ui/login?next=")
        form = client.get(first.headers["location"])
        assert form.status_code == 200 and 'name="token"' in form.text
        bad = client.post("/ui/login", data={"csrf": csrf_of(form.text), "token": "x" * 20})
        assert bad.status_code == 401 and "not one of this server's tokens" in text(bad)
        no_csrf = client.post("/ui/login", data={"token": READ})
        assert no_csrf.status_code == 403
        good = client.post("/ui/login", data={"csrf": csrf_of(bad.text), "token": READ,
                                              "next": "/ui/table?ref=main&table=items"})
        assert good.status_code == 303 and good.headers["location"] == "/ui/table?ref=main&table=items"
        cookie = good.headers["set-cookie"]
        for attribute in ("HttpOnly", "SameSite=strict", "Max-Age=", "Path=/ui"):
            assert attribute.lower() in cookie.lower(), cookie
        assert client.get("/ui/table?ref=main&table=items").status_code == 200
    with httpx.Client(base_url=url, timeout=60) as client:
        form = client.get("/ui/login")
        away = client.post("/ui/login", data={"csrf": csrf_of(form.text), "token": READ, "next": "https://evil.example/"})
        assert away.headers["location"] == "/ui/"  # never a redirect to another site


def open_request(repo: trimerge.Repository, name: str, *, conflict: bool, into: str | None = None) -> tuple[int, str]:
    """A request from branch ``name`` into a fresh target branch (so main stays as the other tests
    read it), with a conflicting change to item 6's name on both when ``conflict``."""
    target = into or f"{name}-target"
    repo.branches.create(target, from_ref="main")
    repo.branches.create(name, from_ref="main")
    repo.upsert("items", items([6], f" by {name}"), branch=name)
    repo.upsert("items", items([11], " new price", price=9.0), branch=name)
    if conflict:
        repo.upsert("items", items([6], " on the target"), branch=target)
    return repo.requests.create(name, into=target, title=f"Change <{name}>", actor="alice").id, target


def test_a_write_token_resolves_approves_and_merges_a_request(repo, servers):
    number, target = open_request(repo, "http-flow", conflict=True)
    with signed_in(servers[1].url, REVIEWER) as bob:
        page = bob.get(f"/ui/requests/{number}")
        assert page.status_code == 200
        for label in ("Approve", "Request changes", "Merge"):
            assert f">{label}</button>" in page.text
        assert "Cannot merge yet" in page.text and "on the target" in page.text
        token = csrf_of(page.text)
        tip = re.search(r'name="commit" value="([0-9a-f]+)"', page.text).group(1)
        refused = bob.post(f"/ui/requests/{number}", data={"csrf": token, "action": "merge"})
        assert refused.status_code == 409 and "conflict" in error_of(refused)
        assert repo.requests.get(number).state == "open"
        approved = bob.post(f"/ui/requests/{number}", data={"csrf": token, "action": "approve", "commit": tip,
                                                           "comment": "looks <fine>"})
        assert approved.status_code == 303
        assert [(r.actor, r.verdict, r.comment) for r in repo.requests.get(number).reviews] == \
            [("bob", "approve", "looks <fine>")]
        page = bob.get(f"/ui/requests/{number}")
        assert "approved" in page.text and "looks &lt;fine&gt;" in page.text
        ident = re.search(r'name="conflict-0" value="([^"]+)"', page.text).group(1)
        columns = re.search(r'name="columns-0" value="([^"]+)"', page.text).group(1)
        merged = bob.post(f"/ui/requests/{number}", data={
            "csrf": token, "action": "merge", "conflict-0": html.unescape(ident), "columns-0": html.unescape(columns),
            "choice-0-name": "value", "value-0-name": "typed in the browser"})
        assert merged.status_code == 303, merged.text
        done = repo.requests.get(number)
        assert done.state == "merged" and done.merged_by == "bob"
        assert repo.entity("items", 6, ref=target)["name"] == "typed in the browser"
        assert repo.entity("items", 11, ref=target)["price"] == 99.0
        assert "merged into" in bob.get(f"/ui/requests/{number}").text


def test_read_tokens_and_narrow_globs_see_no_action_and_are_refused(repo, servers):
    number, target = open_request(repo, "scoped", conflict=False)
    before = state(repo)
    for token in (READ, FEAT):
        with signed_in(servers[1].url, token) as client:
            page = client.get(f"/ui/requests/{number}")
            if token == FEAT:  # dave may name feat* only: the request's branches are not his
                assert page.status_code == 403
                assert "scoped" not in client.get("/ui/requests?state=all").text
            else:
                assert page.status_code == 200
                body = page.text.split("</header>")[1]
                assert 'method="post"' not in body and "Approve" not in body and ">Merge<" not in body
            csrf = csrf_of(client.get("/ui/").text)
            for action in ("approve", "merge", "close", "enqueue"):
                answer = client.post(f"/ui/requests/{number}", data={"csrf": csrf, "action": action})
                assert answer.status_code == 403, (token, action)
            made = client.post("/ui/requests", data={"csrf": csrf, "source": "scoped", "into": target, "title": "x"})
            assert made.status_code == 403
    assert state(repo) == before


def test_forged_and_replayed_posts_change_nothing(repo, servers):
    number, _ = open_request(repo, "forged", conflict=False)
    before = state(repo)
    url = servers[1].url
    with signed_in(url, WRITE) as alice:
        page = alice.get(f"/ui/requests/{number}")
        token = csrf_of(page.text)
        assert alice.post(f"/ui/requests/{number}", data={"action": "close"}).status_code == 403  # no CSRF token
        assert alice.post(f"/ui/requests/{number}", data={"action": "close", "csrf": "x" * 32}).status_code == 403
        other = alice.post(f"/ui/requests/{number}", data={"action": "close", "csrf": token},
                           headers={"Origin": "https://evil.example"})
        assert other.status_code == 403 and "another site" in error_of(other)
        cookie = alice.cookies.get("trimerge_ui")
        assert alice.post("/ui/logout", data={"csrf": token}).status_code == 303
    with httpx.Client(base_url=url, timeout=60, cookies={"trimerge_ui": cookie}) as replay:
        again = replay.post(f"/ui/requests/{number}", data={"action": "close", "csrf": token})
        assert again.status_code == 401 and "ended" in error_of(again)
        assert replay.get("/ui/").status_code == 401
    forged_cookie = cookie[:-4] + ("AAAA" if not cookie.endswith("AAAA") else "BBBB")
    with httpx.Client(base_url=url, timeout=60, cookies={"trimerge_ui": forged_cookie}) as forger:
        answer = forger.post(f"/ui/requests/{number}", data={"action": "close", "csrf": token})
        assert answer.status_code == 401 and "not one this server signed" in error_of(answer)
        page = forger.get("/ui/")
        assert page.status_code == 401 and "sign in" in error_of(page)
    with httpx.Client(base_url=servers[0].url, timeout=60) as local:  # no tokens: CSRF still guards every POST
        assert local.post(f"/ui/requests/{number}", data={"action": "close"}).status_code == 403
        local.get("/ui/")
        assert local.post(f"/ui/requests/{number}", data={"action": "close"}).status_code == 403
    assert state(repo) == before


def test_a_request_opened_from_the_compare_page(repo, servers):
    repo.branches.create("feat-ui", from_ref="main")
    repo.upsert("items", items([12], " via ui"), branch="feat-ui")
    with signed_in(servers[1].url, FEAT) as dave:  # writes feat*: may open a request into feat-target-ui
        repo.branches.create("feat-target-ui", from_ref="main")
        page = dave.get("/ui/compare", params={"base": "feat-target-ui", "head": "feat-ui"})
        assert "Open request" in page.text
        made = dave.post("/ui/requests", data={"csrf": csrf_of(page.text), "source": "feat-ui",
                                               "into": "feat-target-ui", "title": "From the <compare> page"})
        assert made.status_code == 303
        number = int(made.headers["location"].rsplit("/", 1)[1])
        r = repo.requests.get(number)
        assert (r.source, r.into, r.author, r.title) == ("feat-ui", "feat-target-ui", "dave", "From the <compare> page")
        assert "Open request" not in dave.get("/ui/compare", params={"base": "main", "head": "feat-ui"}).text


# ----------------------------------------------------------------------------------- bad input
def test_hostile_input_gets_a_page_saying_what_is_wrong_and_changes_nothing(repo, servers, anon):
    before = state(repo)
    long_where = "id = 1 OR " * 2000 + "id = 2"
    cases = [
        ("/ui/table", {"ref": "main", "table": "items", "where": "id = 1; DROP TABLE items"}, 400),
        ("/ui/table", {"ref": "main", "table": "items", "where": "nope > 1"}, 400),
        ("/ui/table", {"ref": "main", "table": "items", "where": "(" * 60 + "1" + ")" * 60}, 400),
        ("/ui/table", {"ref": "main", "table": "items", "where": "id = 1) OR (1 = 1"}, 400),
        ("/ui/blame", {"ref": "main", "table": "items", "where": "name = 'x' /* unterminated"}, 400),
        ("/ui/compare", {"base": "main", "head": "feat", "where": "price >"}, 400),
        ("/ui/table", {"ref": "main", "table": "items", "page": "0"}, 400),
        ("/ui/table", {"ref": "main", "table": "items", "page": "-3"}, 400),
        ("/ui/table", {"ref": "main", "table": "items", "page": "99999999999999999999"}, 400),
        ("/ui/table", {"ref": "main", "table": "items", "page": "١"}, 400),
        ("/ui/table", {"ref": "main", "table": "items", "page": "1000"}, 404),
        ("/ui/blame", {"ref": "main", "table": "items", "page": "1000"}, 404),
        ("/ui/log", {"ref": "main", "page": "1000"}, 404),
        ("/ui/table", {"ref": "main", "table": "items", "per": "0"}, 400),
        ("/ui/table", {"ref": "main", "table": "items", "per": "100000"}, 400),
        ("/ui/table", {"ref": "main", "table": "items", "sort": "nope"}, 400),
        ("/ui/table", {"ref": "main"}, 400),
        ("/ui/table", {"ref": "main\x00", "table": "items"}, 400),
        ("/ui/log", {"ref": "main~99"}, 404),
        ("/ui/log", {"ref": "../../../etc/passwd"}, 404),
        ("/ui/compare", {"base": "main"}, 400),
        ("/ui/compare", {"base": "main", "head": "feat", "mode": "four-dot"}, 400),
        ("/ui/compare", {"base": "main", "head": "feat", "page": "2"}, 400),
        ("/ui/requests", {"state": "sideways"}, 400),
        ("/ui/requests/0", {}, 404),
        ("/ui/requests/-1", {}, 404),
        ("/ui/requests/99999999999999999999999", {}, 404),
        ("/ui/table", {"ref": "main", "table": "items", "where": long_where}, 414),
        ("/ui/table", {"ref": "x" * 5000, "table": "items"}, 400),
    ]
    for path, params, status in cases:
        page = anon.get(path, params=params)
        assert page.status_code == status, (path, params, page.status_code, page.text[:800])
        message = error_of(page)
        assert message and "Traceback" not in page.text and len(message) < 2100, (path, message)
    twice = anon.get("/ui/table?ref=main&ref=feat&table=items")
    assert twice.status_code == 400 and "twice" in error_of(twice)
    for path in ("/ui/commit/abc%0A", "/ui/%00", "/ui/requests/1%0A", "/ui/log%0D%0AX-Injected:%201",
                 "/ui/" + "a" * 5000):
        odd = anon.get(path)  # (a path Starlette's routes cannot match, e.g. with CR LF, is the namespace's: 406)
        assert odd.status_code in (400, 404, 406) and "x-injected" not in odd.headers, path
        assert "Traceback" not in odd.text and (odd.status_code == 406 or "\n" not in error_of(odd))
    for method, path in (("PUT", "/ui/"), ("DELETE", "/ui/requests/1"), ("PATCH", "/ui/table")):
        refused = anon.request(method, path)
        assert refused.status_code == 405 and "pages answer GET" in error_of(refused)
    assert anon.get("/ui/static/../app.py").status_code == 404
    assert anon.get("/ui/static/%2e%2e/app.py").status_code == 404
    csrf = csrf_of(anon.get("/ui/compare", params={"base": "main", "head": "feat"}).text)
    weird = anon.post("/ui/requests/1", content=b"\xff\xfe" * 100, headers={"content-type": "application/json"})
    assert weird.status_code in (400, 403)
    junk = anon.post("/ui/requests", data={"csrf": csrf, "source": "feat", "into": "no-such-branch", "title": "t"})
    assert junk.status_code == 404 and "no-such-branch" in error_of(junk)
    empty = anon.post("/ui/requests", data={"csrf": csrf, "source": "feat", "into": "feat", "title": "t"})
    assert empty.status_code == 400
    bad_form = anon.post("/ui/requests/1", data={"csrf": csrf, "action": "merge", "conflict-0": "{not json",
                                                 "choice-0": "ours"})
    assert bad_form.status_code in (400, 404)
    assert state(repo) == before


def test_no_ui_leaves_the_pages_out(repo):
    (server,) = start(PageServer(repo.uri, "--no-ui"))
    try:
        answer = httpx.get(server.url + "/ui/", timeout=60)
        assert answer.status_code != 200 and "text/html" not in answer.headers.get("content-type", "")
    finally:
        code, log = server.stop()
    assert code == 0 and "Traceback" not in log
    assert "web view" not in server.proc.stdout.read()


def test_without_a_token_file_the_pages_stay_on_loopback(repo):
    proc = subprocess.run([sys.executable, "-m", "trimerge.cli", "-C", repo.uri, "serve", "--host", "0.0.0.0",
                           "--port", "0"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "loopback" in proc.stderr and "listening" not in proc.stdout


# --------------------------------------------------------------------------------- the pictures
@st.composite
def dags(draw: st.DrawFn) -> dict[str, list[str]]:
    n = draw(st.integers(1, 18))
    parents: dict[str, list[str]] = {}
    for i in range(n):
        earlier = [f"c{j}" for j in range(i)]
        k = draw(st.integers(0, min(2, len(earlier)))) if earlier else 0
        chosen = draw(st.lists(st.sampled_from(earlier), min_size=k, max_size=k, unique=True)) if k else []
        if i and not chosen and draw(st.booleans()):
            chosen = [earlier[-1]]
        parents[f"c{i}"] = chosen
    return parents


@settings(max_examples=150, deadline=None)
@given(dags())
def test_the_drawn_graph_puts_each_commit_in_the_lane_log_graph_does(parents):
    graph = DictGraph(parents, {c: float(i) for i, c in enumerate(parents)})
    children = Counter(p for ps in parents.values() for p in ps)
    tips = [c for c in parents if not children[c]]
    text_rows = [line for line in graph_lines(graph, tips, label=lambda c: c) if "*" in line]
    rows = layout(graph, tips, limit=1000)
    assert [r.commit_id for r in rows] == [line.split()[-1] for line in text_rows]
    assert [r.column for r in rows] == [line.index("*") // 2 for line in text_rows]
    for i, r in enumerate(rows):  # a line leaves the bottom where the next row's line enters the top
        if i + 1 < len(rows):
            bottoms = sorted({x2 for _, _, x2, y2, _ in r.lines if y2 == 28})
            tops = sorted({x1 for x1, y1, _, _, _ in rows[i + 1].lines if y1 == 0})
            assert bottoms == tops
    paged = layout(graph, tips, skip=3, limit=4)
    assert [(r.commit_id, r.column, r.lines) for r in paged] == [(r.commit_id, r.column, r.lines) for r in rows[3:7]]


@settings(max_examples=150, deadline=None)
@given(dags(), st.data())
def test_ahead_behind_counts_what_a_set_difference_counts(parents, data):
    graph = DictGraph(parents, {c: float(i) for i, c in enumerate(parents)})
    a, b = data.draw(st.sampled_from(sorted(parents))), data.draw(st.sampled_from(sorted(parents)))

    def ancestors(c: str) -> set[str]:
        out, todo = set(), [c]
        while todo:
            x = todo.pop()
            if x not in out:
                out.add(x)
                todo.extend(parents[x])
        return out

    assert ahead_behind(graph, a, b) == (len(ancestors(a) - ancestors(b)), len(ancestors(b) - ancestors(a)), False)
    capped = ahead_behind(graph, a, b, cap=1)
    assert capped[2] == (len(ancestors(a) - ancestors(b)) >= 1 or len(ancestors(b) - ancestors(a)) >= 1)


def test_resolutions_of_a_form_are_what_merge_reads():
    from trimerge.pages.review import resolutions_of

    ident = json.dumps(["row.update_update", "items", '{"id": 6}', None])
    table = resolutions_of({"conflict-0": ident, "columns-0": '["name", "price"]', "choice-0-name": "value",
                            "value-0-name": "42", "choice-0-price": "theirs",
                            "conflict-1": json.dumps(["row.update_delete", "items", '{"id": 7}', None]),
                            "columns-1": "[]", "choice-1": "ours"})
    assert isinstance(table, pa.Table)
    assert table.to_pylist() == [
        {"kind": "row.update_update", "table": "items", "key": '{"id": 6}', "column": "name", "resolution": "value",
         "value": '{"name": 42}'},
        {"kind": "row.update_update", "table": "items", "key": '{"id": 6}', "column": "price",
         "resolution": "theirs", "value": None},
        {"kind": "row.update_delete", "table": "items", "key": '{"id": 7}', "column": "", "resolution": "ours",
         "value": None}]
    assert resolutions_of({"conflict-0": ident, "columns-0": '["name"]'}) is None  # nothing chosen


def test_sessions_expire_end_and_refuse_forged_cookies():
    import time

    from trimerge.pages.sessions import Sessions
    from trimerge.serve.tokens import parse_tokens

    grant = parse_tokens(f"{WRITE} write * alice")[0]
    sessions = Sessions(seconds=2, anonymous_seconds=1)
    signed, cookie = sessions.start(grant, signed_in=True)
    anonymous, other = sessions.start()
    assert sessions.find(cookie) == (signed, None) and sessions.find(other)[0] is anonymous
    assert sessions.csrf_ok(signed, signed.csrf) and not sessions.csrf_ok(signed, anonymous.csrf)
    assert not sessions.csrf_ok(signed, None) and not sessions.csrf_ok(signed, "")
    assert "not one this server signed" in sessions.find(cookie[:-1] + ("A" if cookie[-1] != "A" else "B"))[1]
    assert "not one this server signed" in Sessions().find(cookie)[1]  # another run's key
    assert "not one this server signed" in sessions.find("\udcff\x00" * 10)[1]
    time.sleep(1.2)
    assert sessions.find(other) == (None, "your session has expired: sign in again")  # the server's expiry
    assert sessions.find(cookie)[0] is signed
    time.sleep(1.5)
    assert sessions.find(cookie) == (None, "your session has expired: sign in again")  # past both ages
    again, cookie = sessions.start(grant, signed_in=True)
    sessions.end(again)
    assert sessions.find(cookie)[0] is None and "ended" in sessions.find(cookie)[1]
