"""A table schema inferred from JSON records, for tables created on first use (pure, no I/O).

The mapping from JSON to Iceberg (docs/configuration.md, "Inferred schemas"):

| JSON | Iceberg |
|---|---|
| `true` / `false` | boolean |
| a number without fraction or exponent | long |
| any other number (or a mix of both kinds) | double |
| a string | string (never guessed into a timestamp, a date or a number: stored as sent) |
| an object | struct of the union of its fields over the records, in first-seen order |
| an object at a path listed in `maps` | map<string, the union of its values> |
| an array | list of the union of its elements |
| `null`, or missing | the type the other records give the field (optional); a field that is only ever null: string |

Every inferred column is optional. A field whose records disagree (a string in one, a number in
another; an object and an array) cannot be inferred: the error names the field and both types,
and the fix is to declare the columns. Names starting with ``_kafka_`` are reserved.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import count

from pyiceberg.schema import Schema
from pyiceberg.types import (
    BooleanType,
    DoubleType,
    IcebergType,
    ListType,
    LongType,
    MapType,
    NestedField,
    StringType,
    StructType,
)

from frazil.errors import InferenceError


@dataclass
class Shape:
    """What the records showed at one place: a primitive kind, or a nested shape."""

    kind: str                                                  # null boolean long double string struct list map
    fields: dict[str, Shape] = field(default_factory=dict)     # struct
    element: Shape | None = None                               # list, map (the values)


def _shape(value: object, path: str, maps: frozenset[str]) -> Shape:
    if value is None:
        return Shape("null")
    if isinstance(value, bool):
        return Shape("boolean")
    if isinstance(value, int):
        return Shape("long")
    if isinstance(value, float):
        return Shape("double")
    if isinstance(value, str):
        return Shape("string")
    if isinstance(value, list):
        element = Shape("null")
        for item in value:
            element = unify(element, _shape(item, f"{path}[]", maps), f"{path}[]")
        return Shape("list", element=element)
    if isinstance(value, dict):
        if path in maps:
            element = Shape("null")
            for v in value.values():
                element = unify(element, _shape(v, f"{path}{{}}", maps), f"{path}{{}}")
            return Shape("map", element=element)
        return Shape("struct", {k: _shape(v, f"{path}.{k}" if path else k, maps) for k, v in value.items()})
    raise InferenceError(f"{path}: a value of type {type(value).__name__} is not JSON")


def unify(a: Shape, b: Shape, path: str) -> Shape:
    """One shape for a place where records showed ``a`` and ``b``."""
    if a.kind == "null":
        return b
    if b.kind == "null":
        return a
    if {a.kind, b.kind} == {"long", "double"}:
        return Shape("double")
    if a.kind != b.kind:
        raise InferenceError(f"field {path or '(the value)'} is {a.kind} in one record and {b.kind} in another; no "
                             "column type takes both. Declare the table's columns (or fix the producer)")
    if a.kind == "struct":
        merged = dict(a.fields)
        for name, shape in b.fields.items():
            merged[name] = unify(merged[name], shape, f"{path}.{name}" if path else name) if name in merged else shape
        return Shape("struct", merged)
    if a.kind in ("list", "map"):
        assert a.element is not None and b.element is not None
        return Shape(a.kind, element=unify(a.element, b.element, f"{path}[]"))
    return a


def infer(values: Iterable[bytes], *, maps: Sequence[str] = ()) -> Shape:
    """The struct shape of the JSON objects among ``values`` (others are left to the decoder,
    which reports them as bad records)."""
    shape = Shape("struct")
    seen = 0
    for raw in values:
        try:
            value = json.loads(raw)
        except ValueError:
            continue
        if isinstance(value, dict):
            shape = unify(shape, _shape(value, "", frozenset(maps)), "")
            seen += 1
    if not seen:
        raise InferenceError("none of the records is a JSON object; nothing to infer a table from")
    reserved = [name for name in shape.fields if name.startswith("_kafka_")]
    if reserved:
        raise InferenceError(f"field(s) {', '.join(reserved)} use the reserved prefix _kafka_")
    return shape


def infer_lenient(values: Iterable[bytes], *, maps: Sequence[str] = ()) -> Shape:
    """The struct shape of the JSON objects among ``values`` that agree with those before them; a
    record that disagrees (a string where earlier ones had a number) is left out, not allowed to
    stop the others: in a schema evolution, records bad for their own reasons share the batch with
    the records whose new fields must still be added (found by the chaos run: a record with a
    string id made every new-field record of its batch a dead letter). Callers put the records they
    most need first. An empty struct when none is a JSON object."""
    shape = Shape("struct")
    for raw in values:
        try:
            one = infer([raw], maps=maps)
            shape = unify(shape, one, "")
        except InferenceError:
            continue
    return shape


def iceberg_type(shape: Shape) -> IcebergType:
    """The Iceberg type for ``shape`` (field ids are placeholders: a schema update assigns its own)."""
    return _iceberg(shape, count(1))


def _iceberg(shape: Shape, ids: count) -> IcebergType:  # type: ignore[type-arg]
    if shape.kind in ("null", "string"):
        return StringType()
    if shape.kind == "boolean":
        return BooleanType()
    if shape.kind == "long":
        return LongType()
    if shape.kind == "double":
        return DoubleType()
    if shape.kind == "struct":
        return StructType(*(NestedField(next(ids), name, _iceberg(s, ids), required=False)
                            for name, s in shape.fields.items()))
    assert shape.element is not None
    if shape.kind == "list":
        element_id = next(ids)
        return ListType(element_id, _iceberg(shape.element, ids), element_required=False)
    key_id, value_id = next(ids), next(ids)
    return MapType(key_id, StringType(), value_id, _iceberg(shape.element, ids), value_required=False)


def schema(shape: Shape, extra: Sequence[tuple[str, IcebergType, bool]] = ()) -> Schema:
    """The Iceberg schema for an inferred struct ``shape``, then ``extra`` columns (the metadata
    columns). Field ids are given top-level columns first."""
    ids = count(1)
    top = [(next(ids), name, s) for name, s in shape.fields.items()]
    top_extra = [(next(ids), name, t, required) for name, t, required in extra]
    fields = [NestedField(fid, name, _iceberg(s, ids), required=False) for fid, name, s in top]
    fields += [NestedField(fid, name, t, required=required) for fid, name, t, required in top_extra]
    return Schema(*fields)
