"""Commit-graph algorithms: merge bases, ancestry, independence and history order.

Everything here works on the small read-only :class:`CommitGraph` protocol so the same code
serves the repository (which stores parents, generation and creation time with each commit)
and the in-memory :class:`DictGraph` used by tests and benchmarks.

The merge-base family follows git's ``paint_down_to_common`` (commit-reach.c): walk down from
the tips with a priority queue ordered by generation number, painting each commit with the
set of tips that reach it, and mark everything below a commit reached by all tips STALE.
Because a commit's generation is strictly greater than its parents', popping in generation
order means a commit's paint is final when it is popped, so a query only visits the part of
the graph above (and just below) the bases, never the whole history. No function recurses,
so histories of any depth are fine.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Protocol, runtime_checkable

from trimerge.lineage.errors import RefNotFoundError

__all__ = [
    "CommitGraph",
    "DictGraph",
    "independent",
    "is_ancestor",
    "iter_history",
    "merge_base",
    "merge_bases",
    "merge_bases_many",
    "octopus_merge_bases",
    "shortest_unique_prefix",
]


@runtime_checkable
class CommitGraph(Protocol):
    """Read-only view of a commit DAG.

    ``generation`` must be the topological level: 1 for a root, otherwise one more than the
    largest generation of the parents. The algorithms rely on it being exact (a parent's
    generation is always smaller than its child's).
    """

    def parents(self, commit_id: str) -> tuple[str, ...]:
        """Parents of ``commit_id``, first parent first."""
        ...

    def generation(self, commit_id: str) -> int:
        """Topological level of ``commit_id`` (roots are 1)."""
        ...

    def created_at(self, commit_id: str) -> float:
        """Creation time in epoch seconds; clocks may be skewed, so never used for ancestry."""
        ...


class DictGraph:
    """In-memory :class:`CommitGraph` built from a ``{commit: parents}`` mapping.

    Generations are computed here (iteratively, so 200k-commit chains are fine). Unknown
    commit ids raise :class:`RefNotFoundError`.
    """

    def __init__(
        self,
        parents: Mapping[str, Sequence[str]] | None = None,
        created_at: Mapping[str, float] | None = None,
    ) -> None:
        self._parents: dict[str, tuple[str, ...]] = {}
        self._generation: dict[str, int] = {}
        self._created_at: dict[str, float] = {}
        parents = parents or {}
        created_at = created_at or {}
        missing = {p for ps in parents.values() for p in ps if p not in parents}
        if missing:
            raise ValueError(f"parents not in the graph: {sorted(missing)[:5]}")
        # The mapping may list children before parents: add each commit once all of its
        # parents are in, driving the order with an explicit stack instead of recursion.
        for commit in parents:
            if commit in self._parents:
                continue
            # The stack is the current descent path, so meeting a commit already on it
            # means a cycle.
            stack = [commit]
            on_path = {commit}
            while stack:
                top = stack[-1]
                pending = next((p for p in parents[top] if p not in self._parents), None)
                if pending is None:
                    stack.pop()
                    on_path.discard(top)
                    self.add(top, parents[top], created_at.get(top, 0.0))
                elif pending in on_path:
                    raise ValueError(f"cycle through commit {pending!r}")
                else:
                    stack.append(pending)
                    on_path.add(pending)

    def add(self, commit_id: str, parents: Sequence[str] = (), created_at: float = 0.0) -> None:
        """Add one commit whose parents are already in the graph."""
        if commit_id in self._parents:
            raise ValueError(f"commit {commit_id!r} is already in the graph")
        parents = tuple(parents)
        if len(set(parents)) != len(parents):
            raise ValueError(f"commit {commit_id!r} lists a parent twice: {parents}")
        for p in parents:
            if p not in self._parents:
                raise ValueError(f"parent {p!r} of {commit_id!r} is not in the graph")
        self._parents[commit_id] = parents
        self._generation[commit_id] = 1 + max((self._generation[p] for p in parents), default=0)
        self._created_at[commit_id] = float(created_at)

    def parents(self, commit_id: str) -> tuple[str, ...]:
        """Parents of ``commit_id``, first parent first."""
        try:
            return self._parents[commit_id]
        except KeyError:
            raise RefNotFoundError(f"unknown commit {commit_id!r}") from None

    def generation(self, commit_id: str) -> int:
        """Topological level of ``commit_id`` (roots are 1)."""
        try:
            return self._generation[commit_id]
        except KeyError:
            raise RefNotFoundError(f"unknown commit {commit_id!r}") from None

    def created_at(self, commit_id: str) -> float:
        """Creation time of ``commit_id`` in epoch seconds."""
        try:
            return self._created_at[commit_id]
        except KeyError:
            raise RefNotFoundError(f"unknown commit {commit_id!r}") from None

    def __contains__(self, commit_id: object) -> bool:
        return commit_id in self._parents

    def __len__(self) -> int:
        return len(self._parents)

    def __iter__(self) -> Iterator[str]:
        """Commit ids in insertion order (parents before children)."""
        return iter(self._parents)


# --------------------------------------------------------------------------- merge bases


def _paint_down_to_common(graph: CommitGraph, seeds: Sequence[tuple[str, int]], nbits: int) -> list[str]:
    """Commits reached by every paint bit and not below another such commit.

    ``seeds`` pairs a tip with the paint bits it carries; ``nbits`` is the number of distinct
    bits (git uses two: PARENT1 for one side, PARENT2 for the other).
    """
    full = (1 << nbits) - 1
    stale = 1 << nbits
    bits = range(nbits)
    flags: dict[str, int] = {}
    for commit, paint in seeds:
        flags[commit] = flags.get(commit, 0) | paint

    # live[i] counts queued, non-stale commits that carry bit i. Git stops once every queued
    # commit is STALE; we can stop as soon as any one bit has no live carrier, because a new
    # result needs every bit from a non-stale path and STALE is never cleared. Git's rule
    # would keep walking a one-sided old side branch all the way down to where it forked.
    live = [0] * nbits
    heap: list[tuple[int, str]] = []
    for commit, paint in flags.items():
        heap.append((-graph.generation(commit), commit))
        for i in bits:
            if paint >> i & 1:
                live[i] += 1
    heapq.heapify(heap)

    results: list[str] = []
    while heap and all(live):
        _, commit = heapq.heappop(heap)
        paint = flags[commit]
        if not paint & stale:
            for i in bits:
                if paint >> i & 1:
                    live[i] -= 1
            if paint == full:
                results.append(commit)
                paint |= stale
        for parent in graph.parents(commit):
            old = flags.get(parent)
            if old is None:
                flags[parent] = paint
                heapq.heappush(heap, (-graph.generation(parent), parent))
                if not paint & stale:
                    for i in bits:
                        if paint >> i & 1:
                            live[i] += 1
                continue
            new = old | paint
            if new == old:
                continue
            # A painted parent is necessarily still queued: it has a lower generation than
            # the commit being popped, and pops never go up in generation.
            flags[parent] = new
            if not old & stale:
                for i in bits:
                    if old >> i & 1:
                        live[i] -= 1
            if not new & stale:
                for i in bits:
                    if new >> i & 1:
                        live[i] += 1
    return results


def _remove_redundant(graph: CommitGraph, commits: Sequence[str]) -> list[str]:
    """Drop commits that are ancestors of another commit in ``commits``; keep input order.

    One walk down from the parents of all commits, in generation order, that stops below the
    lowest commit not yet known to be redundant: nothing lower can reach a candidate.
    """
    unique = list(dict.fromkeys(commits))
    if len(unique) < 2:
        return unique
    gen = {c: graph.generation(c) for c in unique}
    redundant: set[str] = set()
    # Candidates by ascending generation; the walk's floor is the first one not yet redundant.
    by_generation = sorted((g, c) for c, g in gen.items())
    floor_pos = 0

    heap: list[tuple[int, str]] = []
    seen: set[str] = set()
    for c in unique:
        for p in graph.parents(c):
            if p not in seen:
                seen.add(p)
                heap.append((-graph.generation(p), p))
    heapq.heapify(heap)

    remaining = len(unique)
    # Once a single candidate is left unreached it must be the maximal one.
    while heap and remaining > 1:
        while by_generation[floor_pos][1] in redundant:
            floor_pos += 1
        floor = by_generation[floor_pos][0]
        neg_gen, commit = heapq.heappop(heap)
        if -neg_gen < floor:
            break
        if commit in gen and commit not in redundant:
            redundant.add(commit)
            remaining -= 1
        for p in graph.parents(commit):
            if p not in seen:
                seen.add(p)
                g = graph.generation(p)
                if g >= floor:
                    heapq.heappush(heap, (-g, p))
    return [c for c in unique if c not in redundant]


def _sorted_by_generation(graph: CommitGraph, commits: Iterable[str]) -> list[str]:
    return sorted(commits, key=lambda c: (-graph.generation(c), c))


def merge_bases_many(graph: CommitGraph, a: str, others: Sequence[str]) -> list[str]:
    """Best common ancestors of ``a`` and a hypothetical merge of ``others``.

    Equals ``git merge-base --all a o1 o2 ...`` as a set; sorted by generation (newest first),
    then id. With no ``others`` the answer is ``[a]``, as in git's internals.
    """
    if not others:
        return [a]
    candidates = _paint_down_to_common(graph, [(a, 1)] + [(o, 2) for o in others], 2)
    # Under exact generation order the painting already yields independent commits; the
    # bounded redundancy pass mirrors git and is nearly free when there is a single base.
    return _sorted_by_generation(graph, _remove_redundant(graph, candidates))


def merge_bases(graph: CommitGraph, a: str, b: str) -> list[str]:
    """All best common ancestors of ``a`` and ``b`` (``git merge-base --all a b``).

    Sorted by generation (newest first), then id. Empty when the histories are unrelated.
    """
    return merge_bases_many(graph, a, [b])


def merge_base(graph: CommitGraph, a: str, b: str) -> str | None:
    """One best common ancestor of ``a`` and ``b`` (the first of :func:`merge_bases`), or None."""
    bases = merge_bases(graph, a, b)
    return bases[0] if bases else None


def octopus_merge_bases(graph: CommitGraph, commits: Sequence[str]) -> list[str]:
    """Best common ancestors of all ``commits``: common ancestors of every commit that are not
    ancestors of another such common ancestor.

    Like ``git merge-base --octopus --all`` but without the redundant entries git's pairwise
    fold can leave. Sorted by generation (newest first), then id; a single commit is its own
    base.
    """
    unique = list(dict.fromkeys(commits))
    if len(unique) < 2:
        return unique
    # One bit per commit: a base must be painted by every one of them.
    candidates = _paint_down_to_common(graph, [(c, 1 << i) for i, c in enumerate(unique)], len(unique))
    return _sorted_by_generation(graph, _remove_redundant(graph, candidates))


def independent(graph: CommitGraph, commits: Sequence[str]) -> list[str]:
    """The commits not reachable from any other given commit (``git merge-base --independent``).

    Duplicates are dropped; the survivors keep the order of their first occurrence, which
    makes this usable to reduce a list of merge parents.
    """
    return _remove_redundant(graph, commits)


def is_ancestor(graph: CommitGraph, a: str, b: str) -> bool:
    """Whether ``a`` is reachable from ``b`` (a commit is its own ancestor, as in git).

    The walk never goes below ``a``'s generation.
    """
    if a == b:
        return True
    target_gen = graph.generation(a)
    if target_gen >= graph.generation(b):
        return False
    stack = [b]
    seen = {b}
    while stack:
        for p in graph.parents(stack.pop()):
            if p == a:
                return True
            if p not in seen:
                seen.add(p)
                # Same generation as a but not a: cannot lead to a.
                if graph.generation(p) > target_gen:
                    stack.append(p)
    return False


# --------------------------------------------------------------------------- history


class _Descending:
    """Orders strings in reverse inside heap keys (heapq only has a min-heap)."""

    __slots__ = ("value",)

    def __init__(self, value: str) -> None:
        self.value = value

    def __lt__(self, other: _Descending) -> bool:
        return self.value > other.value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Descending) and self.value == other.value


def iter_history(graph: CommitGraph, start: str | Sequence[str], first_parent: bool = False) -> Iterator[str]:
    """Yield ``start`` and every ancestor once, newest first.

    Order: generation descending, then ``created_at`` descending, then id descending. Sorting
    on generation first keeps parents after children even when clocks are skewed. The walk is
    lazy: taking the first k commits only reads the parents of those k commits. With
    ``first_parent`` only first parents are followed.
    """
    tips = [start] if isinstance(start, str) else list(start)
    heap: list[tuple[int, float, _Descending]] = []
    seen: set[str] = set()

    def push(commit: str) -> None:
        if commit not in seen:
            seen.add(commit)
            heapq.heappush(heap, (-graph.generation(commit), -graph.created_at(commit), _Descending(commit)))

    for tip in tips:
        push(tip)
    while heap:
        commit = heapq.heappop(heap)[2].value
        yield commit
        parents = graph.parents(commit)
        for p in parents[:1] if first_parent else parents:
            push(p)


def shortest_unique_prefix(
    commit_id: str,
    all_ids_with_prefix: Callable[[str], Iterable[str]],
    min_length: int = 7,
) -> str:
    """Shortest prefix of ``commit_id`` (at least ``min_length`` chars) that no other id shares.

    ``all_ids_with_prefix(p)`` lists every id starting with ``p``; it is called once, with the
    ``min_length`` prefix, and the answer is one character longer than the longest common
    prefix with any other id found.
    """
    if min_length >= len(commit_id):
        return commit_id
    length = min_length
    for other in all_ids_with_prefix(commit_id[:min_length]):
        if other == commit_id:
            continue
        common = 0
        for x, y in zip(commit_id, other):
            if x != y:
                break
            common += 1
        length = max(length, common + 1)
    return commit_id[: min(length, len(commit_id))]
