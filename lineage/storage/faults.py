"""Failure injection for the recovery and gc tests.

``TRIMERGE_CRASH_AT=name`` kills the process with SIGKILL at the crash point of that name, so a
test can stop a writer at any step of a multi-table write and check what the next open recovers.
:func:`at` runs a function once at a named point instead, so a test can interleave two actors
deterministically (e.g. create a branch between two steps of gc).
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Callable, Iterator

_HOOKS: dict[str, list[Callable[[], None]]] = {}


def crashpoint(name: str) -> None:
    if os.environ.get("TRIMERGE_CRASH_AT") == name:
        os.kill(os.getpid(), 9)
    hooks = _HOOKS.pop(name, None)
    for hook in hooks or ():
        hook()


@contextmanager
def at(name: str, action: Callable[[], None]) -> Iterator[None]:
    """Run ``action`` the first time the code passes point ``name`` inside the ``with`` block."""
    _HOOKS.setdefault(name, []).append(action)
    try:
        yield
    finally:
        if action in _HOOKS.get(name, []):
            _HOOKS[name].remove(action)
            if not _HOOKS[name]:
                del _HOOKS[name]
