"""Failure injection for the recovery tests.

``TRIMERGE_CRASH_AT=name`` kills the process with SIGKILL at the crash point of that name, so a
test can stop a writer at any step of a multi-table write and check what the next open recovers.
"""

from __future__ import annotations

import os


def crashpoint(name: str) -> None:
    if os.environ.get("TRIMERGE_CRASH_AT") == name:
        os.kill(os.getpid(), 9)
