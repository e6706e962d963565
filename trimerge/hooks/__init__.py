"""trimerge.hooks: hooks and webhooks on a repository's events, and the change feed.

**Hooks** (``repo.hooks``, ``trimerge hook ...``): a hook runs on events — ``post-commit``,
``post-merge``, ``post-branch-create``, ``post-branch-delete``, ``post-tag`` and merge requests'
``request-created`` … ``request-merged`` — of the branches a glob matches, by POSTing the event as
JSON to a URL (signed: ``X-Trimerge-Signature-256: sha256=<HMAC-SHA256 of the body>``, with
``X-Trimerge-Event`` and the event's stable id in ``X-Trimerge-Delivery``) or by running a
command with the event on stdin and in ``TRIMERGE_*`` variables.

The outbox is the repository's own record (:mod:`~trimerge.hooks.sources`): a commit's event is
the reflog entry its publish writes anyway, chained from the branch document it swaps, so it is
recorded atomically with the commit at no cost to it. Delivery comes after: from the writing
process, for a bounded time (:mod:`~trimerge.hooks.background`), and from a runner
(``trimerge hooks run [--watch]``, ``trimerge serve``), at least once, with retries and backoff,
every attempt logged (:mod:`~trimerge.hooks.delivery`). A hook's failure never fails a write.
``gate=True`` hooks run before a merge into their branch and may refuse it
(:mod:`~trimerge.hooks.gates`).

**The change feed** (``repo.changes(consumer, branch)``, ``trimerge changes``): the rows that
changed since a consumer's checkpoint, and ``ack()`` to move it (:mod:`~trimerge.hooks.feed`).

Above diff (it counts changes and reads the feed's rows) and below the programs; :func:`install`
(run by ``import trimerge``) wires ``repo.hooks``, ``repo.changes``, the write listener, gc's
holds and the merge gates into lineage's registries, loading nothing until first used.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trimerge.hooks.api import Hooks
    from trimerge.hooks.feed import ChangeBatch

__all__ = ["ChangeBatch", "ConsumerExpiredError", "Hook", "HookNotFoundError", "Hooks", "install"]


def hooks(repo: Any) -> "Hooks":
    from trimerge.hooks.api import Hooks

    return Hooks(repo)


def changes_of(repo: Any) -> Any:
    from functools import partial

    from trimerge.hooks.feed import changes

    return partial(changes, repo)


def ref_changed(repo: Any, kind: str, name: str) -> None:
    from trimerge.hooks.background import ref_changed as start

    start(repo, kind, name)


def gc_hold(repo: Any) -> tuple[datetime | None, list[str]]:
    """What gc keeps for hooks (reflog entries not yet delivered) and feeds (checkpoint commits)."""
    from trimerge.hooks.cursor import Cursor
    from trimerge.hooks.feed import held_commits
    from trimerge.hooks.model import CURSORS, names_in

    since = None
    for name in names_in(repo.docs.list(CURSORS)):
        cursor = Cursor.load(repo.docs, name)
        if cursor is not None:
            hold = cursor.hold()
            since = hold if since is None or hold < since else since
    return since, held_commits(repo, datetime.now(timezone.utc))


def merge_gates(repo: Any, dest: str) -> Any:
    from trimerge.hooks.gates import applies

    return applies(repo, dest)


def install() -> None:
    """Register ``repo.hooks``, ``repo.changes``, delivery after writes, gc's holds and the
    pre-merge gates in :mod:`trimerge.lineage.extensions`."""
    from trimerge.lineage import extensions

    extensions.register_repository_extension("hooks", hooks)
    extensions.register_repository_extension("changes", changes_of)
    extensions.REF_LISTENERS["hooks"] = ref_changed
    extensions.GC_HOLDS["hooks"] = gc_hold
    extensions.MERGE_GATES["hooks"] = merge_gates


def __getattr__(name: str) -> Any:
    if name in ("Hook", "HookNotFoundError"):
        from trimerge.hooks import model

        return getattr(model, name)
    if name in ("ChangeBatch", "ConsumerExpiredError"):
        from trimerge.hooks import feed

        return getattr(feed, name)
    if name == "Hooks":
        from trimerge.hooks.api import Hooks

        return Hooks
    raise AttributeError(name)
