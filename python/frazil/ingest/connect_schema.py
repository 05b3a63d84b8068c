"""Tables made from Kafka Connect's JSON schema envelope (pure): a value written by Kafka's
``JsonConverter`` with ``schemas.enable=true`` is ``{"schema": {...}, "payload": {...}}``, and the
schema says each field's type, its optionality and, by a semantic type name, what an integer or a
text means (Debezium's ``io.debezium.time.MicroTimestamp`` is microseconds since the epoch).

:func:`table_schema` turns such a schema (of Debezium's ``after`` row, in cdc mode) into a new
table's columns and, per column, the unit the native decoder reads its numbers in (a date sent as
days, a timestamp as microseconds): kept with the table (the ``frazil.column-units`` property), so that a restart
reads the same numbers the same way. A value lands as the schema says it was sent, or the field
cannot become a column and the table is not made, naming the field and why.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from itertools import count
from typing import Any

from pyiceberg.schema import Schema
from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IcebergType,
    IntegerType,
    ListType,
    LongType,
    MapType,
    NestedField,
    StringType,
    StructType,
    TimestampType,
    TimestamptzType,
    TimeType,
)

from frazil.iceberg import evolution
from frazil.iceberg.evolution import Change

DECIMAL = "org.apache.kafka.connect.data.Decimal"
MAX_PRECISION = 38

_PRIMITIVE: dict[str, IcebergType] = {
    "int8": IntegerType(), "int16": IntegerType(), "int32": IntegerType(), "int64": LongType(),
    "float": FloatType(), "float32": FloatType(), "double": DoubleType(), "float64": DoubleType(),
    "boolean": BooleanType(), "string": StringType(), "bytes": BinaryType(),
}
# semantic type name: (the base type it is sent as, the column type, the unit of its numbers)
_SEMANTIC: dict[str, tuple[str, IcebergType, str | None]] = {
    "org.apache.kafka.connect.data.Date": ("int32", DateType(), "d"),
    "org.apache.kafka.connect.data.Time": ("int32", TimeType(), "ms"),
    "org.apache.kafka.connect.data.Timestamp": ("int64", TimestamptzType(), "ms"),
    "io.debezium.time.Date": ("int32", DateType(), "d"),
    "io.debezium.time.Time": ("int32", TimeType(), "ms"),
    "io.debezium.time.MicroTime": ("int64", TimeType(), "us"),
    "io.debezium.time.NanoTime": ("int64", TimeType(), "ns"),
    "io.debezium.time.Timestamp": ("int64", TimestampType(), "ms"),
    "io.debezium.time.MicroTimestamp": ("int64", TimestampType(), "us"),
    "io.debezium.time.NanoTimestamp": ("int64", TimestampType(), "ns"),
    "io.debezium.time.ZonedTimestamp": ("string", TimestamptzType(), None),   # ISO-8601 text with its offset
}


class _Problem(Exception):
    def __init__(self, path: str, reason: str) -> None:
        super().__init__(path, reason)
        self.path, self.reason = path, reason


def envelope_schema(value: bytes) -> dict[str, Any] | None:
    """The schema of a value in Kafka Connect's JSON envelope (an object of exactly ``schema``
    and ``payload``, the schema a struct); None for any other value."""
    try:
        doc = json.loads(value)
    except ValueError:
        return None
    if not isinstance(doc, dict) or set(doc) != {"schema", "payload"}:
        return None
    schema = doc["schema"]
    return schema if isinstance(schema, dict) and schema.get("type") == "struct" else None


def table_schema(schema: dict[str, Any], *, row: str = "", identifiers: Sequence[str] = (),
                 extra: Sequence[tuple[str, IcebergType, bool]] = ()) -> tuple[Schema, dict[str, str]]:
    """A new table's schema from a Connect struct schema (of its field ``row``, Debezium's
    ``after``, when given): a column per field, optional but for ``identifiers`` (required, the
    row's identity), then ``extra`` (the Kafka metadata columns); and the unit of numbers per
    top-level column that takes them as counts. Field ids are placeholders (the catalog numbers a
    new table afresh). ValueError naming the field when one cannot be a column."""
    ids = count(1)
    units: dict[str, str] = {}
    try:
        if row:
            found = next((f for f in schema.get("fields") or () if f.get("field") == row), None)
            if found is None:
                raise _Problem(row, f"the value's schema has no field {row!r} (the change's row)")
            if found.get("type") != "struct":
                raise _Problem(row, f"the value's schema has {row} as {found.get('type')!r}, not a struct of columns")
            schema = found
        taken = {name for name, _, _ in extra}
        fields = []
        for f in schema.get("fields") or ():
            name = str(f.get("field"))
            if name in taken:
                raise _Problem(name, f"the value's schema has a field {name}, the name of a Kafka metadata column")
            column, unit = _column(f, name, ids, top=True)
            if unit is not None:
                units[name] = unit
            if name in identifiers and f.get("optional", False):
                raise _Problem(name, f"the value's schema lets identifier column {name} be null; a row's identity "
                                     "must always be there (pick other identifier_columns)")
            fields.append(NestedField(next(ids), name, column, required=name in identifiers))
    except _Problem as problem:
        raise ValueError(f"field {problem.path!r}: {problem.reason}") from None
    wrong = [f.name for f in fields if f.name in identifiers
             and (isinstance(f.field_type, (FloatType, DoubleType)) or not f.field_type.is_primitive)]
    if wrong:
        raise ValueError(f"identifier column(s) {', '.join(wrong)} must be of a primitive type, not float or "
                         "double (Iceberg's rule for identifier fields)")
    missing = sorted(set(identifiers) - {f.name for f in fields})
    if missing:
        raise ValueError(f"the value's schema has no field {', '.join(missing)} for the identifier column(s) "
                         f"{', '.join(identifiers)}")
    fields += [NestedField(next(ids), name, t, required=required) for name, t, required in extra]
    return Schema(*fields, identifier_field_ids=[f.field_id for f in fields if f.name in identifiers]), units


def _column(f: dict[str, Any], path: str, ids: Iterator[int], *, top: bool) -> tuple[IcebergType, str | None]:
    """The column type of Connect field schema ``f`` and the unit of its numbers (top-level
    columns only: a nested one keeps the integer type it is sent as)."""
    kind, name = f.get("type"), f.get("name")
    if name == DECIMAL:
        return _decimal(f, path), None
    semantic = _SEMANTIC.get(str(name))
    if semantic is not None and semantic[0] == kind and (top or semantic[2] is None):
        return semantic[1], semantic[2]
    if kind in _PRIMITIVE:
        return _PRIMITIVE[str(kind)], None
    if kind == "struct":
        children = []
        for child in f.get("fields") or ():
            child_name = str(child.get("field"))
            child_type, _ = _column(child, f"{path}.{child_name}", ids, top=False)
            children.append(NestedField(next(ids), child_name, child_type, required=False))
        return StructType(*children), None
    if kind == "array":
        element, _ = _column(f.get("items") or {}, f"{path}[]", ids, top=False)
        return ListType(next(ids), element, element_required=False), None
    if kind == "map":
        keys = f.get("keys") or {}
        if keys.get("type") != "string":
            raise _Problem(path, f"is a map with {keys.get('type')!r} keys; the JSON converter sends such a map as an "
                                 "array of pairs, which no column holds: only string keys")
        value, _ = _column(f.get("values") or {}, f"{path}{{}}", ids, top=False)
        return MapType(next(ids), StringType(), next(ids), value, value_required=False), None
    raise _Problem(path, f"has the type {kind!r}, which is not one of Kafka Connect's")


def _decimal(f: dict[str, Any], path: str) -> DecimalType:
    """``decimal(P, S)`` from the schema's ``scale`` and Debezium's ``connect.decimal.precision``."""
    parameters = f.get("parameters") or {}
    try:
        scale = int(parameters["scale"])
        precision = int(parameters["connect.decimal.precision"])
    except (KeyError, ValueError):
        raise _Problem(path, "is a decimal whose schema gives no precision (connect.decimal.precision) and scale; "
                             "a column cannot be made without both: declare the column, or send it as a string "
                             "(Debezium: decimal.handling.mode=string)") from None
    if not (1 <= precision <= MAX_PRECISION and 0 <= scale <= precision):
        raise _Problem(path, f"is decimal({precision}, {scale}); an Iceberg decimal has a precision of 1 to "
                             f"{MAX_PRECISION} and a scale of 0 to its precision: send it as a string (Debezium: "
                             "decimal.handling.mode=string)")
    return DecimalType(precision, scale)


def evolution_of(table: Schema, schema: dict[str, Any], *, row: str = "") -> tuple[list[Change], dict[str, str]]:
    """The changes Connect struct schema ``schema`` (its field ``row``, when given) asks of a
    table made from an earlier one (``unknown_fields = "evolve"``): a new field becomes an optional
    column of the type its schema says (nested ones too), an ``int`` a ``long``, a ``float`` a
    ``double``, a decimal a wider one of the same scale; and the units of the new top-level columns'
    numbers. Anything else it would need (another kind of value) is no change: its records stay bad
    records. ValueError naming the field when one cannot be a column."""
    made, units = table_schema(schema, row=row)
    changes = evolution.between(table.as_struct(), made.as_struct())
    added = {c.path[0] for c in changes if c.kind == "add" and len(c.path) == 1}
    return changes, {name: unit for name, unit in units.items() if name in added}
