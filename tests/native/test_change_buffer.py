"""The record buffer of a keyed table: each record read natively as an upsert (its row) or a
delete (its key), Debezium's envelope and the JSON converter's schema envelope read through,
tombstones deleting their Kafka key's row, and every bad change named, never appended."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pyarrow as pa

from frazil.buffers.changes import ChangeBuffer, key_row
from frazil.config import DEBEZIUM, ChangesConfig
from frazil.iceberg.catalog import UNIT_KEY

SCHEMA = pa.schema([
    pa.field("id", pa.int64(), nullable=False), pa.field("name", pa.string()),
    pa.field("_kafka_topic", pa.string(), False), pa.field("_kafka_partition", pa.int32(), False),
    pa.field("_kafka_offset", pa.int64(), False), pa.field("_kafka_timestamp", pa.timestamp("us", tz="UTC"), False),
    pa.field("_kafka_key", pa.binary()),
])


@dataclass
class Rec:
    offset: int
    value: bytes | None
    key: bytes | None = None
    timestamp: int = 0


def debezium(op: str, before: dict | None, after: dict | None, envelope: bool = False) -> bytes:
    value: dict = {"before": before, "after": after, "op": op, "source": {"lsn": 1}, "ts_ms": 5}
    return json.dumps({"schema": {"type": "struct"}, "payload": value} if envelope else value).encode()


def test_debezium_upserts_become_rows_and_deletes_become_keys() -> None:
    buf = ChangeBuffer(SCHEMA, ChangesConfig("cdc", **DEBEZIUM), ["id"])
    records = [
        Rec(0, debezium("c", None, {"id": 1, "name": "a"})),
        Rec(1, debezium("u", {"id": 1, "name": "a"}, {"id": 1, "name": "b"}, envelope=True)),
        Rec(2, debezium("d", {"id": 2, "name": "gone", "extra": [1, 2]}, None)),
        Rec(3, debezium("r", None, {"id": 3, "name": "snap"})),
        Rec(4, debezium("t", None, None)),                                 # truncate: not a keyed change
        Rec(5, debezium("c", None, {"id": 4, "name": "x", "colour": "red"})),  # a field the table lacks
        Rec(6, b'{"op": "c", "after": {"id": 5}'),                          # not JSON
    ]
    problems = buf.append("t", 0, records)
    assert [(p.offset, p.field) for p in problems] == [(4, "op"), (5, "colour"), (6, "")]
    assert "operation \"t\" is not one this table takes" in problems[0].reason
    rows, keys = buf.drain(), buf.drain_deletes()
    assert rows is not None and keys is not None
    assert rows.select(["id", "name", "_kafka_offset"]).to_pylist() == [
        {"id": 1, "name": "a", "_kafka_offset": 0}, {"id": 1, "name": "b", "_kafka_offset": 1},
        {"id": 3, "name": "snap", "_kafka_offset": 3}]
    assert keys.column_names == ["id", "_kafka_topic", "_kafka_partition", "_kafka_offset", "_kafka_timestamp",
                                 "_kafka_key"]
    assert keys.select(["id", "_kafka_offset"]).to_pylist() == [{"id": 2, "_kafka_offset": 2}]
    assert buf.rows == 0 and buf.drain() is None


def test_tombstones_delete_their_kafka_keys_row_or_are_skipped_and_counted() -> None:
    deleting = ChangeBuffer(SCHEMA, ChangesConfig("upsert", "delete"), ["id"])
    problems = deleting.append_tombstones("t", 1, [
        Rec(10, None, b"7"), Rec(11, None, b'{"id": 8}'), Rec(12, None, b'{"schema": {}, "payload": {"id": 9}}'),
        Rec(13, None, None), Rec(14, None, b"seven")])
    assert [(p.offset, p.field) for p in problems] == [(13, ""), (14, "id")]
    assert "without a Kafka key" in problems[0].reason
    keys = deleting.drain_deletes()
    assert keys is not None and keys.column("id").to_pylist() == [7, 8, 9]
    assert keys.column("_kafka_partition").to_pylist() == [1, 1, 1]
    skipping = ChangeBuffer(SCHEMA, ChangesConfig("cdc", **DEBEZIUM), ["id"])
    assert skipping.append_tombstones("t", 0, [Rec(1, None, b"7")]) == []
    assert skipping.tombstones_skipped == 1 and skipping.drain_deletes() is None


def test_upsert_mode_takes_every_value_as_the_row() -> None:
    buf = ChangeBuffer(SCHEMA, ChangesConfig("upsert"), ["id"])
    assert buf.append("t", 0, [Rec(0, b'{"id": 1, "name": "a"}'), Rec(1, b'{"name": "no id"}')])[0].offset == 1
    rows = buf.drain()
    assert rows is not None and rows.column("id").to_pylist() == [1]


def test_a_flat_change_record_keeps_its_operation_column() -> None:
    schema = SCHEMA.insert(2, pa.field("op", pa.string()))
    buf = ChangeBuffer(schema, ChangesConfig("cdc", op=("op",), upsert_ops=("I", "U"), delete_ops=("D",)), ["id"])
    assert buf.append("t", 0, [Rec(0, b'{"id": 1, "name": "a", "op": "I"}'), Rec(1, b'{"id": 1, "op": "D"}')]) == []
    rows, keys = buf.drain(), buf.drain_deletes()
    assert rows is not None and rows.column("op").to_pylist() == ["I"]
    assert keys is not None and keys.column("id").to_pylist() == [1]


def test_a_tombstones_key_becomes_the_identifier_columns() -> None:
    assert json.loads(key_row(b"42", ["id"], True)) == {"id": 42}
    for key in (b"0", b"-7", b"98765432109876543210", b"007", b"-0", b"1e3", b"4.5", b" 42", b"42 ", b"+4", b"-"):
        try:   # an integer key is taken as written; every other key as JSON (or text) is parsed
            expected = json.loads(key)
        except ValueError:
            expected = key.decode()
        assert json.loads(key_row(key, ["i\"d"], False)) == {"i\"d": expected}, key
    assert json.loads(key_row(b"user-1", ["name"], True)) == {"name": "user-1"}
    assert json.loads(key_row(b'{"a": 1, "b": "x"}', ["a", "b"], True)) == {"a": 1, "b": "x"}
    assert key_row(b"42", ["a", "b"], True) == b"null"   # a bad record: which column would 42 be?


def test_a_key_twice_in_a_change_is_a_bad_change_naming_it_and_the_rest_is_kept() -> None:
    buf = ChangeBuffer(SCHEMA, ChangesConfig("cdc", **DEBEZIUM), ["id"])
    problems = buf.append("t", 0, [
        Rec(0, b'{"op": "c", "after": {"id": 1}, "op": "d", "before": {"id": 1}}'),   # which operation?
        Rec(1, b'{"op": "c", "after": {"id": 2, "name": "a", "id": 3}}'),              # which id?
        Rec(2, debezium("c", None, {"id": 4, "name": "kept"})),
    ])
    twice = "appears twice in the record; a value is stored as sent, so the producer must send each field once"
    assert [(p.offset, p.field, p.reason) for p in problems] == [(0, "op", twice), (1, "id", twice)]
    rows = buf.drain()
    assert rows is not None and rows.column("id").to_pylist() == [4]


def test_a_timestamp_sent_in_another_unit_after_a_source_precision_change_lands_as_the_same_instant() -> None:
    """A table made from the JSON converter's envelope reads a column's numbers in the unit its
    first schema named; Debezium names another (``Timestamp``, milliseconds, where it was
    ``MicroTimestamp``) once the source column's precision changes: each record's own schema says
    how to read its number, exactly, or the record is bad."""
    micros = pa.field("ts", pa.timestamp("us"), metadata={UNIT_KEY: b"us"})
    schema = SCHEMA.insert(2, micros)

    def change(op: str, key: int, ts: int | None, name: str) -> bytes:
        field = {"type": "int64", "optional": True, "name": name, "field": "ts"}
        row_schema = {"type": "struct", "optional": True, "fields": [{"type": "int64", "field": "id"}, field]}
        row = {"id": key, "ts": ts}
        envelope = {"type": "struct", "fields": [{**row_schema, "field": "before"}, {**row_schema, "field": "after"},
                                                 {"type": "string", "field": "op"}]}
        payload = {"before": row if op == "d" else None, "after": None if op == "d" else row, "op": op}
        return json.dumps({"schema": envelope, "payload": payload}).encode()

    buf = ChangeBuffer(schema, ChangesConfig("cdc", **DEBEZIUM), ["id"])
    at = 1_700_000_000_123_000
    problems = buf.append("t", 0, [
        Rec(0, change("c", 1, at + 456, "io.debezium.time.MicroTimestamp")),
        Rec(1, change("u", 2, at // 1000, "io.debezium.time.Timestamp")),          # milliseconds now
        Rec(2, change("u", 3, None, "io.debezium.time.Timestamp")),
        Rec(3, change("u", 4, at * 1000 + 7, "io.debezium.time.NanoTimestamp")),   # below the column's unit
        Rec(4, change("u", 5, 19_000, "io.debezium.time.Date")),                   # days: no instant
        Rec(5, change("d", 6, at // 1000, "io.debezium.time.Timestamp")),
    ])
    assert [(p.offset, p.field) for p in problems] == [(3, "after.ts"), (4, "after.ts")]
    assert "has digits below the column's unit" in problems[0].reason
    assert "io.debezium.time.Date, a count of days, but the column reads a count of microseconds" in problems[1].reason
    rows, keys = buf.drain(), buf.drain_deletes()
    assert rows is not None and keys is not None
    assert rows.column("ts").cast(pa.int64()).to_pylist() == [at + 456, at, None]
    assert keys.column("id").to_pylist() == [6]
