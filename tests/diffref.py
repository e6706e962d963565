"""An independent reference diff: read both snapshots completely and compare in plain Python.

Shared by the diff and merge tests; deliberately shares no code with the engine."""

from __future__ import annotations

import math
from typing import Any

import pyarrow as pa


def same(x: Any, y: Any) -> bool:
    """Null-safe, exact equality with NaN equal to NaN (the engine's documented float semantics)."""
    if x is None or y is None:
        return x is None and y is None
    if isinstance(x, float) and isinstance(y, float):
        return (math.isnan(x) and math.isnan(y)) or x == y
    if isinstance(x, dict) and isinstance(y, dict):
        return x.keys() == y.keys() and all(same(x[k], y[k]) for k in x)
    if isinstance(x, list) and isinstance(y, list):
        return len(x) == len(y) and all(same(a, b) for a, b in zip(x, y))
    return x == y


def keyed(table: pa.Table, key: list[str]) -> dict[tuple, dict]:
    out = {}
    for row in table.to_pylist():
        k = tuple(row[c] for c in key)
        assert k not in out, f"duplicate key {k}"
        out[k] = row
    return out


def reference_diff(before: pa.Table | None, after: pa.Table | None, key: list[str]) -> dict[tuple, tuple]:
    """key -> (change, sorted changed columns) for every changed row."""
    b = keyed(before, key) if before is not None else {}
    a = keyed(after, key) if after is not None else {}
    bcols = [c for c in (before.column_names if before is not None else []) if c not in key]
    acols = [c for c in (after.column_names if after is not None else []) if c not in key]
    out = {}
    for k in b.keys() | a.keys():
        if k not in a:
            out[k] = ("delete", ())
        elif k not in b:
            out[k] = ("insert", ())
        else:
            changed = [c for c in acols if (c in bcols and not same(b[k][c], a[k][c]))
                       or (c not in bcols and a[k][c] is not None)]
            if changed:
                out[k] = ("update", tuple(sorted(changed)))
    return out


def engine_rows(rows: pa.Table, key: list[str]) -> dict[tuple, tuple]:
    out = {}
    for r in rows.to_pylist():
        k = tuple(r[c] for c in key)
        assert k not in out, f"engine reported key {k} twice"
        out[k] = (r["change"], tuple(sorted(r["changed_columns"] or [])))
    return out
