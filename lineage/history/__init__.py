"""History: the commit graph and the names on it.

The content-addressed commit store, graph algorithms (merge bases, ancestry, order) over a small
read-only protocol, branches, tags, ``HEAD``, the reflog, ref expressions (``main~2^2``),
addresses, branch protection, retention records of deleted branches, reset, and the three-way
merge of named definitions.

May import: :mod:`~trimerge.lineage.storage` and the shared vocabulary (commit, errors,
display); the Protocols it is given (:mod:`~trimerge.lineage.ports`) only for type checking. Never
the table layer, gates or the facade.
"""
