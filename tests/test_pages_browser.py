"""The web view (issue 52) in a real browser: Debian's Chromium driven by Playwright
(``executable_path``; Playwright's own browser download is never used).

Open the home, follow a branch, open a compare page and check the highlighted cells; resolve a
conflict, approve and merge a request as a write-token user; a read-token user sees no action and a
forged POST without the CSRF token is refused; a ``<script>`` cell stays text; the pages fit at
1280 px and 390 px. Without Chromium these tests skip — except under CI (``CI=true``), where a
missing browser fails them. (The docs' screenshots: ``python benchmarks/bench_pages.py --screenshots
docs/images``.)
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Iterator

import pytest

import trimerge
from pagesite import READ, REVIEWER, SCRIPT, IMG, PageServer, build, items, start, tokens_file

pytestmark = pytest.mark.browser
CHROMIUM = os.environ.get("TRIMERGE_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"


def _need(what: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"{what} (CI must run the browser tests: .ci/run installs chromium and playwright)")
    pytest.skip(what)


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    if not Path(CHROMIUM).exists():
        _need(f"no Chromium at {CHROMIUM} (apt-get install -y chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _need("playwright is not installed (pip install playwright)")
    with sync_playwright() as p:
        launched = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield launched
        launched.close()


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> trimerge.Repository:
    return build(str(tmp_path_factory.mktemp("pages-browser") / "repo"))


@pytest.fixture(scope="module")
def servers(repo, tmp_path_factory):
    tokens = tokens_file(tmp_path_factory.mktemp("tokens"))
    both = start(PageServer(repo.uri), PageServer(repo.uri, "--token-file", tokens))
    yield both
    for one in both:
        code, log = one.stop()
        assert code == 0 and "Traceback" not in log and "pages:" not in log, log


def new_page(browser, width: int = 1280):
    context = browser.new_context(viewport={"width": width, "height": 900})
    page = context.new_page()
    page.on("dialog", lambda dialog: dialog.accept())  # the Merge button asks once
    return page


def sign_in(page, url: str, token: str) -> None:
    page.goto(f"{url}/ui/login")
    page.fill("input[name=token]", token)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_load_state()
    assert "/ui/login" not in page.url, page.content()[:2000]


def test_home_follow_a_branch_and_compare_with_highlighted_cells(browser, repo, servers):
    url = servers[0].url
    page = new_page(browser)
    page.goto(f"{url}/ui/")
    assert page.get_by_role("heading", name="Branches").is_visible()
    page.locator("a.branch", has_text="feat").click()
    page.wait_for_url("**/ui/log?ref=feat")
    assert page.locator("table.log tr").count() == len(repo.log("feat"))
    assert page.locator("table.log svg line").count() > 0
    page.goto(f"{url}/ui/")
    page.get_by_role("link", name="compare").first.click()
    page.wait_for_url("**/ui/compare?*")
    expected = {}
    for r in trimerge.diff.diff("main...feat", repo=repo).tables["items"].rows().to_pylist():
        if r["change"] == "update":
            for col in r["changed_columns"]:
                expected[(str(r["id"]), col)] = str(r["after"][col])
    after_rows = page.locator("tr.row-after")
    got = {}
    for i in range(after_rows.count()):
        row = after_rows.nth(i)
        key = row.locator("td.key").first.inner_text()
        for j in range(row.locator("td.changed").count()):
            cell = row.locator("td.changed").nth(j)
            got[(key, cell.get_attribute("data-column"))] = cell.inner_text()
    assert got == expected
    changed = page.locator("tr.row-after td.changed").first
    plain = page.locator("tr.row-after td:not(.changed):not(.key):not(.mark)").first
    colour = "el => getComputedStyle(el).backgroundColor"
    assert changed.evaluate(colour) != plain.evaluate(colour)  # the highlight is drawn, not only a class
    assert page.locator("svg.bars rect").count() >= 3


def test_a_script_cell_is_inert_text(browser, servers):
    page = new_page(browser)
    alerts: list[str] = []
    page.on("dialog", lambda dialog: (alerts.append(dialog.message), dialog.dismiss()))
    for path in ("/ui/table?ref=main&table=items", "/ui/compare?base=v1&head=feat&mode=two-dot",
                 "/ui/blame?ref=main&table=items"):
        page.goto(servers[0].url + path)
        page.wait_for_load_state("load")
        assert page.evaluate("window.pwned") is None and not alerts
        if "blame" not in path:  # (blame shows keys and commits, not names)
            assert page.get_by_text(SCRIPT, exact=True).count() >= 1, path
            assert page.get_by_text(IMG, exact=True).count() >= 1, path


def open_conflicting_request(repo: trimerge.Repository) -> tuple[int, str]:
    repo.branches.create("browser-target", from_ref="main")
    repo.branches.create("browser-fix", from_ref="main")
    repo.upsert("items", items([6], " from the fix"), branch="browser-fix")
    repo.upsert("items", items([6], " on the target"), branch="browser-target")
    repo.upsert("items", items([13], " priced", price=3.0), branch="browser-fix")
    return repo.requests.create("browser-fix", into="browser-target", title="Fix item <6>", actor="alice").id, \
        "browser-target"


def test_resolve_a_conflict_approve_and_merge_as_a_write_token_user(browser, repo, servers):
    number, target = open_conflicting_request(repo)
    url = servers[1].url
    page = new_page(browser)
    sign_in(page, url, REVIEWER)
    page.goto(f"{url}/ui/requests/{number}")
    assert "Cannot merge yet" in page.locator("#mergeable").inner_text()
    page.fill("form.review textarea[name=comment]", "one conflict: I typed the name")
    page.get_by_role("button", name="Approve").click()
    page.wait_for_load_state()
    assert "approved" in page.locator(".notice").inner_text()
    assert [(r.actor, r.verdict) for r in repo.requests.get(number).reviews] == [("bob", "approve")]
    typed = page.locator("#conflict-0 input.typed")
    typed.fill('"item6 settled"')
    assert page.locator("#conflict-0 input[type=radio][value=value]").is_checked()  # typing chose "value"
    page.get_by_role("button", name="Merge", exact=True).click()
    page.wait_for_load_state()
    assert "merged into browser-target" in page.locator(".notice").inner_text(), page.content()[:3000]
    r = repo.requests.get(number)
    assert r.state == "merged" and r.merged_by == "bob"
    assert repo.entity("items", 6, ref=target)["name"] == "item6 settled"
    assert repo.entity("items", 13, ref=target)["name"] == "item13 priced"


def test_a_read_token_sees_no_action_and_a_forged_post_is_refused(browser, repo, servers):
    repo.branches.create("read-view", from_ref="main")
    repo.upsert("items", items([14], " read"), branch="read-view")
    number = repo.requests.create("read-view", into="main", title="For readers", actor="alice").id
    url = servers[1].url
    page = new_page(browser)
    sign_in(page, url, READ)
    page.goto(f"{url}/ui/requests/{number}")
    assert page.get_by_role("heading", name="Reviews").is_visible()
    for label in ("Approve", "Request changes", "Merge", "Close request"):
        assert page.get_by_role("button", name=label, exact=True).count() == 0
    assert "trimerge_ui" not in page.evaluate("document.cookie")  # HttpOnly: no script reads the session
    before = repo.requests.get(number)
    forged = page.context.request.post(f"{url}/ui/requests/{number}", form={"action": "approve"})
    assert forged.status == 403
    writer = new_page(browser)
    sign_in(writer, url, REVIEWER)
    no_token = writer.context.request.post(f"{url}/ui/requests/{number}", form={"action": "approve"})
    assert no_token.status == 403 and "CSRF" in no_token.text()
    assert repo.requests.get(number).to_json() == before.to_json()


@pytest.mark.parametrize("width", [1280, 390])
def test_pages_fit_at_desktop_and_phone_widths(browser, servers, width):
    page = new_page(browser, width)
    url = servers[0].url
    for path in ("/ui/", "/ui/log?all=1", "/ui/compare?base=main&head=feat", "/ui/table?ref=main&table=items",
                 "/ui/blame?ref=main&table=items", "/ui/requests?state=all", "/ui/commit/feat"):
        page.goto(url + path)
        page.wait_for_load_state("load")
        assert page.locator("h1").is_visible()
        overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 1, (path, width, overflow)  # wide tables scroll inside their box, not the page
        box = page.locator("header.top nav").bounding_box()
        assert box is not None and box["x"] + box["width"] <= width
