"""Tables made from Kafka Connect's JSON schema envelope (ingest/connect_schema.py, pure): the
column types and units Debezium's schema asks for, as its JSON converter writes them."""

from __future__ import annotations

import json

import pytest
from pyiceberg.types import LongType

from frazil.ingest import connect_schema


def field(name: str, kind: str, *, optional: bool = True, semantic: str = "", **more: object) -> dict[str, object]:
    return {"type": kind, "optional": optional, "field": name, **({"name": semantic} if semantic else {}), **more}


ROW = {"type": "struct", "optional": True, "name": "pg.shop.items.Value", "field": "after", "fields": [
    field("id", "int64", optional=False),
    field("small", "int16"), field("n", "int32"), field("r", "float"), field("d", "double"), field("flag", "boolean"),
    field("name", "string"), field("raw", "bytes"),
    field("amount", "bytes", semantic="org.apache.kafka.connect.data.Decimal",
          parameters={"scale": "2", "connect.decimal.precision": "12"}),
    field("day", "int32", semantic="io.debezium.time.Date"),
    field("clock", "int64", semantic="io.debezium.time.MicroTime"),
    field("clock_ms", "int32", semantic="io.debezium.time.Time"),
    field("ts", "int64", semantic="io.debezium.time.MicroTimestamp"),
    field("ts_ms", "int64", semantic="io.debezium.time.Timestamp"),
    field("at", "string", semantic="io.debezium.time.ZonedTimestamp"),
    field("instant", "int64", semantic="org.apache.kafka.connect.data.Timestamp"),
    field("u", "string", semantic="io.debezium.data.Uuid"),
    field("tags", "array", items={"type": "string", "optional": True}),
    field("attrs", "map", keys={"type": "string"}, values={"type": "int64"}),
    field("geo", "struct", fields=[field("city", "string"),
                                   field("since", "int32", semantic="io.debezium.time.Date")]),
]}
ENVELOPE = {"type": "struct", "name": "pg.shop.items.Envelope", "optional": False, "fields": [
    {**ROW, "field": "before"}, ROW, field("op", "string", optional=False),
    field("source", "struct", fields=[field("lsn", "int64")])]}


def test_a_debezium_row_becomes_typed_columns_with_the_units_its_numbers_are_sent_in() -> None:
    schema, units = connect_schema.table_schema(ENVELOPE, row="after", identifiers=["id"],
                                                extra=[("_kafka_offset", LongType(), True)])
    assert [(f.name, str(f.field_type), f.required) for f in schema.fields] == [
        ("id", "long", True), ("small", "int", False), ("n", "int", False), ("r", "float", False),
        ("d", "double", False), ("flag", "boolean", False), ("name", "string", False), ("raw", "binary", False),
        ("amount", "decimal(12, 2)", False), ("day", "date", False), ("clock", "time", False),
        ("clock_ms", "time", False), ("ts", "timestamp", False), ("ts_ms", "timestamp", False),
        ("at", "timestamptz", False), ("instant", "timestamptz", False), ("u", "string", False),
        ("tags", "list<string>", False), ("attrs", "map<string, long>", False),
        # a nested date keeps the integer it is sent as: units are per top-level column
        ("geo", "struct<23: city: optional string, 24: since: optional int>", False),
        ("_kafka_offset", "long", True)]
    assert schema.identifier_field_names() == {"id"}
    assert units == {"day": "d", "clock": "us", "clock_ms": "ms", "ts": "us", "ts_ms": "ms", "instant": "ms"}
    whole, _ = connect_schema.table_schema(ROW)   # upsert: the value is the row
    assert [f.name for f in whole.fields][:3] == ["id", "small", "n"]


@pytest.mark.parametrize(("schema", "kwargs", "message"), [
    (ENVELOPE, {"row": "row"}, "has no field 'row'"),
    (ENVELOPE, {"row": "op"}, "not a struct of columns"),
    (ROW, {"identifiers": ["name"]}, "lets identifier column name be null"),
    (ROW, {"identifiers": ["nope"]}, "has no field nope"),
    (ROW, {"extra": [("name", LongType(), True)]}, "name of a Kafka metadata column"),
    ({**ROW, "fields": [field("id", "float", optional=False)]}, {"identifiers": ["id"]}, "not float or double"),
    ({**ROW, "fields": [field("a", "bytes", semantic=connect_schema.DECIMAL, parameters={"scale": "2"})]}, {},
     "gives no precision"),
    ({**ROW, "fields": [field("a", "bytes", semantic=connect_schema.DECIMAL,
                              parameters={"scale": "2", "connect.decimal.precision": "40"})]}, {},
     r"decimal\(40, 2\); an Iceberg decimal has a precision of 1 to 38"),
    ({**ROW, "fields": [field("m", "map", keys={"type": "int32"}, values={"type": "string"})]}, {}, "only string keys"),
    ({**ROW, "fields": [field("x", "uint8")]}, {}, "'x': has the type 'uint8'"),
])
def test_a_field_that_cannot_be_a_column_is_named(schema: dict[str, object], kwargs: dict[str, object],
                                                  message: str) -> None:
    with pytest.raises(ValueError, match=message):
        connect_schema.table_schema(schema, **kwargs)  # type: ignore[arg-type]


def test_only_kafka_connects_envelope_gives_a_schema() -> None:
    assert connect_schema.envelope_schema(json.dumps({"schema": ENVELOPE, "payload": {}}).encode()) == ENVELOPE
    for value in (b'{"id": 1}', b"not json", b'{"schema": {"type": "string"}, "payload": "x"}',
                  json.dumps({"schema": ENVELOPE, "payload": {}, "more": 1}).encode()):
        assert connect_schema.envelope_schema(value) is None


def test_a_later_schema_asks_for_its_new_fields_typed_and_widenings_and_nothing_else() -> None:
    """A table made from ROW meets the row's next version: new fields become columns of the types
    the schema says (a decimal, not the double its digits would look like; a date sent as days,
    with its unit), nested ones under their struct; an int32 that became an int64 widens; a field
    that changed kind asks for nothing (its records stay bad records)."""
    table, _ = connect_schema.table_schema(ROW, identifiers=["id"])
    fields = [f for f in ROW["fields"] if f["field"] not in ("n", "flag", "geo")]   # type: ignore[index]
    later = {**ROW, "fields": [
        *fields, field("n", "int64"), field("flag", "string"),
        field("geo", "struct", fields=[field("city", "string"), field("zip", "string")]),
        field("price", "bytes", semantic=connect_schema.DECIMAL, parameters={"scale": "3",
                                                                             "connect.decimal.precision": "8"}),
        field("born", "int32", semantic="io.debezium.time.Date")]}
    changes, units = connect_schema.evolution_of(table, {**ENVELOPE, "fields": [later]}, row="after")
    assert [str(c) for c in changes] == ["widened n long", "added geo.zip string", "added price decimal(8, 3)",
                                         "added born date"]
    assert units == {"born": "d"}
    assert connect_schema.evolution_of(table, ROW) == ([], {})
