"""Output paths checked before any work: a file or a directory that cannot be written is refused
with one line (:class:`InvalidOperationError`) before anything is read, computed or published.

Checked on a local path: the parent folder exists and is a folder; a file is not expected where a
directory stands (or the reverse); the process may create or replace the entry (its mode bits,
then a real attempt: a new entry is created and removed at once, an existing file opened for
writing without truncating it); the file system is not mounted read-only. A remote URI (``s3://…``) is left to the store: asking it costs a
request and proves little. Writing can still fail later (a full disk): that is one clear line too.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from trimerge.lineage.errors import InvalidOperationError

FILE, DIRECTORY, EITHER = "file", "directory", "either"


def is_remote(path: str) -> bool:
    """Whether ``path`` names an object store or another non-local location (``scheme://``)."""
    return "://" in path and not path.lower().startswith("file://")


def local_path(path: str, uri: bool = False) -> Path:
    """``path`` as a local, absolute path, as the writers read it: a ``~`` stays a name (the shell
    expands it before trimerge sees it, if at all), ``file://`` is understood only in a ``uri``
    (a Lance dataset's); file writers would take it for a folder named ``file:``."""
    if uri and path.lower().startswith("file://"):
        path = path[len("file://"):]
    return Path(path).absolute()


def check_output(path: object, kind: str = FILE, what: str = "output") -> None:
    """Refuse ``path`` unless a ``kind`` (:data:`FILE`, :data:`DIRECTORY` — a dataset or a folder
    of files — or :data:`EITHER`) can be written there."""
    if not isinstance(path, str) or not path.strip():
        raise InvalidOperationError(f"{what}: an output path must be non-empty text")
    if "\x00" in path:
        raise InvalidOperationError(f"{what}: the path {path!r} holds a NUL character")
    if is_remote(path):
        return
    if kind == FILE and path.endswith(("/", os.sep)):  # pathlib would drop the slash; open() would not
        raise InvalidOperationError(f"cannot write {what} {path}: a file's path cannot end with '/'")
    p = local_path(path, uri=kind == DIRECTORY)
    try:
        st = os.stat(p)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise InvalidOperationError(f"cannot write {what} {path}: {_reason(exc)}") from None
    if st is not None:
        _check_existing(p, st, kind, what, path)
        return
    parent = p.parent
    try:
        parent_st = os.stat(parent)
    except FileNotFoundError:
        raise InvalidOperationError(f"cannot write {what} {path}: folder {parent} does not exist") from None
    except OSError as exc:
        raise InvalidOperationError(f"cannot write {what} {path}: {_reason(exc)}") from None
    if not stat.S_ISDIR(parent_st.st_mode):
        raise InvalidOperationError(f"cannot write {what} {path}: {parent} is not a folder")
    _check_writable(parent, what, path, f"permission denied (cannot create files in {parent})")
    _probe_create(p, kind, what, path)


def _probe_create(p: Path, kind: str, what: str, path: str) -> None:
    """Create the entry and take it away again: the only answer that holds for root, for /proc
    and the like, and for rules no mode bit shows. Nothing stays behind (a folder's timestamp
    moves)."""
    try:
        if kind == DIRECTORY:
            os.mkdir(p)
            os.rmdir(p)
        else:
            os.close(os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
            os.unlink(p)
    except FileExistsError:  # created meanwhile by someone else: theirs to keep, and writable enough
        return
    except OSError as exc:
        raise InvalidOperationError(f"cannot write {what} {path}: {_reason(exc)}") from None


def _check_existing(p: Path, st: os.stat_result, kind: str, what: str, path: str) -> None:
    is_dir = stat.S_ISDIR(st.st_mode)
    if kind == FILE and is_dir:
        raise InvalidOperationError(f"cannot write {what} {path}: it is a directory, not a file")
    if kind == DIRECTORY and not is_dir:
        raise InvalidOperationError(f"cannot write {what} {path}: it is a file, not a directory")
    if is_dir or stat.S_ISREG(st.st_mode):
        _check_writable(p, what, path, "permission denied")
    elif not os.access(p, os.W_OK):  # a device or a pipe (/dev/null, /dev/stdout): only the permission
        raise InvalidOperationError(f"cannot write {what} {path}: permission denied")
    if stat.S_ISREG(st.st_mode):
        try:  # opened for writing, not truncated: the file stays as it is
            os.close(os.open(p, os.O_WRONLY))
        except OSError as exc:
            raise InvalidOperationError(f"cannot write {what} {path}: {_reason(exc)}") from None


def _check_writable(p: Path, what: str, path: str, denied: str) -> None:
    # statvfs first: access(2) answers EROFS too, but the flag names the reason without guessing.
    try:
        if os.statvfs(p).f_flag & os.ST_RDONLY:
            raise InvalidOperationError(f"cannot write {what} {path}: read-only file system")
    except OSError:
        pass
    mode = os.W_OK | (os.X_OK if p.is_dir() else 0)
    if not os.access(p, mode):
        raise InvalidOperationError(f"cannot write {what} {path}: {denied}")


def _reason(exc: OSError) -> str:
    if exc.errno == errno.ENOTDIR:
        return "a part of the path is a file, not a folder"
    if exc.errno == errno.ENAMETOOLONG:
        return "file name too long"
    if exc.errno in (errno.EACCES, errno.EPERM):
        return "permission denied"
    return exc.strerror or str(exc)
