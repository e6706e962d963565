"""Who decides a conflict: a resolution given by hand, then the table's strategy, then a fallback.

Every conflict ends in one *choice*: ``ours`` (dest's value stays), ``theirs`` (the source's),
``base`` (the merge base's) or ``value`` (a value given by hand) — or stays unresolved. The
resolver only decides; applying a choice to rows is the fold's job (:mod:`trimerge.merge.rows`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import pyarrow as pa

from trimerge.lineage.errors import InvalidOperationError
from trimerge.merge.resolutions import Resolution, Resolutions
from trimerge.merge.result import Conflict, strategy_for

OURS, THEIRS, BASE, VALUE = "ours", "theirs", "base", "value"
_BY_STRATEGY = {"dest-wins": OURS, "source-wins": THEIRS}


@dataclass(frozen=True)
class Decision:
    """How one conflict (or one conflicting cell) is settled."""

    choice: str  # ours | theirs | base | value
    by: str  # hand | strategy | fallback
    resolution: Resolution | None = None  # the hand-given resolution, with its value


class Resolver:
    """Decides conflicts for one merge.

    ``fallback`` settles whatever neither a resolution nor a strategy does: None for a user's
    merge (the conflict is reported), ``base`` for the inner merges that build a virtual base."""

    def __init__(self, resolutions: Resolutions | None = None, strategy: Any = None, fallback: str | None = None,
                 *, virtual_base: bool = False, on_stale: str = "report"):
        self.resolutions = resolutions if resolutions is not None else Resolutions()
        self.strategy = strategy
        self.fallback = fallback
        # Deciding for a virtual base: a key both sides inserted differently stays, with null values
        # (git's virtual base keeps an empty file there), so that a later delete of it conflicts.
        self.virtual_base = virtual_base
        # Rows a merge would leave with a derived value and inputs from different sides:
        # "report" them, or make them "conflict"s (trimerge.lineage.gates.derived).
        self.on_stale = on_stale

    @property
    def by_hand(self) -> bool:
        """Whether any resolution was given (otherwise every decision is per table, vectorised)."""
        return len(self.resolutions) > 0

    def default(self, table: str) -> tuple[str | None, str]:
        """The choice for conflicts of ``table`` that no resolution names, and who made it."""
        strategy = strategy_for(self.strategy, table)
        if strategy is not None:
            return _BY_STRATEGY[strategy], "strategy"
        return self.fallback, "fallback"

    def find(self, kind: str, table: str, key_text: str | None, column: str | None) -> Resolution | None:
        """The hand-given resolution of one conflict cell, marked as used."""
        found = self.resolutions.find(kind, table, key_text, column)
        if found is not None:
            self.resolutions.applied += 1
        return found

    def decide_table(self, conflict: Conflict) -> Decision | None:
        """A conflict about a whole table or its schema; ``value`` is not a choice there."""
        found = self.find(conflict.kind, conflict.table, None, None)
        if found is not None:
            if found.resolution == VALUE:
                raise InvalidOperationError(f"{found.describe()}: a {conflict.kind} conflict is resolved by "
                                            "'ours', 'theirs' or 'base' only")
            return Decision(found.resolution, "hand", found)
        choice, by = self.default(conflict.table)
        return Decision(choice, by) if choice is not None else None

    def unused(self) -> list[Resolution]:
        return self.resolutions.unused()


def typed_value(found: Resolution, column: str, value: Any, schema: pa.Schema) -> Any:
    """A hand-given value, checked against the column's type (a clear error naming the conflict)."""
    if column not in schema.names:
        raise InvalidOperationError(f"{found.describe()}: the table has no column {column!r}")
    if value is None:
        return None
    try:
        return pa.array([value], type=schema.field(column).type)[0].as_py()
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OverflowError):
        raise InvalidOperationError(f"{found.describe()}: value {value!r} does not fit column {column!r} "
                                    f"({schema.field(column).type})") from None


def cell_value(found: Resolution, column: str, schema: pa.Schema) -> Any:
    """The value a ``value`` resolution gives one conflicting cell, typed."""
    values = found.value or {}
    if column not in values:
        raise InvalidOperationError(f"{found.describe()}: 'value' has no {column!r} (give {{{column!r}: ...}})")
    return typed_value(found, column, values[column], schema)


def given_row(found: Resolution, key: Mapping[str, Any], value_columns: list[str], schema: pa.Schema,
              table: str) -> dict[str, Any]:
    """The whole-row value of a ``value`` resolution, typed; key columns in it are ignored."""
    unknown = [c for c in (found.value or {}) if c not in value_columns and c not in key]
    if unknown:
        raise InvalidOperationError(f"{found.describe()}: no column(s) {unknown} in {table}")
    return {c: typed_value(found, c, v, schema) for c, v in (found.value or {}).items() if c not in key}
