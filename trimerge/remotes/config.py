"""``repo.remotes``: named remote repositories, kept in ``_trimerge/remotes/<name>.json`` ({name, uri}).

A remote's name is one identifier-like word (no ``/``: ``REMOTE/BRANCH`` names a remote-tracking
ref, and branch names may contain ``/``). Its branches as last fetched or pushed are the
remote-tracking refs of :class:`~trimerge.lineage.history.refs.RefStore`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from trimerge.lineage.errors import AlreadyExistsError, InvalidNameError, InvalidOperationError, RemoteError
from trimerge.lineage.storage.location import Location

if TYPE_CHECKING:
    from trimerge.lineage.repository import Repository

FOLDER = "remotes"
ORIGIN = "origin"
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,63}$")


def validate_remote_name(name: object) -> str:
    if not isinstance(name, str) or not _NAME.fullmatch(name) or name.endswith((".", ".lock")) or ".." in name \
            or name == "HEAD":
        raise InvalidNameError(f"invalid remote name {name!r}: use a letter or '_' then letters, digits, '_', '.' "
                               "or '-' (at most 64, no '/')")
    return name


@dataclass(frozen=True)
class Remote:
    name: str
    uri: str

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "uri": self.uri}


class Remotes:
    """``repo.remotes``: add, list, get and remove remotes."""

    def __init__(self, repo: "Repository"):
        self.repo = repo

    @staticmethod
    def key(name: str) -> str:
        return f"{FOLDER}/{name}.json"

    def add(self, name: str, uri: str) -> Remote:
        """Record remote ``name`` at ``uri`` (a directory, ``s3://``, ``az://``...)."""
        self.repo.check_writable()
        validate_remote_name(name)
        try:
            location = Location.parse(uri)
        except InvalidOperationError as exc:
            raise RemoteError(f"remote {name!r}: {exc}") from None
        if location.same_place(self.repo.uri):
            raise RemoteError(f"remote {name!r} would be this repository itself ({self.repo.uri})")
        remote = Remote(name, location.uri)
        if self.repo.docs.create(self.key(name), remote.to_json()) is None:
            raise AlreadyExistsError(f"remote {name!r} exists already (remove it first)")
        return remote

    def get_or_none(self, name: str) -> Remote | None:
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            return None
        doc = self.repo.docs.get(self.key(name))
        if not isinstance(doc, dict) or not isinstance(doc.get("uri"), str):
            return None
        return Remote(name, doc["uri"])

    def get(self, name: str) -> Remote:
        validate_remote_name(name)
        remote = self.get_or_none(name)
        if remote is None:
            known = ", ".join(r.name for r in self.list()) or "none; add one with 'trimerge remote add NAME URI'"
            raise RemoteError(f"no remote {name!r} (remotes: {known})")
        return remote

    def list(self) -> list[Remote]:
        names = [k.rsplit("/", 1)[1].removesuffix(".json") for k in self.repo.docs.list(FOLDER)]
        return [r for r in (self.get_or_none(n) for n in sorted(names)) if r is not None]

    def remove(self, name: str) -> Remote:
        """Forget remote ``name`` and its remote-tracking refs."""
        self.repo.check_writable()
        remote = self.get(name)
        for branch in self.repo.refs.tracking_names(name):
            self.repo.refs.set_tracking(name, branch, None)
        self.repo.docs.delete(self.key(name))
        return remote

    def __iter__(self):
        return iter(self.list())

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.get_or_none(name) is not None
