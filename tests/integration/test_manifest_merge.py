"""frazil's commits merge data manifests by tiers (``iceberg/pyiceberg_patches/manifest_merge``), against a real
SQLite catalog: every row and offset reads back, in the current snapshot and in older ones; each
data file keeps the sequence number of the commit that added it (position deletes depend on it);
the snapshot lists few manifests; manifests of two partition specs are never merged together;
``commit.manifest-merge.enabled = false`` is obeyed. Spark reads
merged manifests with deletes in tests/spark/test_mutations_spark.py."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from pyiceberg.catalog import Catalog
from test_committer import TP, rows

import support
from frazil import config
from frazil.iceberg import catalog as iceberg_catalog
from frazil.iceberg.committer import Committer
from frazil.iceberg.offsets import Range
from frazil.iceberg.pyiceberg_patches import manifest_merge

COMMITS = 70


def table_with(tmp_path: Path, properties: dict[str, str]) -> tuple[Catalog, config.Config]:
    cfg = support.load(support.write_config(tmp_path, "127.0.0.1:1", ["events"]))
    catalog = iceberg_catalog.load(cfg.catalog)
    table = iceberg_catalog.ensure_table(catalog, cfg.table)
    with table.transaction() as tx:
        tx.set_properties(properties)
    return catalog, cfg


def commit_tens(catalog: Catalog, cfg: config.Config, commits: int, *, respec_at: int | None = None) -> None:
    """``commits`` commits of 10 rows each; before commit ``respec_at`` the table's partition spec
    gains ``identity(name)``."""
    committer = Committer(catalog, cfg.table.name, cfg.pipeline, sleep=lambda s: None)
    for i in range(commits):
        if i == respec_at:
            with catalog.load_table(cfg.table.name).update_spec() as spec:
                spec.add_identity("name")
        committer.commit(rows(cfg, catalog, 10 * i, 10 * (i + 1)), {TP: Range(10 * i, 10 * (i + 1))}, f"c{i}")


def commit_all(catalog: Catalog, cfg: config.Config) -> dict[int, int]:
    """COMMITS commits of 10 rows; returns the snapshot id of each commit's offsets end."""
    committer = Committer(catalog, cfg.table.name, cfg.pipeline, sleep=lambda s: None)
    ends = {}
    for i in range(COMMITS):
        result = committer.commit(rows(cfg, catalog, 10 * i, 10 * (i + 1)), {TP: Range(10 * i, 10 * (i + 1))}, f"c{i}")
        assert result.snapshot_id is not None
        ends[10 * (i + 1)] = result.snapshot_id
    return ends


@pytest.mark.integration
def test_merged_manifests_hold_every_file_once_with_its_own_sequence_number(tmp_path: Path) -> None:
    catalog, cfg = table_with(tmp_path, {"commit.manifest.min-count-to-merge": "2"})   # merges on most commits
    ends = commit_all(catalog, cfg)
    table = catalog.load_table(cfg.table.name)

    counts = support.count_offsets(catalog, cfg.table.name)
    assert sorted(counts) == [("events", 0, o) for o in range(10 * COMMITS)] and set(counts.values()) == {1}
    manifests = table.current_snapshot().manifests(table.io)
    assert len(manifests) <= math.ceil(math.log2(COMMITS)) + 1, [m.manifest_path for m in manifests]
    assert sum(m.existing_files_count or 0 for m in manifests) > 0, "nothing was merged"

    # each live entry: added by the snapshot whose commit wrote it, with that snapshot's sequence number
    entries = table.inspect.entries().to_pylist()
    assert len(entries) == COMMITS and {e["status"] for e in entries} <= {0, 1}   # existing or added
    sequence = {s.snapshot_id: s.sequence_number for s in table.snapshots()}
    by_file = {}
    for e in entries:
        assert e["sequence_number"] == e["file_sequence_number"] == sequence[e["snapshot_id"]], e
        by_file[e["data_file"]["file_path"]] = e["snapshot_id"]
    assert len(by_file) == COMMITS and sorted(by_file.values()) == sorted(ends.values())

    # an older snapshot still reads as it was: merges write new manifests, never change old ones
    for end in (10, 160, 330):
        scanned = table.scan(snapshot_id=ends[end], selected_fields=("_kafka_offset",)).to_arrow()
        assert sorted(scanned.column("_kafka_offset").to_pylist()) == list(range(end))


@pytest.mark.integration
def test_a_table_that_turns_merging_off_gets_a_manifest_per_commit(tmp_path: Path) -> None:
    catalog, cfg = table_with(tmp_path, {"commit.manifest-merge.enabled": "false",
                                         "commit.manifest.min-count-to-merge": "2"})
    commit_all(catalog, cfg)
    table = catalog.load_table(cfg.table.name)
    manifests = table.current_snapshot().manifests(table.io)
    assert len(manifests) == COMMITS and all(m.existing_files_count == 0 for m in manifests)
    counts = support.count_offsets(catalog, cfg.table.name)
    assert sorted(counts) == [("events", 0, o) for o in range(10 * COMMITS)]


@pytest.mark.integration
def test_manifests_of_different_partition_specs_are_never_merged_together(tmp_path: Path) -> None:
    """After the table's partition spec changes, the manifests of the old spec merge among
    themselves and the new ones among themselves: a manifest holds the partition tuples of one spec."""
    catalog, cfg = table_with(tmp_path, {"commit.manifest.min-count-to-merge": "2"})
    commit_tens(catalog, cfg, 2 * COMMITS, respec_at=COMMITS // 2)
    table = catalog.load_table(cfg.table.name)
    manifests = table.current_snapshot().manifests(table.io)
    assert {m.partition_spec_id for m in manifests} == {0, 1}
    assert sum(m.existing_files_count or 0 for m in manifests if m.partition_spec_id == 1) > 0, "new spec never merged"
    for m in manifests:
        for entry in m.fetch_manifest_entry(table.io):
            assert entry.data_file.spec_id == m.partition_spec_id, (m.manifest_path, entry.data_file.file_path)
            assert len(entry.data_file.partition) == (1 if m.partition_spec_id == 1 else 0)
    counts = support.count_offsets(catalog, cfg.table.name)
    assert sorted(counts) == [("events", 0, o) for o in range(20 * COMMITS)] and set(counts.values()) == {1}


@pytest.mark.integration
def test_a_merge_builds_the_entries_of_manifests_this_process_wrote_exactly_as_they_read_back(tmp_path: Path) -> None:
    """A tier-0 merge takes its entries from the data files this process's appends wrote instead of
    reading the small manifests back; each must equal what pyiceberg reads from the file."""
    catalog, cfg = table_with(tmp_path, {"commit.manifest.min-count-to-merge": "1000"})   # nothing merges
    committer = Committer(catalog, cfg.table.name, cfg.pipeline, sleep=lambda s: None)
    for i in range(5):
        committer.commit(rows(cfg, catalog, 10 * i, 10 * (i + 1)), {TP: Range(10 * i, 10 * (i + 1))}, f"c{i}")
    table = catalog.load_table(cfg.table.name)
    manifests = table.current_snapshot().manifests(table.io)
    assert len(manifests) == 5
    for manifest in manifests:
        remembered = manifest_merge._entries_written(manifest)
        assert remembered is not None, f"{manifest.manifest_path} was written here but not remembered"
        assert manifest_merge._entries_written(manifest) is None   # taken out once used
        on_disk = manifest.fetch_manifest_entry(table.io, discard_deleted=False)
        assert len(remembered) == len(on_disk) >= 1
        for mine, theirs in zip(remembered, on_disk, strict=True):
            assert (mine.status, mine.snapshot_id, mine.sequence_number, mine.file_sequence_number) == (
                theirs.status, theirs.snapshot_id, theirs.sequence_number, theirs.file_sequence_number)
            assert mine.data_file._data == theirs.data_file._data
            assert mine.data_file.spec_id == theirs.data_file.spec_id
