"""Schemas inferred from JSON records: the documented mapping, unions over records, clear refusals."""

import json

import pytest
from pyiceberg.types import (
    BooleanType,
    DoubleType,
    ListType,
    LongType,
    MapType,
    StringType,
    StructType,
    TimestamptzType,
)

from frazil.errors import InferenceError
from frazil.iceberg.inference import infer, schema


def values(*records: object) -> list[bytes]:
    return [r if isinstance(r, bytes) else json.dumps(r).encode() for r in records]


def types(shape_schema) -> dict[str, object]:  # type: ignore[no-untyped-def]
    return {f.name: f.field_type for f in shape_schema.fields}


def test_the_mapping_and_the_union_over_records() -> None:
    shape = infer(values(
        {"id": 1, "ok": True, "price": 2, "name": "a", "at": "2026-11-19T10:00:00Z", "tags": ["x"], "geo": {"lat": 1.5},
         "attrs": {"k": 1}, "gone": None},
        {"id": 2, "price": 2.5, "geo": {"lat": 2, "city": "B"}, "tags": [], "attrs": {"j": 2, "k": 3}, "late": False},
        b"not json", b"[1, 2]"))
    got = types(schema(shape))
    assert got["id"] == LongType() and got["ok"] == BooleanType() and got["price"] == DoubleType()
    assert got["name"] == StringType() and got["at"] == StringType(), "strings are never guessed into timestamps"
    assert got["gone"] == StringType() and got["late"] == BooleanType()
    assert isinstance(got["tags"], ListType) and got["tags"].element_type == StringType()
    geo = got["geo"]
    assert isinstance(geo, StructType) and [(f.name, f.field_type) for f in geo.fields] == [
        ("lat", DoubleType()), ("city", StringType())]
    assert isinstance(got["attrs"], StructType), "an object is a struct unless named in maps"
    assert list(got) == ["id", "ok", "price", "name", "at", "tags", "geo", "attrs", "gone", "late"]
    assert all(not f.required for f in schema(shape).fields)


def test_objects_named_in_maps_become_maps_and_extra_columns_follow() -> None:
    shape = infer(values({"attrs": {"a": 1, "b": 2}}, {"attrs": {"c": 3.5}}), maps=["attrs"])
    s = schema(shape, [("_kafka_timestamp", TimestamptzType(), True)])
    attrs = types(s)["attrs"]
    assert isinstance(attrs, MapType) and attrs.value_type == DoubleType()
    assert [f.name for f in s.fields] == ["attrs", "_kafka_timestamp"] and s.fields[1].required
    ids = [f.field_id for f in s.fields] + [attrs.key_id, attrs.value_id]
    assert len(set(ids)) == len(ids)


@pytest.mark.parametrize(("records", "message"), [
    (({"a": "x"}, {"a": 1}), "field a is string in one record and long in another"),
    (({"a": {"b": [1]}}, {"a": {"b": {"c": 1}}}), "field a.b is list in one record and struct in another"),
    (({"_kafka_offset": 1},), "reserved prefix _kafka_"),
    (("x",), "none of the records is a JSON object"),
])
def test_records_that_disagree_are_refused_naming_the_field(records: tuple, message: str) -> None:
    with pytest.raises(InferenceError, match=message):
        infer(values(*records))


def test_a_partition_spec_on_an_inferred_schema_must_fit_its_column() -> None:
    from frazil.config import PartitionField
    from frazil.errors import ConfigError
    from frazil.iceberg.layout import check_spec_fits

    def fields(*specs: str) -> tuple[PartitionField, ...]:
        return tuple(PartitionField(spec) for spec in specs)

    s = schema(infer(values({"n": 1, "s": "x", "geo": {"lat": 1.0, "zone": 3, "at": {"day": "x"}},
                             "tags": [{"k": 1}]})))
    check_spec_fits(s, fields("bucket[4](n)", "truncate[2](s)", "s", "bucket[8](geo.zone)", "geo.lat",
                              "geo.at.day"), "raw.t")
    with pytest.raises(ConfigError, match=r"raw.t: partition_by entry 'day\(s\)': day\(\) does not apply to 's'"):
        check_spec_fits(s, fields("day(s)"), "raw.t")
    with pytest.raises(ConfigError, match=r"needs a column \(or a field nested in struct columns\) 'geo' of a "
                                          "primitive type"):
        check_spec_fits(s, fields("geo"), "raw.t")
    for missing in ("identity(missing)", "geo.missing", "geo.lat.x", "tags.k", "geo.at"):   # no list, no struct
        with pytest.raises(ConfigError, match="needs a column"):
            check_spec_fits(s, fields(missing), "raw.t")


def test_lenient_inference_leaves_out_records_that_disagree_and_never_stops_the_others() -> None:
    """Found by the chaos run: a batch with new-field records and a record whose id was a string
    (bad for its own reason) evolved nothing, and every new-field record became a dead letter."""
    from pyiceberg.schema import Schema
    from pyiceberg.types import NestedField

    from frazil.iceberg import evolution
    from frazil.iceberg.inference import infer_lenient

    new_field = [json.dumps({"id": i, "x2": f"v{i}"}).encode() for i in range(3)]
    batch = [*new_field, json.dumps({"id": "bad-1"}).encode(), b"not json"]
    with pytest.raises(InferenceError):
        infer(batch)   # strict: the string id stops everything
    shape = infer_lenient(batch)
    assert set(shape.fields) == {"id", "x2"} and shape.fields["id"].kind == "long"
    table = Schema(NestedField(1, "id", LongType(), required=True))
    changes = evolution.plan(table, shape, [("x2", "the table has no such column"), ("id", "is not a number")])
    assert [(c.kind, c.path) for c in changes] == [("add", ("x2",))]
    assert infer_lenient([b"not json"]).fields == {}
