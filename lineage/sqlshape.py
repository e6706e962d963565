"""The shape of a SQL filter as a real parser sees it: sqlglot's parse, measured for
:mod:`trimerge.lineage.filters` (which decides what the measures may be).

sqlglot reads standard SQL; Lance also quotes names with backquotes, so the dialect here adds
them. Its trees are shaped like sqlparser's (the parser inside Lance): binary operators
associate to the left, a parenthesis is a node, ``a IS NOT NULL`` is ``NOT(IS(a, NULL))``.
"""

from __future__ import annotations

from typing import Any

from sqlglot import exp, parse_one, tokens
from sqlglot.dialects.dialect import Dialect
from sqlglot.errors import ParseError as _GlotParseError
from sqlglot.errors import TokenError


class LanceFilterSQL(Dialect):
    """Lance's filter SQL for sqlglot: standard SQL, names in double quotes or backquotes."""

    class Tokenizer(tokens.Tokenizer):
        IDENTIFIERS = ['"', "`"]


class ParseError(ValueError):
    """The text is not one SQL expression (the message is one line)."""


def parse(text: str) -> Any:
    """The expression tree of ``text``. Raises :class:`ParseError`, or RecursionError for chains
    of prefix operators too long for Python's stack."""
    try:
        tree = parse_one(text, read=LanceFilterSQL)
    except _GlotParseError as exc:
        first = exc.errors[0] if exc.errors else {}
        where = f" at line {first['line']}, column {first['col']}" if first.get("line") else ""
        raise ParseError(f"{first.get('description') or str(exc).splitlines()[0]}{where}") from None
    except TokenError as exc:
        raise ParseError(str(exc).splitlines()[0][:200]) from None
    if tree is None or isinstance(tree, (exp.Select, exp.Query, exp.Command)):
        raise ParseError("expected an expression")
    return tree


def measure(tree: Any) -> tuple[int, int, int, int]:
    """``(nodes, depth, terms, nesting)`` of a parsed expression.

    * nodes: every node of the tree;
    * depth: the most nodes on one root-to-leaf path, ``AND``/``OR`` not counted;
    * terms: the most ``AND``/``OR`` nodes on one path;
    * nesting: how deep a recursive-descent parser recurses — a binary operator's left operand is
      read in a loop (same level), every other child (right operand, argument, parenthesised or
      negated expression, cast operand) one level deeper.

    Walked with an explicit stack: the trees measured may be far deeper than Python's."""
    nodes = depth = terms = nesting = 0
    todo = [(tree, 1, 0, 0)]
    while todo:
        node, d, t, n = todo.pop()
        nodes += 1
        if isinstance(node, exp.Connector):  # AND, OR
            d, t = d - 1, t + 1
        depth, terms, nesting = max(depth, d), max(terms, t), max(nesting, n)
        binary = isinstance(node, exp.Binary)
        for child in node.iter_expressions():
            left = binary and child.arg_key == "this"
            todo.append((child, d + 1, t, n if left else n + 1))
    return nodes, depth, terms, nesting
