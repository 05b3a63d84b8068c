"""One topic of values in a registry format (``json-schema-confluent``, ``protobuf-confluent``) into
a table without declared columns, made from the first record's schema and evolved by a second
schema version produced while frazil runs: the set-up the Spark tests of those formats share.
frazil runs as a process of its own (the daemon's shutdown stops the Spark session it finds)."""

from __future__ import annotations

import asyncio
import io
import json
import signal
from collections.abc import Callable
from pathlib import Path

import fastavro
from aiokafka import AIOKafkaProducer

import support
from frazil.config import CatalogConfig, Config
from frazil_dev import protowire as pw
from frazil_dev.schema_registry import SchemaRegistry
from routed import run_frazil

PARTITIONS = 2


async def produce(bootstrap: str, topic: str, values: Callable[[int], bytes], numbers: range) -> None:
    """``values(i)`` for each of ``numbers``, keyed ``k<i>``, to partition ``i % 2``."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True)
    await producer.start()
    try:
        sends = [await producer.send(topic, values(i), key=b"k%d" % i, partition=i % PARTITIONS) for i in numbers]
        await asyncio.gather(*sends)
    finally:
        await producer.stop()


def land_in_two_versions(tmp_path: Path, bootstrap: str, topic: str, table: str, fmt: str, registry_url: str,
                         warehouse: CatalogConfig, records: int, values: Callable[[int], bytes]) -> tuple[Config, str]:
    """The first half of ``records`` produced, frazil started (no declared columns, ``unknown_fields
    = "evolve"``, bad records to the dead-letter topic, the catalog Spark reads), the second half
    produced once the first is committed, and frazil stopped once that is too. The config and the log."""
    asyncio.run(support.create_topic(bootstrap, topic, PARTITIONS))
    asyncio.run(produce(bootstrap, topic, values, range(records // 2)))
    catalog = {k: v for k, v in warehouse.properties.items() if k != "type"}
    path = support.write_config(
        tmp_path, bootstrap, [topic], pipeline=topic, table=table,
        catalog=support.toml_table(catalog),
        extra=f'\n[values]\nformat = "{fmt}"\n\n[schema_registry]\nurl = "{registry_url}"\n')
    text = path.read_text()
    start = text.index("columns = [")
    text = text[:start] + 'unknown_fields = "evolve"\n' + text[text.index("]\n", start) + 2:]   # no columns
    text = text.replace("[catalog]\n", f'[catalog]\nname = "{warehouse.name}"\n', 1)   # the one Spark reads
    path.write_text(text.replace("[kafka]", 'on_bad_record = "dead_letter"\n\n[kafka]', 1))
    cfg = support.load(path)
    assert cfg.values.format == fmt and not cfg.table.columns
    log = tmp_path / "frazil.log"
    half = {(topic, p): records // 2 // PARTITIONS for p in range(PARTITIONS)}
    proc = run_frazil(path, log)
    try:
        support.wait_until_committed(support.catalog_of(cfg), cfg, half, alive=lambda: proc.poll() is None)
        asyncio.run(produce(bootstrap, topic, values, range(records // 2, records)))   # the second version
        support.wait_until_committed(support.catalog_of(cfg), cfg, {tp: records // PARTITIONS for tp in half},
                                     alive=lambda: proc.poll() is None)
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0, log.read_text()[-3000:]
    return cfg, log.read_text()


def dead_letter_reasons(bootstrap: str, cfg: Config, sent: Callable[[int], bytes]) -> dict[int, str]:
    """Each dead letter's record (by its index ``partition + 2 * offset``) and its error; each letter
    holds its value as sent, and none is there twice."""
    letters = asyncio.run(support.dead_letters(bootstrap, cfg.dead_letter_topic))
    why: dict[int, str] = {}
    for letter in letters:
        (_, partition, offset), headers = support.source_of(letter)
        i = partition + PARTITIONS * offset
        assert letter.value == sent(i) and i not in why, i   # as sent, frame and all; once
        why[i] = f'{headers["frazil.error.field"]}: {headers["frazil.error"]}'
    return why


# One small schema per format, for pipelines reading topics of several formats at once.
AVRO = {"type": "record", "name": "Order", "namespace": "shop",
        "fields": [{"name": "id", "type": "long"}, {"name": "amount", "type": "double"}]}
PROTO = 'syntax = "proto3"; package web; message Click { int64 id = 1; string page = 2; }'
JSON_SCHEMA = {"type": "object", "properties": {"id": {"type": "integer"}, "note": {"type": "string"}}}
KINDS = {"avro-confluent": "AVRO", "protobuf-confluent": "PROTOBUF", "json-schema-confluent": "JSON"}
SCHEMAS: dict[str, str | dict[str, object]] = {
    "avro-confluent": AVRO, "protobuf-confluent": PROTO, "json-schema-confluent": JSON_SCHEMA}


def register(registry: SchemaRegistry, topic: str, fmt: str) -> int:
    """The schema of ``fmt`` registered for ``topic``'s values; its id."""
    return registry.register(f"{topic}-value", SCHEMAS[fmt], kind=KINDS[fmt])


def value(fmt: str, i: int, schema_id: int | None) -> bytes:
    """Record ``i`` in ``fmt`` (the Confluent wire format's frame naming ``schema_id``)."""
    frame = b"\x00" + schema_id.to_bytes(4, "big") if schema_id is not None else b""
    if fmt == "avro-confluent":
        out = io.BytesIO()
        fastavro.schemaless_writer(out, fastavro.parse_schema(AVRO), {"id": i, "amount": i / 8})
        return frame + out.getvalue()
    if fmt == "protobuf-confluent":
        return frame + b"\x00" + pw.uint(1, i) + pw.text(2, f"/p{i}")
    if fmt == "protobuf":   # a bare message of PROTO's type
        return pw.uint(1, i) + pw.text(2, f"/p{i}")
    if fmt == "json-schema-confluent":
        return frame + json.dumps({"id": i, "note": f"n{i}"}).encode()
    return json.dumps({"id": i, "tag": f"t{i}"}).encode()


def expected(fmt: str, i: int) -> tuple[object, ...]:
    """The columns (other than Kafka's) record ``i`` in ``fmt`` lands as, in schema order."""
    return {"avro-confluent": (i, i / 8), "protobuf-confluent": (i, f"/p{i}"), "protobuf": (i, f"/p{i}"),
            "json-schema-confluent": (i, f"n{i}"), "json": (i, f"t{i}")}[fmt]
