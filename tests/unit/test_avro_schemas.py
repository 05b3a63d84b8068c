"""Avro writer schemas against a table (ingest/avro.py, pure): what is read, refused, or evolved."""

from __future__ import annotations

import json

import pytest
from pyiceberg.schema import Schema
from pyiceberg.types import (
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    ListType,
    LongType,
    NestedField,
    StringType,
    StructType,
    TimestamptzType,
)

from frazil.ingest import avro, avro_names

TABLE = Schema(
    NestedField(1, "id", LongType(), required=True),
    NestedField(2, "name", StringType()),
    NestedField(3, "at", TimestamptzType()),
    NestedField(4, "geo", StructType(NestedField(5, "city", StringType()))),
    NestedField(6, "price", DecimalType(10, 2)),
    NestedField(7, "ratio", FloatType()),
)


def writer(*fields: dict[str, object], name: str = "Event") -> dict[str, object]:
    return {"type": "record", "name": name, "namespace": "shop", "fields": list(fields)}


ID = {"name": "id", "type": "int"}


def test_a_subset_writer_is_read_with_the_table_columns_in_order_and_nulls_for_the_rest() -> None:
    got = avro.resolve(writer({"name": "name", "type": "string"}, ID), TABLE)
    assert isinstance(got, avro.Readable)
    reader = json.loads(got.reader)
    assert (reader["name"], reader["namespace"]) == ("Event", "shop")   # arrow-avro matches record names
    assert [f["name"] for f in reader["fields"]] == ["id", "name", "at", "geo", "price", "ratio"]
    assert reader["fields"][0]["type"] == "int"   # the native side widens it to the long column
    assert all(f["type"][0] == "null" and f["default"] is None for f in reader["fields"][2:])


@pytest.mark.parametrize(("field", "words"), [
    ({"name": "at", "type": "long"}, "its unit would be a guess"),
    ({"name": "name", "type": "int"}, "cannot hold exactly"),
    ({"name": "at", "type": {"type": "long", "logicalType": "timestamp-nanos"}}, "does not read yet"),
    ({"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 3}},
     "cannot hold exactly"),
    ({"name": "name", "type": ["null", "string", "int"]}, "a union of"),
    ({"name": "Name", "type": "string"}, "differ only in case"),
    ({"name": "extra", "type": "string"}, "the table has no such column"),
])
def test_a_value_that_would_be_bent_makes_the_writer_schema_refused_naming_the_field(
        field: dict[str, object], words: str) -> None:
    got = avro.resolve(writer(ID, field), TABLE)
    assert isinstance(got, avro.Refused), got
    assert words in got.reason and got.field == field["name"], got


def test_required_columns_need_a_non_null_writer_field() -> None:
    got = avro.resolve(writer({"name": "id", "type": ["null", "long"]}), TABLE)
    assert isinstance(got, avro.Refused) and "lets id be null" in got.reason
    got = avro.resolve(writer({"name": "name", "type": "string"}), TABLE)
    assert isinstance(got, avro.Refused) and "no field 'id'" in got.reason


def test_evolve_asks_for_new_columns_widenings_and_optional_and_nothing_once_the_table_has_them() -> None:
    w = writer({"name": "id", "type": ["null", "long"]}, {"name": "ratio", "type": "double"},
               {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 14, "scale": 2}},
               {"name": "geo", "type": {"type": "record", "name": "Geo", "fields": [
                   {"name": "city", "type": "string"}, {"name": "zone", "type": "int"}]}},
               {"name": "tags", "type": {"type": "array", "items": "string"}})
    got = avro.resolve(w, TABLE, unknown_fields="evolve")
    assert isinstance(got, avro.Evolve), got
    assert sorted(str(c) for c in got.changes) == sorted([
        "made optional id long", "widened ratio double", "widened price decimal(14, 2)", "added geo.zone int",
        "added tags list<string>"])
    assert isinstance(avro.resolve(w, TABLE, unknown_fields="fail"), avro.Refused)
    evolved = Schema(
        NestedField(1, "id", LongType()), NestedField(2, "name", StringType()), NestedField(3, "at", TimestamptzType()),
        NestedField(4, "geo", StructType(NestedField(5, "city", StringType()), NestedField(8, "zone", IntegerType()))),
        NestedField(6, "price", DecimalType(14, 2)), NestedField(7, "ratio", DoubleType()),
        NestedField(9, "tags", ListType(10, StringType(), element_required=False)))
    assert isinstance(avro.resolve(w, evolved, unknown_fields="evolve"), avro.Readable)


def test_ignore_reads_past_unknown_fields_and_names_them() -> None:
    got = avro.resolve(writer(ID, {"name": "extra", "type": "string"}), TABLE, unknown_fields="ignore")
    assert isinstance(got, avro.Readable) and got.ignored == ("extra",)


def test_case_insensitive_reads_a_near_miss_through_an_alias() -> None:
    got = avro.resolve(writer(ID, {"name": "NAME", "type": "string"}), TABLE, case_insensitive=True)
    assert isinstance(got, avro.Readable)
    assert json.loads(got.reader)["fields"][1] == {"name": "name", "type": "string", "aliases": ["NAME"]}


def test_metadata_columns_are_not_read_from_the_value() -> None:
    table = Schema(NestedField(1, "id", LongType(), required=True),
                   NestedField(2, "_kafka_offset", LongType(), required=True))
    got = avro.resolve(writer(ID), table, exclude=("_kafka_offset",))
    assert isinstance(got, avro.Readable) and [f["name"] for f in json.loads(got.reader)["fields"]] == ["id"]


def test_a_schema_that_is_not_a_record_is_refused_with_its_text() -> None:
    with pytest.raises(ValueError, match="must be a record"):
        avro.parse('"string"')
    with pytest.raises(ValueError, match="not JSON"):
        avro.parse("{")


def test_an_identifier_field_is_never_made_optional() -> None:
    table = Schema(NestedField(1, "id", LongType(), required=True), NestedField(2, "name", StringType()),
                   identifier_field_ids=[1])
    got = avro.resolve(writer({"name": "id", "type": ["null", "long"]}), table, unknown_fields="evolve")
    assert isinstance(got, avro.Refused) and "lets id be null" in got.reason


@pytest.mark.parametrize("w", [
    writer(ID),                                                    # the table's uuid column has no Avro filler
    writer(ID, {"name": "x", "type": "Undefined"}),                # not valid Avro
    writer(ID, {"name": "x", "type": {"type": "fixed", "name": "F"}}),   # fixed without a size
])
def test_a_writer_schema_that_cannot_be_read_is_refused_never_an_exception(w: dict[str, object]) -> None:
    from pyiceberg.types import UUIDType
    table = Schema(NestedField(1, "id", LongType(), required=True), NestedField(2, "u", UUIDType()))
    got = avro.resolve(w, table, unknown_fields="evolve")
    assert isinstance(got, avro.Refused), got


def test_a_named_type_used_twice_is_defined_once_per_use_and_a_recursive_one_stays_refused() -> None:
    row = {"type": "record", "name": "Row", "fields": [
        {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["A"]}}]}
    w = writer({"name": "before", "type": ["null", row]}, {"name": "after", "type": ["null", "Row"]},
               {"name": "again", "type": "shop.Row"})
    out = avro_names.unshared(w)
    names = [(b[1]["name"], b[1]["fields"][0]["type"]["name"]) for b in (f["type"] for f in out["fields"][:2])]
    assert names == [("Row", "Kind"), ("Row_2", "Kind_2")]
    assert (out["fields"][2]["type"]["name"], out["fields"][2]["type"]["namespace"]) == ("Row_3", "shop")
    table = Schema(NestedField(1, "before", StructType(NestedField(2, "kind", StringType()))),
                   NestedField(3, "after", StructType(NestedField(4, "kind", StringType()))))
    assert isinstance(avro.resolve(w, table, unknown_fields="ignore"), avro.Readable)
    node = writer(ID, {"name": "next", "type": ["null", "Event"]})
    got = avro.resolve(node, Schema(NestedField(1, "id", LongType()), NestedField(2, "next", StructType(
        NestedField(3, "id", LongType())))))
    assert isinstance(got, avro.Refused) and "recursive" in got.reason, got


def test_a_new_decimal_beyond_icebergs_precision_is_refused_naming_the_limit() -> None:
    w = writer(ID, {"name": "d", "type": {"type": "bytes", "logicalType": "decimal", "precision": 39, "scale": 2}})
    got = avro.resolve(w, Schema(NestedField(1, "id", LongType())), unknown_fields="evolve")
    assert got == avro.Refused("d", "the writer schema's new field d is decimal(39, 2); an Iceberg decimal has a "
                                    "precision of 1 to 38 and a scale of 0 to its precision: send it as a string, or "
                                    "with a precision Iceberg can hold")


def test_a_new_table_takes_its_columns_from_the_writer_schema_optional_but_its_row_identity() -> None:
    from pyiceberg.types import DateType, DoubleType

    row = {"type": "record", "name": "Value", "fields": [
        {"name": "id", "type": "long"}, {"name": "kind", "type": {"type": "enum", "name": "K", "symbols": ["A"]}},
        {"name": "day", "type": ["null", {"type": "int", "logicalType": "date"}]},
        {"name": "ratio", "type": "double"}]}
    envelope = writer({"name": "before", "type": ["null", row]}, {"name": "after", "type": ["null", "Value"]},
                      {"name": "op", "type": "string"})
    got = avro.table_schema(envelope, row="after", identifiers=["id"], extra=[("_kafka_offset", LongType(), True)])
    assert [(f.name, str(f.field_type), f.required) for f in got.fields] == [
        ("id", "long", True), ("kind", "string", False), ("day", "date", False), ("ratio", "double", False),
        ("_kafka_offset", "long", True)]
    assert got.identifier_field_names() == {"id"} and isinstance(got.find_field("day").field_type, DateType)
    assert isinstance(got.find_field("ratio").field_type, DoubleType)
    whole = avro.table_schema(envelope)
    assert [f.name for f in whole.fields] == ["before", "after", "op"]
    for kwargs, message in [({"row": "after", "identifiers": ["ratio"]}, "not float or double"),
                            ({"row": "after", "identifiers": ["nope"]}, "no field nope"),
                            ({"row": "op"}, "not a record of columns"),
                            ({"row": "row"}, "has no field 'row'"),
                            ({"row": "after", "extra": [("kind", LongType(), True)]}, "Kafka metadata column")]:
        with pytest.raises(ValueError, match=message):
            avro.table_schema(envelope, **kwargs)   # type: ignore[arg-type]


def test_a_recursive_type_used_twice_is_read_past_and_a_nullable_identifier_makes_no_table() -> None:
    node = {"type": "record", "name": "Node", "fields": [{"name": "next", "type": ["null", "Node"]}]}
    w = writer(ID, {"name": "a", "type": node}, {"name": "b", "type": "Node"})
    got = avro.resolve(w, Schema(NestedField(1, "id", LongType())), unknown_fields="ignore")
    assert isinstance(got, avro.Readable) and got.ignored == ("a", "b"), got
    with pytest.raises(ValueError, match="lets identifier column"):
        avro.table_schema(writer({"name": "id", "type": ["null", "long"]}), identifiers=["id"])
