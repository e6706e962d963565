"""Maintenance: reclaiming storage that no branch, tag or reachable commit needs.

What is kept: every table version named by a commit reachable from a branch or tag, and every
Lance branch an in-flight write (an intent) touches. What goes: datasets and forks nothing keeps,
Lance tags of deleted trimerge tags, and temporary files of interrupted local writes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable

from trimerge.lineage import graph as graphalg
from trimerge.lineage.recovery import INTENTS

if TYPE_CHECKING:
    from trimerge.lineage.repository import Repository

RECLAIM = "reclaim"


@dataclass
class CleanupReport:
    """What :meth:`Repository.cleanup` reclaimed."""

    datasets_removed: list[str] = field(default_factory=list)
    forks_removed: list[str] = field(default_factory=list)
    lance_tags_removed: list[str] = field(default_factory=list)
    temp_files_removed: int = 0
    bytes_freed: int = 0
    pending: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def reclaim_key(branch: str) -> str:
    from trimerge.lineage.refs import encode_name

    return f"{RECLAIM}/{encode_name(branch)}.json"


class Maintenance:
    """Cleanup of one repository."""

    def __init__(self, repo: "Repository"):
        self.repo = repo

    def reachable_commits(self) -> set[str]:
        repo = self.repo
        starts = [b.commit_id for b in repo.branches.list(include_internal=True)]
        starts += [t.commit_id for t in repo.tags.list()]
        return set(graphalg.iter_history(repo.commits, starts)) if starts else set()

    def referenced_locations(self, commit_ids: Iterable[str]) -> set[tuple[str, str]]:
        """(dataset, Lance branch) of every table of these commits and of in-flight writes."""
        repo = self.repo
        refs: set[tuple[str, str]] = set()
        for cid in commit_ids:
            for tv in repo.commit(cid).tables.values():
                refs.add((tv.dataset, tv.lance_branch))
        for key in repo.docs.list(INTENTS):
            try:
                for item in repo.docs.get(key).get("touched", []):
                    refs.add((item["dataset"], item["lance_branch"]))
            except Exception:  # a damaged intent keeps nothing; recovery quarantines it
                pass
        return refs

    def reclaim_forks(self, wanted: set[tuple[str, str]], only_datasets: set[str] | None,
                      report: CleanupReport) -> None:
        """Delete Lance forks no reachable commit uses (children before parents)."""
        store = self.repo.table_store
        for name in store.datasets():
            if only_datasets is not None and name not in only_datasets:
                continue
            if not any(d == name for d, _ in wanted):
                continue
            progress = True
            while progress:
                progress = False
                for fork in sorted(store.forks(name)):
                    if (name, fork) in wanted:
                        continue
                    size = store.size(name, fork)
                    try:
                        store.delete_fork(name, fork)
                    except Exception:
                        continue  # still has children or tags; retried next round
                    report.forks_removed.append(f"{name}:{fork}")
                    report.bytes_freed += size
                    progress = True
            report.pending.extend(f"{name}:{f}" for f in store.forks(name) if (name, f) not in wanted)

    def cleanup(self) -> CleanupReport:
        repo = self.repo
        store = repo.table_store
        report = CleanupReport()
        wanted = self.referenced_locations(self.reachable_commits())
        wanted_datasets = {d for d, _ in wanted}
        for name in store.datasets():
            if name not in wanted_datasets:
                report.bytes_freed += store.size(name)
                store.remove(name)
                report.datasets_removed.append(name)
        self.reclaim_forks(wanted, None, report)
        for t in repo.tags.list():
            try:
                repo.tags.pin(t)  # a tag whose creator died before pinning
            except Exception:  # its data is gone or unreadable: nothing to pin
                pass
        tag_names = {t.name for t in repo.tags.list()}
        for name in store.datasets():
            for pin in store.pins(name):
                if pin.startswith("t-") and pin[2:] not in tag_names:
                    store.unpin(name, pin)
                    report.lance_tags_removed.append(f"{name}:{pin}")
        stale = getattr(repo.docs.backend, "stale_temp_files", None)
        for key in stale() if stale else []:
            repo.docs.delete(key)
            report.temp_files_removed += 1
        still_pending = {p.split(":", 1)[1] for p in report.pending}
        for key in repo.docs.list(RECLAIM):
            try:
                forks = repo.docs.get(key).get("forks", [])
            except Exception:
                forks = []
            if not any(f.split(":", 1)[-1] in still_pending for f in forks):
                repo.docs.delete(key)
        return report
