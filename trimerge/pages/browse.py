"""The table browser and blame pages: one page of rows at any ref, read by Lance's own paging.

A page is one ``scanner(limit=, offset=, filter=, order_by=)`` of the table's Lance dataset at the
ref's version (:meth:`Repository.dataset`, what ``trimerge read`` reads from): a page of a 4M-row
table reads about what a ``read`` of 100 rows reads. ``where`` is checked and planned as ``read``
checks it (:func:`trimerge.lineage.tables.filters.check_filter`, ``plan_filter``) before any row is
read.

Blame is :meth:`Repository.blame`, restricted to the page's rows by a filter on their keys: a page
of blame costs what blaming 100 rows costs, never the whole table (the CLI's ``blame --where``).
Cell-level blame (``cells=1``) blames every value column of those rows.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from lance.dataset import ColumnOrdering

from trimerge.lineage.tables.conversion import sql_literal
from trimerge.lineage.tables.filters import check_filter, plan_filter
from trimerge.pages.cells import cell
from trimerge.pages.errors import BadRequestError, PageNotFoundError
from trimerge.pages.site import DEFAULT_PER_PAGE, Ask, Page, Site

__all__ = ["blame_page", "table_page"]


class _Links:
    """The addresses a table or blame page links to: itself with one parameter changed."""

    def __init__(self, **params: Any):
        self.params = {k: v for k, v in params.items() if v not in (None, "", False)}

    def _with(self, **changes: Any) -> str:
        params = {**self.params, **changes}
        return "?" + urlencode({k: "1" if v is True else str(v) for k, v in params.items() if v not in (None, "", False)})

    def page(self, n: int) -> str:
        return self._with(page=n)

    def sort(self, column: str) -> str:
        """Sort by ``column``; again on the sorted column: the other way."""
        same = self.params.get("sort") == column
        return self._with(sort=column, desc=same and not self.params.get("desc"), page=None)

    def cells(self, on: bool) -> str:
        return self._with(cells=on, page=None)


def _table_at(site: Site, ask: Ask) -> tuple[str, str, Any, Any]:
    """(ref, table, its TableVersion, its dataset) named by ``ref=`` and ``table=``."""
    ref = ask.text("ref") or site.default_ref
    table = ask.text("table", required=True)
    assert table is not None
    ask.check_view(ref)
    repo = site.repo
    tv = repo.table_version(table, ref)  # an unknown table: TableNotFoundError, naming the table and the ref
    return ref, table, tv, repo.open_table_version(tv)


def _where(ask: Ask, ds: Any, what: str) -> str | None:
    where = ask.text("where")
    if where is None or not where.strip():
        return None
    where = check_filter(where, "where")
    plan_filter(ds, where, what)
    return where


def _page_count(total: int, per: int, page: int, what: str) -> int:
    pages = max(1, -(-total // per))
    if page > pages:
        raise PageNotFoundError(f"page {page} of {what} is past the end ({total:,} rows: {pages:,} "
                                f"page{'s' if pages != 1 else ''} of {per})")
    return pages


def table_page(site: Site, ask: Ask) -> Page:
    """``/ui/table?ref=R&table=T`` (``&where=``, ``&sort=COLUMN``, ``&desc=1``, ``&page=``, ``&per=``)."""
    ref, table, tv, ds = _table_at(site, ask)
    page, per = ask.paging()
    where = _where(ask, ds, f"table {table}")
    sort = ask.text("sort")
    desc = ask.flag("desc")
    names = ds.schema.names
    if sort is not None and sort not in names:
        raise BadRequestError(f"sort=: table {table} has no column {sort!r} (columns: {', '.join(names)})")
    total = ds.count_rows(filter=where) if where else ds.count_rows()
    pages = _page_count(total, per, page, f"table {table} at {ref}{' where ' + where if where else ''}")
    key = list(tv.primary_key)
    columns = key + [n for n in names if n not in key]
    order = [ColumnOrdering(sort, ascending=not desc)] if sort else None
    rows = ds.scanner(columns=columns, filter=where, limit=per, offset=(page - 1) * per, order_by=order).to_table()
    shown = [[cell(v) for v in r.values()] for r in rows.to_pylist()]
    schema = [(f.name, str(f.type), f.name in key) for f in (ds.schema.field(c) for c in columns)]
    return Page("table.html", {"title": f"{table} at {ref}", "ref": ref, "table": table, "key": key,
                               "columns": columns, "schema": schema, "rows": shown, "total": total, "page": page,
                               "pages": pages, "per": per, "where": where or "", "sort": sort, "desc": desc,
                               "links": _Links(ref=ref, table=table, where=where, sort=sort, desc=desc,
                                               per=per if per != DEFAULT_PER_PAGE else None)})


def _name(column: str) -> str:
    """A column name quoted for a Lance filter."""
    return "`" + column.replace("`", "``") + "`"


def _keys_filter(key: list[str], rows: list[dict[str, Any]]) -> str | None:
    """A filter selecting exactly these keys (None when a key value has no SQL spelling)."""
    if not rows:
        return None
    if len(key) == 1:
        literals = [sql_literal(r[key[0]]) for r in rows]
        if any(lit is None for lit in literals):
            return None
        return f"{_name(key[0])} IN ({', '.join(str(lit) for lit in literals)})"
    terms = []
    for r in rows:
        parts = [(c, sql_literal(r[c])) for c in key]
        if any(lit is None for _, lit in parts):
            return None
        terms.append("(" + " AND ".join(f"{_name(c)} = {lit}" for c, lit in parts) + ")")
    return " OR ".join(terms)


def blame_page(site: Site, ask: Ask) -> Page:
    """``/ui/blame?ref=R&table=T``: each row's last commit, a page at a time (``&cells=1``: per cell)."""
    ref, table, tv, ds = _table_at(site, ask)
    page, per = ask.paging()
    where = _where(ask, ds, f"blame {table}")
    cells = ask.flag("cells")
    key = list(tv.primary_key)
    values = [n for n in ds.schema.names if n not in key]
    total = ds.count_rows(filter=where) if where else ds.count_rows()
    pages = _page_count(total, per, page, f"table {table} at {ref}{' where ' + where if where else ''}")
    keys = ds.scanner(columns=key, filter=where, limit=per, offset=(page - 1) * per).to_table().to_pylist()
    only = _keys_filter(key, keys)
    if keys and only is None:
        raise BadRequestError(f"blame of table {table} in pages needs key values SQL can spell "
                              f"(key {', '.join(key)}): use 'trimerge blame' for this table")
    blamed = site.repo.blame(table, ref=ref, where=only, columns=values if cells and values else None) if keys else None
    lines: list[dict[str, Any]] = []
    by_key: dict[tuple, dict[str, Any]] = {}
    if blamed is not None:
        for r in blamed.to_pylist():
            k = tuple(repr(r[c]) for c in key)
            line = by_key.get(k)
            if line is None:
                line = {"key": [cell(r[c]) for c in key], "commit": r["commit"], "actor": r["actor"],
                        "time": r["time"], "message": r["message"], "cells": {}}
                by_key[k] = line
                lines.append(line)
            if cells:
                line["cells"][r["column"]] = (r["commit"], r["actor"], r["time"], r["message"])
    shown_keys = [tuple(repr(r[c]) for c in key) for r in keys]
    ordered = [by_key[k] for k in shown_keys if k in by_key]
    commit_ids = {ln["commit"] for ln in ordered} | {c[0] for ln in ordered for c in ln["cells"].values()}
    return Page("blame.html", {"title": f"Blame of {table} at {ref}", "ref": ref, "table": table, "key": key,
                               "values": values, "cells": cells, "lines": ordered, "total": total, "page": page,
                               "pages": pages, "per": per, "where": where or "",
                               "short": {c: site.repo.short_id(c) for c in commit_ids},
                               "links": _Links(ref=ref, table=table, where=where, cells=cells,
                                               per=per if per != DEFAULT_PER_PAGE else None)})
