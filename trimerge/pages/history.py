"""The repository home, the log with its graph, and the commit page.

Each asks the repository what the CLI asks for the same answer: ``log`` walks
:meth:`Repository.iter_log` lazily (a page of 100 commits of a 10,000-commit history reads the
commits up to that page), the commit page diffs a commit with its first parent as ``show`` does.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Any

from trimerge.lineage.commit import Commit
from trimerge.lineage.history import graph as graphalg
from trimerge.pages.compare import diff_sections
from trimerge.pages.errors import PageNotFoundError
from trimerge.pages.lanes import ROW_HEIGHT, layout
from trimerge.pages.site import Ask, Page, Site

__all__ = ["MAX_COUNT", "ahead_behind", "commit_page", "home_page", "log_page"]

MAX_COUNT = 1000  # ahead/behind counts stop here ("1000+"): the home page stays cheap on old branches
RECENT = 10


def ahead_behind(graph: graphalg.CommitGraph, tip: str, base: str, cap: int = MAX_COUNT) -> tuple[int, int, bool]:
    """(commits on ``tip`` not on ``base``, commits on ``base`` not on ``tip``, capped): one walk from
    both, newest generation first, that stops once every commit still queued is on both sides."""
    flags: dict[str, int] = {tip: 1}
    flags[base] = flags.get(base, 0) | 2
    heap = [(-graph.generation(c), c) for c in flags]
    heapq.heapify(heap)
    open_sides = sum(1 for f in flags.values() if f != 3)
    counts = {1: 0, 2: 0}
    seen: set[str] = set()
    while heap and open_sides:
        _, c = heapq.heappop(heap)
        if c in seen:
            continue
        seen.add(c)
        f = flags[c]
        if f != 3:
            open_sides -= 1
            counts[f] += 1
            if counts[f] >= cap:
                return counts[1], counts[2], True
        for p in graph.parents(c):
            old = flags.get(p)
            new = (old or 0) | f
            if old is None:
                flags[p] = new
                heapq.heappush(heap, (-graph.generation(p), p))
                open_sides += new != 3
            elif new != old:
                flags[p] = new
                open_sides -= old != 3 and new == 3 and p not in seen
    return counts[1], counts[2], False


@dataclass
class BranchLine:
    name: str
    tip: Commit
    ahead: int
    behind: int
    capped: bool
    protected: bool
    default: bool


def home_page(site: Site, ask: Ask) -> Page:
    """``/ui/``: branches (ahead/behind the default branch), tags, tables, recent commits, open requests."""
    repo = site.repo
    ref = site.default_ref
    head = repo.resolve(ref)
    branches = []
    for b in sorted(repo.branches.list(), key=lambda b: (b.name != ref, b.name)):
        if not ask.may_name(b.name):
            continue
        ahead, behind, capped = ahead_behind(repo.graph, b.commit_id, head.id)
        branches.append(BranchLine(b.name, repo.commit(b.commit_id), ahead, behind, capped, b.protected, b.name == ref))
    tags = [(t, repo.commit(t.commit_id)) for t in repo.tags.list()] if ask.may_name("*") else []
    tables = []
    if ask.may_name(ref):
        for name in sorted(head.tables):
            tv = head.tables[name]
            ds = repo.open_table_version(tv)
            tables.append({"name": name, "rows": ds.count_rows(), "key": list(tv.primary_key),
                           "columns": len(ds.schema.names)})
    recent = list(repo.iter_log(ref, limit=RECENT)) if ask.may_name(ref) else []
    api = site.requests
    requests = [r for r in api.list(state="open") if ask.may_name(r.into) and ask.may_name(r.source)] if api else None
    return Page("home.html", {"title": "Repository", "ref": ref, "head": head, "branches": branches, "tags": tags,
                              "tables": tables, "recent": recent, "requests": requests, "labels": _labels(site, ask),
                              "short": repo.short_id})


def _labels(site: Site, ask: Ask) -> dict[str, list[tuple[str, str]]]:
    """Commit id -> its (kind, name) labels: branches and tags pointing at it."""
    repo = site.repo
    out: dict[str, list[tuple[str, str]]] = {}
    for b in repo.branches.list():
        if ask.may_name(b.name):
            out.setdefault(b.commit_id, []).append(("branch", b.name))
    if ask.may_name("*"):
        for t in repo.tags.list():
            out.setdefault(t.commit_id, []).append(("tag", t.name))
    return out


def log_page(site: Site, ask: Ask) -> Page:
    """``/ui/log?ref=R`` (``&all=1``: every branch; ``&first_parent=1``; ``&page=N``): the commits
    newest first, beside the graph drawn in lanes."""
    repo = site.repo
    every = ask.flag("all")
    ref = ask.text("ref") or site.default_ref
    first_parent = ask.flag("first_parent")
    page, per = ask.paging()
    if every:
        names = [b.name for b in repo.branches.list() if ask.may_name(b.name)]
        starts = [repo.resolve(n).id for n in names]
    else:
        ask.check_view(ref)
        starts = [repo.resolve(ref).id]
    rows = layout(repo.graph, starts, first_parent=first_parent, skip=(page - 1) * per, limit=per + 1)
    more = len(rows) > per
    rows = rows[:per]
    if not rows and page > 1:
        raise PageNotFoundError(f"page {page} of the log of {'every branch' if every else ref} is past the end")
    commits = [repo.commit(r.commit_id) for r in rows]
    query = {"ref": None if every else ref, "all": "1" if every else None, "first_parent": "1" if first_parent else None,
             "per": str(per) if per != 100 else None}
    return Page("log.html", {"title": f"Log of {'every branch' if every else ref}", "ref": ref, "every": every,
                             "first_parent": first_parent, "lines": list(zip(rows, commits)), "page": page,
                             "more": more, "row_height": ROW_HEIGHT, "labels": _labels(site, ask),
                             "query": {k: v for k, v in query.items() if v is not None}, "short": repo.short_id})


def commit_page(site: Site, ask: Ask, commit_id: str) -> Page:
    """``/ui/commit/ID``: message, actor, parents, then the diff with the first parent (per-table
    counts and bars, then the rows)."""
    ask.check_view(commit_id)
    repo = site.repo
    c = repo.resolve(commit_id)
    parents = [repo.commit(p) for p in c.parents]
    diff: dict[str, Any] | None = None
    if parents:
        diff = diff_sections(site, ask, parents[0].id, c.id, three_dot=False, link={}, anchor="#changes")
    added = [{"name": n, "rows": repo.open_table_version(tv).count_rows(), "key": list(tv.primary_key)}
             for n, tv in sorted(c.tables.items())] if not parents else []
    return Page("commit.html", {"title": f"Commit {repo.short_id(c.id)}", "commit": c, "parents": parents,
                                "diff": diff, "added": added, "labels": _labels(site, ask), "short": repo.short_id})
