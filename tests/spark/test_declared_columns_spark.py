"""Declared nested and fixed columns: a table declared with a struct (holding a timestamp, a list, a
map and a decimal) and a ``fixed[4]`` column, partitioned by the Kafka timestamp's day and by a
field of the struct, lands every good record exactly as sent, read back by pyiceberg and by Spark
SQL; a record whose nested value does not fit is a dead letter naming the nested field."""

from __future__ import annotations

import asyncio
import base64
import json
import signal
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer

import support
from frazil.config import CatalogConfig
from frazil.iceberg import declared
from frazil_dev.kafka_broker import KafkaBroker
from routed import run_frazil

pytestmark = [pytest.mark.spark, pytest.mark.integration]

META = "struct<at: timestamptz, region: string, tags: list<string>, counts: map<string, long>, price: decimal(9, 2)>"
COLUMNS = f"""columns = [
  {{ name = "id", type = "long", required = true }},
  {{ name = "meta", type = "{META}" }},
  {{ name = "h", type = "fixed[4]" }},
]
partition_by = ["day(_kafka_timestamp)", "meta.region"]
"""
RECORDS = 240
DAY0 = datetime(2026, 11, 20, 12, tzinfo=UTC)
# the bad records, by index, and the field their error must name
BAD = {17: "meta.counts", 53: "meta.regoin", 101: "h", 170: "meta.tags"}


def good(i: int) -> dict[str, Any]:
    return {"id": i, "h": base64.b64encode(i.to_bytes(4, "big")).decode(),
            "meta": {"at": f"2026-11-{1 + i % 28:02d}T10:00:0{i % 10}Z", "region": f"r{i // 3 % 3}",
                     "tags": [f"t{i % 5}", f"u{i % 7}"][: 1 + i % 2], "counts": {"a": i, "b": -i},
                     "price": float(Decimal(i) / 4)}}


def value(i: int) -> dict[str, Any]:
    v = good(i)
    if BAD.get(i) == "meta.counts":
        v["meta"]["counts"] = {"a": "many"}
    elif BAD.get(i) == "meta.regoin":
        v["meta"]["regoin"] = v["meta"].pop("region")
    elif BAD.get(i) == "h":
        v["h"] = base64.b64encode(b"12345").decode()   # 5 bytes for a fixed[4]
    elif BAD.get(i) == "meta.tags":
        v["meta"]["tags"] = "t1"
    return v


async def produce(bootstrap: str, topic: str) -> None:
    """Two partitions, Kafka timestamps over three days."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        sends = [await producer.send(topic, json.dumps(value(i)).encode(), partition=i % 2,
                                     timestamp_ms=int((DAY0 + timedelta(days=i % 3)).timestamp() * 1000))
                 for i in range(RECORDS)]
        await asyncio.gather(*sends)
    finally:
        await producer.stop()


def test_declared_struct_list_map_and_fixed_columns_land_as_sent_and_partition_by_a_nested_field(
        kafka: KafkaBroker, tmp_path: Path, spark: Any, warehouse: CatalogConfig) -> None:
    topic = "declared-nested"
    asyncio.run(support.create_topic(kafka.bootstrap, topic, 2))
    asyncio.run(produce(kafka.bootstrap, topic))
    catalog = {k: v for k, v in warehouse.properties.items() if k != "type"}
    path = support.write_config(tmp_path, kafka.bootstrap, [topic], pipeline=topic, table="db.declared_nested",
                                catalog=support.toml_table(catalog))
    text = path.read_text()
    start = text.index("columns = [")
    text = text[:start] + COLUMNS + text[text.index("]\n", start) + 2:]
    text = text.replace("[catalog]\n", f'[catalog]\nname = "{warehouse.name}"\n', 1)   # the one Spark reads
    path.write_text(text.replace("[kafka]", 'on_bad_record = "dead_letter"\n\n[kafka]', 1))
    cfg = support.load(path)
    log = tmp_path / "frazil.log"
    proc = run_frazil(path, log)   # a process of its own: the daemon's shutdown stops the Spark session it finds
    try:
        support.wait_until_committed(support.catalog_of(cfg), cfg, {(topic, 0): RECORDS // 2, (topic, 1): RECORDS // 2},
                                     alive=lambda: proc.poll() is None)
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0, log.read_text()[-3000:]

    table = support.catalog_of(cfg).load_table(cfg.table.name)
    assert declared.shape(table.schema().find_field("meta").field_type) == META
    assert str(table.schema().find_field("h").field_type) == "fixed[4]"
    assert [(f.name, str(f.transform)) for f in table.spec().fields] == [("_kafka_timestamp_day", "day"),
                                                                         ("meta_region", "identity")]
    files = [task.file for task in table.scan().plan_files()]
    assert len({tuple(f.partition) for f in files}) == 9   # 3 days x 3 regions
    counts = support.count_offsets(support.catalog_of(cfg), cfg.table.name)
    assert max(counts.values()) == 1 and set(counts) == {(topic, i % 2, i // 2) for i in range(RECORDS) if i not in BAD}

    want = {i: good(i) for i in range(RECORDS) if i not in BAD}
    by_pyiceberg = {r["id"]: r for r in table.scan().to_arrow().to_pylist()}
    assert set(by_pyiceberg) == set(want)
    for i, row in by_pyiceberg.items():
        sent = want[i]["meta"]
        assert row["h"] == i.to_bytes(4, "big")
        meta = row["meta"]
        assert (meta["at"], meta["region"], meta["tags"], dict(meta["counts"]), meta["price"]) == (
            datetime.fromisoformat(sent["at"]), sent["region"], sent["tags"], sent["counts"],
            Decimal(str(sent["price"])).quantize(Decimal("0.01"))), (i, row)
        assert row["_kafka_timestamp"] == DAY0 + timedelta(days=i % 3)

    rows = spark.sql(f"SELECT id, meta.region, meta.counts['b'] AS b, meta.tags[0] AS tag, meta.price, hex(h) AS h "
                     f"FROM {warehouse.name}.db.declared_nested").collect()
    assert {r.id: (r.region, r.b, r.tag, r.price, r.h) for r in rows} == {
        i: (w["meta"]["region"], -i, w["meta"]["tags"][0], Decimal(str(w["meta"]["price"])).quantize(Decimal("0.01")),
            i.to_bytes(4, "big").hex().upper()) for i, w in want.items()}

    letters = asyncio.run(support.dead_letters(kafka.bootstrap, cfg.dead_letter_topic))
    why = {}
    for letter in letters:
        (_, partition, offset), headers = support.source_of(letter)
        why[partition + 2 * offset] = f'{headers["frazil.error.field"]}: {headers["frazil.error"]}'
    assert set(why) == set(BAD) and len(letters) == len(BAD), why
    for i, field in BAD.items():
        assert why[i].startswith(field), (i, why[i])
