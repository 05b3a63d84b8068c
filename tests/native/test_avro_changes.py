"""Keyed tables with Avro values (buffers/avro_changes.py): Debezium's envelope, written by
fastavro (an independent encoder), split into the rows of upserts and the keys of deletes, each
with its Kafka position; what cannot be either is a bad record naming the field."""

from __future__ import annotations

import io
import json

import fastavro
import pyarrow as pa
import pytest
from pyiceberg.io.pyarrow import schema_to_pyarrow
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType, TimestamptzType

from frazil import _native
from frazil.buffers.avro_changes import AvroChangeBuffer, envelope_paths, envelope_schema
from frazil.config import DEBEZIUM, ChangesConfig
from frazil.errors import BufferFull
from frazil.iceberg.catalog import META_COLUMNS
from frazil.ingest import avro, avro_names
from frazil_dev.batches import record_batch

TABLE = Schema(NestedField(1, "id", LongType(), required=True), NestedField(2, "name", StringType()),
               NestedField(3, "at", TimestamptzType()),
               *(NestedField(10 + i, name, kind, required=False) for i, (name, kind, _) in enumerate(META_COLUMNS)))
ROW = {"type": "record", "name": "Value", "fields": [
    {"name": "id", "type": "long"}, {"name": "name", "type": ["null", "string"], "default": None},
    {"name": "at", "type": ["null", {"type": "long", "logicalType": "timestamp-micros"}], "default": None},
    {"name": "secret", "type": ["null", "string"], "default": None}]}   # a source column the table leaves out
ENVELOPE = {"type": "record", "name": "Envelope", "namespace": "pg.public.items", "fields": [
    {"name": "before", "type": ["null", ROW], "default": None},
    {"name": "after", "type": ["null", "Value"], "default": None},
    {"name": "source", "type": {"type": "record", "name": "Source", "fields": [{"name": "lsn", "type": "long"}]}},
    {"name": "op", "type": "string"}, {"name": "ts_ms", "type": ["null", "long"], "default": None}]}
CDC = ChangesConfig(mode="cdc", **DEBEZIUM)


def framed(change: dict[str, object]) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(ENVELOPE), {"source": {"lsn": 7}, "ts_ms": None, **change})
    return b"\x00\x00\x00\x00\x05" + out.getvalue()


def buffer(unknown_fields: str = "ignore", max_bytes: int | None = None) -> AvroChangeBuffer:
    envelope = envelope_schema(TABLE, CDC, ["id"])
    got = avro.resolve(ENVELOPE, envelope, exclude=tuple(m[0] for m in META_COLUMNS), unknown_fields=unknown_fields,
                       lenient=envelope_paths(CDC))
    assert isinstance(got, avro.Readable), got
    assert got.ignored == ("after.secret",)   # the row's left-out column counts; source and before's do not
    buf = AvroChangeBuffer(schema_to_pyarrow(TABLE), schema_to_pyarrow(envelope), CDC, ["id"], confluent=True,
                           max_bytes=max_bytes)
    buf.register(5, json.dumps(avro_names.unshared(ENVELOPE)), got.reader, len(got.ignored))
    return buf


def row(i: int, name: str | None = "x") -> dict[str, object]:
    return {"id": i, "name": name, "at": None, "secret": "s"}


CHANGES = [
    {"op": "r", "before": None, "after": row(1)},                     # a snapshot read: an upsert
    {"op": "c", "before": None, "after": row(2, None)},
    {"op": "u", "before": row(1), "after": row(1, "renamed")},
    {"op": "d", "before": row(2), "after": None},
    {"op": "t", "before": None, "after": None},                       # a truncate: not taken
    {"op": "u", "before": None, "after": None},                       # an update without its row
    {"op": "d", "before": None, "after": None},                       # a delete without its key
]


def test_changes_split_into_upserts_and_deletes_with_their_positions_and_bad_ones_named() -> None:
    buf = buffer()
    values = [framed(c) for c in CHANGES]
    problems = buf.append("t", 3, [_Record(10 + i, 1000 + i, None, v) for i, v in enumerate(values)])
    assert [(p.offset, p.field, p.reason) for p in problems] == [
        (14, "op", "operation 't' is not one this table takes; expected one of c, r, u (upsert) or d (delete)"),
        (15, "after", "operation 'u' needs its row in 'after', which is missing or null"),
        (16, "before", "operation 'd' needs its row in 'before', which is missing or null")]
    assert buf.rows == 4 and buf.take_fields_ignored() == 7   # after.secret, once per change record read
    rows = buf.drain()
    assert rows is not None and rows.schema == schema_to_pyarrow(TABLE)
    assert [(r["id"], r["name"], r["_kafka_partition"], r["_kafka_offset"]) for r in rows.to_pylist()] == [
        (1, "x", 3, 10), (2, None, 3, 11), (1, "renamed", 3, 12)]
    deletes = buf.drain_deletes()
    assert deletes is not None and deletes.column_names == ["id", *(m[0] for m in META_COLUMNS)]
    assert [(r["id"], r["_kafka_offset"]) for r in deletes.to_pylist()] == [(2, 13)]
    assert buf.rows == 0 and buf.bytes == 0 and buf.drain() is None


def test_a_fetch_of_changes_with_tombstones_lands_as_its_records_would() -> None:
    """Straight from the fetched bytes (a tombstone among them: counted, skipped): the same rows,
    keys and bad records as the list path."""
    values = [None if i == 2 else framed(c) for i, c in enumerate(CHANGES)]
    built = record_batch([(i, 1000 + i, None, v, ()) for i, v in enumerate(values)])
    fetched = _native.read_fetch(built, fetch_offset=0, read_committed=True, aborted=[])
    raw, listed = buffer(), buffer()
    got = raw.append_fetched("t", 0, fetched, 0)
    want = listed.append("t", 0, [_Record(i, 1000 + i, None, v) for i, v in enumerate(values) if v is not None])
    assert [(p.offset, p.reason) for p in got] == [(p.offset, p.reason) for p in want] and len(got) == 3
    assert raw.tombstones_skipped == 1
    assert raw.drain() == listed.drain() and raw.drain_deletes() == listed.drain_deletes()


def test_a_required_column_without_a_value_is_a_bad_record_and_the_cap_refuses_whole_batches() -> None:
    buf = buffer(max_bytes=1)
    problems = buf.append("t", 0, [_Record(0, 0, None, framed({"op": "c", "before": None, "after": row(1)}))])
    assert problems == [] and buf.rows == 1   # an empty buffer takes a batch whatever its size
    with pytest.raises(BufferFull):
        buf.append("t", 0, [_Record(1, 0, None, framed({"op": "c", "before": None, "after": row(2)}))])
    assert buf.rows == 1
    strict = Schema(*TABLE.fields[:1], NestedField(2, "name", StringType(), required=True), *TABLE.fields[2:])
    envelope = envelope_schema(strict, CDC, ["id"])
    got = avro.resolve(ENVELOPE, envelope, exclude=tuple(m[0] for m in META_COLUMNS), unknown_fields="ignore",
                       lenient=envelope_paths(CDC))
    assert isinstance(got, avro.Refused) and got.field == "after.name", got   # the writer may send null for it


class _Record:
    def __init__(self, offset: int, timestamp: int, key: bytes | None, value: bytes | None) -> None:
        self.offset, self.timestamp, self.key, self.value = offset, timestamp, key, value


def test_the_envelope_keeps_the_tables_field_ids_in_after() -> None:
    envelope = envelope_schema(TABLE, CDC, ["id"])
    assert [f.name for f in envelope.fields] == ["op", "before", "after", *(m[0] for m in META_COLUMNS)]
    after = envelope.find_field("after").field_type
    assert [(f.field_id, f.name) for f in after.fields] == [(1, "id"), (2, "name"), (3, "at")]   # type: ignore[attr-defined]
    assert pa.schema(schema_to_pyarrow(envelope)).field("before").type.num_fields == 1


def test_appends_from_several_threads_each_land_once_and_drains_glue_small_appends() -> None:
    """The decode threads append to one buffer at once (each append decodes into the buffer's
    scratch space, then splits): every change lands once, and the many small appends come out in
    chunks of at least COALESCE_ROWS rows."""
    from concurrent.futures import ThreadPoolExecutor

    from frazil.buffers.record_buffer import COALESCE_ROWS

    buf = buffer()
    n, per = 4000, 20

    def append(start: int) -> None:
        batch = [_Record(i, i, None, framed({"op": "c", "before": None, "after": row(i)}))
                 for i in range(start, start + per)]
        assert buf.append("t", start // per % 3, batch) == []

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(append, range(0, n, per)))
    rows = buf.drain()
    assert rows is not None and sorted(rows.column("_kafka_offset").to_pylist()) == list(range(n))
    assert all(len(c) >= min(COALESCE_ROWS, n) for c in rows.column("id").chunks[:-1])

