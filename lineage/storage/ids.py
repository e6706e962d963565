"""Fresh ULIDs (sortable by time) for documents, nonces, leases, commits and datasets.

python-ulid is imported on first use: its import asks ``importlib.metadata`` for its own version,
which reads every installed package's metadata — about 50 ms that a command which writes nothing
(``log``, ``read``, ``diff``) would pay for nothing.
"""

from __future__ import annotations


def new_ulid() -> str:
    """A new ULID as its 26 upper-case characters."""
    from ulid import ULID

    return str(ULID())
