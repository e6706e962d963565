"""Blame: the last commit that changed each row (or cell) of a table as of a ref, as ``git blame``
(and ``dolt blame``) answer it — a commit whose value equals one of its parents' passes the blame to
the first such parent (merges: the side the value came from).

Cost follows the rows asked for, not the history: each row's ``_row_last_updated_at_version``
(Lance row lineage, stable row ids) names the Lance version that last wrote it; the history of the
ref is walked once, from metadata only, to map (Lance branch, version) to the commit that published
it along *continuation* steps — commits whose table continues their parent's by row-level writes
only (``TableVersion.delta_since``), so no row changes without a new row version. A row jumps from
the ref straight to its writer; there (and at merges, restores, overwrites and other breaks, where
row versions say nothing) its value is compared with each parent's, read by key, and the blame
moves on or stops. Cell blame (``columns=``) does the same per column.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

from trimerge.lineage import graph as graphalg
from trimerge.lineage.commit import Commit, TableVersion
from trimerge.lineage.errors import InvalidOperationError, TableNotFoundError
from trimerge.lineage.filters import check_filter, plan_filter

if TYPE_CHECKING:
    import pyarrow as pa

    from trimerge.lineage.repository import Repository

VERSION = "_row_last_updated_at_version"


def _norm(v: Any) -> Any:
    if isinstance(v, float):
        return "nan" if math.isnan(v) else (0.0 if v == 0 else v)
    if isinstance(v, (list, tuple)):
        return tuple(_norm(x) for x in v)
    if isinstance(v, dict):
        return tuple(sorted((k, _norm(x)) for k, x in v.items()))
    return v


@dataclass
class _Item:
    key: tuple
    columns: tuple[str, ...]
    value: tuple
    blamed: str | None = None


class _Lineage:
    """Lance branch ancestry of one dataset: where each branch was forked from."""

    def __init__(self, repo: "Repository"):
        self.repo = repo
        self.forks: dict[str, dict[str, tuple[str, int]]] = {}

    def chain(self, tv: TableVersion) -> list[tuple[str, int]]:
        """(branch, up to version) from ``tv``'s branch up to Lance main."""
        if tv.dataset not in self.forks:
            info = self.repo.open_table_version(tv).branches.list()
            self.forks[tv.dataset] = {name: (d.get("parent_branch") or "main", int(d.get("parent_version") or 0))
                                      for name, d in info.items()}
        forks = self.forks[tv.dataset]
        out, branch, upto = [], tv.lance_branch, tv.version
        while True:
            out.append((branch, upto))
            if branch == "main" or branch not in forks:
                return out
            branch, upto = forks[branch]

    def resolve(self, tv: TableVersion, version: int) -> tuple[str, int]:
        """The Lance branch that wrote row version ``version`` as seen from ``tv``."""
        segments = self.chain(tv)
        for i, (branch, upto) in enumerate(segments):
            start = segments[i + 1][1] if i + 1 < len(segments) else 0
            if start < version <= upto or i + 1 == len(segments):
                return branch, version
        return segments[-1][0], version

    def covers(self, tv: TableVersion, branch: str, version: int) -> bool:
        """Whether (branch, version) is ``tv``'s location or an ancestor of it."""
        return any(b == branch and version <= upto for b, upto in self.chain(tv))


class _History:
    """The ref's history for one table, walked once: each commit's continuation parent."""

    def __init__(self, repo: "Repository", start: Commit, table: str, lineage: _Lineage):
        self.repo, self.table, self.lineage = repo, table, lineage
        self.commits = {cid: repo.commit(cid) for cid in graphalg.iter_history(repo.commits, [start.id])}

    def tv(self, cid: str) -> TableVersion | None:
        return self.commits[cid].tables.get(self.table)

    def cont(self, cid: str) -> str | None:
        """The single parent whose table this commit continues with row-level writes only (None: a
        merge, a root, a table created, restored, overwritten or otherwise rebuilt here)."""
        c = self.commits[cid]
        if len(c.parents) != 1 or c.parents[0] not in self.commits:
            return None
        y, p = self.tv(cid), self.tv(c.parents[0])
        if y is None or p is None or y.dataset != p.dataset:
            return None
        if y.location == p.location:
            return c.parents[0]
        if y.delta_since is None or not self.lineage.covers(y, p.lance_branch, p.version):
            return None
        since_branch, since = self.lineage.resolve(y, y.delta_since)
        return c.parents[0] if self.lineage.covers(p, since_branch, since) else None

    def chain(self, cid: str) -> list[str]:
        out = [cid]
        while (nxt := self.cont(out[-1])) is not None:
            out.append(nxt)
        return out


def _read(repo: "Repository", tv: TableVersion, key: list[str], keys: list[tuple], columns: list[str],
          versions: bool = False) -> dict[tuple, tuple]:
    """key -> (values of ``columns`` (None where absent), [row version]) for ``keys`` in ``tv``."""
    import pyarrow.compute as pc

    ds = repo.open_table_version(tv)
    names = set(ds.schema.names)
    if any(k not in names for k in key) or not keys:
        return {}
    expr = None
    for i, k in enumerate(key):
        part = pc.field(k).isin(sorted({kv[i] for kv in keys}, key=repr))
        expr = part if expr is None else expr & part
    present = [c for c in columns if c in names]
    wanted_columns = list(dict.fromkeys(key + present)) + ([VERSION] if versions else [])
    try:
        t = ds.to_table(columns=wanted_columns, filter=expr)
    except (ValueError, OSError):  # a key type Lance's Substrait pushdown refuses: filter here instead
        t = ds.to_table(columns=wanted_columns)
    data = {c: t.column(c).to_pylist() for c in t.column_names}
    wanted = set(keys)
    out = {}
    for i in range(t.num_rows):
        kv = tuple(data[k][i] for k in key)
        if kv in wanted:
            vals = tuple(_norm(data[c][i]) if c in data else None for c in columns)
            out[kv] = (vals, data[VERSION][i]) if versions else (vals,)
    return out


def blame(repo: "Repository", table: str, *, ref: str | None = None, where: str | None = None,
          columns: Sequence[str] | None = None) -> "pa.Table":
    """Key columns, then (with ``columns``) ``column``, then ``commit``, ``actor``, ``time`` and
    ``message`` of the last commit that changed each selected row (or cell) as of ``ref``."""
    import pyarrow as pa

    start = repo.resolve(repo.default_ref(ref))
    if not isinstance(table, str) or table not in start.tables:
        raise TableNotFoundError(f"no table {table!r} at {repo.default_ref(ref)} "
                                 f"(tables: {', '.join(sorted(start.tables)) or 'none'})")
    tv = start.tables[table]
    ds = repo.open_table_version(tv)
    key = list(tv.primary_key)
    values = [n for n in ds.schema.names if n not in key]
    if columns is not None:
        columns = [columns] if isinstance(columns, str) else list(columns)
        unknown = [c for c in columns if not isinstance(c, str) or c not in ds.schema.names]
        if unknown or not columns:
            raise InvalidOperationError(f"blame {table}: no column(s) {', '.join(map(repr, unknown)) or '(none given)'} "
                                        f"(columns: {', '.join(ds.schema.names)})")
    if where is not None:
        where = check_filter(where, "where")
        plan_filter(ds, where, f"blame {table}")
    rows = ds.to_table(columns=list(dict.fromkeys(key + values)) + [VERSION], filter=where)
    data = {c: rows.column(c).to_pylist() for c in rows.column_names}
    keys = [tuple(data[k][i] for k in key) for i in range(rows.num_rows)]
    colsets = [tuple(values)] if columns is None else [(c,) for c in columns]
    items: list[_Item] = []
    for i, kv in enumerate(keys):
        for cs in colsets:
            items.append(_Item(kv, cs, tuple(_norm(data[c][i]) for c in cs)))
    lineage = _Lineage(repo)
    history = _History(repo, start, table, lineage)
    first_versions = {kv: data[VERSION][i] for i, kv in enumerate(keys)}
    _walk(repo, history, key, items, start.id, first_versions)
    return _output(pa, repo, rows.schema, key, keys, items, history, columns is not None)


def _walk(repo: "Repository", history: _History, key: list[str], items: list[_Item], start: str,
          start_versions: dict[tuple, int]) -> None:
    pending: dict[str, list[_Item]] = {start: items}
    gens = {start: history.commits[start].generation}
    while pending:
        cid = max(pending, key=lambda c: (gens[c], c))
        group = pending.pop(cid)
        tv = history.tv(cid)
        if cid == start:
            versions = start_versions
        else:
            found = _read(repo, tv, key, sorted({i.key for i in group}, key=repr), [], versions=True)
            versions = {k: v[1] for k, v in found.items()}
        writers = _writers(history, cid, tv, versions, {i.key for i in group})
        by_writer: dict[str, list[_Item]] = {}
        for item in group:
            by_writer.setdefault(writers[item.key], []).append(item)
        for writer, its in by_writer.items():
            left = its
            for parent in history.commits[writer].parents:
                if not left or parent not in history.commits or history.tv(parent) is None:
                    continue
                ptv = history.tv(parent)
                cols = sorted({c for i in left for c in i.columns})
                found = _read(repo, ptv, key, sorted({i.key for i in left}, key=repr), cols)
                moved, stay = [], []
                for item in left:
                    row = found.get(item.key)
                    same = row is not None and tuple(row[0][cols.index(c)] for c in item.columns) == item.value
                    (moved if same else stay).append(item)
                if moved:
                    pending.setdefault(parent, []).extend(moved)
                    gens[parent] = history.commits[parent].generation
                left = stay
            for item in left:
                item.blamed = writer


def _writers(history: _History, cid: str, tv: TableVersion, versions: dict[tuple, int],
             keys: set[tuple]) -> dict[tuple, str]:
    """Per key, the oldest commit of ``cid``'s continuation chain whose table already holds the
    row's last write (the chain's end when the write is older than all of it)."""
    chain = history.chain(cid)
    tvs = [history.tv(c) for c in chain]
    lineage = history.lineage
    out = {}
    projections: dict[str, list[int]] = {}
    for k in keys:
        v = versions.get(k)
        if v is None:
            out[k] = chain[0]
            continue
        branch, version = lineage.resolve(tv, int(v))
        if branch not in projections:  # per chain element, how far it reaches on ``branch`` (non-increasing)
            projections[branch] = [next((upto for b, upto in lineage.chain(t) if b == branch), -1) for t in tvs]
        proj = projections[branch]
        # the oldest element whose projection is >= version: proj is non-increasing along the chain
        ascending = proj[::-1]
        idx = bisect.bisect_left(ascending, version)
        out[k] = chain[len(chain) - 1 - idx] if idx < len(ascending) else chain[0]  # not covered: compare here
    return out


def _output(pa: Any, repo: "Repository", schema: Any, key: list[str], keys: list[tuple], items: list[_Item],
            history: _History, cells: bool) -> "pa.Table":
    order = sorted(range(len(items)), key=lambda i: (tuple(_sortable(x) for x in items[i].key), items[i].columns))
    cols: dict[str, Any] = {}
    for j, k in enumerate(key):
        cols[k] = pa.array([items[i].key[j] for i in order], schema.field(k).type)
    if cells:
        cols["column"] = pa.array([items[i].columns[0] for i in order], pa.string())
    commits = [history.commits[items[i].blamed] for i in order]
    cols["commit"] = pa.array([c.id for c in commits], pa.string())
    cols["actor"] = pa.array([c.actor for c in commits], pa.string())
    cols["time"] = pa.array([c.created_at for c in commits], pa.timestamp("us", tz="UTC"))
    cols["message"] = pa.array([c.message for c in commits], pa.string())
    return pa.table(cols)


def _sortable(v: Any) -> tuple:
    return (v is None, v if v is not None else 0)
