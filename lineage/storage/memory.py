"""Keeping the C heap of a process that reads large Lance tables near what it uses.

Lance decodes on a pool of threads, and glibc serves threads from up to 8 arenas per core (16 here),
each keeping what is freed in it for its own reuse. After a 20M-row read those arenas hold
hundreds of MB the process no longer uses, and the next phase (Lance's commit of a large manifest)
adds to them: the 20M-row full-change merge peaked at 1.16–1.43 GB. Two arenas, and a
``malloc_trim`` between a merge's phases, bring it to 0.95 GB at the same speed. Elsewhere than
glibc there is nothing to do.

``TRIMERGE_MALLOC_ARENAS`` sets the arena limit (0: glibc's default); a ``MALLOC_ARENA_MAX`` set
by the user is left alone.
"""

from __future__ import annotations

import ctypes
import functools
import os
import sys

#: Arenas glibc may use (``mallopt(M_ARENA_MAX)``): enough for Lance's decode threads on few cores.
MALLOC_ARENAS = 2
_M_ARENA_MAX = -8  # glibc's mallopt parameter number


@functools.cache
def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:  # glibc's name first: ctypes.util (find_library runs ldconfig) only where it is another
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        from ctypes.util import find_library

        try:
            libc = ctypes.CDLL(find_library("c") or "libc.so.6")
        except OSError:
            return None
    return libc if hasattr(libc, "malloc_trim") else None


def release_freed_memory() -> None:
    """Return the C heap's free pages to the operating system (glibc only; a no-op elsewhere)."""
    libc = _libc()
    if libc is not None:
        libc.malloc_trim(0)


def limit_malloc_arenas() -> None:
    """Cap glibc's arenas (see the module docstring); called once when trimerge is imported, before
    Lance starts its threads."""
    libc = _libc()
    if libc is None or "MALLOC_ARENA_MAX" in os.environ or not hasattr(libc, "mallopt"):
        return
    try:
        arenas = int(os.environ.get("TRIMERGE_MALLOC_ARENAS", MALLOC_ARENAS))
    except ValueError:
        return
    if arenas > 0:
        libc.mallopt(_M_ARENA_MAX, arenas)
