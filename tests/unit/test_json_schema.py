"""Tables made from JSON Schema documents (pure): each property's column type, nullable forms,
local references, the changes a later version asks, and the properties that cannot be columns."""

from __future__ import annotations

import re
from typing import Any

import pytest
from pyiceberg.types import IntegerType, LongType, NestedField, StringType

from frazil.iceberg import declared
from frazil.iceberg.evolution import Change
from frazil.ingest import json_schema


def types(doc: dict[str, Any]) -> dict[str, str]:
    return {f.name: declared.shape(f.field_type) for f in json_schema.table_schema(doc).fields}


def obj(**properties: Any) -> dict[str, Any]:
    return {"type": "object", "properties": properties}


def test_each_json_type_has_its_column_type() -> None:
    doc = obj(i={"type": "integer"}, small={"type": "integer", "connect.type": "int16"}, n={"type": "number"},
              b={"type": "boolean"}, s={"type": "string"}, at={"type": "string", "format": "date-time"},
              d={"type": "string", "format": "date"}, t={"type": "string", "format": "time"},
              e={"enum": ["a", "b"]}, u={"type": "string", "format": "uuid"},
              xs={"type": "array", "items": {"type": "integer"}},
              m={"type": "object", "additionalProperties": {"type": "number"}},
              st=obj(a={"type": "string"}, deeper=obj(x={"type": "boolean"})))
    assert types(doc) == {
        "i": "long", "small": "int", "n": "double", "b": "boolean", "s": "string", "at": "timestamptz", "d": "date",
        "t": "time", "e": "string", "u": "string", "xs": "list<long>", "m": "map<string, double>",
        "st": "struct<a: string, deeper: struct<x: boolean>>"}
    schema = json_schema.table_schema(doc)
    assert all(not f.required for f in schema.fields)   # the serializer enforces required; versions may drop one


def test_nullable_forms_and_local_references_are_the_other_type() -> None:
    doc = {**obj(a={"type": ["string", "null"]}, b={"oneOf": [{"type": "null"}, {"$ref": "#/definitions/Geo"}]},
                 c={"anyOf": [{"$ref": "#/$defs/Id"}, {"type": "null"}]}, d={"$ref": "#/definitions/Geo"}),
           "definitions": {"Geo": obj(city={"type": "string"})}, "$defs": {"Id": {"type": "integer"}}}
    got = types(doc)
    assert (got["a"], got["c"]) == ("string", "long")
    assert got["b"] == got["d"] == "struct<city: string>"


def test_metadata_columns_come_after_the_properties_and_may_not_be_named_by_one() -> None:
    extra = [("_kafka_offset", LongType(), True)]
    schema = json_schema.table_schema(obj(id={"type": "integer"}), extra=extra)
    assert [(f.name, f.required) for f in schema.fields] == [("id", False), ("_kafka_offset", True)]
    with pytest.raises(ValueError, match="property '_kafka_offset': is the name of a Kafka metadata column"):
        json_schema.table_schema(obj(_kafka_offset={"type": "integer"}), extra=extra)


@pytest.mark.parametrize(("doc", "message"), [
    ({"type": "array", "items": {"type": "string"}}, "'the schema': is not an object with properties"),
    (obj(x={"type": ["string", "integer"]}), "'x': may be any of string, integer: a column holds one type"),
    (obj(x={}), "'x': says no type"),
    (obj(x={"type": "null"}), "'x': says no type"),
    (obj(x={"oneOf": [{"type": "string"}, {"type": "integer"}]}), "'x': is oneOf 2 schemas besides null"),
    (obj(x={"allOf": [{"type": "string"}]}), "'x': uses allOf"),
    (obj(x={"type": "array"}), "'x': is an array whose items say no type"),
    (obj(x={"type": "object"}), "'x': is an object with no properties and no typed additionalProperties"),
    (obj(x={"$ref": "other.json#/Geo"}), "'x': refers to 'other.json#/Geo', outside the schema"),
    (obj(x={"$ref": "#/definitions/Nope"}), "'x': refers to '#/definitions/Nope', which the schema does not have"),
    ({**obj(x={"$ref": "#/definitions/Node"}),
      "definitions": {"Node": obj(next={"$ref": "#/definitions/Node"})}}, "a recursive type has no column type"),
    (obj(x={"type": "text"}), "'x': has the type 'text', which is not one of JSON Schema's"),
    (obj(x={"type": "array", "items": {"type": ["null"]}}), "'x[]': says no type"),
])
def test_a_property_that_cannot_be_a_column_is_named_with_why(doc: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        json_schema.table_schema(doc)


def test_a_later_version_adds_columns_and_widens_an_int() -> None:
    v1 = obj(id={"type": "integer", "connect.type": "int32"}, geo=obj(city={"type": "string"}))
    table = json_schema.table_schema(v1)
    v2 = obj(id={"type": "integer"}, geo=obj(city={"type": "string"}, zone={"type": "integer"}),
             name={"type": "string"})
    assert json_schema.evolution_of(table, v2) == [Change("widen", ("id",), LongType()),
                                                   Change("add", ("geo", "zone"), LongType()),
                                                   Change("add", ("name",), StringType())]
    assert json_schema.evolution_of(table, v1) == []
    # a version that drops a property or narrows one asks nothing: those columns stay
    assert json_schema.evolution_of(json_schema.table_schema(v2), obj(id={"type": "integer", "connect.type": "int8"})) \
        == []
    assert isinstance(table.find_field("id").field_type, IntegerType)
    assert isinstance(json_schema.table_schema(v2).fields[0], NestedField)


def test_a_registered_schema_that_is_not_a_json_object_is_refused() -> None:
    with pytest.raises(ValueError, match="it is not JSON"):
        json_schema.parse("{nope")
    with pytest.raises(ValueError, match="not a JSON Schema object"):
        json_schema.parse("[1]")
