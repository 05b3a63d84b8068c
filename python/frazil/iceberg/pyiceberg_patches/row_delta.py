"""Data files and position-delete files committed in one snapshot, for keyed tables (used by the
committer through ``mutations.RowDelta``).

frazil's keyed tables (``mode = "upsert"`` or ``"cdc"``, ``iceberg/mutations.py``) commit a batch's
new rows together with position deletes of the rows they replace, in one snapshot, as Java's
``RowDelta`` does (docs/position-deletes.md). pyiceberg 0.12 has no snapshot producer that adds
delete files: its producers append data files, or delete or overwrite whole ones. ``RowDelta`` is
frazil's tiered append (``manifest_merge.TieredAppend``) with the delete files written into their own
DELETES manifests beside the data manifests, and counted in the snapshot's summary. Without it a
keyed table cannot delete at all: it is not optional, which is why the package refuses an untested
pyiceberg rather than running without it.

It overrides private members of pyiceberg's snapshot producer (``_manifests``, ``_summary``,
``_added_data_files``, ``_compression``, ``_snapshot_id``) and of its manifest writer (``_meta``),
so it holds only on the releases in ``TESTED``. tests/integration/test_mutations.py checks every kept
manifest list of a keyed table (delete manifests among them) against its file, and
tests/spark/test_mutations_spark.py reads the result with pyiceberg and Spark.

Retired by: position-delete writes in pyiceberg (apache/iceberg-python issues #1078, "Support
Merge-on-Read mode for Deletes", and #3618, "Support merge-on-read deletes on v2 tables"), once they
include a snapshot producer that adds data files and delete files in one snapshot.
"""

from __future__ import annotations

from typing import Any

from pyiceberg.manifest import (
    DataFile,
    DataFileContent,
    ManifestContent,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestFile,
    ManifestWriterV2,
)
from pyiceberg.table import Transaction
from pyiceberg.table.snapshots import Operation

from frazil.iceberg.pyiceberg_patches.manifest_merge import TieredAppend


class _DeleteManifestWriter(ManifestWriterV2):
    """pyiceberg's v2 manifest writer, as a DELETES manifest (in the manifest list and its metadata)."""

    def content(self) -> ManifestContent:
        return ManifestContent.DELETES

    @property
    def _meta(self) -> dict[str, str]:
        return {**super()._meta, "content": "deletes"}


class RowDelta(TieredAppend):
    """An append of data files plus position-delete files, in one snapshot (operation
    ``overwrite``, as Java's RowDelta); data manifests merge by tiers (``manifest_merge``)."""

    remembers_written = False   # its data manifests may carry DELETED entries: merges read them back

    def __init__(self, transaction: Transaction, snapshot_properties: dict[str, str]) -> None:
        super().__init__(transaction, snapshot_properties, Operation.OVERWRITE)
        self._added_delete_files: list[DataFile] = []

    def add_delete_file(self, delete_file: DataFile) -> RowDelta:
        if delete_file.content != DataFileContent.POSITION_DELETES:
            raise ValueError(f"{delete_file.file_path} is not a position-delete file")
        self._added_delete_files.append(delete_file)
        return self

    def _manifests(self) -> list[ManifestFile]:
        manifests = super()._manifests()
        by_spec: dict[int, list[DataFile]] = {}
        for f in self._added_delete_files:
            by_spec.setdefault(f.spec_id or 0, []).append(f)
        for spec_id, files in sorted(by_spec.items()):
            writer = _DeleteManifestWriter(self.spec(spec_id), self.schema(), self.new_manifest_output(),
                                           self._snapshot_id, self._compression)
            with writer:
                for f in files:
                    writer.add(ManifestEntry.from_args(status=ManifestEntryStatus.ADDED, snapshot_id=self._snapshot_id,
                                                       sequence_number=None, file_sequence_number=None, data_file=f))
            manifests.append(writer.to_manifest_file())
        return manifests

    def _summary(self, snapshot_properties: dict[str, str] = {}) -> Any:   # noqa: B006 - pyiceberg's signature
        saved = self._added_data_files   # the summary collector counts delete files by their content
        self._added_data_files = saved + self._added_delete_files
        try:
            return super()._summary(snapshot_properties)
        finally:
            self._added_data_files = saved
