"""Three-way merge of one table's index definitions, beside its schema merge.

Indices are matched by name; a definition is (columns, kind, parameters). Added, dropped or
redefined on one side only → that side's; the same on both → one; added or redefined differently
on both → ``index.add_add``; dropped on one side and redefined on the other → ``index.drop_modify``.
The result is the set of definitions the merged table must have; :func:`reconcile` then makes a
written table match it — building only indices the table lacks (an index dest has keeps its
trained model; rows the merge wrote are added incrementally by the transaction's refresh).
"""

from __future__ import annotations

import json
from typing import Any, Callable, Mapping

from trimerge.lineage.tables.indices import KEY_INDEX, list_indices
from trimerge.lineage.history.threeway import merge_by_name
from trimerge.merge.resolve import BASE, THEIRS
from trimerge.merge.result import Conflict

Definitions = Mapping[str, tuple]
Decide = Callable[[Conflict], "str | None"]


def definitions(open_version: Callable[[Any], Any], tv: Any) -> dict[str, tuple]:
    """Name -> definition of the indices of a table version (none for a missing table)."""
    if tv is None:
        return {}
    # The key index is upkeep's (see trimerge.lineage.tables.keyed), not a definition a merge carries.
    return {i.name: i.definition for i in list_indices(open_version(tv), tv) if i.name != KEY_INDEX}


def _shown(d: tuple | None) -> dict[str, Any] | None:
    if d is None:
        return None
    return {"columns": list(d[0]), "kind": d[1], "params": json.loads(d[2])}


def merge_definitions(table: str, base: Definitions, ours: Definitions, theirs: Definitions,
                      decide: Decide) -> tuple[dict[str, tuple] | None, list[str]]:
    """The merged definitions (None: an unresolved conflict) and a description of each change
    taken from the source."""
    def conflict(name: str, b: tuple | None, o: tuple | None, t: tuple | None) -> str | None:
        kind = "index.drop_modify" if o is None or t is None else "index.add_add"
        what = "dropped on one side, redefined on the other" if kind == "index.drop_modify" else \
            "defined differently on both sides"
        defined = o or t
        assert defined is not None  # a conflict has a definition on at least one side
        return decide(Conflict(kind, table, columns=tuple(sorted(set(defined[0]))), base=_shown(b), ours=_shown(o),
                               theirs=_shown(t), message=f"index {name!r} {what}"))

    merged, taken, unresolved = merge_by_name(base, ours, theirs, conflict)
    changes = [f"index {name} from {how}" if how in (THEIRS, BASE) else
               f"{'redefine' if how == 'change' else how} index {name}" for name, how in taken]
    return (None if unresolved else merged), changes


def index_edits(have: Definitions, columns: set[str], wanted: Definitions) -> tuple[list[str], list[str]]:
    """(Indices to drop, indices to build) so that a table with indices ``have`` and ``columns``
    carries exactly ``wanted``: a wanted index present already, or whose column did not survive
    the merge, is left alone."""
    drops = sorted(n for n in have if n not in wanted)
    builds = sorted(n for n, d in wanted.items() if have.get(n) != d and set(d[0]) <= columns)
    return drops, builds


def reconcile(tx: Any, table: str, wanted: Mapping[str, tuple]) -> None:
    """Make ``table`` in transaction ``tx`` carry exactly the ``wanted`` indices: drop the others,
    build the missing or differently defined ones (only those are trained)."""
    have = {i.name: i.definition for i in tx.indices(table) if i.name != KEY_INDEX}
    drops, builds = index_edits(have, set(tx.schema(table).names), wanted)
    for name in drops:
        tx.drop_index(table, name)
    for name in builds:
        cols, kind, params = wanted[name]
        tx.create_index(table, cols[0], kind, name=name, replace=name in have, **json.loads(params))
