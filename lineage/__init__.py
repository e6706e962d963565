"""trimerge.lineage: the repository, its commit graph, refs, branches and tags."""

from trimerge.lineage.address import Address, parse_address
from trimerge.lineage.commit import Commit, TableVersion
from trimerge.lineage.errors import *  # noqa: F401,F403 - the error types are part of the API
from trimerge.lineage.repository import Branch, CleanupReport, FsckReport, GcReport, Ref, Repository, Tag

__all__ = ["Address", "Branch", "CleanupReport", "Commit", "FsckReport", "GcReport", "Ref", "Repository",
           "TableVersion", "Tag", "Transaction", "parse_address"]


def __getattr__(name: str):
    if name == "Transaction":  # imported on first use (it imports pyarrow)
        from trimerge.lineage.transaction import Transaction

        return Transaction
    raise AttributeError(name)
