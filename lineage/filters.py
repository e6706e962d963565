"""SQL filters (``--where``): checked once, before Lance sees them.

Lance parses filters with DataFusion; some inputs make it panic (a placeholder such as ``?``) or
exhaust its stack (very long or deeply nested expressions). A filter is therefore scanned first —
string literals and quoted names skipped — and refused with one clear line when it:

* is empty, longer than :data:`MAX_FILTER_CHARS` characters or holds a NUL character;
* nests parentheses deeper than :data:`MAX_FILTER_DEPTH`;
* chains more than :data:`MAX_FILTER_TERMS` ``AND``/``OR`` terms (use ``IN (...)`` for long lists);
* holds a placeholder (``?``, ``$1``) or an unterminated string or quoted name.

Then it is planned (not run) against the table's schema, so an unknown column or a type mismatch is
reported before anything is written.
"""

from __future__ import annotations

import re
from typing import Any

from trimerge.lineage.errors import InvalidOperationError, lance_message

MAX_FILTER_CHARS = 1_000_000
MAX_FILTER_DEPTH = 32
MAX_FILTER_TERMS = 256
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def check_filter(text: Any, what: str = "filter") -> str:
    """Return ``text`` if it passes the limits above, else raise :class:`InvalidOperationError`."""
    if not isinstance(text, str):
        raise InvalidOperationError(f"{what} must be SQL text, not {type(text).__name__}")
    if not text.strip():
        raise InvalidOperationError(f"{what} is empty (use 'true' to select every row)")
    if len(text) > MAX_FILTER_CHARS:
        raise InvalidOperationError(f"{what} is {len(text):,} characters long; the limit is {MAX_FILTER_CHARS:,}")
    if "\x00" in text:
        raise InvalidOperationError(f"{what} holds a NUL character")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidOperationError(f"{what} is not valid Unicode") from None
    depth = terms = 0
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c in "'\"`":
            end = _closing(text, i)
            if end < 0:
                raise InvalidOperationError(f"{what}: unterminated {c}...{c} at character {i + 1}")
            i = end + 1
            continue
        if c == "(":
            depth += 1
            if depth > MAX_FILTER_DEPTH:
                raise InvalidOperationError(f"{what} nests parentheses deeper than {MAX_FILTER_DEPTH}")
        elif c == ")":
            depth -= 1
        elif c == "?" or (c == "$" and i + 1 < n and text[i + 1].isdigit()):
            raise InvalidOperationError(f"{what}: placeholders such as '?' or '$1' are not supported; write the value")
        elif c.isalpha() or c == "_":
            word = _WORD.match(text, i)
            if word:
                if word.group().upper() in ("AND", "OR"):
                    terms += 1
                    if terms >= MAX_FILTER_TERMS:
                        raise InvalidOperationError(
                            f"{what} chains more than {MAX_FILTER_TERMS} AND/OR terms; use IN (...) for long lists")
                i = word.end()
                continue
        i += 1
    return text


def _closing(text: str, start: int) -> int:
    """Index of the quote closing the one at ``start`` (a doubled quote is an escaped one), or -1."""
    quote, i = text[start], start + 1
    while True:
        i = text.find(quote, i)
        if i < 0:
            return -1
        if i + 1 < len(text) and text[i + 1] == quote:
            i += 2
            continue
        return i


def plan_filter(dataset: Any, text: str, what: str) -> None:
    """Plan (do not run) ``text`` on a Lance dataset: unknown columns and type mismatches say so here."""
    try:
        dataset.scanner(filter=text, columns=[]).explain_plan()
    except (OSError, ValueError, RuntimeError) as exc:
        raise InvalidOperationError(f"{what}: bad filter {text[:200]!r}: {lance_message(exc)[:300]}") from None
