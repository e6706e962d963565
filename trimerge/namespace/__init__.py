"""The Lance Namespace adapter: any trimerge ref opens in LanceDB, pylance and other Lance clients.

``lance_namespace.connect("trimerge", {"root": URI, "ref": REF})`` and
``lancedb.connect_namespace("trimerge", {...})`` (registered by :mod:`.hook` when ``trimerge`` is
imported). It sits above the core and uses only its public facade and the table layer's pinned
fork states (:mod:`trimerge.lineage.tables.served`).
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trimerge.namespace.service import TrimergeNamespace as TrimergeNamespace

__all__ = ["TrimergeNamespace"]


def __getattr__(name: str) -> Any:
    # Lazy: the hook module is imported by every ``import trimerge``; the service loads Lance.
    if name == "TrimergeNamespace":
        from trimerge.namespace.service import TrimergeNamespace
        return TrimergeNamespace
    raise AttributeError(name)
