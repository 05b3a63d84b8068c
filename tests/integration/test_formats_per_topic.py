"""One pipeline reading four topics of four value formats at once (``[values.topics]``): Avro and
Protobuf and JSON Schema through the real registry, and plain JSON. ``[dynamic]`` names a table per
topic, each made from its own topic's schema (the registry's, or inferred from the JSON); a
declared table takes the JSON topic too. A second run, started with the tables already there,
takes a second round of records: each table reads its topic's format again, and every record of
every topic lands once, as sent."""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path

import fastavro
import pytest

import changes
import support
from frazil_dev import protowire as pw
from frazil_dev.kafka_broker import KafkaBroker
from frazil_dev.schema_registry import SchemaRegistry

pytestmark = pytest.mark.integration

AVRO = {"type": "record", "name": "Order", "namespace": "shop",
        "fields": [{"name": "id", "type": "long"}, {"name": "amount", "type": "double"}]}
PROTO = 'syntax = "proto3"; package web; message Click { int64 id = 1; string page = 2; }'
JSON_SCHEMA = {"type": "object", "properties": {"id": {"type": "integer"}, "note": {"type": "string"}}}
FORMATS = {"fmt-avro": "avro-confluent", "fmt-proto": "protobuf-confluent", "fmt-jsonschema": "json-schema-confluent"}
TOPICS = [*FORMATS, "fmt-json"]
ROUND = 150


def value(topic: str, i: int, ids: dict[str, int]) -> bytes:
    frame = b"\x00" + ids[topic].to_bytes(4, "big") if topic in ids else b""
    if topic == "fmt-avro":
        out = io.BytesIO()
        fastavro.schemaless_writer(out, fastavro.parse_schema(AVRO), {"id": i, "amount": i / 8})
        return frame + out.getvalue()
    if topic == "fmt-proto":
        return frame + b"\x00" + pw.uint(1, i) + pw.text(2, f"/p{i}")
    if topic == "fmt-jsonschema":
        return frame + json.dumps({"id": i, "note": f"n{i}"}).encode()
    return json.dumps({"id": i, "tag": f"t{i}"}).encode()


def expected(topic: str, i: int) -> tuple[object, ...]:
    return {"fmt-avro": (i, i / 8), "fmt-proto": (i, f"/p{i}"), "fmt-jsonschema": (i, f"n{i}"),
            "fmt-json": (i, f"t{i}")}[topic]


def test_avro_protobuf_json_schema_and_json_topics_land_in_one_pipeline(
        kafka: KafkaBroker, schema_registry: SchemaRegistry, tmp_path: Path) -> None:
    ids = {"fmt-avro": schema_registry.register("fmt-avro-value", AVRO),
           "fmt-proto": schema_registry.register("fmt-proto-value", PROTO, kind="PROTOBUF"),
           "fmt-jsonschema": schema_registry.register("fmt-jsonschema-value", JSON_SCHEMA, kind="JSON")}
    for topic in TOPICS:
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
[maintenance]
enabled = false
""")
    cfg = support.load(config)
    assert {t: cfg.values.format_of(t) for t in TOPICS} == {**FORMATS, "fmt-json": "json"}
    assert cfg.formats_of(cfg.table) == ("json",)
    tables = {topic: "db." + topic.replace("-", "_") for topic in TOPICS}
    for run in range(2):   # the second run starts with every table there: each reads its topic's format again
        for topic in TOPICS:
            asyncio.run(support.produce(kafka.bootstrap, topic,
                                        [value(topic, i, ids) for i in range(run * ROUND, (run + 1) * ROUND)], 1))
        ends = asyncio.run(support.end_offsets(kafka.bootstrap, TOPICS))
        changes.run_until_committed(config, ends, tmp_path / "frazil.log",
                                    tables=[*tables.values(), "db.json_declared"])
    catalog = support.catalog_of(cfg)
    for topic, name in {**tables, "declared": "db.json_declared"}.items():
        source = "fmt-json" if topic == "declared" else topic
        rows = catalog.load_table(name).scan().to_arrow().to_pylist()
        fields = [f for f in rows[0] if not f.startswith("_kafka")]
        assert len(fields) == 2, (name, fields)
        got = sorted((r["_kafka_offset"], *(r[f] for f in fields)) for r in rows)
        assert got == [(i, *expected(source, i)) for i in range(2 * ROUND)], name   # each once, as sent
        assert {r["_kafka_topic"] for r in rows} == {source}
