"""What every page handler is given and gives back, kept apart from the HTTP stack.

A handler is a plain function ``(site, ask) -> Page | Redirect``, run in a worker thread:
:class:`Site` holds the repository and what pages share (the diff cache, the write lock);
:class:`Ask` is one request's parameters, form and session with the access rules of its token;
:class:`Page` names a template and what it shows.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, Mapping, TypeVar

from trimerge.lineage.repository import Repository
from trimerge.pages.errors import BadRequestError, ForbiddenError
from trimerge.pages.sessions import Session
from trimerge.serve.config import ServeConfig
from trimerge.serve.tokens import Grant

__all__ = ["DEFAULT_PER_PAGE", "MAX_PARAM_CHARS", "MAX_PER_PAGE", "Ask", "Page", "Redirect", "Site"]

DEFAULT_PER_PAGE = 100
MAX_PER_PAGE = 1000
MAX_PARAM_CHARS = 4096  # a ref, a table name, a filter: longer is refused (a where of 4 KB is a long one)
MAX_PAGE = 10**9

T = TypeVar("T")


@dataclass
class Page:
    """A rendered answer: ``template`` with ``data``; ``status`` 200 unless told."""

    template: str
    data: dict[str, Any] = field(default_factory=dict)
    status: int = 200


@dataclass
class Redirect:
    """A 303 to ``url`` (after a form: the page to show next), with a notice for that page."""

    url: str
    notice: str | None = None


@dataclass
class Ask:
    """One request as a handler sees it."""

    path: str
    query: Mapping[str, str]
    form: Mapping[str, str]
    session: Session | None
    authenticated: bool  # the server has tokens
    branches: Callable[[], set[str]]  # the repository's branch names (asked only for glob checks)

    @property
    def grant(self) -> Grant | None:
        return self.session.grant if self.session is not None else None

    @property
    def can_write(self) -> bool:
        """Whether this visitor may act at all (a write token, or a server without tokens)."""
        return not self.authenticated or (self.grant is not None and self.grant.write)

    @property
    def actor(self) -> str | None:
        """The author of what this visitor's actions write (the token's actor; None: the server's user)."""
        return self.grant.actor if self.grant is not None else None

    def may_name(self, ref: str) -> bool:
        grant = self.grant
        if not self.authenticated or grant is None or grant.branches == "*":
            return True
        return grant.may_name(ref, self.branches())

    def check_view(self, *refs: str) -> None:
        """Refuse (403) a ref the token may not name: the namespace's rule for the same token."""
        for ref in refs:
            if not self.may_name(ref):
                grant = self.grant
                raise ForbiddenError(f"{grant.label if grant else 'this session'} may name only branches matching "
                                     f"{grant.branches if grant else '*'!r} (and expressions on them), not {ref!r}")

    def may_write(self, branch: str) -> bool:
        """Whether this visitor may change ``branch`` (a write token whose glob covers it)."""
        return self.can_write and self.may_name(branch)

    def check_write(self, branch: str) -> None:
        if not self.can_write:
            raise ForbiddenError(f"{self.grant.label if self.grant else 'this session'} holds a read token: "
                                 "actions need a write token")
        self.check_view(branch)

    # -- parameters
    def text(self, name: str, default: str | None = None, *, required: bool = False, source: str = "query") -> str | None:
        """A text parameter (``required``: present and not blank), at most :data:`MAX_PARAM_CHARS`."""
        values = self.query if source == "query" else self.form
        value = values.get(name)
        if value is None or (required and not value.strip()):
            if required:
                raise BadRequestError(f"the address needs {name}=... (none given)")
            return default
        if len(value) > MAX_PARAM_CHARS:
            raise BadRequestError(f"{name}= is {len(value):,} characters long (at most {MAX_PARAM_CHARS:,})")
        if "\x00" in value:
            raise BadRequestError(f"{name}= holds a NUL character")
        return value

    def number(self, name: str, default: int, *, low: int = 1, high: int = MAX_PAGE) -> int:
        """A whole-number parameter in [``low``, ``high``]."""
        raw = self.query.get(name)
        if raw is None or raw == "":
            return default
        if len(raw) > 12 or not raw.isdigit() or not raw.isascii():
            raise BadRequestError(f"{name}= must be a whole number, not {raw[:40]!r}")
        value = int(raw)
        if not low <= value <= high:
            raise BadRequestError(f"{name}={value} is out of range ({low} to {high:,})")
        return value

    def flag(self, name: str) -> bool:
        return self.query.get(name, "") not in ("", "0", "false", "no")

    def paging(self) -> tuple[int, int]:
        """(page, rows per page) of ``page=`` and ``per=``."""
        return self.number("page", 1), self.number("per", DEFAULT_PER_PAGE, high=MAX_PER_PAGE)


class _Cache:
    """A few built objects by key, least recently used dropped first, each with a lock of its own
    (a diff's rows are built once, by one thread, and then read by the next pages)."""

    def __init__(self, size: int):
        self.size = size
        self._items: OrderedDict[Hashable, tuple[Any, threading.Lock]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable, build: Callable[[], T]) -> tuple[T, threading.Lock]:
        with self._lock:
            found = self._items.get(key)
            if found is not None:
                self._items.move_to_end(key)
                return found
        value = build()  # outside the lock: another page need not wait for this one's build
        with self._lock:
            found = self._items.setdefault(key, (value, threading.Lock()))
            while len(self._items) > self.size:
                self._items.popitem(last=False)
            return found


class Site:
    """The repository the pages show, opened on first use, and what pages share."""

    def __init__(self, config: ServeConfig):
        self.config = config
        self._repo: Repository | None = None
        self._ref: str | None = None
        self._lock = threading.Lock()
        self.write_lock = threading.Lock()  # one action at a time (each is a commit under a lease)
        self.diffs = _Cache(4)

    @property
    def repo(self) -> Repository:
        with self._lock:
            if self._repo is None:
                self._repo = Repository.open(self.config.root, storage_options=self.config.storage_options or None)
                self._ref = self.config.ref or self._repo.current_branch
            return self._repo

    @property
    def default_ref(self) -> str:
        """The branch others are compared with (ahead/behind, compare links): the server's ref, fixed at start."""
        self.repo
        assert self._ref is not None
        return self._ref

    @property
    def requests(self) -> Any:
        """``repo.requests`` (merge requests), or None on a trimerge without them."""
        return getattr(self.repo, "requests", None)

    def branch_names(self) -> set[str]:
        return set(self.repo.branches.names())
