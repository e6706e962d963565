"""trimerge.remotes: clone, fetch, pull and push between repositories, and ``repo.remotes``.

Above merge (a pull may merge); :func:`install` (run by ``import trimerge``) wires
:meth:`Repository.clone <trimerge.lineage.repository.Repository.clone>`, ``repo.remotes``,
``repo.fetch``, ``repo.pull`` and ``repo.push`` to the functions here, loaded on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trimerge.remotes.config import Remote, Remotes
    from trimerge.remotes.ops import RefUpdate, RemoteResult

__all__ = ["Remote", "Remotes", "RefUpdate", "RemoteResult", "clone", "fetch", "install", "pull", "push"]


def clone(src: Any, dst: Any, **options: Any) -> "RemoteResult":
    from trimerge.remotes.ops import clone as run

    return run(src, dst, **options)


def fetch(repo: Any, remote: str | None = None, **options: Any) -> "RemoteResult":
    from trimerge.remotes.ops import fetch as run

    return run(repo, remote, **options)


def pull(repo: Any, remote: str | None = None, branch: str | None = None, **options: Any) -> "RemoteResult":
    from trimerge.remotes.ops import pull as run

    return run(repo, remote, branch, **options)


def push(repo: Any, remote: str | None = None, branch: str | None = None, **options: Any) -> "RemoteResult":
    from trimerge.remotes.ops import push as run

    return run(repo, remote, branch, **options)


def remotes(repo: Any) -> "Remotes":
    from trimerge.remotes.config import Remotes

    return Remotes(repo)


def install() -> None:
    """Make the repository's clone/fetch/pull/push/remotes call the functions above."""
    from trimerge.lineage.extensions import register_remote_operations

    register_remote_operations(clone=clone, fetch=fetch, pull=pull, push=push, remotes=remotes)


def __getattr__(name: str) -> Any:
    if name in ("Remote", "Remotes"):
        from trimerge.remotes import config

        return getattr(config, name)
    if name in ("RefUpdate", "RemoteResult"):
        from trimerge.remotes import ops

        return getattr(ops, name)
    raise AttributeError(name)
