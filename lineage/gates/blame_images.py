"""Blame along a first-parent chain, answered from the row images its fragments hold.

git blame asks, at each commit that wrote a row, whether its parent held the same value. The exact
walk (:mod:`trimerge.lineage.gates.blame`) asks Lance by key, once per writer and parent: random reads
(~120 ms per 10,000 keys in a 1M-row table), so 20 writers of 1% each cost ~10x reading the table.
Here one question is answered for a whole *chain* — the ref, its first parent, its first parent's,
... while each table continues the next one's with row-level writes only (``TableVersion.delta_since``,
the rule the diff's delta plan uses; a merge's table may continue its first parent's) — from one
sequential read:

* An *epoch* is one fragment with one set of data files and row versions (a column write or a
  compaction makes a new one). Each epoch the chain's tables list is read once, at the oldest table
  listing it, with that table's deletions applied (Lance reads a fragment without deletions about
  4x faster than one with them, which is why this can cost less than reading the ref's table). Its
  rows are *images*: (key, values, ``_row_last_updated_at_version`` u).
* A row's writer is the oldest chain commit whose table holds its row version; its parent's value
  is the image of the same key with the greatest u not after the parent's version.

Why that is exact, given keys unique in every commit's table: within the chain no row comes back
to life (a restore, overwrite or repoint ends a chain), so an image live at two of its tables is
live at every table between them. Every image live at a chain table P is then live at the oldest
table listing its epoch, so it was read. And if P holds the key, with image L, no other read image
of the key has L.u < u <= P's version: it would be live together with L at the table it was read
from (or, read after P, at P itself). So the candidate is P's image whenever P holds the key.
Whether P holds it matters only where the values are the same; that is settled from row counts
(P holds as many rows as there are keys with an image by its version: then it holds them all) or
else from P's live row addresses in the fragments holding the candidate (a ``_rowaddr`` scan).
Different or absent: the writer is blamed (a merge's other parents go to the exact walk).

The chain is read down to the parent of the oldest writer it judges. The exact walk takes the rest:
rows older than that (at their writer), rows without a row version, and whole tables where reading
the epochs would cost more than the lookups it saves (:func:`prepare`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np
import pyarrow as pa

from trimerge.lineage.errors import DataReclaimedError

if TYPE_CHECKING:
    import lance

    from trimerge.lineage.commit import TableVersion
    from trimerge.lineage.ports import TableReader

VERSION = "_row_last_updated_at_version"
ADDRESS = "_rowaddr"
#: One row found by key costs about this many rows read in sequence (10,000 keys through the key
#: index: ~120 ms in a 1M-row table, whose 1M rows read in ~55 ms without deletions, ~230 ms with).
LOOKUP_ROW_COST = 50
#: Opening a table version, or one scan, costs about this many rows read in sequence (~3 ms)...
TABLE_COST = 50_000
#: ... and one writer's lookups in the exact walk about this many (~6 ms for a few keys).
WRITER_COST = 100_000
#: Never read more than this many times the table's rows (memory): the exact walk instead.
MAX_READ_FACTOR = 4


def norm_value(v: Any) -> Any:
    """A Python value normalized for comparison as git does: NaN equals NaN, -0.0 equals 0.0."""
    if isinstance(v, float):
        return "nan" if math.isnan(v) else (0.0 if v == 0 else v)
    if isinstance(v, (list, tuple)):
        return tuple(norm_value(x) for x in v)
    if isinstance(v, dict):
        return tuple(sorted((k, norm_value(x)) for k, x in v.items()))
    return v


def same_values(a: Any, b: Any) -> Any:
    """Per position, whether ``a`` and ``b`` hold the same value (nulls alike, NaN alike, -0.0 = 0.0)."""
    import pyarrow.compute as pc

    a = a.combine_chunks() if isinstance(a, pa.ChunkedArray) else a
    b = b.combine_chunks() if isinstance(b, pa.ChunkedArray) else b
    if a.type == b.type and not pa.types.is_nested(a.type) and not pa.types.is_dictionary(a.type):
        try:
            same = pc.or_kleene(pc.equal(a, b), pc.and_(pc.is_null(a), pc.is_null(b))).fill_null(False)
            if pa.types.is_floating(a.type):
                same = pc.or_(same, pc.and_(pc.is_nan(a), pc.is_nan(b)).fill_null(False))
            return same.to_numpy(zero_copy_only=False)
        except pa.ArrowException:
            pass
    return np.array([norm_value(x) == norm_value(y) for x, y in zip(a.to_pylist(), b.to_pylist())], dtype=bool)


class Unusable(Exception):
    """The chain's metadata does not hold what this module relies on."""


@dataclass
class Chain:
    """Commits from the ref along first parents (``commits[0]`` is the ref), each table continuing
    the next one's with row-level writes; ``merges[i]``: commit i has other parents too."""

    commits: list[str]
    tvs: list["TableVersion"]
    merges: list[bool]


@dataclass
class Seed:
    """What the chain decided, for the exact walk to finish: rows blamed on a commit, and rows to
    settle at a commit by comparing parents from ``parents[first]`` on."""

    blamed: dict[str, Any] = field(default_factory=dict)
    settles: list[tuple[str, Any, int]] = field(default_factory=list)


def codable_key(schema: pa.Schema, key: Sequence[str]) -> bool:
    """Key types whose equality is plain value equality (no NaN, -0.0 or nesting questions)."""
    t = pa.types
    return all(any(check(schema.field(k).type) for check in (
        t.is_integer, t.is_string, t.is_large_string, t.is_binary, t.is_large_binary, t.is_fixed_size_binary,
        t.is_date, t.is_timestamp, t.is_time, t.is_boolean, t.is_decimal)) for k in key)


def key_codes(parts: Sequence[pa.Table], key: Sequence[str]) -> list[Any] | None:
    """int64 codes of the keys of each table of ``parts``: equal keys, equal codes (None: a null
    key, which the exact walk's join treats its own way)."""
    import pyarrow.compute as pc

    sizes = [p.num_rows for p in parts]
    codes = None
    for k in key:
        col = pa.chunked_array([c for p in parts for c in p.column(k).chunks], parts[0].schema.field(k).type).combine_chunks()
        if col.null_count:
            return None
        if pa.types.is_integer(col.type):  # the values themselves (uint64 wraps: equality is kept)
            idx, size = col.cast(pa.int64(), safe=False).to_numpy(), None
        else:
            enc = pc.dictionary_encode(col)
            idx, size = enc.indices.to_numpy().astype(np.int64), len(enc.dictionary)
        if codes is None:
            codes = idx
        else:  # mixed radix over dense codes, so a next column cannot overflow it
            codes = _dense(codes) * (size if size is not None else len(idx) + 1) + (_dense(idx) if size is None else idx)
    assert codes is not None
    out, start = [], 0
    for n in sizes:
        out.append(codes[start:start + n])
        start += n
    return out


def _dense(values: Any) -> Any:
    """Codes 0..distinct-1 in the order of ``values`` (a sort: numpy's hashed unique is slower)."""
    order = np.argsort(values, kind="stable")
    ranked = values[order]
    out = np.empty(len(values), np.int64)
    out[order] = np.cumsum(np.r_[False, ranked[1:] != ranked[:-1]])
    return out


class _Epochs:
    """The chain's epochs (fragment, data files, row versions), each with the chain position of
    the oldest table listing it, and per position the epochs its table lists."""

    def __init__(self) -> None:
        self.ids: dict[tuple[Any, ...], int] = {}
        self.fragment: list[int] = []
        self.first: list[int] = []
        self.physical: list[int] = []
        self.live: list[int] = []
        self.members: dict[int, dict[int, int]] = {}

    def add(self, position: int, fragments: list[Any]) -> bool:
        members = {}
        for frag in fragments:
            meta = frag.metadata
            versions = meta.last_updated_at_version_meta
            if versions is None:  # no row versions recorded: nothing to go by
                return False
            sig = (frag.fragment_id, tuple(sorted((d.path, tuple(d.fields)) for d in meta.files)), versions.json())
            e = self.ids.get(sig)
            if e is None:
                e = self.ids[sig] = len(self.fragment)
                deleted = (meta.deletion_file.num_deleted_rows or 0) if meta.deletion_file else 0
                self.fragment.append(frag.fragment_id)
                self.first.append(position)
                self.physical.append(meta.physical_rows)
                self.live.append(meta.physical_rows - deleted)
            members[frag.fragment_id] = e
        self.members[position] = members
        return True

    def listed(self, position: int) -> Any:
        out = np.zeros(len(self.fragment), dtype=bool)
        out[list(self.members[position].values())] = True
        return out


def writer_positions(versions: Any, row_versions: Any) -> Any:
    """Per row version, the oldest chain position whose table holds it (``versions`` is the
    chain's table versions, non-increasing); -1 where none does."""
    ascending = versions[::-1]
    top = int(row_versions.max(initial=-1))
    if len(row_versions) > 4 * (top + 2) and int(row_versions.min(initial=0)) >= -1:
        # versions are small ints: one answer per version, looked up (a gather, not a binary search)
        table = (len(versions) - 1) - np.searchsorted(ascending, np.arange(-1, top + 1), side="left")
        return table[row_versions + 1]
    return (len(versions) - 1) - np.searchsorted(ascending, row_versions, side="left")


def _as_int64(column: Any) -> Any:
    """Row versions as int64 numpy (-1 where null): a view of Lance's uint64, not a cast and a copy."""
    if column.null_count == 0 and column.type == pa.uint64():
        return column.to_numpy().view(np.int64)  # Lance versions stay far below 2**63
    return column.cast(pa.int64()).fill_null(-1).to_numpy()


def split_addresses(address: Any) -> tuple[Any, Any]:
    """Lance row addresses (uint64: fragment id << 32 | offset) as (fragment ids, offsets), int64."""
    signed = address.view(np.int64)  # fragment ids are u32: the top bit is never set
    return signed >> 32, signed & 0xFFFFFFFF


def prepare(repo: "TableReader", chain: Chain, ds: "lance.LanceDataset", key: list[str], read: list[str],
            rows: pa.Table | None = None, force: bool = False) -> "ChainImages | None":
    """The chain's images for blaming the rows of ``ds`` (the ref's table): all of them (``rows``
    None) or ``rows`` (read with a filter, ``_rowaddr`` included). None where the exact walk must
    do it all: no chain, no row versions, a key of another type, or (unless ``force``) reading the
    chain's epochs would cost more than the key lookups it saves."""
    if len(chain.commits) < 2 or not ds.has_stable_row_ids or not codable_key(ds.schema, key):
        return None
    versions = np.array([tv.version for tv in chain.tvs], dtype=np.int64)
    if (np.diff(versions) > 0).any():  # not one Lance lineage read newest first
        return None
    selected = rows if rows is not None else ds.scanner(columns=[VERSION], with_row_address=True).to_table()
    row_versions = _as_int64(selected.column(VERSION))
    positions = writer_positions(versions, row_versions)
    last = len(versions) - 1
    active = (row_versions >= 0) & (positions >= 0) & (positions < last)
    # The chain is read down to the parent of the oldest writer it has to judge; rows older than
    # that go to the exact walk at their writer.
    end = min(int(positions[active].max(initial=0)) + 1, last)
    table_rows = ds.count_rows()
    # What the exact walk would read: each looked-up row at LOOKUP_ROW_COST, lookups per writer,
    # and (whole table) the table itself, through its deletions.
    budget = (LOOKUP_ROW_COST * int(active.sum()) + WRITER_COST * len(np.unique(positions[active]))
              + (table_rows if rows is None else 0))
    if not force and (table_rows + TABLE_COST * (end + 1) > budget or not active.any() and rows is not None):
        return None
    epochs = _Epochs()
    datasets: dict[int, Any] = {}
    by_location: dict[Any, Any] = {}
    try:
        for i in range(end, -1, -1):
            tv = chain.tvs[i]
            if tv.location not in by_location:
                by_location[tv.location] = ds if i == 0 else repo.open_table_version(tv)
            datasets[i] = by_location[tv.location]
            if not epochs.add(i, datasets[i].get_fragments()):
                return None
    except (OSError, ValueError, DataReclaimedError):  # a version gc removed: the exact walk reports it
        return None
    total = sum(epochs.live) + TABLE_COST * (end + 1 + len(set(epochs.first)))
    if not force and (total > budget or sum(epochs.live) > MAX_READ_FACTOR * max(table_rows, 1)):
        return None
    try:
        return ChainImages(chain, versions, end, datasets, epochs, ds, key, read, selected, rows is None, positions)
    except Unusable:  # metadata that does not say what the module doc relies on: the exact walk
        return None


class ChainImages:
    """The images of one chain, and the walk of git blame's rule over them (see the module doc)."""

    def __init__(self, chain: Chain, versions: Any, end: int, datasets: dict[int, Any], epochs: _Epochs, ds: Any,
                 key: list[str], read: list[str], selected: pa.Table, whole: bool, positions: Any):
        self.chain, self.versions, self.datasets, self.epochs = chain, versions, datasets, epochs
        self.end = end  # the oldest chain position read: rows whose writer is there or older leave
        self.key = key
        self._live: dict[int, tuple[Any, set[int]]] = {}
        self._counted: Any = None
        self._columns: dict[str, Any] = {}
        wanted = list(dict.fromkeys(key + read))
        self.images, self.image_epoch, self.image_offset, self.image_u = self._read(ds.schema, wanted)
        self.base = base = np.concatenate([[0], np.cumsum(epochs.physical)]).astype(np.int64)
        # The selected rows among the images: by the address each has in the ref's table (an epoch's
        # row versions are the same wherever it is listed: they are part of its signature).
        address = selected.column(ADDRESS).to_numpy()
        tip_epochs = np.full(max(epochs.members[0], default=-1) + 1, -1, np.int64)
        for fid, e in epochs.members[0].items():
            tip_epochs[fid] = e
        flat = base[self.image_epoch] + self.image_offset
        if whole:  # the ref's rows, in the images' order: keys here, values taken when compared
            live = np.zeros(int(base[-1]), dtype=bool)
            fids, offs = split_addresses(address)
            live[base[tip_epochs[fids]] + offs] = True
            hit = live[flat]
            self.row_image: Any = np.flatnonzero(hit)
            if len(self.row_image) != selected.num_rows:
                raise Unusable("the ref's rows are not all among its chain's images")
            self.row_versions = self.image_u[self.row_image]
            self.rows = self.images.select(key).filter(pa.array(hit)).append_column(VERSION, pa.array(self.row_versions))
            self.positions = writer_positions(versions, self.row_versions)
            others = np.flatnonzero(~hit)
        else:
            self.rows = selected.drop_columns([ADDRESS])
            self.row_image = None
            self.row_versions = _as_int64(selected.column(VERSION))
            self.positions = positions
            mine = np.full(int(base[-1]), False)
            fids, offs = split_addresses(address)
            mine[base[tip_epochs[fids]] + offs] = True
            others = np.flatnonzero(~mine[flat])
        self.active = np.flatnonzero((self.row_versions >= 0) & (self.positions >= 0) & (self.positions < end))
        self._index(others)

    def values(self, column: str, rows: Any) -> Any:
        """Column ``column`` of the selected rows ``rows`` (positions in :attr:`rows`)."""
        if self.row_image is None:
            return self.rows.column(column).take(pa.array(rows))
        return self.image_values(column, self.row_image[rows])

    def image_values(self, column: str, images: Any) -> Any:
        """Column ``column`` of the images ``images``. The walk compares only the images of rows it
        judges and their keys' older images: those are taken once per column into one array (the
        images were read in hundreds of chunks; combining a whole column costs more than the walk's
        takes). Other images (rows the exact walk settles) are taken from the chunks."""
        if column not in self._columns:
            self._columns[column] = self.images.column(column).take(pa.array(self.compared)).combine_chunks()
        at = self.slot[images]
        if len(at) and at.min() < 0:
            return self.images.column(column).take(pa.array(images))
        return self._columns[column].take(pa.array(at))

    def _read(self, schema: pa.Schema, wanted: list[str]) -> tuple[pa.Table, Any, Any, Any]:
        """Every epoch once, at the oldest table listing it (its deletions applied there): the
        images, and per image its epoch, offset in the fragment and row version."""
        parts, epochs, offsets, versions = [], [], [], []
        for ds, members, frags in self._scans():
            names = set(ds.schema.names)
            got = ds.scanner(columns=[c for c in wanted if c in names] + [VERSION], with_row_address=True,
                             fragments=frags).to_table()
            address = got.column(ADDRESS).to_numpy()
            fids, offs = split_addresses(address)
            lut = np.full(max(self.epochs.fragment[e] for e in members) + 1, -1, np.int64)
            for e in members:
                lut[self.epochs.fragment[e]] = e
            epochs.append(lut[fids])
            offsets.append(offs)
            u = got.column(VERSION)
            if u.null_count:
                raise Unusable("an image without a row version")
            versions.append(_as_int64(u))
            cols: dict[str, Any] = {}
            for c in wanted:  # a column added after this table read as null, as the exact walk does
                f = schema.field(c)
                cols[c] = got.column(c).cast(f.type) if c in names else pa.nulls(got.num_rows, f.type)
            parts.append(pa.table(cols))
        if not parts:  # no fragment on the chain (an emptied, compacted table): the keyed walk answers
            raise Unusable("no fragment to read")
        return (pa.concat_tables(parts), np.concatenate(epochs), np.concatenate(offsets), np.concatenate(versions))

    def _scans(self) -> list[tuple[Any, list[int], list[Any]]]:
        """(dataset to scan through, epochs, their fragments as listed at their oldest table): Lance
        reads a fragment by the metadata it is given (its deletions, its row versions), so epochs of
        tables with the ref's Lance branch and schema are read in one scan through the ref's table
        (one scan per ~2 ms of fixed cost saved per table; a fragment id once per scan, as it is
        part of the row address). The others are read through their own table."""
        tip, tvs = self.datasets[0], self.chain.tvs
        groups: dict[int, list[int]] = {}
        for e, position in enumerate(self.epochs.first):
            groups.setdefault(position, []).append(e)
        shared: list[tuple[set[int], list[int]]] = []
        out = []
        for position, members in sorted(groups.items()):
            ds = self.datasets[position]
            if tvs[position].lance_branch == tvs[0].lance_branch and ds.lance_schema == tip.lance_schema:
                for e in members:  # the first scan not yet holding this fragment id
                    fid = self.epochs.fragment[e]
                    at = next((s for s in shared if fid not in s[0]), None)
                    if at is None:
                        shared.append(at := (set(), []))
                    at[0].add(fid)
                    at[1].append(e)
            else:
                out.append((ds, members, [ds.get_fragment(self.epochs.fragment[e]) for e in members]))
        for _, members in shared:
            out.append((tip, members, [self.datasets[self.epochs.first[e]].get_fragment(self.epochs.fragment[e])
                                       for e in members]))
        return out

    def _index(self, others: Any) -> None:
        """The images not selected (``others``; with a filter, only those of keys of rows that
        need a parent's value), sorted by (key, row version), each key numbered by where its
        images start, for :meth:`walk`."""
        if self.row_image is not None:  # the ref's rows are images: one coding of every image's key
            codes = key_codes([self.images.select(self.key)], self.key)
            if codes is None:
                raise Unusable("a null key")
            self.image_key = codes[0]
            mine, theirs = self.image_key[self.row_image[self.active]], self.image_key[others]
        else:
            asked = self.rows.select(self.key).take(pa.array(self.active))
            codes = key_codes([asked, self.images.select(self.key).take(pa.array(others))], self.key)
            if codes is None:
                raise Unusable("a null key")
            mine, theirs = codes
            asked_keys = np.sort(mine)  # other rows of the table are among ``others``: not needed
            at = np.minimum(np.searchsorted(asked_keys, theirs), max(len(asked_keys) - 1, 0))
            kept = (asked_keys[at] == theirs) if len(asked_keys) else np.zeros(len(theirs), dtype=bool)
            others, theirs = others[kept], theirs[kept]
        u_all = self.image_u[others]
        order = np.lexsort((u_all, theirs))
        keys, u = theirs[order], u_all[order]
        starts = np.r_[True, keys[1:] != keys[:-1]] if len(keys) else np.zeros(0, dtype=bool)
        first = np.maximum.accumulate(np.where(starts, np.arange(len(keys)), 0))  # where its key's images start
        at = np.minimum(np.searchsorted(keys, mine, side="left"), max(len(keys) - 1, 0))
        found = (keys[at] == mine) if len(keys) else np.zeros(len(mine), dtype=bool)
        self.width = width = int(max(u.max(initial=0), self.versions.max(initial=0))) + 2
        self.hist_image = others[order]
        self.hist_starts = np.flatnonzero(starts)
        self.hist_epoch, self.hist_offset = self.image_epoch[self.hist_image], self.image_offset[self.hist_image]
        self.hist_gid, self.hist_u = first.astype(np.int64), u
        self.hist_code = self.hist_gid * width + u
        self.row_gid = np.full(self.rows.num_rows, -1, np.int64)
        self.row_gid[self.active] = np.where(found, at, -1)
        mine_images = self.row_image[self.active] if self.row_image is not None else np.zeros(0, np.int64)
        marked = np.zeros(self.images.num_rows, dtype=bool)  # a union without sorting ~1M images
        marked[mine_images] = True
        marked[self.hist_image] = True
        self.compared = np.flatnonzero(marked)
        self.slot = np.full(self.images.num_rows, -1, np.int64)
        self.slot[self.compared] = np.arange(len(self.compared), dtype=np.int64)

    def _candidates(self, gid: Any, upto: Any) -> Any:
        """Per (key, version), the image of that key with the greatest row version not after it (-1: none)."""
        at = np.searchsorted(self.hist_code, gid * self.width + upto, side="right") - 1
        ok = (at >= 0) & (gid >= 0)
        maybe = np.flatnonzero(ok)
        ok[maybe] = self.hist_gid[at[maybe]] == gid[maybe]
        return np.where(ok, at, -1)

    def _live_at(self, position: int, cand: Any) -> Any:
        """Whether each candidate image is live in the table at chain ``position``: every one is
        when that table holds as many rows as there are keys with an image by its version (the
        live keys are among those, so it holds all of them); else one of the image's copies (same
        key and row version) must lie at a live address of an epoch that table lists."""
        counts = self._counts()
        if counts is not None and counts[position] == self.datasets[position].count_rows():
            return np.ones(len(cand), dtype=bool)
        listed = self.epochs.listed(position)
        live = np.zeros(len(cand), dtype=bool)
        k = cand.copy()
        todo = np.arange(len(cand))
        while len(todo):
            e = self.hist_epoch[k[todo]]
            inside = np.flatnonzero(listed[e])
            if len(inside):
                live[todo[inside]] = self._is_live(position, e[inside], self.hist_offset[k[todo[inside]]])
            k[todo] -= 1
            todo = todo[(k[todo] >= 0) & ~live[todo]]
            todo = todo[self.hist_code[k[todo]] == self.hist_code[cand[todo]]]
        return live

    def _is_live(self, position: int, epochs: Any, offsets: Any) -> Any:
        """Whether rows (epoch, offset) of epochs listed at ``position`` are live there: the live
        addresses of their fragments, scanned once per position."""
        if position not in self._live:
            self._live[position] = (np.zeros(int(self.base[-1]), dtype=bool), set())
        mask, scanned = self._live[position]
        fragment = np.array(self.epochs.fragment, np.int64)
        missing = sorted(set(fragment[np.unique(epochs)].tolist()) - scanned)
        if missing:
            ds = self.datasets[position]
            got = ds.scanner(columns=[], with_row_address=True,
                             fragments=[ds.get_fragment(f) for f in missing]).to_table()
            address = got.column(ADDRESS).to_numpy()
            members = self.epochs.members[position]
            lut = np.full(max(members, default=-1) + 1, -1, np.int64)
            for fid, e in members.items():
                lut[fid] = e
            fids, offs = split_addresses(address)
            mask[self.base[lut[fids]] + offs] = True
            scanned.update(missing)
        return mask[self.base[epochs] + offsets]

    def _counts(self) -> Any:
        """Per chain position, how many keys have an image no newer than its version — the rows
        its table holds if no key is missing there (None: only some rows were selected)."""
        if self._counted is not None or self.row_image is None or (self.row_versions < 0).any():
            return self._counted
        first = self.row_versions.copy()
        g = self.row_gid[self.active]
        has = g >= 0
        first[self.active[has]] = np.minimum(first[self.active[has]], self.hist_u[g[has]])
        # Keys no row of the ref's table has any more: their oldest images count too.
        starts = self.hist_starts
        tip, gone = np.sort(self.image_key[self.row_image]), self.image_key[self.hist_image[starts]]
        at = np.minimum(np.searchsorted(tip, gone), max(len(tip) - 1, 0))
        firsts = self.hist_u[starts[tip[at] != gone]] if len(tip) else self.hist_u[starts]
        everyone = np.sort(np.concatenate([first, firsts]))
        self._counted = np.searchsorted(everyone, self.versions, side="right")
        return self._counted

    def walk(self, cols: list[str]) -> Seed:
        """git blame's rule for ``cols`` along the chain, for every row at once."""
        commits, end = self.chain.commits, self.end
        blamed: dict[int, list[Any]] = {}
        settles: dict[tuple[int, int], list[Any]] = {}

        def leave(rows: Any, at: Any) -> None:  # written at the chain's end or older: the exact walk
            present = np.flatnonzero(np.bincount(at)) if len(at) else at
            for position in present:
                settles.setdefault((int(position), 0), []).append(rows if len(present) == 1 else rows[at == position])

        unknown = np.flatnonzero((self.row_versions < 0) | (self.positions < 0))
        if len(unknown):  # no row version: the exact walk from the ref
            settles.setdefault((0, 0), []).append(unknown)
        old = np.flatnonzero((self.row_versions >= 0) & (self.positions >= end))
        leave(old, self.positions[old])
        rows, at = self.active, self.positions[self.active]
        merges = np.array(self.chain.merges, dtype=bool)
        while len(rows):
            cand = self._candidates(self.row_gid[rows], self.versions[at + 1])
            same = np.zeros(len(rows), dtype=bool)
            found = np.flatnonzero(cand >= 0)
            if len(found):
                eq = np.ones(len(found), dtype=bool)
                for c in cols:
                    eq &= same_values(self.values(c, rows[found]),
                                      self.image_values(c, self.hist_image[cand[found]]))
                found = found[eq]
                for position in np.unique(at[found] + 1):
                    sel = found[at[found] + 1 == position]
                    same[sel] = self._live_at(int(position), cand[sel])
            differ = np.flatnonzero(~same)
            for position in np.unique(at[differ]):
                sel = differ[at[differ] == position]
                if merges[position]:  # not the first parent's value: the merge's other parents, exactly
                    settles.setdefault((int(position), 1), []).append(rows[sel])
                else:
                    blamed.setdefault(int(position), []).append(rows[sel])
            moved = np.flatnonzero(same)
            nxt = writer_positions(self.versions, self.hist_u[cand[moved]])
            gone = nxt >= end
            leave(rows[moved[gone]], nxt[gone])
            rows, at = rows[moved[~gone]], nxt[~gone]
        seed = Seed()
        for position, parts in blamed.items():
            seed.blamed[commits[position]] = np.concatenate(parts)
        for (position, first), parts in settles.items():
            idx = parts[0] if len(parts) == 1 else np.sort(np.concatenate(parts))  # parts: each sorted
            if len(idx):
                seed.settles.append((commits[position], idx, first))
        return seed
