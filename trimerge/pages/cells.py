"""Values of the data as the pages show them: text, never markup (the templates escape it), cut
where a cell would swamp a page, always saying how much was cut.

A value reads as a person would type it (``2000-01-01 00:00:00``, not
``datetime.datetime(2000, 1, 1, 0, 0)``); ``null`` is shown apart from the text ``"null"`` by its
CSS class, which :func:`cell` returns with the text.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
import math
from dataclasses import dataclass
from typing import Any

__all__ = ["MAX_CELL_CHARS", "Cell", "cell", "text_of"]

#: A cell longer than this is cut (the page says so, with the full length).
MAX_CELL_CHARS = 400
_MAX_ITEMS = 12  # list items shown before "... N values"


@dataclass(frozen=True)
class Cell:
    """One shown value: its ``text``, whether it is ``null``, and ``cut`` (the full length when the
    text was shortened, else 0)."""

    text: str
    null: bool = False
    cut: int = 0

    @property
    def title(self) -> str:
        """Tooltip of a cut cell: how long the value is."""
        return f"{self.cut:,} characters; shown: the first {MAX_CELL_CHARS}" if self.cut else ""


def text_of(value: Any) -> str:
    """``value`` as one readable line of text (uncut)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else str(value)
    if isinstance(value, (int, decimal.Decimal)):
        return str(value)
    if isinstance(value, str):
        return value
    if isinstance(value, dt.datetime):
        return value.isoformat(sep=" ")
    if isinstance(value, (dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return str(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        raw = bytes(value)
        head = raw[:48]
        shown = head.decode("ascii") if head.isascii() and head.decode("ascii").isprintable() else \
            "base64:" + base64.b64encode(head).decode()
        return shown + (f"... ({len(raw):,} bytes)" if len(raw) > len(head) else "")
    if isinstance(value, (list, tuple)):
        items = [text_of(v) if not isinstance(v, str) else json.dumps(v) for v in value[:_MAX_ITEMS]]
        more = f", ... {len(value):,} values" if len(value) > _MAX_ITEMS else ""
        return "[" + ", ".join(items) + more + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {text_of(v) if not isinstance(v, str) else json.dumps(v)}"
                               for k, v in value.items()) + "}"
    return str(value)


def cell(value: Any) -> Cell:
    """A value ready for a table cell."""
    if value is None:
        return Cell("null", null=True)
    text = text_of(value)
    if len(text) > MAX_CELL_CHARS:
        return Cell(text[:MAX_CELL_CHARS] + "...", cut=len(text))
    return Cell(text)
