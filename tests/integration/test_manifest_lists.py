"""Manifest lists kept by location (``iceberg/pyiceberg_patches/manifest_lists.py``) change no result: against a real
SQLite catalog, on a tested pyiceberg release. Every kept list equals pyiceberg's own read of
the file, field by field; a commit reads no list file this process wrote; a list another process
wrote is read from its file. Keyed tables' lists (delete manifests) are checked the same way in
tests/integration/test_mutations.py."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from copy import deepcopy
from pathlib import Path

import pyarrow as pa
import pyiceberg
import pytest
from pyiceberg import manifest as pyiceberg_manifest
from pyiceberg.avro.resolver import resolve_writer
from pyiceberg.io import InputFile
from pyiceberg.manifest import (
    DEFAULT_READ_VERSION,
    MANIFEST_LIST_FILE_SCHEMAS,
    ManifestFile,
    read_manifest_list,
    write_manifest_list,
)
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.types import LongType, NestedField
from test_committer import TP, rows
from test_manifest_merge import commit_tens, table_with

import support
from frazil.iceberg import pyiceberg_patches
from frazil.iceberg.committer import Committer
from frazil.iceberg.offsets import Range
from frazil.iceberg.pyiceberg_patches import avro_records, manifest_lists

pytestmark = [pytest.mark.integration]


def assert_kept_lists_match(table: Table) -> int:
    """Every snapshot's manifest list that is kept equals what pyiceberg reads from its file; returns how many were."""
    checked = 0
    for snapshot in table.snapshots():
        kept = manifest_lists.kept(snapshot.manifest_list)
        if kept is None:
            continue
        on_disk: list[ManifestFile] = list(read_manifest_list(table.io.new_input(snapshot.manifest_list)))
        assert len(kept) == len(on_disk), snapshot.manifest_list
        for mine, theirs in zip(kept, on_disk, strict=True):
            assert mine._data == theirs._data, (snapshot.manifest_list, mine, theirs)
        checked += 1
    return checked


def test_the_pyiceberg_version_is_the_one_whose_manifest_list_code_was_checked(tmp_path: Path) -> None:
    """An upgrade fails here: check that ``Snapshot.manifests`` still reads through
    ``pyiceberg.table.snapshots._manifests``, that ``ManifestListWriter.add_manifests`` still only
    prepares and writes its manifests, and that manifest lists are still never rewritten; then add the
    release to pyiceberg_patches.TESTED."""
    assert pyiceberg.__version__ in pyiceberg_patches.TESTED
    table_with(tmp_path, {})   # catalog.load installs it
    assert manifest_lists.installed()


def test_every_kept_list_is_what_its_file_holds(tmp_path: Path) -> None:
    """Appends that merge manifests (tier 0 every other commit), a partition spec change (partition
    summaries with bounds), pyiceberg's own append and overwrite, and a rollback."""
    catalog, cfg = table_with(tmp_path, {"commit.manifest.min-count-to-merge": "2"})
    commit_tens(catalog, cfg, 12, respec_at=6)
    table = catalog.load_table(cfg.table.name)
    table.append(rows(cfg, catalog, 1000, 1010))
    table = catalog.load_table(cfg.table.name)
    table.delete("_kafka_offset < 5")
    table = catalog.load_table(cfg.table.name)
    table.manage_snapshots().rollback_to_snapshot(table.snapshots()[3].snapshot_id).commit()
    table = catalog.load_table(cfg.table.name)
    assert any(m.partitions for s in table.snapshots() for m in s.manifests(table.io)), "no partition summaries"
    assert assert_kept_lists_match(table) == len(table.snapshots())



def test_a_v1_table_upgraded_to_v2_commits_on_its_kept_lists(tmp_path: Path) -> None:
    """A v1 list's new manifests are written with unassigned sequence numbers and read back with 0:
    such a list is kept from a read, never from the write. Upgraded to v2 (as Spark's
    ``format-version`` property does), the table's next commit builds on the v1 parent list."""
    catalog, cfg = table_with(tmp_path, {})
    schema = Schema(NestedField(1, "id", LongType(), required=False))
    catalog.create_table("db.v1", schema, properties={"format-version": "1"})
    committer = Committer(catalog, "db.v1", "p", sleep=lambda s: None)
    for i in range(3):
        committer.commit(pa.table({"id": [i]}), {TP: Range(i, i + 1)}, f"v1-{i}")
    table = catalog.load_table("db.v1")
    assert table.metadata.format_version == 1
    for snapshot in table.snapshots():
        snapshot.manifests(table.io)
    assert assert_kept_lists_match(table) == 3
    with table.transaction() as tx:
        tx.upgrade_table_version(format_version=2)
    result = committer.commit(pa.table({"id": [3]}), {TP: Range(3, 4)}, "v2-3")
    assert result.snapshot_id is not None
    table = catalog.load_table("db.v1")
    assert table.metadata.format_version == 2 and assert_kept_lists_match(table) == 4
    assert sorted(table.scan().to_arrow().column("id").to_pylist()) == [0, 1, 2, 3]

def test_a_commit_reads_no_manifest_list_this_process_wrote(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    catalog, cfg = table_with(tmp_path, {"commit.manifest.min-count-to-merge": "4"})
    committer = Committer(catalog, cfg.table.name, cfg.pipeline, sleep=lambda s: None)
    committer.commit(rows(cfg, catalog, 0, 10), {TP: Range(0, 10)}, "c0")
    reads: list[str] = []
    original = pyiceberg_manifest.read_manifest_list

    def counted(input_file: InputFile) -> object:
        reads.append(input_file.location)
        return original(input_file)

    monkeypatch.setattr(pyiceberg_manifest, "read_manifest_list", counted)
    for i in range(1, 10):   # merges at every 4th
        committer.commit(rows(cfg, catalog, 10 * i, 10 * (i + 1)), {TP: Range(10 * i, 10 * (i + 1))}, f"c{i}")
    assert reads == []
    counts = support.count_offsets(catalog, cfg.table.name)
    assert sorted(counts) == [("events", 0, o) for o in range(100)] and set(counts.values()) == {1}


def test_a_list_another_process_wrote_is_read_from_its_file(tmp_path: Path) -> None:
    catalog, cfg = table_with(tmp_path, {})
    committer = Committer(catalog, cfg.table.name, cfg.pipeline, sleep=lambda s: None)
    committer.commit(rows(cfg, catalog, 0, 10), {TP: Range(0, 10)}, "c0")
    props = cfg.catalog.properties
    script = textwrap.dedent(f"""
        from pyiceberg.catalog.sql import SqlCatalog
        catalog = SqlCatalog({cfg.catalog.name!r}, uri={props['uri']!r}, warehouse={props['warehouse']!r})
        table = catalog.load_table({cfg.table.name!r})
        table.append(table.scan().to_arrow())
    """)
    subprocess.run([sys.executable, "-c", script], check=True, timeout=120)
    table = catalog.load_table(cfg.table.name)
    theirs = table.current_snapshot()
    assert theirs is not None
    assert manifest_lists.kept(theirs.manifest_list) is None
    assert len(theirs.manifests(table.io)) == 2   # read from the file, and kept from then on
    assert manifest_lists.kept(theirs.manifest_list) is not None
    committer.commit(rows(cfg, catalog, 10, 20), {TP: Range(10, 20)}, "c1")
    table = catalog.load_table(cfg.table.name)
    assert assert_kept_lists_match(table) == 3
    assert table.scan().to_arrow().num_rows == 30


def test_a_list_write_encodes_only_the_new_manifests_into_the_bytes_pyiceberg_writes(tmp_path: Path) -> None:
    """Each manifest's v2 record is encoded once and kept: a commit encodes its new manifest only, and
    the list file is byte for byte the one pyiceberg's own writer makes of the same manifests (bar the
    random sync marker)."""
    catalog, cfg = table_with(tmp_path, {"commit.manifest.min-count-to-merge": "100"})
    committer = Committer(catalog, cfg.table.name, cfg.pipeline, sleep=lambda s: None)
    for i in range(6):
        before = manifest_lists._record.cache_info().misses
        committer.commit(rows(cfg, catalog, 10 * i, 10 * (i + 1)), {TP: Range(10 * i, 10 * (i + 1))}, f"c{i}")
        assert manifest_lists._record.cache_info().misses - before == 1
    table = catalog.load_table(cfg.table.name)
    snapshot = table.current_snapshot()
    assert snapshot is not None and snapshot.sequence_number is not None
    manifests = list(snapshot.manifests(table.io))
    assert len(manifests) == 6 and assert_kept_lists_match(table) == 6

    def written(name: str, kept: bool) -> bytes:
        location = f"{tmp_path}/{name}.avro"
        with write_manifest_list(format_version=2, output_file=table.io.new_output(location),
                                 snapshot_id=snapshot.snapshot_id, parent_snapshot_id=snapshot.parent_snapshot_id,
                                 sequence_number=snapshot.sequence_number, avro_compression="deflate") as writer:
            if kept:
                writer.add_manifests(manifests)
            else:   # pyiceberg's own add_manifests: its record writer encodes every manifest
                writer._writer.write_block([writer.prepare_manifest(m) for m in manifests])
            sync = writer._writer.sync_bytes
        return Path(location).read_bytes().replace(sync, b"-" * len(sync))

    before = manifest_lists._record.cache_info().misses
    assert written("kept", True) == written("pyiceberg", False)
    assert manifest_lists._record.cache_info().misses == before

    # a manifest under another sequence number, or in a v1 list, is its own record
    v2, v1 = (resolve_writer(record_schema=MANIFEST_LIST_FILE_SCHEMAS[DEFAULT_READ_VERSION],
                             file_schema=MANIFEST_LIST_FILE_SCHEMAS[version]) for version in (2, 1))
    renumbered = deepcopy(manifests[0])   # a copy() shares the record's fields
    renumbered.sequence_number = manifests[0].sequence_number + 100
    for writer, manifest in ((v2, manifests[0]), (v2, renumbered), (v1, manifests[0])):
        assert manifest_lists._record(writer, manifest) == avro_records.encode(writer, manifest)
    assert manifest_lists._record(v2, renumbered) != manifest_lists._record(v2, manifests[0])
    assert manifest_lists._record(v1, manifests[0]) != manifest_lists._record(v2, manifests[0])


def test_a_list_whose_write_failed_is_not_kept(tmp_path: Path) -> None:
    catalog, cfg = table_with(tmp_path, {})
    table = catalog.load_table(cfg.table.name)
    location = f"{tmp_path}/failed-list.avro"
    with pytest.raises(RuntimeError, match="in the middle"):
        with write_manifest_list(format_version=2, output_file=table.io.new_output(location), snapshot_id=1,
                                 parent_snapshot_id=None, sequence_number=1, avro_compression="deflate") as writer:
            writer.add_manifests([])
            raise RuntimeError("in the middle")
    assert manifest_lists.kept(location) is None


def test_kept_lists_are_bounded_by_their_manifests(monkeypatch: pytest.MonkeyPatch) -> None:
    """Weighed by their manifests plus one, least recently used out first; a list heavier than the
    whole bound is not kept (it is read from its file each time)."""
    monkeypatch.setattr(manifest_lists, "_kept", manifest_lists.new_cache(10))
    one = (object(),)
    for i in range(7):
        manifest_lists.keep(f"l{i}", one)   # type: ignore[arg-type]
    assert manifest_lists.kept("l0") is None and manifest_lists.kept("l2") is one and manifest_lists.kept("l6") is one
    manifest_lists.keep("big", (object(),) * 5)   # type: ignore[arg-type]
    assert manifest_lists.kept("l3") is None and manifest_lists.kept("l2") is one and manifest_lists.kept("big")
    manifest_lists.keep("l2", (object(),) * 10)   # type: ignore[arg-type]
    assert manifest_lists.kept("l2") is None
