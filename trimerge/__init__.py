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

# ``lance_namespace.connect("trimerge", {...})`` / ``lancedb.connect_namespace("trimerge", {...})``: registered
# when lance_namespace loads (importing it here would cost every command ~1.5 s).
from trimerge.lineage.namespace_hook import install as _install_namespace  # noqa: E402

_install_namespace()


def __getattr__(name: str):
    if name == "TrimergeNamespace":
        from trimerge.lineage.namespace import TrimergeNamespace

        return TrimergeNamespace
    raise AttributeError(f"module 'trimerge' has no attribute {name!r}")

__all__ = ["Address", "AlreadyExistsError", "AmbiguousRefError", "Commit", "ConcurrentWriteError",
           "InvalidNameError", "NotFoundError", "PrimaryKeyError", "Ref", "RefNotFoundError", "RefSyntaxError",
           "Repository", "SchemaMismatchError", "TrimergeError", "TrimergeNamespace", "parse_address"]
