"""What ``trimerge serve`` serves, and to whom (kept apart from the server stack, which is slow to import)."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any, Callable

from trimerge.serve.tokens import Grant

__all__ = ["ServeConfig"]


@dataclass
class ServeConfig:
    """What ``trimerge serve`` serves, and to whom."""

    root: str
    ref: str | None = None
    storage_options: dict[str, str] = field(default_factory=dict)
    #: None: no authentication (the server then listens on loopback only).
    grants: list[Grant] | None = None
    #: Hand the repository's storage options (credentials) to clients in ``describe_table``.
    share_storage_options: bool = False
    log: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True)
    #: More Starlette routes, answered before the namespace's (the web view mounts ``/ui`` here:
    #: :mod:`trimerge.pages`, composed by the CLI).
    routes: list[Any] = field(default_factory=list)
