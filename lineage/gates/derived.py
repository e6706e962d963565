"""Derived columns: a column computed from others (an embedding from ``text``, a label from
features), declared so that diffs and merges can say when a row's derived value no longer matches
its inputs.

A declaration is table state: ``TableVersion.derived`` (column -> input columns) is recorded in
every commit, so it travels with branches, time travel and merges (three-way, by column, like the
schema: :func:`merge_declarations`). Dropping a column drops the declarations that name it.

*Stale* rows (what a declaration is for):

* in a diff, an updated row whose inputs changed while its derived column did not
  (:func:`stale_in_diff`);
* in a merge, a row whose final derived value comes from one side while an input it depends on
  comes from the other side's change (:func:`stale_mask`): nobody computed that value from those
  inputs. A merge reports them (``MergeResult.stale``) or, with ``on_stale="conflict"``, makes
  them conflicts of kind ``row.stale_derived``.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

from trimerge.lineage.errors import InvalidOperationError, SchemaMismatchError

Declarations = Mapping[str, tuple[str, ...]]
#: ``on_stale=``: report stale rows (the default) or make them conflicts.
ON_STALE = ("report", "conflict")


def as_dict(derived: Sequence[tuple[str, Sequence[str]]] | None) -> dict[str, tuple[str, ...]]:
    return {c: tuple(i) for c, i in (derived or ())}


def as_record(declarations: Declarations) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """The canonical form kept in a ``TableVersion`` (sorted, hashable)."""
    return tuple(sorted((c, tuple(i)) for c, i in declarations.items()))


def checked(table: str, columns: Sequence[str], primary_key: Sequence[str], current: Declarations,
            column: Any, inputs: Any) -> dict[str, tuple[str, ...]]:
    """``current`` with ``column`` declared derived from ``inputs`` (None or empty: the declaration
    removed), after checking it: existing non-key columns, not its own input, no cycle."""
    what = f"set_derived on {table}"
    if not isinstance(column, str) or not column:
        raise SchemaMismatchError(f"{what}: the derived column must be a column name, not {column!r}")
    if column not in columns:
        raise SchemaMismatchError(f"{what}: no column {column!r} (columns: {', '.join(columns)})")
    if column in primary_key:
        raise SchemaMismatchError(f"{what}: {column!r} is part of the primary key and cannot be derived")
    out = dict(current)
    if inputs is None or (isinstance(inputs, (list, tuple)) and not inputs):
        out.pop(column, None)
        return out
    if isinstance(inputs, str):
        inputs = [inputs]
    if not isinstance(inputs, (list, tuple)) or not all(isinstance(i, str) for i in inputs):
        raise SchemaMismatchError(f"{what}: inputs= takes a list of column names, not {inputs!r}")
    missing = [i for i in inputs if i not in columns]
    if missing:
        raise SchemaMismatchError(f"{what}: no input column(s) {missing} (columns: {', '.join(columns)})")
    if column in inputs:
        raise SchemaMismatchError(f"{what}: {column!r} cannot be an input of itself")
    out[column] = tuple(dict.fromkeys(inputs))
    cycle = find_cycle(out)
    if cycle:
        raise SchemaMismatchError(f"{what}: the declarations would form a cycle: {' <- '.join(cycle)}")
    return out


def declare(tx: Any, table: str, declarations: Declarations) -> None:
    """Record ``declarations`` as ``table``'s derived columns in transaction ``tx`` (through its
    ``table_version``/``set_table``: table state only, no data written), if they changed."""
    from dataclasses import replace

    tv = tx.table_version(table)
    record = as_record(declarations)
    if record != tv.derived:
        tx.set_table(table, replace(tv, derived=record))


def find_cycle(declarations: Declarations) -> list[str]:
    """A cycle among derived columns (each derived from the next), or []."""
    import networkx as nx

    graph = nx.DiGraph([(c, i) for c, inputs in declarations.items() for i in inputs])
    try:
        edges = nx.find_cycle(graph)
    except nx.NetworkXNoCycle:
        return []
    return [u for u, _ in edges] + [edges[0][0]]


def without_columns(declarations: Declarations, dropped: Sequence[str]) -> dict[str, tuple[str, ...]]:
    """The declarations that survive dropping ``dropped`` (any naming them goes)."""
    gone = set(dropped)
    return {c: i for c, i in declarations.items() if c not in gone and not gone.intersection(i)}


def merge_declarations(base: Declarations, ours: Declarations, theirs: Declarations,
                       decide: Callable[[str, tuple | None, tuple | None, tuple | None], "str | None"]
                       ) -> tuple[dict[str, tuple[str, ...]] | None, list[str]]:
    """Three-way merge by column (:func:`~trimerge.lineage.history.threeway.merge_by_name`); different
    changes on both sides ask ``decide(column, base, ours, theirs)``. Returns (merged — None when
    a conflict stays unresolved —, changes taken)."""
    from trimerge.lineage.history.threeway import merge_by_name

    merged, taken, unresolved = merge_by_name(base, ours, theirs, decide)
    changes = [f"{'undeclare' if how == 'drop' else 'declare'} derived {column}" for column, how in taken]
    return (None if unresolved else merged), changes


def stale_mask(declarations: Declarations, from_source: Callable[[str], Any], from_dest: Callable[[str], Any],
               columns: Sequence[str]) -> Any:
    """A polars expression: the rows whose final derived value comes from one side's change while
    one of its inputs comes from the other side's change. ``from_source(c)`` / ``from_dest(c)``:
    expressions saying the final value of ``c`` is that side's changed value."""
    import polars as pl

    present = set(columns)
    parts = []
    for column, inputs in declarations.items():
        used = [i for i in inputs if i in present]
        if column not in present or not used:
            continue
        src_inputs = pl.any_horizontal([from_source(i) for i in used])
        dest_inputs = pl.any_horizontal([from_dest(i) for i in used])
        parts.append((from_source(column) & dest_inputs) | (from_dest(column) & src_inputs))
    return pl.any_horizontal(parts) if parts else pl.lit(False)


def stale_in_diff(declarations: Declarations, changed_columns: Any) -> Any:
    """A polars expression over a diff's ``changed_columns`` list: an input changed, the derived
    column did not."""
    import polars as pl

    parts = [pl.any_horizontal([changed_columns.list.contains(i) for i in inputs])
             & ~changed_columns.list.contains(column) for column, inputs in declarations.items() if inputs]
    return pl.any_horizontal(parts) if parts else pl.lit(False)


def check_on_stale(on_stale: Any) -> str:
    if on_stale not in ON_STALE:
        raise InvalidOperationError(f"on_stale={on_stale!r}: choose {' or '.join(map(repr, ON_STALE))}")
    return on_stale
