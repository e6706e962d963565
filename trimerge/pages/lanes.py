"""The commit graph drawn for the log page: one lane per line of descent, as SVG coordinates.

The same walk as ``log --graph`` (:func:`trimerge.lineage.history.graph.iter_history`, newest
first; lanes open at a merge's other parents and converge where two lines reach one commit), laid
out as one fixed-height row per commit so each row's drawing is a small SVG of its own beside the
commit's text: lines from the top edge into the commit's dot, from the dot to the bottom edge
towards its parents, and straight through for lanes passing by. A pure function over the graph
interface (``parents``, ``generation``, ``created_at``): tested on plain graphs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from trimerge.lineage.history import graph as graphalg

__all__ = ["LANE_WIDTH", "MAX_LANES", "ROW_HEIGHT", "GraphRow", "layout"]

LANE_WIDTH = 14
ROW_HEIGHT = 28
MAX_LANES = 24  # lanes beyond this are drawn in the last one (a wide history stays readable)
COLORS = 8
_NODE = -1  # origin of a lane that leaves the commit's dot


@dataclass
class GraphRow:
    """One commit's row: its lane, and the lines of its drawing as ``(x1, y1, x2, y2, color)``."""

    commit_id: str
    column: int
    lanes: int
    color: int
    lines: list[tuple[int, int, int, int, int]] = field(default_factory=list)

    @property
    def width(self) -> int:
        """Width of the row's SVG in pixels."""
        return LANE_WIDTH * min(max(self.lanes, 1), MAX_LANES) + 4

    @property
    def cx(self) -> int:
        return _x(self.column)

    @property
    def cy(self) -> int:
        return ROW_HEIGHT // 2


def _x(lane: int) -> int:
    return LANE_WIDTH // 2 + 2 + LANE_WIDTH * min(lane, MAX_LANES - 1)


def layout(graph: graphalg.CommitGraph, starts: Sequence[str], *, first_parent: bool = False, skip: int = 0,
           limit: int = 100) -> list[GraphRow]:
    """Rows ``skip`` .. ``skip + limit`` of the drawing (the walk before them lays out the lanes)."""
    lanes: list[str] = []
    colors: list[int] = []
    next_color = 0
    rows: list[GraphRow] = []
    walk = graphalg.iter_history(graph, list(starts), first_parent=first_parent) if starts else iter(())
    for n, cid in enumerate(walk):
        if n >= skip + limit:
            break
        fresh = cid not in lanes  # a tip: nothing comes in from above
        if fresh:
            lanes.append(cid)
            colors.append(next_color % COLORS)
            next_color += 1
        col = lanes.index(cid)
        color = colors[col]
        top, mid, bottom = 0, ROW_HEIGHT // 2, ROW_HEIGHT
        lines = [] if fresh else [(_x(j), top, _x(col), mid, colors[j]) for j, lane in enumerate(lanes) if lane == cid]
        keep = [j for j, lane in enumerate(lanes) if lane != cid or j == col]
        after = [lanes[j] for j in keep]
        origin = list(keep)
        after_colors = [colors[j] for j in keep]
        here = keep.index(col)
        parents = graph.parents(cid)
        parents = parents[:1] if first_parent else parents
        joined: list[str] = []
        if not parents:
            del after[here], origin[here], after_colors[here]
        else:
            after[here], origin[here] = parents[0], _NODE
            inserted = 0
            for p in parents[1:]:
                if p in after:
                    joined.append(p)  # the other parent's lane is open already: the line joins it
                    continue
                inserted += 1
                at = here + inserted
                after.insert(at, p)
                origin.insert(at, _NODE)
                after_colors.insert(at, next_color % COLORS)
                next_color += 1
        joins = [after.index(p) for p in joined]
        for i, o in enumerate(origin):
            if o == _NODE:
                lines.append((_x(col), mid, _x(i), bottom, after_colors[i]))
            else:
                lines.append((_x(o), top, _x(i), bottom, after_colors[i]))
        lines.extend((_x(col), mid, _x(i), bottom, after_colors[i]) for i in joins)
        if n >= skip:
            rows.append(GraphRow(cid, col, max(len(lanes), len(after), col + 1), color, lines))
        lanes, colors = after, after_colors
    return rows
