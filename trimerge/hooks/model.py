"""What a hook is: its events, branch glob, target (a webhook URL or a command), and the checks that
refuse a bad definition before anything is stored.

A hook is repository state, like protection and merge requests (not versioned with commits):
``_trimerge/hooks/defs/<name>.json`` holds its definition and ``hooks/secrets/<name>.json`` the
webhook's secret, apart, so that nothing that lists or prints hooks ever reads it.
"""

from __future__ import annotations

import fnmatch
import math
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Iterable, Mapping
from urllib.parse import urlsplit

from trimerge.lineage.commit import format_time, parse_time
from trimerge.lineage.errors import CorruptRepositoryError, InvalidNameError, InvalidOperationError, NotFoundError

#: Events of ref moves and tags, delivered after they are published.
REF_EVENTS = ("post-commit", "post-merge", "post-branch-create", "post-branch-delete", "post-tag")
#: What merge requests record (:mod:`trimerge.lineage.history.requests`), as hook events.
REQUEST_KINDS = ("created", "reviewed", "enqueued", "dequeued", "merged", "closed", "reopened")
REQUEST_EVENTS = tuple(f"request-{kind}" for kind in REQUEST_KINDS)
#: A gate: runs before a merge into its branch, on the would-be result, and may refuse it.
GATE_EVENT = "pre-merge"
EVENTS = REF_EVENTS + REQUEST_EVENTS + (GATE_EVENT,)

DEFS, SECRETS, CURSORS, LEASES, LOGS = "hooks/defs", "hooks/secrets", "hooks/cursors", "hooks/leases", "hooks/log"
FORMAT = 1
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
_GLOB = re.compile(r"^[A-Za-z0-9._/*?\[\]!-]{1,200}$")
MAX_URL, MAX_COMMAND, MAX_SECRET = 2048, 8192, 4096
DEFAULT_TIMEOUT, MAX_TIMEOUT = 10.0, 3600.0
DEFAULT_RETRIES, MAX_RETRIES = 3, 10


class HookNotFoundError(NotFoundError):
    """No hook of that name."""


def validate_name(name: Any, what: str = "hook") -> str:
    """``name`` if it can name a hook (or a change-feed consumer: ``what``); else one clear line."""
    if not isinstance(name, str) or not _NAME.match(name):
        shown = repr(name) if not isinstance(name, str) or len(name) <= 60 else repr(name[:60] + "…")
        raise InvalidNameError(f"{what} name {shown} is not valid: 1-100 letters, digits, '.', '_' or '-', "
                               "starting with a letter or digit")
    return name


def validate_glob(glob: Any) -> str:
    """A branch glob (``*`` any characters, ``/`` included; ``?`` one; ``[...]`` a set)."""
    if not isinstance(glob, str) or not _GLOB.match(glob):
        raise InvalidNameError(f"branch glob {glob!r} is not valid: 1-200 characters of branch names "
                               "(letters, digits, '.', '_', '-', '/') and '*', '?', '[...]'")
    depth = 0
    for ch in glob:  # fnmatch reads an unclosed '[' as a plain character: say so instead
        if ch == "[":
            if depth:
                raise InvalidNameError(f"branch glob {glob!r}: '[' inside '[...]'")
            depth = 1
        elif ch == "]" and depth:
            depth = 0
    if depth:
        raise InvalidNameError(f"branch glob {glob!r}: '[' is never closed")
    return glob


def validate_events(on: Any, gate: Any) -> tuple[str, ...]:
    """The events a hook runs on: one name, a comma-separated text, or a list of names."""
    if not isinstance(gate, bool):
        raise InvalidOperationError(f"gate takes True or False, not {gate!r}")
    names: list[Any] = [p.strip() for p in on.split(",")] if isinstance(on, str) else \
        list(on) if isinstance(on, (list, tuple)) else [on]
    if not names or any(not isinstance(n, str) or n not in EVENTS for n in names):
        bad = next((n for n in names if not isinstance(n, str) or n not in EVENTS), on)
        raise InvalidOperationError(f"unknown hook event {bad!r} (events: {', '.join(EVENTS)})")
    events = tuple(dict.fromkeys(names))
    if gate:
        # A gate judges a merge before it lands: its event is pre-merge whatever else was named.
        if any(e not in (GATE_EVENT, "post-merge") for e in events):
            raise InvalidOperationError("a gate runs before a merge into its branch: give it on='pre-merge' "
                                        f"(not {', '.join(e for e in events if e not in (GATE_EVENT, 'post-merge'))})")
        return (GATE_EVENT,)
    if GATE_EVENT in events:
        raise InvalidOperationError("a pre-merge hook is a gate: add it with gate=True (--gate)")
    return events


def validate_url(url: Any) -> str:
    """An ``http(s)://host[:port]/...`` URL; anything else (other schemes, credentials in the URL,
    spaces or control characters) is refused."""
    if not isinstance(url, str) or not url or len(url) > MAX_URL:
        raise InvalidOperationError(f"a webhook URL is text of 1-{MAX_URL} characters")
    if any(ord(ch) < 33 or ord(ch) == 127 for ch in url):
        raise InvalidOperationError("a webhook URL may not contain spaces or control characters")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises on a port that is not a number in range
    except ValueError as exc:
        raise InvalidOperationError(f"webhook URL {shown_url(url)!r} is malformed ({exc})") from None
    if parts.scheme.lower() not in ("http", "https"):
        raise InvalidOperationError(f"webhook URL {shown_url(url)!r}: only http:// and https:// URLs are delivered to")
    if not parts.hostname:
        raise InvalidOperationError(f"webhook URL {shown_url(url)!r} names no host")
    if parts.username is not None or parts.password is not None:
        raise InvalidOperationError("a webhook URL may not hold credentials (user:password@); sign the requests "
                                    "with a secret instead (--secret-file)")
    return url


def shown_url(url: str) -> str:
    """``url`` for messages: at most 200 characters, without any ``user:password@``."""
    text = str(url)
    if "@" in text.split("://", 1)[-1].split("/", 1)[0]:
        scheme, _, rest = text.partition("://")
        text = f"{scheme}://…@{rest.split('@', 1)[1]}"
    return text if len(text) <= 200 else text[:200] + "…"


def validate_command(run: Any) -> str:
    if not isinstance(run, str) or not run.strip() or len(run) > MAX_COMMAND or "\x00" in run:
        raise InvalidOperationError(f"a hook command is non-empty text of at most {MAX_COMMAND} characters")
    return run


def validate_secret(secret: Any) -> bytes:
    """The secret as bytes (text is UTF-8 encoded); never echoed in any message."""
    if isinstance(secret, str):
        secret = secret.encode("utf-8", "surrogatepass") if secret else b""
    if not isinstance(secret, bytes) or not secret or len(secret) > MAX_SECRET or b"\x00" in secret:
        raise InvalidOperationError(f"a webhook secret is 1-{MAX_SECRET} bytes of text without NUL")
    return secret


def validate_timeout(timeout: Any) -> float:
    ok = isinstance(timeout, (int, float)) and not isinstance(timeout, bool) and math.isfinite(timeout)
    if not ok or not 0 < timeout <= MAX_TIMEOUT:
        raise InvalidOperationError(f"a hook timeout is a number of seconds greater than 0, at most {MAX_TIMEOUT:g}")
    return float(timeout)


def validate_retries(retries: Any) -> int:
    if not isinstance(retries, int) or isinstance(retries, bool) or not 0 <= retries <= MAX_RETRIES:
        raise InvalidOperationError(f"hook retries is a whole number from 0 to {MAX_RETRIES}")
    return retries


@dataclass(frozen=True)
class Hook:
    """One hook: runs on ``on`` (event names) for branches matching ``branch`` (tags: the tag name;
    merge requests: their target), by POSTing to ``url`` or running ``run``. ``gate``: a
    pre-merge hook that may refuse the merge. ``has_secret``: the webhook's requests are signed."""

    name: str
    on: tuple[str, ...]
    branch: str
    url: str | None
    run: str | None
    gate: bool
    timeout: float
    retries: int
    has_secret: bool
    created_at: datetime
    actor: str

    @property
    def kind(self) -> str:
        return "webhook" if self.url is not None else "command"

    @property
    def target(self) -> str:
        """What it delivers to, for listings: the URL (without credentials) or the command."""
        return shown_url(self.url) if self.url is not None else str(self.run)

    def wants(self, event: str, subject: str | None) -> bool:
        """Whether this hook runs on ``event`` for ``subject`` (a branch, tag or request target)."""
        return event in self.on and subject is not None and fnmatch.fnmatchcase(subject, self.branch)

    def to_json(self) -> dict[str, Any]:
        """The definition as stored (never the secret: only whether there is one)."""
        return {"format": FORMAT, "name": self.name, "on": list(self.on), "branch": self.branch, "url": self.url,
                "run": self.run, "gate": self.gate, "timeout": self.timeout, "retries": self.retries,
                "secret": self.has_secret, "created_at": format_time(self.created_at), "actor": self.actor}

    def describe(self) -> dict[str, Any]:
        """The definition as shown (``hook list``): the URL without credentials, no secret."""
        doc = self.to_json()
        doc.pop("format")
        doc["url"] = shown_url(self.url) if self.url is not None else None
        doc["kind"] = self.kind
        return doc

    @classmethod
    def from_json(cls, doc: Any, where: str, name: str = "NAME") -> "Hook":
        try:
            if not isinstance(doc, Mapping):
                raise TypeError("not an object")
            url, run = doc.get("url"), doc.get("run")
            if (url is None) == (run is None):
                raise ValueError("exactly one of url and run")
            return cls(validate_name(doc["name"]), validate_events(doc["on"], bool(doc.get("gate", False))),
                       validate_glob(doc["branch"]), validate_url(url) if url is not None else None,
                       validate_command(run) if run is not None else None, bool(doc.get("gate", False)),
                       validate_timeout(doc.get("timeout", DEFAULT_TIMEOUT)),
                       validate_retries(doc.get("retries", DEFAULT_RETRIES)), bool(doc.get("secret", False)),
                       parse_time(doc["created_at"]), str(doc.get("actor", "")))
        except (KeyError, TypeError, ValueError) as exc:
            raise CorruptRepositoryError(f"{where}: malformed hook definition ({exc}); remove it with "
                                         f"'trimerge hook remove {name}' and add it again") from None


def def_key(name: str) -> str:
    return f"{DEFS}/{name}.json"


def secret_key(name: str) -> str:
    return f"{SECRETS}/{name}.json"


def cursor_key(name: str) -> str:
    return f"{CURSORS}/{name}.json"


def lease_key(name: str) -> str:
    return f"{LEASES}/{name}.lock"


def log_folder(name: str) -> str:
    return f"{LOGS}/{name}"


def names_in(keys: Iterable[str]) -> list[str]:
    """Hook names of the documents ``keys`` (``.../<name>.json``), sorted."""
    return sorted(k.rsplit("/", 1)[-1].removesuffix(".json") for k in keys)
