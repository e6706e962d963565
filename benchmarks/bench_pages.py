"""The web view's pages (issue 52), timed in Chromium, beside the CLI command and the API call that
answer the same question.

Run: ``python benchmarks/bench_pages.py [--rows 4000000] [--commits 10000]``; ``--screenshots DIR``
instead takes the docs' screenshots (of ``trimerge demo``'s repository, with a merge request) into
DIR. Needs the ``serve`` extra, ``playwright`` and Debian's ``chromium`` (never ``playwright
install``).

A repository with ``big`` (``--rows`` rows), a branch ``change`` updating 0.1% of them, and a
branch ``busy`` of ``--commits`` one-row commits on a small table. ``trimerge serve`` runs in a
subprocess; for each page the browser's own navigation timing gives the time to first byte
(``responseStart - requestStart``) and to the rendered page (``loadEventEnd``), first visit and
median of the next pages (of a diff: pages the first one cached). Side by side: the CLI command
answering the same question (a new process: its start-up included) and the API call the page
makes, in this process (``--reuse`` times the repository of an earlier run again):

* home — ``trimerge branch list`` / ``repo.branches.list()`` + tables' row counts;
* log of ``busy`` — ``trimerge log --graph -n 100 busy`` / ``repo.log("busy", limit=100)``;
* compare ``main...change`` — ``trimerge diff main...change --limit 100`` / ``diff(...).tables["big"]``
  counts and its first 100 rows (a fresh diff each time); then compares that build a new diff on a
  warm server (two-dot, and each table alone);
* table page of ``big`` — ``trimerge read big --limit 100`` / ``repo.dataset("big").scanner(limit=100)``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

from common import WORK, fresh_dir, print_table

import trimerge
from trimerge.diff import diff

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
TIMING = """() => { const n = performance.getEntriesByType('navigation')[0];
                   return [n.responseStart - n.requestStart, n.loadEventEnd - n.startTime]; }"""


def big_table(ids: np.ndarray, salt: int = 0) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "a": pa.array(ids * 7 % 1000 + salt, pa.int64()),
                     "b": pa.array(ids / 3.0 + salt, pa.float64()),
                     "s": pa.array([f"row {i} {salt}" for i in ids.tolist()], pa.string())})


def build(root: Path, rows: int, commits: int) -> trimerge.Repository:
    repo = trimerge.Repository.init(str(root))
    t0 = time.perf_counter()
    chunk = 1_000_000
    repo.create_table("big", big_table(np.arange(0, min(rows, chunk))), primary_key="id")
    for start in range(chunk, rows, chunk):
        repo.append("big", big_table(np.arange(start, min(rows, start + chunk))))
    repo.create_table("tick", pa.table({"id": [0], "n": [0]}), primary_key="id")
    print(f"big: {rows:,} rows in {time.perf_counter() - t0:.1f} s", flush=True)
    repo.branches.create("change")
    rng = np.random.default_rng(52)
    picked = np.sort(rng.choice(rows, max(1, rows // 1000), replace=False))
    repo.upsert("big", big_table(picked, salt=1), branch="change", message="Reprice 0.1% of big")
    repo.branches.create("busy")
    t0 = time.perf_counter()
    for n in range(1, commits + 1):
        repo.upsert("tick", pa.table({"id": [n % 50], "n": [n]}), branch="busy", message=f"tick {n}")
        if n % 1000 == 0:
            print(f"busy: {n:,} commits, {time.perf_counter() - t0:.0f} s", flush=True)
    return repo


def start_server(root: Path) -> tuple[subprocess.Popen, str]:
    log = open(root.parent / "pages-serve.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "trimerge.cli", "-C", str(root), "serve", "--port", "0"],
                            stdout=subprocess.PIPE, stderr=log, text=True)
    line = proc.stdout.readline()
    if not line.startswith("listening on"):
        proc.kill()
        sys.exit(f"the server did not start: {line!r}")
    return proc, line.split()[-1]


def page_times(page, url: str, again: list[str]) -> tuple[float, float, float, float]:
    """(first ttfb, first rendered, median ttfb, median rendered) in seconds."""
    def visit(address: str) -> tuple[float, float]:
        answer = page.goto(address)
        assert answer is not None and answer.status == 200, (address, answer and answer.status)
        page.wait_for_load_state("load")
        ttfb, rendered = page.evaluate(TIMING)
        return ttfb / 1000, rendered / 1000

    first = visit(url)
    rest = [visit(a) for a in again]
    return (first[0], first[1], statistics.median(t for t, _ in rest), statistics.median(r for _, r in rest))


def cli_time(root: Path, *args: str) -> float:
    t0 = time.perf_counter()
    subprocess.run(["trimerge", "-C", str(root), *args], check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def api_time(fn, repeat: int = 3) -> float:
    runs = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - t0)
    return statistics.median(runs)


def bench(args: argparse.Namespace) -> None:
    from playwright.sync_api import sync_playwright

    root = (WORK / "pages" if args.reuse else fresh_dir("pages")) / "repo"
    repo = build(root, args.rows, args.commits) if not args.reuse else trimerge.Repository.open(str(root))
    proc, url = start_server(root)
    rows = []
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            ui = f"{url}/ui"
            cases = [
                ("home", f"{ui}/", [f"{ui}/"] * 3, ["branch", "list"],
                 lambda: (repo.branches.list(), [repo.dataset(t).count_rows() for t in repo.tables("main")])),
                (f"log of busy ({args.commits:,} commits)", f"{ui}/log?ref=busy",
                 [f"{ui}/log?ref=busy&page={n}" for n in (2, 3, 4)], ["log", "--graph", "-n", "100", "busy"],
                 lambda: repo.log("busy", limit=100)),
                ("compare main...change (0.1%)", f"{ui}/compare?base=main&head=change",
                 [f"{ui}/compare?base=main&head=change&table=big&page={n}" for n in (2, 3, 4)],
                 ["diff", "main...change", "--limit", "100"],
                 lambda: diff("main...change", repo=repo).tables["big"].head(100)),
                ("compare, a new diff (warm server)", f"{ui}/compare?base=main&head=change&mode=two-dot",
                 [f"{ui}/compare?base=main&head=change&mode=two-dot&table=big",
                  f"{ui}/compare?base=main&head=change&table=big"],
                 ["diff", "main..change", "--limit", "100"],
                 lambda: diff("main", "change", repo=repo).tables["big"].head(100)),
                (f"table big ({args.rows:,} rows)", f"{ui}/table?ref=main&table=big",
                 [f"{ui}/table?ref=main&table=big&page={n}" for n in (2, 5000, 39000)],
                 ["read", "big", "--limit", "100"],
                 lambda: repo.dataset("big").scanner(limit=100).to_table()),
            ]
            for name, first, again, cli, api in cases:
                ttfb, rendered, ttfb_warm, rendered_warm = page_times(page, first, again)
                rows.append({"page": name, "ttfb first": f"{ttfb:.3f}", "rendered first": f"{rendered:.3f}",
                             "ttfb next": f"{ttfb_warm:.3f}", "rendered next": f"{rendered_warm:.3f}",
                             "CLI " + " ".join(cli[:2]): f"{cli_time(root, *cli):.3f}", "API": f"{api_time(api):.3f}"})
                print(rows[-1], flush=True)
            browser.close()
    finally:
        proc.terminate()
        proc.wait(30)
    columns = list(rows[0].keys())
    print_table([{c: r.get(c, "") for c in columns} | {"CLI": next(v for k, v in r.items() if k.startswith("CLI "))}
                 for r in rows], ["page", "ttfb first", "rendered first", "ttfb next", "rendered next", "CLI", "API"])
    print("seconds; CLI: a new trimerge process (start-up included); API: the page's own call, in process")


def screenshots(target: Path) -> None:
    """The docs' screenshots: ``trimerge demo``'s repository and a merge request with a conflict."""
    from playwright.sync_api import sync_playwright

    work = fresh_dir("pages-shots")
    subprocess.run(["trimerge", "demo", str(work / "demo")], check=True, stdout=subprocess.DEVNULL)
    repo = trimerge.Repository.open(str(work / "demo"))
    repo.branches.create("rename-planes")
    repo.update("planes", pa.table({"tailnum": ["N102UW"], "manufacturer": ["AIRBUS INDUSTRIE"]}),
                branch="rename-planes", message="Airbus under its old name", actor="erin")
    repo.update("planes", pa.table({"tailnum": ["N102UW"], "manufacturer": ["AIRBUS GROUP"]}),
                message="Airbus under its group name", actor="carol")
    number = repo.requests.create("rename-planes", into="main", title="Airbus under its old name",
                                  body="The 1990s registry spells it this way.", actor="erin").id
    repo.requests.review(number, "request-changes", comment="main renamed it since: pick one", actor="bob")
    proc, url = start_server(work / "demo")
    target.mkdir(parents=True, exist_ok=True)
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            for width, pages in ((1280, [("home", "/ui/"), ("log", "/ui/log?all=1"),
                                         ("compare", "/ui/compare?base=v1&head=fix-planes&table=planes"),
                                         ("table", "/ui/table?ref=main&table=planes"),
                                         ("blame", "/ui/blame?ref=main&table=planes&where=manufacturer LIKE 'AIRBUS%'"),
                                         ("request", f"/ui/requests/{number}")]),
                                 (390, [("compare-phone", "/ui/compare?base=v1&head=fix-planes&table=planes")])):
                page = browser.new_page(viewport={"width": width, "height": 900})
                for name, path in pages:
                    page.goto(url + path)
                    page.wait_for_load_state("load")
                    page.screenshot(path=str(target / f"{name}.png"), full_page=name in ("home", "log", "request"))
                    print(target / f"{name}.png")
            browser.close()
    finally:
        proc.terminate()
        proc.wait(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=4_000_000)
    parser.add_argument("--commits", type=int, default=10_000)
    parser.add_argument("--reuse", action="store_true", help="time the repository an earlier run built")
    parser.add_argument("--screenshots", type=Path, default=None, help="take the docs' screenshots into this folder")
    args = parser.parse_args()
    if not Path(CHROMIUM).exists():
        sys.exit(f"no Chromium at {CHROMIUM}: apt-get install -y chromium")
    os.environ.setdefault("TRIMERGE_ACTOR", "bench")
    if args.screenshots is not None:
        screenshots(args.screenshots)
    else:
        bench(args)


if __name__ == "__main__":
    main()
