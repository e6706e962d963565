"""The model of remotes (issue 50, point 5): several repositories exchanging history, against git.

A Hypothesis ``RuleBasedStateMachine`` keeps three or four repositories — the first made by
``init``, the others by ``clone`` (of any of them, in the middle of a history too), each with a
remote for every other one (``origin`` for the one it was cloned from, ``rN`` for the rest) — and
drives them through the public API at random: writes (tests/test_model.py's one-shot writes:
upserts, updates, deletes, overwrites, appends, compactions, tables created and dropped, columns
added, dropped and widened) on any branch of any repository; branches created at any ref
(including branches called like remote-tracking refs, ``origin/main``, and remote-tracking refs
spelled in full, ``refs/remotes/R/B``) and deleted; tags; merges of local and remote-tracking refs
(no strategy, ``source-wins``, ``dest-wins``); ``fetch`` (with and without tags), ``pull`` (created,
up to date, fast-forward, merged, conflicts), ``push`` (created, up to date, fast-forward, refused);
``gc`` (``now`` and ``7d``); ``relocate`` (the repository moves and its peers point their remote at
the new place); new clones; and branches created at commits a gc may have reclaimed and a fetch or
push brought back.

The model is git's: one commit graph shared by every repository (commits are content-addressed),
and per repository its branches, tags, remotes, remote-tracking refs and the commits it holds. A
fetch sets ``R/*`` to the remote's branches; a pull fetches, then creates, fast-forwards or merges
(tests/test_model.py's three-way merge, with virtual bases for several merge bases); a push
fast-forwards or creates the remote branch and its tracking ref, and is refused otherwise. After
every step:

* every branch, tag and remote-tracking ref of every repository is where the model says, and reads
  (every table, every row) as the model's state of its commit;
* each repository has exactly the model's remotes;
* no Lance version (``*.manifest`` below ``tables/``, with the repository's own root spelled alike)
  holds different bytes in two repositories;
* a refused push changed no byte of either repository;
* a commit a ref reaches can be branched from (also one gc reclaimed and a transfer brought back).

Deterministic by default: 30 histories of up to 25 steps on local disks (about a minute on 2
cores), and 4 histories with repositories on the S3 test server and on local disks (mark ``s3``,
about a minute). ``TRIMERGE_LONG_TESTS=N``: 30*N (S3: 5*N) random histories of up to 50 steps,
without the suite's per-test timeout. ``TRIMERGE_MODEL_REMOTES_EXAMPLES`` /
``TRIMERGE_MODEL_REMOTES_STEPS`` set the numbers directly; ``TRIMERGE_MODEL_EXCLUDE``
(tests/test_model.py's tokens) leaves out kinds of writes, and these: ``relocate``, ``gc``,
``clone``, and ``keyindex`` (repositories keep their default thresholds instead of tiny ones for
the key index and compaction); ``TRIMERGE_MODEL_NO_SHRINK=1`` reports a failing history as found.
The test prints how many histories and steps ran, and the count of every kind of step and outcome.

Left out: concurrency and kill -9 (tests/test_remotes.py races pushes and kills transfers), protected
remote branches, HEAD, per-table merges and hand resolutions (tests/test_model.py has them).
"""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile
import time

import pytest
from hypothesis import HealthCheck, Phase, note, settings
from hypothesis import strategies as st
from hypothesis.stateful import (RuleBasedStateMachine, initialize, invariant, precondition, rule,
                                 run_state_machine_as_test)

import test_model as M
from test_model import (EXCLUDE, SCRATCH, Decider, MTable, apply_op, draw_op, draw_rows, engine_conflicts,
                        from_arrow, mismatch, model_conflicts, model_merge, op_call, to_arrow)
import trimerge
from trimerge.lineage import errors as E
from trimerge.lineage.storage.location import META_DIR, TABLES_DIR, Location
from trimerge.lineage.tables.relocation import rebase_manifest
from trimerge.merge import MergeConflictError, merge
from trimerge.remotes.config import connection_options

LONG = M.LONG
EXAMPLES = int(os.environ.get("TRIMERGE_MODEL_REMOTES_EXAMPLES", "0") or 0) or (30 * LONG if LONG else 30)
S3_EXAMPLES = int(os.environ.get("TRIMERGE_MODEL_REMOTES_EXAMPLES", "0") or 0) or (5 * LONG if LONG else 4)
STEPS = int(os.environ.get("TRIMERGE_MODEL_REMOTES_STEPS", "0") or 0) or (50 if LONG else 25)
#: ``TRIMERGE_MODEL_NO_SHRINK=1``: report a failing history as found (shrinking one can take many minutes)
NO_SHRINK = bool(os.environ.get("TRIMERGE_MODEL_NO_SHRINK"))
MAX_SITES = 4
#: Local branch names: among them names a remote-tracking ref also has (a local one wins where a
#: ref is spelled short; ``pull`` and ``refs/remotes/...`` always mean the remote-tracking ref).
BRANCHES = ["origin/main", "b1", "r0/main", "feat/x", "r1/b1", "main"]
TAGS = ["v1", "v2"]
STRATEGIES = [None, None, "source-wins", "dest-wins"]

STATS = M.STATS
_serial = itertools.count()


class Site:
    """One repository and the model of it: refs, remotes (name -> site index), the commits it holds,
    and those a gc may have reclaimed."""

    def __init__(self, index: int, repo: trimerge.Repository, kind: str):
        self.index, self.repo, self.kind = index, repo, kind
        self.name = f"r{index}"
        self.branches: dict[str, str] = {}
        self.tags: dict[str, str] = {}
        self.remotes: dict[str, int] = {}
        self.tracking: dict[tuple[str, str], str] = {}
        self.have: set[str] = set()
        self.maybe_reclaimed: set[str] = set()
        self.cache: dict = {}

    @property
    def uri(self) -> str:
        return self.repo.uri

    def tips(self) -> list[str]:
        return [*self.branches.values(), *self.tags.values(), *self.tracking.values()]


class RemotesModel(RuleBasedStateMachine):
    #: Set by the S3 test: (server, storage options); None: every repository on a local disk.
    s3: tuple | None = None

    def __init__(self):
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="trimerge-remotes-model-", dir=SCRATCH)
        self.prefix = f"rm{os.getpid()}-{next(_serial)}-{time.time_ns() % 10**9}"
        self.sites: list[Site] = []
        self.nodes: dict[str, tuple[tuple[str, ...], dict, int]] = {}  # commit -> (parents, tables, generation)
        self.names: dict[str, str] = {}
        self._anc: dict[str, frozenset] = {}
        self.options = dict(self.s3[1]) if self.s3 else None
        STATS["histories"] += 1

    def teardown(self):
        shutil.rmtree(self.dir, ignore_errors=True)
        if self.s3:
            for site in self.sites:
                if site.kind == "s3":
                    for folder in (META_DIR, TABLES_DIR):
                        site.repo.location.backend(folder).delete_tree("")

    # -- helpers
    def say(self, line: str) -> None:
        note(line)

    def count(self, what: str) -> None:
        STATS["steps"] += 1
        STATS[what] += 1

    def place(self, kind: str, index: int) -> str:
        n = next(_serial)
        if kind == "s3":
            return self.s3[0].uri(f"{self.prefix}/r{index}-{n}")
        return os.path.join(self.dir, f"r{index}-{n}")

    def ancestors(self, cid: str) -> frozenset:
        if cid not in self._anc:
            seen, stack = set(), [cid]
            while stack:
                x = stack.pop()
                if x not in seen:
                    seen.add(x)
                    stack.extend(self.nodes[x][0])
            self._anc[cid] = frozenset(seen)
        return self._anc[cid]

    def merge_bases(self, a: str, b: str, virtual: dict) -> list[str]:
        def anc(c):
            if c in virtual:
                out = {c}
                for p in virtual[c]:
                    out |= anc(p)
                return frozenset(out)
            return self.ancestors(c)

        common = anc(a) & anc(b)
        return sorted(c for c in common if not any(c != d and c in anc(d) for d in common))

    def base_state(self, repo: trimerge.Repository, bases: list[str], virtual: dict) -> dict:
        """As tests/test_model.py: one base, or several merged pairwise oldest first into a virtual
        base whose conflicts keep the value of the bases' own merge base (git's recursive strategy)."""
        if not bases:
            return {}
        if len(bases) == 1:
            return self.nodes[bases[0]][1]
        ordered = sorted(bases, key=lambda c: (self.nodes[c][2], repo.commit(c).created_at, c))
        cur_id, cur = ordered[0], self.nodes[ordered[0]][1]
        for other in ordered[1:]:
            ancestor = self.base_state(repo, self.merge_bases(cur_id, other, virtual), virtual)
            cur, _ = model_merge(ancestor, cur, self.nodes[other][1], "cell", Decider(fallback=M.BASE, virtual_base=True))
            vid = f"virtual-{len(virtual)}"
            virtual[vid] = (cur_id, other)
            cur_id = vid
        return cur

    def reachable(self, site: Site) -> set[str]:
        out: set[str] = set()
        for cid in site.tips():
            out |= self.ancestors(cid)
        return out

    def usable(self, site: Site, cid: str) -> bool:
        return cid not in site.maybe_reclaimed or cid in self.reachable(site)

    def record(self, site: Site, branch: str, commit, parents: tuple, state: dict) -> None:
        assert commit is not None, "no commit was published"
        assert tuple(commit.parents) == tuple(parents), (commit.parents, parents)
        assert commit.id not in self.nodes, "a new commit has the id of an old one"
        self.nodes[commit.id] = (tuple(parents), state, 1 + max(self.nodes[p][2] for p in parents))
        self.names[commit.id] = f"c{len(self.names)}"
        site.branches[branch] = commit.id
        site.have.add(commit.id)
        self.say(f"{self.names[commit.id]} = {site.name}.resolve({branch!r}).id")
        STATS["commits"] += 1

    def read_location(self, site: Site, tv) -> MTable:
        if tv.location not in site.cache:
            site.cache[tv.location] = from_arrow(site.repo.open_table_version(tv).to_table(), tuple(tv.primary_key))
        return site.cache[tv.location]

    def check_commit(self, site: Site, cid: str, where: str) -> None:
        commit = site.repo.commit(cid)
        want = self.nodes[cid][1]
        assert sorted(commit.tables) == sorted(want), f"{where}: tables {sorted(commit.tables)} != {sorted(want)}"
        for name, tv in commit.tables.items():
            problem = mismatch(self.read_location(site, tv), want[name])
            assert problem is None, f"{where}: table {name}: {problem}"

    def files(self, site: Site) -> dict[str, bytes]:
        """Every byte of a repository (for "a refused push changes nothing")."""
        out = {}
        for folder in (META_DIR, TABLES_DIR):
            backend = site.repo.location.backend(folder)
            for key in backend.keys_below(""):
                key = key.lstrip("/")
                stored = backend.get(key)
                if stored is not None:
                    out[f"{folder}/{key}"] = bytes(stored.data)
        return out

    def lance_versions(self, site: Site) -> dict[str, bytes]:
        """Every Lance manifest below ``tables/``, the repository's own root spelled ``/ROOT``."""
        root = site.repo.location.join(TABLES_DIR).rstrip("/")
        spellings = [root] + ([root.split("://", 1)[1]] if "://" in root else [])
        backend = site.repo.location.backend(TABLES_DIR)
        out = {}
        for key in backend.keys_below(""):
            key = key.lstrip("/")
            if not key.endswith(".manifest"):
                continue
            stored = backend.get(key)
            if stored is None:
                continue
            data = bytes(stored.data)
            for old in spellings:
                data = rebase_manifest(data, old, "/ROOT")
            out[key] = data
        return out

    def open_site(self, uri: str) -> trimerge.Repository:
        repo = trimerge.Repository.open(uri, storage_options=self.options if "://" in uri else None)
        repo.lock_timeout = 5
        return repo

    @staticmethod
    def tiny_thresholds(repo: trimerge.Repository) -> None:
        """Tiny tables take the keyed-write path (a key index) and are compacted every few writes,
        as in tests/test_model.py (``keyindex`` in ``TRIMERGE_MODEL_EXCLUDE``: the defaults)."""
        repo.lock_timeout = 5  # one writer: a lease still held is a bug, found in seconds
        if "keyindex" not in EXCLUDE:
            repo.settings.set("index.key_min_rows", 5)
            repo.settings.set("compaction.max_small_fragments", 3)

    def connect(self, site: Site, name: str, other: Site) -> None:
        kept = connection_options(self.options)[0] if other.kind == "s3" else None
        self.say(f"{site.name}.remotes.add({name!r}, {other.name}.uri)")
        site.repo.remotes.add(name, other.uri, storage_options=kept)
        site.remotes[name] = other.index

    # -- the invariant
    @invariant()
    def every_repository_is_as_modelled(self):
        for site in self.sites:
            repo = site.repo
            assert sorted(repo.branches.names()) == sorted(site.branches), site.name
            for name, cid in sorted(site.branches.items()):
                tip = repo.branches.get(name).commit_id
                assert tip == cid, f"{site.name}: branch {name} at {self.names.get(tip, tip[:10])}, model {self.names[cid]}"
                self.check_commit(site, cid, f"{site.name}: branch {name}")
            assert {t.name: t.commit_id for t in repo.tags.list()} == site.tags, site.name
            assert sorted((r.name, r.uri) for r in repo.remotes.list()) == sorted(
                (n, self.sites[i].uri) for n, i in site.remotes.items()), site.name
            for remote in {"origin", *(f"r{i}" for i in range(MAX_SITES))}:
                want = sorted(b for r, b in site.tracking if r == remote)
                assert repo.refs.tracking_names(remote) == want, f"{site.name}: tracking refs of {remote}"
                for b in want:
                    cid = site.tracking[(remote, b)]
                    assert repo.refs.tracking(f"{remote}/{b}") == cid, f"{site.name}: {remote}/{b}"
                    assert repo.resolve(f"refs/remotes/{remote}/{b}").id == cid
                    self.check_commit(site, cid, f"{site.name}: {remote}/{b}")
        if STATS["steps"] % (4 if self.s3 else 1) == 0:
            self.no_lance_version_differs()

    def no_lance_version_differs(self) -> None:
        seen: dict[str, tuple[str, bytes]] = {}
        for site in self.sites:
            for key, data in self.lance_versions(site).items():
                if key in seen:
                    other, theirs = seen[key]
                    assert data == theirs, f"Lance version {key} differs between {other} and {site.name}"
                else:
                    seen[key] = (site.name, data)
        STATS["lance version checks"] += 1

    # -- setting up
    @initialize(data=st.data())
    def make_repositories(self, data):
        kinds = ["s3", "local"] if self.s3 else ["local"]
        kind = data.draw(st.sampled_from(kinds), label="r0 on")
        uri = self.place(kind, 0)
        repo = trimerge.Repository.init(uri, actor="model", storage_options=self.options if kind == "s3" else None)
        self.tiny_thresholds(repo)
        site = Site(0, repo, kind)
        self.sites.append(site)
        STATS[f"repositories on {kind}"] += 1
        root = repo.resolve("main").id
        self.nodes[root] = ((), {}, 1)
        self.names[root] = "c0"
        site.branches["main"] = root
        site.have.add(root)
        self.say(f"r0 = trimerge.Repository.init({uri!r})")
        key, types = M.SPECS["t"]
        keys = data.draw(st.lists(st.sampled_from(M.KEYS["t"]), min_size=1, max_size=4, unique=True), label="keys")
        rows = draw_rows(data, "t", MTable(key, types, {}), keys)
        op = {"kind": "create_table", "table": "t", "key": key, "types": types, "rows": rows,
              "data": to_arrow(types, key, rows), "src": M.table_src(types, key, rows)}
        self.write(site, "main", op)
        for index in (1, 2):
            src = data.draw(st.sampled_from(range(index)), label="clone of")
            self.clone_site(src, data.draw(st.sampled_from(kinds), label="on"))

    def clone_site(self, src_index: int, kind: str) -> Site:
        src = self.sites[src_index]
        index = len(self.sites)
        uri = self.place(kind, index)
        self.say(f"r{index} = trimerge.Repository.clone({src.name}.uri, {uri!r}).repository")
        result = trimerge.Repository.clone(src.uri, uri, storage_options=self.options,
                                           dst_storage_options=self.options if kind == "s3" else None)
        repo = result.repository
        self.tiny_thresholds(repo)
        site = Site(index, repo, kind)
        self.sites.append(site)
        STATS[f"repositories on {kind}"] += 1
        site.branches["main"] = src.branches["main"]
        site.tags = dict(src.tags)
        site.remotes["origin"] = src_index
        site.tracking = {("origin", b): c for b, c in src.branches.items()}
        for cid in src.branches.values():
            site.have |= self.ancestors(cid)
        for cid in src.tags.values():
            site.have |= self.ancestors(cid)
        assert result.status == "done"
        for other in self.sites[:-1]:
            self.connect(other, site.name, site)
            if other.index != src_index:
                self.connect(site, other.name, other)
        STATS["clones"] += 1
        return site

    # -- draws
    def draw_site(self, data, label: str = "repository") -> Site:
        return self.sites[data.draw(st.sampled_from(range(len(self.sites))), label=label)]

    def draw_source(self, data, site: Site) -> tuple[str, str | None, str]:
        """A ref of ``site`` naming a commit: (expression, commit it names, kind)."""
        kinds = ["branch", "branch"] + (["tracking", "tracking full"] if site.tracking else []) + ["id"]
        kind = data.draw(st.sampled_from(kinds), label="ref kind")
        if kind == "branch":
            name = data.draw(st.sampled_from(sorted(site.branches)), label="branch")
            return name, site.branches[name], kind
        if kind in ("tracking", "tracking full"):
            remote, branch = data.draw(st.sampled_from(sorted(site.tracking)), label="tracking ref")
            short = f"{remote}/{branch}"
            if kind == "tracking full":
                return f"refs/remotes/{short}", site.tracking[(remote, branch)], kind
            # Spelled short, a local branch of that name wins (git's order).
            return short, site.branches.get(short, site.tracking[(remote, branch)]), kind
        cid = data.draw(st.sampled_from(sorted(site.have, key=lambda c: self.names[c])), label="commit")
        return cid, cid, kind

    # -- writes
    def write(self, site: Site, branch: str, op: dict) -> None:
        state = dict(self.nodes[site.branches[branch]][1])
        apply_op(state, op)
        method, args, src = op_call(op)
        self.say(f"{site.name}.{method}({src}, branch={branch!r})")
        parent = site.branches[branch]
        commit = getattr(site.repo, method)(*args, branch=branch)
        STATS[f"write {op['kind']}"] += 1
        if commit is None and op["kind"] == "compact":
            return
        self.record(site, branch, commit, (parent,), state)

    @rule(data=st.data())
    def write_somewhere(self, data):
        self.count("write")
        site = self.draw_site(data)
        branch = data.draw(st.sampled_from(sorted(site.branches)), label="branch")
        op = draw_op(data, dict(self.nodes[site.branches[branch]][1]))
        if op is not None:
            self.write(site, branch, op)

    @rule(data=st.data())
    def write_more(self, data):  # writes are the most frequent step
        self.write_somewhere(data)

    def maybe_write(self, data, site: Site, branch: str) -> None:
        """Usually a write on ``branch`` first: both sides of a merge, pull or push have moved."""
        if branch in site.branches and data.draw(st.booleans(), label=f"write on {site.name} {branch} first"):
            op = draw_op(data, dict(self.nodes[site.branches[branch]][1]))
            if op is not None:
                self.write(site, branch, op)

    # -- branches and tags
    def draw_site_where(self, data, fits) -> Site:
        sites = [s for s in self.sites if fits(s)]
        return sites[data.draw(st.sampled_from(range(len(sites))), label="repository")]

    @staticmethod
    def free(site: Site) -> list[str]:
        return [b for b in BRANCHES if b not in site.branches]

    @precondition(lambda self: any(self.free(s) for s in self.sites))
    @rule(data=st.data())
    def create_branch(self, data):
        self.count("branch create")
        site = self.draw_site_where(data, self.free)
        free = self.free(site)
        name = data.draw(st.sampled_from(free), label="new branch")
        expr, cid, kind = self.draw_source(data, site)
        self.say(f"{site.name}.branches.create({name!r}, {expr!r})")
        try:
            made = site.repo.branches.create(name, expr)
        except E.DataReclaimedError:
            assert not self.usable(site, cid), f"{site.name}: {self.names[cid]} is reachable, yet refused as reclaimed"
            STATS["branch create: reclaimed"] += 1
            return
        assert made.commit_id == cid, (kind, expr)
        site.branches[name] = cid
        STATS[f"branch create at a {kind} ref"] += 1

    def brought_back(self, site: Site) -> list[str]:
        return sorted(site.maybe_reclaimed & self.reachable(site), key=lambda c: self.names[c])

    @precondition(lambda self: any(self.brought_back(s) and self.free(s) for s in self.sites))
    @rule(data=st.data())
    def branch_at_a_commit_gc_may_have_reclaimed(self, data):
        """The commits a gc may have reclaimed that a ref reaches again (a fetch or push brought
        them back): usable."""
        site = self.draw_site_where(data, lambda s: self.brought_back(s) and self.free(s))
        self.count("branch at a once reclaimed commit")
        back = self.brought_back(site)
        free = self.free(site)
        cid = data.draw(st.sampled_from(back), label="commit")
        name = data.draw(st.sampled_from(free), label="new branch")
        self.say(f"{site.name}.branches.create({name!r}, {self.names[cid]})")
        site.repo.branches.create(name, cid)
        site.branches[name] = cid
        STATS["branch created at a commit brought back"] += 1

    @precondition(lambda self: any(len(s.branches) > 1 for s in self.sites))
    @rule(data=st.data())
    def delete_branch(self, data):
        self.count("branch delete")
        site = self.draw_site_where(data, lambda s: len(s.branches) > 1)
        names = sorted(b for b in site.branches if b != "main")
        name = data.draw(st.sampled_from(names), label="branch")
        self.say(f"{site.name}.branches.delete({name!r}, force=True)")
        site.repo.branches.delete(name, force=True)
        del site.branches[name]

    @precondition(lambda self: any(len(s.tags) < len(TAGS) for s in self.sites))
    @rule(data=st.data())
    def create_tag(self, data):
        self.count("tag create")
        site = self.draw_site_where(data, lambda s: len(s.tags) < len(TAGS))
        free = [t for t in TAGS if t not in site.tags]
        name = data.draw(st.sampled_from(free), label="tag")
        branch = data.draw(st.sampled_from(sorted(site.branches)), label="at")
        self.say(f"{site.name}.tags.create({name!r}, {branch!r})")
        assert site.repo.tags.create(name, branch).commit_id == site.branches[branch]
        site.tags[name] = site.branches[branch]

    # -- merges
    def three_way(self, site: Site, dest: str, theirs: str, strategy: str | None, call, verb: str) -> None:
        """A merge of commit ``theirs`` into branch ``dest`` (not contained in it) by ``call``."""
        ours = site.branches[dest]
        virtual: dict = {}
        bases = self.merge_bases(ours, theirs, virtual)
        B = self.base_state(site.repo, bases, virtual)
        O, T = self.nodes[ours][1], self.nodes[theirs][1]
        state, unresolved = model_merge(B, O, T, "cell", Decider(strategy=strategy))
        if unresolved:
            with pytest.raises(MergeConflictError) as info:
                call()
            got = engine_conflicts(info.value.result.conflicts)
            assert got == model_conflicts(unresolved), f"{verb} conflicts: engine {got}, model {unresolved}"
            assert site.repo.resolve(dest).id == ours
            STATS[f"{verb}: conflicts"] += 1
            return None
        result = call()
        merged = result.merge if verb == "pull" else result
        assert merged.status == "merged", merged.status
        self.record(site, dest, merged.commit, (ours, theirs), state)
        STATS[f"{verb}: merged{' (' + strategy + ')' if strategy else ''}"] += 1
        if len(bases) > 1:
            STATS[f"{verb}: several merge bases"] += 1
        return result

    @rule(data=st.data())
    def merge_a_ref(self, data):
        self.count("merge")
        site = self.draw_site(data)
        dest = data.draw(st.sampled_from(sorted(site.branches)), label="dest")
        self.maybe_write(data, site, dest)
        expr, cid, kind = self.draw_source(data, site)
        if kind == "branch" and expr != dest:
            self.maybe_write(data, site, expr)
            cid = site.branches[expr]
        strategy = data.draw(st.sampled_from(STRATEGIES), label="strategy")
        kw = {"strategy": strategy} if strategy else {}
        self.say(f"merge({expr!r}, {dest!r}, repo={site.name}, **{kw!r})")
        if cid in self.ancestors(site.branches[dest]):
            r = merge(expr, dest, repo=site.repo, **kw)
            assert r.status == "up-to-date" and r.commit is None
            STATS["merge: up to date"] += 1
            return
        try:
            self.three_way(site, dest, cid, strategy, lambda: merge(expr, dest, repo=site.repo, **kw), "merge")
        except E.DataReclaimedError:
            assert not self.usable(site, cid), f"{site.name}: {self.names[cid]} is reachable, yet refused as reclaimed"
            STATS["merge: reclaimed"] += 1

    # -- remotes
    def model_fetch(self, site: Site, remote: str, tags: bool) -> None:
        other = self.sites[site.remotes[remote]]
        site.tracking = {k: v for k, v in site.tracking.items() if k[0] != remote}
        for branch, cid in other.branches.items():
            site.tracking[(remote, branch)] = cid
            site.have |= self.ancestors(cid)
        if tags:
            for name, cid in other.tags.items():
                if name not in site.tags:
                    site.tags[name] = cid
                    site.have |= self.ancestors(cid)

    @rule(data=st.data())
    def fetch(self, data):
        self.count("fetch")
        site = self.draw_site(data)
        remote = data.draw(st.sampled_from(sorted(site.remotes)), label="remote")
        tags = data.draw(st.booleans(), label="tags")
        self.say(f"{site.name}.fetch({remote!r}, tags={tags})")
        other = self.sites[site.remotes[remote]]
        rejected = sorted(f"tags/{t}" for t, c in other.tags.items() if tags and site.tags.get(t, c) != c)
        result = site.repo.fetch(remote, tags=tags, storage_options=self.options)
        self.model_fetch(site, remote, tags)
        assert sorted(result.rejected) == rejected
        STATS[f"fetch: {result.status}"] += 1

    @rule(data=st.data())
    def pull(self, data):
        self.count("pull")
        site = self.draw_site(data)
        remote = data.draw(st.sampled_from(sorted(site.remotes)), label="remote")
        other = self.sites[site.remotes[remote]]
        names = sorted(other.branches) * 3 + sorted(set(BRANCHES) - set(other.branches))
        self.pull_into(data, site, remote, data.draw(st.sampled_from(names), label="branch"))

    @rule(data=st.data())
    def pull_beside_a_namesake(self, data):
        """A pull of ``R/B`` into ``B`` where a local branch is called ``R/B`` too (a legal name):
        the fetched ref is merged, never the local namesake (issue 50)."""
        self.count("pull beside a local namesake")
        site = self.draw_site(data)
        remote = data.draw(st.sampled_from(sorted(site.remotes)), label="remote")
        other = self.sites[site.remotes[remote]]
        branch = data.draw(st.sampled_from(sorted(other.branches)), label="branch")
        namesake = f"{remote}/{branch}"
        if namesake not in site.branches:
            at = data.draw(st.sampled_from(sorted(site.branches)), label="namesake at")
            self.say(f"{site.name}.branches.create({namesake!r}, {at!r})")
            site.repo.branches.create(namesake, at)
            site.branches[namesake] = site.branches[at]
        self.maybe_write(data, site, namesake)
        self.pull_into(data, site, remote, branch)

    def pull_into(self, data, site: Site, remote: str, branch: str) -> None:
        other = self.sites[site.remotes[remote]]
        self.maybe_write(data, other, branch)
        self.maybe_write(data, site, branch)
        strategy = data.draw(st.sampled_from(STRATEGIES), label="strategy")
        kw = {"strategy": strategy} if strategy else {}
        self.say(f"{site.name}.pull({remote!r}, {branch!r}, **{kw!r})")

        def call():
            return site.repo.pull(remote, branch, storage_options=self.options, **kw)

        tracked = other.branches.get(branch)
        local = site.branches.get(branch)
        if tracked is None:
            with pytest.raises(E.RemoteError):
                call()
            self.model_fetch(site, remote, False)
            STATS["pull: no such remote branch"] += 1
            return
        if local is not None and tracked not in self.ancestors(local) and local not in self.ancestors(tracked):
            self.model_fetch(site, remote, False)
            self.three_way(site, branch, tracked, strategy, call, "pull")
            return
        result = call()
        self.model_fetch(site, remote, False)
        if local is None:
            want = "created"
            site.branches[branch] = tracked
        elif tracked in self.ancestors(local):
            want = "up-to-date"
        else:
            want = "fast-forward"
            site.branches[branch] = tracked
        assert result.status == want, (result.status, want)
        STATS[f"pull: {want}"] += 1

    @rule(data=st.data())
    def push(self, data):
        self.count("push")
        site = self.draw_site(data)
        remote = data.draw(st.sampled_from(sorted(site.remotes)), label="remote")
        branch = data.draw(st.sampled_from(sorted(site.branches)), label="branch")
        tags = data.draw(st.booleans(), label="tags")
        other = self.sites[site.remotes[remote]]
        self.maybe_write(data, site, branch)
        self.say(f"{site.name}.push({remote!r}, {branch!r}, tags={tags})")
        local, theirs = site.branches[branch], other.branches.get(branch)
        if theirs is not None and theirs not in self.ancestors(local):
            before = (self.files(site), self.files(other))
            with pytest.raises(E.NonFastForwardError):
                site.repo.push(remote, branch, tags=tags, storage_options=self.options)
            after = (self.files(site), self.files(other))
            for label, x, y in (("this", before[0], after[0]), ("the remote", before[1], after[1])):
                changed = sorted(k for k in set(x) | set(y) if x.get(k) != y.get(k))
                assert not changed, f"a refused push changed {label} repository: {changed[:5]}"
            STATS["push: refused, nothing changed"] += 1
            return
        result = site.repo.push(remote, branch, tags=tags, storage_options=self.options)
        want = "created" if theirs is None else "up-to-date" if theirs == local else "fast-forward"
        other.branches[branch] = local
        other.have |= self.ancestors(local)
        site.tracking[(remote, branch)] = local
        if tags:
            for name, cid in site.tags.items():
                if name not in other.tags:
                    other.tags[name] = cid
                    other.have |= self.ancestors(cid)
        assert result.status in (want, "done"), (result.status, want)
        STATS[f"push: {want}"] += 1

    @precondition(lambda self: "clone" not in EXCLUDE and len(self.sites) < MAX_SITES)
    @rule(data=st.data())
    def clone(self, data):
        self.count("clone")
        src = self.draw_site(data, "clone of")
        self.clone_site(src.index, data.draw(st.sampled_from(["s3", "local"] if self.s3 else ["local"]), label="on"))

    @precondition(lambda self: "gc" not in EXCLUDE)
    @rule(data=st.data())
    def forget_collect_and_fetch_back(self, data):
        """Lose every ref to some history, let gc reclaim it, and fetch it back: a repository drops
        a remote (and its remote-tracking refs) and maybe a branch, collects with ``retention="now"``,
        adds the remote again and fetches. What the fetch brings back is usable (issue 50)."""
        self.count("forget, gc, fetch back")
        site = self.draw_site(data)
        remote = data.draw(st.sampled_from(sorted(site.remotes)), label="remote")
        other = self.sites[site.remotes[remote]]
        self.say(f"{site.name}.remotes.remove({remote!r})")
        site.repo.remotes.remove(remote)
        del site.remotes[remote]
        site.tracking = {k: v for k, v in site.tracking.items() if k[0] != remote}
        names = sorted(b for b in site.branches if b != "main")
        if names and data.draw(st.booleans(), label="delete a branch"):
            name = data.draw(st.sampled_from(names), label="branch")
            self.say(f"{site.name}.branches.delete({name!r}, force=True)")
            site.repo.branches.delete(name, force=True)
            del site.branches[name]
        self.say(f"{site.name}.gc(retention='now')")
        site.repo.gc(retention="now")
        site.cache.clear()
        gone = site.have - self.reachable(site)
        site.maybe_reclaimed |= gone
        self.connect(site, remote, other)
        self.say(f"{site.name}.fetch({remote!r})")
        site.repo.fetch(remote, storage_options=self.options)
        self.model_fetch(site, remote, False)
        back = gone & self.reachable(site)
        STATS["commits reclaimed, then fetched back"] += len(back)
        for cid in sorted(back, key=lambda c: self.names[c])[:2]:
            self.say(f"{site.name}.branches.create('brought-back', {self.names[cid]}); ...delete")
            site.repo.branches.create("brought-back", cid)
            site.repo.branches.delete("brought-back", force=True)

    # -- upkeep
    @precondition(lambda self: "gc" not in EXCLUDE)
    @rule(data=st.data())
    def gc(self, data):
        self.count("gc")
        site = self.draw_site(data)
        retention = data.draw(st.sampled_from(["now", "now", "7d"]), label="retention")
        self.say(f"{site.name}.gc(retention={retention!r})")
        site.repo.gc(retention=retention)
        site.cache.clear()  # read everything again: gc must not have removed what a ref reaches
        site.maybe_reclaimed |= site.have - self.reachable(site)

    @precondition(lambda self: "relocate" not in EXCLUDE)
    @rule(data=st.data())
    def relocate(self, data):
        """The repository moves (a plain move, then a read-write open relocates it); every peer
        points its remote at the new place (as ``git remote set-url``: here remove and add)."""
        self.count("relocate")
        site = self.draw_site(data)
        old = site.uri
        new = self.place(site.kind, site.index)
        self.say(f"# move {site.name} to {new!r}, then open it read-write")
        if site.kind == "s3":
            src, dst = Location.parse(old, self.options), Location.parse(new, self.options)
            for folder in (META_DIR, TABLES_DIR):
                a, b = src.backend(folder), dst.backend(folder)
                for key in list(a.keys_below("")):
                    key = key.lstrip("/")
                    b.create(key, bytes(a.get(key).data))
                a.delete_tree("")
        else:
            shutil.move(old, new)
        site.repo = self.open_site(new)
        site.cache.clear()
        assert site.repo.location.same_place(new)
        for peer in self.sites:
            for name, index in list(peer.remotes.items()):
                if index == site.index:
                    self.say(f"{peer.name}.remotes.remove({name!r})")
                    peer.repo.remotes.remove(name)
                    del peer.remotes[name]
                    peer.tracking = {k: v for k, v in peer.tracking.items() if k[0] != name}
                    self.connect(peer, name, site)
        STATS["relocations"] += 1


def run_model(capsys, examples: int, label: str) -> None:
    STATS.clear()
    started = time.monotonic()
    try:
        run_state_machine_as_test(RemotesModel, settings=settings(
            max_examples=examples, stateful_step_count=STEPS, deadline=None, derandomize=not LONG,
            print_blob=True, suppress_health_check=list(HealthCheck),
            **({"phases": [p for p in Phase if p != Phase.shrink]} if NO_SHRINK else {})))
    finally:
        with capsys.disabled():
            took = time.monotonic() - started
            print(f"\nremotes model ({label}): {STATS['histories']} histories, {STATS['steps']} steps, "
                  f"{STATS['commits']} commits in {took:.0f} s (max_examples={examples}, stateful_step_count={STEPS})")
            for what, n in sorted(STATS.items()):
                if what not in ("histories", "steps", "commits"):
                    print(f"  {what}: {n}")


#: The CI run stays within the suite's per-test timeout; a long run has none.
long_run = pytest.mark.timeout(0 if LONG else 600)


@long_run
def test_remotes_model_local(capsys):
    """Random histories of several local repositories exchanging history, checked against git's model."""
    RemotesModel.s3 = None
    run_model(capsys, EXAMPLES, "local")


@long_run
@pytest.mark.s3
def test_remotes_model_s3_and_local(capsys, s3_server, monkeypatch):
    """The same with each repository on the S3 test server or on a local disk, drawn per repository."""
    for key, value in s3_server.env.items():
        monkeypatch.setenv(key, value)
    RemotesModel.s3 = (s3_server, dict(s3_server.storage_options))
    try:
        run_model(capsys, S3_EXAMPLES, "S3 and local")
    finally:
        RemotesModel.s3 = None
