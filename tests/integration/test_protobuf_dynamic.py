"""Protobuf values of two topics, each with its own schema in the real registry, into a table per
topic through ``[dynamic]`` (``db.pb_clicks``, ``db.pb_orders``: a name's ``-`` becomes ``_``):
each table is made from its topic's first message, and every record lands once, as sent."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

import changes
import support
from frazil_dev import protowire as pw
from frazil_dev.kafka_broker import KafkaBroker
from frazil_dev.schema_registry import SchemaRegistry

pytestmark = pytest.mark.integration

SCHEMAS = {
    "pb-clicks": 'syntax = "proto3"; package web; message Click { int64 id = 1; string page = 2; }',
    "pb-orders": 'syntax = "proto3"; package shop; message Order { int64 id = 1; double amount = 2; '
                 'repeated string items = 3; }',
}
RECORDS = 120


def message(topic: str, i: int) -> bytes:
    if topic == "pb-clicks":
        return pw.uint(1, i) + pw.text(2, f"/p{i}")
    return pw.uint(1, i) + pw.double(2, i / 4) + b"".join(pw.text(3, f"sku{k}") for k in range(i % 3))


def test_two_protobuf_topics_make_a_table_each_through_dynamic(
        kafka: KafkaBroker, schema_registry: SchemaRegistry, tmp_path: Path) -> None:
    ids = {topic: schema_registry.register(f"{topic}-value", text, kind="PROTOBUF") for topic, text in SCHEMAS.items()}
    for topic, schema_id in ids.items():
        asyncio.run(support.create_topic(kafka.bootstrap, topic, 1))
        values = [b"\x00" + schema_id.to_bytes(4, "big") + b"\x00" + message(topic, i) for i in range(RECORDS)]
        asyncio.run(support.produce(kafka.bootstrap, topic, values, 1))
    config = tmp_path / "frazil.toml"
    config.write_text(f"""[pipeline]
name = "protobuf-dynamic"
commit_interval_s = 0.5
[kafka]
bootstrap_servers = "{kafka.bootstrap}"
topics = {json.dumps(sorted(SCHEMAS))}
[catalog]
properties = {support.SQLITE_CATALOG}
[values]
format = "protobuf-confluent"
[schema_registry]
url = "{schema_registry.url}"
[dynamic]
table = "db.{{topic}}"
[maintenance]
enabled = false
""")
    ends = asyncio.run(support.end_offsets(kafka.bootstrap, sorted(SCHEMAS)))
    changes.run_until_committed(config, ends, tmp_path / "frazil.log", tables=["db.pb_clicks", "db.pb_orders"])
    catalog = support.catalog_of(support.load(config))
    clicks = catalog.load_table("db.pb_clicks").scan().to_arrow().to_pylist()
    assert sorted((r["id"], r["page"], r["_kafka_offset"]) for r in clicks) == [
        (i, f"/p{i}", i) for i in range(RECORDS)]
    orders = catalog.load_table("db.pb_orders").scan().to_arrow().to_pylist()
    assert sorted((r["id"], r["amount"], r["items"]) for r in orders) == [
        (i, i / 4, [f"sku{k}" for k in range(i % 3)]) for i in range(RECORDS)]
