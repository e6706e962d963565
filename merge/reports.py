"""Merge reports for CI: JUnit XML, SARIF 2.1.0, Markdown, JSON and GitHub workflow commands.

Every conflict the result holds is listed in every format (all of them unless the merge was given a
``max_conflicts`` below their number; ``conflicts_total`` in JSON counts them all), except
Markdown, which shows the first rows per table for a readable step summary and says how many more
there are.

JSON schema (``report("json")``, stable; version 1)::

    {"format": "trimerge-merge-report", "version": 1,
     "status": "merged" | "up-to-date" | "conflicts", "dry_run": bool,
     "source": {"ref": str, "commit": str}, "dest": {"ref": str, "branch": str, "commit": str},
     "base": [commit ids], "virtual_base": bool, "commit": str | null, "strategy": ...,
     "granularity": str, "conflicts_total": int,
     "stats": {table: {"action", "rows_from_source", "converged", "cells_merged", "conflicts",
                       "resolved", "schema_changes"}},
     "conflicts": [{"kind", "table", "key": {col: value} | null, "columns": [str],
                    "base": {...} | null, "ours": {...} | null, "theirs": {...} | null, "message": str}],
     "stale": {table: [{col: value}]},   (rows whose derived column and inputs come from different sides)
     "checks": [{"name", "table", "failing_rows", "sample_keys": [{col: value}], "sql", "passed"}]}
    (status "check_failed": a data check gating dest failed on the merge's result)
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from typing import TYPE_CHECKING

from trimerge.merge.result import jsonable

if TYPE_CHECKING:
    from trimerge.merge.engine import MergeResult
    from trimerge.merge.result import Conflict

FORMATS = ("junit", "sarif", "markdown", "json", "github")
MARKDOWN_ROWS_PER_TABLE = 20

RULES = {
    "table.drop_modify": "Table dropped on one side and modified on the other",
    "table.add_add": "Table added on both sides with different keys or schemas",
    "table.update_update": "Table changed on both sides (table granularity)",
    "schema.column": "Column added or changed differently on both sides",
    "schema.drop_modify": "Column dropped on one side while the other changed its values",
    "schema.primary_key": "Primary key changed",
    "index.add_add": "Index of the same name defined differently on both sides",
    "index.drop_modify": "Index dropped on one side and redefined on the other",
    "row.delete_modify": "Row deleted on one side and changed on the other",
    "row.insert_insert": "Row inserted on both sides with different values",
    "row.update_update": "Same cells changed differently on both sides",
    "row.stale_derived": "A derived column's value and an input it is computed from come from different sides",
    "derived.update_update": "Derived column declared differently on both sides",
    "check.update_update": "Data check defined differently on both sides",
    "check.failed": "A data check gating the destination returns failing rows on the merge's result",
}


def check_line(c) -> str:
    """One line for a check run (``trimerge.lineage.gates.checks.CheckResult``)."""
    return c.describe()


def stale_lines(result: "MergeResult") -> list[tuple[str, str]]:
    """(table, one line) per table with stale rows (derived values and inputs from different sides)."""
    out = []
    for table, keys in sorted(result.stale.items()):
        shown = ", ".join(json.dumps(jsonable(k), sort_keys=True) for k in keys[:3])
        more = f" and {len(keys) - 3} more" if len(keys) > 3 else ""
        out.append((table, f"{table}: {len(keys)} stale row(s), a derived column's value and its inputs taken from "
                           f"different sides (recompute them): {shown}{more}"))
    return out


def render(result: "MergeResult", fmt: str) -> str:
    try:
        return {"junit": junit, "sarif": sarif, "markdown": markdown, "json": as_json, "github": github}[fmt](result)
    except KeyError:
        from trimerge.lineage.errors import InvalidOperationError

        raise InvalidOperationError(f"unknown report format {fmt!r} (use {', '.join(FORMATS)})") from None


def as_json(result: "MergeResult") -> str:
    return json.dumps({"format": "trimerge-merge-report", "version": 1, **result.to_json()}, indent=2, sort_keys=True)


def _title(result: "MergeResult") -> str:
    return f"merge {result.source_ref} into {result.dest_ref}"


def junit(result: "MergeResult") -> str:
    """One testsuite per table, one failing testcase per conflict (a passing one for a clean table)."""
    root = ET.Element("testsuites", name=f"trimerge {_title(result)}")
    total = failures = 0
    tables = sorted(set(result.stats) | {c.table for c in result.conflicts})
    for table in tables:
        conflicts = [c for c in result.conflicts if c.table == table]
        suite = ET.SubElement(root, "testsuite", name=table, tests=str(max(1, len(conflicts))),
                              failures=str(len(conflicts)), errors="0", skipped="0")
        if not conflicts:
            stats = result.stats.get(table)
            ET.SubElement(suite, "testcase", classname=f"trimerge.merge.{table}",
                          name=f"{table}: {stats.action if stats else 'unchanged'}")
        for c in conflicts:
            case = ET.SubElement(suite, "testcase", classname=f"trimerge.merge.{table}", name=c.describe())
            failure = ET.SubElement(case, "failure", message=c.describe(), type=c.kind)
            failure.text = json.dumps(c.to_json(), indent=2, sort_keys=True)
        total += max(1, len(conflicts))
        failures += len(conflicts)
    for table, line in stale_lines(result):  # a warning each: reported, not failed
        suite = ET.SubElement(root, "testsuite", name=f"{table} (stale)", tests="1", failures="0", errors="0",
                              skipped="1")
        case = ET.SubElement(suite, "testcase", classname=f"trimerge.merge.{table}", name=f"{table}: stale derived rows")
        ET.SubElement(case, "skipped", message=line)
        total += 1
    if result.checks:  # one testcase per data check run on the result
        failed = result.failed_checks
        suite = ET.SubElement(root, "testsuite", name="data checks", tests=str(len(result.checks)),
                              failures=str(len(failed)), errors="0", skipped="0")
        for c in result.checks:
            case = ET.SubElement(suite, "testcase", classname=f"trimerge.check.{c.table}", name=c.name)
            if not c.passed:
                failure = ET.SubElement(case, "failure", message=check_line(c), type="check.failed")
                failure.text = json.dumps(c.to_json(), indent=2, sort_keys=True)
        total += len(result.checks)
        failures += len(failed)
    root.set("tests", str(total))
    root.set("failures", str(failures))
    root.set("errors", "0")
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def sarif_uri(table: str) -> str:
    """The stable, repository-relative URI a SARIF result names for a table: ``tables/<table>``
    (percent-encoded; the same for every lineage of the table, unlike its dataset folder)."""
    from urllib.parse import quote

    return "tables/" + quote(table, safe="")


def sarif_fingerprint(c: "Conflict") -> str:
    """A digest of what identifies a conflict across runs: kind, table, key and columns."""
    import hashlib

    ident = json.dumps([c.kind, c.table, jsonable(c.key), sorted(c.columns)], sort_keys=True, default=str)
    return hashlib.sha256(ident.encode()).hexdigest()


def hashlib_digest(ident: list) -> str:
    import hashlib

    return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()


def sarif(result: "MergeResult") -> str:
    """SARIF 2.1.0: one result per conflict, located at the table's stable URI ``tables/<table>``
    (physical, with the key in the region's snippet and the message) and logically at table[key];
    ``partialFingerprints`` (kind, table, key, columns) let code scanning match results across runs."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        __version__ = version("trimerge")
    except PackageNotFoundError:  # run from a source tree that was never installed
        __version__ = "0+unknown"

    results = []
    for c in result.conflicts:
        fq = c.table + ("[" + ", ".join(f"{k}={v!r}" for k, v in c.key.items()) + "]" if c.key else "")
        results.append({
            "ruleId": c.kind,
            "level": "error",
            "message": {"text": c.describe()},
            "locations": [{
                "physicalLocation": {"artifactLocation": {"uri": sarif_uri(c.table)},
                                     "region": {"startLine": 1, "snippet": {"text": fq}}},
                "logicalLocations": [{"name": c.table, "fullyQualifiedName": fq, "kind": "object"}],
            }],
            "partialFingerprints": {"trimergeConflict/v1": sarif_fingerprint(c)},
            "properties": {"conflict": c.to_json()},
        })
    for table, line in stale_lines(result):
        results.append({
            "ruleId": "row.stale_derived", "level": "warning", "message": {"text": line},
            "locations": [{"physicalLocation": {"artifactLocation": {"uri": sarif_uri(table)},
                                                "region": {"startLine": 1, "snippet": {"text": table}}},
                           "logicalLocations": [{"name": table, "fullyQualifiedName": table, "kind": "object"}]}],
            "partialFingerprints": {"trimergeConflict/v1": hashlib_digest(["row.stale_derived", table])},
            "properties": {"stale": len(result.stale[table])},
        })
    for c in result.failed_checks:
        results.append({
            "ruleId": "check.failed", "level": "error", "message": {"text": check_line(c)},
            "locations": [{"physicalLocation": {"artifactLocation": {"uri": sarif_uri(c.table)},
                                                "region": {"startLine": 1, "snippet": {"text": c.table}}},
                           "logicalLocations": [{"name": c.name, "fullyQualifiedName": f"{c.table}.{c.name}",
                                                 "kind": "object"}]}],
            "partialFingerprints": {"trimergeConflict/v1": hashlib_digest(["check.failed", c.table, c.name])},
            "properties": {"check": jsonable(c.to_json())},
        })
    doc = {
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {
                "name": "trimerge", "version": __version__,
                "informationUri": "https://github.com/trimerge/trimerge",
                "rules": [{"id": k, "shortDescription": {"text": v}} for k, v in RULES.items()],
            }},
            "results": results,
            "properties": {"status": result.status, "source": result.source_ref, "dest": result.dest_ref,
                           "sourceCommit": result.source_commit.id, "destCommit": result.dest_commit.id},
        }],
    }
    return json.dumps(doc, indent=2)


def _cell(v) -> str:
    text = json.dumps(v, default=str) if not isinstance(v, str) else v
    return text.replace("|", "\\|").replace("\n", " ")


def markdown(result: "MergeResult") -> str:
    """A summary table plus the first conflicting rows per table (for a CI step summary)."""
    icon = {"merged": "✅", "up-to-date": "✅", "conflicts": "❌", "check_failed": "❌"}[result.status]
    lines = [f"## {icon} trimerge: {_title(result)}", "",
             f"**Status:** {result.status}{' (dry run)' if result.dry_run else ''} · "
             f"**Conflicts:** {len(result.conflicts)} · source `{result.source_commit.id[:10]}` · dest `{result.dest_commit.id[:10]}`"
             + (f" · base `{result.base[0].id[:10]}`" if result.base else ""), ""]
    if result.stats:
        lines += ["| table | action | rows from source | converged | cells merged | conflicts |",
                  "|---|---|---:|---:|---:|---:|"]
        for name, s in sorted(result.stats.items()):
            lines.append(f"| {name} | {s.action} | {s.rows_from_source} | {s.converged} | {s.cells_merged} | {s.conflicts} |")
        lines.append("")
    for _table, line in stale_lines(result):
        lines += [f"⚠️ {line}", ""]
    for c in result.failed_checks:
        lines += [f"❌ {_cell(check_line(c))}", ""]
    if result.checks and not result.failed_checks:
        lines += [f"✅ {len(result.checks)} data check(s) passed", ""]
    by_table: dict[str, list] = {}
    for c in result.conflicts:
        by_table.setdefault(c.table, []).append(c)
    for table, conflicts in sorted(by_table.items()):
        lines += [f"### {table}: {len(conflicts)} conflict(s)", "",
                  "| kind | key | columns | base | ours | theirs |", "|---|---|---|---|---|---|"]
        for c in conflicts[:MARKDOWN_ROWS_PER_TABLE]:
            lines.append(f"| {c.kind} | {_cell(c.key) if c.key else ''} | {', '.join(c.columns)} | "
                         f"{_cell(c.base)} | {_cell(c.ours)} | {_cell(c.theirs)} |")
        if len(conflicts) > MARKDOWN_ROWS_PER_TABLE:
            lines.append(f"\n… and {len(conflicts) - MARKDOWN_ROWS_PER_TABLE} more (see the JSON or JUnit report)")
        lines.append("")
    return "\n".join(lines)


def _escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


def github(result: "MergeResult") -> str:
    """GitHub Actions workflow commands: one ``::error`` line per conflict."""
    warnings = [f"::warning title={_escape_property(f'stale derived rows in {table}')}::{_escape_data(line)}"
                for table, line in stale_lines(result)]
    warnings += [f"::error title={_escape_property(f'check {c.name} failed on {c.table}')}::"
                 f"{_escape_data(check_line(c))}" for c in result.failed_checks]
    if not result.conflicts:
        return "\n".join([*warnings, f"::notice title={_escape_property('trimerge ' + _title(result))}::"
                                       f"{result.status}"]) + "\n"
    lines = warnings
    for c in result.conflicts:
        title = _escape_property(f"{c.kind} in {c.table}")
        detail = c.describe()
        if c.ours is not None or c.theirs is not None:
            detail += f" (base {json.dumps(c.base, default=str)}, ours {json.dumps(c.ours, default=str)}, " \
                      f"theirs {json.dumps(c.theirs, default=str)})"
        lines.append(f"::error title={title}::{_escape_data(detail)}")
    return "\n".join(lines) + "\n"
