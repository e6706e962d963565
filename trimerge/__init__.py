"""trimerge: git-style lineage, diff and three-way merge for multi-table Lance datasets."""

from trimerge.lineage import Address, Commit, Ref, Repository, parse_address
from trimerge.lineage.errors import (
    AlreadyExistsError,
    AmbiguousRefError,
    ConcurrentWriteError,
    InvalidNameError,
    NotFoundError,
    PrimaryKeyError,
    RefNotFoundError,
    RefSyntaxError,
    SchemaMismatchError,
    TrimergeError,
)

__version__ = "0.1.0"

__all__ = ["Address", "AlreadyExistsError", "AmbiguousRefError", "Commit", "ConcurrentWriteError",
           "InvalidNameError", "NotFoundError", "PrimaryKeyError", "Ref", "RefNotFoundError", "RefSyntaxError",
           "Repository", "SchemaMismatchError", "TrimergeError", "parse_address"]
