"""Tables: the Lance side of the repository.

The table store (one Lance dataset per table lineage, forks as Lance branches), conversion of user
data to Arrow, filters, keyed/row/column/fragment writes, zero-copy import, indices, search, table
upkeep, one row's history (entities), SQL over refs, pinned copies of fork states served to other
Lance clients, relocation of a copied repository's fork manifests (basepaths, relocation), and
the names a manifest may give for a file below ``tables/`` (keys).

May import: :mod:`~trimerge.lineage.storage`, :mod:`~trimerge.lineage.history`,
:mod:`~trimerge.lineage.ports` and the shared vocabulary; :mod:`~trimerge.lineage.hosts` (the
Protocols naming the table store) only for type checking.
"""
