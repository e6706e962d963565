"""Which names a manifest or a document may give for a file below ``tables/``.

Lance and trimerge write file and folder names of a few plain shapes (``<bits><hex>.lance``,
``f-<ulid>``, ``3-<uuid>.txn``...). A name read from a repository someone else made — a data file a
manifest names, a fork's parent branch, an index's uuid — is used only if it is such a plain name,
exactly as spelled: a name that would need normalising (``x/../../PAYLOAD.lance``, ``a//b``,
``/abs``, ``a\\b``) is never normalised into shape but refused, so the name checked is the name used.
``%`` is refused too: Lance decodes it in paths, so ``x%2F..`` would reach another file than the
one checked. Both a clone (:mod:`trimerge.remotes.transfer`) and fsck use these rules.
"""

from __future__ import annotations

import re

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def plain_name(name: object) -> bool:
    """Whether ``name`` is one plain file or folder name: not empty, ``.`` or ``..``, without ``/``,
    ``\\``, ``%`` or a control character."""
    return (isinstance(name, str) and name not in ("", ".", "..") and not _CONTROL.search(name)
            and not any(c in name for c in "/\\%"))


def plain_path(path: object) -> bool:
    """Whether ``path`` is relative and every ``/``-separated part of it a :func:`plain_name`."""
    return isinstance(path, str) and all(plain_name(p) for p in path.split("/"))


def inside_table(key: object, dataset: str) -> bool:
    """Whether ``key`` (below ``tables/``) names a file inside ``dataset``'s folder as it is spelled."""
    return plain_path(key) and isinstance(key, str) and "/" in key and key.split("/", 1)[0] == dataset
