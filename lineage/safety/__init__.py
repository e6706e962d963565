"""Safety: nothing is lost and nothing is left half-done.

Recovery of interrupted multi-table writes, temporaries and their sweep, garbage collection of
unreachable Lance versions and forks, orphaned files, fsck, and the public API's boundary that turns
environment failures and panics into typed errors.

May import: :mod:`~trimerge.lineage.storage`, :mod:`~trimerge.lineage.history`,
:mod:`~trimerge.lineage.tables.conversion`, :mod:`~trimerge.lineage.commit`, :mod:`~trimerge.lineage.errors`.
"""
