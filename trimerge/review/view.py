"""What ``repo.requests.show`` answers: a request as a reviewer sees it.

For an open request: the three-dot diff ``into...source`` (what the merge would bring, per table,
rows and cells), a dry run of the merge (the conflicts it would meet now, and the verdicts of the
checks gating the target on the would-be result — nothing is published), the reviews with stale
approvals marked, and whether it can merge now, and if not why. It is those two computations,
the diff and the dry-run merge, and nothing more. A merged request shows what its merge commit
changed on the target; a closed one, the diff it had.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from trimerge.lineage.commit import Commit
from trimerge.lineage.errors import TrimergeError
from trimerge.lineage.history.requests import Approvals, Request, Review, approvals
from trimerge.lineage.repository import Repository

if TYPE_CHECKING:
    from trimerge.diff import Diff
    from trimerge.merge import MergeResult

#: Rows per table a request's JSON carries by default (``to_json(rows=N)``).
ROWS_PER_TABLE = 1000


@dataclass
class RequestView:
    """A request with what a reviewer needs. ``diff``: the three-dot diff (None when the source is
    gone); ``merge``: the dry-run merge's result (None unless open); ``conflicts`` and ``checks``
    from it; ``reviews`` every review, ``stale`` set on those of an earlier source tip;
    ``approvals`` as the target's rule counts them (None when it requires none); ``mergeable``
    whether ``repo.requests.merge`` would publish now, else ``why``."""

    request: Request
    source_commit: Commit | None
    into_commit: Commit | None
    diff: "Diff | None"
    merge: "MergeResult | None"
    conflicts: list[Any] = field(default_factory=list)
    checks: list[Any] = field(default_factory=list)
    reviews: list[Review] = field(default_factory=list)
    approvals: Approvals | None = None
    mergeable: bool = False
    why: str | None = None

    # the request's own fields, for convenience
    @property
    def id(self) -> int:
        return self.request.id

    @property
    def state(self) -> str:
        return self.request.state

    @property
    def title(self) -> str:
        return self.request.title

    @property
    def source(self) -> str:
        return self.request.source

    @property
    def into(self) -> str:
        return self.request.into

    def diff_json(self, rows: int | None = ROWS_PER_TABLE) -> dict[str, Any] | None:
        """The diff as ``trimerge diff --json`` prints it, at most ``rows`` rows per table (None: all)."""
        if self.diff is None:
            return None
        doc = self.diff.to_json()
        for name, td in self.diff.tables.items():
            if td.status == "unchanged" and not td.index_changes:
                continue
            table = td.head(rows) if rows is not None else td.rows()
            doc["tables"][name]["rows"] = table.to_pylist()
            doc["tables"][name]["rows_shown"] = table.num_rows
        return doc

    def to_json(self, rows: int | None = ROWS_PER_TABLE) -> dict[str, Any]:
        """The request, its diff (rows and cells, at most ``rows`` per table), the dry run's
        conflicts and checks, the reviews and the verdict."""
        from trimerge.lineage.storage.jsonvalues import jsonable

        doc = self.request.to_json()
        doc["reviews"] = [r.to_json() for r in self.reviews]
        doc.update({
            "source_commit": self.source_commit.id if self.source_commit else None,
            "into_commit": self.into_commit.id if self.into_commit else None,
            "diff": jsonable(self.diff_json(rows)),
            "merge": None if self.merge is None else {"status": self.merge.status,
                                                      "stats": {n: s.to_json() for n, s in sorted(self.merge.stats.items())},
                                                      "conflicts_total": self.merge.conflicts_total},
            "conflicts": [c.to_json() for c in self.conflicts],
            "checks": [c.to_json() for c in self.checks],
            "approvals": None if self.approvals is None else self.approvals.to_json(),
            "mergeable": self.mergeable,
            "why": self.why,
        })
        return doc

    def report(self, fmt: str = "markdown") -> str:
        """Render for CI: ``markdown`` (a comment), ``json``, ``sarif`` or ``junit`` (as merges do)."""
        from trimerge.review.reports import render

        return render(self, fmt)


def build_view(repo: Repository, request: Request, *, strategy: Any = None, resolutions: Any = None) -> RequestView:
    """Compute the view of ``request`` now (see the module's docstring)."""
    if request.remote is not None:
        return _remote_view(repo, request)
    if request.state == "merged":
        return _merged_view(repo, request)
    source = repo.refs.branch(request.source) if repo.branches.exists(request.source) else None
    into = repo.refs.branch(request.into) if repo.branches.exists(request.into) else None
    if source is None or into is None:
        gone = request.source if source is None else request.into
        view = RequestView(request, None, repo.commit(into.commit_id) if into else None, None, None,
                           reviews=_reviews(request, None))
        view.why = f"branch {gone!r} no longer exists" if request.state == "open" else f"the request is {request.state}"
        return view
    if request.state != "open":
        view = _diff_only(repo, request, source.commit_id, into.commit_id)
        view.why = f"the request is {request.state}"
        return view
    from trimerge.merge import MergeCheckError, MergeConflictError, merge

    try:
        result = merge(request.source, request.into, repo=repo, dry_run=True, strategy=strategy,
                       resolutions=resolutions, metadata={"request.id": str(request.id)})
    except (MergeConflictError, MergeCheckError) as exc:  # a dry run returns these; kept for safety
        result = exc.result
    view = _diff_only(repo, request, result.source_commit.id, result.dest_commit.id)
    view.merge = result
    view.conflicts = list(result.conflicts)
    view.checks = list(result.checks)
    rule = repo.branches.protection(request.into)
    if rule is not None and rule.approvals:
        view.approvals = approvals(request, result.source_commit.id, rule.approvals)
    reasons = []
    if result.has_conflicts:
        reasons.append(f"{result.conflicts_total} conflict(s) (merge with --strategy or --resolve FILE, or fix the "
                       f"source)")
    failed = result.failed_checks
    if failed:
        reasons.append(f"{len(failed)} check(s) fail on the would-be result: "
                       + "; ".join(c.describe() for c in failed[:3]))
    if view.approvals is not None and not view.approvals.satisfied:
        reasons.append(view.approvals.why() or "approvals missing")
    view.mergeable = not reasons
    view.why = "; ".join(reasons) or None
    return view


def _reviews(request: Request, tip: str | None) -> list[Review]:
    return [replace(r, stale=tip is not None and r.commit != tip) for r in request.reviews]


def _three_dot(repo: Repository, into: str, source: str) -> "Diff | None":
    from trimerge.diff import diff

    try:
        return diff(f"{into}...{source}", repo=repo)
    except TrimergeError:  # unrelated histories: no merge base to diff from
        return None


def _diff_only(repo: Repository, request: Request, source: str, into: str) -> RequestView:
    return RequestView(request, repo.commit(source), repo.commit(into), _three_dot(repo, into, source), None,
                       reviews=_reviews(request, source))


def _merged_view(repo: Repository, request: Request) -> RequestView:
    """A merged request: what its merge commit changed on the target (first parent to the commit)."""
    from trimerge.diff import diff

    commit = repo.commits.get(request.merge_commit) if request.merge_commit and \
        repo.commits.exists(request.merge_commit) else None
    tip = request.merged_source
    changes = None
    if commit is not None and commit.parents:
        changes = diff(commit.parents[0], commit.id, repo=repo)
    source = repo.commits.get(tip) if tip and repo.commits.exists(tip) else None
    view = RequestView(request, source, commit, changes, None, reviews=_reviews(request, tip))
    view.why = "the request is merged"
    return view


def _remote_view(repo: Repository, request: Request) -> RequestView:
    """A request of a remote, as copied: its diff between the remote-tracking refs, when both exist here."""
    remote = request.remote
    source, into = f"{remote}/{request.source}", f"{remote}/{request.into}"
    tips = [repo.refs.tracking(source), repo.refs.tracking(into)]
    view = RequestView(request, None, None, None, None, reviews=_reviews(request, tips[0]))
    if tips[0] is not None and tips[1] is not None and request.state == "open":
        view.source_commit, view.into_commit = repo.commit(tips[0]), repo.commit(tips[1])
        view.diff = _three_dot(repo, tips[1], tips[0])
    view.why = f"a request of remote {remote!r}: it merges there"
    return view
