"""The text table of ``read``, ``sql``, ``search`` and ``check``, drawn without polars when it can be.

polars draws the table (``shape: (r, c)``, a header of name, ``---`` and type, one line per row), but
importing it costs a small ``trimerge read`` about a quarter of its time. :func:`simple_text` draws
the very same text in plain Python for the common case — at most :data:`MAX_COLUMNS` columns of
integers, booleans and printable ASCII text, narrower than the width polars wraps at; of more than
:data:`MAX_ROWS` rows the first and last halves, as polars shows them — and says ``None`` otherwise, where polars still draws it (lists, floats, dates,
wide tables, non-ASCII text...). tests/test_cli_texttable.py checks the two agree.
"""

from __future__ import annotations

import os
import sys
from typing import Any

#: What ``print_table`` gives polars (``pl.Config(tbl_rows=..., tbl_cols=..., fmt_str_lengths=...)``).
MAX_ROWS, MAX_COLUMNS, MAX_TEXT = 50, 20, 40
#: The width polars (comfy-table) wraps a table at when stdout is no terminal.
DEFAULT_WIDTH = 100

_INTEGERS = {"int8": "i8", "int16": "i16", "int32": "i32", "int64": "i64",
             "uint8": "u8", "uint16": "u16", "uint32": "u32", "uint64": "u64"}
_TYPES = {**_INTEGERS, "bool": "bool", "string": "str", "large_string": "str", "string_view": "str"}


def _width_limit() -> int | None:
    """The width polars would wrap at, or None where it is not known here (polars settings in the
    environment)."""
    if any(k.startswith(("POLARS_FMT", "POLARS_TABLE", "POLARS_TBL")) for k in os.environ):
        return None
    try:
        if sys.stdout.isatty():
            return os.get_terminal_size(sys.stdout.fileno()).columns
    except (AttributeError, OSError, ValueError):
        return None
    return DEFAULT_WIDTH


def _text(value: Any) -> str | None:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if not (value.isascii() and value.isprintable()):
        return None
    return value if len(value) <= MAX_TEXT else value[:MAX_TEXT] + "…"


def _name(name: str) -> str | None:
    return name if name.isascii() and name.isprintable() and len(name) <= MAX_TEXT else None


def simple_text(table: Any) -> str | None:
    """``str(pl.from_arrow(table))`` under ``print_table``'s polars settings, or None when the table
    is not the simple kind drawn here."""
    if not 0 < table.num_columns <= MAX_COLUMNS:
        return None
    names: list[str] = []
    types: list[str] = []
    for f in table.schema:
        name, kind = _name(f.name), _TYPES.get(str(f.type))
        if name is None or kind is None:
            return None
        names.append(name)
        types.append(kind)
    elided = table.num_rows > MAX_ROWS  # polars shows the first and the last MAX_ROWS // 2, and "…" between
    half = MAX_ROWS // 2
    shown = [table.slice(0, half), table.slice(table.num_rows - half)] if elided else [table]
    columns: list[list[str]] = []
    for i in range(table.num_columns):
        cells: list[str] = []
        for value in (v for part in shown for v in part.column(i).to_pylist()):
            cell = _text(value)
            if cell is None:
                return None
            cells.append(cell)
        if elided:
            cells.insert(half, "…")
        columns.append(cells)
    widths = [max(len(n), 3, len(t), *map(len, c)) for n, t, c in zip(names, types, columns)]
    limit = _width_limit()
    if limit is None or 1 + sum(w + 3 for w in widths) > limit:
        return None

    def line(cells: list[str], left: str = "│", sep: str = "┆", right: str = "│") -> str:
        return left + sep.join(f" {c.ljust(w)} " for c, w in zip(cells, widths)) + right

    def rule(left: str, fill: str, sep: str, right: str) -> str:
        return left + sep.join(fill * (w + 2) for w in widths) + right

    out = [f"shape: ({table.num_rows:_}, {table.num_columns:_})", rule("┌", "─", "┬", "┐"), line(names),
           line(["---"] * len(widths)), line(types), rule("╞", "═", "╪", "╡")]
    out += [line([c[i] for c in columns]) for i in range(len(columns[0]))]
    out.append(rule("└", "─", "┴", "┘"))
    return "\n".join(out)
