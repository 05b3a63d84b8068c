"""Maintenance jobs on the shared catalog: what they remove, and what they must never touch."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest
from helpers import make_table, rows
from pyiceberg.catalog import Catalog

from frazil.config import CatalogConfig, MaintenanceConfig
from frazil.iceberg import offsets
from frazil.iceberg.commits import find_commit
from frazil.iceberg.committer import Committer
from frazil.iceberg.offsets import Range
from frazil.spark.jobs import TableJobs
from frazil.spark.schedule import FULL_RUN, Job

pytestmark = pytest.mark.spark
TP = ("events", 0)


def commit_batches(catalog: Catalog, name: str, n: int, size: int = 100) -> Committer:
    table = make_table(catalog, name)
    committer = Committer(catalog, f"db.{name}", "p", sleep=lambda s: None)
    for i in range(n):
        committer.commit(rows(table, i * size, (i + 1) * size), {TP: Range(i * size, (i + 1) * size)}, f"{name}-{i}")
    return committer


def data_files(catalog: Catalog, name: str) -> list[str]:
    return catalog.load_table(f"db.{name}").inspect.files().column("file_path").to_pylist()


def test_compaction_rewrites_small_files_and_keeps_rows_and_offsets(spark: Any, catalog: Catalog,
                                                                    warehouse: CatalogConfig) -> None:
    commit_batches(catalog, "compact", 12)
    before = data_files(catalog, "compact")
    jobs = TableJobs(spark, warehouse.name, "db.compact", MaintenanceConfig(min_input_files=2, sort_order="id DESC"))
    results, failed = jobs.run((Job.COMPACT, Job.MANIFESTS))
    assert not failed
    table = catalog.load_table("db.compact")
    assert len(before) == 12 and len(data_files(catalog, "compact")) == 1
    assert results[0].counts["rewritten_data_files_count"] == 12 and results[0].counts["added_data_files_count"] == 1
    assert len(table.current_snapshot().manifests(table.io)) == 1
    assert sorted(table.scan().to_arrow().column("id").to_pylist()) == list(range(1200))
    assert offsets.stored_offsets(table.properties, "p") == {TP: 1200}


def test_expiry_bounds_the_snapshot_count_and_deletes_replaced_files(spark: Any, catalog: Catalog,
                                                                     warehouse: CatalogConfig) -> None:
    committer = commit_batches(catalog, "expire", 30)
    cfg = MaintenanceConfig(min_input_files=2, max_snapshots=10)
    jobs = TableJobs(spark, warehouse.name, "db.expire", cfg)
    replaced = data_files(catalog, "expire")
    assert not jobs.run((Job.COMPACT,))[1]
    table = make_table(catalog, "expire")
    for i in range(30, 36):  # ingestion goes on: the snapshots from before the compaction get old
        committer.commit(rows(table, i * 100, (i + 1) * 100), {TP: Range(i * 100, (i + 1) * 100)}, f"expire-{i}")
    results, failed = jobs.run((Job.EXPIRE,))
    assert not failed
    table = catalog.load_table("db.expire")
    assert len(table.snapshots()) == 5  # the newest half of max_snapshots
    # no kept snapshot reaches the files the compaction replaced: they are deleted with their snapshots
    assert results[0].counts["deleted_data_files_count"] == 30
    assert not [p for p in replaced if Path(p.removeprefix("file://")).exists()]
    assert table.scan().to_arrow().num_rows == 3600 and offsets.stored_offsets(table.properties, "p") == {TP: 3600}


def test_a_commit_whose_snapshot_was_expired_is_still_not_landed_twice(spark: Any, catalog: Catalog,
                                                                       warehouse: CatalogConfig) -> None:
    """Rule 5 after expiry: the commit id is gone with its snapshot, the offsets still refuse it."""
    committer = commit_batches(catalog, "resolve", 3)
    table = make_table(catalog, "resolve")
    retry = committer.write_files(rows(table, 100, 200))           # the second batch, written again
    assert find_commit(catalog.load_table("db.resolve"), "resolve-1") is not None
    jobs = TableJobs(spark, warehouse.name, "db.resolve", MaintenanceConfig(max_snapshots=2))
    assert not jobs.run((Job.EXPIRE,))[1]
    assert find_commit(catalog.load_table("db.resolve"), "resolve-1") is None
    result = committer.commit_files(retry, {TP: Range(100, 200)}, "resolve-1")
    assert result.already_committed and result.rows == 0
    assert catalog.load_table("db.resolve").scan().to_arrow().num_rows == 300


def test_orphan_removal_takes_old_unreferenced_files_and_spares_fresh_ones(spark: Any, catalog: Catalog,
                                                                           warehouse: CatalogConfig) -> None:
    committer = commit_batches(catalog, "orphans", 3)
    table = make_table(catalog, "orphans")
    crashed = committer.write_files(rows(table, 300, 400))      # a cycle that died before its commit, long ago
    pending = committer.write_files(rows(table, 300, 400))      # a cycle writing right now
    old = time.time() - 7200
    for f in crashed:
        os.utime(f.file_path.removeprefix("file://"), (old, old))
    committed = data_files(catalog, "orphans")
    jobs = TableJobs(spark, warehouse.name, "db.orphans", MaintenanceConfig(orphan_min_age_s=3600))
    results, failed = jobs.run((Job.ORPHANS,))
    assert not failed and results[0].counts["orphan_files_count"] >= 1
    assert not any(Path(f.file_path.removeprefix("file://")).exists() for f in crashed)
    assert all(Path(f.file_path.removeprefix("file://")).exists() for f in pending)
    assert all(Path(p.removeprefix("file://")).exists() for p in committed)
    # the pending files still commit, and the table reads whole
    committer.commit_files(pending, {TP: Range(300, 400)}, "orphans-3")
    assert catalog.load_table("db.orphans").scan().to_arrow().num_rows == 400


def test_position_deletes_written_by_spark_are_rewritten_and_stay_readable(spark: Any, catalog: Catalog,
                                                                           warehouse: CatalogConfig) -> None:
    commit_batches(catalog, "deletes", 4)
    spark.sql("ALTER TABLE lake.db.deletes SET TBLPROPERTIES ('write.delete.mode'='merge-on-read')")
    for lo in (0, 100, 200):  # three DELETEs: position delete files in three partitions' worth of files
        spark.sql(f"DELETE FROM lake.db.deletes WHERE id >= {lo} AND id < {lo + 10}")
    table = catalog.load_table("db.deletes")
    assert table.inspect.delete_files().num_rows == 3   # merge-on-read: position delete files, not rewrites
    jobs = TableJobs(spark, warehouse.name, "db.deletes", MaintenanceConfig(min_input_files=2))
    results, failed = jobs.run(FULL_RUN)
    assert not failed and [r.job for r in results] == list(FULL_RUN)
    table = catalog.load_table("db.deletes")
    ids = table.scan().to_arrow().column("id").to_pylist()   # pyiceberg applies what Spark wrote
    assert sorted(ids) == [i for i in range(400) if i >= 300 or i % 100 >= 10]
    assert offsets.stored_offsets(table.properties, "p") == {TP: 400}
