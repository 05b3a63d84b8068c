"""A second engine reads the routed tables: 3 topics fanned out to 5 tables by ``frazil run``, each
table read back by Spark SQL as well as pyiceberg. Spark must see, table by table, the same
(topic, partition, offset) set, each once, that the routing rules say belongs there."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path
from typing import Any

import pytest

import support
from frazil.config import CatalogConfig
from frazil_dev.kafka_broker import KafkaBroker
from routed import TABLES, config, produce, run_frazil, wait_until_every_table_holds_its_records

pytestmark = [pytest.mark.spark, pytest.mark.integration]


def test_spark_sql_reads_each_routed_table_with_every_offset_once_where_it_belongs(
        kafka: KafkaBroker, tmp_path: Path, spark: Any, warehouse: CatalogConfig) -> None:
    topics = ["shop-orders-spark", "shop-payments-spark", "web-clicks-spark"]
    for topic in topics:
        asyncio.run(support.create_topic(kafka.bootstrap, topic, 2))
    asyncio.run(produce(kafka.bootstrap, topics, 0, 1000))
    ends = asyncio.run(support.end_offsets(kafka.bootstrap, topics))
    path = config(tmp_path, kafka.bootstrap, topics, "spark-routed",
                  catalog=(warehouse.name, {k: v for k, v in warehouse.properties.items() if k != "type"}))
    cfg = support.load(path)
    log = tmp_path / "frazil.log"
    proc = run_frazil(path, log)
    try:
        by_pyiceberg = wait_until_every_table_holds_its_records(cfg, ends, proc, log)
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0, log.read_text()[-3000:]

    catalog = support.catalog_of(cfg)
    for name, *_ in TABLES:
        rows = spark.sql("SELECT _kafka_topic, _kafka_partition, _kafka_offset, count(*) AS n "
                         f"FROM {warehouse.name}.{name} "
                         "GROUP BY _kafka_topic, _kafka_partition, _kafka_offset").collect()
        doubled = [r for r in rows if r.n != 1]
        assert not doubled, f"Spark sees records of {name} more than once: {doubled[:5]}"
        seen = {(r._kafka_topic, r._kafka_partition, r._kafka_offset) for r in rows}
        assert seen == set(support.count_offsets(catalog, name)), f"Spark and pyiceberg disagree on {name}"
        assert len(seen) == by_pyiceberg[name], name
    assert by_pyiceberg["db.everything"] == sum(ends.values())
