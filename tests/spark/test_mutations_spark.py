"""Spark SQL reads frazil's keyed tables: a Debezium CDC stream landed by ``frazil run`` with
position deletes (partitioned by a bucket of the key), read by Spark and by pyiceberg, both equal
to the reference computed from the topic. Then Spark compacts the table (data files rewritten,
frazil's deletes applied into them) and frazil goes on: its key index is rebuilt from the
compacted table, and both engines still agree with the reference."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

import changes
import support
from frazil.config import CatalogConfig, MaintenanceConfig
from frazil.local.kafka_broker import KafkaBroker
from frazil.spark.jobs import TableJobs
from frazil.spark.schedule import Job

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
                          extra_table='partition_by = ["bucket[4](id)"]',
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

    jobs = TableJobs(spark, warehouse.name, cfg.table.name, MaintenanceConfig(min_input_files=1))
    compacted = jobs.one(Job.COMPACT)
    assert compacted.counts.get("rewritten_data_files_count", 0) > 0, compacted
    spark.sql(f"REFRESH TABLE {name}")
    expected = asyncio.run(changes.reference(kafka.bootstrap, topic, PARTITIONS, mode="cdc"))
    changes.assert_same(spark_rows(spark, name), expected, "Spark SQL just after compaction")
    land(list(changes.debezium_stream(200, 2000, seed=6)), "after compaction")
