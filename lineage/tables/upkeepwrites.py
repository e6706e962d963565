"""Index and upkeep operations of a transaction: compaction, index creation, dropping and
optimisation, each one Lance commit of the table it changes, published with the transaction.

Mixed into :class:`~trimerge.lineage.transaction.Transaction`; it needs only the narrow interface
declared below (the same one :mod:`trimerge.lineage.tables.indices` writes through)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from trimerge.lineage.tables import indices, maintenance

if TYPE_CHECKING:
    import lance

    from trimerge.lineage.commit import TableVersion


class UpkeepWrites:
    """Compaction and index operations of a transaction."""

    if TYPE_CHECKING:  # what this part uses of the Transaction it is mixed into
        def _require_open(self) -> None: ...

        def dataset(self, table: str) -> lance.LanceDataset: ...

        def foreign_fragments(self, table: str) -> list[int]: ...

        def table_version(self, table: str) -> TableVersion: ...

        def set_index_params(self, table: str, params: tuple[tuple[str, str], ...]) -> None: ...

        def write_table(self, name: str, op: str, change: Callable[[lance.LanceDataset], Any], *,
                        row_level: bool = True) -> None: ...

    def compact(self, name: str) -> None:
        """Rewrite small fragments into larger ones, deletions materialised (content unchanged;
        an imported source's fragments are left alone)."""
        foreign = self.foreign_fragments(name)
        self.write_table(name, f"compact {name}", lambda ds: maintenance.optimize(ds, foreign))

    def optimize(self, name: str) -> None:
        """Compact ``name`` and add its unindexed rows to its indices (no change when there is nothing to do)."""
        self.compact(name)
        self.optimize_indices(name)

    def create_index(self, table: str, column: str, kind: str, *, name: str | None = None, replace: bool = False,
                     progress: Callable[[str, str], None] | None = None, **params: Any) -> None:
        """Build a Lance index on ``column``: ``kind`` is a Lance index type (vector ``IVF_PQ``,
        ``IVF_HNSW_SQ``, ``IVF_FLAT``; scalar ``BTREE``, ``BITMAP``, ``LABEL_LIST``; full text
        ``INVERTED``), ``params`` go to Lance (``num_partitions=``, ``metric=``, ...) and are checked
        before any effect. ``name`` defaults to ``<column>_idx``; ``replace`` rebuilds an existing one.
        ``progress`` (the shape of ``diff(progress=)``) hears ``(table, "start")``, Lance's build
        stages as they begin (``(table, "train_ivf")``, ``"shuffle"``, ``"load_data"``…: they vary
        with the kind and Lance's version) and ``(table, "done")``."""
        self._require_open()
        indices.create(self, table, indices.checked_spec(self.dataset(table), table, column, kind, name=name,
                                                         replace=replace, params=params), progress)

    def drop_index(self, table: str, name: str) -> None:
        """Drop the index ``name`` of ``table``."""
        self._require_open()
        indices.drop(self, table, name)

    def optimize_indices(self, table: str, progress: Callable[[str, str], None] | None = None) -> None:
        """Add the rows written since the indices of ``table`` were built to them (no retraining).
        ``progress`` hears ``(table, "start")``, Lance's stages if it reports any, ``(table, "done")``."""
        self._require_open()
        if progress is not None:
            progress(table, "start")
        if indices.stale(self.dataset(table), 0.0):
            self.write_table(table, f"optimize indices of {table}",
                             lambda ds: indices.optimize(ds, progress, table))
        if progress is not None:
            progress(table, "done")
