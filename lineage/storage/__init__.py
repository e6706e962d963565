"""Storage: where bytes live and how they are read and swapped safely.

Backends (local disk, S3, GCS, Azure through obstore), the repository's location and marker,
JSON documents with compare-and-swap, leases, settings, failure injection, and small helpers that
sit under everything (lazy imports, memory tuning, output checks, JSON values).

May import: :mod:`trimerge.lineage.errors`, :mod:`trimerge.lineage.display`, and itself. Nothing
here knows about commits, refs or tables.
"""
