"""A table's transforms: what the config accepts and refuses (naming the step and the fix), the
native steps as the buffer applies them (rows as transformed, filtered records counted, bad ones
named), and a new table's columns inferred from the transformed values."""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
import pytest

from frazil import _native, config
from frazil.buffers.record_buffer import RecordBuffer, transformed
from frazil.errors import ConfigError
from frazil.iceberg import inference

MINIMAL: dict[str, Any] = {
    "pipeline": {"name": "p"},
    "kafka": {"bootstrap_servers": "127.0.0.1:9092", "topics": ["t"]},
    "table": {"name": "ns.t", "columns": [{"name": "id", "type": "long"}]},
}
STEPS = [{"rename": "usr.name", "to": "user"}, {"drop": "usr"}, {"flatten": "meta", "separator": "__"},
         {"cast": "n", "to": "long"}, {"filter": "kind", "matches": "a|b", "keep": False}]


def parse(transforms: list[dict[str, Any]], **table: Any) -> config.Config:
    return config.parse({**MINIMAL, "table": {**MINIMAL["table"], "transforms": transforms, **table}})


def test_each_step_is_read_in_order_into_the_native_spec() -> None:
    cfg = parse(STEPS)
    assert json.loads(cfg.table.transform_spec or "") == [
        {"op": "rename", "field": "usr.name", "to": "user"}, {"op": "drop", "field": "usr"},
        {"op": "flatten", "field": "meta", "separator": "__"}, {"op": "cast", "field": "n", "to": "long"},
        {"op": "filter", "field": "kind", "matches": "a|b", "keep": False}]
    assert parse([]).table.transform_spec is None


@pytest.mark.parametrize(("step", "message"), [
    ({"rename": "a", "drop": "b"}, "exactly one of rename, drop, flatten, cast, filter (each naming a field), got "
                                   "rename, drop"),
    ({}, "got none"),
    ({"rename": "a"}, "rename 'a' needs to, the field's new dotted path"),
    ({"cast": "a", "to": "int"}, "cast 'a' needs to = one of string, long, double, boolean (got 'int')"),
    ({"drop": "a", "to": "b"}, "drop 'a' takes no to"),
    ({"filter": "a"}, "filter 'a' needs matches"),
    ({"filter": "a", "matches": "("}, "not a valid regular expression"),
    ({"drop": "a..b"}, "is not a dotted path of field names"),
    ({"flatten": "a", "keep": False}, "flatten 'a' takes no keep"),
])
def test_a_step_that_cannot_be_read_is_refused_saying_why(step: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse([step])


def test_transforms_are_refused_where_they_cannot_apply_yet() -> None:
    with pytest.raises(ConfigError, match=r"table.transforms: keyed tables \(mode = 'upsert'\) take no transforms"):
        parse(STEPS[:1], mode="upsert", identifier_columns=["id"],
              columns=[{"name": "id", "type": "long", "required": True}])
    with pytest.raises(ConfigError, match=r"Avro values \(values.format = 'avro-confluent'\) are decoded by their "
                                          r"writer schema"):
        config.parse({**MINIMAL, "table": {**MINIMAL["table"], "transforms": STEPS[:1]},
                      "values": {"format": "avro-confluent"}, "schema_registry": {"url": "http://r"}})
    registry = {"values": {"format": "protobuf-confluent"}, "schema_registry": {"url": "http://r"}}
    with pytest.raises(ConfigError, match="declare the table's columns"):
        config.parse({**MINIMAL, "table": {"name": "ns.t", "transforms": STEPS[:1]}, **registry})
    config.parse({**MINIMAL, "table": {**MINIMAL["table"], "transforms": STEPS[:1]}, **registry})   # declared: fine
    with pytest.raises(ConfigError, match="connect_envelope"):
        parse(STEPS[:1], connect_envelope=True)


def test_the_buffer_lands_rows_as_transformed_counts_the_filtered_and_names_the_misfits() -> None:
    schema = pa.schema([("id", pa.int64()), ("user", pa.string()), ("meta__at", pa.string()), ("n", pa.int64()),
                        ("kind", pa.string())])
    buffer = RecordBuffer(schema, metadata_columns=False, transforms=parse(STEPS).table.transform_spec)
    values = [{"id": 1, "usr": {"name": "x", "t": 1}, "meta": {"at": "m"}, "n": "7", "kind": "c"},
              {"id": 2, "kind": "a"},                      # left out
              {"id": 3, "n": "7.5", "kind": "c"},          # a cast that does not apply
              {"id": 4, "meta": [1], "kind": "c"}]         # flatten of an array
    problems = buffer._learning(lambda: buffer._native.append(
        topic="t", partition=0, offsets=[10, 11, 12, 13], timestamps_ms=[0] * 4, keys=[None] * 4,
        values=[json.dumps(v).encode() for v in values]))
    assert [(p.offset, p.field) for p in problems] == [(12, "n"), (13, "meta")]
    assert "7.5" in problems[0].reason and problems[0].reason.endswith("(a transform of the table)")
    assert buffer.take_filtered() == 1 and buffer.take_filtered() == 0
    drained = buffer.drain()
    assert drained is not None and drained.to_pylist() == [{"id": 1, "user": "x", "meta__at": "m", "n": 7, "kind": "c"}]


def test_a_new_table_s_columns_are_inferred_from_the_values_as_transformed() -> None:
    spec = parse(STEPS).table.transform_spec
    sample = [json.dumps({"id": 1, "usr": {"name": "x"}, "meta": {"at": "m"}, "n": "7", "kind": "c"}).encode(),
              b'{"id": 2, "kind": "b"}', b'{"id": 3, "meta": 5}']
    values = transformed(spec, sample)
    assert values == [b'{"id":1,"n":7,"kind":"c","user":"x","meta__at":"m"}']
    names = [f.name for f in inference.schema(inference.infer(values, maps=()), ()).fields]
    assert names == ["id", "n", "kind", "user", "meta__at"]
    assert _native.transform_values(spec or "", [b"[1]"]) == [None]


def test_what_the_native_transforms_cannot_run_or_would_hide_is_refused_at_config_check() -> None:
    with pytest.raises(ConfigError, match=r"(?s)table.transforms: transforms\[0\]: matches: .*look-around"):
        parse([{"filter": "kind", "matches": "(?!debug).*"}])
    with pytest.raises(ConfigError, match="case_insensitive lets a field spelled otherwise land"):
        parse(STEPS[:1], case_insensitive=True)
