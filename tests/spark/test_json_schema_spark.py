"""JSON values in the Confluent wire format, their schemas (JSON Schema) in the real registry: a
table without declared columns is made from the first record's schema, a second schema version
that adds properties evolves it while frazil runs, and every good record lands once, exactly as
sent, read back by pyiceberg and by Spark SQL. A value without the wire format's frame, one whose
field does not fit its column and one with a property in no schema version go to the dead-letter
topic, each naming why."""

from __future__ import annotations

import copy
import json
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

import registry_formats
import support
from frazil.config import CatalogConfig
from frazil_dev.kafka_broker import KafkaBroker
from frazil_dev.schema_registry import SchemaRegistry

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



def test_json_schema_values_make_a_table_that_evolves_with_the_second_schema_version(
        kafka: KafkaBroker, schema_registry: SchemaRegistry, tmp_path: Path, spark: Any,
        warehouse: CatalogConfig) -> None:
    topic = "json-schema-orders"
    ids = (schema_registry.register(f"{topic}-value", V1, kind="JSON"),
           schema_registry.register(f"{topic}-value", V2, kind="JSON"))
    assert ids[0] != ids[1]
    cfg, logged = registry_formats.land_in_two_versions(
        tmp_path, kafka.bootstrap, topic, "db.json_schema_orders", "json-schema-confluent", schema_registry.url,
        warehouse, RECORDS, lambda i: value(i, ids))
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

    why = registry_formats.dead_letter_reasons(kafka.bootstrap, cfg, lambda i: value(i, ids))
    assert set(why) == set(BAD), why
    for i, kind in BAD.items():
        assert WHY[kind] in why[i], (i, why[i])
