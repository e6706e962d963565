"""Arrow types polars cannot hold, carried through diff and merge without loss.

polars (2.x) panics on ``decimal256`` (``operator does not support primitive Int256``, a Rust
panic, not an exception). Lance stores it, so trimerge must compare and carry it: on the way into
polars a ``decimal256(p, s)`` becomes ``decimal128(p, s)`` when ``p <= 38`` (the same numbers) and
its exact decimal text otherwise (at one scale, equal text is equal value); on the way out the
column is cast back to the type the table stores. Nested types (struct, list) are handled field by
field.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import pyarrow as pa

DECIMAL128_MAX_PRECISION = 38


def polars_safe_type(t: pa.DataType) -> pa.DataType:
    """The type ``t`` is carried as inside polars (``t`` itself for every type polars holds)."""
    if pa.types.is_decimal256(t):
        return pa.decimal128(t.precision, t.scale) if t.precision <= DECIMAL128_MAX_PRECISION else pa.string()
    if pa.types.is_struct(t):
        fields = [f.with_type(polars_safe_type(f.type)) for f in t]
        return pa.struct(fields) if any(a.type != b.type for a, b in zip(fields, t)) else t
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        inner = polars_safe_type(t.value_type)
        if inner == t.value_type:
            return t
        return pa.large_list(inner) if pa.types.is_large_list(t) else pa.list_(inner)
    return t


def needs_encoding(schema: pa.Schema) -> bool:
    return any(polars_safe_type(f.type) != f.type for f in schema)


def safe_schema(schema: pa.Schema) -> pa.Schema:
    """``schema`` with every type polars cannot hold replaced by its carrier."""
    if not needs_encoding(schema):
        return schema
    return pa.schema([f.with_type(polars_safe_type(f.type)) for f in schema], metadata=schema.metadata)


def encode(table: pa.Table) -> pa.Table:
    """``table`` ready for ``pl.from_arrow`` (unchanged unless it holds such a type)."""
    if not needs_encoding(table.schema):
        return table
    return table.cast(safe_schema(table.schema))


def to_polars(table: pa.Table) -> Any:
    """``pl.from_arrow`` that does not panic on decimal256."""
    import polars as pl

    return pl.from_arrow(encode(table))


def restore(table: pa.Table, types: Mapping[str, pa.DataType], structs: Sequence[str] = ()) -> pa.Table:
    """Cast the columns named in ``types`` — and the same-named fields of the struct columns
    ``structs`` — back to those types (what :func:`encode` carried them as)."""
    wanted = {n: t for n, t in types.items() if polars_safe_type(t) != t}
    if not wanted:
        return table
    fields = []
    for f in table.schema:
        if f.name in wanted:
            fields.append(f.with_type(wanted[f.name]))
        elif f.name in structs and pa.types.is_struct(f.type):
            fields.append(f.with_type(pa.struct([g.with_type(wanted.get(g.name, g.type)) for g in f.type])))
        else:
            fields.append(f)
    schema = pa.schema(fields, metadata=table.schema.metadata)
    return table if schema == table.schema else table.cast(schema)
