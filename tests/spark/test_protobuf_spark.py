"""Protobuf values in the Confluent wire format, their schemas (``.proto`` files) in the real
registry: a table without declared columns is made from the first record's message, a second
schema version that adds fields evolves it while frazil runs, and every good record lands once,
exactly as sent (proto3's defaults for fields left out), read back by pyiceberg and by Spark SQL.
The messages are written by a hand-made encoder of Protobuf's wire format (``frazil_dev.protowire``),
independent of the reader. A value without the wire format's frame, a message that does not decode
and one with a field number its schema lacks go to the dead-letter topic, each naming why."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

import registry_formats
import support
from frazil.config import CatalogConfig
from frazil_dev import protowire as pw
from frazil_dev.kafka_broker import KafkaBroker
from frazil_dev.schema_registry import SchemaRegistry

pytestmark = [pytest.mark.spark, pytest.mark.integration]

V1 = """syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";

message Order {
  int64 id = 1;
  string name = 2;
  double amount = 3;
  google.protobuf.Timestamp at = 4;
  repeated string tags = 5;
  Geo geo = 6;
  Kind kind = 7;
  enum Kind { NEW = 0; PAID = 1; SHIPPED = 2; }
  message Geo { string city = 1; int32 zone = 2; }
}
"""
V2 = V1.replace("  Kind kind = 7;\n", "  Kind kind = 7;\n  map<string, int64> counts = 8;\n  uint64 big = 9;\n")
RECORDS = 300   # the first half written with V1, the second with V2
AT0 = datetime(2026, 11, 1, tzinfo=UTC)
BAD = {5: "not-framed", 50: "truncated", 230: "unknown-field"}
WHY = {"not-framed": "not in the Confluent wire format", "truncated": "not a valid shop.Order message",
       "unknown-field": "field number 15, which its schema does not have"}
KINDS = ("NEW", "PAID", "SHIPPED")


def good(i: int) -> dict[str, Any]:
    out: dict[str, Any] = {"id": i, "name": "" if i % 7 == 0 else f"n{i}", "amount": i * 0.25,
                           "at": None if i % 11 == 0 else AT0 + timedelta(seconds=i * 61, microseconds=i),
                           "tags": [f"t{i % 3}"] * (i % 3), "geo": None if i % 5 == 0 else
                           {"city": f"c{i % 4}", "zone": i - 100}, "kind": KINDS[i % 3]}
    if i >= RECORDS // 2:
        out.update(counts={"a": i, "b": -(2 ** 40) - i}, big=2 ** 64 - 1 - i)
    return out


def message(row: dict[str, Any]) -> bytes:
    out = pw.uint(1, row["id"]) + pw.text(2, row["name"]) + pw.double(3, row["amount"])
    if row["at"] is not None:
        seconds = int(row["at"].timestamp())
        out += pw.length(4, pw.uint(1, seconds) + pw.uint(2, row["at"].microsecond * 1000))
    out += b"".join(pw.text(5, t) for t in row["tags"])
    if row["geo"] is not None:
        out += pw.length(6, pw.text(1, row["geo"]["city"]) + pw.uint(2, row["geo"]["zone"]))
    out += pw.uint(7, KINDS.index(row["kind"]))
    for k, v in (row.get("counts") or {}).items():
        out += pw.length(8, pw.text(1, k) + pw.uint(2, v))
    out += pw.uint(9, row.get("big", 0))
    return out


def value(i: int, ids: tuple[int, int]) -> bytes:
    body = message(good(i))
    if BAD.get(i) == "not-framed":
        return body
    if BAD.get(i) == "truncated":
        body = body[:-3]
    elif BAD.get(i) == "unknown-field":
        body += pw.uint(15, 1)
    return b"\x00" + ids[i >= RECORDS // 2].to_bytes(4, "big") + b"\x00" + body   # indexes [0]: Order



def test_protobuf_values_make_a_table_that_evolves_with_the_second_schema_version(
        kafka: KafkaBroker, schema_registry: SchemaRegistry, tmp_path: Path, spark: Any,
        warehouse: CatalogConfig) -> None:
    topic = "protobuf-orders"
    ids = (schema_registry.register(f"{topic}-value", V1, kind="PROTOBUF"),
           schema_registry.register(f"{topic}-value", V2, kind="PROTOBUF"))
    assert ids[0] != ids[1]
    cfg, logged = registry_formats.land_in_two_versions(
        tmp_path, kafka.bootstrap, topic, "db.protobuf_orders", "protobuf-confluent", schema_registry.url, warehouse,
        RECORDS, lambda i: value(i, ids))
    assert "made from its first record's Protobuf message" in logged and "schema evolved" in logged, logged[-3000:]

    table = support.catalog_of(cfg).load_table(cfg.table.name)
    types = {f.name: str(f.field_type) for f in table.schema().fields}
    assert {k: types[k] for k in ("id", "name", "amount", "at", "tags", "kind", "big")} == {
        "id": "long", "name": "string", "amount": "double", "at": "timestamptz", "tags": "list<string>",
        "kind": "string", "big": "decimal(20, 0)"}
    assert str(table.schema().find_field("counts").field_type).startswith("map<string, long>")
    counts = support.count_offsets(support.catalog_of(cfg), cfg.table.name)
    assert max(counts.values()) == 1 and set(counts) == {(topic, i % 2, i // 2) for i in range(RECORDS) if i not in BAD}

    want = {i: good(i) for i in range(RECORDS) if i not in BAD}
    by_pyiceberg = {r["id"]: r for r in table.scan().to_arrow().to_pylist()}
    assert set(by_pyiceberg) == set(want)
    for i, row in by_pyiceberg.items():
        sent = want[i]
        assert {k: row[k] for k in ("name", "amount", "at", "tags", "geo", "kind")} == {
            k: sent[k] for k in ("name", "amount", "at", "tags", "geo", "kind")}, (i, row)
        if i >= RECORDS // 2:
            assert (dict(row["counts"]), row["big"]) == (sent["counts"], Decimal(sent["big"])), (i, row)
        else:
            assert (row["counts"], row["big"]) == (None, None), (i, row)   # written before the fields existed

    rows = spark.sql(f"SELECT id, geo.zone, kind, counts['b'] AS b, big, at "
                     f"FROM {warehouse.name}.db.protobuf_orders").collect()
    assert {r.id: (r.zone, r.kind, r.b, r.big, r.at) for r in rows} == {
        i: ((w["geo"] or {}).get("zone"), w["kind"], (w.get("counts") or {}).get("b"),
            Decimal(w["big"]) if "big" in w else None,
            w["at"].astimezone().replace(tzinfo=None) if w["at"] else None) for i, w in want.items()}

    why = registry_formats.dead_letter_reasons(kafka.bootstrap, cfg, lambda i: value(i, ids))
    assert set(why) == set(BAD), why
    for i, kind in BAD.items():
        assert WHY[kind] in why[i], (i, why[i])
