"""Where trimerge keeps its own small files: one tiny interface, three backends.

Everything the repository needs from storage beyond Lance is five operations on small objects:

- ``get(key)``: the bytes and an opaque *version* (None when absent);
- ``create(key, data)``: write only if absent; returns the new version, or None if the key exists;
- ``swap(key, data, expected)``: compare-and-swap; replaces only if the current version is
  ``expected``; returns the new version, or None when another writer got there first;
- ``list(prefix)``: the keys directly inside folder ``prefix``;
- ``delete(key)``: remove (used only for objects that one owner alone writes).

and four for whole folders: ``children(prefix)``, ``keys_below(prefix)``, ``delete_tree(prefix)``
and ``tree_size(prefix)``. ``remote`` tells whether requests cross a network (then reading many
objects at once pays).

Backends:

- :class:`LocalBackend` — a directory. Create is ``link`` of a complete temporary file (atomic,
  never half-written); swap is compare-then-``rename`` under an ``flock`` of the folder, so the
  atomic-rename semantics of a local disk are kept.
- :class:`ObjectStoreBackend` — S3, Azure Blob, GCS through obstore: create is a conditional PUT
  (``If-None-Match: *``), swap a conditional PUT on the ETag. A lost race is a 412 on most stores and
  a 409 on some; both mean "None" here. There is no rename.
- :class:`MemoryBackend` — a dict, for unit tests. Its version is a hash of the content, like an S3
  ETag, so it shows the A→B→A hazard that the nonce of :mod:`trimerge.lineage.storage.documents` prevents.
"""

from __future__ import annotations

import builtins
import fcntl
import errno
import hashlib
import os
import shutil
import tempfile
import threading
import time
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Protocol

from trimerge.lineage.errors import CorruptRepositoryError, StorageError

TEMP_PREFIX = ".tmp-"


@dataclass(frozen=True)
class Stored:
    """An object's bytes and the version that a later :meth:`Backend.swap` must name."""

    data: bytes
    version: Any


class Backend(Protocol):
    """The storage interface the rest of trimerge uses (keys are '/'-separated, relative)."""

    remote: bool  # whether requests cross a network (reading many documents at once then pays)

    def get(self, key: str) -> Stored | None: ...

    def create(self, key: str, data: bytes) -> Any | None: ...

    def swap(self, key: str, data: bytes, expected: Any) -> Any | None: ...

    def list(self, prefix: str) -> list[str]: ...

    def delete(self, key: str) -> None: ...

    def children(self, prefix: str) -> builtins.list[str]: ...

    def folders(self, prefix: str) -> builtins.list[str]: ...

    def keys_below(self, prefix: str) -> Iterator[str]: ...

    def delete_tree(self, prefix: str) -> None: ...

    def tree_size(self, prefix: str) -> int: ...


def content_version(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# ------------------------------------------------------------------------------------------ local disk
class LocalBackend:
    """Objects as files below ``root``."""

    remote = False

    def __init__(self, root: Path):
        self.root = root
        self._real_repository: str | None = None  # resolved once, when a link is met

    def _path(self, key: str) -> Path:
        return self.root / key

    def check_inside(self, key: str) -> None:
        """Refuse (:class:`CorruptRepositoryError`) a key reached through a symbolic link that
        leaves the repository (this folder's parent): trimerge never creates links, and following
        one would read — and a swap would then replace — something that is not the repository's."""
        path = str(self.root)  # plain strings: this runs on every read, pathlib's parsing showed in profiles
        for part in key.split("/"):
            path = os.path.join(path, part)
            try:
                link = os.path.islink(path)
            except (ValueError, OSError):
                return  # a name no file can have: it is absent
            if link:
                if self._real_repository is None:
                    self._real_repository = os.path.realpath(self.root.parent)
                real = os.path.realpath(path)
                if real != self._real_repository and not real.startswith(self._real_repository + os.sep):
                    raise CorruptRepositoryError(
                        f"{path} is a symbolic link to {real}, outside the repository: trimerge does not follow "
                        "it; replace the link with the file or folder it should be, or remove it")

    def get(self, key: str) -> Stored | None:
        self.check_inside(key)
        try:
            data = self._path(key).read_bytes()
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return None
        except (ValueError, UnicodeEncodeError):  # NUL or a lone surrogate: no file can have that name
            return None
        except OSError as exc:
            if exc.errno == errno.ENAMETOOLONG:  # longer than a file name can be: it cannot exist
                return None
            raise
        return Stored(data, content_version(data))

    def _write_temp(self, target: Path, data: bytes) -> str:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=TEMP_PREFIX, suffix=".part")
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        return tmp

    def create(self, key: str, data: bytes) -> Any | None:
        target = self._path(key)
        tmp = self._write_temp(target, data)
        try:
            os.link(tmp, target)  # atomic create-if-absent, with the full content already there
        except FileExistsError:
            return None
        finally:
            os.unlink(tmp)
        return content_version(data)

    @contextmanager
    def _folder_lock(self, folder: Path) -> Iterator[None]:
        # An flock on the folder itself (no lock file left behind). Readers never take it: they see
        # the old or the new file, thanks to rename.
        folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(folder, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def swap(self, key: str, data: bytes, expected: Any) -> Any | None:
        target = self._path(key)
        with self._folder_lock(target.parent):
            current = self.get(key)
            if current is None or current.version != expected:
                return None
            tmp = self._write_temp(target, data)
            os.replace(tmp, target)
        return content_version(data)

    def list(self, prefix: str) -> list[str]:
        try:
            names = os.listdir(self._path(prefix))
        except (FileNotFoundError, NotADirectoryError):
            return []
        return sorted(f"{prefix}/{n}" for n in names
                      if not n.startswith(TEMP_PREFIX) and (self._path(prefix) / n).is_file())

    def delete(self, key: str) -> None:
        with suppress(FileNotFoundError):
            self._path(key).unlink()

    def children(self, prefix: str) -> builtins.list[str]:
        try:
            return sorted(n for n in os.listdir(self._path(prefix)) if not n.startswith(TEMP_PREFIX))
        except (FileNotFoundError, NotADirectoryError):
            return []

    def folders(self, prefix: str) -> builtins.list[str]:
        """Real subfolders only: a symlink is never a folder of ours."""
        base = self._path(prefix)
        return [n for n in self.children(prefix) if (base / n).is_dir() and not (base / n).is_symlink()]

    def keys_below(self, prefix: str) -> Iterator[str]:
        for dirpath, _dirs, files in os.walk(self._path(prefix)):
            rel = Path(dirpath).relative_to(self.root).as_posix()
            yield from (f"{rel}/{f}" for f in sorted(files) if not f.startswith(TEMP_PREFIX))

    def delete_tree(self, prefix: str) -> None:
        path = self._path(prefix)
        if path.is_symlink() or path.is_file():
            path.unlink(missing_ok=True)
        else:
            shutil.rmtree(path, ignore_errors=True)

    def tree_size(self, prefix: str) -> int:
        total = 0
        for dirpath, _dirs, files in os.walk(self._path(prefix)):
            for f in files:
                with suppress(OSError):
                    total += os.path.getsize(os.path.join(dirpath, f))
        return total

    def stale_temp_files(self, older_than: float = 60.0) -> builtins.list[str]:
        """Leftovers of interrupted writes (old enough that no live writer owns them)."""
        cutoff = time.time() - older_than
        out = []
        for dirpath, _dirs, files in os.walk(self.root):
            for name in files:
                if name.startswith(TEMP_PREFIX) and name.endswith(".part"):
                    p = Path(dirpath) / name
                    with suppress(FileNotFoundError):
                        if p.stat().st_mtime < cutoff:
                            out.append(str(p.relative_to(self.root)))
        return out


# ------------------------------------------------------------------------------------------ object stores
def _store_error(exc: Exception, what: str, where: str) -> StorageError:
    """One line saying what went wrong and what to do, with the store's own words cut short."""
    from trimerge.lineage.storage.location import REQUEST_TIMEOUT
    from trimerge.lineage.storage.storeerrors import explain

    text = " ".join(str(exc).split())
    name = type(exc).__name__
    cause = explain(str(exc), where.split("://", 1)[0] if "://" in where else "s3", REQUEST_TIMEOUT)
    if cause is not None:
        return StorageError(f"{what} {where}: {cause}")
    if "NoSuchBucket" in text or "bucket does not exist" in text.lower():
        hint = "the bucket (or container) does not exist"
    elif "api/token" in text or "credential" in text.lower() and "error" in text.lower():
        hint = ("no credentials found: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or the Azure/GCS "
                "equivalents) or pass them as storage options")
    elif name in ("PermissionDeniedError", "UnauthenticatedError") or any(
            code in text for code in ("InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied", " 403 ")):
        hint = "access denied: check the credentials and their permissions"
    elif any(w in text for w in ("Connection refused", "connect", "dns error", "timed out", "operation timed out")):
        hint = "the storage endpoint cannot be reached"
    else:
        hint = name
    return StorageError(f"{what} {where}: {hint} ({text[:160]})")


class ObjectStoreBackend:
    """Objects in a bucket (S3, Azure, GCS) through obstore, below one key prefix."""

    remote = True

    def __init__(self, store: Any, url: str):
        self.store = store
        self.url = url  # for messages

    def check_inside(self, key: str) -> None:
        """Object stores have no symbolic links."""

    @classmethod
    def from_url(cls, url: str, config: dict[str, str], client: dict[str, Any]) -> "ObjectStoreBackend":
        import obstore.store

        from trimerge.lineage.storage.location import retry_config

        try:
            store = obstore.store.from_url(url, config=config or None, client_options=client,
                                           retry_config=retry_config())
        except Exception as exc:  # unknown option keys, malformed URLs
            raise _store_error(exc, "cannot use", url) from None
        return cls(store, url)

    @contextmanager
    def _errors(self, what: str, key: str) -> Iterator[None]:
        """Let the answers the protocol uses through (absent, exists, lost race); everything else
        (credentials, network, unknown bucket) becomes one :class:`StorageError` line."""
        import obstore.exceptions as ox

        try:
            yield
        except _ANSWERS:
            raise
        except (ox.BaseError, OSError, RuntimeError, ValueError) as exc:
            if _is_conflict(exc):
                raise ox.PreconditionError(str(exc)) from None
            raise _store_error(exc, what, f"{self.url}/{key}") from None

    def get(self, key: str) -> Stored | None:
        import obstore

        try:
            with self._errors("cannot read", key):
                result = obstore.get(self.store, key)
                data = bytes(result.bytes())
        except _ABSENT:
            return None
        return Stored(data, _version_of(result.meta))

    def create(self, key: str, data: bytes) -> Any | None:
        import obstore

        try:
            with self._errors("cannot write", key):
                result = obstore.put(self.store, key, data, mode="create")
        except _ANSWERS:
            return None
        return _version_of(result)

    def swap(self, key: str, data: bytes, expected: Any) -> Any | None:
        import obstore

        e_tag, version = expected
        mode = {"e_tag": e_tag} if version is None else {"e_tag": e_tag, "version": version}
        try:
            with self._errors("cannot write", key):
                result = obstore.put(self.store, key, data, mode=mode)
        except _ANSWERS:
            return None
        return _version_of(result)

    def _listing(self, prefix: str) -> dict:
        import obstore

        with self._errors("cannot list", prefix):
            listing = obstore.list_with_delimiter(self.store, prefix.rstrip("/") + "/" if prefix else None)
        # Some stores (SeaweedFS) list a folder as an empty object named like the folder itself.
        listing["objects"] = [o for o in listing["objects"] if o["path"].rstrip("/") != prefix.rstrip("/")]
        return listing

    def list(self, prefix: str) -> list[str]:
        return sorted(o["path"] for o in self._listing(prefix)["objects"])

    def delete(self, key: str) -> None:
        import obstore

        with suppress(*_ABSENT), self._errors("cannot delete", key):
            obstore.delete(self.store, key)

    def children(self, prefix: str) -> builtins.list[str]:
        listing = self._listing(prefix)
        names = {p.rstrip("/").rsplit("/", 1)[-1] for p in listing["common_prefixes"]}
        names |= {o["path"].rsplit("/", 1)[-1] for o in listing["objects"]}
        return sorted(names)

    def folders(self, prefix: str) -> builtins.list[str]:
        return sorted({p.rstrip("/").rsplit("/", 1)[-1] for p in self._listing(prefix)["common_prefixes"]})

    def _walk(self, prefix: str) -> Iterator[dict]:
        import obstore

        with self._errors("cannot list", prefix):
            for page in obstore.list(self.store, prefix.rstrip("/") + "/"):
                yield from page

    def keys_below(self, prefix: str) -> Iterator[str]:
        return (o["path"] for o in self._walk(prefix))

    def delete_tree(self, prefix: str) -> None:
        import obstore

        paths = [o["path"] for o in self._walk(prefix)]
        for start in range(0, len(paths), 1000):
            with self._errors("cannot delete", prefix):
                obstore.delete(self.store, paths[start:start + 1000])

    def tree_size(self, prefix: str) -> int:
        return sum(o["size"] for o in self._walk(prefix))


def _obstore_answers() -> tuple[tuple[type, ...], tuple[type, ...]]:
    """(absent, every protocol answer): obstore raises its own types or the builtin ones."""
    try:
        import obstore.exceptions as ox
    except ImportError:  # local repositories do not need obstore
        return (FileNotFoundError,), (FileNotFoundError, FileExistsError)
    absent = (FileNotFoundError, ox.NotFoundError)
    return absent, (*absent, FileExistsError, ox.AlreadyExistsError, ox.PreconditionError)


_ABSENT, _ANSWERS = _obstore_answers()


def _version_of(meta: Any) -> tuple[str | None, str | None]:
    get = meta.get if isinstance(meta, dict) else lambda k: getattr(meta, k, None)
    return (get("e_tag"), get("version"))


def _is_conflict(exc: Exception) -> bool:
    """Some S3 implementations answer a lost conditional race with 409 Conflict, not 412."""
    text = str(exc)
    return "409" in text and ("Conflict" in text or "conflict" in text)


# ------------------------------------------------------------------------------------------ memory
class MemoryBackend:
    """A dict with S3's semantics (content-hash versions), for unit tests."""

    remote = False

    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}
        self._mutex = threading.Lock()

    def check_inside(self, key: str) -> None:
        """No symbolic links here."""

    def get(self, key: str) -> Stored | None:
        with self._mutex:
            data = self.objects.get(key)
        return None if data is None else Stored(data, content_version(data))

    def create(self, key: str, data: bytes) -> Any | None:
        with self._mutex:
            if key in self.objects:
                return None
            self.objects[key] = bytes(data)
        return content_version(data)

    def swap(self, key: str, data: bytes, expected: Any) -> Any | None:
        with self._mutex:
            current = self.objects.get(key)
            if current is None or content_version(current) != expected:
                return None
            self.objects[key] = bytes(data)
        return content_version(data)

    def list(self, prefix: str) -> list[str]:
        head = prefix.rstrip("/") + "/"
        with self._mutex:
            return sorted(k for k in self.objects if k.startswith(head) and "/" not in k[len(head):])

    def delete(self, key: str) -> None:
        with self._mutex:
            self.objects.pop(key, None)

    def children(self, prefix: str) -> builtins.list[str]:
        head = prefix.rstrip("/") + "/"
        with self._mutex:
            return sorted({k[len(head):].split("/", 1)[0] for k in self.objects if k.startswith(head)})

    def folders(self, prefix: str) -> builtins.list[str]:
        head = prefix.rstrip("/") + "/"
        with self._mutex:
            return sorted({k[len(head):].split("/", 1)[0] for k in self.objects
                           if k.startswith(head) and "/" in k[len(head):]})

    def keys_below(self, prefix: str) -> Iterator[str]:
        head = prefix.rstrip("/") + "/"
        with self._mutex:
            return iter(sorted(k for k in self.objects if k.startswith(head)))

    def delete_tree(self, prefix: str) -> None:
        head = prefix.rstrip("/") + "/"
        with self._mutex:
            for k in [k for k in self.objects if k.startswith(head)]:
                del self.objects[k]

    def tree_size(self, prefix: str) -> int:
        head = prefix.rstrip("/") + "/"
        with self._mutex:
            return sum(len(v) for k, v in self.objects.items() if k.startswith(head))
