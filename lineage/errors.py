"""Typed errors of trimerge.

Every error a user can provoke is a subclass of :class:`TrimergeError`, so callers can catch one
type. ``retryable`` tells whether the same call may succeed if simply repeated after a refresh
(a lost race); ``exit_code`` is what the CLI exits with.
"""

from __future__ import annotations


class TrimergeError(Exception):
    """Base of all trimerge errors. The message is always one printable line: user input quoted in
    it (a value with a newline, a control character) is shown escaped."""

    retryable: bool = False
    exit_code: int = 2

    def __str__(self) -> str:
        return one_line(str(self.args[0]) if self.args else "")


def lance_message(exc: BaseException) -> str:
    """The first line of a Lance/Arrow error without Lance's Rust source locations."""
    import re

    first = str(exc).splitlines()[0] if str(exc).strip() else type(exc).__name__
    return re.sub(r",?\s*/\S+\.rs:\d+:\d+", "", first.replace("Invalid user input: ", ""))


def one_line(message: str) -> str:
    """``message`` as one printable line (control characters escaped, surrounding space dropped)."""
    return "".join(c if c.isprintable() or c == " " else repr(c)[1:-1] for c in message.strip())


class InvalidNameError(TrimergeError, ValueError):
    """A branch, tag or table name breaks a naming rule (the message names the rule)."""


class RefSyntaxError(TrimergeError, ValueError):
    """A ref expression or address does not parse."""


class NotFoundError(TrimergeError, KeyError):
    """Something named does not exist."""

    __str__ = TrimergeError.__str__  # not KeyError's, which would quote the message


class RefNotFoundError(NotFoundError):
    """No commit, branch, tag or id prefix matches a ref."""


class NoSuchAncestorError(RefNotFoundError):
    """A ``^N`` or ``~N`` step walks past the parents or the root of a commit."""


class AmbiguousRefError(TrimergeError, ValueError):
    """A commit-id prefix matches several commits; ``candidates`` lists them."""

    def __init__(self, message: str, candidates: list[str] | tuple[str, ...] = ()):
        super().__init__(message)
        self.candidates = list(candidates)


class BranchNotFoundError(RefNotFoundError):
    """No branch of that name."""


class TagNotFoundError(RefNotFoundError):
    """No tag of that name."""


class TableNotFoundError(NotFoundError):
    """No table of that name at the ref."""


class CheckNotFoundError(NotFoundError):
    """No data check of that name (see :mod:`trimerge.lineage.gates.checks`)."""


class AlreadyExistsError(TrimergeError):
    """A branch, tag or table of that name exists already."""


class ReadOnlyRefError(TrimergeError):
    """Writes go to branches only; a tag or commit id was given."""


class SchemaMismatchError(TrimergeError, ValueError):
    """Data does not fit the table's schema."""


class PrimaryKeyError(TrimergeError, ValueError):
    """Missing, null or duplicate primary-key values, or a bad key declaration."""


class InvalidOperationError(TrimergeError, ValueError):
    """The call is well-formed but not allowed in the repository's state."""


class ProtectedBranchError(ReadOnlyRefError):
    """A direct write to a protected branch: change it by merging into it (see
    :mod:`trimerge.lineage.history.protection`)."""


class ApprovalRequiredError(ProtectedBranchError):
    """A merge into a branch whose protection requires approvals is not the merge of a request that
    has them (approvals of its current source tip by people other than its author, no changes
    requested, checks run): refused, exit 1 (see :mod:`trimerge.lineage.history.protection`)."""

    exit_code = 1


class RequestNotFoundError(NotFoundError):
    """No merge request with that id (see :mod:`trimerge.lineage.history.requests`)."""


class RepositoryNotFoundError(NotFoundError):
    """No trimerge repository at that location."""


class ConcurrentWriteError(TrimergeError):
    """Another writer won a race; refresh and retry."""

    retryable = True
    exit_code = 3


class RemoteError(TrimergeError):
    """A remote cannot be used: unknown name, bad name or URI, not a repository, a non-empty clone
    target, or a history with no commit in common (see :mod:`trimerge.remotes`)."""


class NonFastForwardError(RemoteError):
    """A push would drop commits the remote branch has: fetch and merge first (exit 1, like a "no")."""

    exit_code = 1


class DataReclaimedError(TrimergeError):
    """A commit's table data was reclaimed by cleanup (its branch was deleted and nothing kept it)."""


class StorageError(TrimergeError):
    """The storage cannot be reached or refuses the request: unknown bucket, bad credentials, an
    unreachable endpoint, a full disk. The message names the location."""


class EnvironmentFailureError(StorageError, OSError):
    """The machine refused: a full disk, a quota, a read-only file system, permission denied, too
    many open files, an I/O error (see :mod:`trimerge.lineage.safety.boundary`). Still an ``OSError``
    with the system's ``errno``; the message says what ran out, and nothing was published."""

    def __init__(self, message: str, code: int | None = None, filename: str | None = None,
                 strerror: str | None = None):
        StorageError.__init__(self, message)
        self.errno, self.filename, self.strerror = code, filename, strerror

    __str__ = TrimergeError.__str__


class ResourceExhaustedError(EnvironmentFailureError):
    """Lance ran out of a budget it sizes itself — the memory pool its joins and sorts draw from
    (``LANCE_MEM_POOL_SIZE``, bytes; by default 150 MiB per partition) — not of anything in the
    data: the message names the setting to raise (see :func:`resource_exhausted`)."""


def resource_exhausted(exc: BaseException) -> "ResourceExhaustedError | None":
    """``exc`` (Lance's "Resources exhausted" from its memory pool) as a
    :class:`ResourceExhaustedError` that says so, or None when it is something else."""
    import errno
    import os
    import re

    if isinstance(exc, TrimergeError):
        return None
    text = str(exc)
    if "Resources exhausted" not in text:
        return None
    consumer = re.search(r"allocation failed for (\w+)", text)
    amount = re.search(r"allocate additional ([\d.]+ ?\w?B)", text)
    pool = re.search(r"pool_size: ([\d.]+ ?\w?B)", text)
    what = f"{consumer.group(1) if consumer else 'an operation'} needed {amount.group(1) + ' ' if amount else ''}more"
    size = f" of {pool.group(1)}" if pool else ""
    current = os.environ.get("LANCE_MEM_POOL_SIZE")
    setting = f"LANCE_MEM_POOL_SIZE (now {current})" if current else "LANCE_MEM_POOL_SIZE (bytes)"
    return ResourceExhaustedError(f"Lance's memory pool{size} ran out ({what}): raise {setting} and retry; "
                                  "nothing was published", errno.ENOMEM, None, "memory pool exhausted")


class InternalError(TrimergeError):
    """A bug in trimerge or a dependency (a Rust panic inside Lance, Arrow or polars): exit 4."""

    exit_code = 4


class CorruptRepositoryError(TrimergeError):
    """A metadata document cannot be parsed or does not match its id; the message names it."""


class RepositoryMovedError(TrimergeError):
    """The repository was moved or copied and a table's data still points at the old location."""


class DiffVerificationError(TrimergeError):
    """A diff's planned answer (from Lance metadata shortcuts) differs from the brute-force diff:
    a bug in trimerge, found by ``verify=True`` / ``TRIMERGE_VERIFY=1``. ``table``, ``plan`` and
    ``key`` name the table, the plan that was wrong and the first differing key."""

    exit_code = 4

    def __init__(self, message: str, *, table: str = "", plan: str = "", key: object = None):
        super().__init__(message)
        self.table, self.plan, self.key = table, plan, key
