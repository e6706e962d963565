"""The ``diff`` table function of ``repo.sql`` / ``trimerge sql`` (see :mod:`trimerge.lineage.tables.sql`).

``diff('<A>', '<B>', '<table>')`` compares the tips of A and B (as ``diff A B``), and
``diff('<A>...<B>', '<table>')`` or ``diff('<A>..<B>', '<table>')`` takes a range. Each row is
one changed row: the key columns, ``change``, ``changed_columns``, then ``before_<column>`` and
``after_<column>`` for every value column (null where the row is absent on that side) — flat, so
a query filters and joins on them as on any table.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from trimerge.lineage.errors import InvalidOperationError


def diff_rows(repo: Any, *args: Any) -> pa.Table:
    """The flat changed rows of one table between two refs (see the module docstring)."""
    from trimerge.diff.api import diff

    if len(args) == 3:
        a, b, table = args
    elif len(args) == 2 and ".." in str(args[0]):
        (a, table), b = args, None
    else:
        raise InvalidOperationError("sql: diff takes ('A', 'B', 'table') or ('A...B', 'table')")
    if not all(isinstance(x, str) for x in (a, table)) or (b is not None and not isinstance(b, str)):
        raise InvalidOperationError("sql: diff's refs and table are text")
    d = diff(a, b, repo=repo, tables=[table])
    if table not in d.tables:
        raise InvalidOperationError(f"sql: diff({', '.join(repr(x) for x in args)}): no table {table!r} at either ref")
    return flatten(d.tables[table].rows())


def flatten(rows: pa.Table) -> pa.Table:
    """``rows`` with the ``before``/``after`` structs spread into ``before_<c>`` / ``after_<c>``."""
    out = rows
    for side in ("before", "after"):
        if side not in rows.column_names:
            continue
        struct = rows.column(side)
        at = out.schema.get_field_index(side)
        out = out.remove_column(at)
        for i in range(struct.type.num_fields):
            name = struct.type.field(i).name
            out = out.append_column(f"{side}_{name}", pc.struct_field(struct, i))
    return out
