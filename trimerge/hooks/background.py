"""Delivery from the writing process: after a ref changes, a thread delivers what the change
recorded, for a bounded time, without ever holding up the write.

The write is published before anyone is told (:data:`~trimerge.lineage.extensions.REF_LISTENERS`
runs after the swap), so nothing here can fail or undo it. The writer only notes what changed and
wakes a thread (one per repository location, kept a moment after its last pass so that a burst of
commits is one thread and few passes); the thread delivers on its own read-only
:class:`Repository`, never the writer's objects. When the process exits, it waits for a pass in
progress at most :data:`EXIT_WAIT` seconds (``TRIMERGE_HOOKS_WAIT``); whatever is left is
delivered later by ``trimerge hooks run``, ``trimerge serve`` or the next write's pass — the outbox
keeps it. ``TRIMERGE_HOOKS=off`` turns this off (the runners still deliver).
"""

from __future__ import annotations

import atexit
import os
import threading
import time
from typing import Any

#: Seconds the process waits at exit for its delivery threads' passes.
EXIT_WAIT = float(os.environ.get("TRIMERGE_HOOKS_WAIT", "5"))
#: Seconds one pass of the writer's thread may take (its attempts' timeouts are cut to fit).
PASS_DEADLINE = 60.0
#: Seconds a delivery thread waits for more work before it ends.
IDLE = 2.0

_lock = threading.Lock()
_changed = threading.Condition(_lock)
_workers: dict[str, "_Worker"] = {}


class _Worker(threading.Thread):
    """Delivers the branches and tags one repository location changed, until none are left."""

    def __init__(self, location: Any, moved_from: str | None):
        super().__init__(name=f"trimerge-hooks {location.uri}", daemon=True)
        self.location = location
        self.moved_from = moved_from
        self.branches: set[str] = set()
        self.tags = False
        self.busy = True  # until its first wait: the exit waits for a worker about to start

    def take(self) -> tuple[set[str], bool] | None:
        """The next work, waiting up to :data:`IDLE` seconds for some (the wait lets the writer
        go on at once: a thread started by a write never holds the interpreter while it finishes)."""
        with _lock:
            self.busy = False
            _changed.notify_all()
            deadline = time.monotonic() + IDLE
            while not self.branches and not self.tags:
                left = deadline - time.monotonic()
                if left <= 0:
                    _workers.pop(self.location.uri, None)
                    return None
                _changed.wait(left)
            work = (self.branches, self.tags)
            self.branches, self.tags, self.busy = set(), False, True
            return work

    def run(self) -> None:
        from trimerge.hooks.delivery import Deliverer, load_hooks
        from trimerge.lineage.repository import Repository

        repo = Repository(self.location, read_only=True, moved_from=self.moved_from)
        while (work := self.take()) is not None:
            branches, tags = work
            try:
                if not [h for h in load_hooks(repo.docs) if not h.gate]:
                    continue
                deadline = time.monotonic() + PASS_DEADLINE
                # A tag (or many branches) asks for a full pass; a few branches only for their moves.
                scope = None if tags or len(branches) > 8 else branches
                Deliverer(repo, deadline=deadline, respect_backoff=True, branches=scope).run()
            except Exception:  # noqa: BLE001 - the outbox keeps the events; a runner delivers them
                continue


def ref_changed(repo: Any, kind: str, name: str) -> None:
    """:data:`~trimerge.lineage.extensions.REF_LISTENERS` entry: note the change, wake (or start)
    the delivery thread."""
    if os.environ.get("TRIMERGE_HOOKS", "").lower() in ("off", "0", "no", "false"):
        return
    location = repo.location
    with _lock:
        worker = _workers.get(location.uri)
        fresh = worker is None
        if worker is None:
            worker = _workers[location.uri] = _Worker(location, getattr(repo.table_store, "moved_from", None))
        if kind == "tag":
            worker.tags = True
        else:
            worker.branches.add(name)
        _changed.notify_all()
    if fresh:
        worker.start()


def wait(timeout: float) -> None:
    """Wait up to ``timeout`` seconds until no delivery thread has work in hand or waiting."""
    deadline = time.monotonic() + timeout
    with _lock:
        while any(w.busy or w.branches or w.tags for w in _workers.values()):
            left = deadline - time.monotonic()
            if left <= 0:
                return
            _changed.wait(min(left, 0.5))


def _forget() -> None:
    """In a forked child: the parent's threads are not here (its next write starts its own)."""
    global _lock, _changed
    _lock = threading.Lock()
    _changed = threading.Condition(_lock)
    _workers.clear()


atexit.register(lambda: wait(EXIT_WAIT))
os.register_at_fork(after_in_child=_forget)
