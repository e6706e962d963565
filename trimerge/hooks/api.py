"""``repo.hooks``: add, list, remove, deliver, log, test and status of a repository's hooks."""

from __future__ import annotations

import builtins
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Iterable

from trimerge.hooks import attempts
from trimerge.hooks.attempts import Attempt
from trimerge.hooks.cursor import Cursor
from trimerge.hooks.delivery import DeliveryReport, Deliverer, load_hooks, read_secret, send
from trimerge.hooks.model import (DEFAULT_RETRIES, DEFAULT_TIMEOUT, GATE_EVENT, Hook, HookNotFoundError, cursor_key,
                                  def_key, lease_key, secret_key, validate_command, validate_events, validate_glob,
                                  validate_name, validate_retries, validate_secret, validate_timeout, validate_url)
from trimerge.hooks.sources import Snapshot, initial_state, pending
from trimerge.lineage.commit import format_time
from trimerge.lineage.errors import AlreadyExistsError, CorruptRepositoryError, InvalidOperationError
from trimerge.lineage.history.refs import now
from trimerge.lineage.storage.ids import new_ulid


@dataclass(frozen=True)
class HookStatus:
    """How a hook's delivery goes: events ``pending``, ``delivered`` so far, ``failures`` in a
    row, when it tries again and the last error; ``gaps``: passes that found reflog entries gone
    before delivery (events lost to a retention that ignored the hook)."""

    name: str
    pending: int
    delivered: int
    failures: int
    retry_at: datetime | None
    last_error: str | None
    gaps: int = 0

    @property
    def healthy(self) -> bool:
        return self.failures == 0 and self.gaps == 0

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "pending": self.pending, "delivered": self.delivered, "failures": self.failures,
                "retry_at": format_time(self.retry_at) if self.retry_at else None, "last_error": self.last_error,
                "gaps": self.gaps}


class Hooks:
    """A repository's hooks (:mod:`trimerge.hooks`)."""

    def __init__(self, repo: Any):
        self.repo = repo
        self.docs = repo.docs

    def add(self, name: str, on: str | Iterable[str] = "post-merge", branch: str = "*", url: str | None = None,
            run: str | None = None, secret: str | bytes | None = None, gate: bool = False, *,
            timeout: float = DEFAULT_TIMEOUT, retries: int = DEFAULT_RETRIES, actor: str | None = None) -> Hook:
        """Add hook ``name``: on events ``on`` (a name, comma-separated names or a list) of the
        branches matching glob ``branch``, POST the event to ``url`` (signed with ``secret``) or
        run the shell command ``run`` with it on stdin. ``gate=True``: a pre-merge gate — it runs
        before a merge into its branch and a failure refuses the merge. Events recorded from now
        on are delivered; bad input raises and stores nothing."""
        self.repo.check_writable()
        validate_name(name)
        events = validate_events(on, gate)
        validate_glob(branch)
        if (url is None) == (run is None):
            raise InvalidOperationError("a hook has either url= (a webhook) or run= (a command), not "
                                        f"{'both' if url is not None else 'neither'}")
        if url is not None:
            validate_url(url)
        else:
            validate_command(run)
        if secret is not None and url is None:
            raise InvalidOperationError("a secret signs a webhook's requests: give it with url=, not run=")
        key = validate_secret(secret) if secret is not None else None
        hook = Hook(name, events, branch, url, run, bool(gate), validate_timeout(timeout), validate_retries(retries),
                    key is not None, now(), actor or self.repo.default_actor())
        if self.docs.exists(def_key(name)):
            raise AlreadyExistsError(f"hook {name!r} exists already (remove it first: 'trimerge hook remove {name}')")
        if not hook.gate:  # the cursor first: a definition is never seen without one
            Cursor.create(self.docs, name, initial_state(Snapshot(self.repo), new_ulid()))
        if key is not None:
            found = self.docs.read(secret_key(name), damaged_as_none=True)
            self.docs.write(secret_key(name), {"secret_hex": key.hex()}, found.version if found is not None else None)
        if self.docs.create(def_key(name), hook.to_json()) is None:
            raise AlreadyExistsError(f"hook {name!r} exists already (remove it first: 'trimerge hook remove {name}')")
        return hook

    def list(self) -> builtins.list[Hook]:
        """Every hook, by name."""
        return load_hooks(self.docs)

    def get(self, name: str) -> Hook:
        validate_name(name)
        for hook in self.list():
            if hook.name == name:
                return hook
        raise HookNotFoundError(f"no hook {name!r} (list them: 'trimerge hook list')")

    def remove(self, name: str) -> Hook | None:
        """Remove hook ``name``, its secret, cursor and log; its pending events are not delivered.
        Returns the hook as it was (None when its definition was damaged: removing it is the repair)."""
        self.repo.check_writable()
        validate_name(name)
        if not self.docs.exists(def_key(name)):
            raise HookNotFoundError(f"no hook {name!r} (list them: 'trimerge hook list')")
        found = self.docs.read(def_key(name), damaged_as_none=True)
        try:
            hook: Hook | None = Hook.from_json(found.doc if found else None, def_key(name), name)
        except CorruptRepositoryError:
            hook = None
        self.docs.delete(def_key(name))  # first: a runner stops at the next event
        for key in (secret_key(name), cursor_key(name), lease_key(name)):
            self.docs.delete(key)
        attempts.remove_all(self.docs, name)
        return hook

    def deliver(self, names: Iterable[str] | None = None, *, deadline: float | None = None) -> DeliveryReport:
        """Deliver what is pending now, to every hook (or those named), as ``trimerge hooks run``
        does once: failures are retried at once (a hook's backoff is for the background passes)."""
        wanted = [self.get(n).name for n in names] if names is not None else None
        return Deliverer(self.repo, deadline=deadline, wait=self.repo.lock_timeout).run(wanted)

    def log(self, name: str, limit: int | None = None) -> builtins.list[Attempt]:
        """Hook ``name``'s delivery attempts, newest first: event, id, status, code, duration."""
        self.get(name)
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
            raise InvalidOperationError(f"limit must be a non-negative whole number, not {limit!r}")
        return attempts.read(self.docs, name, limit)

    def test(self, name: str) -> Attempt:
        """Send hook ``name`` a test event now (``"test": true``, the tip of a branch it matches),
        once, without retries; the attempt is logged and returned. No cursor moves."""
        hook = self.get(name)
        snap = Snapshot(self.repo)
        import fnmatch

        branch = next((b for b in self.repo.refs.branch_names() if fnmatch.fnmatchcase(b, hook.branch)),
                      self.repo.current_branch)
        tip = snap.branch(branch)
        commit = self.repo.commit(tip.commit_id) if tip is not None else None
        event = hook.on[0]
        doc: dict[str, Any] = {"event": event, "id": f"test-{new_ulid()}", "test": True, "repository": self.repo.uri,
                               "time": format_time(now()), "branch": branch,
                               "commit": commit.id if commit else None,
                               "parents": list(commit.parents) if commit else [],
                               "message": commit.message if commit else None, "old": None,
                               "actor": self.repo.default_actor(), "tables": {}}
        if event == GATE_EVENT and commit is not None:
            doc["ref"] = commit.id
            doc["addresses"] = {t: f"{self.repo.uri}::{commit.id}::{t}" for t in sorted(commit.tables)}
        secret = read_secret(self.docs, name) if hook.url is not None else None
        outcome = send(self.repo, hook, doc, hook.timeout, secret)
        return attempts.record(self.docs, name, event, str(doc["id"]), 1, outcome, test=True)

    def status(self) -> builtins.list[HookStatus]:
        """Per hook (gates aside): pending events, deliveries, failures in a row, the last error."""
        out = []
        snap = Snapshot(self.repo)
        for hook in self.list():
            if hook.gate:
                continue
            cursor = Cursor.load(self.docs, hook.name)
            state = cursor.state if cursor is not None else {}
            waiting = len(pending(snap, hook, state)[0]) if cursor is not None else 0
            out.append(HookStatus(hook.name, waiting, int(state.get("delivered") or 0),
                                  cursor.failures if cursor else 0, cursor.retry_at() if cursor else None,
                                  state.get("last_error"), int(state.get("gaps") or 0)))
        return out


# The API's edge: a full disk or a dependency's panic leaves it as a TrimergeError (boundary.py).
from trimerge.lineage.safety.boundary import guard_class  # noqa: E402

guard_class(Hooks)
