"""Spark SQL reads frazil's keyed tables: a Debezium CDC stream landed by ``frazil run`` with
position deletes (partitioned by a bucket of the key), read by Spark and by pyiceberg, both equal
to the reference computed from the topic. The table merges its data manifests on most commits
(``min-count-to-merge = 2``, ``iceberg/manifest_merge``), so both engines apply deletes across
merged manifests. Then Spark compacts the table (data files rewritten, frazil's deletes applied
into them) and frazil goes on: its key index follows the compacted files, and both engines still
agree with the reference."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import changes
import support
from frazil.config import CatalogConfig, MaintenanceConfig
from frazil.spark import merge, session
from frazil.spark.jobs import TableJobs
from frazil.spark.schedule import Job
from frazil_dev.kafka_broker import KafkaBroker
from frazil_dev.s3 import S3Server

pytestmark = [pytest.mark.spark, pytest.mark.integration]

PARTITIONS = 2


def spark_rows(spark: Any, table: str) -> dict[int, changes.Row]:
    rows = spark.sql(f"SELECT id, name, amount, version FROM {table}").collect()
    ids = [r.id for r in rows]
    assert len(ids) == len(set(ids)), f"Spark sees {len(ids) - len(set(ids))} key(s) twice in {table}"
    return {r.id: (r.name, r.amount, r.version) for r in rows}


def test_spark_and_pyiceberg_read_the_latest_row_of_every_key_before_and_after_compaction(
        kafka: KafkaBroker, tmp_path: Path, spark: Any, warehouse: CatalogConfig) -> None:
    topic = "cdc-spark"
    asyncio.run(support.create_topic(kafka.bootstrap, topic, PARTITIONS))
    path = changes.config(tmp_path, kafka.bootstrap, topic, "cdc-spark", mode="cdc",
                          extra_table='partition_by = ["bucket[4](id)"]\n'
                                      # manifests merge on most commits: Spark applies deletes across merged ones
                                      'properties = { "commit.manifest.min-count-to-merge" = "2" }',
                          catalog=(warehouse.name, {k: v for k, v in warehouse.properties.items() if k != "type"}))
    cfg = support.load(path)
    catalog = support.catalog_of(cfg)
    name = f"{warehouse.name}.{cfg.table.name}"

    def land(stream: list, when: str) -> None:  # type: ignore[type-arg]
        ends = asyncio.run(changes.produce(kafka.bootstrap, topic, iter(stream), PARTITIONS))
        changes.run_until_committed(path, ends, tmp_path / "frazil.log")
        expected = asyncio.run(changes.reference(kafka.bootstrap, topic, PARTITIONS, mode="cdc"))
        changes.assert_same(changes.table_rows(catalog, cfg.table.name), expected, f"pyiceberg {when}")
        spark.sql(f"REFRESH TABLE {name}")
        changes.assert_same(spark_rows(spark, name), expected, f"Spark SQL {when}")

    stream = list(changes.debezium_stream(200, 6000, seed=5))
    for chunk in range(0, 6000, 2000):   # several runs and commits, each replacing rows of the ones before
        land(stream[chunk:chunk + 2000], f"after changes {chunk}..{chunk + 2000}")
    deletes = spark.sql(f"SELECT count(*) AS n FROM {name}.position_deletes").collect()[0].n
    assert deletes > 0, "frazil's updates must be position deletes Spark sees"
    merged = spark.sql(f"SELECT sum(existing_data_files_count) AS n FROM {name}.manifests").collect()[0].n
    assert merged and merged > 0, "the data manifests Spark read must include merged ones"

    jobs = TableJobs(spark, warehouse.name, cfg.table.name, MaintenanceConfig(min_input_files=1))
    compacted = jobs.one(Job.COMPACT)
    assert compacted.counts.get("rewritten_data_files_count", 0) > 0, compacted
    spark.sql(f"REFRESH TABLE {name}")
    expected = asyncio.run(changes.reference(kafka.bootstrap, topic, PARTITIONS, mode="cdc"))
    changes.assert_same(spark_rows(spark, name), expected, "Spark SQL just after compaction")
    land(list(changes.debezium_stream(200, 2000, seed=6)), "after compaction")


def _frazil(path: Path, log: Path, fault: str | None = None) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if k != "FRAZIL_FAULTS"}
    if fault:
        env["FRAZIL_FAULTS"] = fault
    with open(log, "ab") as out:
        return subprocess.Popen([sys.executable, "-m", "frazil.cli", "run", "--config", str(path)], stdout=out,
                                stderr=subprocess.STDOUT, env=env)


KILLS = {   # per merge mode: where frazil is SIGKILLed, one run per fault, each with new changes waiting
    "spark": ["merge.before_commit=kill@1", "merge.after_commit=kill@1", "commit.before_catalog=kill@1",
              "merge.before_commit=kill@1"],
    "native": ["commit.after_deletes_written=kill@1", "commit.after_catalog=kill@1", "commit.before_catalog=kill@1",
               "worker.after_files_written=kill@1"],
}


# make test runs each merge mode once, each change kind once; `make chaos-tests` runs all four (the
# native kill points of a CDC stream are also tests/chaos/test_mutations_kill.py's, in distributed mode)
KILL_RUNS = ([("cdc", "spark"), ("cdc", "native"), ("upsert", "spark"), ("upsert", "native")]
             if os.environ.get("FRAZIL_KILL_RUNS") == "all" else [("cdc", "spark"), ("upsert", "native")])


@pytest.mark.parametrize(("kind", "merging"), KILL_RUNS)
def test_a_change_stream_killed_mid_merge_and_mid_commit_ends_equal_to_the_reference_in_both_engines(
        kafka: KafkaBroker, tmp_path: Path, spark: Any, warehouse: CatalogConfig, kind: str, merging: str) -> None:
    """frazil is SIGKILLed at each point of a keyed commit, and with merge = "spark" (changes land
    in the staging table with the offsets; Spark MERGEs them into the table, the merged mark in
    the MERGE's own commit) just before a MERGE and just after one (mark in the summary, not yet a
    property, staging not cleaned). The table then equals the reference, read by both engines."""
    topic = f"{kind}-{merging}-kills"
    pipeline = topic.replace("-", "_")
    asyncio.run(support.create_topic(kafka.bootstrap, topic, PARTITIONS))
    extra = ('merge = "spark"\nmerge_interval_s = 1\nmerge_min_changes = 0' if merging == "spark" else "") + \
        ('\ntombstones = "delete"' if kind == "upsert" else "")
    path = changes.config(tmp_path, kafka.bootstrap, topic, pipeline, mode=kind, interval=0.5, extra_table=extra,
                          catalog=(warehouse.name, {k: v for k, v in warehouse.properties.items() if k != "type"}))
    cfg = support.load(path)
    assert cfg.table.changes is not None
    target = cfg.table.changes.target or cfg.table.name
    assert (merging == "spark") == (cfg.table.name == f"{target}__changes")
    catalog = support.catalog_of(cfg)
    log = tmp_path / "frazil.log"
    stream = list(changes.debezium_stream(150, 4000, seed=9) if kind == "cdc" else changes.upsert_stream(150, 4000, 9))
    for n, fault in enumerate(KILLS[merging]):
        asyncio.run(changes.produce(kafka.bootstrap, topic, iter(stream[n * 1000:(n + 1) * 1000]), PARTITIONS))
        proc = _frazil(path, log, fault)
        try:
            proc.wait(timeout=150)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise AssertionError(f"{fault} never fired; log tail:\n{log.read_text()[-3000:]}") from None
        assert proc.returncode == -signal.SIGKILL, f"{fault}: exit {proc.returncode}\n{log.read_text()[-3000:]}"
    ends = asyncio.run(support.end_offsets(kafka.bootstrap, [topic]))

    proc = _frazil(path, log)
    try:
        if merging == "spark":
            support.wait_for(lambda: _merged_through(catalog, target, cfg.pipeline, ends), proc, log, timeout=240)
        else:
            support.wait_until_committed(catalog, cfg, ends, timeout=240, alive=lambda: proc.poll() is None)
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=90) == 0, log.read_text()[-3000:]
    expected = asyncio.run(changes.reference(kafka.bootstrap, topic, PARTITIONS, mode=kind))
    changes.assert_same(changes.table_rows(catalog, target), expected, "pyiceberg")
    spark.sql(f"REFRESH TABLE {warehouse.name}.{target}")
    changes.assert_same(spark_rows(spark, f"{warehouse.name}.{target}"), expected, "Spark SQL")
    deletes = spark.sql(f"SELECT count(*) AS n FROM {warehouse.name}.{target}.position_deletes").collect()[0].n
    assert deletes > 0, "changes must land as position deletes (merge-on-read), not rewrites"
    if merging == "spark":
        table = catalog.load_table(target)
        merges = [s for s in table.snapshots() if s.summary is not None
                  and merge.merged_key(cfg.pipeline) in s.summary.additional_properties]
        assert len(merges) >= 2, f"one MERGE landed before a kill and one after the restarts, got {len(merges)}"
        # the merge's DELETE of merged rows must not conflict with frazil's appends to the staging table
        assert catalog.load_table(cfg.table.name).properties["write.delete.isolation-level"] == "snapshot"
        left = catalog.load_table(cfg.table.name).scan().to_arrow().num_rows
        assert left == 0, f"{left} merged change(s) still in the staging table"
        status = json.loads(subprocess.run([sys.executable, "-m", "frazil.cli", "status", "-c", str(path), "--json"],
                                           capture_output=True, check=True, text=True).stdout)
        (staged,) = [t for t in status["tables"] if t["name"] == cfg.table.name]
        assert staged["merge"]["into"] == target and staged["merge"]["waiting"] == 0, staged


@pytest.mark.matrix   # a store variant of the merge flush's kill run above (make test-matrix)
def test_the_spark_merge_flush_on_an_s3_warehouse_ends_equal_to_the_reference(
        kafka: KafkaBroker, tmp_path: Path, spark: Any, s3: S3Server) -> None:
    """merge = "spark" with the warehouse in an S3-compatible store: the staging table, the MERGE's
    position deletes and the cleanup of merged rows all go through Iceberg's S3FileIO."""
    topic = "cdc-s3-merge"
    asyncio.run(support.create_topic(kafka.bootstrap, topic, PARTITIONS))
    props = {**s3.catalog_properties("frazil-merge"), "uri": f"sqlite:///{tmp_path}/catalog.db"}
    path = changes.config(tmp_path, kafka.bootstrap, topic, "cdc_s3", mode="cdc", interval=0.5,
                          extra_table='merge = "spark"\nmerge_interval_s = 1\nmerge_min_changes = 0',
                          catalog=("frazil_s3_merge", props))
    cfg = support.load(path)
    assert cfg.table.changes is not None and cfg.table.changes.target
    target, catalog, log = cfg.table.changes.target, support.catalog_of(cfg), tmp_path / "frazil.log"
    stream = list(changes.debezium_stream(150, 3000, seed=11))
    asyncio.run(changes.produce(kafka.bootstrap, topic, iter(stream[:1500]), PARTITIONS))
    proc = _frazil(path, log)
    try:
        ends = asyncio.run(support.end_offsets(kafka.bootstrap, [topic]))
        support.wait_for(lambda: _merged_through(catalog, target, cfg.pipeline, ends), proc, log, timeout=240)
        asyncio.run(changes.produce(kafka.bootstrap, topic, iter(stream[1500:]), PARTITIONS))
        ends = asyncio.run(support.end_offsets(kafka.bootstrap, [topic]))
        support.wait_for(lambda: _merged_through(catalog, target, cfg.pipeline, ends), proc, log, timeout=240)
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=90) == 0, log.read_text()[-3000:]
    assert catalog.load_table(target).location().startswith("s3://frazil-merge/")
    expected = asyncio.run(changes.reference(kafka.bootstrap, topic, PARTITIONS, mode="cdc"))
    changes.assert_same(changes.table_rows(catalog, target), expected, "pyiceberg")
    for key, value in session.catalog_conf(cfg.catalog.name, cfg.catalog.properties).items():
        spark.conf.set(key, value)
    name = f"{cfg.catalog.name}.{target}"
    changes.assert_same(spark_rows(spark, name), expected, "Spark SQL")
    deletes = spark.sql(f"SELECT count(*) AS n FROM {name}.position_deletes").collect()[0].n
    assert deletes > 0, "the second MERGE must update rows of the first as position deletes"
    assert catalog.load_table(cfg.table.name).scan().to_arrow().num_rows == 0, "merged changes left in staging"


def _merged_through(catalog: Any, target: str, pipeline: str, ends: dict[tuple[str, int], int]) -> bool:
    mark = merge.merged_mark(catalog.load_table(target), pipeline)
    if any(mark.get(tp, 0) < end for tp, end in ends.items()):
        raise AssertionError(f"merged through {mark}, want {ends}")
    return True


def test_the_key_index_stands_through_a_delete_file_rewrite_and_follows_a_compaction_by_its_files(
        spark: Any, warehouse: CatalogConfig, catalog: Any, caplog: pytest.LogCaptureFixture) -> None:
    """Spark's maintenance commits between frazil's: rewriting delete files or manifests moves no
    row (the index is kept, no full rebuild); compaction moves rows (the index drops the rows of
    the files it rewrote and reads the files it wrote, no full rebuild either). Either way the
    next commit deletes exactly the replaced rows."""
    import pyarrow as pa

    from frazil.config import ChangesConfig, Column, TableConfig
    from frazil.iceberg import catalog as iceberg_catalog
    from frazil.iceberg.committer import Committer
    from frazil.iceberg.offsets import Range

    cfg = TableConfig("db.index_kept", (Column("id", "long", required=True), Column("v", "string")),
                      identifier_columns=("id",), changes=ChangesConfig("upsert"))
    table = iceberg_catalog.ensure_table(catalog, cfg)
    committer = Committer(catalog, cfg.name, "p", indexes={})
    schema = iceberg_catalog.arrow_schema(table)
    offset = 0

    def commit(ids: range, version: str) -> int:
        nonlocal offset
        n = len(ids)
        data = pa.table({"id": pa.array(ids, pa.int64()), "v": [version] * n, "_kafka_topic": ["t"] * n,
                         "_kafka_partition": pa.array([0] * n, pa.int32()),
                         "_kafka_offset": pa.array(range(offset, offset + n), pa.int64()),
                         "_kafka_timestamp": pa.array([0] * n, pa.timestamp("us", tz="UTC")),
                         "_kafka_key": pa.array([None] * n, pa.binary())}, schema=schema)
        result = committer.commit(data, {("t", 0): Range(offset, offset + n)}, f"c-{version}")
        offset += n
        return result.replaced

    name = f"{warehouse.name}.{cfg.name}"
    assert commit(range(100), "a") == 0
    assert commit(range(50), "b") == 50
    assert commit(range(40, 60), "c") == 20
    spark.sql(f"CALL {warehouse.name}.system.rewrite_position_delete_files(table => '{name}', "
              "options => map('rewrite-all', 'true'))")
    spark.sql(f"CALL {warehouse.name}.system.rewrite_manifests(table => '{name}')")
    caplog.clear()
    with caplog.at_level("INFO", logger="frazil.iceberg.committer"):
        assert commit(range(55, 65), "d") == 10
    assert "the key index stands" in caplog.text and "key index built" not in caplog.text, caplog.text
    spark.sql(f"CALL {warehouse.name}.system.rewrite_data_files(table => '{name}', "
              "options => map('min-input-files', '1'))")
    caplog.clear()
    with caplog.at_level("INFO", logger="frazil.iceberg.committer"):
        assert commit(range(0, 10), "e") == 10
    assert "key index brought from snapshot" in caplog.text and "key index built" not in caplog.text, caplog.text
    assert ", 4 gone," in caplog.text, caplog.text   # the four files compacted into one
    expected = {i: "e" if i < 10 else "b" if i < 40 else "c" if i < 55 else "d" if i < 65 else "a" for i in range(100)}
    rows = catalog.load_table(cfg.name).scan(selected_fields=("id", "v")).to_arrow().to_pylist()
    assert len(rows) == 100 and {r["id"]: r["v"] for r in rows} == expected
    spark.sql(f"REFRESH TABLE {name}")
    assert {r.id: r.v for r in spark.sql(f"SELECT id, v FROM {name}").collect()} == expected
