"""Data files' manifest records kept (``iceberg/pyiceberg_patches/data_file_records.py``) change no byte: against a
real SQLite catalog, on a tested pyiceberg release, every manifest is what pyiceberg's own writer
makes of the same entries, and a merge encodes no data file again."""

from __future__ import annotations

from pathlib import Path

import pyiceberg
import pytest
from pyiceberg.avro.resolver import construct_writer
from pyiceberg.avro.writer import Writer
from pyiceberg.manifest import (
    DataFile,
    DataFileContent,
    FileFormat,
    ManifestContent,
    ManifestEntry,
    ManifestWriter,
    data_file_with_partition,
    write_manifest,
)
from pyiceberg.table import Table
from pyiceberg.typedef import Record
from pyiceberg.types import DoubleType, IcebergType, LongType, NestedField, StructType
from test_committer import TP, rows
from test_manifest_merge import commit_tens, table_with

from frazil.iceberg import pyiceberg_patches
from frazil.iceberg.committer import Committer
from frazil.iceberg.offsets import Range
from frazil.iceberg.pyiceberg_patches import avro_records, data_file_records

pytestmark = [pytest.mark.integration]


def test_the_pyiceberg_version_is_the_one_whose_manifest_writer_was_checked(tmp_path: Path) -> None:
    """An upgrade fails here: check that ``ManifestWriter.new_writer`` still returns the file whose
    ``writer`` encodes each entry with a ``StructWriter`` (data file at field id 2), that a v2 data
    file's record holds nothing an entry or a later manifest changes, and that data files are still
    never rewritten under their path; then add the release to pyiceberg_patches.TESTED."""
    assert pyiceberg.__version__ in pyiceberg_patches.TESTED
    table_with(tmp_path, {})   # catalog.load installs it
    assert data_file_records.installed()


def manifest_bytes(table: Table, location: str, entries: list[ManifestEntry], spec_id: int) -> bytes:
    with write_manifest(format_version=2, spec=table.specs()[spec_id], schema=table.schema(),
                        output_file=table.io.new_output(location), snapshot_id=1, avro_compression="deflate") as writer:
        for entry in entries:
            writer.add_entry(entry)
        sync = writer._writer.sync_bytes
    return Path(location).read_bytes().replace(sync, b"-" * len(sync))


def test_every_manifest_is_byte_for_byte_what_pyiceberg_writes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Merged and one-file manifests under two partition specs (two data-file schemas), entries added
    and existing, rewritten with the kept records and with pyiceberg's own writer."""
    catalog, cfg = table_with(tmp_path, {"commit.manifest.min-count-to-merge": "3"})
    commit_tens(catalog, cfg, 10, respec_at=5)
    table = catalog.load_table(cfg.table.name)
    snapshot = table.current_snapshot()
    assert snapshot is not None
    manifests = [m for m in snapshot.manifests(table.io) if m.content == ManifestContent.DATA]
    assert ({m.partition_spec_id for m in manifests} == {0, 1}
            and max(m.existing_files_count or 0 for m in manifests) >= 2)
    for n, manifest in enumerate(manifests):
        entries = manifest.fetch_manifest_entry(table.io, discard_deleted=False)
        before = data_file_records._record.cache_info().misses
        kept = manifest_bytes(table, f"{tmp_path}/kept-{n}.avro", entries, manifest.partition_spec_id)
        assert data_file_records._record.cache_info().misses == before   # every record was kept
        with monkeypatch.context() as m:
            m.setattr(ManifestWriter, "new_writer", data_file_records._new_writer_original)
            theirs = manifest_bytes(table, f"{tmp_path}/theirs-{n}.avro", entries, manifest.partition_spec_id)
        assert kept == theirs, manifest.manifest_path


def test_a_merge_encodes_no_data_file_again(tmp_path: Path) -> None:
    catalog, cfg = table_with(tmp_path, {"commit.manifest.min-count-to-merge": "4"})
    committer = Committer(catalog, cfg.table.name, cfg.pipeline, sleep=lambda s: None)
    for i in range(9):   # tier-0 merges at the 4th and 8th commit
        before = data_file_records._record.cache_info().misses
        committer.commit(rows(cfg, catalog, 10 * i, 10 * (i + 1)), {TP: Range(10 * i, 10 * (i + 1))}, f"c{i}")
        assert data_file_records._record.cache_info().misses - before == 1   # the commit's own data file
    table = catalog.load_table(cfg.table.name)
    snapshot = table.current_snapshot()
    assert snapshot is not None
    assert sorted(m.existing_files_count or 0 for m in snapshot.manifests(table.io)) == [0, 3, 3]   # two merges
    assert sorted(table.scan().to_arrow().column("_kafka_offset").to_pylist()) == list(range(90))


def test_a_data_file_is_kept_apart_under_each_schema() -> None:
    """The same path under another data-file schema (a partition field promoted from long to double)
    is encoded again: the writer is part of the key."""
    def writer(partition_type: IcebergType) -> Writer:
        return construct_writer(data_file_with_partition(
            format_version=2, partition_type=StructType(NestedField(1000, "p", partition_type, required=False))))

    data_file = DataFile.from_args(content=DataFileContent.DATA, file_path="file:///promoted.parquet",
                                   file_format=FileFormat.PARQUET, partition=Record(1), record_count=3,
                                   file_size_in_bytes=10)
    as_long, as_double = writer(LongType()), writer(DoubleType())
    assert as_long is writer(LongType())   # one writer per schema
    kept = data_file_records._record(as_long, data_file), data_file_records._record(as_double, data_file)
    assert kept == (avro_records.encode(as_long, data_file), avro_records.encode(as_double, data_file))
    assert kept[0] != kept[1]


def test_kept_records_are_bounded_by_their_bytes(tmp_path: Path) -> None:
    catalog, cfg = table_with(tmp_path, {})
    Committer(catalog, cfg.table.name, cfg.pipeline).commit(rows(cfg, catalog, 0, 10), {TP: Range(0, 10)}, "c0")
    kept = data_file_records._record.cache
    assert kept.maxsize == data_file_records.MAX_BYTES and kept.currsize == sum(len(r) for r in kept.values()) > 0
