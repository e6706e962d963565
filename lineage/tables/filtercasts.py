"""Text literals compared with date and timestamp columns, written as Lance's SQL needs them.

Lance plans a filter with DataFusion, which does not cast a string to a date: ``d < '2001-01-01'``
on a ``date32`` column fails with "Error resolving filter expression", where DuckDB, Postgres and
polars cast the string. DataFusion does take a typed literal (``date '2001-01-01'``, ``timestamp
'2001-01-01T08:30:00'``), so :func:`cast_literals` rewrites the plain comparisons a person writes —

* ``col OP 'text'`` and ``'text' OP col`` (``=``, ``<>``, ``!=``, ``<``, ``<=``, ``>``, ``>=``),
* ``col [NOT] IN ('text', ...)``,
* ``col [NOT] BETWEEN 'text' AND 'text'`` —

where ``col`` is a date or timestamp column of the table, each operand standing alone (bounded by
the filter's start or end, a bracket, a comma, ``AND``, ``OR`` or ``NOT``), so operator precedence
can never make the rewrite mean something else. Other expressions are left to Lance.

A literal is checked here, so a bad one is refused with one line naming the column's type and
what to write: ISO dates (``2001-01-01``, ``2001-1-1``) and times (``2001-01-01 08:30``, seconds,
up to nine fraction digits, ``Z`` or ``+02:00``). A time without seconds gets ``:00``, which
DataFusion requires. Values a ``timestamp[ns]`` cannot hold (before 1677-09-22 or after
2262-04-10) are refused: DataFusion wraps them around silently (measured with pylance 14:
``ts < timestamp '2263-01-01'`` matched no row of year 2000).
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from typing import Any

from trimerge.lineage.errors import InvalidOperationError
from trimerge.lineage.tables.filters import MAX_FILTER_CHARS, run_items, tokens

_COMPARE = {"=", "==", "<>", "!=", "<", "<=", ">", ">="}
_BOUNDARY_WORDS = {"AND", "OR", "NOT", "WHEN", "THEN", "ELSE", "END"}
_DATE = re.compile(r"(\d{4})-(\d{1,2})-(\d{1,2})", re.ASCII)  # ASCII: \d would take '２００１' too
_TIME = re.compile(r"(\d{4})-(\d{1,2})-(\d{1,2})[T ](\d{1,2}):(\d{2})(?::(\d{2})(\.\d{1,9})?)?"
                   r"\s*(Z|[+-]\d{2}(?::?\d{2})?)?", re.I | re.ASCII)
#: What a timestamp[ns] holds (int64 nanoseconds from 1970), to the day inside it.
_NS_RANGE = (dt.datetime(1677, 9, 22), dt.datetime(2262, 4, 10))


@dataclass(frozen=True)
class Cast:
    """One literal rewritten: ``text[start:end]`` becomes ``written``."""

    start: int
    end: int
    column: str
    written: str


def cast_literals(schema: Any, text: str, what: str = "filter") -> str:
    """``text`` with each text literal compared with a date or timestamp column of ``schema`` (a
    pyarrow schema) written as a typed literal; a literal that is no date or time is refused
    (:class:`InvalidOperationError`, one line). ``text`` must have passed ``check_filter``."""
    casts = find_casts(schema, text, what)
    if not casts:
        return text
    pieces, last = [], 0
    for c in casts:
        pieces += [text[last:c.start], c.written]
        last = c.end
    text = "".join(pieces) + text[last:]
    if len(text) > MAX_FILTER_CHARS:  # each typed literal is 5-10 characters longer
        raise InvalidOperationError(f"{what}: with its {len(casts):,} dates and times typed (date '...') the filter "
                                    f"is {len(text):,} characters long; the limit is {MAX_FILTER_CHARS:,}: split it")
    return text


def find_casts(schema: Any, text: str, what: str = "filter") -> list[Cast]:
    """The rewrites :func:`cast_literals` makes, in text order."""
    temporal = {f.name: _Temporal.of(f.type) for f in schema if _kind(f.type) is not None}
    if not temporal or "'" not in text:
        return []
    named = "|".join(re.escape(n) for n in sorted(temporal, key=len, reverse=True))
    if not re.search(f"(?<![\\w])(?:{named})(?![\\w])", text, re.IGNORECASE):  # cheap: most filters stop here
        return []
    folded: dict[str, list[str]] = {}
    for name in temporal:
        folded.setdefault(name.lower(), []).append(name)
    toks = list(tokens(text))
    casts: list[Cast] = []
    for i in range(len(toks)):
        column = _column(toks, i, temporal, folded)
        if column is None:
            continue
        if _bounded(toks, i - 1):  # col OP 'text', col IN (...), col BETWEEN ...
            casts.extend(_cast(tok, column, temporal[column], what) for tok in _operands(toks, i))
        if i >= 2 and toks[i - 1][1] in _COMPARE and toks[i - 2][0] == "string" and _bounded(toks, i - 3) \
                and _bounded(toks, i + 1, after=True):  # 'text' OP col
            casts.append(_cast(toks[i - 2], column, temporal[column], what))
    return sorted(casts, key=lambda c: c.start)


@dataclass(frozen=True)
class _Temporal:
    """What a literal compared with a column of this type must be."""

    kind: str  # date or timestamp
    type_name: str  # as messages name it: date32, timestamp[us, tz=UTC]
    nanoseconds: bool  # a timestamp[ns]: 1677-2262 only

    @staticmethod
    def of(arrow_type: Any) -> "_Temporal":
        return _Temporal(_kind(arrow_type) or "", str(arrow_type).replace("[day]", "").replace("date64[ms]", "date64"),
                         getattr(arrow_type, "unit", "") == "ns")


def _kind(t: Any) -> str | None:
    import pyarrow as pa

    return "date" if pa.types.is_date(t) else "timestamp" if pa.types.is_timestamp(t) else None


def _column(toks: list[tuple[str, str, int, int]], i: int, temporal: dict[str, _Temporal],
            folded: dict[str, list[str]]) -> str | None:
    """The temporal column token ``i`` names on its own (not a field, a call or a qualified name)."""
    kind, value = toks[i][0], toks[i][1]
    if kind == "quoted" and value[0] == "`":  # Lance reads "x" as text, `x` as a name
        name = value[1:-1].replace("``", "`")
        found = name if name in temporal else None
    elif kind == "word":  # unquoted names match whatever their case, as Lance finds them
        names = [value] if value in temporal else folded.get(value.lower(), [])
        found = names[0] if len(names) == 1 else None
    else:
        return None
    if found is None:
        return None
    if (i > 0 and toks[i - 1][1] == ".") or (i + 1 < len(toks) and toks[i + 1][1] in (".", "(", "[", "::")):
        return None
    return found


def _bounded(toks: list[tuple[str, str, int, int]], j: int, after: bool = False) -> bool:
    """Whether token ``j`` ends (or, ``after``, starts) an operand: nothing binds tighter across it."""
    if j < 0 or j >= len(toks):
        return True
    kind, value = toks[j][0], toks[j][1]
    if kind == "comma" or (kind == ("close" if after else "open") and value in "()"):
        return True
    return kind == "word" and value.upper() in _BOUNDARY_WORDS


def _operands(toks: list[tuple[str, str, int, int]], i: int) -> list[tuple[str, str, int, int]]:
    """The text literals column token ``i`` is compared with on its right."""
    n = len(toks)
    j = i + 1
    if j < n and toks[j][1] in _COMPARE:
        return [toks[j + 1]] if j + 1 < n and toks[j + 1][0] == "string" and _bounded(toks, j + 2, after=True) else []
    if j < n and toks[j][0] == "word" and toks[j][1].upper() == "NOT":
        j += 1
    word = toks[j][1].upper() if j < n and toks[j][0] == "word" else ""
    if word == "BETWEEN":
        low, conj, high = j + 1, j + 2, j + 3
        if high < n and toks[low][0] == "string" and toks[conj][1].upper() == "AND" and toks[high][0] == "string" \
                and _bounded(toks, high + 1, after=True):
            return [toks[low], toks[high]]
        return []
    if word == "IN" and j + 1 < n and toks[j + 1][1] == "(":
        return _in_list(toks, j + 2)
    return []


def _in_list(toks: list[tuple[str, str, int, int]], k: int) -> list[tuple[str, str, int, int]]:
    """The text items of the ``IN (...)`` list whose first token is ``toks[k]``; none unless every
    item is text, typed or NULL (a list of numbers is Lance's to refuse)."""
    found: list[tuple[str, str, int, int]] = []
    n = len(toks)
    while k < n:
        kind, value = toks[k][0], toks[k][1].upper()
        if kind == "run":  # a long list, in one token: its items
            for item in run_items(toks[k]):
                if item[0] == "string":
                    found.append(item)
                elif item[0] != "typed" and item[1].upper() != "NULL":
                    return []
            k += 1
            continue
        if kind == "word" and value in ("DATE", "TIMESTAMP") and k + 1 < n and toks[k + 1][0] == "string":
            k += 1  # typed already: kept as written
        elif kind == "string":
            found.append(toks[k])
        elif not (kind == "word" and value == "NULL"):
            return []
        if k + 1 >= n or toks[k + 1][0] not in ("comma", "close"):
            return []
        if toks[k + 1][0] == "close":
            return found
        k += 2
    return []


def _cast(tok: tuple[str, str, int, int], column: str, col: _Temporal, what: str) -> Cast:
    literal = tok[1][1:-1].replace("''", "'")
    kind, type_name = col.kind, col.type_name
    written = _date(literal) if kind == "date" else None
    if written is None:
        when = _time(literal)
        if when is not None and col.nanoseconds and not (
                _NS_RANGE[0] <= when[1].replace(tzinfo=None) <= _NS_RANGE[1]):
            raise InvalidOperationError(
                f"{what}: column {column!r} is {type_name}, which holds times from 1677-09-22 to 2262-04-10 "
                f"only, not '{literal}'")
        written = when[0] if when is not None else None
    if written is None:
        example = "'2001-01-31'" if kind == "date" else "'2001-01-31 08:30:00'"
        shown = tok[1] if len(tok[1]) <= 80 else tok[1][:40] + "…" + tok[1][-20:]
        raise InvalidOperationError(
            f"{what}: column {column!r} is {type_name} and {shown} is not a {'date' if kind == 'date' else 'time'}: "
            f"write an ISO {'date' if kind == 'date' else 'time'} such as {example}")
    return Cast(tok[2], tok[3], column, written)


def _date(literal: str) -> str | None:
    m = _DATE.fullmatch(literal)
    if m is None:
        return None
    try:
        day = dt.date(*map(int, m.groups()))
    except ValueError:
        return None
    return f"date '{day.isoformat()}'"


def _time(literal: str) -> tuple[str, dt.datetime] | None:
    """``timestamp '…'`` as DataFusion reads it, and the time (to check ranges); None if no time."""
    m = _DATE.fullmatch(literal)
    if m is not None:
        y, mo, d, hh, mi, ss, frac, zone = *m.groups(), "0", "0", None, None, None
    else:
        m = _TIME.fullmatch(literal)
        if m is None:
            return None
        y, mo, d, hh, mi, ss, frac, zone = m.groups()
    try:
        when = dt.datetime(int(y), int(mo), int(d), int(hh), int(mi), int(ss or 0))
    except ValueError:
        return None
    offset = ""
    if zone:
        if zone.upper() == "Z":
            offset = "Z"
        else:
            digits = zone[1:].replace(":", "").ljust(4, "0")
            if int(digits[:2]) > 23 or int(digits[2:]) > 59:
                return None
            offset = f"{zone[0]}{digits[:2]}:{digits[2:]}"
    return f"timestamp '{when.isoformat()}{frac or ''}{offset}'", when
