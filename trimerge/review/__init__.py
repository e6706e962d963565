"""trimerge.review: merge requests, reviews and the merge queue (``repo.requests``).

A request's record — source, target, author, times, title and body, state, reviews, queue entry,
events — is repository metadata kept by :mod:`trimerge.lineage.history.requests`, and the rule a
branch requiring approvals sets is enforced there too (:mod:`trimerge.lineage.history.protection`).
This package is the workflow above merge: what a reviewer is shown (the three-dot diff, a dry-run
merge, the checks on the would-be result: :mod:`~trimerge.review.view`), merging a request
(:mod:`~trimerge.review.api`), the queue runner (:mod:`~trimerge.review.queue`) and the reports
(:mod:`~trimerge.review.reports`). :func:`install` (run by ``import trimerge``) makes
``repo.requests`` answer with :class:`~trimerge.review.api.Requests`.

May import: lineage, diff, merge. Never remotes, serve or the CLI.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trimerge.review.api import Requests
    from trimerge.review.queue import QueueReport
    from trimerge.review.view import RequestView

__all__ = ["QueueReport", "RequestView", "Requests", "install", "requests"]


def requests(repo: Any) -> "Requests":
    """``repo.requests``: the merge requests of ``repo``."""
    from trimerge.review.api import Requests

    return Requests(repo)


def install() -> None:
    """Make ``repo.requests`` answer (lineage reaches this layer only through its registry)."""
    from trimerge.lineage.extensions import register_repository_extension

    register_repository_extension("requests", requests)


def __getattr__(name: str) -> Any:
    if name == "Requests":
        from trimerge.review.api import Requests

        return Requests
    if name == "QueueReport":
        from trimerge.review.queue import QueueReport

        return QueueReport
    if name == "RequestView":
        from trimerge.review.view import RequestView

        return RequestView
    raise AttributeError(name)
