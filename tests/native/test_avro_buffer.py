"""The native Avro buffer from Python: datums written by fastavro (an independent encoder) come
back as the values sent, through reader schemas that ingest/avro.py derives."""

from __future__ import annotations

import datetime
import decimal
import io
import json

import fastavro
import pyarrow as pa
import pytest
from pyiceberg.io.pyarrow import schema_to_pyarrow
from pyiceberg.schema import Schema
from pyiceberg.types import (
    DateType,
    DecimalType,
    DoubleType,
    ListType,
    LongType,
    MapType,
    NestedField,
    StringType,
    StructType,
    TimestamptzType,
)

from frazil import _native
from frazil.ingest import avro
from frazil_dev.batches import record_batch

TABLE = Schema(
    NestedField(1, "id", LongType(), required=True), NestedField(2, "page", StringType()),
    NestedField(3, "at", TimestamptzType()),
    NestedField(4, "geo", StructType(NestedField(5, "city", StringType()), NestedField(6, "lat", DoubleType()))),
    NestedField(7, "tags", ListType(8, StringType(), element_required=False)),
    NestedField(9, "attrs", MapType(10, StringType(), 11, LongType(), value_required=False)),
    NestedField(12, "price", DecimalType(10, 2)), NestedField(13, "day", DateType()),
    NestedField(14, "kind", StringType()), NestedField(15, "missing", StringType()))
WRITER = {"type": "record", "name": "Click", "namespace": "web", "fields": [
    {"name": "id", "type": "int"}, {"name": "PAGE", "type": ["null", "string"], "default": None},
    {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "geo", "type": {"type": "record", "name": "Geo", "fields": [
        {"name": "city", "type": "string"}, {"name": "lat", "type": "float"}]}},
    {"name": "tags", "type": {"type": "array", "items": "string"}},
    {"name": "attrs", "type": {"type": "map", "values": "int"}},
    {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 8, "scale": 2}},
    {"name": "day", "type": {"type": "int", "logicalType": "date"}},
    {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["A", "B"]}}]}


def framed(schema_id: int, record: dict[str, object]) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(WRITER), record)
    return b"\x00" + schema_id.to_bytes(4, "big") + out.getvalue()


def buffer() -> _native.AvroBuffer:
    got = avro.resolve(WRITER, TABLE, case_insensitive=True)
    assert isinstance(got, avro.Readable), got
    buf = _native.AvroBuffer(schema=schema_to_pyarrow(TABLE), confluent=True)
    buf.register(3, json.dumps(WRITER), got.reader)
    return buf


def test_every_supported_type_lands_as_sent() -> None:
    sent = {"id": 1, "PAGE": "/a", "at": datetime.datetime(2024, 1, 2, 3, 4, 5, 678000, tzinfo=datetime.UTC),
            "geo": {"city": "Oslo", "lat": 1.5}, "tags": ["x", "y"], "attrs": {"a": 1},
            "price": decimal.Decimal("12.34"), "day": datetime.date(2024, 1, 2), "kind": "B"}
    buf = buffer()
    result = buf.append(topic="t", partition=0, offsets=[5], timestamps_ms=[0], keys=[None], values=[framed(3, sent)])
    assert (result.rows, result.errors) == (1, [])
    [row] = pa.Table.from_batches(buf.drain_batches()).to_pylist()
    assert row == {"id": 1, "page": "/a", "at": sent["at"], "geo": {"city": "Oslo", "lat": 1.5}, "tags": ["x", "y"],
                   "attrs": [("a", 1)], "price": decimal.Decimal("12.34"), "day": sent["day"], "kind": "B",
                   "missing": None}


def test_an_unknown_id_is_named_and_a_refused_one_makes_bad_records() -> None:
    buf = buffer()
    values = [b"\x00\x00\x00\x00\x09junk", b"\x01not framed"]
    with pytest.raises(_native.UnknownSchemaError) as caught:
        buf.append(topic="t", partition=0, offsets=[0, 1], timestamps_ms=[0, 0], keys=[None, None], values=values)
    assert caught.value.args[1] == [9] and buf.rows == 0
    buf.refuse(9, "", "unknown schema id 9")
    result = buf.append(topic="t", partition=0, offsets=[0, 1], timestamps_ms=[0, 0], keys=[None, None], values=values)
    assert result.rows == 0
    assert [(e.offset, e.reason[:20]) for e in result.errors] == [(0, "unknown schema id 9"),
                                                                  (1, "the value is not in ")]


def test_names_resolve_as_the_spec_says_and_writer_aliases_never_redirect_a_field() -> None:
    """A named type referred to across namespaces, a nested record in the null namespace, and a
    writer field `b` with alias `a_old`: `b` lands in column b, column a_old stays NULL (the
    decoder alone would match reader a_old to writer b through the alias)."""
    writer = {"type": "record", "name": "R", "namespace": "a", "fields": [
        {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["X", "Y"]}},
        {"name": "s", "type": {"type": "record", "name": "S", "namespace": "b", "fields": [
            {"name": "e2", "type": "a.E"},
            {"name": "g", "type": {"type": "record", "name": "G", "namespace": "", "fields": [
                {"name": "z", "type": "int"}]}}]}},
        {"name": "b", "type": "string", "aliases": ["a_old"]}]}
    table = Schema(NestedField(1, "e", StringType()), NestedField(2, "s", StructType(
        NestedField(3, "e2", StringType()), NestedField(5, "g", StructType(NestedField(6, "z", LongType()))))),
        NestedField(4, "a_old", StringType()), NestedField(7, "b", StringType()))
    got = avro.resolve(writer, table)
    assert isinstance(got, avro.Readable), got
    buf = _native.AvroBuffer(schema=schema_to_pyarrow(table), confluent=False)
    buf.register(0, got.writer, got.reader)
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(writer),
                               {"e": "Y", "s": {"e2": "X", "g": {"z": 3}}, "b": "bee"})
    result = buf.append(topic="t", partition=0, offsets=[0], timestamps_ms=[0], keys=[None], values=[out.getvalue()])
    assert (result.rows, result.errors) == (1, [])
    assert pa.Table.from_batches(buf.drain_batches()).to_pylist() == [
        {"e": "Y", "s": {"e2": "X", "g": {"z": 3}}, "a_old": None, "b": "bee"}]


def test_a_fetch_of_avro_values_lands_as_its_records_would_with_the_left_out_fields_counted() -> None:
    """Decoded straight from the fetched bytes (tombstones and a bad value among them), the rows,
    bad records and the count of writer fields left out are those of the list path."""
    sent = {"id": 1, "PAGE": "/a", "at": datetime.datetime(2024, 1, 2, tzinfo=datetime.UTC),
            "geo": {"city": "Oslo", "lat": 1.5}, "tags": [], "attrs": {}, "price": decimal.Decimal("1.00"),
            "day": datetime.date(2024, 1, 2), "kind": "A"}
    values = [None if i % 7 == 3 else b"\x00\x00\x00\x00\x03" if i == 5 else framed(3, {**sent, "id": i})
              for i in range(40)]
    built = record_batch([(i, 1_700_000_000_000 + i, None, v, ()) for i, v in enumerate(values)])
    fetched = _native.read_fetch(built, fetch_offset=0, read_committed=True, aborted=[])

    def registered() -> _native.AvroBuffer:
        got = avro.resolve(WRITER, TABLE, case_insensitive=True)
        assert isinstance(got, avro.Readable)
        buf = _native.AvroBuffer(schema=schema_to_pyarrow(TABLE), confluent=True)
        buf.register(3, json.dumps(WRITER), got.reader, 2)   # as if two writer fields had no column
        return buf

    raw, listed = registered(), registered()
    start = fetched.index_of(4)
    got = raw.append_fetched(topic="t", partition=0, fetched=fetched, start=start)
    kept = [(i, v) for i, v in enumerate(values) if i >= 4 and v is not None]
    want = listed.append(topic="t", partition=0, offsets=[i for i, _ in kept],
                         timestamps_ms=[1_700_000_000_000 + i for i, _ in kept], keys=[None] * len(kept),
                         values=[v for _, v in kept])
    assert [(e.offset, e.reason) for e in got.errors] == [(e.offset, e.reason) for e in want.errors] and got.errors
    assert (got.rows, got.fields_ignored) == (want.rows, want.fields_ignored) == (len(kept) - 1, 2 * (len(kept) - 1))
    assert raw.drain_batches() == listed.drain_batches()



def test_headers_and_keys_fill_their_columns_beside_avro_values_on_both_paths() -> None:
    """A header column and a column from a field of a JSON key, beside the Avro value's columns:
    the fetch and the list path land the same rows, and a record whose header or key does not fit
    is a bad record naming the column, its datum never decoded."""
    table = Schema(*TABLE.fields, NestedField(20, "attempt", LongType()), NestedField(21, "user", LongType()))
    got = avro.resolve(WRITER, table, case_insensitive=True, exclude=("attempt", "user"))
    assert isinstance(got, avro.Readable), got
    sent = {"id": 1, "PAGE": "/a", "at": datetime.datetime(2024, 1, 2, tzinfo=datetime.UTC),
            "geo": {"city": "Oslo", "lat": 1.5}, "tags": [], "attrs": {}, "price": decimal.Decimal("1.00"),
            "day": datetime.date(2024, 1, 2), "kind": "A"}

    def key(i: int) -> bytes | None:
        return None if i == 2 else b"plain" if i == 7 else json.dumps({"u": {"id": 10 * i}}).encode()

    def headers(i: int) -> list[tuple[str, bytes]]:
        return [] if i == 3 else [("attempt", b"x" if i == 5 else str(i).encode())]

    records = [(i, 1_700_000_000_000 + i, key(i), framed(3, {**sent, "id": i}), headers(i)) for i in range(10)]
    fetched = _native.read_fetch(record_batch(records), fetch_offset=0, read_committed=True, aborted=[])

    def registered() -> _native.AvroBuffer:
        buf = _native.AvroBuffer(schema=schema_to_pyarrow(table), confluent=True,
                                 header_columns=[("attempt", b"attempt")], key_columns=[("user", "u.id")])
        buf.register(3, json.dumps(WRITER), got.reader)
        return buf

    raw, listed = registered(), registered()
    from_fetch = raw.append_fetched(topic="t", partition=0, fetched=fetched)
    from_list = listed.append(topic="t", partition=0, offsets=[r[0] for r in records],
                              timestamps_ms=[r[1] for r in records], keys=[r[2] for r in records],
                              values=[r[3] for r in records],
                              headers=[[(k.encode(), v) for k, v in r[4]] for r in records])
    for done in (from_fetch, from_list):
        assert [(e.offset, e.field) for e in done.errors] == [(5, "attempt"), (7, "user")], done.errors
        assert done.rows == 8
    rows = pa.Table.from_batches(raw.drain_batches()).to_pylist()
    assert pa.Table.from_batches(listed.drain_batches()).to_pylist() == rows
    assert [(r["id"], r["attempt"], r["user"]) for r in rows] == [
        (i, None if i == 3 else i, None if i == 2 else 10 * i) for i in range(10) if i not in (5, 7)]
    with pytest.raises(_native.NativeError, match="give every record's headers"):
        registered().append(topic="t", partition=0, offsets=[0], timestamps_ms=[0], keys=[None],
                            values=[records[0][3]])

# Debezium's envelope, as its Avro converter writes it: `before` defines the row's record type and
# `after` refers to it by name (a named type used twice, which Avro allows).
ROW = {"type": "record", "name": "Value", "fields": [
    {"name": "id", "type": "int"}, {"name": "name", "type": ["null", "string"], "default": None},
    {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["A", "B"]}}]}
ENVELOPE = {"type": "record", "name": "Envelope", "namespace": "pg.public.items", "fields": [
    {"name": "before", "type": ["null", {**ROW, "namespace": "pg.public.items"}], "default": None},
    {"name": "after", "type": ["null", "Value"], "default": None},
    {"name": "op", "type": "string"}]}


def envelope_values(changes: list[dict[str, object]]) -> list[bytes]:
    parsed = fastavro.parse_schema(ENVELOPE)
    out = []
    for change in changes:
        one = io.BytesIO()
        fastavro.schemaless_writer(one, parsed, change)
        out.append(one.getvalue())
    return out


def row_struct(first_id: int, *, extra: bool = False) -> StructType:
    fields = [NestedField(first_id + 1, "kind", StringType()), NestedField(first_id, "id", LongType()),
              NestedField(first_id + 2, "name", StringType())]   # another order than the writer's
    return StructType(*fields, *([NestedField(first_id + 3, "note", StringType())] if extra else []))


@pytest.mark.parametrize("table", [
    Schema(NestedField(1, "op", StringType()), NestedField(2, "before", row_struct(10)),
           NestedField(3, "after", row_struct(20))),
    Schema(NestedField(1, "op", StringType()), NestedField(3, "after", row_struct(20))),          # no before
    Schema(NestedField(2, "before", row_struct(10)), NestedField(3, "after", row_struct(20, extra=True)),
           NestedField(1, "op", StringType())),                                                    # they differ
], ids=["both", "after-only", "after-wider"])
def test_a_record_type_the_writer_uses_twice_lands_in_each_column_as_sent(table: Schema) -> None:
    got = avro.resolve(ENVELOPE, table, unknown_fields="ignore")
    assert isinstance(got, avro.Readable), got
    buf = _native.AvroBuffer(schema=schema_to_pyarrow(table), confluent=False)
    buf.register(0, got.writer, got.reader)
    changes = [{"before": None, "after": {"id": 1, "name": "one", "kind": "A"}, "op": "c"},
               {"before": {"id": 1, "name": "one", "kind": "A"}, "after": {"id": 1, "name": None, "kind": "B"},
                "op": "u"},
               {"before": {"id": 2, "name": "two", "kind": "B"}, "after": None, "op": "d"}]
    result = buf.append(topic="t", partition=0, offsets=[0, 1, 2], timestamps_ms=[0] * 3, keys=[None] * 3,
                        values=envelope_values(changes))
    assert (result.rows, result.errors) == (3, [])
    names = {f.name for f in table.fields}

    def landed(row: dict[str, object] | None, column: str) -> dict[str, object] | None:
        if row is None:
            return None
        struct = table.find_field(column).field_type
        assert isinstance(struct, StructType)
        return {f.name: row.get(f.name) for f in struct.fields}

    want = [{n: (c[n] if n == "op" else landed(c[n], n)) for n in names} for c in changes]   # type: ignore[arg-type]
    got_rows = pa.Table.from_batches(buf.drain_batches()).to_pylist()
    assert got_rows == [{f.name: w[f.name] for f in table.fields} for w in want]


def test_debeziums_temporal_types_become_temporal_columns_holding_the_values_sent() -> None:
    """Debezium's Avro converter writes PostgreSQL's date, time and timestamp as int and long
    values named by ``connect.name`` (no Avro logical type): the table made from such a writer
    has date, time and timestamp columns, and each value lands as the instant it encodes. A
    ZonedTimestamp (ISO text) and a type named nowhere keep their base types."""
    def semantic(base: str, name: str) -> dict[str, object]:
        return {"type": base, "connect.version": 1, "connect.name": name}

    writer = {"type": "record", "name": "Value", "namespace": "pg.shop.items", "fields": [
        {"name": "id", "type": "long"},
        {"name": "day", "type": ["null", semantic("int", "io.debezium.time.Date")], "default": None},
        {"name": "at_ms", "type": semantic("int", "io.debezium.time.Time")},
        {"name": "at_us", "type": semantic("long", "io.debezium.time.MicroTime")},
        {"name": "ts_ms", "type": semantic("long", "io.debezium.time.Timestamp")},
        {"name": "ts_us", "type": ["null", semantic("long", "io.debezium.time.MicroTimestamp")], "default": None},
        {"name": "zoned", "type": semantic("string", "io.debezium.time.ZonedTimestamp")},
        {"name": "other", "type": semantic("long", "com.example.Counter")}]}
    table = avro.table_schema(writer, identifiers=["id"])
    assert [str(f.field_type) for f in table.fields] == [
        "long", "date", "time", "time", "timestamp", "timestamp", "string", "long"]
    ts = datetime.datetime(1999, 12, 31, 23, 59, 58, 123456)
    epoch = datetime.datetime(1970, 1, 1)
    sent = {"id": 7, "day": (datetime.date(2026, 2, 28) - datetime.date(1970, 1, 1)).days, "at_ms": 45296789,
            "at_us": 45296789012, "ts_ms": (ts - epoch) // datetime.timedelta(milliseconds=1),
            "ts_us": (ts - epoch) // datetime.timedelta(microseconds=1), "zoned": "2026-01-01T00:00:00Z", "other": 5}
    got = avro.resolve(writer, table)
    assert isinstance(got, avro.Readable), got
    buf = _native.AvroBuffer(schema=schema_to_pyarrow(table), confluent=False)
    buf.register(0, got.writer, got.reader)
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(writer), sent)
    result = buf.append(topic="t", partition=0, offsets=[0], timestamps_ms=[0], keys=[None], values=[out.getvalue()])
    assert (result.rows, result.errors) == (1, [])
    [row] = pa.Table.from_batches(buf.drain_batches()).to_pylist()
    assert row == {"id": 7, "day": datetime.date(2026, 2, 28), "at_ms": datetime.time(12, 34, 56, 789000),
                   "at_us": datetime.time(12, 34, 56, 789012), "ts_ms": ts.replace(microsecond=123000),
                   "ts_us": ts, "zoned": "2026-01-01T00:00:00Z", "other": 5}


def test_a_column_that_holds_a_debezium_temporal_as_its_integer_keeps_reading_it_so() -> None:
    """A table made before frazil read Debezium's type names (or declared so) has ``long`` where
    the writer sends a MicroTimestamp: its records still land, the integer as sent."""
    writer = {"type": "record", "name": "Value", "fields": [
        {"name": "id", "type": "long"},
        {"name": "ts", "type": {"type": "long", "connect.name": "io.debezium.time.MicroTimestamp"}}]}
    table = Schema(NestedField(1, "id", LongType(), required=True), NestedField(2, "ts", LongType()))
    got = avro.resolve(writer, table)
    assert isinstance(got, avro.Readable), got
    buf = _native.AvroBuffer(schema=schema_to_pyarrow(table), confluent=False)
    buf.register(0, got.writer, got.reader)
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(writer), {"id": 1, "ts": 1_700_000_000_123_456})
    assert buf.append(topic="t", partition=0, offsets=[0], timestamps_ms=[0], keys=[None],
                      values=[out.getvalue()]).rows == 1
    assert pa.Table.from_batches(buf.drain_batches()).to_pylist() == [{"id": 1, "ts": 1_700_000_000_123_456}]
