"""Filters that name whole keys: ``id = 7``, ``id IN (1, 2)``, ``a = 1 AND b = 'x'``, and ORs of them.

Users delete by filter (``tx.delete("t", "id = 7")``) far more often than by a table of keys. A
filter Lance evaluates costs what the table costs, while the same keys looked up through the key
index cost what they are (:mod:`trimerge.lineage.tables.keyed`). :func:`pinned_keys` recognises the
filters that are exactly a set of whole primary keys and returns those keys, so the caller can take
the keyed path; anything else — another column, a range, a function, a literal whose type is not
the column's — returns None and is left to Lance, so the rows chosen never differ.
"""

from __future__ import annotations

import itertools
from typing import Any, Sequence

import pyarrow as pa
from sqlglot import exp

from trimerge.lineage.tables import sqlshape

#: More pinned keys than this are left to Lance (the keyed path has its own, larger, limit).
MAX_PINNED_KEYS = 10_000

_Pins = dict[str, list[Any]]  # key column -> the values it may take (a conjunction of columns)


def pinned_keys(where: str, schema: pa.Schema, primary_key: Sequence[str]) -> pa.Table | None:
    """The distinct keys ``where`` selects when it selects exactly the rows of some whole keys
    (a table of the key columns, typed as ``schema``), else None. ``where`` must have passed
    :func:`trimerge.lineage.tables.filters.check_filter` (bounded size and depth)."""
    pk = list(primary_key)
    try:
        tree = sqlshape.parse(where)
    except (sqlshape.ParseError, RecursionError):
        return None
    alternatives = _alternatives(tree, pk, schema)
    if not alternatives:
        return None
    columns: dict[str, list[Any]] = {k: [] for k in pk}
    total = 0
    for pins in alternatives:
        if set(pins) != set(pk):  # some key column is not pinned: not whole keys
            return None
        total += _product_size(pins)
        if total > MAX_PINNED_KEYS:
            return None
        for combo in itertools.product(*(pins[k] for k in pk)):
            for k, value in zip(pk, combo):
                columns[k].append(value)
    try:
        arrays = [pa.array(columns[k], type=schema.field(k).type) for k in pk]
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, KeyError):
        return None
    import polars as pl

    return pl.from_arrow(pa.table(arrays, names=pk)).unique(maintain_order=True).to_arrow().cast(
        pa.schema([schema.field(k) for k in pk]))


def _product_size(pins: _Pins) -> int:
    size = 1
    for values in pins.values():
        size *= len(values)
    return size


def _alternatives(node: Any, pk: list[str], schema: pa.Schema) -> list[_Pins] | None:
    """The filter as an OR of conjunctions pinning key columns, or None if it is not one."""
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.Or):
        left, right = _alternatives(node.left, pk, schema), _alternatives(node.right, pk, schema)
        return None if left is None or right is None else left + right
    pins = _conjunction(node, pk, schema)
    return None if pins is None else [pins]


def _conjunction(node: Any, pk: list[str], schema: pa.Schema) -> _Pins | None:
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.And):
        left, right = _conjunction(node.left, pk, schema), _conjunction(node.right, pk, schema)
        if left is None or right is None or set(left) & set(right):
            return None  # `id = 1 AND id = 2` is left to Lance rather than reasoned about
        return {**left, **right}
    if isinstance(node, exp.EQ):
        column, value = _column_and_literal(node.left, node.right, pk, schema)
        if column is None and value is None:
            column, value = _column_and_literal(node.right, node.left, pk, schema)
        return None if column is None else {column: [value]}
    if isinstance(node, exp.In) and not node.args.get("query") and not node.args.get("unnest") \
            and not node.args.get("field"):
        column = _key_column(node.this, pk)
        if column is None:
            return None
        values = [_literal(v, schema.field(column).type) for v in node.expressions]
        if not values or any(v is None for v in values):
            return None
        return {column: values}
    return None


def _column_and_literal(col: Any, lit: Any, pk: list[str], schema: pa.Schema) -> tuple[str | None, Any]:
    column = _key_column(col, pk)
    if column is None:
        return None, None
    value = _literal(lit, schema.field(column).type)
    return (None, None) if value is None else (column, value)


def _key_column(node: Any, pk: list[str]) -> str | None:
    """The key column ``node`` names exactly (no table prefix, same case), else None."""
    if not isinstance(node, exp.Column) or node.table or not isinstance(node.this, exp.Identifier):
        return None
    name = node.this.this
    return name if name in pk else None


def _literal(node: Any, type_: pa.DataType) -> Any:
    """The Python value of a literal of the column's own kind (text for strings, an integer for
    integers), else None: other pairs go through Lance's own coercion rules."""
    negative = False
    if isinstance(node, exp.Neg):
        negative, node = True, node.this
    if not isinstance(node, exp.Literal):
        return None
    if node.is_string:
        if negative or not (pa.types.is_string(type_) or pa.types.is_large_string(type_)):
            return None
        return node.this
    if not pa.types.is_integer(type_) or not (node.this.isascii() and node.this.isdigit()):
        return None
    value = int(node.this)
    return -value if negative else value
