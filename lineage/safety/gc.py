"""gc: reclaim the storage that no branch, tag, recent deletion or in-flight write needs.

**What is kept.** Every commit reachable from a branch, a tag or a remote-tracking ref; every commit reachable from a
branch or tag deleted less than ``retention`` ago (``deleted/`` records); everything an in-flight
write may still publish (its intent: the Lance branches it touches, its base, planned commit and the
commits it refers to), and what a push in flight uploads (:mod:`trimerge.lineage.safety.incoming`);
the reflog entries hooks have yet to deliver and the change feed's checkpoints, as long as their
consumers ask (:data:`~trimerge.lineage.extensions.GC_HOLDS`, filled by :mod:`trimerge.hooks`).
Their table versions stay readable. **What goes:** datasets and Lance forks
no kept commit uses, Lance versions no kept commit names (aborted writes, a transaction's
intermediate versions), files no version names at all once older than the retention and an hour
(writes refused through the namespace or killed before their commit: :mod:`trimerge.lineage.safety.orphans`),
pins of deleted tags, stale temporary files and expired deletion records.
Only what trimerge creates is ever removed: folders named ``<table>-<ulid>`` and forks named
``f-<ulid>``; anything else under ``tables/`` (files, symlinks, foreign folders) is reported and left.

**Protocol** (one collector at a time, under the ``__gc__`` lease):

1. *List* the candidates: datasets, their forks and versions, and every stored commit id.
2. *Read the roots*, always in this order: intents (and the ``incoming/`` records of
   transfers in flight), then refs (remote-tracking refs included), then deletion records, then the
   reflog entries younger than ``retention`` (a ref move records its entry before it moves).
3. *Condemn*: record the listed commits that no root reaches in ``gc/reclaimed.json`` (state: this run).
4. *Read the roots again*, and take back every condemned commit they now reach.
5. *Delete* what step 1 listed and neither reading wants; mark the condemned commits ``reclaimed``.

Why no interleaving loses data that a ref reaches afterwards:

* Data created after step 1 is not a candidate. A writer records its intent before creating data,
  and deletes the intent only after publishing; since intents are read before refs, a write in
  flight is seen either as an intent or as the branch tip that includes it.
* A branch or tag deletion writes its ``deleted/`` record before removing the ref; refs are read
  before records, so the tip is seen in one or the other (until the retention period ends).
* Making an *existing* commit reachable again (creating a branch or tag at it, merging,
  cherry-picking or reverting it) stores the new reference first, then checks
  ``gc/reclaimed.json`` and undoes itself if the commit is condemned. If the reference was stored
  before step 4, gc sees it and takes the commit back; otherwise it was stored after step 3, so the
  creator sees the verdict. Either way no reference survives to condemned data.
* A Lance version is removed only from a Lance branch no intent touches, never the latest one
  nor a fork's first one; Lance itself keeps the versions tags pin and other forks start from.
  A writer that starts later builds on its branch tip (kept) or on the latest version.
* Everything is deleted only after the verdict, so a crash at any step leaves at worst a verdict
  whose deletion the next run finishes (condemned commits are never taken back by a later run).
"""

from __future__ import annotations

import time
from urllib.parse import unquote
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Callable, Iterable, Protocol

from ulid import ULID

from trimerge.lineage.history import graph as graphalg
from trimerge.lineage.commit import Commit, TableVersion
from trimerge.lineage.errors import CorruptRepositoryError
from trimerge.lineage.storage.faults import crashpoint
from trimerge.lineage.storage.lease import Lease
from trimerge.lineage.safety import incoming
from trimerge.lineage.safety.orphans import ORPHAN_GRACE_SECONDS, find_orphans, remove_orphans
from trimerge.lineage.safety.recovery import INTENTS
from trimerge.lineage.history.refs import now
from trimerge.lineage.history.retention import DONE, DeletionLog, ReclaimedCommits
from trimerge.lineage.tables.tablestore import FORK_NAME

from trimerge.lineage.hosts import ServedHost
from trimerge.lineage.ports import HistoryStores

if TYPE_CHECKING:
    from trimerge.lineage.storage.documents import Documents


class GcHost(ServedHost, HistoryStores, Protocol):
    """What gc reads and reclaims: every store (documents as stored: its lease, stale temporary files)."""

    @property
    def docs(self) -> Documents: ...
    @property
    def lock_timeout(self) -> float: ...
    def commit(self, commit_id: str) -> Commit: ...

GC_LEASE = "locks/__gc__.lock"
LEGACY_RECLAIM = "reclaim"  # per-branch leftovers of versions before gc; nothing reads them now
#: Spark jobs pin their snapshots (``p-<ulid>``) for the job's length; older pins are leftovers.
JOB_PIN_SECONDS = 24 * 3600

Location = tuple[str, str]  # (dataset, Lance branch)


@dataclass
class GcReport:
    """What :meth:`Repository.gc` kept and reclaimed."""

    retention_seconds: float = 0.0
    commits_reclaimed: list[str] = field(default_factory=list)
    datasets_removed: list[str] = field(default_factory=list)
    forks_removed: list[str] = field(default_factory=list)
    versions_removed: int = 0
    lance_tags_removed: list[str] = field(default_factory=list)
    temp_files_removed: int = 0
    orphan_files_removed: int = 0  # files no version names (refused or killed writes), see lineage.orphans
    stale_leases_removed: int = 0  # leases of scratch transactions whose process died
    pinned_copies_removed: int = 0  # copies the Lance Namespace served of fork states no commit has any more
    deletion_records_expired: int = 0
    reflog_entries_expired: int = 0
    bytes_freed: int = 0
    pending: list[str] = field(default_factory=list)  # forks other forks still start from
    left_alone: list[str] = field(default_factory=list)  # entries under tables/ trimerge did not create

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class Candidates:
    """Step 1: what exists, listed before any root is read."""

    datasets: list[str]
    forks: dict[str, list[str]]  # dataset -> its f-<ulid> forks
    versions: dict[Location, tuple[list[int], int, int | None]]  # -> (versions, latest, first of a fork)
    pins: dict[str, list[str]]
    commits: set[str]
    strays: list[str]


@dataclass
class Roots:
    """Steps 2 and 4: what the refs, recent deletions and in-flight writes keep."""

    commits: set[str] = field(default_factory=set)  # retained: the roots and their history
    versions: dict[Location, set[int]] = field(default_factory=dict)
    touched: set[Location] = field(default_factory=set)  # whole Lance branches in-flight writes use
    tags: set[str] = field(default_factory=set)

    def keep(self, tv: TableVersion) -> None:
        self.versions.setdefault((tv.dataset, tv.lance_branch), set()).add(tv.version)

    def union(self, other: "Roots") -> "Roots":
        versions = {k: set(v) for k, v in self.versions.items()}
        for k, v in other.versions.items():
            versions.setdefault(k, set()).update(v)
        return Roots(self.commits | other.commits, versions, self.touched | other.touched, self.tags | other.tags)

    def wants_dataset(self, dataset: str) -> bool:
        return any(d == dataset for d, _ in self.versions) or any(d == dataset for d, _ in self.touched)

    def wants(self, loc: Location) -> bool:
        return loc in self.versions or loc in self.touched


class Collector:
    """One gc run over one repository (see the module docstring for the protocol)."""

    def __init__(self, repo: "GcHost", retention: timedelta, *, warn: Callable[[str], None] | None = None):
        self.repo = repo
        self.retention = retention
        self.started = now()
        self.run_id = str(ULID())
        self.warn = warn or (lambda _msg: None)
        self.deletions = DeletionLog(repo.docs)
        self.reclaimed = ReclaimedCommits(repo.docs)
        self.report = GcReport(retention_seconds=retention.total_seconds())
        self.lease: Lease | None = None

    def run(self) -> GcReport:
        repo = self.repo
        self.lease = Lease(repo.docs, GC_LEASE, f"gc {self.run_id}")
        self.lease.acquire(repo.lock_timeout, "gc (another gc is running)")
        try:
            candidates = self.list_candidates()
            crashpoint("gc_listed")
            condemned_before, _ = self.reclaimed.read()
            first = self.read_roots(condemned_before)
            crashpoint("gc_roots_read")
            verdict = sorted(candidates.commits - first.commits - condemned_before.keys())
            self.condemn(verdict, keep=())
            crashpoint("gc_condemned")
            second = self.read_roots(condemned_before)
            taken_back = [c for c in verdict if c in second.commits]
            if taken_back:
                self.condemn(verdict, keep=taken_back)
            crashpoint("gc_confirmed")
            self.delete(candidates, first.union(second))
            crashpoint("gc_deleted")
            self.finish(condemned_before, [c for c in verdict if c not in second.commits])
        finally:
            self.lease.release()
        return self.report

    # ------------------------------------------------------------------ step 1
    def list_candidates(self) -> Candidates:
        store = self.repo.table_store
        datasets, strays = store.dataset_folders()
        for stray in strays:
            self.warn(f"gc: left alone tables/{stray} (not created by trimerge)")
        self.report.left_alone = [f"tables/{s}" for s in strays]
        forks: dict[str, list[str]] = {}
        versions: dict[Location, tuple[list[int], int, int | None]] = {}
        pins: dict[str, list[str]] = {}
        for name in datasets:
            if not store.has_branch(name):
                forks[name], pins[name] = [], []  # a half-removed or never-written dataset
                continue
            info = store.forks(name)
            forks[name] = [f for f in info if FORK_NAME.match(f)]
            pins[name] = store.pins(name)
            for branch in ["main", *forks[name]]:
                listed, latest = store.versions(name, branch)
                first = int(info[branch]["parent_version"]) if branch != "main" else None
                versions[(name, branch)] = (listed, latest, first)
            self.lease.renew_if_due()
        return Candidates(datasets, forks, versions, pins, set(self.repo.commits.all_ids()), strays)

    # ------------------------------------------------------------------ steps 2 and 4
    def read_roots(self, condemned: dict[str, str]) -> Roots:
        """Intents, then refs, then deletion records: the order the protocol depends on."""
        repo = self.repo
        roots = Roots()
        starts: list[str] = []
        for key in repo.docs.list(INTENTS):
            intent = repo.docs.get(key)  # a damaged intent raises: gc must not guess what it keeps
            if intent is None:
                continue
            if not isinstance(intent, dict):
                raise CorruptRepositoryError(f"{repo.docs.where}/{key}: not an intent; run 'trimerge fsck'")
            for item in intent.get("touched", []):
                roots.touched.add((str(item["dataset"]), str(item["lance_branch"])))
            starts += [c for c in [intent.get("base"), *intent.get("refers", [])] if c]
            planned = intent.get("commit")
            if planned:
                commit = Commit.from_json(planned)
                roots.commits.add(commit.id)
                starts += list(commit.parents)
                for tv in commit.tables.values():
                    roots.keep(tv)
        for pushed in incoming.live(repo.docs):  # pushes in flight: kept until their ref has moved
            roots.touched.update((str(d), str(b)) for d, b in pushed.get("touched", []))
            starts += [c for c in pushed.get("commits", []) if repo.commits.exists(c)]
        crashpoint("gc_intents_read")
        branches = repo.branches.list(include_internal=True)
        tags = repo.tags.list()
        starts += [b.commit_id for b in branches] + [t.commit_id for t in tags] + repo.refs.tracking_tips()
        roots.tags = {t.name for t in tags}
        for record in self.deletions.records():
            if not record.expired(self.retention, self.started) and record.commit_id not in condemned:
                starts.append(record.commit_id)
        held_since, held_commits = self.holds()
        for entry in repo.refs.reflog.all_entries():  # after the refs: a move records its entry first
            if self.started - entry.time < self.retention or (held_since is not None and entry.time >= held_since):
                starts += [c for c in (entry.old, entry.new) if c and c not in condemned]
        starts += [c for c in held_commits if c not in condemned and repo.commits.exists(c)]
        if starts:
            for cid in graphalg.iter_history(repo.commits, starts):
                roots.commits.add(cid)
                for tv in repo.commit(cid).tables.values():
                    roots.keep(tv)
        self.lease.renew_if_due()
        return roots

    def holds(self) -> tuple[Any, list[str]]:
        """What the layers above ask gc to keep (:data:`~trimerge.lineage.extensions.GC_HOLDS`):
        the reflog entries since the oldest time any of them names, and their commits — hooks'
        undelivered events, change-feed checkpoints. A hold that cannot be read raises: gc must
        not drop what it cannot tell is needed."""
        from trimerge.lineage.extensions import GC_HOLDS

        since: Any = None
        commits: list[str] = []
        for hold in list(GC_HOLDS.values()):
            held_since, held = hold(self.repo)
            if held_since is not None and (since is None or held_since < since):
                since = held_since
            commits += held
        return since, commits

    # ------------------------------------------------------------------ step 3
    def condemn(self, verdict: list[str], keep: Iterable[str]) -> None:
        commits, version = self.reclaimed.read()
        keep = set(keep)
        for cid in verdict:
            if cid in keep:
                commits.pop(cid, None)
            else:
                commits[cid] = self.run_id
        if verdict:
            self.reclaimed.write(commits, version)

    # ------------------------------------------------------------------ step 5
    def delete(self, candidates: Candidates, wanted: Roots) -> None:
        store = self.repo.table_store
        report = self.report
        for name in candidates.datasets:
            if not wanted.wants_dataset(name):
                size = store.size(name)
                store.remove(name)
                self.forget_check_passes(name)
                if size:  # an empty folder some stores keep listing is not worth a line
                    report.bytes_freed += size
                    report.datasets_removed.append(name)
                self.lease.renew_if_due()
        kept = [n for n in candidates.datasets if wanted.wants_dataset(n)]
        for name in kept:
            self.delete_forks(name, candidates.forks.get(name, []), wanted)
        for (name, branch), (listed, latest, first) in sorted(candidates.versions.items()):
            if name not in kept or (name, branch) in wanted.touched or f"{name}:{branch}" in report.forks_removed:
                continue
            keep = wanted.versions.get((name, branch), set()) | {latest} | ({first} if first else set())
            doomed = [v for v in listed if v not in keep]
            if doomed:
                removed, freed = store.remove_versions(name, branch, doomed)
                report.versions_removed += removed
                report.bytes_freed += freed
                self.lease.renew_if_due()
        for name in kept:
            self.delete_pins(name, candidates.pins.get(name, []), wanted.tags)
        self.delete_orphans(kept, wanted)
        stale = getattr(self.repo.docs.backend, "stale_temp_files", None)
        for key in stale() if stale else []:
            self.repo.docs.delete(key)
            report.temp_files_removed += 1

    def delete_orphans(self, kept: list[str], wanted: Roots) -> None:
        """Files no version names, older than the retention (and the grace any writer gets), outside
        the Lance branches in-flight writes use."""
        store = self.repo.table_store
        min_age = max(self.retention.total_seconds(), ORPHAN_GRACE_SECONDS)
        for name in kept:
            busy = {branch for dataset, branch in wanted.touched if dataset == name}
            try:
                orphans = find_orphans(store, name, min_age=min_age, skip_branches=busy)
            except Exception as exc:  # a version or folder that cannot be read: keep everything, sweep the rest
                self.warn(f"gc: left the unreferenced files of tables/{name} alone ({str(exc).splitlines()[0][:200]})")
                continue
            removed, freed = remove_orphans(store, orphans)
            self.report.orphan_files_removed += removed
            self.report.bytes_freed += freed
            self.lease.renew_if_due()

    def forget_check_passes(self, dataset: str, lance_branch: str | None = None) -> None:
        """Drop the "passed at" records (:mod:`trimerge.lineage.gates.checkpasses`) of a removed dataset or fork."""
        from trimerge.lineage.gates.checkpasses import FOLDER, record_key

        docs = self.repo.docs
        for key in [record_key(dataset, lance_branch)] if lance_branch else docs.list(f"{FOLDER}/{dataset}"):
            docs.delete(key)  # a missing record is no error: deletes are idempotent

    def delete_forks(self, name: str, forks: list[str], wanted: Roots) -> None:
        """Delete unwanted forks, children before parents (Lance refuses a fork others start from)."""
        store = self.repo.table_store
        doomed = [f for f in forks if not wanted.wants((name, f))]
        progress = True
        while doomed and progress:
            progress = False
            for fork in list(doomed):
                size = store.size(name, fork)
                try:
                    store.delete_fork(name, fork)
                except Exception:  # still has children (kept forks) or pins: left for a later run
                    continue
                doomed.remove(fork)
                self.forget_check_passes(name, fork)
                self.report.forks_removed.append(f"{name}:{fork}")
                self.report.bytes_freed += size
                progress = True
        self.report.pending.extend(f"{name}:{f}" for f in doomed)

    def delete_pins(self, name: str, pins: list[str], tags: set[str]) -> None:
        store = self.repo.table_store
        for pin in pins:
            stale_tag = pin.startswith("t-") and pin[2:] not in tags
            stale_job = pin.startswith("p-") and _older_than(pin[2:], JOB_PIN_SECONDS)
            if stale_tag or stale_job:
                try:
                    store.unpin(name, pin)
                except Exception:  # removed meanwhile
                    continue
                self.report.lance_tags_removed.append(f"{name}:{pin}")

    def finish(self, condemned_before: dict[str, str], verdict: list[str]) -> None:
        """Mark every condemned commit reclaimed (this run's and those of runs that died), then drop
        the deletion records the retention no longer keeps."""
        commits, version = self.reclaimed.read()
        unfinished = [c for c, state in commits.items() if state != DONE]
        for cid in unfinished:
            commits[cid] = DONE
        if unfinished:
            self.reclaimed.write(commits, version)
        self.report.commits_reclaimed = sorted(set(verdict) | {c for c, s in condemned_before.items() if s != DONE})
        for record in self.deletions.records():
            if record.expired(self.retention, self.started) or record.commit_id in commits:
                self.deletions.remove(record)
                self.report.deletion_records_expired += 1
        held_since, _ = self.holds()
        reflog_retention = self.retention if held_since is None else \
            max(self.retention, self.started - held_since + timedelta(seconds=1))
        self.report.reflog_entries_expired = self.repo.refs.reflog.expire(reflog_retention, self.started)
        for key in self.repo.docs.list(LEGACY_RECLAIM):
            self.repo.docs.delete(key)
        self.sweep_scratch_leases()
        incoming.expire(self.repo.docs)
        self.delete_pinned_copies()

    def delete_pinned_copies(self) -> None:
        """The pinned copies (:mod:`trimerge.lineage.tables.served`) of fork states no stored commit
        has any more: their manifests name files gc may have reclaimed, and no ref can ask for them."""
        from trimerge.lineage.storage.location import META_DIR
        from trimerge.lineage.tables.served import stale_pinned_locations

        meta = self.repo.location.backend(META_DIR)
        for folder in stale_pinned_locations(self.repo):
            meta.delete_tree(folder)
            self.report.pinned_copies_removed += 1

    def sweep_scratch_leases(self) -> None:
        """Delete the lease documents of scratch transactions (a merge's virtual base) whose process
        died: a closed scratch deletes its own; one nobody holds and no intent names is a leftover.
        Taking the lease first means a live scratch is never touched."""
        from trimerge.lineage.history.names import SCRATCH_PREFIXES

        docs = self.repo.docs
        named = set()
        for key in docs.list(INTENTS):
            intent = docs.get(key)
            if isinstance(intent, dict):
                named.add(str(intent.get("branch")))
        for key in docs.list("locks"):
            name = unquote(key.rsplit("/", 1)[-1].removesuffix(".lock"))
            if not name.startswith(SCRATCH_PREFIXES) or name in named:
                continue
            lease = Lease(docs, key, f"gc {self.run_id}")
            if lease.try_acquire():
                docs.delete(key)
                self.report.stale_leases_removed += 1


def _older_than(ulid_text: str, seconds: float) -> bool:
    try:
        created = ULID.from_str(ulid_text.upper()).timestamp
    except ValueError:
        return False
    return time.time() - created > seconds


def as_retention(value: object) -> timedelta:
    """A retention period from a ``timedelta``, a number of seconds, or text (:func:`parse_retention`)."""
    from trimerge.lineage.errors import InvalidOperationError

    if isinstance(value, str):
        return parse_retention(value)
    if isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value <= 1e12:
        return timedelta(seconds=value)
    if isinstance(value, timedelta) and value >= timedelta(0):
        return value
    raise InvalidOperationError(f"retention must be a non-negative timedelta, seconds or text like '7d', not {value!r}")


def parse_retention(text: str) -> timedelta:
    """``7d``, ``12h``, ``30m``, ``45s``, ``2w`` or ``now`` (no retention)."""
    from trimerge.lineage.errors import InvalidOperationError

    value = text.strip().lower()
    if value in ("now", "0"):
        return timedelta(0)
    units = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}
    number, unit = value[:-1], value[-1:]
    try:
        amount = float(number)
    except ValueError:
        amount = -1.0
    if unit not in units or not 0 <= amount <= 1e6:
        raise InvalidOperationError(f"bad retention {text!r}: use a number with s, m, h, d or w (e.g. 7d, 12h), or 'now'")
    return timedelta(**{units[unit]: amount})

