"""Declared column types as Iceberg types, and whether a table's column holds what is declared.

Both are pure. ``iceberg_type`` gives nested fields, list elements and map values ids from one
counter; a new table's ids are assigned afresh by pyiceberg when it is created, so they need only be
unique. ``misfit`` compares by shape (names, kinds, which fields are optional), never by field id:
an existing table's ids are its own.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FixedType,
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
    UUIDType,
)

from frazil.config import ColumnType

PRIMITIVES: dict[str, IcebergType] = {
    "boolean": BooleanType(), "int": IntegerType(), "long": LongType(), "float": FloatType(),
    "double": DoubleType(), "string": StringType(), "binary": BinaryType(), "date": DateType(),
    "time": TimeType(), "timestamp": TimestampType(), "timestamptz": TimestamptzType(), "uuid": UUIDType(),
}


def iceberg_type(t: ColumnType, ids: Iterator[int]) -> IcebergType:
    """``t`` as an Iceberg type; ``ids`` numbers its nested fields (optional, all of them)."""
    if t.kind == "decimal":
        assert t.precision is not None and t.scale is not None   # a decimal always has both
        return DecimalType(t.precision, t.scale)
    if t.kind == "fixed":
        assert t.length is not None
        return FixedType(t.length)
    if t.kind == "struct":
        assert t.fields is not None
        return StructType(*[NestedField(next(ids), name, iceberg_type(child, ids), required=False)
                            for name, child in t.fields])
    if t.kind == "list":
        assert t.element is not None
        return ListType(next(ids), iceberg_type(t.element, ids), element_required=False)
    if t.kind == "map":
        assert t.key is not None and t.value is not None
        key_id, value_id = next(ids), next(ids)
        return MapType(key_id, iceberg_type(t.key, ids), value_id, iceberg_type(t.value, ids), value_required=False)
    return PRIMITIVES[t.kind]


def placeholder_ids(start: int) -> Iterator[int]:
    """Ids for nested fields of a schema whose top-level columns take ``1 .. start - 1``."""
    return itertools.count(start)


def widened(declared: IcebergType, found: IcebergType) -> bool:
    """Whether ``found`` is ``declared`` after a schema evolution widened it (int to long, float
    to double, a decimal's precision)."""
    if (isinstance(declared, IntegerType) and isinstance(found, LongType)
            or isinstance(declared, FloatType) and isinstance(found, DoubleType)):
        return True
    return (isinstance(declared, DecimalType) and isinstance(found, DecimalType) and declared.scale == found.scale
            and declared.precision < found.precision)


def misfit(declared: IcebergType, found: IcebergType, *, evolve: bool, path: str) -> str | None:
    """Why a table's column of type ``found`` does not hold what ``declared`` says, naming the
    field at ``path``; None when it does. A struct may have more optional fields than declared (as
    a table may have more columns); with ``evolve``, a type may have been widened."""
    if isinstance(declared, StructType) and isinstance(found, StructType):
        have = {f.name: f for f in found.fields}
        for want in declared.fields:
            field = have.pop(want.name, None)
            if field is None:
                return f"{path}.{want.name} is declared but the table's struct has no such field"
            if field.required:
                return f"{path}.{want.name} is required in the table but optional in the config (nulls would fail)"
            why = misfit(want.field_type, field.field_type, evolve=evolve, path=f"{path}.{want.name}")
            if why is not None:
                return why
        # optional fields the config does not declare are NULL in its rows, as extra columns are
        extra = [name for name, field in have.items() if field.required]
        if extra:
            return f"{path} has required field(s) {', '.join(extra)} in the table that the config does not declare"
        return None
    if isinstance(declared, ListType) and isinstance(found, ListType):
        if found.element_required:
            return f"{path}'s elements are required in the table but optional in the config"
        return misfit(declared.element_type, found.element_type, evolve=evolve, path=f"{path}.element")
    if isinstance(declared, MapType) and isinstance(found, MapType):
        if found.value_required:
            return f"{path}'s values are required in the table but optional in the config"
        return (misfit(declared.key_type, found.key_type, evolve=False, path=f"{path}.key")
                or misfit(declared.value_type, found.value_type, evolve=evolve, path=f"{path}.value"))
    if declared == found or (evolve and widened(declared, found)):
        return None
    return f"{path} is {shape(found)} in the table but {shape(declared)} in the config"


def shape(t: IcebergType) -> str:
    """``t`` spelled as a declared column's type, without field ids."""
    if isinstance(t, StructType):
        return "struct<" + ", ".join(f"{f.name}: {shape(f.field_type)}" for f in t.fields) + ">"
    if isinstance(t, ListType):
        return f"list<{shape(t.element_type)}>"
    if isinstance(t, MapType):
        return f"map<{shape(t.key_type)}, {shape(t.value_type)}>"
    return str(t)
