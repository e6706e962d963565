"""Column-level differences between two versions of a table's schema."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Sequence

import pyarrow as pa


@dataclass(frozen=True)
class SchemaChange:
    """One column-level schema difference."""

    kind: Literal["added", "dropped", "type_changed", "nullability_changed", "primary_key_changed"]
    column: str
    before: str | None = None
    after: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "column": self.column, "before": self.before, "after": self.after}



def schema_changes(before: pa.Schema | None, after: pa.Schema | None,
                   key_before: Sequence[str] = (), key_after: Sequence[str] = ()) -> list[SchemaChange]:
    """Column-level differences between two schemas (field metadata ignored)."""
    if before is None or after is None:
        return []
    out: list[SchemaChange] = []
    for f in after:
        if f.name not in before.names:
            out.append(SchemaChange("added", f.name, None, str(f.type)))
        else:
            g = before.field(f.name)
            if g.type != f.type:  # string -> large_string too: merges and reverts must keep a widening
                out.append(SchemaChange("type_changed", f.name, str(g.type), str(f.type)))
            elif g.nullable != f.nullable and f.name not in key_after:
                out.append(SchemaChange("nullability_changed", f.name, str(g.nullable), str(f.nullable)))
    for g in before:
        if g.name not in after.names:
            out.append(SchemaChange("dropped", g.name, str(g.type), None))
    if tuple(key_before) != tuple(key_after):
        out.append(SchemaChange("primary_key_changed", ",".join(key_after), ",".join(key_before), ",".join(key_after)))
    return out


def index_changes(before: Any, after: Any) -> list[dict[str, Any]]:
    """Indices added, dropped or redefined between two snapshots (:class:`trimerge.diff.planner.Snapshot`)."""
    from trimerge.lineage.tables.indices import list_indices

    b_indices, a_indices = ({i.name: i for i in list_indices(s.ds, s.tv)} for s in (before, after))
    out = []
    for name in sorted(b_indices.keys() | a_indices.keys()):
        b, a = b_indices.get(name), a_indices.get(name)
        if b is not None and a is not None and b.definition == a.definition:
            continue
        change = "added" if b is None else "dropped" if a is None else "redefined"
        shown = a or b
        assert shown is not None  # the name came from one side or the other
        out.append({"index": name, "change": change, "columns": list(shown.columns), "kind": shown.kind,
                    "params": dict(shown.params)})
    return out
