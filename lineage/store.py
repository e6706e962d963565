"""The repository's own metadata store: small JSON documents with atomic primitives.

Everything trimerge needs from storage beyond Lance is three operations: create a document only
if it is absent (commits, tags, new branches), replace a document atomically (branch tips, under
the branch's writer lock), and an exclusive lock with a recognisable owner. They map to
``O_EXCL``/``link`` and ``rename`` on a local filesystem and to conditional PUTs on object stores;
only the local filesystem is implemented.
"""

from __future__ import annotations

import json
import os
import socket
import tempfile
import time
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator
from urllib.parse import quote, unquote

from ulid import ULID

from trimerge.lineage.errors import ConcurrentWriteError, InvalidOperationError

HOSTNAME = socket.gethostname()


def local_path(uri: str | os.PathLike) -> Path:
    """Map a repository URI to a local path (``file://`` or a plain path)."""
    text = os.fspath(uri)
    if text.startswith("file://"):
        text = text[len("file://"):]
    elif "://" in text:
        raise InvalidOperationError(
            f"repository {text!r}: only local paths and file:// URIs are supported by this version"
        )
    return Path(text).expanduser().absolute()


def encode_name(name: str) -> str:
    """A ref name as one file-name component ('/' becomes %2F, like Lance's ref files)."""
    return quote(name, safe="")


def decode_name(component: str) -> str:
    return unquote(component)


def dumps(doc: Any) -> bytes:
    return json.dumps(doc, sort_keys=True, indent=1).encode()


class MetaStore:
    """JSON documents below one directory."""

    def __init__(self, root: Path):
        self.root = root

    def path(self, key: str) -> Path:
        return self.root / key

    def read(self, key: str) -> Any:
        with open(self.path(key), "rb") as fh:
            return json.loads(fh.read())

    def read_or_none(self, key: str) -> Any:
        try:
            return self.read(key)
        except FileNotFoundError:
            return None

    def exists(self, key: str) -> bool:
        return self.path(key).exists()

    def _write_temp(self, target: Path, data: bytes) -> str:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".tmp-", suffix=".part")
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        return tmp

    def create(self, key: str, doc: Any) -> bool:
        """Write ``doc`` at ``key`` only if nothing is there; complete or absent, never half-written.

        Returns False when the key existed already."""
        target = self.path(key)
        tmp = self._write_temp(target, dumps(doc))
        try:
            os.link(tmp, target)  # atomic create-if-absent with full content
            return True
        except FileExistsError:
            return False
        finally:
            os.unlink(tmp)

    def replace(self, key: str, doc: Any) -> None:
        """Atomically replace (or create) the document at ``key``."""
        target = self.path(key)
        tmp = self._write_temp(target, dumps(doc))
        os.replace(tmp, target)

    def delete(self, key: str) -> bool:
        try:
            self.path(key).unlink()
            return True
        except FileNotFoundError:
            return False

    def list(self, prefix: str) -> list[str]:
        """Keys of the documents directly inside folder ``prefix`` (temporary files excluded)."""
        folder = self.path(prefix)
        try:
            names = os.listdir(folder)
        except FileNotFoundError:
            return []
        return sorted(f"{prefix}/{n}" for n in names if not n.startswith(".tmp-"))

    def stale_temp_files(self) -> Iterator[Path]:
        """Leftovers of interrupted writes (older than a minute, so no live writer owns them)."""
        cutoff = time.time() - 60
        for dirpath, _dirs, files in os.walk(self.root):
            for name in files:
                if name.startswith(".tmp-"):
                    p = Path(dirpath) / name
                    with suppress(FileNotFoundError):
                        if p.stat().st_mtime < cutoff:
                            yield p


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclass
class LockOwner:
    token: str
    pid: int
    host: str
    acquired_at: float
    purpose: str

    @classmethod
    def mine(cls, purpose: str) -> "LockOwner":
        return cls(str(ULID()), os.getpid(), HOSTNAME, time.time(), purpose)

    def to_json(self) -> dict:
        return self.__dict__.copy()

    @classmethod
    def from_json(cls, doc: dict) -> "LockOwner":
        return cls(doc["token"], int(doc["pid"]), doc["host"], float(doc["acquired_at"]), doc.get("purpose", ""))

    def is_dead(self, lease_seconds: float) -> bool:
        """A lock's owner is dead when its process is gone (same host) or its lease ran out."""
        if self.host == HOSTNAME:
            return not process_alive(self.pid)
        return time.time() - self.acquired_at > lease_seconds


class FileLock:
    """An exclusive lock held by one writer; a dead owner's lock can be broken by recovery."""

    def __init__(self, store: MetaStore, key: str, purpose: str):
        self.store = store
        self.key = key
        self.owner = LockOwner.mine(purpose)
        self.held = False

    def try_acquire(self) -> bool:
        if self.store.create(self.key, self.owner.to_json()):
            self.held = True
        return self.held

    def acquire(self, timeout: float, what: str) -> "FileLock":
        deadline = time.monotonic() + timeout
        delay = 0.01
        while not self.try_acquire():
            if time.monotonic() >= deadline:
                holder = self.current_owner()
                who = f" (held by pid {holder.pid} on {holder.host}: {holder.purpose})" if holder else ""
                raise ConcurrentWriteError(
                    f"{what} is being written by another writer{who}; refresh and retry"
                )
            time.sleep(delay)
            delay = min(delay * 2, 0.2)
        return self

    def current_owner(self) -> LockOwner | None:
        try:
            return LockOwner.from_json(self.store.read(self.key))
        except (FileNotFoundError, ValueError, KeyError, TypeError):
            return None

    def release(self) -> None:
        if not self.held:
            return
        holder = self.current_owner()
        if holder is not None and holder.token == self.owner.token:
            self.store.delete(self.key)
        self.held = False


def break_lock_if_dead(store: MetaStore, key: str, lease_seconds: float) -> bool:
    """Remove the lock at ``key`` if its owner is dead. Returns True if the lock is now free.

    The lock is renamed away and the moved bytes compared with what was judged dead, so a live lock
    that replaced it in between is put back rather than stolen."""
    path = store.path(key)
    try:
        judged = path.read_bytes()
    except FileNotFoundError:
        return True
    try:
        owner = LockOwner.from_json(json.loads(judged))
    except (ValueError, KeyError, TypeError):
        owner = None  # half-written or damaged: its writer died while creating it
    if owner is not None and not owner.is_dead(lease_seconds):
        return False
    grave = path.with_name(f".tmp-broken-{ULID()}")
    try:
        os.rename(path, grave)
    except FileNotFoundError:
        return True
    if grave.read_bytes() != judged:
        with suppress(FileExistsError):
            os.link(grave, path)
        grave.unlink()
        return False
    grave.unlink()
    return True
