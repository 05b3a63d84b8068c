"""pyiceberg's table metadata is shared, not deep-copied, after each change (installed by ``catalog.load``).

``pyiceberg.table.update.update_table_metadata`` ends every change with
``model_copy(deep=True)`` of the whole metadata, and a transaction calls it on every
``table_metadata`` access: about 14 full copies per append, 2 more in the catalog's commit. The
copies grow with the table's history (snapshots, their summaries, the snapshot and metadata logs),
and they were most of a commit's time and all of its growth: 191 ms at a table's 10th commit and
548 ms at its 200th, 450 of them copying (cProfile, maintenance off; docs/benchmarks.md, "Commit
cost").

The copy protects nothing that frazil's pyiceberg does: the metadata models are frozen (no field
can be set), each update builds new lists and dicts rather than changing the old ones, and
``update_table_metadata`` is the only place pyiceberg deep-copies metadata. So a metadata object's
deep copy is the object itself. That was checked against one pyiceberg version (``CHECKED``),
and it is only installed for that version; ``tests/integration/test_metadata_copies.py`` fails on another
one, so an upgrade is checked again before it ships.
"""

from __future__ import annotations

from typing import Any

from pyiceberg.table.metadata import TableMetadataV1, TableMetadataV2, TableMetadataV3

from frazil.iceberg import pinned

CHECKED = "0.12.0"
_CLASSES = (TableMetadataV1, TableMetadataV2, TableMetadataV3)


def _shared(self: Any, memo: dict[int, Any] | None = None) -> Any:
    return self   # frozen, and never changed in place: the object is its own copy


def install() -> bool:
    """Share metadata instead of deep-copying it, on the checked pyiceberg version only. Returns
    whether it is installed; idempotent."""
    if not pinned.on_checked_version(CHECKED, "metadata copies", "commits copy the whole table metadata on every "
                                     "change, and cost more as the table's history grows"):
        return False
    for cls in _CLASSES:
        cls.__deepcopy__ = _shared   # type: ignore[method-assign]
    return True


def installed() -> bool:
    return all(cls.__dict__.get("__deepcopy__") is _shared for cls in _CLASSES)
