"""Schema evolution mid-stream, with the real broker, catalog and Spark: records gain a nested
field and a list, and outgrow an int, a float and a decimal column, right behind records of the old shape
(buffered when the change comes), while ``frazil run`` lands them (in distributed mode: two
processes, one SIGKILLed as the change goes through). Every record lands
once; old rows read back with NULL in the new columns and new rows with their values, the same
through Spark SQL as through pyiceberg; field ids are kept."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from pyiceberg.schema import Schema
from pyiceberg.types import DecimalType, DoubleType, FloatType, IntegerType, LongType, NestedField, StructType

import support
from frazil.config import CatalogConfig
from frazil.iceberg.catalog import META_COLUMNS
from frazil_dev.kafka_broker import KafkaBroker

pytestmark = [pytest.mark.spark, pytest.mark.integration]

MODES = {"single": "", "distributed": '[coordination]\nmode = "distributed"\ncommit_timeout_s = 5\n'}
OLD, NEW = 1500, 1500   # records before and after the change
PARTITIONS = 4


def value(i: int) -> bytes:
    if i < OLD:
        return json.dumps({"id": i, "qty": i, "price": "12.50", "geo": {"lat": 1.5}, "ratio": 0.5}).encode()
    return json.dumps({"id": i, "qty": 3_000_000_000 + i, "price": 123456.25, "geo": {"lat": 2.5, "alt": i},
                       "tags": ["a", str(i)], "ratio": 1e39}).encode()


def table_name(topic: str) -> str:
    return f"db.{topic.replace('-', '_')}"


def create_table(catalog: Any, name: str) -> None:
    """The table as another tool made it (frazil's config declares no columns: it takes the
    table as it is): an int, a decimal and a struct, and frazil's metadata columns."""
    fields = [NestedField(1, "id", LongType(), required=True), NestedField(2, "qty", IntegerType(), required=False),
              NestedField(3, "price", DecimalType(6, 2), required=False),
              NestedField(4, "geo", StructType(NestedField(5, "lat", DoubleType(), required=False)), required=False),
              NestedField(6, "ratio", FloatType(), required=False)]
    fields += [NestedField(7 + n, col, kind, required=req) for n, (col, kind, req) in enumerate(META_COLUMNS)]
    catalog.create_namespace_if_not_exists("db")
    catalog.create_table(name, Schema(*fields))


def config(tmp_path: Path, bootstrap: str, topic: str, warehouse: CatalogConfig, mode: str) -> Path:
    props = ", ".join(f"{k} = {json.dumps(v)}" for k, v in warehouse.properties.items() if k != "type")
    path = tmp_path / "frazil.toml"
    path.write_text(f"""[pipeline]
name = "{topic}"
commit_interval_s = 0.5
txlog_dir = "txlog-{{process}}"

[kafka]
bootstrap_servers = "{bootstrap}"
topics = ["{topic}"]
session_timeout_ms = 2000
heartbeat_interval_ms = 500

[catalog]
name = "{warehouse.name}"
properties = {{ {props} }}

[table]
name = "{table_name(topic)}"
unknown_fields = "evolve"

[maintenance]
enabled = false
{MODES[mode]}""")
    return path


def run(config: Path, log: Path, process: int) -> subprocess.Popen[bytes]:
    text = config.read_text().replace("{process}", str(process))
    mine = config.with_name(f"frazil-{process}.toml")
    mine.write_text(text)
    with open(log, "ab") as out:
        return subprocess.Popen([sys.executable, "-m", "frazil.cli", "run", "--config", str(mine)],
                                stdout=out, stderr=subprocess.STDOUT, env=dict(os.environ))


@pytest.mark.parametrize("mode", list(MODES))
def test_records_that_outgrow_the_table_evolve_it_mid_stream_and_both_engines_read_it(
        kafka: KafkaBroker, tmp_path: Path, spark: Any, warehouse: CatalogConfig, mode: str) -> None:
    topic = f"evolve-{mode}"
    asyncio.run(support.create_topic(kafka.bootstrap, topic, PARTITIONS))
    asyncio.run(support.produce(kafka.bootstrap, topic, (value(i) for i in range(OLD)), PARTITIONS))
    path = config(tmp_path, kafka.bootstrap, topic, warehouse, mode)
    path.with_name("frazil-0.toml").write_text(path.read_text().replace("{process}", "0"))
    cfg = support.load(path.with_name("frazil-0.toml"))
    catalog = support.catalog_of(cfg)
    create_table(catalog, cfg.table.name)
    before = catalog.load_table(cfg.table.name).schema()
    # the new records right behind the old ones: old rows are buffered when the first new one asks for a change
    asyncio.run(support.produce(kafka.bootstrap, topic, (value(i) for i in range(OLD, OLD + NEW)), PARTITIONS))
    log = tmp_path / "frazil.log"
    processes = 2 if mode == "distributed" else 1
    procs = [run(path, log, n) for n in range(processes)]
    try:
        if mode == "distributed":   # one process killed while the change goes through, then back
            deadline = time.monotonic() + 60
            while "schema evolved" not in log.read_text() and time.monotonic() < deadline:
                time.sleep(0.05)
            procs[1].send_signal(signal.SIGKILL)
            procs[1].wait(timeout=30)
            procs[1] = run(path, log, 1)
        ends = asyncio.run(support.end_offsets(kafka.bootstrap, [topic]))
        support.wait_until_committed(catalog, cfg, ends, timeout=180,
                                     alive=lambda: all(p.poll() is None for p in procs))
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        codes = [p.wait(timeout=60) for p in procs]
    assert codes == [0] * processes, log.read_text()[-3000:]

    table = catalog.load_table(cfg.table.name)
    schema = table.schema()
    assert (str(schema.find_field("qty").field_type) == "long"
            and str(schema.find_field("price").field_type) == "decimal(8, 2)")
    assert (str(schema.find_field("geo.alt").field_type) == "long"
            and str(schema.find_field("tags").field_type) == "list<string>")
    assert str(schema.find_field("ratio").field_type) == "double"
    for name in ("id", "qty", "price", "geo", "geo.lat", "ratio"):
        assert schema.find_field(name).field_id == before.find_field(name).field_id, name
    support.assert_exactly_once(support.count_offsets(catalog, cfg.table.name), ends)
    text = log.read_text()
    assert text.count("schema evolved") >= 1, text[-3000:]
    assert re.search(r"schema evolved .*; [1-9]\d* buffered row\(s\) go under it", text), "no old rows were buffered"

    by_pyiceberg = {r["id"]: r for r in table.scan(
        selected_fields=("id", "qty", "price", "geo", "tags", "ratio")).to_arrow().to_pylist()}
    rows = spark.sql(f"SELECT id, qty, price, geo, tags, ratio FROM {warehouse.name}.{cfg.table.name}").collect()
    by_spark = {r.id: {"id": r.id, "qty": r.qty, "price": r.price,
                       "geo": None if r.geo is None else {"lat": r.geo.lat, "alt": r.geo.alt},
                       "tags": None if r.tags is None else list(r.tags), "ratio": r.ratio} for r in rows}
    assert len(rows) == OLD + NEW and by_spark == by_pyiceberg, "Spark and pyiceberg disagree"
    for i in (0, OLD - 1):
        assert by_pyiceberg[i] == {"id": i, "qty": i, "price": Decimal("12.50"), "geo": {"lat": 1.5, "alt": None},
                                   "tags": None, "ratio": 0.5}
    for i in (OLD, OLD + NEW - 1):
        assert by_pyiceberg[i] == {"id": i, "qty": 3_000_000_000 + i, "price": Decimal("123456.25"),
                                   "geo": {"lat": 2.5, "alt": i}, "tags": ["a", str(i)], "ratio": 1e39}
