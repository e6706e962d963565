"""Refs: branch and tag documents, ``HEAD``, and publishing a commit by moving a branch.

Layout below ``_trimerge/``::

    refs/branches/<name>.json   a branch tip ('/' in the name as %2F); moved by compare-and-swap
    refs/tags/<name>.json       a tag; created once, never moved
    HEAD                        the current branch of the CLI

Publishing stores the commit (create-if-absent) and then swaps the branch document from the
version the writer read to the new tip: that swap is the single visibility point of every write,
on a local disk and on an object store alike. A writer whose branch moved meanwhile loses the swap
and gets a retryable :class:`ConcurrentWriteError`, never a silent overwrite.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Callable, Mapping
from urllib.parse import quote, unquote

from trimerge.lineage.commit import Commit, format_time, parse_time
from trimerge.lineage.history.commits import CommitStore
from trimerge.lineage.storage.documents import Documents
from trimerge.lineage.errors import ConcurrentWriteError, CorruptRepositoryError
from trimerge.lineage.storage.faults import crashpoint
from trimerge.lineage.history.names import MAIN, is_internal_branch

if TYPE_CHECKING:
    from trimerge.lineage import ports

BRANCHES = "refs/branches"
TAGS = "refs/tags"
#: Remote-tracking refs ``refs/remotes/<remote>/<branch>.json`` ({commit}): where a remote's
#: branches were at the last fetch or push (written by :mod:`trimerge.remotes`).
REMOTES = "refs/remotes"
HEAD = "HEAD"


def encode_name(name: str) -> str:
    """A ref name as one key component ('/' becomes %2F, like Lance's ref files)."""
    return quote(name, safe="")


def _storable(name: object) -> bool:
    """Whether ``name`` could be a stored ref at all (text, valid Unicode, no NUL); others do not exist."""
    if not isinstance(name, str) or not name or "\x00" in name:
        return False
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def now() -> datetime:
    return datetime.now(timezone.utc)


def entry_id(key: str) -> str:
    """The id of the reflog entry stored at ``key`` (its ULID: what an entry's ``prev`` and a
    branch's ``log`` name; see :mod:`trimerge.lineage.history.reflog`)."""
    return key.rsplit("/", 1)[-1].removesuffix(".json")


@dataclass(frozen=True)
class Branch:
    """A graph branch: a movable pointer to a commit."""

    name: str
    commit_id: str
    id: str  # incarnation id: owner of the Lance forks this branch writes
    created_at: datetime
    parent: str | None  # branch it was created from (None for main or when created from a tag/commit)
    version: Any = field(default=None, compare=False, repr=False)  # of the ref document, for the swap
    #: Whether the branch is protected (filled in by ``repo.branches``; see lineage/history/protection.py).
    protected: bool = field(default=False, compare=False)
    #: The id of the reflog entry of the move that made this document (None: no entry, e.g. an
    #: internal branch, or a document written by an older version). Swapped in with the move, so the
    #: entries a branch's moves left chain back from here through their ``prev`` (see reflog.py).
    log: str | None = field(default=None, compare=False, repr=False)

    def to_json(self) -> dict[str, Any]:
        doc = {"name": self.name, "commit": self.commit_id, "id": self.id,
               "created_at": format_time(self.created_at), "parent": self.parent}
        if self.log is not None:
            doc["log"] = self.log
        return doc

    @classmethod
    def from_json(cls, doc: Mapping[str, Any], version: Any = None) -> "Branch":
        log = doc.get("log")
        return cls(_text(doc, "name"), _text(doc, "commit"), _text(doc, "id"), parse_time(_text(doc, "created_at")),
                   _text(doc, "parent", optional=True), version, log=log if isinstance(log, str) else None)


@dataclass(frozen=True)
class Tag:
    """An immutable, named pointer to a commit."""

    name: str
    commit_id: str
    created_at: datetime
    actor: str
    message: str

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "commit": self.commit_id, "created_at": format_time(self.created_at),
                "actor": self.actor, "message": self.message}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> "Tag":
        return cls(_text(doc, "name"), _text(doc, "commit"), parse_time(_text(doc, "created_at")),
                   _text(doc, "actor", optional=True) or "", _text(doc, "message", optional=True) or "")


def _text(doc: Mapping[str, Any], field_name: str, *, optional: bool = False) -> Any:
    """``doc[field_name]`` when it is a string (or absent/None when ``optional``): a ref document
    comes from storage a peer may have forged, so a wrong type is a malformed ref, not a crash later."""
    value = doc.get(field_name) if optional else doc[field_name]
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise TypeError(f"{field_name} is {type(value).__name__}, not a string")
    return value


class RefStore:
    """Branch and tag documents."""

    def __init__(self, docs: Documents):
        from trimerge.lineage.history.reflog import Reflog  # it names refs as this module does

        self.docs = docs
        self.reflog = Reflog(docs)
        #: Told ``(kind, name)`` after a user branch was created, moved or deleted ("branch") or a tag
        #: created ("tag"): the repository wires it to the layers above (hooks deliver events then).
        self.on_change: Callable[[str, str], None] | None = None

    def _logged(self, name: str, old: str | None, new: str | None, actor: str, reason: str, *,
                prev: str | None = None, inc: str | None = None) -> str | None:
        """Record a move of a user branch in the reflog, before the move (see :mod:`trimerge.lineage.history.reflog`)."""
        if is_internal_branch(name) or old == new:
            return None  # internal and temporary branches (a rebase's replays) have no reflog
        return self.reflog.record(name, old, new, actor, reason, prev=prev, inc=inc)

    def _changed(self, kind: str, name: str) -> None:
        if self.on_change is not None and (kind == "tag" or not is_internal_branch(name)):
            self.on_change(kind, name)

    @staticmethod
    def branch_key(name: str) -> str:
        return f"{BRANCHES}/{encode_name(name)}.json"

    @staticmethod
    def tag_key(name: str) -> str:
        return f"{TAGS}/{name}.json"

    def _parsed(self, key: str, parse):
        found = self.docs.read(key)
        if found is None:
            return None
        try:
            return parse(found)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise CorruptRepositoryError(f"{self.docs.where}/{key}: malformed ref ({exc!r})") from None

    # -- branches
    def branch(self, name: str) -> Branch | None:
        """The branch document (with its version), internal branches included."""
        if not _storable(name):
            return None
        return self._parsed(self.branch_key(name), lambda f: Branch.from_json(f.doc, f.version))

    def branch_names(self, include_internal: bool = False) -> list[str]:
        names = [unquote(k.rsplit("/", 1)[1].removesuffix(".json")) for k in self.docs.list(BRANCHES)]
        return [n for n in names if include_internal or not is_internal_branch(n)]

    def create_branch(self, branch: Branch, *, actor: str = "", reason: str = "branch: created") -> Branch | None:
        """Create the branch document; None if the name is taken. Recorded in the reflog."""
        entry = self._logged(branch.name, None, branch.commit_id, actor, reason, inc=branch.id)
        branch = replace(branch, log=entry_id(entry) if entry else None)
        version = self.docs.create(self.branch_key(branch.name), branch.to_json())
        if version is None and entry:
            self.reflog.discard(entry)
        if version is None:
            return None
        self._changed("branch", branch.name)
        return replace(branch, version=version)

    def move_branch(self, branch: Branch, commit_id: str, *, actor: str = "", reason: str = "") -> Branch | None:
        """Point ``branch`` at ``commit_id`` if its document is unchanged since ``branch`` was read
        (recorded in the reflog, with ``actor`` and ``reason``)."""
        entry = self._logged(branch.name, branch.commit_id, commit_id, actor, reason, prev=branch.log, inc=branch.id)
        moved = replace(branch, commit_id=commit_id, log=entry_id(entry) if entry else branch.log)
        version = self.docs.swap(self.branch_key(branch.name), moved.to_json(), branch.version)
        if version is None and entry:
            self.reflog.discard(entry)
        if version is None:
            return None
        if entry:
            self._changed("branch", branch.name)
        return replace(moved, version=version)

    def delete_branch(self, name: str, *, old: str | None = None, actor: str = "",
                      reason: str = "branch: deleted") -> None:
        """Remove the branch document; ``old`` (its tip) is recorded in the reflog when given."""
        logged = None
        if old is not None and not is_internal_branch(name):
            current = self.branch(name)
            logged = self._logged(name, old, None, actor, reason, prev=current.log if current else None,
                                  inc=current.id if current else None)
        self.docs.delete(self.branch_key(name))
        if logged:
            self._changed("branch", name)

    # -- tags
    def tag(self, name: str) -> Tag | None:
        if not _storable(name) or "/" in name:
            return None
        return self._parsed(self.tag_key(name), lambda f: Tag.from_json(f.doc))

    def tag_names(self) -> list[str]:
        return [k.rsplit("/", 1)[1].removesuffix(".json") for k in self.docs.list(TAGS)]

    def create_tag(self, tag: Tag) -> bool:
        created = self.docs.create(self.tag_key(tag.name), tag.to_json()) is not None
        if created:
            self._changed("tag", tag.name)
        return created

    def delete_tag(self, name: str) -> None:
        self.docs.delete(self.tag_key(name))

    # -- remote-tracking refs (``REMOTE/BRANCH`` in ref expressions; remote names have no '/')
    @staticmethod
    def tracking_key(remote: str, branch: str) -> str:
        return f"{REMOTES}/{encode_name(remote)}/{encode_name(branch)}.json"

    def tracking(self, name: str) -> str | None:
        """The commit remote-tracking ref ``REMOTE/BRANCH`` names; None if there is none."""
        remote, sep, branch = name.partition("/") if _storable(name) else ("", "", "")
        if not sep or not remote or not branch:
            return None
        found = self._parsed(self.tracking_key(remote, branch), lambda f: str(f.doc["commit"]))
        return found

    def tracking_names(self, remote: str) -> list[str]:
        """The branches remote ``remote`` had at the last fetch or push."""
        return sorted(unquote(k.rsplit("/", 1)[1].removesuffix(".json"))
                      for k in self.docs.list(f"{REMOTES}/{encode_name(remote)}"))

    def tracking_tips(self) -> list[str]:
        """The commits every remote-tracking ref names (gc keeps them, as git keeps its remotes')."""
        tips = []
        for folder in self.docs.backend.children(REMOTES):
            for key in self.docs.list(f"{REMOTES}/{folder}"):
                doc = self.docs.get(key)
                if not isinstance(doc, dict) or not isinstance(doc.get("commit"), str):
                    raise CorruptRepositoryError(f"{self.docs.where}/{key}: malformed remote-tracking ref")
                tips.append(doc["commit"])
        return tips

    def set_tracking(self, remote: str, branch: str, commit_id: str | None) -> None:
        """Point ``REMOTE/BRANCH`` at ``commit_id`` (None: remove it). Only the local repository's
        fetches and pushes write these; the last writer wins, as in git."""
        key = self.tracking_key(remote, branch)
        if commit_id is None:
            self.docs.delete(key)
            return
        for _ in range(10):
            found = self.docs.read(key, damaged_as_none=True)
            if found is None and self.docs.create(key, {"commit": commit_id}) is not None:
                return
            if found is not None and self.docs.swap(key, {"commit": commit_id}, found.version) is not None:
                return
        raise ConcurrentWriteError(f"remote-tracking ref {remote}/{branch} is being changed by another process; retry")

    # -- HEAD
    def head(self) -> str:
        """The current branch's name as recorded (``main`` when there is no HEAD document). A HEAD
        that is empty or names no branch is damaged, never read as ``main``."""
        stored = self.docs.backend.get(HEAD)
        if stored is None:
            return MAIN
        text = stored.data.decode("utf-8", "replace").strip()
        repair = f"rewrite it with 'trimerge switch BRANCH' (for instance 'trimerge switch {MAIN}')"
        if not text.startswith("{"):
            if not text or "\n" in text or "\ufffd" in text:
                raise CorruptRepositoryError(f"{self.docs.where}/{HEAD} is {'empty' if not text else 'damaged'}: "
                                             f"{repair}")
            return text  # written by an older version: the plain name
        doc = self.docs.get(HEAD)
        if not isinstance(doc, dict) or not isinstance(doc.get("branch"), str) or not doc["branch"]:
            raise CorruptRepositoryError(f"{self.docs.where}/{HEAD} names no branch: {repair}")
        return doc["branch"]

    def set_head(self, name: str) -> None:
        for _ in range(10):
            stored = self.docs.backend.get(HEAD)
            if stored is None:
                if self.docs.create(HEAD, {"branch": name}) is not None:
                    return
            elif self.docs.swap(HEAD, {"branch": name}, stored.version) is not None:
                return
        raise ConcurrentWriteError("HEAD is being changed by another process; retry")


def publish(commits: "ports.CommitStore", refs: "ports.RefStore", branch: Branch, commit: Commit, *,
            stored: bool = False) -> Branch:
    """Store ``commit`` (unless ``stored``) and move ``branch`` (as read by the writer) to it;
    returns the moved branch.

    :class:`ConcurrentWriteError` (retryable) when the branch moved or was recreated meanwhile."""
    if commit.parents[:1] != (branch.commit_id,):
        raise ConcurrentWriteError(f"branch {branch.name!r} moved during the write; refresh and retry")
    if not stored:
        commits.put(commit)
    crashpoint("after_commit_object")
    kind = "merge" if len(commit.parents) > 1 else "commit"
    moved = refs.move_branch(branch, commit.id, actor=commit.actor, reason=f"{kind}: {commit.message}")
    if moved is None:
        raise ConcurrentWriteError(f"branch {branch.name!r} moved during the write; refresh and retry")
    return moved
