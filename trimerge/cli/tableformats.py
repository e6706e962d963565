"""What an output format of ``print_table`` cannot hold, made to fit or refused in one line.

A query's rows reach every format (``sql``, ``read``, ``search``, ``blame``): a list, struct or
vector column goes into CSV as JSON text in its cell (polars' CSV writer has no nested values), and
a column name a Lance dataset refuses (a ``.`` in a top-level name: Lance reads it as a path into a
struct) is refused before anything is written, naming the column. Duplicate names are renamed
where the rows are made (:func:`trimerge.lineage.tables.sql.unique_names`), and again here for any
table that reaches ``print_table`` with them: a JSON object would otherwise keep only one of them.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["csv_ready", "distinct_names", "lance_name_problem"]


def distinct_names(table: Any) -> Any:
    """``table`` with repeated column names renamed ``<name>_1``, … (the table itself when they differ)."""
    from trimerge.lineage.tables.sql import unique_names

    names = table.column_names
    return table if len(set(names)) == len(names) else table.rename_columns(unique_names(names))


def _nested(kind: Any) -> bool:
    import pyarrow as pa

    return bool(pa.types.is_nested(kind))


def csv_ready(table: Any) -> Any:
    """``table`` with every nested column (list, struct, map, fixed-size vector) replaced by its
    values as JSON text (null stays null); the table itself when it has none."""
    import pyarrow as pa

    for i, field in enumerate(table.schema):
        if not _nested(field.type):
            continue
        text = [None if v is None else json.dumps(v, default=str) for v in table.column(i).to_pylist()]
        table = table.set_column(i, pa.field(field.name, pa.string()), pa.array(text, pa.string()))
    return table


def lance_name_problem(table: Any) -> str | None:
    """Why a Lance dataset cannot hold ``table``'s column names (None when it can)."""
    for name in table.column_names:
        if "." in name:
            return (f"a Lance dataset cannot have a column named {name!r} (a '.' in a top-level name reads as a "
                    f"path into a struct); rename it (AS ...) or write another format")
    return None
