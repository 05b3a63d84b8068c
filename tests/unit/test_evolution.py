"""Which schema changes records that did not fit ask of a table (pure), and making them on a real
in-memory SQLite catalog: field ids kept, a conflicting writer's change not made twice."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.schema import Schema
from pyiceberg.types import (
    BooleanType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    ListType,
    LongType,
    NestedField,
    StringType,
    StructType,
)

from frazil.errors import EvolutionError
from frazil.iceberg import evolution, inference

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=True),
    NestedField(2, "qty", IntegerType(), required=False),
    NestedField(3, "price", DecimalType(6, 2), required=False),
    NestedField(4, "geo", StructType(NestedField(5, "lat", DoubleType(), required=False)), required=False),
    NestedField(6, "items", ListType(7, StructType(NestedField(8, "sku", StringType(), required=False)),
                                     element_required=False), required=False),
    NestedField(9, "Name", StringType(), required=False),
    NestedField(10, "ratio", FloatType(), required=False),
)


def shape(*records: dict) -> inference.Shape:
    return inference.infer([json.dumps(r).encode() for r in records])


def test_new_fields_become_optional_columns_where_they_appear() -> None:
    changes = evolution.plan(SCHEMA, shape({"id": 1, "tags": ["a"], "geo": {"lat": 1.0, "alt": 3},
                                            "items": [{"sku": "x", "n": 2}], "flag": None},
                                           {"id": 2, "flag": True, "meta": {"k": "v"}}))
    assert [(c.kind, c.path, str(c.type)) for c in changes] == [
        ("add", ("tags",), "list<string>"),
        ("add", ("geo", "alt"), "long"),
        ("add", ("items", "element", "n"), "long"),
        ("add", ("flag",), "boolean"),
        ("add", ("meta",), "struct<1: k: optional string>"),
    ]


def test_a_field_differing_only_in_case_or_of_another_kind_changes_nothing() -> None:
    assert evolution.plan(SCHEMA, shape({"id": "text", "name": "x", "geo": [1], "qty": 2.5})) == []


def test_the_decoders_reasons_widen_ints_and_decimal_precision_only_when_they_must() -> None:
    problems = [("qty", "3000000000 does not fit an int (32-bit)"),
                ("price", "123456.5 has more than 4 digit(s) before the decimal point; the column is decimal(6, 2)"),
                ("id", "12345678901234567890123 does not fit a long (64-bit)"),
                ("qty", "7.5 has a fractional part; the column is an int (32-bit)"),
                ("ratio", "1e39 is out of range for a float (32-bit)")]
    changes = evolution.plan(SCHEMA, shape({"id": 1}), problems)
    assert [(c.kind, c.path, c.type) for c in changes] == [("widen", ("qty",), LongType()),
                                                           ("widen", ("price",), DecimalType(8, 2)),
                                                           ("widen", ("ratio",), DoubleType())]
    too_wide = [("price", f"{'9' * 40}.5 has more than 4 digit(s) before the decimal point")]
    assert evolution.plan(SCHEMA, shape({"id": 1}), too_wide) == []


def test_changes_keep_field_ids_and_a_change_made_meanwhile_is_not_made_twice(tmp_path: Path) -> None:
    catalog = SqlCatalog("t", uri=f"sqlite:///{tmp_path}/c.db", warehouse=f"file://{tmp_path}")
    catalog.create_namespace("db")
    before = catalog.create_table("db.t", SCHEMA).schema()
    wanted = shape({"id": 1, "geo": {"alt": 2}, "items": [{"n": 1}], "note": "x"})
    problems = [("qty", "3000000000 does not fit an int (32-bit)")]
    other = catalog.load_table("db.t")   # another process makes the same change first

    def load():  # type: ignore[no-untyped-def]
        return catalog.load_table("db.t")

    with other.update_schema() as update:
        update.add_column(("note",), StringType(), required=False)
    table, made = evolution.apply(load, lambda s: evolution.plan(s, wanted, problems))
    assert sorted(str(c) for c in made) == ["added geo.alt long", "added items.element.n long",
                                            "widened qty long"]
    schema = table.schema()
    for name in ("id", "qty", "price", "geo", "geo.lat", "items", "items.element.sku", "Name"):
        assert schema.find_field(name).field_id == before.find_field(name).field_id, name
    assert schema.find_field("qty").field_type == LongType() and not schema.find_field("note").required
    assert evolution.apply(load, lambda s: evolution.plan(s, wanted, problems))[1] == []   # nothing left to do


def test_a_change_iceberg_refuses_is_an_error_naming_it(tmp_path: Path) -> None:
    catalog = SqlCatalog("t", uri=f"sqlite:///{tmp_path}/c.db", warehouse=f"file://{tmp_path}")
    catalog.create_namespace("db")
    catalog.create_table("db.t", SCHEMA)
    bad = [evolution.Change("widen", ("geo", "lat"), BooleanType())]
    with pytest.raises(EvolutionError, match="widened geo.lat boolean"):
        evolution.apply(lambda: catalog.load_table("db.t"), lambda s: bad)


def test_a_missing_required_field_makes_its_column_optional_unless_it_is_an_identifier_field(tmp_path: Path) -> None:
    schema = Schema(NestedField(1, "id", LongType(), required=True), NestedField(2, "at", LongType(), required=True),
                    identifier_field_ids=[1])
    missing = "is required, and the record has no value for it (missing or null)"
    assert [(c.kind, c.path) for c in evolution.plan(schema, shape({"id": 1}), [("at", missing)])] == [
        ("optional", ("at",))]
    assert evolution.plan(schema, shape({"at": 1}), [("id", missing)]) == [], "row identity stays required"
    catalog = SqlCatalog("t", uri=f"sqlite:///{tmp_path}/c.db", warehouse=f"file://{tmp_path}")
    catalog.create_namespace("db")
    catalog.create_table("db.t", schema)
    table, made = evolution.apply(lambda: catalog.load_table("db.t"),
                                  lambda s: evolution.plan(s, shape({"id": 1}), [("at", missing)]))
    assert [str(c) for c in made] == ["made optional at long"] and not table.schema().find_field("at").required
    assert table.schema().find_field("id").required


def test_a_preview_is_the_schema_the_change_would_make_and_changes_nothing(tmp_path: Path) -> None:
    catalog = SqlCatalog("t", uri=f"sqlite:///{tmp_path}/c.db", warehouse=f"file://{tmp_path}")
    catalog.create_namespace("db")
    table = catalog.create_table("db.t", SCHEMA)
    changes = evolution.plan(SCHEMA, shape({"id": 1, "geo": {"alt": 2}, "note": "x"}),
                             [("qty", "3000000000 does not fit an int (32-bit)")])
    seen = evolution.preview(table, table.schema(), changes)
    assert len(catalog.load_table("db.t").metadata.schemas) == 1   # nothing committed
    made, _ = evolution.apply(lambda: catalog.load_table("db.t"), lambda s: changes)
    assert seen.as_struct() == made.schema().as_struct()
    with pytest.raises(EvolutionError, match="widened geo.lat boolean"):
        evolution.preview(table, table.schema(), [evolution.Change("widen", ("geo", "lat"), BooleanType())])
    assert len(catalog.load_table("db.t").metadata.schemas) == 2   # the refused preview made nothing
