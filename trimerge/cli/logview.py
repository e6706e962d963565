"""What ``trimerge log`` shows, computed once for its text, ``--json`` and ``--graph`` forms:
the commits (:mod:`trimerge.lineage.history.logselect`), their decorations (the branches, tags and
remote-tracking refs at each), and the line each is printed as."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence
from urllib.parse import unquote

from trimerge.lineage.errors import RefNotFoundError
from trimerge.lineage.history import logselect

__all__ = ["LogQuery", "decorations", "select", "table_changed"]


@dataclass(frozen=True)
class LogQuery:
    """Every option of ``log`` that chooses commits (the same for text, JSON and graph)."""

    revisions: tuple[str, ...] = ()
    all_refs: bool = False
    first_parent: bool = False
    actor: str | None = None
    maintenance: bool = True
    tables: tuple[str, ...] = ()


def tracking_refs(repo: Any) -> dict[str, str]:
    """Every remote-tracking ref ``REMOTE/BRANCH`` -> its commit (read from the refs, not the
    remotes' configuration: ``log`` stays a metadata command)."""
    from trimerge.lineage.history.refs import REMOTES

    out: dict[str, str] = {}
    for folder in sorted(repo.refs.docs.backend.children(REMOTES)):
        remote = unquote(folder)
        for branch in repo.refs.tracking_names(remote):
            tip = repo.refs.tracking(f"{remote}/{branch}")
            if tip is not None:
                out[f"{remote}/{branch}"] = tip
    return out


def decorations(repo: Any) -> dict[str, list[str]]:
    """commit id -> the refs pointing at it, as git decorates: branches (the current one first),
    then ``tag: NAME``, then remote-tracking refs."""
    current = repo.current_branch
    tips: dict[str, list[str]] = {}
    for b in sorted(repo.branches.list(), key=lambda b: (b.name != current, b.name)):
        tips.setdefault(b.commit_id, []).append(b.name)
    for t in repo.tags.list():
        tips.setdefault(t.commit_id, []).append(f"tag: {t.name}")
    for name, cid in tracking_refs(repo).items():
        tips.setdefault(cid, []).append(name)
    return tips


def table_changed(repo: Any, tables: Sequence[str]) -> Callable[[str], bool]:
    """Whether a commit changed one of ``tables`` (created, dropped, its data, key or declarations):
    against its parent; a merge only when it differs from every parent (git's default history
    simplification: a merge that took one side's table as it was is not shown)."""
    def state(c: Any, table: str) -> tuple | None:
        tv = c.tables.get(table)
        return None if tv is None else (tv.location, tv.primary_key, tv.derived, tv.index_params)

    def changed(cid: str) -> bool:
        c = repo.commit(cid)
        parents = [repo.commit(p) for p in c.parents] or [None]
        for table in tables:
            mine = state(c, table)
            if all(mine != (state(p, table) if p is not None else None) for p in parents):
                return True
        return False

    return changed


def _resolve(repo: Any, expr: str) -> str:
    return repo.resolve(repo.default_ref(expr)).id


def select(repo: Any, query: LogQuery) -> tuple[logselect.Selection, list[str]]:
    """The selection graph of ``query`` and the commits it starts from."""
    revs = logselect.parse_revisions(query.revisions)
    ids = {r: _resolve(repo, r) for r in (*revs.include, *revs.exclude)}  # unknown refs: one line, before work
    starts = [ids[r] for r in revs.include]
    if query.all_refs:
        starts += [b.commit_id for b in repo.branches.list()] + [t.commit_id for t in repo.tags.list()]
    hidden = logselect.excluded(repo.graph, [ids[r] for r in revs.exclude],
                                [(ids[a], ids[b]) for a, b in revs.symmetric])
    filters: list[Callable[[str], bool]] = []
    if query.actor is not None:
        actor = query.actor
        filters.append(lambda cid: repo.commit(cid).actor == actor)
    if not query.maintenance:
        from trimerge.lineage.tables.maintenance import MAINTENANCE

        filters.append(lambda cid: MAINTENANCE not in repo.commit(cid).metadata)
    if query.tables:
        filters.append(table_changed(repo, query.tables))
    keep = (lambda cid: all(f(cid) for f in filters)) if filters else None
    return logselect.Selection(repo.graph, keep, hidden, query.first_parent), list(dict.fromkeys(starts))


def is_unknown_ref(repo: Any, name: str) -> bool:
    """True when ``name`` names no commit (so ``log NAME`` may mean a table, as git takes a path)."""
    try:
        repo.resolve(name)
    except RefNotFoundError:
        return True
    return False
