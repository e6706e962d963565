"""Gates: what a branch requires of its data, and where each value came from.

Data checks (SQL that must return no rows) and their incremental passes, derived-column
declarations, and blame (which commit last changed each cell).

May import :mod:`~trimerge.lineage.tables` and every room below it, and the Protocols of
:mod:`~trimerge.lineage.hosts`; only safety (gc forgets check passes) and the facade-level verbs
(repository, transaction, restore) import gates.
"""
