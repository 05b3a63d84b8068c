"""pyiceberg's table metadata is shared, not deep-copied, after each change (installed by ``install_all``).

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
deep copy is the object itself. That holds for the pyiceberg releases in ``TESTED`` (the package
refuses any other); ``tests/integration/test_metadata_copies.py`` fails on another one and greps
pyiceberg's source for a second deep copy, so an upgrade is checked again before it ships. The change is
process-wide: any ``copy.deepcopy`` of table metadata, by pyiceberg or not, returns the object.

Retired by: a ``Transaction.table_metadata`` that is not recomputed and deep-copied on every read
(apache/iceberg-python PR #3784, carrying #3302; the cost is issue #2673), together with an
``update_table_metadata`` that does not deep-copy the frozen models it returns.
"""

from __future__ import annotations

from typing import Any

from pyiceberg.table.metadata import TableMetadataV1, TableMetadataV2, TableMetadataV3

_CLASSES = (TableMetadataV1, TableMetadataV2, TableMetadataV3)


def _shared(self: Any, memo: dict[int, Any] | None = None) -> Any:
    return self   # frozen, and never changed in place: the object is its own copy


def install() -> None:
    """Share metadata instead of deep-copying it; idempotent. Called by ``install_all`` only, after
    its version check."""
    for cls in _CLASSES:
        cls.__deepcopy__ = _shared   # type: ignore[method-assign]


def installed() -> bool:
    return all(cls.__dict__.get("__deepcopy__") is _shared for cls in _CLASSES)
