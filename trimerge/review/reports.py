"""A request for CI: Markdown (a pull-request comment), JSON, and SARIF/JUnit as merges write them.

Markdown shows the request (title, source and target, author, state, body), whether it can merge
and why not, the diff per table (counts, and the first changed rows), the conflicts a merge would
meet now, the checks' verdicts on the would-be result and the reviews. SARIF and JUnit are the dry
run's merge report (:mod:`trimerge.merge.reports`: a result or failing test per conflict and failed
check) plus one for the review rule: ``request.approvals`` when the target requires approvals the
request lacks. JSON (stable; version 1) is ``{"format": "trimerge-request-report", "version": 1}``
plus :meth:`~trimerge.review.view.RequestView.to_json`.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from typing import TYPE_CHECKING, Any

from trimerge.lineage.errors import InvalidOperationError
from trimerge.merge.reports import sarif_uri

if TYPE_CHECKING:
    from trimerge.review.view import RequestView

FORMATS = ("markdown", "json", "sarif", "junit")
ROWS_PER_TABLE = 10
APPROVAL_RULE = "request.approvals"


def render(view: "RequestView", fmt: str) -> str:
    renderers = {"markdown": markdown, "json": as_json, "sarif": sarif, "junit": junit}
    if fmt not in renderers:
        raise InvalidOperationError(f"unknown request report format {fmt!r} (use {', '.join(FORMATS)})")
    return renderers[fmt](view)


def as_json(view: "RequestView") -> str:
    return json.dumps({"format": "trimerge-request-report", "version": 1, **view.to_json()}, indent=2,
                      sort_keys=True, default=str)


def _cell(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text.replace("|", "\\|").replace("\n", " ")


def _quoted(text: str) -> list[str]:
    return ["> " + line if line else ">" for line in text.splitlines()]


def markdown(view: "RequestView") -> str:
    r = view.request
    verdict = "can merge" if view.mergeable else f"cannot merge: {view.why}" if view.why else "cannot merge"
    lines = [f"## Merge request #{r.id}: {_cell(r.title)}", "",
             f"`{r.source}` into `{r.into}` · opened by {_cell(r.author)} · **{r.state}**"
             + (f" as `{r.merge_commit[:10]}`" if r.merge_commit else ""), ""]
    if r.body:
        lines += [*_quoted(r.body), ""]
    lines += [f"**{'✅' if view.mergeable else '❌'} {_cell(verdict)}**", ""]
    if view.diff is not None:
        stat = view.diff.stat().to_pylist()
        changed = [s for s in stat if s["status"] != "unchanged" or s["index_changes"]]
        lines += [f"### Changes ({len(changed)} table(s))", ""]
        if changed:
            lines += ["| table | status | inserted | deleted | updated | cells |", "|---|---|---:|---:|---:|---:|"]
            lines += [f"| {s['table']} | {s['status']} | {s['inserted']} | {s['deleted']} | {s['updated']} | "
                      f"{s['cells_changed']} |" for s in changed]
            lines.append("")
            for s in changed:
                lines += _rows(view, s["table"])
    if view.conflicts:
        lines += [f"### Conflicts ({view.merge.conflicts_total if view.merge else len(view.conflicts)})", "",
                  "| kind | table | key | columns |", "|---|---|---|---|"]
        lines += [f"| {c.kind} | {c.table} | {_cell(c.key) if c.key else ''} | {', '.join(c.columns)} |"
                  for c in view.conflicts[:50]]
        lines.append("")
    if view.checks:
        lines += ["### Checks on the would-be result", ""]
        lines += [f"- {'✅' if c.passed else '❌'} {_cell(c.describe())}" for c in view.checks]
        lines.append("")
    lines += ["### Reviews", ""]
    if view.approvals is not None:
        a = view.approvals
        lines += [f"{len(a.approvers)} of {a.required} approval(s) of the source tip `{a.tip[:10]}`", ""]
    if view.reviews:
        lines += ["| reviewer | verdict | commit | at | comment |", "|---|---|---|---|---|"]
        lines += [f"| {_cell(v.actor)} | {v.verdict}{' (stale)' if v.stale else ''} | `{v.commit[:10]}` | "
                  f"{v.at:%Y-%m-%d %H:%M} | {_cell(v.comment or '')} |" for v in view.reviews]
    else:
        lines.append("No reviews yet.")
    return "\n".join(lines) + "\n"


def _rows(view: "RequestView", table: str) -> list[str]:
    assert view.diff is not None
    td = view.diff.tables[table]
    shown = td.head(ROWS_PER_TABLE).to_pylist()
    if not shown:
        return []
    out = [f"<details><summary>{table}: first {len(shown)} changed row(s)</summary>", ""]
    for row in shown:
        key = ", ".join(f"{k}={row[k]!r}" for k in td.primary_key)
        if row["change"] == "update":
            before, after = row.get("before") or {}, row.get("after") or {}
            cells = "; ".join(f"{c}: {before.get(c)!r} → {after.get(c)!r}" for c in row["changed_columns"] if c in after)
            out.append(f"- ~ `{_cell(key)}`: {_cell(cells)}")
        else:
            out.append(f"- {'+' if row['change'] == 'insert' else '-'} `{_cell(key)}`")
    return [*out, "", "</details>", ""]


def _approval_problem(view: "RequestView") -> str | None:
    return None if view.approvals is None or view.approvals.satisfied else view.approvals.why()


def sarif(view: "RequestView") -> str:
    """The dry run's SARIF, with a ``request.approvals`` result when the approvals are missing."""
    if view.merge is not None:
        doc = json.loads(view.merge.report("sarif"))
    else:
        from trimerge.merge.reports import RULES

        doc = {"$schema": "https://json.schemastore.org/sarif-2.1.0.json", "version": "2.1.0",
               "runs": [{"tool": {"driver": {"name": "trimerge", "informationUri": "https://github.com/trimerge/trimerge",
                                             "rules": [{"id": k, "shortDescription": {"text": v}}
                                                       for k, v in RULES.items()]}},
                         "results": [], "properties": {}}]}
    run = doc["runs"][0]
    run["tool"]["driver"]["rules"].append({"id": APPROVAL_RULE, "shortDescription": {
        "text": "The target branch requires approvals the merge request does not have"}})
    problem = _approval_problem(view)
    r = view.request
    if problem is not None:
        run["results"].append({
            "ruleId": APPROVAL_RULE, "level": "error", "message": {"text": f"merge request #{r.id}: {problem}"},
            "locations": [{"physicalLocation": {"artifactLocation": {"uri": sarif_uri(r.into)},
                                                "region": {"startLine": 1, "snippet": {"text": r.into}}},
                           "logicalLocations": [{"name": f"request #{r.id}", "kind": "object"}]}],
            "partialFingerprints": {"trimergeConflict/v1": f"request-{r.id}-approvals"}})
    run.setdefault("properties", {}).update({"request": r.id, "title": r.title, "state": r.state,
                                             "mergeable": view.mergeable, "why": view.why})
    return json.dumps(doc, indent=2)


def junit(view: "RequestView") -> str:
    """The dry run's JUnit report, with a ``review`` suite whose test fails when approvals are missing."""
    if view.merge is not None:
        root = ET.fromstring(view.merge.report("junit").split("\n", 1)[1])
    else:
        root = ET.Element("testsuites", name=f"trimerge request #{view.request.id}", tests="0", failures="0",
                          errors="0")
    problem = _approval_problem(view)
    suite = ET.SubElement(root, "testsuite", name="review", tests="1", failures=str(int(problem is not None)),
                          errors="0", skipped="0")
    case = ET.SubElement(suite, "testcase", classname="trimerge.request", name=f"request #{view.request.id}: approvals")
    if problem is not None:
        ET.SubElement(case, "failure", message=problem, type=APPROVAL_RULE)
    root.set("tests", str(int(root.get("tests", "0")) + 1))
    root.set("failures", str(int(root.get("failures", "0")) + int(problem is not None)))
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
