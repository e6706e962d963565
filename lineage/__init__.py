"""trimerge.lineage: the repository, its commit graph, refs, branches and tags."""

from trimerge.lineage.address import Address, parse_address
from trimerge.lineage.commit import Commit, TableVersion
from trimerge.lineage.errors import *  # noqa: F401,F403 - the error types are part of the API
from trimerge.lineage.repository import Branch, CleanupReport, FsckReport, GcReport, Ref, Repository, Tag, Transaction

__all__ = ["Address", "Branch", "CleanupReport", "Commit", "FsckReport", "GcReport", "Ref", "Repository",
           "TableVersion", "Tag", "Transaction", "parse_address"]
