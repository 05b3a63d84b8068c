"""``frazil backfill``: millions of records written by Spark, committed through the exactly-once path;
a routed pipeline's every table at once. Also on a Spark standalone cluster started from PySpark's
own jars."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from pyiceberg.serializers import ToOutputFile

import routed
import support
from frazil.iceberg import offsets
from frazil.spark import bulk, session
from frazil_dev.hive_metastore import HiveMetastore
from frazil_dev.kafka_broker import KafkaBroker
from frazil_dev.s3 import S3Server
from harness.spark_cluster import SparkCluster

pytestmark = [pytest.mark.spark, pytest.mark.integration]

BULK_RECORDS = int(os.environ.get("FRAZIL_BULK_RECORDS", "1000000"))   # make test-matrix: 3M


def _run(config: Path, log: Path, *args: str, timeout: float = 900) -> str:
    with open(log, "ab") as out:
        proc = subprocess.run([sys.executable, "-m", "frazil.cli", *args, "--config", str(config)],
                              stdout=out, stderr=subprocess.STDOUT, timeout=timeout)
    text = log.read_text()
    assert proc.returncode == 0, f"frazil {args[0]} exited with {proc.returncode}:\n{text[-4000:]}"
    return text


def _bulk_files(catalog, table: str) -> tuple[int, int]:  # type: ignore[no-untyped-def]
    paths = catalog.load_table(table).inspect.files().column("file_path").to_pylist()
    return len(paths), sum(1 for p in paths if "/data/frazil-bulk-" in p)


def test_bulk_catch_up_of_a_million_records_or_more_lands_each_once(kafka: KafkaBroker, tmp_path: Path) -> None:
    topic, partitions = "backlog", 12
    asyncio.run(support.create_topic(kafka.bootstrap, topic, partitions))
    started = time.monotonic()
    asyncio.run(support.produce(kafka.bootstrap, topic, (support.record(i) for i in range(BULK_RECORDS)), partitions))
    print(f"produced {BULK_RECORDS} records in {time.monotonic() - started:.0f}s")
    config = support.write_config(tmp_path, kafka.bootstrap, [topic],
                                  extra="[spark]\nmaster = \"local[2]\"\nconf = { \"spark.driver.memory\" = \"3g\" }\n")
    # kafka's default session timeout (10 s), not the tests' 2 s: flushes of 1.25M rows can hold the
    # event loop past 2 s on a loaded 2-core machine; the group then moves the partitions, the buffered
    # rows are dropped and the backfill stops short ("run it again"), which is not what this test is about
    config.write_text(config.read_text().replace("session_timeout_ms = 2000", "session_timeout_ms = 10000")
                      .replace("heartbeat_interval_ms = 500", "heartbeat_interval_ms = 3000"))
    cfg = support.load(config)
    log = tmp_path / "frazil.log"
    started = time.monotonic()
    # flushes of 5/12 of the backlog: several, each of many rows (1.25M at the full size)
    text = _run(config, log, "backfill", "--batch-rows", str(BULK_RECORDS * 5 // 12), "--memory-mb", "1536")
    print(f"backfill took {time.monotonic() - started:.0f}s")
    ends = asyncio.run(support.end_offsets(kafka.bootstrap, [topic]))
    assert sum(ends.values()) == BULK_RECORDS
    catalog = support.catalog_of(cfg)
    assert support.stored(catalog, cfg) == ends
    support.assert_exactly_once_by_partition(catalog, cfg.table.name, ends)
    files, bulk = _bulk_files(catalog, cfg.table.name)
    assert files == bulk > 0, "every data file was written by Spark"
    assert text.count("through Spark in") >= 2, "the catch-up came in several bulk flushes"
    # a second backfill finds nothing left and lands nothing twice
    _run(config, log, "backfill")
    assert support.stored(catalog, cfg) == ends
    landed = catalog.load_table(cfg.table.name).scan(selected_fields=("_kafka_offset",)).to_arrow().num_rows
    assert landed == BULK_RECORDS


def test_a_backfill_lands_every_table_of_a_routed_pipeline_and_stops_at_the_watermark(kafka: KafkaBroker,
                                                                                      tmp_path: Path) -> None:
    """3 topics fanned out to 5 tables by topic and route field: every table holds exactly what its
    rules take, once, all written by Spark. Then records none of them from the eu region: the table
    that takes by region stays below the end offsets (its offset moves only with a record it takes),
    the pipeline's watermark reaches them, so the backfill is done; a third finds nothing to land."""
    topics = ["shop-orders-bf", "shop-payments-bf", "web-clicks-bf"]
    for topic in topics:
        asyncio.run(support.create_topic(kafka.bootstrap, topic, 2))
    asyncio.run(routed.produce(kafka.bootstrap, topics, 0, 3000))
    ends = asyncio.run(support.end_offsets(kafka.bootstrap, topics))
    config = routed.config(tmp_path, kafka.bootstrap, topics, "routed-backfill", extra='[spark]\nmaster = "local[2]"\n')
    config.write_text(config.read_text().replace("session_timeout_ms = 2000", "session_timeout_ms = 10000")
                      .replace("heartbeat_interval_ms = 500", "heartbeat_interval_ms = 3000"))   # as above
    cfg = support.load(config)
    log = tmp_path / "frazil.log"
    _run(config, log, "backfill", "--batch-rows", "4000")
    rows = routed.check_every_table(cfg, ends)
    assert rows["db.everything"] == sum(ends.values()) and all(rows.values()), rows
    catalog = support.catalog_of(cfg)
    for name, *_ in routed.TABLES:
        files, bulk = _bulk_files(catalog, name)
        assert files == bulk > 0, f"every data file of {name} was written by Spark"

    not_eu = [routed.value(i) for i in range(100_000, 100_400) if routed.REGIONS[(i // 4) % 3] != "eu"]
    asyncio.run(support.produce(kafka.bootstrap, "web-clicks-bf", not_eu, 2))
    ends = asyncio.run(support.end_offsets(kafka.bootstrap, topics))
    _run(config, log, "backfill")
    rows = routed.check_every_table(cfg, ends)
    held = {name: catalog.load_table(name).properties for name, *_ in routed.TABLES}
    assert offsets.merge_progress(*(offsets.stored_progress(p, cfg.pipeline) for p in held.values())) == ends
    web_eu = offsets.stored_offsets(held["db.web_eu"], cfg.pipeline)
    assert all(web_eu[tp] < end for tp, end in ends.items() if tp[0] == "web-clicks-bf"), web_eu
    text = _run(config, log, "backfill")
    assert "nothing to land" in text, text[-2000:]
    assert routed.check_every_table(cfg, ends) == rows


def test_a_backfill_into_a_hive_metastore_catalog_lands_each_record_once(kafka: KafkaBroker, tmp_path: Path,
                                                                        hive_metastore: HiveMetastore) -> None:
    """Bulk writes on a Hive catalog: Spark writes the files, frazil commits them through pyiceberg's
    Hive client with the offsets, and a second backfill finds nothing left."""
    topic, partitions, records = "backlog-hive", 3, 60_000
    asyncio.run(support.create_topic(kafka.bootstrap, topic, partitions))
    asyncio.run(support.produce(kafka.bootstrap, topic, (support.record(i) for i in range(records)), partitions))
    config = support.write_config(tmp_path, kafka.bootstrap, [topic], table="db.backlog_hive",
                                  catalog=f'{{ type = "hive", uri = "{hive_metastore.uri}", warehouse = "file://w" }}',
                                  extra='[spark]\nmaster = "local[2]"\n')
    cfg = support.load(config)
    log = tmp_path / "frazil.log"
    text = _run(config, log, "backfill")
    ends = asyncio.run(support.end_offsets(kafka.bootstrap, [topic]))
    catalog = support.catalog_of(cfg)
    assert support.stored(catalog, cfg) == ends and sum(ends.values()) == records
    support.assert_exactly_once_by_partition(catalog, cfg.table.name, ends)
    files, bulk = _bulk_files(catalog, cfg.table.name)
    assert files == bulk > 0 and "through Spark in" in text, text[-3000:]
    assert "nothing to land" in _run(config, log, "backfill")
    assert support.stored(catalog, cfg) == ends


# a store variant of the local backfills (Spark on the S3 warehouse is in make test through the
# maintenance run there): both kinds are `make test-matrix`'s
@pytest.mark.matrix
@pytest.mark.parametrize("kind", ["s3", "glue"])
def test_a_backfill_onto_object_storage_writes_through_iceberg_and_drops_its_scratch_tables(
        kafka: KafkaBroker, tmp_path: Path, s3: S3Server, spark: Any, kind: str, monkeypatch: pytest.MonkeyPatch,
        request: pytest.FixtureRequest) -> None:
    """Bulk writes on an S3 warehouse (a partitioned table; the SQLite catalog, or AWS Glue): Spark
    appends to a scratch copy of the table through S3FileIO, frazil commits those files with the
    offsets. Read back by pyiceberg and Spark SQL; a scratch table left by a killed write is dropped
    by the next backfill."""
    topic, partitions, half = f"backlog-{kind}", 3, 30_000
    asyncio.run(support.create_topic(kafka.bootstrap, topic, partitions))
    asyncio.run(support.produce(kafka.bootstrap, topic, (support.record(i) for i in range(half)), partitions))
    if kind == "glue":   # credentials from the AWS default chain: this process, frazil's, the shared Spark's JVM
        props = s3.glue_catalog_properties(f"frazil-backfill-{kind}")
        for name, value in S3Server.credentials_env().items():
            monkeypatch.setenv(name, value)
        system = spark.sparkContext._jvm.java.lang.System
        for name, value in (("aws.accessKeyId", os.environ["AWS_ACCESS_KEY_ID"]),
                            ("aws.secretAccessKey", os.environ["AWS_SECRET_ACCESS_KEY"])):
            system.setProperty(name, value)
            request.addfinalizer(lambda name=name: system.clearProperty(name))
    else:
        props = {**s3.catalog_properties(f"frazil-backfill-{kind}"), "uri": "sqlite:///w/catalog.db"}
    config = support.write_config(tmp_path, kafka.bootstrap, [topic], table=f"db.backlog_{kind}",
                                  catalog=support.toml_table(props),
                                  extra='[spark]\nmaster = "local[2]"\n')
    text = config.read_text().replace("]\n\n[maintenance]", ']\npartition_by = ["day(at)"]\n\n[maintenance]', 1)
    config.write_text(text.replace("[catalog]\n", f'[catalog]\nname = "{kind}bf"\n', 1))
    cfg = support.load(config)
    log = tmp_path / "frazil.log"
    _run(config, log, "backfill")
    catalog = support.catalog_of(cfg)
    table = catalog.load_table(cfg.table.name)
    assert table.location().startswith(f"s3://frazil-backfill-{kind}/") and len(table.spec().fields) == 1
    # a scratch table as a write killed after Spark's append leaves it: registered two hours ago
    old_ms = int(time.time() * 1000) - 2 * 3600 * 1000
    left = f"{cfg.table.name}{bulk.SCRATCH}0123456789ab"
    at = f"{table.location()}/data/frazil-bulk-killed/metadata/00000-x.metadata.json"
    ToOutputFile.table_metadata(bulk.scratch_metadata(table, at.rsplit("/metadata/", 1)[0], old_ms),
                                table.io.new_output(at))
    catalog.register_table(left, at)

    asyncio.run(support.produce(kafka.bootstrap, topic, (support.record(i) for i in range(half, 2 * half)),
                                partitions))
    text = _run(config, log, "backfill")
    ends = asyncio.run(support.end_offsets(kafka.bootstrap, [topic]))
    assert support.stored(catalog, cfg) == ends and sum(ends.values()) == 2 * half
    support.assert_exactly_once_by_partition(catalog, cfg.table.name, ends)
    files, written = _bulk_files(catalog, cfg.table.name)
    assert files == written > 0 and "through Spark in" in text, text[-3000:]
    # every day of the records is its own partition, and the files say so
    table = catalog.load_table(cfg.table.name)
    days = {row["partition"]["at_day"] for row in table.inspect.files().to_pylist()}
    assert len(days) == 28, days
    assert f"dropping {left}" in text
    assert [t for t in catalog.list_tables("db") if bulk.SCRATCH in t[-1]] == []
    assert "nothing to land" in _run(config, log, "backfill")

    for key, value in session.catalog_conf(cfg.catalog.name, cfg.catalog.properties).items():
        spark.conf.set(key, value)
    by_partition = {(r[0], r[1]): (r[2], r[3]) for r in spark.sql(
        f"SELECT _kafka_topic, _kafka_partition, count(*), count(DISTINCT _kafka_offset) "
        f"FROM {cfg.catalog.name}.{cfg.table.name} GROUP BY 1, 2").collect()}
    assert by_partition == {tp: (end, end) for tp, end in ends.items()}, by_partition


@pytest.mark.matrix   # a deployment variant of the local-mode backfill and maintenance tests
def test_backfill_and_compaction_on_a_standalone_cluster(kafka: KafkaBroker, tmp_path: Path) -> None:
    topic, partitions, records = "on-cluster", 4, 120_000
    asyncio.run(support.create_topic(kafka.bootstrap, topic, partitions))
    with SparkCluster.start(tmp_path / "spark", cores=2, memory="2g") as cluster:
        spark = (f"[spark]\nmaster = \"{cluster.master_url}\"\n"
                 "conf = { \"spark.driver.host\" = \"127.0.0.1\", \"spark.executor.memory\" = \"1g\" }\n")
        config = support.write_config(tmp_path / "p", kafka.bootstrap, [topic], extra="min_input_files = 2\n" + spark)
        cfg = support.load(config)
        catalog = support.catalog_of(cfg)
        log = tmp_path / "frazil.log"
        for part in range(3):  # three backfills: three bulk commits, so compaction has files to merge
            asyncio.run(support.produce(kafka.bootstrap, topic, (support.record(i) for i in
                                                                 range(part * records // 3, (part + 1) * records // 3)),
                                        partitions))
            _run(config, log, "backfill", "--batch-rows", str(records))
        files_before, bulk = _bulk_files(catalog, cfg.table.name)
        assert files_before == bulk >= 3
        _run(config, log, "compact")
        apps = sorted(p.name for p in cluster.work_dir.glob("app-*"))
    assert len(apps) == 4, f"each command ran as an application on the cluster: {apps}"
    ends = asyncio.run(support.end_offsets(kafka.bootstrap, [topic]))
    support.assert_exactly_once(support.count_offsets(catalog, cfg.table.name), ends)
    assert support.stored(catalog, cfg) == ends
    files_after, _ = _bulk_files(catalog, cfg.table.name)
    assert files_after < files_before


def test_a_backfill_that_cannot_land_everything_exits_1_and_says_where_it_stopped(kafka: KafkaBroker,
                                                                                  tmp_path: Path) -> None:
    topic = "unwritable"
    asyncio.run(support.create_topic(kafka.bootstrap, topic, 2))
    asyncio.run(support.produce(kafka.bootstrap, topic, (support.record(i) for i in range(1000)), 2))
    config = support.write_config(tmp_path, kafka.bootstrap, [topic])
    # a uuid column: Spark's Parquet writer cannot write Iceberg's uuid, so every bulk write fails
    at = '{ name = "at", type = "timestamptz" },'
    config.write_text(config.read_text().replace(at, at + '\n  { name = "u", type = "uuid" },'))
    log = tmp_path / "frazil.log"
    with open(log, "wb") as out:
        proc = subprocess.run([sys.executable, "-m", "frazil.cli", "backfill", "--config", str(config)],
                              stdout=out, stderr=subprocess.STDOUT, timeout=300)
    text = log.read_text()
    assert proc.returncode == 1, text[-3000:]
    assert "cannot write column(s) u (uuid, fixed, time)" in text
    assert "stopped before landing everything" in text and "unwritable/0" in text
    cfg = support.load(config)
    assert support.stored(support.catalog_of(cfg), cfg) == {}
