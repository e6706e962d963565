"""Tables: the Lance side of the repository.

The table store (one Lance dataset per table lineage, forks as Lance branches), conversion of user
data to Arrow, filters, keyed/row/column/fragment writes, zero-copy import, indices, search, table
upkeep, scratch transactions, SQL over refs, and pinned copies of fork states served to other
Lance clients.

May import: :mod:`~trimerge.lineage.storage`, :mod:`~trimerge.lineage.history`,
:mod:`~trimerge.lineage.commit`, :mod:`~trimerge.lineage.errors`.
"""
