"""Which commits a log shows: revision ranges (``A..B``, ``A...B``, ``^A``), filters, and the
rewritten graph the ``--graph`` drawing follows, so the text, JSON and graph forms of ``log`` show
the same commits for the same options.

Ranges read as in git: ``A..B`` is what B reaches and A does not, ``A...B`` what exactly one of
them reaches, ``^A`` leaves out what A reaches; an empty side is ``HEAD``. A filter (actor, a
table that changed, no maintenance commits) hides commits without cutting the history: the graph
of a filtered log links each shown commit to its nearest shown ancestors (git's parent rewriting),
while a commit a range leaves out ends that line of history.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, Sequence

from trimerge.lineage.errors import RefSyntaxError
from trimerge.lineage.history import graph as graphalg

__all__ = ["RevisionSet", "Selection", "excluded", "parse_revisions"]

HEAD = "HEAD"


@dataclass(frozen=True)
class RevisionSet:
    """The ref expressions a log starts from (``include``) and those whose history it leaves out
    (``exclude``); ``symmetric`` pairs (``A...B``) leave out what both sides reach."""

    include: tuple[str, ...]
    exclude: tuple[str, ...] = ()
    symmetric: tuple[tuple[str, str], ...] = ()

    @property
    def is_range(self) -> bool:
        return bool(self.exclude or self.symmetric)


def _side(text: str, whole: str) -> str:
    text = text.strip()
    if "." in text and (text.startswith(".") or text.endswith(".")):
        raise RefSyntaxError(f"bad revision range {whole!r}: use A..B or A...B")
    return text or HEAD


def parse_revisions(revisions: Iterable[str]) -> RevisionSet:
    """Parse ``log`` arguments: ``REF``, ``^REF``, ``A..B`` and ``A...B`` (no arguments: ``HEAD``)."""
    include: list[str] = []
    exclude: list[str] = []
    symmetric: list[tuple[str, str]] = []
    for text in revisions:
        if not isinstance(text, str) or not text.strip():
            raise RefSyntaxError("an empty revision names no commit")
        if "..." in text:
            a, _, b = text.partition("...")
            pair = (_side(a, text), _side(b, text))
            symmetric.append(pair)
            include.extend(pair)
        elif ".." in text:
            a, _, b = text.partition("..")
            exclude.append(_side(a, text))
            include.append(_side(b, text))
        elif text.startswith("^") and len(text) > 1:
            exclude.append(text[1:])
        else:
            include.append(text)
    if not include:
        include.append(HEAD)
    return RevisionSet(tuple(include), tuple(exclude), tuple(symmetric))


class Selection:
    """A :class:`~trimerge.lineage.history.graph.CommitGraph` of the commits a log shows.

    ``keep(commit_id)`` says whether a commit is shown; ``hidden`` are commits a range leaves out
    (with all their ancestors). ``parents`` are rewritten to the nearest shown ancestors, so
    :func:`graph.iter_history` and the graph layout work on it unchanged."""

    def __init__(self, graph: graphalg.CommitGraph, keep: Callable[[str], bool] | None = None,
                 hidden: frozenset[str] | set[str] = frozenset(), first_parent: bool = False) -> None:
        self.graph = graph
        self.keep = keep
        self.hidden = hidden
        self.first_parent = first_parent
        self._parents: dict[str, tuple[str, ...]] = {}
        self._shown: dict[str, bool] = {}

    def shown(self, commit_id: str) -> bool:
        if commit_id in self.hidden:
            return False
        if commit_id not in self._shown:
            self._shown[commit_id] = self.keep is None or bool(self.keep(commit_id))
        return self._shown[commit_id]

    def _nearest(self, commits: Sequence[str]) -> tuple[str, ...]:
        """The nearest shown commits at or below ``commits`` (walking through filtered-out ones,
        stopping at hidden ones), in first-found order."""
        out: list[str] = []
        seen: set[str] = set()
        stack = list(reversed(commits))
        while stack:
            cid = stack.pop()
            if cid in seen or cid in self.hidden:
                continue
            seen.add(cid)
            if self.shown(cid):
                out.append(cid)
                continue
            below = self.graph.parents(cid)
            stack.extend(reversed(below[:1] if self.first_parent else below))
        return tuple(out)

    def parents(self, commit_id: str) -> tuple[str, ...]:
        if commit_id not in self._parents:
            real = self.graph.parents(commit_id)
            real = real[:1] if self.first_parent else real
            if self.keep is None and not self.hidden:
                self._parents[commit_id] = real
            else:
                self._parents[commit_id] = self._nearest(real)
        return self._parents[commit_id]

    def generation(self, commit_id: str) -> int:
        return self.graph.generation(commit_id)

    def created_at(self, commit_id: str) -> float:
        return self.graph.created_at(commit_id)

    def tips(self, starts: Sequence[str]) -> list[str]:
        """The shown commits the walk starts from (a start that is filtered out gives way to its
        nearest shown ancestors)."""
        return list(dict.fromkeys(self._nearest(list(starts))))

    def walk(self, starts: Sequence[str]) -> Iterator[str]:
        """The shown commits, newest first (the order of :func:`graph.iter_history`)."""
        tips = self.tips(starts)
        return graphalg.iter_history(self, tips, first_parent=self.first_parent) if tips else iter(())


def excluded(graph: graphalg.CommitGraph, exclude: Sequence[str],
             symmetric: Sequence[tuple[str, str]]) -> set[str]:
    """Commits a range leaves out: every ancestor of ``exclude``, and for each ``A...B`` pair
    every commit both reach (the ancestors of their merge bases)."""
    stops = list(exclude)
    for a, b in symmetric:
        stops.extend(graphalg.merge_bases(graph, a, b))
    return set(graphalg.iter_history(graph, stops)) if stops else set()
