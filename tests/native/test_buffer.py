"""The native buffer from Python: rows, metadata columns, errors as data, against a reference."""

import json

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from frazil import _native
from frazil.buffers.record_buffer import RecordBuffer


class Rec:
    """A Kafka record as the buffer reads it."""

    def __init__(self, offset: int, value: bytes | None) -> None:
        self.offset, self.timestamp, self.key, self.value = offset, 0, None, value

SCHEMA = pa.schema([
    pa.field("id", pa.int64(), nullable=False),
    pa.field("name", pa.string()),
    pa.field("score", pa.float64()),
    pa.field("ok", pa.bool_()),
    pa.field("at", pa.timestamp("us", tz="UTC")),
])
META = pa.schema([
    pa.field("_kafka_topic", pa.string(), nullable=False),
    pa.field("_kafka_partition", pa.int32(), nullable=False),
    pa.field("_kafka_offset", pa.int64(), nullable=False),
    pa.field("_kafka_timestamp", pa.timestamp("us", tz="UTC"), nullable=False),
    pa.field("_kafka_key", pa.binary()),
])


def test_rows_and_metadata_columns() -> None:
    schema = pa.schema(list(SCHEMA) + list(META))
    buf = _native.JsonBuffer(schema=schema, metadata_columns=True)
    values = [b'{"id": 1, "name": "a", "at": "2026-01-02T03:04:05.123456Z"}', b'{"id": 2, "score": 2.5, "ok": true}']
    result = buf.append(topic="t", partition=4, offsets=[7, 8], timestamps_ms=[1000, 2000], keys=[b"k", None],
                        values=values)
    assert result.rows == 2 and result.errors == [] and result.unknown_fields == []
    assert buf.rows == 2 and buf.bytes > 0
    batch = buf.drain()
    assert batch is not None and batch.schema == schema
    rows = batch.to_pylist()
    assert [r["id"] for r in rows] == [1, 2]
    assert rows[0]["at"].isoformat() == "2026-01-02T03:04:05.123456+00:00"
    assert [(r["_kafka_topic"], r["_kafka_partition"], r["_kafka_offset"], r["_kafka_key"]) for r in rows] == [
        ("t", 4, 7, b"k"), ("t", 4, 8, None)]
    assert rows[1]["_kafka_timestamp"].timestamp() == 2.0
    assert buf.rows == 0 and buf.drain() is None


def test_bad_records_are_reported_not_raised() -> None:
    buf = _native.JsonBuffer(schema=SCHEMA)
    errors = buf.append(topic="t", partition=0, offsets=[10, 11, 12, 13], timestamps_ms=[0] * 4, keys=[None] * 4,
                        values=[b'{"id": 1}', b'{"id": 1,', b'{"id": "one"}', b'{"name": "no id"}']).errors
    assert [(e.index, e.offset, e.field) for e in errors] == [(1, 11, ""), (2, 12, "id"), (3, 13, "id")]
    assert "not valid JSON" in errors[0].reason
    assert errors[2].reason == "is required, and the record has no value for it (missing or null)"
    assert buf.rows == 1


def test_schema_errors_are_typed() -> None:
    with pytest.raises(_native.NativeError, match="_kafka_topic"):
        _native.JsonBuffer(schema=SCHEMA, metadata_columns=True)


def test_facade_turns_tombstones_into_errors() -> None:
    buf = RecordBuffer(SCHEMA, metadata_columns=False)
    errors = buf.append("t", 0, [Rec(0, b'{"id": 5}'), Rec(1, None)])
    assert [e.offset for e in errors] == [1]
    table = buf.drain()
    assert table is not None and table.column("id").to_pylist() == [5]


records = st.lists(
    st.fixed_dictionaries(
        {"id": st.integers(-(2**63), 2**63 - 1)},
        optional={
            "name": st.one_of(st.none(), st.text(max_size=20)),
            "score": st.one_of(st.none(), st.floats(allow_nan=False, allow_infinity=False, width=64)),
            "ok": st.one_of(st.none(), st.booleans()),
            "extra": st.dictionaries(st.text(max_size=5), st.integers(), max_size=3),
        },
    ),
    max_size=40,
)


@settings(max_examples=150, deadline=None)
@given(records)
def test_matches_the_pure_python_reference(rows: list[dict]) -> None:
    buf = _native.JsonBuffer(schema=SCHEMA.remove(4), unknown_fields="report")   # "extra" is not a column
    values = [json.dumps(r).encode() for r in rows]
    result = buf.append(topic="t", partition=0, offsets=list(range(len(rows))), timestamps_ms=[0] * len(rows),
                        keys=[None] * len(rows), values=values)
    assert result.errors == []
    assert [(u.index, u.path) for u in result.unknown_fields] == [(i, "extra") for i, r in enumerate(rows)
                                                                  if "extra" in r]
    batch = buf.drain()
    expected = pa.Table.from_pylist([{k: r.get(k) for k in ("id", "name", "score", "ok")} for r in rows],
                                    schema=SCHEMA.remove(4))
    got = pa.Table.from_batches([batch]) if batch is not None else expected.slice(0, 0)
    assert got.equals(expected)


def test_drain_glues_a_trickle_of_small_batches_into_few_chunks_in_order() -> None:
    class Rec:
        def __init__(self, offset: int) -> None:
            self.offset, self.timestamp, self.key, self.value = offset, 0, None, b'{"id": %d}' % offset

    buf = RecordBuffer(SCHEMA, metadata_columns=False)
    for start in range(0, 3000, 3):  # 1,000 appends of 3 rows, as a slow topic delivers them
        assert buf.append("t", start % 12, [Rec(o) for o in range(start, start + 3)]) == []
    table = buf.drain()
    assert table is not None
    ids, partitions = table.column("id").to_pylist(), [i // 3 % 12 for i in table.column("id").to_pylist()]
    assert sorted(ids) == list(range(3000))
    for p in range(12):  # each partition's rows in offset order
        mine = [i for i, q in zip(ids, partitions, strict=True) if q == p]
        assert mine == sorted(mine)
    assert table.column("id").num_chunks == 1  # one write task for pyiceberg, not a thousand


def test_unknown_fields_fail_by_default_are_counted_when_ignored_and_a_near_miss_never_passes() -> None:
    schema = pa.schema([pa.field("id", pa.int64(), False), pa.field("userId", pa.string()),
                        pa.field("inner", pa.struct([pa.field("Score", pa.float64())]))])
    recs = [Rec(0, b'{"id": 1, "userId": "a"}'), Rec(1, b'{"id": 2, "extra": 1}'), Rec(2, b'{"id": 3, "userid": "b"}'),
            Rec(3, b'{"id": 4, "inner": {"score": 1.0}}')]
    fail = RecordBuffer(schema, metadata_columns=False)
    problems = fail.append("t", 0, recs)
    assert [(p.offset, p.field) for p in problems] == [(1, "extra"), (2, "userid"), (3, "inner.score")]
    assert "the table has no such column" in problems[0].reason
    assert problems[1].reason.startswith("differs only in case from column 'userId'")
    assert problems[2].reason.startswith("differs only in case from column 'Score'")

    ignore = RecordBuffer(schema, metadata_columns=False, unknown_fields="ignore")
    problems = ignore.append("t", 0, recs)
    assert [(p.offset, p.field) for p in problems] == [(2, "userid"), (3, "inner.score")]   # never a NULL by near miss
    assert problems[0].reason.startswith("differs only in case from column 'userId'")
    assert ignore.fields_ignored == 1
    # a bad record is never appended (with a dead-letter topic it goes there, not also to the table)
    assert fail.rows == 1 and ignore.rows == 2
    assert sorted(ignore.drain().column("id").to_pylist()) == [1, 2]


def test_a_near_miss_inside_lists_and_structs_is_a_bad_record_when_unknown_fields_are_ignored() -> None:
    schema = pa.schema([pa.field("Items", pa.list_(pa.struct([pa.field("SKU", pa.string())]))),
                        pa.field("geo", pa.struct([pa.field("Lat", pa.float64())]))])
    buffer = RecordBuffer(schema, metadata_columns=False, unknown_fields="ignore")
    problems = buffer.append("t", 0, [Rec(0, b'{"items": []}'), Rec(1, b'{"Items": [{"SKU": "a"}, {"sku": "b"}]}'),
                                      Rec(2, b'{"geo": {"lat": 1.5}}'), Rec(3, b'{"geo": {"lon": 1.5}, "other": 1}')])
    assert [(p.offset, p.field) for p in problems] == [(0, "items"), (1, "Items[1].sku"), (2, "geo.lat")]
    assert buffer.rows == 1 and buffer.fields_ignored == 2


def test_case_insensitive_lands_near_misses_in_their_columns_and_refuses_two_spellings() -> None:
    schema = pa.schema([pa.field("id", pa.int64(), False), pa.field("userId", pa.string()),
                        pa.field("geo", pa.struct([pa.field("Lat", pa.float64())]))])
    recs = [Rec(0, b'{"ID": 1, "userid": "a", "GEO": {"lat": 1.5}}'), Rec(1, b'{"id": 2, "userId": "b"}'),
            Rec(2, b'{"id": 3, "userid": "c", "USERID": "d"}'), Rec(3, b'{"id": 4, "other": 1}')]
    folding = RecordBuffer(schema, metadata_columns=False, case_insensitive=True)
    problems = folding.append("t", 0, recs)
    assert [(p.offset, p.field) for p in problems] == [(2, ""), (3, "other")], problems
    assert "both match column 'userId'" in problems[0].reason
    assert folding.drain().to_pylist() == [{"id": 1, "userId": "a", "geo": {"Lat": 1.5}},
                                           {"id": 2, "userId": "b", "geo": None}]
    exact = RecordBuffer(schema, metadata_columns=False)   # off by default: a near miss is a bad record
    assert [p.offset for p in exact.append("t", 0, recs)] == [0, 2, 3]
