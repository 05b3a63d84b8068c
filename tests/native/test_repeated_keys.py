"""A key twice in one JSON object is a bad record, never a silent choice of one of the values:
for a field of the record or of a nested struct (named by its dotted path), and for a key of a
map column (named by the map column), on every decode path; the rest of the batch is kept."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from frazil import _native

INNER = pa.struct([pa.field("b", pa.int64()), pa.field("c", pa.string())])
PLAIN = pa.schema([
    pa.field("id", pa.int64()),
    pa.field("name", pa.string()),
    pa.field("a", INNER),
    pa.field("l", pa.list_(pa.field("item", INNER))),
])
WITH_MAP = pa.schema(list(PLAIN) + [pa.field("attrs", pa.map_(pa.string(), pa.int64()))])

TOP = "appears twice in the record; a value is stored as sent, so the producer must send each field once"
NESTED = "appears twice in one object; a value is stored as sent, so the producer must send each field once"

OPTIONS = {
    "single pass": {},
    "arrow-json": {"single_pass": False},
    "reported unknown fields": {"unknown_fields": "report"},
    "case folding": {"fold_case": True},
}


def append(schema: pa.Schema, values: list[str], **options: object) -> tuple[list[tuple[int, str, str]], list[dict]]:
    buf = _native.JsonBuffer(schema=schema, **options)
    result = buf.append(topic="t", partition=0, offsets=list(range(len(values))), timestamps_ms=[0] * len(values),
                        keys=[None] * len(values), values=[v.encode() for v in values])
    batch = buf.drain()
    return [(e.offset, e.field, e.reason) for e in result.errors], [] if batch is None else batch.to_pylist()


@pytest.mark.parametrize("options", OPTIONS.values(), ids=OPTIONS.keys())
def test_a_field_twice_is_a_bad_record_naming_it_and_the_rest_of_the_batch_is_kept(options: dict) -> None:
    errors, rows = append(PLAIN, ['{"id": 1, "name": "a"}', '{"id": 1, "name": "a", "id": 2}',
                                  '{"id": 3, "a": {"b": 1, "c": "x", "b": 2}}', '{"id": 4}'], **options)
    assert errors == [(1, "id", TOP), (2, "a.b", NESTED)]
    assert [r["id"] for r in rows] == [1, 4]


@pytest.mark.parametrize("options", OPTIONS.values(), ids=OPTIONS.keys())
def test_a_field_twice_in_a_list_item_names_the_field_under_the_list(options: dict) -> None:
    errors, rows = append(PLAIN, ['{"id": 1, "l": [{"b": 1}, {"c": "y", "c": "z"}]}',
                                  '{"id": 2, "l": [{"b": 1}, {"b": 2}]}'], **options)
    assert [(offset, field.replace("[1]", ""), reason) for offset, field, reason in errors] == [(0, "l.c", NESTED)]
    assert rows[0]["l"] == [{"b": 1, "c": None}, {"b": 2, "c": None}]   # the same field in two items is fine


@pytest.mark.parametrize("options", OPTIONS.values(), ids=OPTIONS.keys())
def test_a_key_twice_in_a_map_is_a_bad_record_naming_the_map_column(options: dict) -> None:
    errors, rows = append(WITH_MAP, ['{"id": 1, "attrs": {"k": 1, "j": 2, "k": 3}}',
                                     '{"id": 2, "attrs": {"k": 1, "K": 2}}'], **options)
    assert errors == [(0, "attrs", 'key "k" appears twice in the map; a value is stored as sent, so the producer '
                                   "must send each key once")]
    assert rows == [{"id": 2, "name": None, "a": None, "l": None, "attrs": [("k", 1), ("K", 2)]}]


def test_a_field_twice_among_many_is_found_in_any_field_order() -> None:
    schema = pa.schema([pa.field(f"f{i}", pa.int64()) for i in range(40)])
    in_order = json.dumps({f"f{i}": i for i in range(40)})
    shuffled = json.dumps({f"f{i}": i for i in reversed(range(40))})
    repeated = shuffled[:-1] + ', "f17": 0}'
    for options in OPTIONS.values():
        errors, rows = append(schema, [in_order, shuffled, repeated], **options)
        assert errors == [(2, "f17", TOP)] and len(rows) == 2
