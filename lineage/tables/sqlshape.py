"""The shape of a SQL filter as a real parser sees it: sqlglot's parse, measured for
:mod:`trimerge.lineage.tables.filters` (which decides what the measures may be).

sqlglot reads standard SQL; Lance also quotes names with backquotes, so the dialect here adds
them. Its trees are shaped like sqlparser's (the parser inside Lance): binary operators
associate to the left, a parenthesis is a node, ``a IS NOT NULL`` is ``NOT(IS(a, NULL))``.
"""

from __future__ import annotations

import logging
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
    log = logging.getLogger("sqlglot")
    level = log.level
    log.setLevel(logging.CRITICAL)  # its warnings (a JSON path it cannot read…) would add lines to stderr
    try:
        tree = parse_one(text, read=LanceFilterSQL)
    except _GlotParseError as exc:
        first = exc.errors[0] if exc.errors else {}
        where = f" at line {first['line']}, column {first['col']}" if first.get("line") else ""
        raise ParseError(f"{first.get('description') or str(exc).splitlines()[0]}{where}") from None
    except TokenError as exc:
        raise ParseError(str(exc).splitlines()[0][:200]) from None
    except (ValueError, TypeError, KeyError, IndexError, AttributeError) as exc:  # a parser bug: still one line
        raise ParseError(f"cannot be parsed ({type(exc).__name__})") from None
    finally:
        log.setLevel(level)
    if tree is None or isinstance(tree, (exp.Select, exp.Query, exp.Command)):
        raise ParseError("expected an expression")
    return tree


# Rewritten by DataFusion into forms that repeat an operand — coalesce(a, b) (nvl and ifnull are
# coalesce) into CASE WHEN a IS NOT NULL THEN a …, a NOT BETWEEN l AND h into a < l OR a > h — so
# nesting them doubles the work per level (coalesce(coalesce(…, 1), 1) 16 deep: 1.5 s, 20: 16 s).
# BETWEEN counts un-negated too, for the NOT that may sit above it. Anonymous calls are matched by name.
_EXPANDING = (exp.Coalesce, exp.Between)
_EXPANDING_NAMES = {"coalesce", "nvl", "ifnull"}


def measure(tree: Any) -> tuple[int, int, int, int, int]:
    """``(nodes, depth, terms, nesting, expansions)`` of a parsed expression.

    * nodes: every node of the tree;
    * depth: the most nodes on one root-to-leaf path, ``AND``/``OR`` not counted;
    * terms: the most ``AND``/``OR`` nodes on one path;
    * nesting: how deep a recursive-descent parser recurses — a binary operator's left operand is
      read in a loop (same level), every other child (right operand, argument, parenthesised or
      negated expression, cast operand) one level deeper;
    * expansions: the most calls on one path that DataFusion rewrites by repeating an operand
      (see ``_EXPANDING``): the work doubles with each.

    Walked with an explicit stack: the trees measured may be far deeper than Python's."""
    nodes = depth = terms = nesting = expansions = 0
    todo = [(tree, 1, 0, 0, 0)]
    while todo:
        node, d, t, n, x = todo.pop()
        nodes += 1
        if isinstance(node, exp.Connector):  # AND, OR
            d, t = d - 1, t + 1
        if isinstance(node, _EXPANDING) or (isinstance(node, exp.Anonymous)
                                            and str(node.name).lower() in _EXPANDING_NAMES):
            x += 1
        depth, terms, nesting, expansions = max(depth, d), max(terms, t), max(nesting, n), max(expansions, x)
        binary = isinstance(node, exp.Binary)
        for child in node.iter_expressions():
            left = binary and child.arg_key == "this"
            todo.append((child, d + 1, t, n if left else n + 1, x))
    return nodes, depth, terms, nesting, expansions
