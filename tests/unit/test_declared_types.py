"""Declared column types become Iceberg types, and an existing table's column is compared with the
declared one by shape: names, kinds, optional fields; never by field id."""

import itertools

from pyiceberg.types import (
    DecimalType,
    FixedType,
    IntegerType,
    ListType,
    LongType,
    MapType,
    NestedField,
    StringType,
    StructType,
    TimestamptzType,
)

from frazil.config import ColumnType
from frazil.iceberg import declared

META = "struct<at: timestamptz, tags: list<string>, counts: map<string, long>, sum: decimal(9, 2), h: fixed[4]>"


def test_a_declared_struct_is_an_iceberg_struct_of_optional_fields_with_unique_ids() -> None:
    made = declared.iceberg_type(ColumnType(META), itertools.count(100))
    assert isinstance(made, StructType)
    assert [(f.name, f.required) for f in made.fields] == [("at", False), ("tags", False), ("counts", False),
                                                           ("sum", False), ("h", False)]
    tags, counts = made.fields[1].field_type, made.fields[2].field_type
    assert isinstance(tags, ListType) and tags.element_type == StringType() and not tags.element_required
    assert isinstance(counts, MapType) and counts.value_type == LongType() and not counts.value_required
    assert made.fields[3].field_type == DecimalType(9, 2) and made.fields[4].field_type == FixedType(4)
    ids = [f.field_id for f in made.fields] + [tags.element_id, counts.key_id, counts.value_id]
    assert len(set(ids)) == len(ids) and min(ids) >= 100
    assert declared.shape(made) == META


def test_a_table_column_fits_by_shape_not_by_field_id() -> None:
    want = declared.iceberg_type(ColumnType(META), itertools.count(1))
    table = declared.iceberg_type(ColumnType(META), itertools.count(50))
    assert want != table and declared.misfit(want, table, evolve=False, path="meta") is None


def test_a_misfit_names_the_nested_field_and_evolution_may_add_or_widen() -> None:
    want = declared.iceberg_type(ColumnType("struct<n: int, s: struct<x: long>>"), itertools.count(1))
    evolved = StructType(NestedField(20, "n", LongType()), NestedField(21, "s", StructType(
        NestedField(22, "x", LongType()), NestedField(23, "y", StringType()))), NestedField(24, "z", StringType()))
    assert declared.misfit(want, evolved, evolve=True, path="meta") is None
    assert declared.misfit(want, evolved, evolve=False, path="meta") == (
        "meta.n is long in the table but int in the config")
    narrower = StructType(NestedField(20, "n", IntegerType()), NestedField(21, "s", StructType(
        NestedField(22, "x", LongType()), NestedField(23, "y", StringType()))))
    assert declared.misfit(want, narrower, evolve=False, path="meta") is None   # an optional extra field
    required_extra = StructType(NestedField(20, "n", IntegerType()), NestedField(21, "s", StructType(
        NestedField(22, "x", LongType()), NestedField(23, "y", StringType(), required=True))))
    assert declared.misfit(want, required_extra, evolve=True, path="meta") == (
        "meta.s has required field(s) y in the table that the config does not declare")
    required = StructType(NestedField(20, "n", IntegerType(), required=True), NestedField(21, "s", StringType()))
    assert declared.misfit(want, required, evolve=True, path="meta") == (
        "meta.n is required in the table but optional in the config (nulls would fail)")
    kind = StructType(NestedField(20, "n", IntegerType()), NestedField(21, "s", StringType()))
    assert declared.misfit(want, kind, evolve=True, path="meta") == (
        "meta.s is string in the table but struct<x: long> in the config")
    assert declared.misfit(want, StructType(NestedField(20, "n", IntegerType())), evolve=True, path="meta") == (
        "meta.s is declared but the table's struct has no such field")
    assert declared.misfit(TimestamptzType(), TimestamptzType(), evolve=False, path="at") is None
    elements = ListType(5, StringType(), element_required=True)
    assert "elements are required in the table" in declared.misfit(
        declared.iceberg_type(ColumnType("list<string>"), itertools.count(1)), elements, evolve=False, path="l")
