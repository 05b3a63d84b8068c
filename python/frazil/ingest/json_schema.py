"""Tables made from JSON Schema documents (pure): with ``values.format = "json-schema-confluent"``
each value names, by its schema id, the JSON Schema it was written against (registered by the
producer's JSON Schema serializer), and a table without declared columns is made from the first
one, each property a column. A later schema version that adds properties adds columns
(``unknown_fields = "evolve"``), as for Avro.

Types (docs/configuration.md, "JSON Schema"): ``integer`` is ``long`` (``int`` when Kafka
Connect's ``connect.type`` says ``int8``/``int16``/``int32``), ``number`` ``double``, ``boolean``
``boolean``, ``string`` ``string`` (``timestamptz``, ``date`` or ``time`` for the formats
``date-time``, ``date`` and ``time``), an ``object`` with ``properties`` a ``struct``, one with
only ``additionalProperties`` a ``map<string, T>``, an ``array`` a ``list<T>``. A property that
may also be null (``["string", "null"]``, or ``oneOf``/``anyOf`` with ``{"type": "null"}``) is the
other type; local ``$ref``s (``#/definitions/...``, ``#/$defs/...``) are followed. Every column is
optional: the serializer enforces ``required``, and a later version may drop a property. Anything
else (a property that may be a number or a string, one that takes any value, a recursive type)
cannot be a column: the table is not made, naming the property and the fix.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from itertools import count
from typing import Any

from pyiceberg.schema import Schema
from pyiceberg.types import (
    BooleanType,
    DateType,
    DoubleType,
    IcebergType,
    IntegerType,
    ListType,
    LongType,
    MapType,
    NestedField,
    StringType,
    StructType,
    TimestamptzType,
    TimeType,
)

from frazil.iceberg import evolution
from frazil.iceberg.evolution import Change
from frazil.ingest.registry import Unusable, WriterSchemas

_STRING_FORMATS: dict[str, IcebergType] = {"date-time": TimestamptzType(), "date": DateType(), "time": TimeType()}
_SMALL_INTS = {"int8", "int16", "int32"}   # Kafka Connect's JSON Schema converter's connect.type
_PRIMITIVE: dict[str, IcebergType] = {"number": DoubleType(), "boolean": BooleanType(), "string": StringType()}
MAX_REF_DEPTH = 32   # $refs followed in one chain; deeper is taken as a recursive type


class _Problem(Exception):
    def __init__(self, path: str, reason: str) -> None:
        super().__init__(path, reason)
        self.path, self.reason = path, reason


class JsonSchemas:
    """The JSON Schema documents of JSON values in the Confluent wire format, from the registry
    (a ``RowSchemas``)."""

    kind = "JSON Schema"
    made = "made from its first record's JSON Schema"

    def __init__(self, schemas: WriterSchemas) -> None:
        self._schemas = schemas

    def document(self, value: bytes) -> tuple[int, dict[str, Any]]:
        """Blocking. The schema id ``value`` names and its document."""
        if len(value) < 5 or value[0] != 0:
            raise ValueError("the value is not in the Confluent wire format (magic byte 0, then a 4-byte schema id)")
        schema_id = int.from_bytes(value[1:5], "big")
        found = self._schemas.get(schema_id)   # SchemaRegistryError: the registry is down; stop, loudly
        if isinstance(found, Unusable):
            raise ValueError(f"JSON Schema {schema_id}: {found.reason}")
        try:
            return schema_id, parse(found)
        except ValueError as exc:
            raise ValueError(f"JSON Schema {schema_id}: {exc}") from None

    def schema(self, value: bytes, *, extra: Sequence[tuple[str, IcebergType, bool]] = ()) -> tuple[int, Schema]:
        schema_id, doc = self.document(value)
        try:
            return schema_id, table_schema(doc, extra=extra)
        except ValueError as exc:
            raise ValueError(f"JSON Schema {schema_id} cannot become columns: {exc}") from None

    def evolution_of(self, table: Schema, value: bytes) -> list[Change]:
        return evolution_of(table, self.document(value)[1])


def parse(text: str) -> dict[str, Any]:
    """A registered schema's text as a JSON Schema document. ValueError when it is not one."""
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"it is not JSON ({exc})") from None
    if not isinstance(doc, dict):
        raise ValueError("it is not a JSON Schema object")
    return doc


def table_schema(doc: dict[str, Any], *, extra: Sequence[tuple[str, IcebergType, bool]] = ()) -> Schema:
    """A new table's schema from JSON Schema ``doc`` (an object's): a column per property, then
    ``extra`` (the Kafka metadata columns). Field ids are placeholders (the catalog numbers a new
    table afresh). ValueError naming the property when one cannot be a column."""
    ids = count(1)
    resolver = _Resolver(doc)
    try:
        top = resolver.follow(doc, "the schema")
        if _kinds(top, "the schema") != "object" or "properties" not in top:
            raise _Problem("the schema", "is not an object with properties: a table's row is a JSON object whose "
                                         "properties are its columns")
        taken = {name for name, _, _ in extra}
        fields = []
        for name, sub in top["properties"].items():
            if name in taken:
                raise _Problem(name, "is the name of a Kafka metadata column: rename the property or turn "
                                     "metadata_columns off")
            fields.append(NestedField(next(ids), name, _type(resolver, sub, name, ids, 0), required=False))
    except _Problem as problem:
        raise ValueError(f"property {problem.path!r}: {problem.reason}") from None
    fields += [NestedField(next(ids), name, t, required=required) for name, t, required in extra]
    return Schema(*fields)


def evolution_of(table: Schema, doc: dict[str, Any]) -> list[Change]:
    """The changes a later JSON Schema version ``doc`` asks of a table made from an earlier one
    (``unknown_fields = "evolve"``): a new property becomes an optional column of its type (nested
    ones too), an ``int`` column a ``long``. ValueError naming the property when one cannot be a
    column."""
    return evolution.between(table.as_struct(), table_schema(doc).as_struct())


class _Resolver:
    """Follows a document's local ``$ref``s (``#/...`` JSON pointers)."""

    def __init__(self, doc: dict[str, Any]) -> None:
        self._doc = doc

    def follow(self, schema: Any, path: str) -> dict[str, Any]:
        for _ in range(MAX_REF_DEPTH):
            if not isinstance(schema, dict):
                raise _Problem(path, f"has the schema {json.dumps(schema)[:80]}, which says no type (true or false)")
            ref = schema.get("$ref")
            if ref is None:
                return schema
            schema = self._pointer(ref, path)
        raise _Problem(path, f"follows more than {MAX_REF_DEPTH} $refs: a recursive type has no column type")

    def _pointer(self, ref: object, path: str) -> Any:
        if not isinstance(ref, str) or not ref.startswith("#"):
            raise _Problem(path, f"refers to {ref!r}, outside the schema; register the schema with its types "
                                 "inlined (schema references are not resolved yet)")
        found: Any = self._doc
        for part in filter(None, ref[1:].split("/")):
            part = part.replace("~1", "/").replace("~0", "~")
            if not isinstance(found, dict) or part not in found:
                raise _Problem(path, f"refers to {ref!r}, which the schema does not have")
            found = found[part]
        return found


def _kinds(schema: dict[str, Any], path: str) -> str:
    """The one JSON type ``schema`` says besides null."""
    kind = schema.get("type")
    if kind is None and "properties" in schema:
        kind = "object"
    if kind is None and isinstance(schema.get("enum"), list) and schema["enum"] \
            and all(isinstance(v, str) for v in schema["enum"] if v is not None):
        kind = "string"
    kinds = [kind] if isinstance(kind, str) else list(kind) if isinstance(kind, list) else []
    kinds = [k for k in kinds if k != "null"]
    if len(kinds) == 1 and isinstance(kinds[0], str):
        return kinds[0]
    if not kinds:
        raise _Problem(path, "says no type (it takes any JSON value, or only null): a column holds one type; "
                             "give it a \"type\", or declare the table's columns")
    raise _Problem(path, f"may be any of {', '.join(map(str, kinds))}: a column holds one type; give it one "
                         "type, or declare the table's columns")


def _nullable_one(schema: dict[str, Any], path: str) -> dict[str, Any] | None:
    """The one non-null branch of a ``oneOf``/``anyOf`` (None when ``schema`` has neither)."""
    for key in ("oneOf", "anyOf"):
        branches = schema.get(key)
        if branches is None:
            continue
        others = [b for b in branches if not (isinstance(b, dict) and b.get("type") == "null")]
        if len(others) != 1:
            raise _Problem(path, f"is {key} {len(others)} schemas besides null: a column holds one type; declare "
                                 "the table's columns")
        return others[0]   # type: ignore[no-any-return]
    if "allOf" in schema:
        raise _Problem(path, "uses allOf, which does not say one column type; declare the table's columns")
    return None


def _type(resolver: _Resolver, schema: Any, path: str, ids: Iterator[int], depth: int) -> IcebergType:
    if depth > MAX_REF_DEPTH:
        raise _Problem(path, f"nests more than {MAX_REF_DEPTH} levels deep: a recursive type has no column type")
    schema = resolver.follow(schema, path)
    one = _nullable_one(schema, path)
    if one is not None:
        return _type(resolver, one, path, ids, depth + 1)
    kind = _kinds(schema, path)
    if kind == "integer":
        return IntegerType() if schema.get("connect.type") in _SMALL_INTS else LongType()
    if kind == "string":
        return _STRING_FORMATS.get(str(schema.get("format")), StringType())
    if kind in _PRIMITIVE:
        return _PRIMITIVE[kind]
    if kind == "array":
        items = schema.get("items")
        if items is None:
            raise _Problem(path, "is an array whose items say no type: give \"items\" a schema")
        element = _type(resolver, items, f"{path}[]", ids, depth + 1)
        return ListType(next(ids), element, element_required=False)
    if kind == "object":
        properties = schema.get("properties")
        extra = schema.get("additionalProperties")
        if properties:
            children = [NestedField(next(ids), name, _type(resolver, sub, f"{path}.{name}", ids, depth + 1),
                                    required=False) for name, sub in properties.items()]
            return StructType(*children)
        if isinstance(extra, dict) and extra:
            value = _type(resolver, extra, f"{path}{{}}", ids, depth + 1)
            return MapType(next(ids), StringType(), next(ids), value, value_required=False)
        raise _Problem(path, "is an object with no properties and no typed additionalProperties: give it "
                             "properties (a struct) or an additionalProperties schema (a map)")
    raise _Problem(path, f"has the type {kind!r}, which is not one of JSON Schema's")
