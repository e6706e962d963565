"""trimerge: git-style lineage, diff and three-way merge for multi-table Lance datasets."""

from typing import TYPE_CHECKING

from trimerge.lineage.errors import (  # "X as X": exported for type checkers (mypy --strict)
    AlreadyExistsError as AlreadyExistsError,
    AmbiguousRefError as AmbiguousRefError,
    ConcurrentWriteError as ConcurrentWriteError,
    InvalidNameError as InvalidNameError,
    NotFoundError as NotFoundError,
    PrimaryKeyError as PrimaryKeyError,
    RefNotFoundError as RefNotFoundError,
    RefSyntaxError as RefSyntaxError,
    SchemaMismatchError as SchemaMismatchError,
    TrimergeError as TrimergeError,
)

__version__ = "0.1.0"

if TYPE_CHECKING:  # what the lines below add at runtime, spelled out for type checkers
    from trimerge.lineage.history.address import Address as Address, parse_address as parse_address
    from trimerge.lineage.commit import Commit as Commit
    from trimerge.lineage.repository import Ref as Ref, Repository as Repository
    from trimerge.diff.spark import SparkUnavailableError as SparkUnavailableError
    from trimerge.lineage.errors import (
        NoSuchAncestorError as NoSuchAncestorError,
        BranchNotFoundError as BranchNotFoundError,
        TagNotFoundError as TagNotFoundError,
        TableNotFoundError as TableNotFoundError,
        ReadOnlyRefError as ReadOnlyRefError,
        InvalidOperationError as InvalidOperationError,
        RepositoryNotFoundError as RepositoryNotFoundError,
        DataReclaimedError as DataReclaimedError,
        StorageError as StorageError,
        EnvironmentFailureError as EnvironmentFailureError,
        ResourceExhaustedError as ResourceExhaustedError,
        InternalError as InternalError,
        CorruptRepositoryError as CorruptRepositoryError,
        RepositoryMovedError as RepositoryMovedError,
        DiffVerificationError as DiffVerificationError,
        ProtectedBranchError as ProtectedBranchError,
        ApprovalRequiredError as ApprovalRequiredError,
        RequestNotFoundError as RequestNotFoundError,
        CheckNotFoundError as CheckNotFoundError,
        RemoteError as RemoteError,
        NonFastForwardError as NonFastForwardError,
    )
    from trimerge.lineage.tables.importing import SourceNotFoundError as SourceNotFoundError
    from trimerge.namespace.service import TrimergeNamespace as TrimergeNamespace
    from trimerge.merge.result import MergeBaseError as MergeBaseError, MergeConflictError as MergeConflictError
    from trimerge.merge.result import MergeCheckError as MergeCheckError
    from trimerge.merge.rebase import RebaseConflictError as RebaseConflictError
    from trimerge.merge.rebase import RebaseCheckError as RebaseCheckError
    from trimerge.merge.fastforward import FastForwardError as FastForwardError
    from trimerge.hooks.model import HookNotFoundError as HookNotFoundError
    from trimerge.hooks.feed import ConsumerExpiredError as ConsumerExpiredError

# Every error class of the API is importable from here: those of lineage/errors.py (whatever it
# defines), and, loaded on first use (they import pyarrow or Spark helpers), the ones of other modules.
# The repository too is loaded on first use: a command that opens none (``--help``) never loads it.
from trimerge.lineage import errors as _errors  # noqa: E402

_ERRORS = {name: obj for name, obj in vars(_errors).items()
           if isinstance(obj, type) and issubclass(obj, _errors.TrimergeError)}
globals().update(_ERRORS)
_LAZY = {
    "Address": "trimerge.lineage.history.address",
    "parse_address": "trimerge.lineage.history.address",
    "Commit": "trimerge.lineage.commit",
    "Ref": "trimerge.lineage.repository",
    "Repository": "trimerge.lineage.repository",
    "MergeConflictError": "trimerge.merge.result",
    "MergeBaseError": "trimerge.merge.result",
    "MergeCheckError": "trimerge.merge.result",
    "RebaseConflictError": "trimerge.merge.rebase",
    "RebaseCheckError": "trimerge.merge.rebase",
    "FastForwardError": "trimerge.merge.fastforward",
    "SourceNotFoundError": "trimerge.lineage.tables.importing",
    "HookNotFoundError": "trimerge.hooks.model",
    "ConsumerExpiredError": "trimerge.hooks.feed",
    "SparkUnavailableError": "trimerge.diff.spark",
    "TrimergeNamespace": "trimerge.namespace.service",
}

# ``lance_namespace.connect("trimerge", {...})`` / ``lancedb.connect_namespace("trimerge", {...})``: registered
# when lance_namespace loads (importing it here would cost every command ~1.5 s).
from trimerge.namespace.hook import install as _install_namespace  # noqa: E402

_install_namespace()


def _sql_diff(repo, *args):
    """``diff(...)`` in ``repo.sql``: registered here, above both packages, loaded on first use."""
    from trimerge.diff.sqlfunctions import diff_rows

    return diff_rows(repo, *args)


from trimerge.lineage.tables.sql import register_table_function as _register_table_function  # noqa: E402

_register_table_function("diff", _sql_diff)

# Repository.clone, repo.remotes, repo.fetch/pull/push: trimerge.remotes lives above merge (it registers
# them in lineage/extensions.py, without loading the repository).
from trimerge.remotes import install as _install_remotes  # noqa: E402

_install_remotes()

# repo.requests (merge requests, reviews, the merge queue): trimerge.review lives above merge too.
from trimerge.review import install as _install_review  # noqa: E402

_install_review()

# repo.hooks, repo.changes, delivery after writes, gc's holds, pre-merge gates: trimerge.hooks (above diff).
from trimerge.hooks import install as _install_hooks  # noqa: E402

_install_hooks()


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'trimerge' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = sorted({"TrimergeNamespace", *_ERRORS, *_LAZY})
