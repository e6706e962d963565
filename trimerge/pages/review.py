"""Merge request pages: the list, and one request with its diff, conflicts, checks, reviews and actions.

Every action is the call ``trimerge request ...`` makes (``repo.requests.review``, ``merge``,
``enqueue``, ``close``, ``reopen``, ``create``), as the session's actor, allowed only for a write
token whose branch glob covers the request's target (the namespace's rule for a write there). The
conflicts a merge would meet now are shown base / ours (the target) / theirs (the source) side by
side, each with a choice — ours, theirs, or a typed value — that the Merge button sends as the
merge's resolutions (the table ``merge --resolve`` reads).
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa

from trimerge.merge.resolutions import canonical_key
from trimerge.pages.cells import cell
from trimerge.pages.compare import diff_sections
from trimerge.pages.errors import BadRequestError, PageNotFoundError
from trimerge.pages.site import Ask, Page, Redirect, Site

__all__ = ["MAX_CONFLICTS_SHOWN", "list_page", "request_page", "resolutions_of"]

PREFIX = "/ui"
STATES = ("open", "merged", "closed")
MAX_CONFLICTS_SHOWN = 200  # beyond this a request's conflicts are resolved with 'request merge --resolve'
_CHOICES = ("ours", "theirs", "base", "value")


def _api(site: Site) -> Any:
    api = site.requests
    if api is None:
        raise PageNotFoundError("this repository's trimerge has no merge requests (repo.requests)")
    return api


def _number(ident: str) -> int:
    if not ident.isdigit() or not ident.isascii() or len(ident) > 18 or ident.startswith("0"):
        raise PageNotFoundError(f"no request {ident[:40]!r}: request ids are whole numbers from 1")
    return int(ident)


def list_page(site: Site, ask: Ask) -> "Page | Redirect":
    """``/ui/requests`` (``?state=open|merged|closed``, ``&into=BRANCH``); a POST opens a request."""
    api = _api(site)
    if ask.form:
        return _create(api, ask)
    state = ask.text("state")
    if state not in (None, "", "all", *STATES):
        raise BadRequestError(f"state= is one of {', '.join(STATES)} or all, not {state!r}")
    into = ask.text("into") or None
    if into is not None:
        ask.check_view(into)
    found = api.list(state=None if state in (None, "", "all") else state, into=into)
    shown = [r for r in found if ask.may_name(r.into) and ask.may_name(r.source)]
    return Page("requests.html", {"title": "Merge requests", "requests": shown, "state": state or "all",
                                  "into": into or "", "states": STATES})


def _create(api: Any, ask: Ask) -> Redirect:
    source = ask.text("source", required=True, source="form")
    into = ask.text("into", required=True, source="form")
    title = ask.text("title", required=True, source="form")
    body = ask.text("body", source="form") or None
    assert source is not None and into is not None
    ask.check_view(source)
    ask.check_write(into)
    r = api.create(source, into=into, title=title, body=body, actor=ask.actor)
    return Redirect(f"{PREFIX}/requests/{r.id}", f"request #{r.id} opened")


def request_page(site: Site, ask: Ask, ident: str) -> "Page | Redirect":
    """``/ui/requests/N``: what ``request show N`` answers, with the actions this session may take."""
    api = _api(site)
    number = _number(ident)
    r = api.get(number)  # an unknown id: RequestNotFoundError (404)
    ask.check_view(r.into, r.source)
    if ask.form:
        return _act(site, api, ask, r)
    view = api.show(number)
    diff = None
    d = view.diff
    if d is not None:
        # The view's diff (merge base -> source) is what the page pages through: cached under its ids.
        site.diffs.get((d.before.id, d.after.id, False, None, None), lambda: d)
        diff = diff_sections(site, ask, d.before.id, d.after.id, three_dot=False, link={}, anchor="#changes")
    conflicts = list(view.conflicts)
    may_act = ask.may_write(r.into)
    return Page("request.html", {
        "title": f"#{r.id} {r.title}", "r": r, "view": view, "diff": diff,
        "conflicts": [_conflict(i, c) for i, c in enumerate(conflicts[:MAX_CONFLICTS_SHOWN])],
        "conflicts_total": view.merge.conflicts_total if view.merge is not None else len(conflicts),
        "checks": _checks(view), "reviews": view.reviews, "approvals": view.approvals,
        "source_tip": view.source_commit.id if view.source_commit is not None else "",
        "mergeable": view.mergeable, "why": view.why,
        "may_act": may_act and r.state == "open", "may_reopen": may_act and r.state == "closed",
        "actor": ask.actor})


def _conflict(i: int, c: Any) -> dict[str, Any]:
    """One conflict for the form: its identity (hidden fields) and its values side by side."""
    columns = list(c.columns) or []
    sides = (c.base, c.ours, c.theirs)
    if not columns:  # a row (or table) conflict: the whole row's columns, the key left out
        columns = list(dict.fromkeys(k for side in sides if side for k in side if k not in (c.key or {})))
    lines = []
    for col in columns:
        values = [cell(side.get(col)) if side is not None else None for side in sides]
        lines.append({"column": col, "sides": values})
    ident = json.dumps([c.kind, c.table, canonical_key(c.key), None])
    return {"i": i, "kind": c.kind, "table": c.table, "key": c.key or {}, "cells": bool(c.columns),
            "lines": lines, "ident": ident, "columns": json.dumps(list(c.columns)),
            "message": getattr(c, "message", "")}


def _checks(view: Any) -> list[dict[str, Any]]:
    """The checks' verdicts on the would-be result (:class:`~trimerge.lineage.gates.checks.CheckResult`),
    each with the keys of its first failing rows."""
    out = []
    for check in view.checks:
        keys = list(check.sample_keys)
        columns = list(dict.fromkeys(k for row in keys for k in row))
        out.append({"name": check.name, "table": check.table, "passed": check.passed, "failing": check.failing_rows,
                    "scope": check.scope, "sql": check.sql, "message": check.reason or "", "columns": columns,
                    "rows": [[cell(row.get(c)) for c in columns] for row in keys[:50]]})
    return out


def resolutions_of(form: dict[str, str]) -> pa.Table | None:
    """The resolutions a conflict form chose (fields ``conflict-I``: the conflict's identity;
    ``choice-I[-COLUMN]``: ours/theirs/base/value; ``value-I[-COLUMN]``: a JSON value, or text),
    as the table ``merge(resolutions=...)`` takes; None when nothing was chosen."""
    rows = []
    for name, ident in form.items():
        if not name.startswith("conflict-"):
            continue
        i = name.removeprefix("conflict-")
        try:
            kind, table, key, column = json.loads(ident)
        except (ValueError, TypeError):
            raise BadRequestError(f"form field {name} is not a conflict's identity") from None
        if not all(isinstance(x, (str, type(None))) for x in (kind, table, key, column)):
            raise BadRequestError(f"form field {name} is not a conflict's identity")
        try:
            columns = json.loads(form.get(f"columns-{i}") or "[]")
        except ValueError:
            columns = None
        if not isinstance(columns, list) or not all(isinstance(c, str) for c in columns):
            raise BadRequestError(f"form field columns-{i} is not a list of column names")
        for col in columns or [column]:
            suffix = f"-{col}" if col is not None else ""
            choice = form.get(f"choice-{i}{suffix}", "")
            if not choice:
                continue
            if choice not in _CHOICES:
                raise BadRequestError(f"choice for conflict {int(i) + 1 if i.isdigit() else i} is one of "
                                      f"{', '.join(_CHOICES)}, not {choice[:40]!r}")
            value = None
            if choice == "value":
                if col is None:
                    raise BadRequestError("a typed value resolves one cell: choose ours or theirs for a row conflict")
                value = json.dumps({col: _typed(form.get(f"value-{i}{suffix}", ""))}, default=str)
            rows.append({"kind": kind, "table": table, "key": key, "column": col or "", "resolution": choice,
                         "value": value})
    if not rows:
        return None
    return pa.Table.from_pylist(rows, schema=pa.schema([(c, pa.string()) for c in
                                                        ("kind", "table", "key", "column", "resolution", "value")]))


def _typed(text: str) -> Any:
    """A typed value: JSON when it reads as JSON (``42``, ``"42"``, ``null``), else the text itself."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def _act(site: Site, api: Any, ask: Ask, r: Any) -> Redirect:
    action = ask.text("action", required=True, source="form") or ""
    here = f"{PREFIX}/requests/{r.id}"
    ask.check_write(r.into)
    with site.write_lock:
        if action in ("approve", "request-changes"):
            comment = ask.text("comment", source="form") or None
            seen = ask.text("commit", source="form") or None  # the source tip the page showed: a moved source refuses
            api.review(r.id, action, comment=comment, actor=ask.actor, commit=seen)
            return Redirect(here, "approved" if action == "approve" else "changes requested")
        if action == "merge":
            resolutions = resolutions_of(dict(ask.form))
            merged = api.merge(r.id, resolutions=resolutions, actor=ask.actor)
            cid = merged.merge_commit
            return Redirect(here, f"merged into {r.into}" + (f" as {cid[:10]}" if cid else " (nothing to merge)"))
        if action == "enqueue":
            api.enqueue(r.id, actor=ask.actor)
            return Redirect(here, f"queued to merge into {r.into}")
        if action == "close":
            api.close(r.id, actor=ask.actor)
            return Redirect(here, "closed")
        if action == "reopen":
            api.reopen(r.id, actor=ask.actor)
            return Redirect(here, "reopened")
    raise BadRequestError(f"action= is approve, request-changes, merge, enqueue, close or reopen, not {action[:40]!r}")
