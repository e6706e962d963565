"""Commits whose data a transfer brought back after gc reclaimed it: usable again.

gc records the commits it reclaims in ``gc/reclaimed.json`` (:mod:`trimerge.lineage.history.retention`),
and every verb that makes an existing commit reachable again (a branch or tag at it, a merge, a
reset) refuses a recorded one: its data is gone. A fetch or push from a repository that still has
such a commit copies its data again (the transfer counts a reclaimed commit as missing). Once every
table version the commit names is back, :func:`reinstate` removes its record, and from then on it is
an ordinary commit, kept by whatever ref reaches it.

Why this is safe beside gc (:mod:`trimerge.lineage.safety.gc`): the record is removed under gc's own
lease, so no gc run is between reading its old verdicts and deleting (a run that read the record
never condemns the commit again, so it would not protect it either); and it is removed while the
transfer's ``incoming/`` record still names the commit, so the first gc run after it keeps the data
until the transfer's refs — which reach it — have moved.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable

from trimerge.lineage.history.retention import RECLAIMED, ReclaimedCommits
from trimerge.lineage.safety.gc import GC_LEASE
from trimerge.lineage.storage.lease import Lease

if TYPE_CHECKING:
    from trimerge.lineage.safety.gc import GcHost

__all__ = ["reinstate"]

_ATTEMPTS = 10


def _versions(repo: "GcHost", dataset: str, lance_branch: str) -> set[int]:
    try:
        listed, _latest = repo.table_store.versions(dataset, lance_branch)
    except (OSError, ValueError, RuntimeError):  # the dataset or fork is gone
        return set()
    return set(listed)


def data_present(repo: "GcHost", commit_ids: Iterable[str]) -> list[str]:
    """The commits among ``commit_ids`` every table version of which is on storage."""
    cache: dict[tuple[str, str], set[int]] = {}
    out = []
    for cid in commit_ids:
        tables = repo.commit(cid).tables.values()
        for tv in tables:
            where = (tv.dataset, tv.lance_branch)
            if where not in cache:
                cache[where] = _versions(repo, *where)
        if all(tv.version in cache[(tv.dataset, tv.lance_branch)] for tv in tables):
            out.append(cid)
    return out


def reinstate(repo: "GcHost", commit_ids: Iterable[str]) -> list[str]:
    """Remove gc's "reclaimed" record of each of ``commit_ids`` whose data is on storage again (a
    transfer's, while its ``incoming/`` record is live); the commits reinstated. Waits for a gc run
    in progress (its lease) up to the repository's lock timeout, then raises the retryable
    :class:`~trimerge.lineage.errors.ConcurrentWriteError`."""
    reclaimed = ReclaimedCommits(repo.docs)
    marked, _ = reclaimed.read()
    wanted = sorted(set(commit_ids) & marked.keys())
    if not wanted:
        return []
    lease = Lease(repo.docs, GC_LEASE, "reinstate commits a transfer brought back")
    lease.acquire(repo.lock_timeout, "gc (a run in progress)")
    try:
        back = data_present(repo, wanted)
        for _ in range(_ATTEMPTS):
            marked, version = reclaimed.read()
            still = [c for c in back if c in marked]
            if not still:
                return []
            for cid in still:
                del marked[cid]
            if reclaimed.docs.swap(RECLAIMED, {"commits": marked}, version) is not None:
                return still
        from trimerge.lineage.errors import ConcurrentWriteError

        raise ConcurrentWriteError("gc's record of reclaimed commits kept changing; retry")
    finally:
        lease.release()
