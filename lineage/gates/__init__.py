"""Gates: what a branch requires of its data, and where each value came from.

Data checks (SQL that must return no rows) and their incremental passes, derived-column
declarations, and blame (which commit last changed each cell).

May import every other part of :mod:`trimerge.lineage`; nothing in lineage imports gates except
the facade (:mod:`~trimerge.lineage.repository`), the transaction and the history verbs that must be
judged by them.
"""
