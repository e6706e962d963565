"""Copying one file of a source repository into a destination, never leaving either.

The source is untrusted, as git treats a clone's source since its clone CVEs: a local source file
is opened by :func:`open_source` through ``openat`` calls with ``O_NOFOLLOW`` from the source
repository's real root, one folder at a time, so a symbolic link that leads out of the repository
(``tables/<dataset>/data`` pointing at another folder, a data file pointing at another file) is
refused with a :class:`CorruptRepositoryError` naming it; a link that stays inside is followed by
walking its resolved path again the same way. The file is opened once and every way of copying it
uses that one open file, so nothing can swap it for a link between a check and the copy:

* **hard link** (:meth:`SourceFile.link_to`: two local directories, as ``git clone`` links a local
  source): ``linkat`` of the opened name in its opened folder without following links, then the
  new link's inode is compared with the opened file's (a mismatch is undone and copied instead);
* **stream** (:meth:`SourceFile.stream_to`: a file of :data:`STREAM_BYTES` or more): read from the
  opened file into a temporary file beside the target, flushed and linked into place (an atomic
  create-if-absent, as :class:`~trimerge.lineage.storage.backends.LocalBackend` does), or into a
  bucket by a (multipart) upload; from a bucket through a spool file when both sides are buckets;
* **in memory** (:meth:`SourceFile.read`: small files and those rewritten on the way, fork manifests).

Only regular files are copied: a FIFO, a device or a folder where a file should be is refused too
(opened non-blocking, so a FIFO cannot hang the copy). Object stores have no links.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from trimerge.lineage.errors import CorruptRepositoryError, StorageError
from trimerge.lineage.storage.backends import TEMP_PREFIX, LocalBackend, ObjectStoreBackend

#: Files at least this large are streamed (``TRIMERGE_COPY_STREAM_BYTES`` for tests).
STREAM_BYTES = int(os.environ.get("TRIMERGE_COPY_STREAM_BYTES", str(16 << 20)))
_CHUNK = 8 << 20
#: Symbolic links followed inside the source for one file, at most (Linux's own limit).
MAX_LINKS = 40
_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_FILE_FLAGS = os.O_RDONLY | _NOFOLLOW | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0)
_HARDLINKS_CHECKED = os.link in os.supports_dir_fd and os.link in os.supports_follow_symlinks


@dataclass
class _Link(Exception):
    """The walk met a symbolic link: parts[:index + 1] is the link, ``target`` what it says."""

    index: int
    target: str


@dataclass
class _Opened:
    fd: int
    folder: int  # the fd of the folder it was opened in
    name: str
    st: os.stat_result


def _open_at(name: str, flags: int, folder: int) -> int:
    """``openat`` that reports a symbolic link as :class:`_Link` (index filled in by the caller)."""
    try:
        return os.open(name, flags, dir_fd=folder)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
            try:
                if stat.S_ISLNK(os.lstat(name, dir_fd=folder).st_mode):
                    raise _Link(-1, os.readlink(name, dir_fd=folder)) from None
            except OSError:
                pass
        raise


def _walk(root: str, parts: list[str]) -> _Opened:
    """Open ``root/parts`` one component at a time, following no link."""
    folder = os.open(root, _DIR_FLAGS)
    try:
        for i, part in enumerate(parts[:-1]):
            try:
                inner = _open_at(part, _DIR_FLAGS | _NOFOLLOW, folder)
            except _Link as link:
                raise _Link(i, link.target) from None
            os.close(folder)
            folder = inner
        try:
            fd = _open_at(parts[-1], _FILE_FLAGS, folder)
        except _Link as link:
            raise _Link(len(parts) - 1, link.target) from None
        return _Opened(fd, folder, parts[-1], os.fstat(fd))
    except BaseException:
        os.close(folder)
        raise


def _open_inside(root: str, rel: str, where: str) -> _Opened | None:
    """``root/rel`` opened without leaving ``root`` (a real path); None when it does not exist."""
    parts = [p for p in rel.split("/") if p not in ("", ".")]
    for _ in range(MAX_LINKS + 1):
        try:
            return _walk(root, parts)
        except _Link as link:
            at = os.path.join(root, *parts[:link.index])
            real = os.path.realpath(os.path.join(at, link.target))
            if real != root and not real.startswith(root.rstrip(os.sep) + os.sep):
                shown = os.path.join(at, parts[link.index])
                via = "" if link.index == len(parts) - 1 else f" leads through {shown}, which"
                raise CorruptRepositoryError(
                    f"{where}{via} is a symbolic link to {real}, outside the source repository: refused "
                    "(a forged or damaged repository; trimerge never follows a link out of it)") from None
            rest = os.path.relpath(real, root)
            parts = [p for p in (rest.split(os.sep) if rest != "." else []) if p] + parts[link.index + 1:]
            if not parts:
                raise CorruptRepositoryError(f"{where} is the repository's own folder, not a file: refused") from None
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            if exc.errno in (errno.ENAMETOOLONG, errno.EINVAL):
                return None
            raise
    raise CorruptRepositoryError(f"{where}: more than {MAX_LINKS} symbolic links on the way to it: refused")


class SourceFile:
    """One file of a source repository, opened so that copying it never reads outside it.

    Made by :func:`open_source`; a context manager (closes the file)."""

    def __init__(self, backend: Any, key: str, where: str, opened: _Opened | None = None):
        self.backend, self.key, self.where = backend, key, where
        self._opened = opened

    @property
    def size(self) -> int | None:
        """The size of a local file (None in a bucket: said when it is read)."""
        return self._opened.st.st_size if self._opened is not None else None

    def _file(self) -> BinaryIO:
        assert self._opened is not None  # (local sources only)
        os.lseek(self._opened.fd, 0, os.SEEK_SET)
        return open(os.dup(self._opened.fd), "rb")

    def read(self) -> bytes:
        """The whole file."""
        if self._opened is not None:
            with self._file() as fh:
                return fh.read()
        stored = self.backend.get(self.key)
        if stored is None:
            raise CorruptRepositoryError(f"{self.where} is missing")
        return bytes(stored.data)

    def link_to(self, dst: Any, key: str) -> int | None:
        """Between two directories on one file system, give ``dst`` a hard link to this file, as
        ``git clone`` does for a local source: the files below ``tables/`` that travel unchanged
        are immutable (Lance writes new files and replaces documents by rename, never in place), so
        sharing an inode shares nothing that can change. The file's size (0: ``dst`` had it), or
        None when a link is impossible here (other file systems, a bucket, no permission): copy."""
        opened = self._opened
        if opened is None or not isinstance(dst, LocalBackend) or os.environ.get("TRIMERGE_NO_HARDLINKS") \
                or not _HARDLINKS_CHECKED:
            return None
        target = dst.root / key
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            os.link(opened.name, target, src_dir_fd=opened.folder, follow_symlinks=False)
        except FileExistsError:
            return 0
        except OSError:  # EXDEV (another file system), EPERM, EMLINK...: copy instead
            return None
        made = os.lstat(target)
        if (made.st_dev, made.st_ino) != (opened.st.st_dev, opened.st.st_ino):
            os.unlink(target)  # the name was swapped after it was opened: copy the opened file instead
            return None
        return opened.st.st_size

    def stream_to(self, dst: Any, key: str) -> int | None:
        """Copy by streaming; the bytes written (0: ``dst`` had it), or None when this pair of
        backends is not handled here (the caller copies in memory). A file in a bucket smaller than
        :data:`STREAM_BYTES` is read whole and created if absent. Storage failures are one
        :class:`StorageError` line naming the file."""
        import obstore.exceptions as ox

        try:
            return self._stream_to(dst, key)
        except (ox.BaseError, RuntimeError, ValueError) as exc:
            raise StorageError(f"cannot copy {self.where}: {' '.join(str(exc).split())[:200]}") from None

    def _stream_to(self, dst: Any, key: str) -> int | None:
        import obstore

        if self._opened is not None:
            size = self._opened.st.st_size
            if isinstance(dst, LocalBackend):
                fd, tmp = _temp_beside(dst.root / key)
                with os.fdopen(fd, "wb") as out, self._file() as inp:
                    shutil.copyfileobj(inp, out, _CHUNK)
                    out.flush()
                    os.fsync(out.fileno())
                return size if _link_into_place(tmp, dst.root / key) else 0
            if isinstance(dst, ObjectStoreBackend):
                with self._file() as inp:
                    obstore.put(dst.store, key, inp, use_multipart=True, chunk_size=_CHUNK)
                return size
            return None
        if not isinstance(self.backend, ObjectStoreBackend):
            return None
        result = obstore.get(self.backend.store, self.key)
        size = int(result.meta["size"])
        if size < STREAM_BYTES:
            data = bytes(result.bytes())
            return len(data) if dst.create(key, data) is not None else 0
        if isinstance(dst, LocalBackend):
            fd, tmp = _temp_beside(dst.root / key)
            with os.fdopen(fd, "wb") as out:
                for chunk in result.stream(min_chunk_size=_CHUNK):
                    out.write(bytes(chunk))
                out.flush()
                os.fsync(out.fileno())
            return size if _link_into_place(tmp, dst.root / key) else 0
        if isinstance(dst, ObjectStoreBackend):
            with tempfile.NamedTemporaryFile(prefix="trimerge-copy-") as spool:
                for chunk in result.stream(min_chunk_size=_CHUNK):
                    spool.write(bytes(chunk))
                spool.flush()
                obstore.put(dst.store, key, Path(spool.name), use_multipart=True, chunk_size=_CHUNK)
            return size
        return None

    def close(self) -> None:
        if self._opened is not None:
            os.close(self._opened.fd)
            os.close(self._opened.folder)
            self._opened = None

    def __enter__(self) -> "SourceFile":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def open_source(backend: Any, key: str, where: str) -> SourceFile | None:
    """File ``key`` of ``backend``, a folder (``tables/``, ``_trimerge/``) of the source repository;
    None when a local file does not exist (a bucket's absence shows when it is read). Refuses
    (:class:`CorruptRepositoryError`) a link out of the repository, and anything but a regular file."""
    if not isinstance(backend, LocalBackend):
        return SourceFile(backend, key, where)
    root = os.path.realpath(backend.root.parent)
    opened = _open_inside(root, f"{backend.root.name}/{key}", where)
    if opened is None:
        return None
    if not stat.S_ISREG(opened.st.st_mode):
        os.close(opened.fd)
        os.close(opened.folder)
        raise CorruptRepositoryError(f"{where} is not a regular file: refused (a forged or damaged repository)")
    return SourceFile(backend, key, where, opened)


def read_source(backend: Any, key: str, where: str) -> bytes | None:
    """The bytes of file ``key`` of the source (see :func:`open_source`), None when it is absent."""
    if not isinstance(backend, LocalBackend):
        stored = backend.get(key)
        return None if stored is None else bytes(stored.data)
    source = open_source(backend, key, where)
    if source is None:
        return None
    with source:
        return source.read()


def _link_into_place(tmp: str, target: Path) -> bool:
    try:
        os.link(tmp, target)
        return True
    except FileExistsError:
        return False
    finally:
        os.unlink(tmp)


def _temp_beside(target: Path) -> tuple[int, str]:
    target.parent.mkdir(parents=True, exist_ok=True)
    return tempfile.mkstemp(dir=target.parent, prefix=TEMP_PREFIX, suffix=".part")
