"""One pipeline reading five topics of five value formats at once (``[values.topics]``): Avro and
Protobuf and JSON Schema through the real registry, bare Protobuf messages of a descriptor set
(as ``protoc --descriptor_set_out`` writes it; the ``.proto`` source is compiled the same way at
config check), and plain JSON. ``[dynamic]`` names a table per topic, each made from its own
topic's schema (the registry's, the file's, or inferred from the JSON), with a key column read
from the Avro topic's Avro keys through the registry; a declared table takes the JSON topic too.
A second run, started with the tables already there, takes a second round of records: each table
reads its topic's format again, and every record of every topic lands once, as sent."""

from __future__ import annotations

import asyncio
import io
from collections.abc import Callable
from pathlib import Path

import fastavro
import pytest
from aiokafka import AIOKafkaProducer

import changes
import support
from frazil_dev import protowire as pw
from frazil_dev.kafka_broker import KafkaBroker
from frazil_dev.schema_registry import SchemaRegistry
from registry_formats import expected, register, value

pytestmark = pytest.mark.integration

FORMATS = {"fmt-avro": "avro-confluent", "fmt-proto": "protobuf-confluent", "fmt-jsonschema": "json-schema-confluent",
           "fmt-protoplain": "protobuf"}
ROUND = 150


# the Avro topic's record keys: a record holding the shop's id
KEY = {"type": "record", "name": "Key", "fields": [
    {"name": "shop", "type": {"type": "record", "name": "Shop", "fields": [{"name": "id", "type": "long"}]}}]}


def fmt_of(topic: str) -> str:
    return FORMATS.get(topic, "json")


def avro_key(schema_id: int, i: int) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(KEY), {"shop": {"id": 1000 + i}})
    return b"\x00" + schema_id.to_bytes(4, "big") + out.getvalue()


async def produce(bootstrap: str, topic: str, numbers: range, value_of: Callable[[int], bytes],
                  key_of: Callable[[int], bytes | None]) -> None:
    """Record ``i`` of ``numbers`` with its value and key, in order, to the topic's one partition."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True)
    await producer.start()
    try:
        await asyncio.gather(*[await producer.send(topic, value_of(i), key=key_of(i), partition=0) for i in numbers])
    finally:
        await producer.stop()


def test_avro_protobuf_json_schema_and_json_topics_land_in_one_pipeline(
        kafka: KafkaBroker, schema_registry: SchemaRegistry, tmp_path: Path) -> None:
    topics = [*FORMATS, "fmt-json"]
    ids = {topic: register(schema_registry, topic, fmt) for topic, fmt in FORMATS.items() if fmt != "protobuf"}
    key_id = schema_registry.register("fmt-avro-key", KEY)
    # the bare messages' type (registry_formats.PROTO's), from a descriptor set
    (tmp_path / "click.desc").write_bytes(pw.descriptor_set("click.proto", "web", {
        "Click": [("id", 1, "int64"), ("page", 2, "string")]}))
    for topic in topics:
        asyncio.run(support.create_topic(kafka.bootstrap, topic, 1))
    config = tmp_path / "frazil.toml"
    entries = "\n".join(f'"{topic}" = "{fmt}"' for topic, fmt in FORMATS.items())
    config.write_text(f"""[pipeline]
name = "formats-per-topic"
commit_interval_s = 0.5
on_bad_record = "fail"
[kafka]
bootstrap_servers = "{kafka.bootstrap}"
topic_pattern = "fmt-.*"
metadata_max_age_ms = 1000
[catalog]
properties = {support.SQLITE_CATALOG}
[values]
format = "json"
schema_file = "click.desc"
message = "web.Click"
[values.topics]
{entries}
[schema_registry]
url = "{schema_registry.url}"
[[tables]]
name = "db.json_declared"
topics = "fmt-json"
columns = [{{ name = "id", type = "long" }}, {{ name = "tag", type = "string" }}]
[dynamic]
table = "db.{{topic}}"
key_columns = [{{ name = "shop_id", field = "shop.id", type = "long" }}]
[maintenance]
enabled = false
""")
    cfg = support.load(config)
    assert {t: cfg.values.format_of(t) for t in topics} == {**FORMATS, "fmt-json": "json"}
    assert cfg.formats_of(cfg.table) == ("json",)
    tables = {topic: "db." + topic.replace("-", "_") for topic in topics}
    for run in range(2):   # the second run starts with every table there: each reads its topic's format again
        for topic in topics:
            asyncio.run(produce(kafka.bootstrap, topic, range(run * ROUND, (run + 1) * ROUND),
                                lambda i, t=topic: value(fmt_of(t), i, ids.get(t)),
                                lambda i, t=topic: avro_key(key_id, i) if t == "fmt-avro" else None))
        ends = asyncio.run(support.end_offsets(kafka.bootstrap, topics))
        changes.run_until_committed(config, ends, tmp_path / "frazil.log",
                                    tables=[*tables.values(), "db.json_declared"])
    catalog = support.catalog_of(cfg)
    for topic, name in {**tables, "declared": "db.json_declared"}.items():
        source = "fmt-json" if topic == "declared" else topic
        rows = catalog.load_table(name).scan().to_arrow().to_pylist()
        fields = [f for f in rows[0] if not f.startswith("_kafka") and f != "shop_id"]
        assert len(fields) == 2, (name, fields)
        got = sorted((r["_kafka_offset"], *(r[f] for f in fields)) for r in rows)
        assert got == [(i, *expected(fmt_of(source), i)) for i in range(2 * ROUND)], name   # each once, as sent
        if topic != "declared":   # [dynamic]'s key column: a field of the Avro topic's keys, read through
            # the registry (by the multi-table path, off the event loop); the other topics' records have no key
            shops = sorted((r["_kafka_offset"], r["shop_id"]) for r in rows)
            assert shops == [(i, 1000 + i if topic == "fmt-avro" else None) for i in range(2 * ROUND)], name
        assert {r["_kafka_topic"] for r in rows} == {source}
