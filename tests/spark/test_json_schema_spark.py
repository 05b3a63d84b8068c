"""JSON values in the Confluent wire format, their schemas (JSON Schema) in the real registry: a
table without declared columns is made from the first record's schema, a second schema version
that adds properties evolves it while frazil runs, and every good record lands once, exactly as
sent, read back by pyiceberg and by Spark SQL. A value without the wire format's frame, one whose
field does not fit its column and one with a property in no schema version go to the dead-letter
topic, each naming why."""

from __future__ import annotations

import asyncio
import copy
import json
import signal
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer

import support
from frazil.config import CatalogConfig
from frazil_dev.kafka_broker import KafkaBroker
from frazil_dev.schema_registry import SchemaRegistry
from routed import run_frazil

pytestmark = [pytest.mark.spark, pytest.mark.integration]

V1: dict[str, Any] = {
    "$schema": "http://json-schema.org/draft-07/schema#", "title": "Order", "type": "object",
    "additionalProperties": False, "required": ["id", "amount", "at"],
    "properties": {
        "id": {"type": "integer"},
        "name": {"type": ["string", "null"]},
        "amount": {"type": "number"},
        "at": {"type": "string", "format": "date-time"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "meta": {"oneOf": [{"type": "null"}, {"$ref": "#/definitions/Meta"}]},
    },
    "definitions": {"Meta": {"type": "object", "additionalProperties": False, "properties": {
        "region": {"type": "string"}, "score": {"type": "integer", "connect.type": "int32"}}}},
}
V2 = copy.deepcopy(V1)
V2["properties"].update({
    "geo": {"type": "object", "additionalProperties": False, "properties": {"city": {"type": "string"}}},
    "counts": {"type": "object", "additionalProperties": {"type": "integer"}},
    "day": {"type": "string", "format": "date"},
})
RECORDS = 300   # the first half written with V1, the second with V2
AT0 = datetime(2026, 11, 1, tzinfo=UTC)
BAD = {5: "not-framed", 50: "at", 160: "not-framed", 230: "colour"}   # by index: why it is a bad record
WHY = {"not-framed": "not in the Confluent wire format", "at": "at", "colour": "colour"}


def good(i: int) -> dict[str, Any]:
    out: dict[str, Any] = {"id": i, "name": None if i % 7 == 0 else f"n{i}", "amount": i * 0.25,
                           "at": (AT0 + timedelta(seconds=i * 61)).isoformat(),
                           "tags": [f"t{i % 3}"] * (i % 3), "meta": None if i % 5 == 0 else
                           {"region": f"r{i % 4}", "score": i - 100}}
    if i >= RECORDS // 2:
        out.update(geo={"city": f"c{i % 6}"}, counts={"a": i, "b": 2 ** 40 + i}, day=f"2026-12-{1 + i % 28:02d}")
    return out


def value(i: int, ids: tuple[int, int]) -> bytes:
    v = good(i)
    if BAD.get(i) == "at":
        v["at"] = "yesterday"
    elif BAD.get(i) == "colour":
        v["colour"] = "red"
    text = json.dumps(v).encode()
    if BAD.get(i) == "not-framed":
        return text
    return b"\x00" + ids[i >= RECORDS // 2].to_bytes(4, "big") + text


async def produce(bootstrap: str, topic: str, ids: tuple[int, int], numbers: range) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True)
    await producer.start()
    try:
        sends = [await producer.send(topic, value(i, ids), key=b"k%d" % i, partition=i % 2) for i in numbers]
        await asyncio.gather(*sends)
    finally:
        await producer.stop()


def test_json_schema_values_make_a_table_that_evolves_with_the_second_schema_version(
        kafka: KafkaBroker, schema_registry: SchemaRegistry, tmp_path: Path, spark: Any,
        warehouse: CatalogConfig) -> None:
    topic = "json-schema-orders"
    ids = (schema_registry.register(f"{topic}-value", V1, kind="JSON"),
           schema_registry.register(f"{topic}-value", V2, kind="JSON"))
    assert ids[0] != ids[1]
    asyncio.run(support.create_topic(kafka.bootstrap, topic, 2))
    asyncio.run(produce(kafka.bootstrap, topic, ids, range(RECORDS // 2)))
    catalog = {k: v for k, v in warehouse.properties.items() if k != "type"}
    path = support.write_config(
        tmp_path, kafka.bootstrap, [topic], pipeline=topic, table="db.json_schema_orders",
        catalog="{ " + ", ".join(f'"{k}" = "{v}"' for k, v in catalog.items()) + " }",
        extra=f'\n[values]\nformat = "json-schema-confluent"\n\n[schema_registry]\nurl = "{schema_registry.url}"\n')
    text = path.read_text()
    start = text.index("columns = [")
    text = text[:start] + 'unknown_fields = "evolve"\n' + text[text.index("]\n", start) + 2:]   # no columns
    text = text.replace("[catalog]\n", f'[catalog]\nname = "{warehouse.name}"\n', 1)   # the one Spark reads
    path.write_text(text.replace("[kafka]", 'on_bad_record = "dead_letter"\n\n[kafka]', 1))
    cfg = support.load(path)
    assert cfg.values.json_schema and not cfg.table.columns
    log = tmp_path / "frazil.log"
    half = {(topic, p): RECORDS // 4 for p in (0, 1)}
    proc = run_frazil(path, log)   # a process of its own: the daemon's shutdown stops the Spark session it finds
    try:
        support.wait_until_committed(support.catalog_of(cfg), cfg, half, alive=lambda: proc.poll() is None)
        asyncio.run(produce(kafka.bootstrap, topic, ids, range(RECORDS // 2, RECORDS)))   # V2 while it runs
        support.wait_until_committed(support.catalog_of(cfg), cfg, {tp: RECORDS // 2 for tp in half},
                                     alive=lambda: proc.poll() is None)
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0, log.read_text()[-3000:]
    logged = log.read_text()
    assert "made from its first record's JSON Schema" in logged and "schema evolved" in logged, logged[-3000:]

    table = support.catalog_of(cfg).load_table(cfg.table.name)
    types = {f.name: str(f.field_type) for f in table.schema().fields}
    assert {k: types[k] for k in ("id", "name", "amount", "at", "tags", "day")} == {
        "id": "long", "name": "string", "amount": "double", "at": "timestamptz", "tags": "list<string>", "day": "date"}
    assert [str(f.field_type) for f in table.schema().find_field("meta").field_type.fields] == ["string", "int"]
    assert str(table.schema().find_field("counts").field_type) == "map<string, long>"
    counts = support.count_offsets(support.catalog_of(cfg), cfg.table.name)
    assert max(counts.values()) == 1 and set(counts) == {(topic, i % 2, i // 2) for i in range(RECORDS) if i not in BAD}

    want = {i: good(i) for i in range(RECORDS) if i not in BAD}
    by_pyiceberg = {r["id"]: r for r in table.scan().to_arrow().to_pylist()}
    assert set(by_pyiceberg) == set(want)
    for i, row in by_pyiceberg.items():
        sent = want[i]
        assert (row["name"], row["amount"], row["at"], row["tags"], row["meta"]) == (
            sent["name"], sent["amount"], datetime.fromisoformat(sent["at"]), sent["tags"], sent["meta"]), (i, row)
        assert row["geo"] == sent.get("geo") and row["day"] == (date.fromisoformat(sent["day"]) if "day" in sent
                                                                else None), (i, row)
        assert (dict(row["counts"]) if row["counts"] is not None else None) == sent.get("counts"), (i, row)

    rows = spark.sql(f"SELECT id, meta.score, geo.city, counts['b'] AS b, day "
                     f"FROM {warehouse.name}.db.json_schema_orders").collect()
    assert {r.id: (r.score, r.city, r.b, r.day) for r in rows} == {
        i: ((w["meta"] or {}).get("score"), w.get("geo", {}).get("city"), w.get("counts", {}).get("b"),
            date.fromisoformat(w["day"]) if "day" in w else None) for i, w in want.items()}

    letters = asyncio.run(support.dead_letters(kafka.bootstrap, cfg.dead_letter_topic))
    why = {}
    for letter in letters:
        (_, partition, offset), headers = support.source_of(letter)
        i = partition + 2 * offset
        assert letter.value == value(i, ids), i   # as sent, frame and all
        why[i] = f'{headers["frazil.error.field"]}: {headers["frazil.error"]}'
    assert set(why) == set(BAD) and len(letters) == len(BAD), why
    for i, kind in BAD.items():
        assert WHY[kind] in why[i], (i, why[i])
