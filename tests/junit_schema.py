"""A strict check of JUnit XML against the structure of Jenkins' junit-10.xsd (xunit-plugin, the
schema CI servers read; no XSD validator is installed here, so its rules are written out): which
elements may appear where, which attributes each may carry and which it must, the time pattern,
that result elements hold text only — and, stricter than the schema, that counts are counts."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

SUREFIRE_TIME = re.compile(r"(([0-9]{0,3},)*[0-9]{3}|[0-9]{0,3})*(\.[0-9]*)?")
RERUN = ("rerunFailure", "rerunError", "flakyFailure", "flakyError")

# element: (required attributes, allowed attributes, allowed child elements; None: text only)
RULES: dict[str, tuple[set[str], set[str], set[str] | None]] = {
    "testsuites": (set(), {"name", "time", "tests", "failures", "errors"}, {"testsuite"}),
    "testsuite": ({"name", "tests", "failures", "errors"},
                  {"name", "tests", "failures", "errors", "group", "time", "skipped", "timestamp", "hostname", "id",
                   "package", "file", "log", "url"},
                  {"testsuite", "properties", "testcase", "system-out", "system-err"}),
    "testcase": ({"name"}, {"name", "time", "classname", "group"},
                 {"skipped", "error", "failure", *RERUN, "system-out", "system-err"}),
    "failure": (set(), {"type", "message"}, None),
    "error": (set(), {"type", "message"}, None),
    "skipped": (set(), {"type", "message"}, None),
    "properties": (set(), set(), {"property"}),
    "property": ({"name", "value"}, {"name", "value"}, set()),
    "system-out": (set(), set(), None),
    "system-err": (set(), set(), None),
    **{r: ({"type"}, {"type", "message"}, {"stackTrace", "system-out", "system-err"}) for r in RERUN},
    "stackTrace": (set(), set(), None),
}


def junit_errors(text: str | bytes) -> list[str]:
    """Every way ``text`` breaks junit-10.xsd (empty: valid)."""
    root = ET.fromstring(text)
    errors: list[str] = []
    if root.tag not in ("testsuites", "testsuite"):
        return [f"root element <{root.tag}> (junit-10 has <testsuites> or <testsuite>)"]

    def visit(el: ET.Element, path: str) -> None:
        if el.tag not in RULES:
            errors.append(f"{path}: unknown element <{el.tag}>")
            return
        required, allowed, children = RULES[el.tag]
        for a in sorted(required - set(el.attrib)):
            errors.append(f"{path}: missing required attribute {a!r}")
        for a in sorted(set(el.attrib) - allowed):
            errors.append(f"{path}: attribute {a!r} not allowed on <{el.tag}>")
        if "time" in el.attrib and el.tag in ("testsuites", "testsuite") and not SUREFIRE_TIME.fullmatch(el.get("time")):
            errors.append(f"{path}: time {el.get('time')!r} does not match SUREFIRE_TIME")
        for a in ("tests", "failures", "errors", "skipped"):  # stricter than the XSD's xs:string
            if a in el.attrib and el.tag in ("testsuites", "testsuite") and not el.get(a).isdigit():
                errors.append(f"{path}: {a}={el.get(a)!r} is not a count")
        kids = list(el)
        if children is None:
            if kids:
                errors.append(f"{path}: <{el.tag}> holds text only, not <{kids[0].tag}>")
            return
        if (el.text or "").strip() or any((k.tail or "").strip() for k in kids):
            errors.append(f"{path}: <{el.tag}> may not hold text")
        for i, k in enumerate(kids):
            if k.tag not in children:
                errors.append(f"{path}: <{k.tag}> not allowed in <{el.tag}>")
            else:
                visit(k, f"{path}/{k.tag}[{i}]")

    visit(root, root.tag)
    return errors
