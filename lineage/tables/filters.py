"""SQL filters (``--where``, ``filter=``) and other client expressions (a served query's
projections): parsed and measured once, before Lance sees them.

Lance parses a filter with sqlparser and plans it with DataFusion; both recurse over the
expression. Measured with pylance 14, each probe in a subprocess (``tests/test_filter_limits.py``
runs filters at the limits below through Lance the same way, so a Lance that handles less fails
a test instead of a user):

* a left-deep chain of one binary operator (``1+1+…``, ``-``, ``*``, ``||``, ``=``, ``<``, …)
  crashes the process (SIGSEGV on a Lance worker thread, whatever the caller's stack) at about
  830 operators, and costs seconds from 400 on (delete: 2 s at 400, 5 s at 600);
* ``AND``/``OR`` chains do not crash up to 5,000 terms (1.5 s at 4,000);
* ``coalesce``/``nvl``/``ifnull`` with a nested call in a first argument, and ``NOT BETWEEN``,
  are rewritten by repeating an operand: nested, the work doubles per level (16 deep: 1.5-17 s,
  20: minutes or the memory);
* nesting — brackets, function calls, ``CAST``, ``NOT``, unary minus, a right operand — is cut
  by sqlparser's recursion limit at about 47 levels; just past it some forms (``CAST(CAST(…``,
  ``TRY_CAST``, ``NOT (NOT (…``) backtrack exponentially and hang for minutes instead of failing;
* ``IN`` lists plan in about 3 s at 100,000 values (17 s at 300,000); a function's argument
  list takes as long at a tenth of that width.

A filter is therefore refused with one clear line (:class:`InvalidOperationError`) when it:

* is not text, is empty, longer than :data:`MAX_FILTER_CHARS` characters, holds a NUL character
  or is not valid Unicode;
* holds a placeholder (``?``, ``$1``) or an unterminated string, quoted name or comment;
* is not one expression: a ``;`` outside strings and quoted names, a ``,`` outside brackets, or
  brackets that do not pair up. Lance reads a filter as the first expression of ``SELECT … WHERE
  <filter>`` and silently drops whatever follows it (``id > 0; AND v < 0`` deleted every row with
  ``id > 0``); :func:`plan_filter` catches any other trailing text (``id = 1 garbage``, ``… ORDER BY``);
* nests more than :data:`MAX_FILTER_NESTING` levels (brackets, calls, ``NOT``, unary signs,
  right operands — each as sqlparser recurses on it);
* is more than :data:`MAX_FILTER_DEPTH` operators deep, not counting ``AND``/``OR``;
* nests ``coalesce``/``nvl``/``ifnull`` calls and ``BETWEEN`` more than
  :data:`MAX_FILTER_EXPANSIONS` deep on one path;
* chains more than :data:`MAX_FILTER_TERMS` ``AND``/``OR`` terms on one path;
* has more than :data:`MAX_FILTER_NODES` tokens besides literal lists, more than
  :data:`MAX_IN_VALUES` values in one ``IN (...)`` list or in all lists together, or more than
  :data:`MAX_LIST_ITEMS` items in one argument list or array.

The shape comes from a real parse (sqlglot, with backquoted names as Lance writes them). Long
lists of plain literals are shortened to two items before parsing — they add width, never depth —
so a 100,000-key ``IN`` list is checked in milliseconds. A filter of at most
:data:`MAX_FILTER_NESTING` tokens cannot exceed any limit and is not parsed at all.

Then :func:`plan_filter` plans it (does not run it) against the table's schema, so an unknown
column or a type mismatch is reported before anything is written. :func:`prepare_filter` does
both and first types the text literals a filter compares with date and timestamp columns
(``date < '2001-01-01'``, which Lance's SQL does not cast; :mod:`trimerge.lineage.tables.filtercasts`):
the filter to run is the text it returns.

Lance parses a projection (``columns={"x": "id + 1"}``, LanceDB's ``select({...})``) with the same
parser and planner, and crashes on the same shapes (``id+id+…``: SIGSEGV from about 830 terms,
measured like the filters above). :func:`check_expressions` applies every limit above to each of
the expressions one request sends (a projection such as ``id * 2`` need not be boolean) and bounds
their parts together; :func:`plan_projection` plans projections as :func:`plan_filter` plans a filter.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, Mapping

from trimerge.lineage.errors import InvalidOperationError, lance_message

MAX_FILTER_CHARS = 1_000_000
MAX_FILTER_NESTING = 32  # sqlparser gives up at ~47 and may hang just before: keep well below
MAX_FILTER_DEPTH = 128  # operators on one path besides AND/OR: crash at ~830, seconds from 400
MAX_FILTER_TERMS = 1_024  # AND/OR on one path: fine at 5,000
MAX_FILTER_NODES = 20_000  # tokens besides literal lists: bounds the time of our parse and Lance's plan
MAX_IN_VALUES = 100_000  # values in one IN list, and in all lists together
MAX_LIST_ITEMS = 10_000  # items of one argument list or array literal
MAX_FILTER_EXPANSIONS = 8  # coalesce/nvl/ifnull, BETWEEN nested on one path: 2^n work (12: ~0.1-1 s)

_COLLAPSE_AT = 8  # a run of more literal items than this is parsed as two
_PAIRS = {"(": ")", "[": "]"}

# One token of Lance's SQL: order matters (comments before operators, numbers before '.').
_TOKEN = re.compile(r"""
    (?P<ws>\s+)
  | (?P<line_comment>--[^\n]*)
  | (?P<block_comment>/\*)
  | (?P<string>'(?:[^']|'')*')
  | (?P<quoted>"(?:[^"]|"")*"|`(?:[^`]|``)*`)
  | (?P<number>0[xX][0-9A-Fa-f]+|(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)
  | (?P<word>[^\W\d]\w*)
  | (?P<placeholder>\?|\$\d)
  | (?P<open>[(\[])
  | (?P<close>[)\]])
  | (?P<comma>,)
  | (?P<op>::|<=|>=|<>|!=|\|\||<<|>>|->>|->|=>|[-+*/%=<>!&|^~#@:.;{}$])
  | (?P<other>.)
""", re.VERBOSE | re.DOTALL)
# A run of plain literal list items, each followed by its comma ("1, -2, 'a', NULL, "): read in
# one regex step and parsed as two items, since they add width to a list, never depth.
# Typed literals (``date '2001-01-01'``, what filtercasts writes) count as plain ones.
_ITEM = (r"\s*(?:[-+]\s*)?(?:0[xX][0-9A-Fa-f]+|(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?"
         r"|(?:(?i:date|timestamp)\s*)?'(?:[^']|'')*'|(?i:true|false|null)\b)\s*,")
_RUN = re.compile(f"(?:{_ITEM}){{{_COLLAPSE_AT},}}")
_ITEM_PARTS = re.compile(r"(?P<typed>(?i:date|timestamp)\s*'(?:[^']|'')*')|(?P<string>'(?:[^']|'')*')"
                         r"|(?P<word>(?i:true|false|null)\b)|(?P<number>[-+]?\s*[0-9.][0-9A-Fa-fxX.eE+-]*)")
_ONE_ITEM = re.compile(_ITEM)


@dataclass
class FilterShape:
    """What :func:`measure_filter` found: the limits above are checked against these."""

    tokens: int = 0  # tokens besides the shortened literal runs: the "parts" MAX_FILTER_NODES bounds
    nesting: int = 0
    depth: int = 0
    terms: int = 0
    nodes: int = 0  # of the parsed tree (0 when not parsed)
    in_values: int = 0  # largest IN list
    list_items: int = 0  # largest other list
    values: int = 0  # literal values in lists, all together
    expansions: int = 0  # coalesce/nvl/ifnull and BETWEEN nested on one path
    parsed: bool = False
    text: str = field(default="", repr=False)  # what was parsed: the filter with long literal runs shortened


def check_filter(text: Any, what: str = "filter", *, kind: str = "filter") -> str:
    """Return ``text`` if it passes the limits above, else raise :class:`InvalidOperationError`.
    ``kind`` names what the text is in the messages ("filter", "projection", ...)."""
    _enforce(measure_filter(text, what, kind=kind), what)
    return text


def check_expressions(items: Iterable[tuple[str, Any, str]]) -> None:
    """Check the expressions one request sends, ``(what, text, kind)`` each: every one as
    :func:`check_filter` checks it, and all of them together within :data:`MAX_FILTER_NODES`
    parts (Lance plans each, so a request of many expressions costs their sum)."""
    total = 0
    for what, text, kind in items:
        shape = measure_filter(text, what, kind=kind)
        _enforce(shape, what)
        total += shape.tokens
        if total > MAX_FILTER_NODES:
            raise InvalidOperationError(f"{what}: the request's expressions have over {MAX_FILTER_NODES:,} parts "
                                        f"together (the limit); send fewer or smaller ones")


def _enforce(shape: FilterShape, what: str) -> None:
    limits = ((shape.nesting, MAX_FILTER_NESTING,
               "nests {n} levels deep (brackets, function calls, CAST, NOT, signs; the limit is {m})"),
              (shape.depth, MAX_FILTER_DEPTH, "is {n} operators deep (the limit is {m}); split it into several calls"),
              (shape.expansions, MAX_FILTER_EXPANSIONS,
               "nests coalesce, nvl, ifnull or BETWEEN {n} deep (the limit is {m}: each level doubles Lance's work)"),
              (shape.terms, MAX_FILTER_TERMS,
               "chains {n} AND/OR terms (the limit is {m}); use IN (...) for long lists"),
              (shape.tokens, MAX_FILTER_NODES, "has {n} parts (the limit is {m}); use IN (...) for long lists"),
              (shape.in_values, MAX_IN_VALUES, "lists {n} values in one IN (...) (the limit is {m})"),
              (shape.values, MAX_IN_VALUES, "lists {n} values in all (the limit is {m})"),
              (shape.list_items, MAX_LIST_ITEMS, "passes {n} items in one argument list or array (the limit is {m})"))
    for n, m, message in limits:
        if n > m:
            raise InvalidOperationError(f"{what} " + message.format(n=f"{n:,}", m=f"{m:,}"))


def measure_filter(text: Any, what: str = "filter", *, kind: str = "filter") -> FilterShape:
    """The shape of filter ``text``: lexical problems raise :class:`InvalidOperationError`; the
    measures are returned for :func:`check_filter` (and tests) to compare with the limits."""
    if not isinstance(text, str):
        raise InvalidOperationError(f"{what} must be SQL text, not {type(text).__name__}")
    if not text.strip():
        hint = " (use 'true' to select every row)" if kind == "filter" else ""
        raise InvalidOperationError(f"{what} is empty{hint}")
    if len(text) > MAX_FILTER_CHARS:
        raise InvalidOperationError(f"{what} is {len(text):,} characters long; the limit is {MAX_FILTER_CHARS:,}")
    if "\x00" in text:
        raise InvalidOperationError(f"{what} holds a NUL character")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidOperationError(f"{what} is not valid Unicode") from None
    shape = _scan(text, what, f"a {kind}" if kind[:1] not in "aeiou" else f"an {kind}")
    if shape.nesting > MAX_FILTER_NESTING or shape.tokens > MAX_FILTER_NODES or shape.tokens <= MAX_FILTER_NESTING:
        return shape  # too deep or too large to be worth parsing — or too short to break any limit
    _measure_tree(shape, what)
    return shape


def _scan(text: str, what: str, noun: str) -> FilterShape:
    """Tokenize: refuse what no parse needs to see (placeholders, unterminated quotes), count
    list widths per bracket, and shorten long runs of literal list items."""
    shape = FilterShape()
    blanks: list[tuple[int, int]] = []  # comments: parsed as one blank
    cuts: list[tuple[int, int]] = []  # the shortened parts of literal runs
    tokens: list[tuple[str, str, int, int]] = []  # (kind, value, start, end), blanks and comments left out
    stack: list[list[Any]] = []  # open brackets: [is an IN list, items]
    pos, n = 0, len(text)
    while pos < n:
        m = _TOKEN.match(text, pos)
        kind, value = m.lastgroup, m.group()
        if kind in ("block_comment", "line_comment"):
            end = _comment_end(text, pos) if kind == "block_comment" else m.end()
            if end < 0:
                raise InvalidOperationError(f"{what}: unterminated /* comment at character {pos + 1}")
            blanks.append((pos, end))
            pos = end
            continue
        if kind == "other" and value in "'\"`":
            raise InvalidOperationError(f"{what}: unterminated {value}...{value} at character {pos + 1}")
        if kind == "placeholder":
            raise InvalidOperationError(f"{what}: placeholders such as '?' or '$1' are not supported; write the value")
        if value == ";":
            raise InvalidOperationError(f"{what}: ';' at character {pos + 1}: {noun} is one SQL expression, "
                                        "not statements (quote a ';' that is part of a value: 'a;b')")
        if kind == "comma" and not stack:
            hint = " (join conditions with AND / OR)" if noun == "a filter" else ""
            raise InvalidOperationError(f"{what}: ',' at character {pos + 1} outside brackets: {noun} is one "
                                        f"SQL expression{hint}")
        pos = m.end()
        if kind == "ws":
            continue
        tokens.append((kind, value, m.start(), m.end()))
        if kind == "open":
            before = tokens[-2] if len(tokens) > 1 else None
            is_in = value == "(" and before is not None and before[0] == "word" and before[1].upper() == "IN"
            stack.append([is_in, 1, value, m.start()])
            shape.nesting = max(shape.nesting, len(stack))
        elif kind == "close":
            if not stack or _PAIRS[stack[-1][2]] != value:
                raise InvalidOperationError(f"{what}: unmatched {value!r} at character {m.start() + 1}: "
                                            f"{noun} is one SQL expression")
            _close_list(shape, stack.pop())
        elif kind == "comma" and stack:
            stack[-1][1] += 1
        if kind in ("open", "comma") and stack:
            run = _RUN.match(text, pos)
            if run:
                stack[-1][1] += len(_ONE_ITEM.findall(run.group()))
                kept = _ONE_ITEM.match(text, _ONE_ITEM.match(text, pos).end()).end()
                tokens.extend([("number", "0", pos, pos), ("comma", ",", pos, pos)] * 2)  # the two parsed
                cuts.append((kept, run.end()))
                pos = run.end()
    if stack:
        raise InvalidOperationError(f"{what}: {stack[-1][2]!r} at character {stack[-1][3] + 1} is never closed")
    shape.tokens = len(tokens)
    shape.text = _rewrite(text, blanks, cuts)
    return shape


def _close_list(shape: FilterShape, entry: list[Any]) -> None:
    is_in, items = entry[0], entry[1]
    if items > 1:
        shape.values += items
    if is_in:
        shape.in_values = max(shape.in_values, items)
    else:
        shape.list_items = max(shape.list_items, items)


def _comment_end(text: str, start: int) -> int:
    """End of the block comment opening at ``start`` (nested ones count, as sqlparser reads them), or -1."""
    depth, i = 0, start
    while True:
        opening, closing = text.find("/*", i), text.find("*/", i)
        if closing < 0:
            return -1
        if 0 <= opening < closing:
            depth, i = depth + 1, opening + 2
            continue
        depth, i = depth - 1, closing + 2
        if depth == 0:
            return i


def _rewrite(text: str, blanks: list[tuple[int, int]], cuts: list[tuple[int, int]]) -> str:
    """``text`` with each comment as one blank and each cut span removed (a cut may hold comments)."""
    if not blanks and not cuts:
        return text
    spans = sorted([(s, e, " ") for s, e in blanks] + [(s, e, "") for s, e in cuts])
    pieces, last = [], 0
    for start, end, replacement in spans:
        if start < last:  # a comment inside a cut span: gone with it
            continue
        pieces.append(text[last:start] + replacement)
        last = end
    pieces.append(text[last:])
    return "".join(pieces)


def _measure_tree(shape: FilterShape, what: str) -> None:
    """Parse ``shape.text`` and measure its tree (see :func:`trimerge.lineage.tables.sqlshape.measure`)."""
    from trimerge.lineage.tables import sqlshape

    try:
        tree = sqlshape.parse(shape.text)
    except RecursionError:  # only a chain of prefix operators gets here (brackets were counted)
        shape.nesting = max(shape.nesting, MAX_FILTER_NESTING + 1)
        return
    except sqlshape.ParseError as exc:
        raise InvalidOperationError(f"{what}: not a SQL expression ({exc})") from None
    shape.parsed = True
    shape.nodes, shape.depth, shape.terms, nesting, shape.expansions = sqlshape.measure(tree)
    shape.nesting = max(shape.nesting, nesting)


def tokens(text: str) -> Iterator[tuple[str, str, int, int]]:
    """The tokens of a filter that passed :func:`check_filter`, blanks and comments left out:
    ``(kind, text, start, end)``, ``kind`` a group of the tokenizer above (``word``, ``string``,
    ``quoted``, ``op``, ``open``, ``close``, ``comma``, ``number``...) or ``run``: after a bracket
    or comma, a run of more than eight plain literal list items, each with its comma, as one token
    (a 100,000-key ``IN`` list is one regex step, not 200,000 tokens; :func:`run_items` splits one)."""
    pos, n = 0, len(text)
    while pos < n:
        m = _TOKEN.match(text, pos)
        kind = m.lastgroup or "other"
        end = _comment_end(text, pos) if kind == "block_comment" else m.end()
        if kind not in ("ws", "line_comment", "block_comment"):
            yield kind, m.group(), pos, end
        pos = end if end > pos else n
        if kind in ("open", "comma") and (run := _RUN.match(text, pos)):
            yield "run", run.group(), pos, run.end()
            pos = run.end()


def run_items(run: tuple[str, str, int, int]) -> Iterator[tuple[str, str, int, int]]:
    """The items of a ``run`` token of :func:`tokens`, as tokens (``string``, ``number``, ``word``, ``typed``
    for ``date '…'``), their commas left out."""
    for m in _ITEM_PARTS.finditer(run[1]):
        kind = m.lastgroup or "other"
        yield kind, m.group(kind), run[2] + m.start(kind), run[2] + m.end(kind)


def prepare_filter(dataset: Any, text: Any, what: str) -> str:
    """The filter to give Lance for ``text`` on ``dataset``: checked (:func:`check_filter`), its
    text literals compared with date and timestamp columns typed
    (:func:`trimerge.lineage.tables.filtercasts.cast_literals`) and planned (:func:`plan_filter`)."""
    from trimerge.lineage.tables.filtercasts import cast_literals

    typed = cast_literals(dataset.schema, check_filter(text, what), what)
    plan_filter(dataset, typed, what)
    return typed


def plan_filter(dataset: Any, text: str, what: str) -> None:
    """Plan (do not run) ``text`` on a Lance dataset: unknown columns and type mismatches say so here.

    Planned in brackets (the closing one on a line of its own, past any ``--`` comment): Lance
    parses the first expression and ignores what follows it, but inside brackets anything after
    the expression must be the closing bracket. :func:`check_filter` has made sure the text's own
    brackets pair up, so that bracket is ours."""
    try:
        dataset.scanner(filter=whole(text), columns=[]).explain_plan()
    except (OSError, ValueError, RuntimeError) as exc:
        from trimerge.lineage.tables.filtercasts import find_casts

        casts = find_casts(dataset.schema, text, what)  # a caller that did not prepare_filter
        if casts:
            c = casts[0]
            raise InvalidOperationError(
                f"{what}: column {c.column!r} is {dataset.schema.field(c.column).type} and Lance's SQL does not "
                f"cast text to it: write {c.written} for {text[c.start:c.end]}") from None
        raise InvalidOperationError(f"{what}: bad filter {text[:200]!r}: {_refusal(exc, text)}") from None


def whole(text: str) -> str:
    """``text`` as Lance must parse all of it: in brackets, the closing one on a line of its own
    (see :func:`plan_filter`). The text's own brackets must pair up (:func:`check_filter`)."""
    return f"({text}\n)"


def plan_projection(dataset: Any, columns: Mapping[str, str], what: str) -> dict[str, str]:
    """Plan (do not run) a projection ``{output name: expression}`` on a Lance dataset, each
    expression checked by :func:`check_expressions` first; the projection to give Lance (each
    expression :func:`whole`, so no trailing text is ever dropped)."""
    projection = {name: whole(text) for name, text in columns.items()}
    for name, text in columns.items():  # one at a time: the error names the expression at fault
        try:
            dataset.scanner(columns={name: projection[name]}, limit=0).explain_plan()
        except (OSError, ValueError, RuntimeError) as exc:
            raise InvalidOperationError(f"{what} {name[:100]!r}: bad expression {text[:200]!r}: "
                                        f"{_refusal(exc, text)}") from None
    return projection


def _refusal(exc: Exception, text: str) -> str:
    """Lance's reason for refusing ``text`` (planned :func:`whole`), on one line."""
    parser = re.search(r"\(sql parser error: (.*)\)", str(exc).replace("\n", " "))
    typed = re.search(r"Received literal Utf8\(\"(.{0,100}?)\"\) and could not convert to literal of type '(\w+)'",
                      str(exc))
    if typed:  # a string compared with a typed value in an expression cast_literals leaves alone
        literal, kind = typed.groups()
        hint = (f"date '{literal}'" if kind.startswith("Date") else f"timestamp '{literal}'" if "Timestamp" in kind
                else f"CAST('{literal}' AS type)")
        return f"the text '{literal}' is compared with a {kind} value and Lance's SQL does not cast text: write {hint}"
    detail = (f"not one SQL expression (the parser: {parser.group(1).split(', /')[0]})" if parser
              else lance_message(exc).replace(f"({text}", text))
    return detail[:300]
