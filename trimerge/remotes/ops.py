"""clone, fetch, pull and push between repositories (any pair of a directory, ``s3://``, ``az://``).

Each copies what the other side lacks (:mod:`trimerge.remotes.transfer`: files, then commits) and
moves refs last, so an interrupted run (kill -9) leaves every ref where it was and a rerun finishes.

**Never two writers of one Lance version.** A commit names each table's data as (dataset, Lance
branch, version) and the graph-branch incarnation that *owns* that Lance branch; any other branch
forks it on its first write. Every branch a transfer creates (the clone's ``main``, a branch made
from ``REMOTE/BRANCH``, a new remote branch made by a push) gets a fresh incarnation id and a push
moves a remote branch without changing its id, so two repositories never both append to the same
Lance branch: each writes only Lance branches its own branches created.

**Push** is fast-forward only: when the remote branch's tip is not an ancestor of what is pushed,
it is refused ("fetch and merge first") before anything is copied. The remote branch moves under
its lease by a compare-and-swap of its tip; losing that race is retryable (exit 3). A protected
remote branch is never pushed to: push another branch and merge it there, where its checks run.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from ulid import ULID

from trimerge.lineage.commit import format_time
from trimerge.lineage.errors import (
    ConcurrentWriteError,
    CorruptRepositoryError,
    InvalidNameError,
    NonFastForwardError,
    ProtectedBranchError,
    RemoteError,
    RepositoryNotFoundError,
    TrimergeError,
)
from trimerge.lineage.history import graph as graphalg
from trimerge.lineage.history.names import MAIN, SCHEMA_LOCK_BRANCH, validate_branch_name, validate_tag_name
from trimerge.lineage.history.refexpr import REMOTES_PREFIX
from trimerge.lineage.history.refs import Branch, now
from trimerge.lineage.repository import Repository
from trimerge.lineage.history.protection import Protection
from trimerge.lineage.safety import incoming
from trimerge.lineage.safety.reinstate import reinstate
from trimerge.lineage.storage.faults import crashpoint
from trimerge.lineage.storage.location import META_DIR, TABLES_DIR, Location
from trimerge.lineage.storage.marker import REPO_DOC, read_marker
from trimerge.remotes.config import ORIGIN, Remote, Remotes, connection_options, redact, refuse_credentials
from trimerge.remotes.transfer import Moved, Progress, Transfer

if TYPE_CHECKING:
    from trimerge.lineage.history.refs import Tag

#: A clone in progress (removed when it is done): a rerun into the same place finishes it.
CLONING = "cloning.json"


@dataclass(frozen=True)
class RefUpdate:
    """One ref a transfer moved: ``old`` None when created, ``new`` None when removed."""

    ref: str
    old: str | None
    new: str | None

    def to_json(self) -> dict[str, Any]:
        return {"ref": self.ref, "old": self.old, "new": self.new}


@dataclass
class RemoteResult:
    """What a clone, fetch, pull or push moved: commits, files and bytes copied, refs old → new."""

    operation: str
    remote: str
    uri: str
    commits: int = 0
    files: int = 0
    bytes: int = 0
    refs: list[RefUpdate] = field(default_factory=list)
    #: Tags left alone because the other side has them on another commit (tags never move).
    rejected: list[str] = field(default_factory=list)
    #: ``up-to-date``, ``fast-forward``, ``merged``, ``created`` or ``done`` (fetch, clone).
    status: str = "done"
    merge: Any = None  # a pull's MergeResult when it merged
    repository: Repository | None = field(default=None, repr=False)  # the clone

    def counted(self, moved: Moved) -> "RemoteResult":
        self.commits += moved.commits
        self.files += moved.files
        self.bytes += moved.bytes
        return self

    def to_json(self) -> dict[str, Any]:
        out = {"operation": self.operation, "remote": self.remote, "uri": self.uri, "status": self.status,
               "commits": self.commits, "files": self.files, "bytes": self.bytes,
               "refs": [r.to_json() for r in self.refs], "rejected": list(self.rejected)}
        if self.merge is not None:
            out["merge"] = {"status": self.merge.status, "commit": getattr(self.merge.commit, "id", None)}
        return out


# ---------------------------------------------------------------------------------------------- helpers
def options_for(uri: str | os.PathLike, options: Mapping[str, str] | None) -> Mapping[str, str] | None:
    """``options`` for ``uri``, or None when it is a local directory: a command's storage options
    describe the object store of whichever side is one (a local path takes none)."""
    text = os.fspath(uri)
    return None if text.startswith("file://") or "://" not in text else (options or None)


def open_remote(uri: str, *, read_only: bool, storage_options: Mapping[str, str] | None = None,
                name: str | None = None) -> Repository:
    """The repository at ``uri``, or a :class:`RemoteError` saying why it cannot be used (a URI
    with credentials in it is refused, and never printed)."""
    what = f"remote {name!r} ({redact(uri)})" if name else redact(uri)
    refuse_credentials(uri, f"remote {name!r}:" if name else "repository")
    try:
        return Repository.open(uri, read_only=read_only, storage_options=options_for(uri, storage_options))
    except RepositoryNotFoundError:
        raise RemoteError(f"{what} is not a trimerge repository") from None


def _root(repo: Repository) -> str | None:
    doc = read_marker(repo.docs)
    return doc.get("root") if doc else None


def check_related(local: Repository, remote: Repository, name: str) -> None:
    """Refuse two repositories whose histories share no commit (different first commits), and two
    that share a branch incarnation: a plain copy (cp, a synced bucket) owns the same Lance branches
    as its original, so both would write the same Lance versions; clone it instead."""
    if _root(local) != _root(remote):
        raise RemoteError(f"{local.uri} and remote {name!r} ({remote.uri}) have no commit in common "
                          "(different repositories, not clones of one another)")
    ours = {b.id: b.name for b in local.branches.list(include_internal=True)}
    shared = sorted(ours[b.id] for b in remote.branches.list(include_internal=True) if b.id in ours)
    if shared:
        raise RemoteError(f"{local.uri} and remote {name!r} ({remote.uri}) are copies of one repository, not clones "
                          f"(branch {shared[0]!r} is the same incarnation in both, so both would write its tables' "
                          "Lance versions): exchange history only with a clone ('trimerge clone')")


def _actor(repo: Repository, actor: str | None) -> str:
    return actor or repo.default_actor()


def _copy_tag(tag: "Tag", dst: Repository) -> bool:
    """Create ``tag`` in ``dst`` (its commit is there) and pin its table versions; False if taken."""
    if not dst.refs.create_tag(tag):
        return False
    dst.tags.pin(tag)
    return True


def _tags(src: Repository, dst: Repository, result: RemoteResult, prefix: str = "") -> None:
    """Copy the tags ``dst`` lacks; a tag it has on another commit is never moved (``rejected``).
    A tag's name comes from the other side's document: one that is no tag name is refused."""
    for tag in src.tags.list():
        try:
            validate_tag_name(tag.name)
        except InvalidNameError:
            raise CorruptRepositoryError(f"{src.uri}: a tag document names the tag {str(tag.name)[:80]!r}, which is "
                                         "no tag name: refused (a forged or damaged repository)") from None
        theirs = dst.refs.tag(tag.name)
        if theirs is None and _copy_tag(tag, dst):
            result.refs.append(RefUpdate(f"{prefix}tags/{tag.name}", None, tag.commit_id))
        elif theirs is not None and theirs.commit_id != tag.commit_id:
            result.rejected.append(f"{prefix}tags/{tag.name}")


def _is_empty(location: Location) -> bool:
    if location.is_local:
        path = location.path
        if path.exists() and not path.is_dir():
            return False
        return not path.exists() or not any(path.iterdir())
    return not location.backend(META_DIR).children("") and not location.backend(TABLES_DIR).children("")


# ---------------------------------------------------------------------------------------------- clone
def clone(src: str | os.PathLike, dst: str | os.PathLike, *, storage_options: Mapping[str, str] | None = None,
          dst_storage_options: Mapping[str, str] | None = None, progress: Progress | None = None,
          actor: str | None = None) -> RemoteResult:
    """Copy repository ``src`` to ``dst`` (absent or empty): every commit reachable from its
    branches and tags and the Lance files they name; ``origin`` names ``src``, ``origin/BRANCH``
    tracks each of its branches and ``main`` starts at ``origin/main`` (as a new branch
    incarnation: the clone's first write forks, never appending to a Lance branch ``src`` writes).

    ``src`` is untrusted (see :mod:`trimerge.remotes.transfer`): a forged or damaged source is
    refused with one :class:`CorruptRepositoryError` line naming the offending file, and nothing is
    written outside ``dst``. A refused clone into a new or empty ``dst`` removes what it made (as
    git does); one killed (or failing with a retryable error) is finished by running it again, and
    so is a finished one (nothing to do): a clone killed after its last write is no different."""
    src, dst = _spelled(src, "clone source"), _spelled(dst, "clone target")
    source = open_remote(src, read_only=True, storage_options=storage_options)
    try:
        target_location = Location.parse(dst, options_for(dst, dst_storage_options))
    except Exception as exc:
        raise RemoteError(f"clone target {dst!r}: {exc}") from None
    if target_location.same_place(source.uri):
        raise RemoteError(f"cannot clone {source.uri} onto itself")
    target = Repository(target_location)
    cloning = target.docs.get(CLONING)
    made: _Made | None = None
    if not (isinstance(cloning, dict) and cloning.get("source") == source.uri) \
            and not _finished_clone_of(target, source):
        if not _is_empty(target_location):
            raise RemoteError(f"clone target {target_location.uri} exists and is not empty")
        from trimerge.lineage.storage.marker import refuse_to_init

        refuse_to_init(target_location, target.docs)
        made = _Made(target_location)
        if target_location.is_local:
            target_location.path.mkdir(parents=True, exist_ok=True)
        target.docs.create(CLONING, {"source": source.uri, "started_at": format_time(now())})
    try:
        return _clone_into(source, target, target_location, storage_options, progress, actor)
    except BaseException as exc:
        if made is not None and not (isinstance(exc, TrimergeError) and exc.retryable):
            made.remove()
        raise


def _spelled(uri: str | os.PathLike, what: str) -> str:
    """A clone's side as it will be recorded: never with credentials (refused), and a local path
    absolute with no ``..`` in it (fork manifests record it, and compare it by prefix)."""
    text = os.fspath(uri)
    refuse_credentials(text, what)
    if "://" in text and not text.startswith("file://"):
        return text
    return os.path.abspath(os.path.expanduser(text.removeprefix("file://"))) if text.strip() else text


class _Made:
    """What a fresh clone makes at its target (the first folder that did not exist, or the contents
    of an empty one), to remove when the clone is refused."""

    def __init__(self, location: Location):
        self.location = location
        self.top: Path | None = None
        if location.is_local:
            path = location.path
            while not path.exists() and path.parent != path:
                self.top, path = path, path.parent

    def remove(self) -> None:
        try:
            if not self.location.is_local:
                backend = self.location.backend("")
                for folder in (META_DIR, TABLES_DIR):
                    backend.delete_tree(folder)
            elif self.top is not None:
                shutil.rmtree(self.top, ignore_errors=True)
            else:
                for child in self.location.path.iterdir():
                    if child.is_dir() and not child.is_symlink():
                        shutil.rmtree(child, ignore_errors=True)
                    else:
                        child.unlink(missing_ok=True)
        except (OSError, TrimergeError):
            pass  # the refusal is what the caller must hear; what stays is an unfinished clone


def _finished_clone_of(target: Repository, source: Repository) -> bool:
    """Whether ``target`` is a finished clone of ``source``: running the clone again finishes it."""
    try:
        marker = read_marker(target.docs)
        origin = Remotes(target).get_or_none(ORIGIN) if marker else None
    except (TrimergeError, OSError):
        return False
    return origin is not None and origin.uri == source.uri and marker is not None \
        and marker.get("root") == _root(source)


def _clone_into(source: Repository, target: Repository, target_location: Location,
                storage_options: Mapping[str, str] | None, progress: Progress | None,
                actor: str | None) -> RemoteResult:
    result = RemoteResult("clone", ORIGIN, source.uri)
    branches = source.branches.list()
    for b in branches:
        try:
            if b.name != MAIN:
                validate_branch_name(b.name, existing=True)
        except InvalidNameError:
            raise CorruptRepositoryError(f"{source.uri}: a branch document names the branch {str(b.name)[:80]!r}, "
                                         "which is no branch name: refused (a forged or damaged repository)") from None
    tags = source.tags.list()
    root = _root(source) or ""
    tips = [b.commit_id for b in branches] + [t.commit_id for t in tags] + [root]
    transfer = Transfer(source, target, progress)
    result.counted(transfer.run(tips))
    crashpoint("clone_before_refs")
    remotes = Remotes(target)
    if remotes.get_or_none(ORIGIN) is None:
        # origin keeps how to reach it (endpoint, region...) from the clone's options, never credentials.
        kept = {} if source.location.is_local else connection_options(storage_options)[0]
        target.docs.create(Remotes.key(ORIGIN), Remote(ORIGIN, source.uri, kept).to_json())
    for b in branches:
        if target.refs.tracking(f"{ORIGIN}/{b.name}") != b.commit_id:
            target.refs.set_tracking(ORIGIN, b.name, b.commit_id)
            result.refs.append(RefUpdate(f"{ORIGIN}/{b.name}", None, b.commit_id))
    _tags(source, target, result)
    tip = next((b.commit_id for b in branches if b.name == MAIN), root)
    who = _actor(source, actor)
    for name, at in ((MAIN, tip), (SCHEMA_LOCK_BRANCH, root)):
        if target.refs.branch(name) is None:
            # A fresh incarnation id: this repository owns none of the Lance branches it copied.
            target.refs.create_branch(Branch(name, at, str(ULID()), now(), None), actor=who,
                                      reason=f"clone: from {source.uri}")
            if name == MAIN:
                result.refs.append(RefUpdate(MAIN, None, at))
    copy_requests(source, target, ORIGIN, adopt=True)
    doc = {"format": 1, "created_at": format_time(now()), "root": root, "location": target_location.uri}
    target.docs.create(REPO_DOC, doc, nonce=False)  # last: until then the target is no repository
    transfer.done()
    target.docs.delete(CLONING)
    crashpoint("clone_done")
    if not (result.commits or result.files or result.refs):
        result.status = "up-to-date"  # a finished clone run again (or one killed after its last write)
    result.repository = Repository.open(target_location.uri, storage_options=target_location.storage_options or None)
    return result


# ---------------------------------------------------------------------------------------------- fetch
def fetch(repo: Repository, remote: str | None = ORIGIN, *, tags: bool = False,
          storage_options: Mapping[str, str] | None = None, progress: Progress | None = None) -> RemoteResult:
    """Update the remote-tracking refs ``REMOTE/BRANCH`` to the remote's branches (removing those of
    branches it no longer has), copying what they need first; ``tags``: also its new tags."""
    repo.check_writable()
    name = remote or ORIGIN
    config = Remotes(repo).get(name)
    source = open_remote(config.uri, read_only=True, storage_options=config.options_with(storage_options), name=name)
    check_related(repo, source, name)
    result = RemoteResult("fetch", name, config.uri)
    branches = {b.name: b.commit_id for b in source.branches.list()}
    remote_tags = source.tags.list() if tags else []
    with Transfer(source, repo, progress) as transfer:
        tips = [*branches.values(), *(t.commit_id for t in remote_tags)]
        result.counted(transfer.run(tips))
        _reinstate(repo, transfer)
        crashpoint("fetch_before_refs")
        _track(repo, name, branches, result)
        copy_requests(source, repo, name)
        if tags:
            _tags(source, repo, result)
    result.status = "done" if result.refs else "up-to-date"
    return result


def _reinstate(dst: Repository, transfer: Transfer) -> None:
    """Commits ``dst``'s gc reclaimed that the transfer brought back are usable again (see
    :mod:`trimerge.lineage.safety.reinstate`): before any ref moves, while its record keeps them."""
    if transfer.record is not None and dst.reclaimed.read()[0]:
        reinstate(dst, incoming.commits(dst.docs, transfer.record))


def _track(repo: Repository, name: str, branches: dict[str, str], result: RemoteResult) -> None:
    """Remote-tracking refs ``NAME/BRANCH`` at ``branches``; those of branches gone are removed."""
    for branch, tip in sorted(branches.items()):
        old = repo.refs.tracking(f"{name}/{branch}")
        if old != tip:
            repo.refs.set_tracking(name, branch, tip)
            result.refs.append(RefUpdate(f"{name}/{branch}", old, tip))
    for branch in repo.refs.tracking_names(name):
        if branch not in branches:
            old = repo.refs.tracking(f"{name}/{branch}")
            repo.refs.set_tracking(name, branch, None)
            result.refs.append(RefUpdate(f"{name}/{branch}", old, None))


# ---------------------------------------------------------------------------------------------- pull
def pull(repo: Repository, remote: str | None = None, branch: str | None = None, *, actor: str | None = None,
         storage_options: Mapping[str, str] | None = None, progress: Progress | None = None,
         **merge_options: Any) -> RemoteResult:
    """Fetch, then bring ``REMOTE/BRANCH`` into ``branch`` (default: the current branch): the
    branch simply moves when it has not diverged, else the remote branch is merged into it
    (conflicts raise :class:`~trimerge.merge.MergeConflictError`, as a merge's do)."""
    name = remote or ORIGIN
    branch = repo.default_ref(branch)
    fetched = fetch(repo, name, storage_options=storage_options, progress=progress)
    result = RemoteResult("pull", name, fetched.uri, refs=list(fetched.refs)).counted(
        Moved(fetched.commits, fetched.files, fetched.bytes))
    tracked = repo.refs.tracking(f"{name}/{branch}")
    if tracked is None:
        raise RemoteError(f"remote {name!r} has no branch {branch!r}")
    local = repo.refs.branch(branch)
    if local is None:
        if branch != MAIN:
            validate_branch_name(branch)
        if repo.refs.create_branch(Branch(branch, tracked, str(ULID()), now(), None), actor=_actor(repo, actor),
                                   reason=f"pull: created from {name}/{branch}") is None:
            raise ConcurrentWriteError(f"branch {branch!r} was created meanwhile; retry")
        result.refs.append(RefUpdate(branch, None, tracked))
        result.status = "created"
        return result
    if local.commit_id == tracked or graphalg.is_ancestor(repo.commits, tracked, local.commit_id):
        result.status = "up-to-date"
        return result
    if graphalg.is_ancestor(repo.commits, local.commit_id, tracked):
        lease = repo.lock_branch(branch, f"pull {name}/{branch}")
        try:
            current = repo.refs.branch(branch)
            if current is None or current.commit_id != local.commit_id:
                raise ConcurrentWriteError(f"branch {branch!r} moved during the pull; retry")
            if repo.refs.move_branch(current, tracked, actor=_actor(repo, actor),
                                     reason=f"pull: fast-forward to {name}/{branch}") is None:
                raise ConcurrentWriteError(f"branch {branch!r} moved during the pull; retry")
        finally:
            lease.release()
        result.refs.append(RefUpdate(branch, local.commit_id, tracked))
        result.status = "fast-forward"
        return result
    if graphalg.merge_base(repo.commits, local.commit_id, tracked) is None:
        raise RemoteError(f"{branch!r} and {name}/{branch} have no commit in common")
    from trimerge.merge import merge

    # Spelled fully: a local branch may be called "origin/main" too, and the fetched ref is meant.
    merged = merge(f"{REMOTES_PREFIX}{name}/{branch}", branch, repo=repo, actor=actor,
                   message=merge_options.pop("message", None) or f"Merge {name}/{branch} into {branch}", **merge_options)
    result.merge = merged
    after = repo.refs.branch(branch)
    if after is not None and after.commit_id != local.commit_id:
        result.refs.append(RefUpdate(branch, local.commit_id, after.commit_id))
    result.status = "merged" if merged.status == "merged" else str(merged.status)
    return result


# ---------------------------------------------------------------------------------------------- push
def push(repo: Repository, remote: str | None = None, branch: str | None = None, *, tags: bool = False,
         actor: str | None = None, storage_options: Mapping[str, str] | None = None,
         progress: Progress | None = None) -> RemoteResult:
    """Make the remote's ``branch`` (default: the current branch) what it is here: fast-forward
    only, refused with "fetch and merge first" otherwise; ``tags``: also the tags it lacks."""
    repo.check_writable()  # its remote-tracking ref moves too
    name = remote or ORIGIN
    config = Remotes(repo).get(name)
    branch = repo.default_ref(branch)
    local = repo.branches.get(branch)
    target = open_remote(config.uri, read_only=False, storage_options=config.options_with(storage_options), name=name)
    check_related(repo, target, name)
    if Protection(target).is_protected(branch):
        raise ProtectedBranchError(f"branch {branch!r} of remote {name!r} is protected: push refused; push another "
                                   f"branch and merge it there, where its checks run")
    theirs = target.refs.branch(branch)
    result = RemoteResult("push", name, config.uri)
    if theirs is not None and theirs.commit_id != local.commit_id and not (
            repo.commits.exists(theirs.commit_id)
            and graphalg.is_ancestor(repo.commits, theirs.commit_id, local.commit_id)):
        raise NonFastForwardError(f"push to {name}/{branch} refused: the remote branch has commits that {branch!r} "
                                  f"does not (not a fast-forward); fetch and merge first")
    tag_list = repo.tags.list() if tags else []
    with Transfer(repo, target, progress) as transfer:
        tips = [local.commit_id, *(t.commit_id for t in tag_list)]
        result.counted(transfer.run(tips))
        _reinstate(target, transfer)
        crashpoint("push_before_ref")
        _move_remote(repo, target, name, branch, local, theirs, _actor(repo, actor), result)
        if tags:
            _tags(repo, target, result)
    if repo.refs.tracking(f"{name}/{branch}") != local.commit_id:
        repo.refs.set_tracking(name, branch, local.commit_id)
    if result.status == "up-to-date" and result.refs:
        result.status = "done"
    return result


def _move_remote(repo: Repository, target: Repository, name: str, branch: str, local: Branch,
                 theirs: Branch | None, who: str, result: RemoteResult) -> None:
    """Move (or create) the remote branch to ``local``'s tip under its lease, by a compare-and-swap
    from ``theirs`` (the tip the fast-forward check saw)."""
    if theirs is None or theirs.commit_id != local.commit_id:
        lease = target.lock_branch(branch, f"push from {repo.uri}")
        try:
            current = target.refs.branch(branch)
            if (current.commit_id if current else None) != (theirs.commit_id if theirs else None):
                raise ConcurrentWriteError(f"{name}/{branch} moved during the push; fetch, merge and push again")
            if current is None:  # a new remote branch: a new incarnation, owning nothing pushed
                moved = target.refs.create_branch(Branch(branch, local.commit_id, str(ULID()), now(), None),
                                                  actor=who, reason=f"push: created from {repo.uri}")
            else:
                moved = target.refs.move_branch(current, local.commit_id, actor=who, reason=f"push: from {repo.uri}")
            if moved is None:
                raise ConcurrentWriteError(f"{name}/{branch} moved during the push; fetch, merge and push again")
        finally:
            lease.release()
        result.refs.append(RefUpdate(f"{name}/{branch}", theirs.commit_id if theirs else None, local.commit_id))
        result.status = "created" if theirs is None else "fast-forward"
    else:
        result.status = "up-to-date"


def copy_requests(source: Repository, dst: Repository, remote: str, *, adopt: bool = False) -> int:
    """The merge requests of ``source`` as ``dst`` sees them: a copy under ``remote``'s name
    (``dst.requests.list(remote=...)``), refreshed by every fetch; ``adopt`` (a clone): also as
    ``dst``'s own, under their numbers. How many ``source`` has."""
    from trimerge.lineage.history.requests import RequestRecords

    theirs, mine = RequestRecords(source.docs), RequestRecords(dst.docs)
    if adopt:
        mine.adopt(theirs)
    return mine.copy_from(theirs, remote)
