"""What the packages above lineage plug into it (registered by ``import trimerge``).

clone, fetch, pull, push and ``repo.remotes`` live above merge (:mod:`trimerge.remotes`), which
registers them here; :class:`~trimerge.lineage.repository.Repository` calls them. A module of its
own, importing nothing, so that ``import trimerge`` registers them without loading the repository.
"""

from __future__ import annotations

from typing import Any, Callable

#: {"clone": f(src, dst, **kw), "remotes": f(repo), "fetch": ..., "pull": ..., "push": ...}.
REMOTE_OPERATIONS: dict[str, Callable[..., Any]] = {}


def register_remote_operations(**operations: Callable[..., Any]) -> None:
    REMOTE_OPERATIONS.update(operations)
