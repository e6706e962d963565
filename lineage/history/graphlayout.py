"""The commit graph drawn as text, like ``git log --graph``: one lane per line of descent.

A pure function over the graph interface of :mod:`trimerge.lineage.history.graph` (``parents``,
``generation``, ``created_at``), so it is tested on dicts and used by the CLI's ``log --graph``.
"""

from __future__ import annotations

from typing import Callable, Sequence

from trimerge.lineage.history import graph as graphalg


def _row(marks: dict[int, str], width: int) -> str:
    chars = [" "] * (2 * width)
    for pos, ch in marks.items():
        chars[pos] = ch
    return "".join(chars).rstrip()


def graph_lines(graph: graphalg.CommitGraph, starts: Sequence[str], label: Callable[[str], str], *,
                first_parent: bool = False, limit: int | None = None) -> list[str]:
    """Lines of the drawing, newest commit first; ``label(commit_id)`` is the text after each ``*``."""
    lines: list[str] = []
    lanes: list[str] = []
    for n, cid in enumerate(graphalg.iter_history(graph, list(starts), first_parent=first_parent) if starts else []):
        if limit is not None and n >= limit:
            break
        if cid not in lanes:
            lanes.append(cid)
        col = lanes.index(cid)
        # Other lanes waiting for this commit converge into its column first ("|/").
        dups = [i for i, lane in enumerate(lanes) if lane == cid and i != col]
        if dups:
            marks = {2 * j: "|" for j in range(len(lanes)) if j not in dups}
            marks.update({2 * d - 1: "/" for d in dups})
            lines.append(_row(marks, len(lanes)))
            lanes = [lane for i, lane in enumerate(lanes) if i not in dups]
        marks = {2 * j: "|" for j in range(len(lanes))}
        marks[2 * col] = "*"
        lines.append(_row(marks, len(lanes)).ljust(2 * len(lanes)) + f" {label(cid)}")
        parents = graph.parents(cid)
        parents = parents[:1] if first_parent else parents
        if not parents:
            del lanes[col]
            continue
        lanes[col] = parents[0]
        extra = [p for p in parents[1:] if p not in lanes]
        for k, p in enumerate(extra):
            lanes.insert(col + 1 + k, p)
        if extra:  # a merge opens lanes for its other parents ("|\")
            marks = {2 * j: "|" for j in range(len(lanes)) if not (col < j <= col + len(extra))}
            marks.update({2 * j - 1: "\\" for j in range(col + 1, col + 1 + len(extra))})
            lines.append(_row(marks, len(lanes)))
    return lines
