"""History: the commit graph and the names on it.

The content-addressed commit store, graph algorithms (merge bases, ancestry, order) over a small
read-only protocol, branches, tags, ``HEAD``, the reflog, ref expressions (``main~2^2``),
addresses, reset and restore, and the three-way merge of named definitions.

May import: :mod:`~trimerge.lineage.storage`, :mod:`~trimerge.lineage.commit`,
:mod:`~trimerge.lineage.errors`, :mod:`~trimerge.lineage.display`; for gates and protection it
takes what it needs as arguments or through the facade, never the table layer.
"""
