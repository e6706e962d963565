"""fsck: check a repository without writing to it.

What is checked: every stored commit (parses, and its id is the digest of its content), every
branch, tag and HEAD document (parses, names an existing commit), every recovery note (parses; a
quarantined one is reported), the deletion and gc records, and every table version a branch or tag
reaches (the manifest opens, its path stays inside ``tables/``, and every data file it names exists).
Besides: ``repo.json`` (format, root — an existing commit without parents — and location), every
lease under ``locks/`` (parses as a lease), and on a local disk every symbolic link under
``_trimerge/`` or ``tables/`` (trimerge never makes one). Each problem names the file and the repair.
Files no version names (a refused or killed write's) are listed as ``orphans``, not problems: gc
reclaims them (:mod:`trimerge.lineage.safety.orphans`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any, Callable, Protocol

from trimerge.lineage.history import graph as graphalg
from trimerge.lineage.commit import Commit, TableVersion
from trimerge.lineage.errors import TrimergeError
from trimerge.lineage.safety.recovery import INTENTS, QUARANTINE, parse_intent

from trimerge.lineage.ports import CommitStore, DeletionRecords, RefStore
from trimerge.lineage.history.retention import ReclaimedCommits

if TYPE_CHECKING:
    from trimerge.lineage.storage.documents import Documents
    from trimerge.lineage.storage.location import Location
    from trimerge.lineage.tables.tablestore import TableStore


class FsckHost(Protocol):
    """What fsck reads: every store, as stored (the marker and leases are read as storage reads them)."""

    @property
    def docs(self) -> Documents: ...
    @property
    def commits(self) -> CommitStore: ...
    @property
    def refs(self) -> RefStore: ...
    @property
    def deletions(self) -> DeletionRecords: ...
    @property
    def reclaimed(self) -> ReclaimedCommits: ...
    @property
    def table_store(self) -> TableStore: ...
    @property
    def location(self) -> Location: ...
    def commit(self, commit_id: str) -> Commit: ...


@dataclass
class FsckReport:
    """What :meth:`Repository.fsck` checked and the problems it found (empty: all is well)."""

    commits: int = 0
    refs: int = 0
    table_versions: int = 0
    diffs_verified: int = 0  # fsck --deep: table diffs checked against the brute-force diff
    problems: list[str] = field(default_factory=list)
    #: Files no version names (a refused or killed write's): harmless, reclaimed by gc — not problems.
    orphans: list[str] = field(default_factory=list)
    orphan_bytes: int = 0

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_json(self) -> dict[str, Any]:
        return {**self.__dict__, "ok": self.ok}


def _problem(exc: BaseException) -> str:
    return str(exc) if isinstance(exc, TrimergeError) else f"{type(exc).__name__}: {exc}"


def check_repository(repo: "FsckHost") -> FsckReport:
    report = FsckReport()
    good_commits = _check_commits(repo, report)
    tips = _check_refs(repo, report, good_commits)
    _check_notes(repo, report)
    _check_marker(repo, report, good_commits)
    _check_leases(repo, report)
    _check_links(repo, report)
    _check_tables(repo, report, [t for t in tips if t in good_commits])
    _check_orphans(repo, report)
    return report


def _check_orphans(repo: "FsckHost", report: FsckReport) -> None:
    from trimerge.lineage.safety.orphans import find_orphans

    store = repo.table_store
    datasets = _safely(report, "tables/", lambda: store.dataset_folders()[0]) or []
    for name in datasets:
        if not store.has_branch(name):
            continue
        try:
            orphans = find_orphans(store, name, min_age=0)
        except Exception:  # a Lance branch that cannot be read: what commits reach is checked above
            continue
        report.orphans += [f"tables/{o.key}" for o in orphans]
        report.orphan_bytes += sum(o.size for o in orphans)


def _check_marker(repo: "FsckHost", report: FsckReport, good_commits: set[str]) -> None:
    from trimerge.lineage.storage.marker import REPAIR, REPO_DOC, read_marker

    doc = _safely(report, REPO_DOC, lambda: read_marker(repo.docs))
    if doc is None:
        return
    where = f"{repo.docs.where}/{REPO_DOC}"
    root = doc["root"]
    if root not in good_commits:
        report.problems.append(f"{where}: its root commit {root} is missing or damaged; {REPAIR}")
    elif repo.commits.get(root).parents:
        report.problems.append(f"{where}: its root {root} is not the first commit (it has parents); {REPAIR}")


def _check_leases(repo: "FsckHost", report: FsckReport) -> None:
    from trimerge.lineage.storage.lease import Holder, damaged_lease

    for key in _safely(report, "leases", lambda: repo.docs.list("locks")) or []:
        try:
            found = repo.docs.read(key, damaged_as_none=True)
        except Exception as exc:
            report.problems.append(f"lease {key}: {_problem(exc)}")
            continue
        if found is not None and Holder.from_json(found.doc) is None:
            report.problems.append(str(damaged_lease(repo.docs, key)))


def _check_links(repo: "FsckHost", report: FsckReport) -> None:
    """Symbolic links under ``_trimerge/`` and ``tables/`` (local repositories): reported, never followed."""
    import os

    from trimerge.lineage.storage.location import META_DIR, TABLES_DIR

    if not repo.location.is_local:
        return
    for folder in (META_DIR, TABLES_DIR):
        top = repo.location.path / folder
        for dirpath, dirs, files in os.walk(top):
            for name in [*dirs, *files]:
                path = os.path.join(dirpath, name)
                if os.path.islink(path):
                    target = os.readlink(path)
                    report.problems.append(
                        f"{path} is a symbolic link (to {target}): trimerge never makes links and does not follow "
                        "one out of the repository; replace it with the file or folder it should be, or remove it")


def _check_commits(repo: "FsckHost", report: FsckReport) -> set[str]:
    good = set()
    for cid in repo.commits.all_ids():
        report.commits += 1
        try:
            repo.commits.get(cid)
            good.add(cid)
        except Exception as exc:  # each bad commit is one problem; the others are still checked
            report.problems.append(f"commit {cid}: {_problem(exc)}")
    return good


def _check_refs(repo: "FsckHost", report: FsckReport, good_commits: set[str]) -> list[str]:
    tips = []
    refs = repo.refs
    checks: list[tuple[str, Callable[[], Any]]] = [
        (f"branch {n}", partial(refs.branch, n)) for n in refs.branch_names(include_internal=True)]
    checks += [(f"tag {n}", partial(refs.tag, n)) for n in refs.tag_names()]
    for what, read in checks:
        report.refs += 1
        try:
            ref = read()
        except Exception as exc:
            report.problems.append(f"{what}: {_problem(exc)}")
            continue
        if ref is None:
            continue  # deleted while checking
        if ref.commit_id not in good_commits:
            state = "is damaged" if repo.commits.exists(ref.commit_id) else "does not exist"
            report.problems.append(f"{what}: its commit {ref.commit_id} {state}")
        else:
            tips.append(ref.commit_id)
    try:
        head = refs.head()
        if refs.branch(head) is None:
            report.problems.append(f"HEAD names branch {head!r}, which does not exist")
    except Exception as exc:
        report.problems.append(f"HEAD: {_problem(exc)}")
    for record in _safely(report, "deletion records", repo.deletions.records) or []:
        if record.commit_id not in good_commits:
            report.problems.append(f"deletion record {record.key}: commit {record.commit_id} is missing or damaged")
    _safely(report, "gc record", repo.reclaimed.read)
    return tips


def _safely(report: FsckReport, what: str, call: Any) -> Any:
    try:
        return call()
    except Exception as exc:
        report.problems.append(f"{what}: {_problem(exc)}")
        return None


def _check_notes(repo: "FsckHost", report: FsckReport) -> None:
    docs = repo.docs
    for key in docs.list(INTENTS):
        try:
            doc = docs.get(key)
            if doc is not None:
                parse_intent(doc)
        except Exception as exc:
            report.problems.append(f"recovery note {key}: {_problem(exc)}")
    for key in docs.keys_below(QUARANTINE):
        report.problems.append(f"recovery note {key}: quarantined (could not be parsed); inspect and delete it")


def _check_tables(repo: "FsckHost", report: FsckReport, tips: list[str]) -> None:
    from trimerge.lineage.tables.importing import missing_sources

    seen: set[tuple[str, str, int]] = set()
    store = repo.table_store
    listings: dict[str, set[str]] = {}
    for cid in graphalg.iter_history(repo.commits, tips) if tips else []:
        try:
            tables = repo.commit(cid).tables
        except Exception:
            continue  # reported with the commits
        for name, tv in sorted(tables.items()):
            key = (tv.dataset, tv.lance_branch, tv.version)
            if key in seen:
                continue
            seen.add(key)
            report.table_versions += 1
            try:
                missing = [f for f in store.data_files(tv) if f not in _listing(store, f, listings)]
            except Exception as exc:
                report.problems.append(f"table {name} at commit {cid[:10]} ({_where(tv)}): {_problem(exc)}")
                continue
            if missing:
                report.problems.append(f"table {name} at commit {cid[:10]} ({_where(tv)}): {len(missing)} data "
                                       f"file(s) missing, e.g. tables/{missing[0]}")
            for problem in _safely(report, f"import source of table {name} ({_where(tv)})",
                                   lambda: missing_sources(store, [tv])) or []:
                report.problems.append(f"table {name} at commit {cid[:10]}: {problem}")
            for index, folder in _safely(report, f"indices of table {name} ({_where(tv)})",
                                         lambda: store.index_folders(tv)) or []:
                if next(iter(store.files.keys_below(folder)), None) is None:
                    report.problems.append(f"table {name} at commit {cid[:10]} ({_where(tv)}): the files of index "
                                           f"{index!r} are missing (tables/{folder})")


def _listing(store: Any, key: str, cache: dict[str, set[str]]) -> set[str]:
    folder = key.rsplit("/", 1)[0]
    if folder not in cache:
        cache[folder] = set(store.files.keys_below(folder))
    return cache[folder]


def _where(tv: TableVersion) -> str:
    return f"{tv.dataset} {tv.lance_branch} v{tv.version}"
