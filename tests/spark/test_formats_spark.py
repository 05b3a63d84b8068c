"""An Avro topic, a Protobuf topic and a plain JSON topic in one pipeline (``[values.topics]``),
each into a declared table: the Avro and Protobuf tables made from their registry schemas, the
JSON one shaped by transforms (a rename, a cast, and a filter that leaves out every odd id, the
last record of each partition among them). Read back by Spark SQL and pyiceberg: every record
once, as sent, the filtered ones nowhere, and the offsets past them committed all the same."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

import changes
import support
from frazil.config import CatalogConfig
from frazil_dev.kafka_broker import KafkaBroker
from frazil_dev.schema_registry import SchemaRegistry
from registry_formats import expected, register, value

pytestmark = [pytest.mark.spark, pytest.mark.integration]

TOPICS = {"mix-avro": "avro-confluent", "mix-proto": "protobuf-confluent", "mix-json": "json"}
TABLES = {"mix-avro": "mixed.orders", "mix-proto": "mixed.clicks", "mix-json": "mixed.events"}
RECORDS = 200   # per topic, over two partitions


def test_three_formats_and_transforms_in_one_pipeline_read_back_by_spark(
        kafka: KafkaBroker, schema_registry: SchemaRegistry, warehouse: CatalogConfig, spark: Any,
        tmp_path: Path) -> None:
    ids = {topic: register(schema_registry, topic, fmt) for topic, fmt in TOPICS.items() if fmt != "json"}
    for topic, fmt in TOPICS.items():
        asyncio.run(support.create_topic(kafka.bootstrap, topic, 2))
        asyncio.run(support.produce(kafka.bootstrap, topic, [value(fmt, i, ids.get(topic)) for i in range(RECORDS)],
                                    2))
    catalog = ", ".join(f'"{k}" = "{v}"' for k, v in warehouse.properties.items() if k != "type")
    path = tmp_path / "frazil.toml"
    path.write_text(f"""[pipeline]
name = "mixed"
commit_interval_s = 0.5
[kafka]
bootstrap_servers = "{kafka.bootstrap}"
topics = {list(TOPICS)!r}
[catalog]
name = "{warehouse.name}"
properties = {{ {catalog} }}
[values.topics]
"mix-avro" = "avro-confluent"
"mix-proto" = "protobuf-confluent"
[schema_registry]
url = "{schema_registry.url}"
[[tables]]
name = "mixed.orders"
topics = "mix-avro"
[[tables]]
name = "mixed.clicks"
topics = "mix-proto"
[[tables]]
name = "mixed.events"
topics = "mix-json"
columns = [{{ name = "id", type = "string" }}, {{ name = "label", type = "string" }}]
transforms = [{{ rename = "tag", to = "label" }}, {{ cast = "id", to = "string" }},
              {{ filter = "id", matches = "[0-9]*[02468]" }}]
[maintenance]
enabled = false
""".replace("'", '"'))
    cfg = support.load(path)
    assert [cfg.formats_of(t) for t in cfg.tables] == [("avro-confluent",), ("protobuf-confluent",), ("json",)]
    ends = asyncio.run(support.end_offsets(kafka.bootstrap, list(TOPICS)))
    # the last record of each partition is an odd id, left out: the offsets still reach the end
    changes.run_until_committed(path, ends, tmp_path / "frazil.log", tables=list(TABLES.values()))

    def index(partition: int, offset: int) -> int:   # produced round-robin: record i at (i % 2, i // 2)
        return partition + 2 * offset

    iceberg = support.catalog_of(cfg)
    for topic, table in TABLES.items():
        fmt = TOPICS[topic]
        want = ({index(p, o): (str(i), f"t{i}") for i in range(0, RECORDS, 2) for p, o in [(i % 2, i // 2)]}
                if fmt == "json" else {i: expected(fmt, i) for i in range(RECORDS)})
        columns = [f.name for f in iceberg.load_table(table).schema().fields if not f.name.startswith("_kafka")]
        assert len(columns) == 2, (table, columns)
        by_spark = spark.sql(f"SELECT _kafka_partition, _kafka_offset, {', '.join(columns)} "
                             f"FROM {warehouse.name}.{table}").collect()
        got = {index(r[0], r[1]): tuple(r[2:]) for r in by_spark}
        assert len(got) == len(by_spark) and got == want, table   # each once, as sent; the filtered nowhere
        rows = iceberg.load_table(table).scan().to_arrow().to_pylist()
        assert {index(r["_kafka_partition"], r["_kafka_offset"]): tuple(r[c] for c in columns) for r in rows} == want
