"""Copying one large immutable file between two storage backends without holding it in memory.

Small files (and files that are rewritten on the way, fork manifests) go through the backends'
``get`` and ``create`` (create-if-absent). A file of :data:`STREAM_BYTES` or more is streamed: onto
a local disk into a temporary file in the target folder, flushed and then linked into place (an
atomic create-if-absent, as :class:`~trimerge.lineage.storage.backends.LocalBackend` does); into a
bucket by a (multipart) upload from a local file — from the source file itself, or from a
temporary spool file when the source is a bucket too.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from trimerge.lineage.errors import StorageError
from trimerge.lineage.storage.backends import TEMP_PREFIX, LocalBackend, ObjectStoreBackend

#: Files at least this large are streamed (``TRIMERGE_COPY_STREAM_BYTES`` for tests).
STREAM_BYTES = int(os.environ.get("TRIMERGE_COPY_STREAM_BYTES", str(16 << 20)))
_CHUNK = 8 << 20


def size_of(backend: Any, key: str) -> int | None:
    """The size of ``key`` on a local backend (None elsewhere: a bucket says it when read)."""
    if isinstance(backend, LocalBackend):
        try:
            return (backend.root / key).stat().st_size
        except OSError:
            return None
    return None


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


def stream_copy(src: Any, dst: Any, key: str) -> int | None:
    """Copy ``key`` from ``src`` to ``dst`` by streaming; the bytes written (0: ``dst`` had it), or
    None when this pair of backends is not handled here (the caller copies in memory). A file in a
    bucket smaller than :data:`STREAM_BYTES` is read whole and created if absent."""
    import obstore

    if isinstance(src, LocalBackend):
        source = src.root / key
        size = source.stat().st_size
        if isinstance(dst, LocalBackend):
            fd, tmp = _temp_beside(dst.root / key)
            with os.fdopen(fd, "wb") as out, open(source, "rb") as inp:
                shutil.copyfileobj(inp, out, _CHUNK)
                out.flush()
                os.fsync(out.fileno())
            return size if _link_into_place(tmp, dst.root / key) else 0
        if isinstance(dst, ObjectStoreBackend):
            obstore.put(dst.store, key, source, use_multipart=True, chunk_size=_CHUNK)
            return size
        return None
    if isinstance(src, ObjectStoreBackend):
        result = obstore.get(src.store, key)
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


def link_copy(src: Any, dst: Any, key: str) -> int | None:
    """Between two directories on one file system, give ``dst`` a hard link to ``src``'s file, as
    ``git clone`` does for a local source: the files below ``tables/`` that travel unchanged are
    immutable (Lance writes new files and replaces documents by rename, never in place), so sharing
    an inode shares nothing that can change. The file's size (0: ``dst`` had it), or None when a
    link is impossible here (other file systems, a bucket, no permission): the caller copies."""
    if not (isinstance(src, LocalBackend) and isinstance(dst, LocalBackend)) or os.environ.get("TRIMERGE_NO_HARDLINKS"):
        return None
    source, target = src.root / key, dst.root / key
    try:
        size = source.stat().st_size
        target.parent.mkdir(parents=True, exist_ok=True)
        os.link(source, target)
        return size
    except FileExistsError:
        return 0
    except OSError:  # EXDEV (another file system), EPERM, EMLINK...: copy instead
        return None


def copy_streaming(src: Any, dst: Any, key: str, where: str) -> int | None:
    """:func:`stream_copy`, with a storage failure as one :class:`StorageError` line naming ``where``."""
    import obstore.exceptions as ox

    try:
        return stream_copy(src, dst, key)
    except (ox.BaseError, RuntimeError, ValueError) as exc:
        raise StorageError(f"cannot copy {where}: {' '.join(str(exc).split())[:200]}") from None
