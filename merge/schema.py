"""Three-way merge of one table's schema.

Columns are matched by name. A column added, dropped or widened on one side only is added,
dropped or widened; the same column changed differently on both sides is ``schema.column``;
dropped on one side while the other changed values in it is ``schema.drop_modify``; a primary
key that moved, or a key column whose type changed other than by one lossless widening (applied
like any other widening), is ``schema.primary_key`` (a conflict about the whole table). Works on schemas and column sets only, so it is testable without data.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import pyarrow as pa

from trimerge.lineage.tables.conversion import is_widening, plain_type
from trimerge.merge.resolve import BASE, THEIRS
from trimerge.merge.result import Conflict

#: Called for each column conflict; returns the choice that settles it (None: unresolved).
Decide = Callable[[Conflict], "str | None"]


@dataclass
class SchemaMerge:
    """The merged schema and the schema edits dest needs.

    ``schema`` is None when the table cannot be merged row by row: ``table_conflict`` (a key
    conflict, settled for the whole table) or ``to_base`` (a column conflict settled by ``base``:
    the whole table goes back to the merge base)."""

    schema: pa.Schema | None
    add_columns: list[pa.Field] = field(default_factory=list)
    widen: list[tuple[str, pa.DataType]] = field(default_factory=list)
    drop_columns: list[str] = field(default_factory=list)
    restore_columns: list[str] = field(default_factory=list)  # re-added on dest, filled from the source
    changes: list[str] = field(default_factory=list)
    table_conflict: Conflict | None = None
    to_base: bool = False


def key_conflict(table: str, sb: pa.Schema | None, so: pa.Schema, st: pa.Schema, kb: tuple[str, ...] | None,
                 ko: tuple[str, ...], kt: tuple[str, ...]) -> Conflict | None:
    """The ``schema.primary_key`` conflict of a table, if its key moved or changed type."""
    converged = ko == kt and sb is not None and all(k in sb.names for k in ko)
    if kb is not None and (ko != kb or kt != kb) and not converged:
        moved = (set(kb) ^ set(ko)) | (set(kb) ^ set(kt))
        keys = {"base": kb, "dest": ko, "source": kt}
        return Conflict("schema.primary_key", table, columns=tuple(sorted(moved)),
                        message=f"primary key changed ({keys})")
    def retyped_key(k: str) -> bool:
        to, tt = plain_type(so.field(k).type), plain_type(st.field(k).type)
        tb = plain_type(sb.field(k).type) if sb is not None and k in sb.names else None
        if tb is None:
            return to != tt
        # A lossless widening on one side only is applied: rows still match by value.
        return not (to == tt == tb or (to == tb and is_widening(tb, tt)) or (tt == tb and is_widening(tb, to))
                    or (to == tt and is_widening(tb, to)))

    retyped = sorted(k for k in ko if k in st.names and k in so.names and retyped_key(k))
    if retyped:
        return Conflict("schema.primary_key", table, columns=tuple(retyped), message="type of key column(s) changed")
    return None


def merge_schema(table: str, sb: pa.Schema | None, so: pa.Schema, st: pa.Schema, kb: tuple[str, ...] | None,
                 ko: tuple[str, ...], kt: tuple[str, ...], changed_o: set[str], changed_t: set[str],
                 decide: Decide) -> SchemaMerge:
    """Merge the schemas of base ``sb``, dest ``so`` and source ``st``; ``changed_o``/``changed_t``
    are the columns whose values each side changed."""
    conflict = key_conflict(table, sb, so, st, kb, ko, kt)
    if conflict is not None:
        return SchemaMerge(None, table_conflict=conflict)
    out = SchemaMerge(None)
    fields: list[pa.Field] = list(so)

    def widen(name: str, g: pa.Field, dtype: pa.DataType) -> None:
        out.widen.append((name, dtype))
        fields[so.get_field_index(name)] = g.with_type(dtype)
        out.changes.append(f"widen {name} to {dtype}")

    for f in st:
        bt = sb.field(f.name).type if sb is not None and f.name in sb.names else None
        if f.name in so.names:
            g = so.field(f.name)
            if g.type == f.type:
                continue  # same type (only nullability may differ: dest's stays)
            if bt is not None and g.type == bt and is_widening(bt, f.type):
                widen(f.name, g, f.type)  # widened on the source only
            elif bt is not None and f.type == bt and is_widening(bt, g.type):
                continue  # widened on dest only
            else:
                choice = decide(Conflict("schema.column", table, columns=(f.name,),
                                         base={"type": str(bt)} if bt else None, ours={"type": str(g.type)},
                                         theirs={"type": str(f.type)}, message="column type changed differently"))
                if choice == BASE:
                    return SchemaMerge(None, to_base=True)
                # The source's type wins where that widens dest's column losslessly; otherwise dest's
                # type stays and the source's values are cast into it.
                if choice == THEIRS and is_widening(g.type, f.type):
                    widen(f.name, g, f.type)
        elif bt is not None:
            if f.name in changed_t:  # dest dropped it; the source changed values in it
                choice = decide(Conflict("schema.drop_modify", table, columns=(f.name,),
                                         message="dropped on dest, values changed on source"))
                if choice == BASE:
                    return SchemaMerge(None, to_base=True)
                if choice == THEIRS:
                    out.add_columns.append(f.with_nullable(True))
                    out.restore_columns.append(f.name)
                    fields.append(f.with_nullable(True))
                    out.changes.append(f"restore {f.name}")
        else:
            out.add_columns.append(f.with_nullable(True))
            fields.append(f.with_nullable(True))
            out.changes.append(f"add {f.name}")
    for g in so:
        if g.name in st.names or sb is None or g.name not in sb.names:
            continue
        if g.name in changed_o:  # the source dropped it; dest changed values in it
            choice = decide(Conflict("schema.drop_modify", table, columns=(g.name,),
                                     message="dropped on source, values changed on dest"))
            if choice == BASE:
                return SchemaMerge(None, to_base=True)
            if choice != THEIRS:
                continue
        if g.name in ko:
            continue
        out.drop_columns.append(g.name)
        fields = [x for x in fields if x.name != g.name]
        out.changes.append(f"drop {g.name}")
    out.schema = pa.schema(fields)
    return out
