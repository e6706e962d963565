"""When two values are the same: the one equality rule of diff and merge.

Values are compared null-safely (null equals null, never a value) and floats exactly, with NaN
equal to NaN; nested lists and structs compare element by element under the same rule. Polars'
``eq_missing`` implements exactly this, so both engines' Python side build on these helpers.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import polars as pl
import pyarrow as pa


def same_values(lhs: pl.Expr, rhs: pl.Expr, lhs_type: pl.DataType | None = None,
                rhs_type: pl.DataType | None = None) -> pl.Expr:
    """Whether ``lhs`` and ``rhs`` hold the same value. Columns of different types (across a
    widening) are compared in ``rhs``'s type; values that do not convert compare as null."""
    if lhs_type is not None and rhs_type is not None and lhs_type != rhs_type:
        lhs = lhs.cast(rhs_type, strict=False)
    return lhs.eq_missing(rhs)


def names_where(flags: pl.DataFrame, names: Sequence[str], n: int, alias: str = "changed_columns") -> pl.Series:
    """Per row (``n`` rows), the names whose boolean flag column is set, in column order — a list
    column built in bulk rather than row by row."""
    if not names or n == 0:
        return pl.Series(alias, [[]] * n, dtype=pl.List(pl.String))
    matrix = flags.fill_null(False).to_numpy().astype(bool, copy=False)
    _rows, cols = np.nonzero(matrix)  # row-major: each row's columns in order
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(matrix.sum(axis=1), out=offsets[1:])
    values = pa.array(list(names), pa.string()).take(pa.array(cols, pa.int64()))
    return pl.from_arrow(pa.ListArray.from_arrays(pa.array(offsets), values)).alias(alias)
