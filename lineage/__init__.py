"""trimerge.lineage: the repository, its commit graph, refs, branches and tags."""

from trimerge.lineage.storage import memory

memory.limit_malloc_arenas()  # before Lance starts its threads: see memory.py

from trimerge.lineage.history.address import Address, parse_address
from trimerge.lineage.commit import Commit, TableVersion
from trimerge.lineage.errors import *  # noqa: F401,F403 - the error types are part of the API
from trimerge.lineage.repository import Branch, CleanupReport, FsckReport, GcReport, Ref, Repository, Tag

# The API's edge: a full disk or a dependency's panic leaves it as a TrimergeError (boundary.py).
from trimerge.lineage.safety.boundary import guard_class as _guard_class, guard_returned_class as _guard_returned_class  # noqa: E402,E501
from trimerge.lineage.history.branches import BranchManager as _BranchManager, TagManager as _TagManager  # noqa: E402

Repository.transaction = _guard_returned_class(Repository.transaction)  # Transaction is imported lazily
for _cls in (Repository, _BranchManager, _TagManager, Ref):
    _guard_class(_cls)

__all__ = ["Address", "Branch", "CleanupReport", "Commit", "FsckReport", "GcReport", "Ref", "Repository",
           "TableVersion", "Tag", "Transaction", "parse_address"]


def __getattr__(name: str):
    if name == "Transaction":  # imported on first use (it imports pyarrow)
        from trimerge.lineage.transaction import Transaction

        return Transaction
    raise AttributeError(name)
