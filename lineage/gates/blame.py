"""Blame: the last commit that changed each row (or cell) of a table as of a ref, as ``git blame``
(and ``dolt blame``) answer it — a commit whose value equals one of its parents' passes the blame to
the first such parent (merges: the side the value came from).

Two ways, one answer (``method``):

* From the chain's row images (:mod:`trimerge.lineage.gates.blame_images`, ``auto`` where it reads
  less than the lookups it saves, always with ``images``): the ref and its first parents, while each
  table continues the next with row-level writes, are answered from one sequential read of the
  fragments they list — whole-table blame of 1M rows with 20 commits of 1% in 1.6-3.9x reading the
  table, by load (the exact walk: 8-19x; docs/performance.md). Rows older than that chain, and a merge's other parents, go on with
  the exact walk.
* The exact walk (``exact``, the reference): each row's ``_row_last_updated_at_version`` (Lance row
  lineage, stable row ids) names the Lance version that last wrote it; the history is walked once,
  from metadata only, to map (Lance branch, version) to the commit that published it along
  *continuation* steps — commits whose table continues their parent's by row-level writes only
  (``TableVersion.delta_since``), so no row changes without a new row version. A row jumps from
  the ref straight to its writer; there (and at merges, restores, overwrites and other breaks,
  where row versions say nothing) its value is compared with each parent's, read by key, and the
  blame moves on or stops. Cell blame (``columns=``) does the same per column. Every selected row
  walks at once: writers are found per distinct row version, and at each writer one lookup per
  parent reads that parent's values for all the rows it wrote, compared column by column.
"""

from __future__ import annotations

import bisect
from typing import TYPE_CHECKING, Any, Callable, Sequence

from trimerge.lineage.gates import blame_images
from trimerge.lineage.history import graph as graphalg
from trimerge.lineage.gates.blame_images import norm_value, same_values
from trimerge.lineage.commit import Commit, TableVersion
from trimerge.lineage.errors import InvalidOperationError, TableNotFoundError
from trimerge.lineage.tables.filters import prepare_filter

if TYPE_CHECKING:
    import pyarrow as pa

    from trimerge.lineage.hosts import HistoryReader

VERSION = "_row_last_updated_at_version"


class _Lineage:
    """Lance branch ancestry of one dataset: where each branch was forked from."""

    def __init__(self, repo: "HistoryReader"):
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

    def __init__(self, repo: "HistoryReader", start: Commit, table: str, lineage: _Lineage):
        self.repo, self.table, self.lineage = repo, table, lineage
        self.commits = {cid: repo.commit(cid) for cid in graphalg.iter_history(repo.commits, [start.id])}
        self._cont: dict[tuple[str, bool], str | None] = {}  # chains are walked once per row version group

    def tv(self, cid: str) -> TableVersion | None:
        return self.commits[cid].tables.get(self.table)

    def cont(self, cid: str, merges: bool = False) -> str | None:
        merges = merges and len(self.commits[cid].parents) > 1  # one answer for the rest
        if (cid, merges) not in self._cont:
            self._cont[cid, merges] = self._continues(cid, merges)
        return self._cont[cid, merges]

    def _continues(self, cid: str, merges: bool) -> str | None:
        """The single parent whose table this commit continues with row-level writes only (None: a
        merge, a root, a table created, restored, overwritten or otherwise rebuilt here). With
        ``merges``, a merge's first parent too where the merge's table continues it."""
        c = self.commits[cid]
        if not c.parents or len(c.parents) > 1 and not merges or c.parents[0] not in self.commits:
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

    def chain(self, cid: str, merges: bool = False) -> list[str]:
        out = [cid]
        while (nxt := self.cont(out[-1], merges)) is not None:
            out.append(nxt)
        return out


def _lookup(repo: "HistoryReader", tv: TableVersion, key: list[str], asked: "pa.Table", columns: list[str],
            versions: bool = False) -> tuple[Any, "pa.Table"]:
    """The rows of ``tv`` whose keys ``asked`` (key columns and ``__i``, the rows' positions) holds:
    (the matched ``__i`` as a numpy array, ``tv``'s ``columns`` (null where absent) [and row
    version] for them, in the same order)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    ds = repo.open_table_version(tv)
    names = set(ds.schema.names)
    if any(k not in names for k in key) or asked.num_rows == 0:
        return np.empty(0, np.int64), pa.table({c: pa.array([], pa.null()) for c in columns})
    present = [c for c in columns if c in names and c not in key]
    wanted = list(dict.fromkeys(key + present)) + ([VERSION] if versions else [])
    expr = None
    if asked.num_rows <= BROAD:  # a few keys: filtered in Lance's scan (key index); many: read all, join here
        for k in key:
            part = pc.field(k).isin(pc.unique(asked.column(k)))
            expr = part if expr is None else expr & part
    try:
        found = ds.to_table(columns=wanted, filter=expr)
    except (ValueError, OSError, pa.ArrowException):  # a key type Lance's Substrait pushdown refuses
        found = ds.to_table(columns=wanted)
    found = found.append_column("__p", pa.array(np.arange(found.num_rows, dtype=np.int64)))
    try:
        joined = asked.join(found.select(key + ["__p"]), keys=key, join_type="inner", use_threads=False)
        i_idx = joined.column("__i").to_numpy()
        p_idx = joined.column("__p").to_numpy()
    except (pa.ArrowException, TypeError):  # key types Arrow's join does not take: match in Python
        where = {tuple(norm_value(v) for v in row): j for j, row in enumerate(zip(*(found.column(k).to_pylist() for k in key)))}
        normed = (tuple(norm_value(v) for v in kv) for kv in zip(*(asked.column(k).to_pylist() for k in key)))
        pairs = [(i, where[kv]) for i, kv in zip(asked.column("__i").to_pylist(), normed) if kv in where]
        i_idx = np.array([a for a, _ in pairs], np.int64)
        p_idx = np.array([b for _, b in pairs], np.int64)
    taken = found.take(pa.array(p_idx))
    cols = {c: taken.column(c) if c in taken.column_names else pa.nulls(len(p_idx)) for c in columns}
    if versions:
        cols[VERSION] = taken.column(VERSION)
    return i_idx, pa.table(cols) if cols else pa.table({"__n": pa.nulls(len(p_idx))})


METHODS = ("auto", "images", "exact")
LOOKUP_THREADS = 2  # the writers' lookups side by side (Lance scans release the GIL)
BROAD = 200_000  # keys beyond which a lookup reads the whole table and joins instead of filtering
OUTPUT_THREADED = 100_000  # output rows from which the commit columns are built side by side


def blame(repo: "HistoryReader", table: str, *, ref: str | None = None, where: str | None = None,
          columns: Sequence[str] | None = None, method: str = "auto") -> "pa.Table":
    """Key columns, then (with ``columns``) ``column``, then ``commit``, ``actor``, ``time`` and
    ``message`` of the last commit that changed each selected row (or cell) as of ``ref``.

    ``method``: ``exact`` walks by keyed lookups only (the reference); ``images`` answers the
    ref's first-parent chain from its fragments' row images wherever that applies
    (:mod:`trimerge.lineage.gates.blame_images`); ``auto`` does so where it reads less. All give the
    same answer."""
    import numpy as np
    import pyarrow as pa

    if method not in METHODS:
        raise InvalidOperationError(f"unknown blame method {method!r} (use {', '.join(METHODS)})")

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
        columns = list(dict.fromkeys(columns))  # a column named twice is blamed once: one walk, one cell per row
    if where is not None:
        where = prepare_filter(ds, where, f"blame {table}")
    read = values if columns is None else [c for c in dict.fromkeys(columns) if c not in key]
    wanted = list(dict.fromkeys(key + read)) + [VERSION]
    history = _History(repo, start, table, _Lineage(repo))
    images, rows, values_of = None, None, None
    if method != "exact":
        if where is not None:  # the filtered rows are read once, with the addresses the chain needs
            rows = ds.to_table(columns=wanted, filter=where, with_row_address=True)
        images = blame_images.prepare(repo, _first_parent_chain(history, start.id), ds, key, read, rows,
                                      force=method == "images")
        if images is not None:
            rows, values_of = images.rows, images.values
        elif rows is not None:
            rows = rows.drop_columns([blame_images.ADDRESS])
    if rows is None:
        rows = ds.to_table(columns=wanted, filter=where)
    n = rows.num_rows
    asked = rows.select(key).append_column("__i", pa.array(np.arange(n, dtype=np.int64)))
    start_versions = rows.column(VERSION).cast(pa.int64()).fill_null(-1).to_numpy()
    colsets = [values] if columns is None else [[c] for c in columns]
    walker = _Walker(repo, history, key, rows, asked, start.id, start_versions,
                     values_of or (lambda c, idx: rows.column(c).take(pa.array(idx))))
    blamed = [walker.walk(cols, images.walk(cols) if images is not None else None) for cols in colsets]
    return _output(pa, rows, key, columns, blamed, [history.commits[c] for c in walker.commit_list])


def _first_parent_chain(history: _History, start: str) -> blame_images.Chain:
    """The ref and its first parents while each table continues the next (merges included: a
    merge's table continues its first parent's when the merge was written on top of it)."""
    commits = history.chain(start, merges=True)
    tvs = [tv for c in commits if (tv := history.tv(c)) is not None]
    return blame_images.Chain(commits, tvs, [len(history.commits[c].parents) > 1 for c in commits])


class _Walker:
    """git blame's walk for every selected row at once: rows jump from a commit to their writer
    (row versions, :meth:`_writers`), and there pass to the first parent holding the same value
    (compared column by column in Arrow, one lookup per writer and parent)."""

    def __init__(self, repo: "HistoryReader", history: _History, key: list[str], rows: "pa.Table", asked: "pa.Table",
                 start: str, start_versions: Any, values: Callable[[str, Any], Any]):
        self.repo, self.history, self.key, self.rows, self.asked = repo, history, key, rows, asked
        self.values = values  # (column, row positions) -> that column of those selected rows
        self.start, self.start_versions = start, start_versions
        self.commit_list: list[str] = []
        self.ordinals: dict[str, int] = {}

    def _ordinal(self, cid: str) -> int:
        if cid not in self.ordinals:
            self.ordinals[cid] = len(self.commit_list)
            self.commit_list.append(cid)
        return self.ordinals[cid]

    def walk(self, cols: list[str], seed: blame_images.Seed | None = None) -> Any:
        """Per selected row, the ordinal (in ``commit_list``) of the commit blamed for ``cols``;
        from the ref, or from where ``seed`` (the chain's answers) left the rows."""
        import numpy as np
        import pyarrow as pa

        history, key = self.history, self.key
        n = self.rows.num_rows
        blamed = np.full(n, -1, np.int64)
        pending: dict[str, list[Any]] = {}
        gens: dict[str, int] = {}
        if seed is None:
            pending[self.start] = [np.arange(n, dtype=np.int64)]
            gens[self.start] = history.commits[self.start].generation
        else:
            for cid, idx in seed.blamed.items():
                blamed[idx] = self._ordinal(cid)
            self._settle_all(seed.settles, cols, pending, gens, blamed)
        while pending:
            cid = max(pending, key=lambda c: (gens[c], c))
            parts = pending.pop(cid)
            idx = parts[0] if len(parts) == 1 else np.unique(np.concatenate(parts))  # each part sorted, unique
            tv = history.tv(cid)
            if cid == self.start:
                versions = self.start_versions[idx]
            else:
                got, found = _lookup(self.repo, tv, key, self.asked.take(pa.array(idx)), [], versions=True)
                versions = np.full(len(idx), -1, np.int64)
                versions[np.searchsorted(idx, got)] = found.column(VERSION).cast(pa.int64()).fill_null(-1).to_numpy()
            unique, inverse = _distinct(versions)
            writers = _writers(history, cid, tv, [int(v) for v in unique])
            by_writer: dict[str, list[Any]] = {}
            for j, w in enumerate(writers):
                by_writer.setdefault(w, []).append(idx[inverse == j])
            groups = [(w, np.concatenate(parts), 0) for w, parts in by_writer.items()]
            self._settle_all(groups, cols, pending, gens, blamed)
        return blamed

    def _settle_all(self, groups: list[tuple[str, Any, int]], cols: list[str], pending: dict[str, list[Any]],
                    gens: dict[str, int], blamed: Any) -> None:
        """Settles each (writer, rows, first parent compared) group: rows move on to ``pending``
        or are blamed on their writer."""
        if len(groups) > 1:  # the writers' lookups are independent: Lance scans run beside each other
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(min(LOOKUP_THREADS, len(groups))) as pool:
                settled = list(pool.map(lambda g: self._settle(g[0], g[1], cols, g[2]), groups))
        else:
            settled = [self._settle(w, left, cols, first) for w, left, first in groups]
        for (writer, _, _), (moves, left) in zip(groups, settled):
            for parent, moved in moves:
                pending.setdefault(parent, []).append(moved)
                gens[parent] = self.history.commits[parent].generation
            blamed[left] = self._ordinal(writer)

    def _settle(self, writer: str, left: Any, cols: list[str], first: int = 0) -> tuple[list[tuple[str, Any]], Any]:
        """At ``writer``, the rows (of ``left``, sorted) holding the same value as a parent (from
        ``parents[first]`` on), passed to the first such parent: ([(parent, rows)], the rows
        ``writer`` is blamed for)."""
        import numpy as np
        import pyarrow as pa

        history, moves = self.history, []
        for parent in history.commits[writer].parents[first:]:
            if not len(left) or parent not in history.commits or history.tv(parent) is None:
                continue
            got, found = _lookup(self.repo, history.tv(parent), self.key, self.asked.take(pa.array(left)), cols)
            same = np.ones(len(got), dtype=bool)
            for c in cols:
                same &= same_values(self.values(c, got), found.column(c))
            moved = np.sort(got[same])
            if len(moved):
                moves.append((parent, moved))
                left = np.setdiff1d(left, moved, assume_unique=True)
        return moves, left


def _distinct(values: Any) -> tuple[Any, Any]:
    """``np.unique(values, return_inverse=True)`` for small non-negative ints (and -1), in linear time."""
    import numpy as np

    if not len(values):
        return values, values
    shifted = values + 1
    present = np.bincount(shifted) > 0
    unique = np.flatnonzero(present)
    lut = np.cumsum(present) - 1
    return unique - 1, lut[shifted]


def _writers(history: _History, cid: str, tv: TableVersion, versions: list[int]) -> list[str]:
    """Per row version (-1: unknown), the oldest commit of ``cid``'s continuation chain whose table
    already holds that write (the chain's end when the write is older than all of it)."""
    chain = history.chain(cid)
    tvs = [history.tv(c) for c in chain]
    lineage = history.lineage
    out = []
    projections: dict[str, list[int]] = {}
    for v in versions:
        if v < 0:
            out.append(chain[0])
            continue
        branch, version = lineage.resolve(tv, v)
        if branch not in projections:  # per chain element, how far it reaches on ``branch`` (non-increasing)
            projections[branch] = [next((upto for b, upto in lineage.chain(t) if b == branch), -1) for t in tvs]
        # the oldest element whose projection is >= version: the projection is non-increasing along the chain
        ascending = projections[branch][::-1]
        at = bisect.bisect_left(ascending, version)
        out.append(chain[len(chain) - 1 - at] if at < len(ascending) else chain[0])  # not covered: compare here
    return out


def _output(pa: Any, rows: Any, key: list[str], columns: list[str] | None, blamed: list[Any],
            commits: list[Commit]) -> "pa.Table":
    """Rows (or cells) by key (nulls last), the cells of a row by column name."""
    import numpy as np

    only, ints = rows.column(key[0]).combine_chunks() if len(key) == 1 else None, None
    try:
        if only is not None and pa.types.is_integer(only.type) and not only.null_count:
            ints = only.to_numpy()
            order = _int_order(np, ints)
        else:
            order = pa.compute.sort_indices(rows.select(key), sort_keys=[(k, "ascending", "at_end") for k in key]).to_numpy()
    except (pa.ArrowException, TypeError, ValueError):
        keys = list(zip(*(rows.column(k).to_pylist() for k in key)))
        order = np.array(sorted(range(len(keys)), key=lambda i: tuple(_sortable(x) for x in keys[i])), np.int64)
    by_name = [0] if columns is None else sorted(range(len(columns)), key=lambda j: columns[j])
    picked = blamed[0][order] if len(by_name) == 1 else np.stack([blamed[j][order] for j in by_name], axis=1).ravel()
    spread = order if len(by_name) == 1 else np.repeat(order, len(by_name))
    if ints is not None:  # numpy's take of one int column, not Arrow's of the chunks it was read in
        cols: dict[str, Any] = {key[0]: pa.array(ints[spread], only.type)}
    else:
        cols = {k: rows.column(k).take(pa.array(spread)) for k in key}
    if columns is not None:
        cols["column"] = pa.array(np.tile(np.array([columns[j] for j in by_name], object), len(order)), pa.string())
    which = pa.array(picked.astype(np.int32) if len(commits) < 2**31 else picked)
    per_commit = {"commit": pa.array([c.id for c in commits], pa.string()),
                  "actor": pa.array([c.actor for c in commits], pa.string()),
                  "time": pa.array([c.created_at for c in commits], pa.timestamp("us", tz="UTC")),
                  "message": pa.array([c.message for c in commits], pa.string())}
    if len(which) >= OUTPUT_THREADED:  # Arrow's takes release the GIL: ~40 MB of commit ids per 1M rows
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(LOOKUP_THREADS) as pool:
            cols.update(zip(per_commit, pool.map(lambda a: a.take(which), per_commit.values())))
    else:
        cols.update({name: a.take(which) for name, a in per_commit.items()})
    return pa.table(cols)


def _int_order(np: Any, keys: Any) -> Any:
    """The stable ascending order of int ``keys``: where they are unique and span at most a few
    times their count (a table keyed by a counter), by placing each at its slot — linear, where a
    sort of 1M shuffled keys takes ~0.1 s; else numpy's sort."""
    n = len(keys)
    if n:
        lo, hi = int(keys.min()), int(keys.max())
        if hi - lo < 4 * n:
            slots = np.full(hi - lo + 1, -1, np.int64)
            slots[keys - lo] = np.arange(n, dtype=np.int64)
            order = slots[slots >= 0]
            if len(order) == n:  # no key twice (else the slots kept one of them: sort instead)
                return order
    return np.argsort(keys, kind="stable")


def _sortable(v: Any) -> tuple:
    return (v is None, v if v is not None else 0)
