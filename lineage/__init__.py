"""trimerge.lineage: the repository, its commit graph, refs, branches and tags.

The error types are imported here at once; the repository and the rest on first use, so that a
command that never opens a repository (``trimerge --help``) does not load it.
"""

from typing import TYPE_CHECKING, Any

from trimerge.lineage.storage import memory

memory.limit_malloc_arenas()  # before Lance starts its threads: see memory.py

from trimerge.lineage.errors import *  # noqa: F401,F403,E402 - the error types are part of the API

if TYPE_CHECKING:
    from trimerge.lineage.history.address import Address as Address, parse_address as parse_address
    from trimerge.lineage.commit import Commit as Commit, TableVersion as TableVersion
    from trimerge.lineage.repository import (Branch as Branch, CleanupReport as CleanupReport,
                                             FsckReport as FsckReport, GcReport as GcReport, Ref as Ref,
                                             Repository as Repository, Tag as Tag)
    from trimerge.lineage.transaction import Transaction as Transaction

#: name -> the module it is imported from on first use.
_LAZY = {
    "Address": "trimerge.lineage.history.address", "parse_address": "trimerge.lineage.history.address",
    "Commit": "trimerge.lineage.commit", "TableVersion": "trimerge.lineage.commit",
    "Branch": "trimerge.lineage.repository", "CleanupReport": "trimerge.lineage.repository",
    "FsckReport": "trimerge.lineage.repository", "GcReport": "trimerge.lineage.repository",
    "Ref": "trimerge.lineage.repository", "Repository": "trimerge.lineage.repository",
    "Tag": "trimerge.lineage.repository",
    "Transaction": "trimerge.lineage.transaction",  # imports pyarrow
}

__all__ = ["Address", "Branch", "CleanupReport", "Commit", "FsckReport", "GcReport", "Ref", "Repository",
           "TableVersion", "Tag", "Transaction", "parse_address"]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'trimerge.lineage' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
