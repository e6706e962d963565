"""The compare page, and the diff part of the commit and request pages.

A diff is :func:`trimerge.diff.diff`, the call ``trimerge diff`` makes: per table the counts
(added, removed, modified rows; updated rows per column; schema changes) and then one page of the
changed rows, streamed from :meth:`TableDiff.iter_batches` — the diff's own rows, built at the cost
of the change and never turned into one table here. Diffs are cached by the commit ids they compare
(commits never change), so the next page of a diff reads the rows the first page built.

Rows are shown the way a pull request shows them: an inserted row once (green), a deleted row once
(red), an updated row as its before and after lines with the changed cells marked; the columns the
change touched come first, most changed first.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence
from urllib.parse import urlencode

from trimerge.diff.api import Diff, diff
from trimerge.diff.engine import TableDiff
from trimerge.pages.cells import Cell, cell
from trimerge.pages.errors import BadRequestError, PageNotFoundError
from trimerge.pages.site import DEFAULT_PER_PAGE, Ask, Page, Site

__all__ = ["DiffRow", "RowsPage", "TableSummary", "compare_page", "diff_sections", "rows_page"]

MAX_ROW_SECTIONS = 5  # tables whose first rows a multi-table diff shows inline (others: a link each)


@dataclass
class TableSummary:
    """One table's line of the summary and its bars."""

    name: str
    status: str
    inserted: int = 0
    deleted: int = 0
    updated: int = 0
    cells_changed: int = 0
    by_column: list[tuple[str, int]] = field(default_factory=list)
    schema_changes: list[str] = field(default_factory=list)

    @property
    def rows_changed(self) -> int:
        return self.inserted + self.deleted + self.updated


@dataclass
class DiffRow:
    """One changed row: its key cells and, per shown column, the before and after cells."""

    change: str  # insert | delete | update
    key: list[Cell]
    before: list[Cell] | None
    after: list[Cell] | None
    changed: list[bool]  # per shown column: a changed cell


@dataclass
class RowsPage:
    """One page of a table's changed rows."""

    table: str
    key: list[str]
    columns: list[str]
    rows: list[DiffRow]
    page: int
    per: int
    total: int

    @property
    def pages(self) -> int:
        return max(1, -(-self.total // self.per))


def summarize(td: TableDiff) -> TableSummary:
    """The counts of one table (:attr:`TableDiff.counts`; a table that did not move costs nothing)."""
    s = TableSummary(td.name, td.status)
    if td.storage_status == "unchanged":
        return s
    c = td.counts
    s.inserted, s.deleted, s.updated, s.cells_changed = c.inserted, c.deleted, c.updated, c.cells_changed
    s.by_column = sorted(c.by_column.items(), key=lambda kv: (-kv[1], kv[0]))
    s.schema_changes = [_schema_text(x.to_json()) for x in td.schema_changes]
    return s


def _schema_text(change: dict[str, Any]) -> str:
    kind, column, before, after = change["kind"], change["column"], change["before"], change["after"]
    if kind == "added":
        return f"column {column} added ({after})"
    if kind == "dropped":
        return f"column {column} dropped (was {before})"
    return f"column {column}: {kind.replace('_', ' ')} {before} -> {after}"


def _shown_columns(td: TableDiff, summary: TableSummary) -> tuple[list[str], list[str]]:
    """(key, value columns): the columns the change touched first, most changed first."""
    key, common, added = td.compared_columns()
    schema = td.before_snapshot.schema if td.before_snapshot.tv else None
    before = [n for n in (schema.names if schema is not None else []) if n not in key]
    every = list(dict.fromkeys([*common, *added, *before]))
    touched = [c for c, _ in summary.by_column if c in every]
    return key, touched + [c for c in every if c not in touched]


def rows_page(td: TableDiff, summary: TableSummary, page: int, per: int) -> RowsPage:
    """Rows ``(page-1)*per`` .. ``page*per`` of the diff, streamed (the rows before are skipped by count)."""
    key, columns = _shown_columns(td, summary)
    total = summary.rows_changed
    if td.storage_status == "unchanged" or total == 0:
        if page > 1:
            raise PageNotFoundError(f"page {page} of table {td.name}'s changes is past the end (no changed rows)")
        return RowsPage(td.name, key, columns, [], 1, per, 0)
    if (page - 1) * per >= total:
        raise PageNotFoundError(f"page {page} of table {td.name}'s changes is past the end "
                                f"({total:,} changed rows: {-(-total // per):,} pages of {per})")
    skip = (page - 1) * per
    found: list[dict[str, Any]] = []
    for batch in td.iter_batches(max_rows=max(per, 4096)):
        if skip >= batch.num_rows:
            skip -= batch.num_rows
            continue
        found.extend(batch.slice(skip, per - len(found)).to_pylist())
        skip = 0
        if len(found) >= per:
            break
    return RowsPage(td.name, key, columns, [_diff_row(r, key, columns) for r in found], page, per, total)


def _diff_row(r: dict[str, Any], key: list[str], columns: list[str]) -> DiffRow:
    change = r["change"]
    before, after = r.get("before"), r.get("after")
    named = set(r.get("changed_columns") or [])
    if change == "update":
        changed = [c in named for c in columns]
    else:
        changed = [True] * len(columns)
    side = lambda values: None if values is None else [cell(values.get(c)) if c in values else Cell("", null=True)
                                                        for c in columns]  # noqa: E731
    return DiffRow(change, [cell(r.get(k)) for k in key], side(before) if change != "insert" else None,
                   side(after) if change != "delete" else None, changed)


def cached_diff(site: Site, before: str, after: str, three_dot: bool, where: str | None,
                tables: Sequence[str] | None) -> tuple[Diff, Any]:
    """The diff of two commit ids (or ``before...after``), from the cache when a page asked before."""
    repo = site.repo
    key = (before, after, three_dot, where, tuple(tables) if tables else None)

    def build() -> Diff:
        if three_dot:
            return diff(f"{before}...{after}", repo=repo, tables=tables, engine="local", where=where)
        return diff(before, after, repo=repo, tables=tables, engine="local", where=where)

    return site.diffs.get(key, build)


def diff_sections(site: Site, ask: Ask, before: str, after: str, *, three_dot: bool, link: dict[str, str | None],
                  anchor: str = "") -> dict[str, Any]:
    """What a diff shows on any page: the per-table summary, the bars, and pages of rows — of the
    table ``table=`` names (with ``page=``, ``per=``) or of the first changed tables."""
    where = ask.text("where")
    where = where if where and where.strip() else None
    only = ask.text("table")
    page, per = ask.paging()
    d, lock = cached_diff(site, before, after, three_dot, where, [only] if only else None)
    with lock:  # a diff builds its rows once: pages of the same diff wait for the first
        summaries = [summarize(td) for _, td in sorted(d.tables.items())]
        changed = [s for s in summaries if s.status != "unchanged"]
        shown = [s for s in changed if only is None or s.name == only][:1 if only else MAX_ROW_SECTIONS]
        if only is None and page > 1:
            raise BadRequestError("page= pages one table's rows: name it with table=...")
        sections = [rows_page(d.tables[s.name], s, page if only else 1, per) for s in shown]
    keep: dict[str, str] = {k: v for k, v in link.items() if v is not None}
    if per != DEFAULT_PER_PAGE:
        keep["per"] = str(per)
    base_link = {**keep, **({"where": where} if where else {})}

    def href(**extra: Any) -> str:
        params = {**base_link, **{k: str(v) for k, v in extra.items() if v is not None}}
        return "?" + urlencode(params) + anchor

    def table_href(name: str) -> Any:
        return lambda **extra: href(table=name, **extra)

    biggest = max([s.rows_changed for s in changed] + [1])
    return {"summaries": summaries, "changed": changed, "sections": sections, "where": where or "", "only": only,
            "more_tables": [s for s in changed if s not in shown], "href": href, "table_href": table_href,
            "keep": keep, "biggest": biggest, "before_commit": d.before, "after_commit": d.after, "per": per}


def compare_page(site: Site, ask: Ask) -> Page:
    """``/ui/compare?base=A&head=B`` (three-dot: what merging B into A would bring, as a pull request
    compares; ``&mode=two-dot``: A's tip against B's)."""
    base = ask.text("base", required=True)
    head = ask.text("head", required=True)
    assert base is not None and head is not None
    mode = ask.text("mode", "three-dot")
    if mode not in ("three-dot", "two-dot"):
        raise BadRequestError(f"mode= is three-dot or two-dot, not {mode!r}")
    ask.check_view(base, head)
    repo = site.repo
    a, b = repo.resolve(base), repo.resolve(head)
    three = mode == "three-dot"
    link = {"base": base, "head": head, "mode": None if three else "two-dot"}
    data = diff_sections(site, ask, a.id, b.id, three_dot=three, link=link)
    return Page("compare.html", {"diff_data": data, "base": base, "head": head, "mode": mode, "base_commit": a,
                                 "head_commit": b, "merge_base": data["before_commit"] if three else None,
                                 "requests": site.requests is not None,
                                 "title": f"Compare {base}{'...' if three else '..'}{head}"})
