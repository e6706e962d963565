"""What a data check's query reads, and whether it is row-local: decided from the query's sqlglot
tree, before anything runs.

:func:`tables_read` names the tables of the ref a check reads besides its own (joins, ``EXISTS``,
``IN`` subqueries, CTE bodies): those are registered beside its table when it runs, and such a
check runs on the whole result (a row's verdict depends on other tables' rows).

A check is *row-local* when whether a row fails, and what the query returns for it, depends on
that row alone — ``SELECT * FROM t WHERE a < 0``. Then the failing rows of a table are the union
of each row's own verdict, so a table that passed a check and then changed fails it exactly where
the changed rows do: a gated merge may run such a check on the rows it wrote alone
(:mod:`trimerge.merge.checkdelta`).

The rule is an allow-list, so anything it does not know is *not* row-local and runs on the whole
table: one ``SELECT`` (no set operations, CTEs or subqueries) over the check's own table (one
table, no joins, no sample, no column renaming alias), with only a select list, ``WHERE`` and
``ORDER BY`` (no ``GROUP BY``, ``HAVING``, ``QUALIFY``, window, ``DISTINCT``, ``LIMIT`` or
``OFFSET``); every column it names is one of the table's (an unknown bare word may be a DuckDB
keyword that reads the session); and every expression is a literal, a column, an operator, a cast
or a scalar function sqlglot knows — not an aggregate, not a table function, and not one whose
value changes between calls (``random()``, ``uuid()``, ``now()``, ``current_date``, sequences,
session state). A function sqlglot does not know is accepted only if it is on a short list of
DuckDB scalars known to be deterministic.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Iterable

#: Select clauses a row-local query may use (sqlglot spells FROM ``from_`` since 26, ``from`` before).
_SELECT_ARGS = frozenset({"expressions", "from", "from_", "where", "order"})
#: Prefixes of sqlglot function classes whose value depends on the moment, the session or a generator.
_VOLATILE_PREFIXES = ("Current", "Rand", "Seq", "Session", "Sys", "Local", "Uuid", "Generate", "Exploding")
#: DuckDB scalars sqlglot parses as Anonymous that depend only on their arguments.
_KNOWN_SCALARS = frozenset({
    "isnan", "isinf", "isfinite", "contains", "starts_with", "ends_with", "prefix", "suffix", "strlen",
    "length_grapheme", "regexp_full_match", "list_has", "array_has", "list_has_any", "list_has_all",
    "array_length", "len", "greatest", "least", "nullif", "ifnull", "signbit", "even", "gcd", "lcm",
})


def tables_read(sql: str, table: str) -> tuple[str, ...]:
    """The tables other than ``table`` that ``sql`` names in ``FROM`` or ``JOIN`` (anywhere in the
    query), as written and in first-seen order, compared case-insensitively as DuckDB does. Not
    counted: CTE names, table functions (``read_csv(...)``: DuckDB runs them, with file access
    off), and schema-qualified names (``information_schema.tables``: DuckDB's own catalog). Empty
    for text that does not parse."""
    return _tables_read(sql, table.lower())


@lru_cache(maxsize=256)
def _tables_read(sql: str, table: str) -> tuple[str, ...]:
    import sqlglot
    from sqlglot import exp

    try:
        statements = [s for s in sqlglot.parse(sql, read="duckdb") if s is not None]
    except (sqlglot.errors.ParseError, sqlglot.errors.TokenError, RecursionError):
        return ()
    out: dict[str, str] = {}
    for tree in statements:
        ctes = {cte.alias_or_name.lower() for cte in tree.find_all(exp.CTE)}
        for node in tree.find_all(exp.Table):
            if not isinstance(node.this, exp.Identifier) or node.args.get("db") or node.args.get("catalog"):
                continue
            name = node.name
            if name and name.lower() not in ctes and name.lower() != table:
                out.setdefault(name.lower(), name)
    return tuple(out.values())


def row_local(sql: str, table: str, columns: Iterable[str]) -> bool:
    """Whether ``sql``, a check on ``table`` whose columns are ``columns``, is row-local (see the
    module docstring); False for anything that does not parse as one query."""
    return _row_local(sql, table.lower(), frozenset(c.lower() for c in columns))


@lru_cache(maxsize=256)
def _row_local(sql: str, table: str, columns: frozenset[str]) -> bool:
    import sqlglot
    from sqlglot import exp

    try:
        statements = [s for s in sqlglot.parse(sql, read="duckdb") if s is not None]
    except (sqlglot.errors.ParseError, sqlglot.errors.TokenError):
        return False
    if len(statements) != 1 or not isinstance(statements[0], exp.Select):
        return False
    tree = statements[0]
    if set(_present(tree)) - _SELECT_ARGS:
        return False
    source = tree.args.get("from_", tree.args.get("from"))
    if not isinstance(source, exp.From) or set(_present(source)) != {"this"} or not isinstance(source.this, exp.Table):
        return False
    names = _table_names(source.this, table)
    if names is None:
        return False
    return all(_allowed(node, names, columns) for node in tree.walk())


def _present(node: Any) -> list[str]:
    return [k for k, v in node.args.items() if v not in (None, False, [], "")]


def _table_names(node: Any, table: str) -> set[str] | None:
    """The names a column may be qualified with (the table's and its alias), or None when the
    FROM item is anything but the check's own table, plainly named."""
    from sqlglot import exp

    if set(_present(node)) - {"this", "alias"} or not isinstance(node.this, exp.Identifier) \
            or node.name.lower() != table:
        return None
    alias = node.args.get("alias")
    if alias is None:
        return {table}
    if not isinstance(alias, exp.TableAlias) or set(_present(alias)) != {"this"}:
        return None  # ``t AS x(a, b)`` renames the columns
    return {table, alias.name.lower()}


def _allowed(node: Any, tables: set[str], columns: frozenset[str]) -> bool:
    from sqlglot import exp

    if isinstance(node, exp.Select):
        return node.parent is None  # one SELECT: no subquery
    if isinstance(node, (exp.From, exp.Table, exp.TableAlias, exp.Where, exp.Order, exp.Ordered,
                         exp.Identifier, exp.Star, exp.Alias, exp.Literal, exp.Boolean, exp.Null, exp.Paren,
                         exp.DataType, exp.DataTypeParam, exp.Not, exp.Neg, exp.Between, exp.Case, exp.If,
                         exp.Array, exp.Tuple, exp.Bracket, exp.Interval)):
        return True
    if isinstance(node, exp.Column):
        qualifier = node.args.get("table")
        named = isinstance(node.this, exp.Star) or node.name.lower() in columns
        return set(_present(node)) <= {"this", "table"} and named \
            and (qualifier is None or qualifier.name.lower() in tables)
    if isinstance(node, exp.Var):  # a unit word: INTERVAL 1 DAY
        return isinstance(node.parent, exp.Interval)
    if isinstance(node, exp.In):
        return set(_present(node)) <= {"this", "expressions"}  # a list, not a subquery or UNNEST
    if isinstance(node, (exp.AggFunc, exp.UDTF, exp.Window)) or isinstance(node, exp.PropertyEQ):
        return False
    if isinstance(node, exp.Anonymous):
        return str(node.this).lower() in _KNOWN_SCALARS
    if isinstance(node, (exp.Func, exp.Binary, exp.Cast)):
        return not type(node).__name__.startswith(_VOLATILE_PREFIXES)
    return False

