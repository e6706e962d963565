"""The merge base of a criss-cross history: a virtual base, built as git's recursive strategy does.

With one merge base, its tables are the base. With several, they are merged pairwise, oldest
first: each pairwise merge uses the merge bases of the two (recursively virtual, when they have
several themselves) and settles every conflict with ``base`` — the cell, row or table keeps the
value of the bases' own merge base — so the outer merge reports a conflict exactly where both
sides really differ. Bases that agree on a table (same table version) need no work.

The virtual base is written to :class:`~trimerge.lineage.scratch.ScratchTransaction` forks,
never published, and dropped when the merge ends; its cost follows what the bases changed.
"""

from __future__ import annotations

import time
from contextlib import AbstractContextManager
from dataclasses import replace
from typing import Sequence

from trimerge.lineage.history import graph as graphalg
from trimerge.lineage.commit import Commit, TableVersion
from trimerge.lineage.repository import Repository
from trimerge.merge.gates import merge_checks
from trimerge.merge.plan import ThreeWay
from trimerge.merge.publish import apply_plans
from trimerge.merge.resolve import BASE, Resolver


class WithVirtualCommits:
    """A commit graph plus the virtual merge commits built so far (for their merge bases)."""

    def __init__(self, graph: graphalg.CommitGraph):
        self.graph = graph
        self.virtual: dict[str, tuple[str, ...]] = {}

    def add(self, parents: Sequence[str]) -> str:
        vid = f"virtual-{len(self.virtual)}"
        self.virtual[vid] = tuple(parents)
        return vid

    def parents(self, commit_id: str) -> tuple[str, ...]:
        return self.virtual[commit_id] if commit_id in self.virtual else self.graph.parents(commit_id)

    def generation(self, commit_id: str) -> int:
        if commit_id in self.virtual:
            return 1 + max(self.generation(p) for p in self.virtual[commit_id])
        return self.graph.generation(commit_id)

    def created_at(self, commit_id: str) -> float:
        return time.time() if commit_id in self.virtual else self.graph.created_at(commit_id)


class VirtualBase(AbstractContextManager):
    """Builds the base tables of a merge; every scratch it writes lives until :meth:`close`."""

    def __init__(self, repo: Repository):
        self.repo = repo
        self.graph = WithVirtualCommits(repo.commits)
        self._scratches: list = []  # in creation order: later ones may only be forks' parents

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        # A scratch forks what earlier (outer) scratches never build on, but outer ones may fork
        # inner ones' tables: drop outer first, so no fork is dropped before its children.
        for scratch in self._scratches:
            scratch.close()
        self._scratches.clear()

    def tables(self, bases: Sequence[Commit]) -> tuple[dict[str, TableVersion], bool]:
        """The base tables for ``bases`` and whether they are virtual (written to a scratch)."""
        if not bases:
            return {}, False
        if len(bases) == 1 or _agree(bases):
            return dict(bases[0].tables), False
        return self._build(list(bases)), True

    def _build(self, bases: list[Commit]) -> dict[str, TableVersion]:
        from trimerge.lineage.scratch import ScratchTransaction

        ordered = sorted(bases, key=lambda c: (c.generation, c.created_at, c.id))  # oldest first, as git
        first = ordered[0]
        scratch = ScratchTransaction(self.repo, first.tables, first, "virtual merge base of "
                                     + ", ".join(c.id[:10] for c in ordered))
        scratch.begin()
        self._scratches.append(scratch)
        current = first.id
        for other in ordered[1:]:
            inner_ids = graphalg.merge_bases(self.graph, current, other.id)
            inner = [self.repo.commit(c) for c in inner_ids]
            ancestor, _virtual = self.tables(inner)  # a scratch table may build on another: all stay open
            three = ThreeWay(self.repo, ancestor, scratch.table_versions(), other.tables,
                             resolver=Resolver(fallback=BASE, virtual_base=True), granularity="cell", base_is_scratch=False)
            plans = three.run()
            records = merge_checks(three)  # data checks merge like the schema, in a virtual base too
            apply_plans(self.repo, scratch, plans)
            for name, record in sorted(records.items()):
                if name in scratch.tables() and scratch.table_version(name).checks != record:
                    scratch.set_table(name, replace(scratch.table_version(name), checks=record))
            current = self.graph.add([current, other.id])
        return scratch.table_versions()


def _agree(bases: Sequence[Commit]) -> bool:
    """Whether every base has the same table versions (then any of them is the base)."""
    first = {n: tv.location for n, tv in bases[0].tables.items()}
    return all({n: tv.location for n, tv in b.tables.items()} == first for b in bases[1:])

