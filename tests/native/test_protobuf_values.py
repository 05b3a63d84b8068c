"""Protobuf values through the record buffer: schemas an append names are fetched and compiled
first (one that does not compile makes its records bad records, saying why), a message's columns
become a table's schema, and a later version's new fields become the changes it asks. Messages are
written by the hand-made encoder of ``frazil_dev.protowire``; the registry is an in-process stand-in
(the real one is in the integration tests)."""

from __future__ import annotations

import pyarrow as pa
import pytest
from pyiceberg.types import LongType, StringType

from frazil.buffers.record_buffer import RecordBuffer
from frazil.iceberg.evolution import Change
from frazil.ingest.protobuf import ProtoValues
from frazil.ingest.registry import Unusable
from frazil_dev import protowire as pw

V1 = 'syntax = "proto3"; package p; message Click { int64 id = 1; string page = 2; Geo geo = 3; ' \
     'message Geo { string city = 1; } }'
V2 = V1.replace("Geo geo = 3;", "Geo geo = 3; repeated string tags = 4;").replace(
    "string city = 1;", "string city = 1; int64 zone = 2;")


class Registry:
    """What ``WriterSchemas.get`` answers, by id, counting the asks."""

    def __init__(self) -> None:
        self.asked: list[int] = []
        self.texts = {1: V1, 2: V2, 3: "message {", 4: Unusable("schema id 4 is a JSON schema")}

    def get(self, schema_id: int) -> str | Unusable:
        self.asked.append(schema_id)
        return self.texts[schema_id]


def framed(schema_id: int, body: bytes) -> bytes:
    return b"\x00" + schema_id.to_bytes(4, "big") + b"\x00" + body


def click(i: int, city: str = "") -> bytes:
    return pw.uint(1, i) + pw.text(2, f"/p{i}") + (pw.length(3, pw.text(1, city)) if city else b"")


def test_an_append_fetches_the_schemas_it_names_once_and_reads_their_messages() -> None:
    registry = Registry()
    values = ProtoValues(registry)   # type: ignore[arg-type]
    schema = pa.schema([("id", pa.int64()), ("page", pa.string()), ("geo", pa.struct([("city", pa.string())]))])
    buffer = RecordBuffer(schema, metadata_columns=False, protobuf=values)
    records = [_Record(0, framed(1, click(7, "Oslo"))), _Record(1, framed(3, click(8))),
               _Record(2, framed(4, click(9))), _Record(3, framed(1, click(10)))]
    problems = buffer.append("t", 0, records)
    assert sorted(registry.asked) == [1, 3, 4]
    assert [(p.offset, p.reason.split(":")[0]) for p in problems] == [
        (1, "schema id 3"), (2, "schema id 4")]
    assert "does not compile" in problems[0].reason and "a JSON schema" in problems[1].reason
    assert buffer.drain().to_pylist() == [{"id": 7, "page": "/p7", "geo": {"city": "Oslo"}},
                                          {"id": 10, "page": "/p10", "geo": None}]
    buffer.append("t", 0, [_Record(4, framed(1, click(11)))])
    assert sorted(registry.asked) == [1, 3, 4]   # each asked once


def test_a_message_makes_a_table_and_a_later_version_asks_for_its_new_fields() -> None:
    values = ProtoValues(Registry())   # type: ignore[arg-type]
    schema_id, made = values.schema(framed(1, click(1)), extra=[("_kafka_offset", LongType(), True)])
    assert schema_id == 1
    assert [(f.name, str(f.field_type).split("<")[0], f.required) for f in made.fields] == [
        ("id", "long", False), ("page", "string", False), ("geo", "struct", False), ("_kafka_offset", "long", True)]
    changes = values.evolution_of(made, framed(2, click(1)))
    assert [(c.kind, c.path) for c in changes] == [("add", ("geo", "zone")), ("add", ("tags",))]
    assert changes[0] == Change("add", ("geo", "zone"), LongType()) and str(changes[1].type) == "list<string>"
    assert isinstance(made.find_field("page").field_type, StringType)
    with pytest.raises(ValueError, match="not in the Confluent wire format"):
        values.schema(b'{"id": 1}')
    with pytest.raises(ValueError, match="field 'page' is the name of a Kafka metadata, header or key column"):
        ProtoValues(Registry()).schema(framed(1, click(1)), extra=[("page", StringType(), False)])


class _Record:
    def __init__(self, offset: int, value: bytes) -> None:
        self.offset, self.value, self.timestamp, self.key, self.headers = offset, value, 0, None, ()
