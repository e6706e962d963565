"""What the packages above lineage plug into it (registered by ``import trimerge``).

clone, fetch, pull, push and ``repo.remotes`` live above merge (:mod:`trimerge.remotes`), which
registers them here; :class:`~trimerge.lineage.repository.Repository` calls them. So does
``repo.requests`` (merge requests, reviews and the merge queue: :mod:`trimerge.review`). A module of its
own, importing nothing, so that ``import trimerge`` registers them without loading the repository.
"""

from __future__ import annotations

from typing import Any, Callable

#: {"clone": f(src, dst, **kw), "remotes": f(repo), "fetch": ..., "pull": ..., "push": ...}.
REMOTE_OPERATIONS: dict[str, Callable[..., Any]] = {}


def register_remote_operations(**operations: Callable[..., Any]) -> None:
    REMOTE_OPERATIONS.update(operations)


#: {"requests": f(repo)}: managers of the layers above that ``repo.<name>`` hands out.
REPOSITORY_EXTENSIONS: dict[str, Callable[[Any], Any]] = {}


def register_repository_extension(name: str, factory: Callable[[Any], Any]) -> None:
    REPOSITORY_EXTENSIONS[name] = factory


# -- hooks and the change feed (:mod:`trimerge.hooks`)
#: ``f(repo, kind, name)``, told after a user branch was created, moved or deleted (kind
#: ``"branch"``) or a tag created (``"tag"``) — once the change is published. Hooks start their
#: delivery then; a listener must return at once and never raise (the write is done).
REF_LISTENERS: dict[str, Callable[[Any, str, str], None]] = {}

#: ``f(repo) -> (since, commits)``: what gc must keep for the layers above — every reflog entry
#: written at or after ``since`` (a datetime, or None) and the commits ``commits`` names.
GC_HOLDS: dict[str, Callable[[Any], tuple[Any, list[str]]]] = {}

#: ``f(repo, dest, tables, base, result, dry_run) -> list[CheckResult]``: gates of the layers above
#: run on a merge's would-be result (``tables``: name -> TableVersion) beside its data checks; a
#: result that did not pass refuses the merge like a failing check.
MERGE_GATES: dict[str, Callable[..., list[Any]]] = {}


def ref_changed(repo: Any, kind: str, name: str) -> None:
    """Tell every :data:`REF_LISTENERS` listener; a listener's failure never reaches the writer,
    whose change is published already (it is the listener's to record)."""
    for listener in list(REF_LISTENERS.values()):
        try:
            listener(repo, kind, name)
        except Exception:  # noqa: BLE001 - a published write must not fail after the fact
            pass


class HooksFacade:
    """``repo.hooks`` and ``repo.changes`` of :class:`~trimerge.lineage.repository.Repository`,
    handed out by :mod:`trimerge.hooks` (registered in :data:`REPOSITORY_EXTENSIONS`)."""

    @property
    def hooks(self) -> Any:
        """Hooks on this repository's events (commits, merges, branches, tags, merge requests):
        ``add``, ``list``, ``get``, ``remove``, ``deliver``, ``log``, ``test``, ``status``
        (:mod:`trimerge.hooks`)."""
        return REPOSITORY_EXTENSIONS["hooks"](self)

    def changes(self, consumer: str, branch: str = "main", **options: Any) -> Any:
        """The changes on ``branch`` since consumer ``consumer``'s checkpoint: per table the rows
        inserted, deleted and updated (as ``TableDiff.rows()``), ``from_commit``, ``to_commit``;
        ``ack()`` moves the checkpoint. Options: ``full=True`` (from nothing), ``retention``
        (how long gc keeps the checkpoint's commit). See :mod:`trimerge.hooks.feed`."""
        return REPOSITORY_EXTENSIONS["changes"](self)(consumer, branch, **options)
