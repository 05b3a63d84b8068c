"""The native buffer's concurrency, memory cap, alignment, dedupe, unknown fields and nested
types, from Python."""

import datetime as dt
import decimal
import json
import threading

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from frazil import _native

FLAT = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("name", pa.string())])


def append(buf: _native.JsonBuffer, partition: int, offsets: list[int], values: list[bytes],
           keys: list[bytes | None] | None = None) -> _native.AppendResult:
    return buf.append(topic="t", partition=partition, offsets=offsets, timestamps_ms=[0] * len(offsets),
                      keys=keys or [None] * len(offsets), values=values)


def test_threads_append_at_once_and_every_row_keeps_its_value() -> None:
    schema = pa.schema(list(FLAT) + [pa.field("_kafka_topic", pa.string(), False),
                                     pa.field("_kafka_partition", pa.int32(), False),
                                     pa.field("_kafka_offset", pa.int64(), False),
                                     pa.field("_kafka_timestamp", pa.timestamp("us", tz="UTC"), False),
                                     pa.field("_kafka_key", pa.binary())])
    buf = _native.JsonBuffer(schema=schema, metadata_columns=True)
    failures: list[BaseException] = []

    def worker(partition: int) -> None:
        try:
            for chunk in range(20):
                offsets = list(range(chunk * 500, chunk * 500 + 500))
                values = [json.dumps({"id": partition * 1_000_000 + o, "name": "x" * 50}).encode() for o in offsets]
                assert append(buf, partition, offsets, values).rows == 500
        except BaseException as exc:  # noqa: BLE001
            failures.append(exc)

    threads = [threading.Thread(target=worker, args=(p,)) for p in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures, failures
    batch = buf.drain()
    assert batch is not None and batch.num_rows == 4 * 20 * 500
    rows = zip(batch.column("id").to_pylist(), batch.column("_kafka_partition").to_pylist(),
               batch.column("_kafka_offset").to_pylist(), strict=True)
    assert all(i == p * 1_000_000 + o for i, p, o in rows)


def test_the_cap_is_a_typed_error_and_nothing_is_appended() -> None:
    probe = _native.JsonBuffer(schema=FLAT)
    append(probe, 0, list(range(100)), [b'{"id": 1, "name": "abc"}'] * 100)
    one = probe.bytes
    buf = _native.JsonBuffer(schema=FLAT, max_bytes=one + one // 2)
    assert buf.max_bytes == one + one // 2
    append(buf, 0, list(range(100)), [b'{"id": 1, "name": "abc"}'] * 100)
    with pytest.raises(_native.BufferFullError) as exc:
        append(buf, 1, list(range(100)), [b'{"id": 1, "name": "abc"}'] * 100)
    assert isinstance(exc.value, _native.NativeError)
    _, needed, used, cap = exc.value.args
    assert (needed, used, cap) == (one, one, one + one // 2)
    assert buf.rows == 100 and buf.bytes == one
    buf.drain()
    assert buf.bytes == 0


def test_drained_buffers_are_aligned_for_pyarrow() -> None:
    schema = pa.schema([pa.field("id", pa.int64(), False), pa.field("tags", pa.list_(pa.string())),
                        pa.field("inner", pa.struct([pa.field("x", pa.float64())]))])
    buf = _native.JsonBuffer(schema=schema)
    append(buf, 0, list(range(1000)), [json.dumps({"id": i, "tags": ["a", None], "inner": {"x": i / 3}}).encode()
                                       for i in range(1000)])
    batch = buf.drain()
    assert batch is not None

    def buffers(array: pa.Array) -> list[pa.Buffer]:
        return [b for b in array.buffers() if b is not None and b.size > 0]

    assert _native.ALIGNMENT == 64
    assert all(b.address % 64 == 0 for column in batch.columns for b in buffers(column))


def test_last_writer_wins_by_key() -> None:
    buf = _native.JsonBuffer(schema=FLAT, dedupe_by_key=True)
    append(buf, 0, [5, 6, 7], [b'{"id": 5}', b'{"id": 6}', b'{"id": 7}'], keys=[b"a", b"b", None])
    append(buf, 0, [1, 9], [b'{"id": 1}', b'{"id": 9}'], keys=[b"b", b"a"])
    batch = buf.drain()
    assert batch is not None and sorted(batch.column("id").to_pylist()) == [6, 7, 9]


def test_unknown_fields_are_reported_for_schema_evolution() -> None:
    buf = _native.JsonBuffer(schema=FLAT, unknown_fields="report")
    result = append(buf, 0, [3], [b'{"id": 1, "colour": "red"}'])
    assert result.rows == 1 and not result.errors
    assert [(u.index, u.offset, u.path) for u in result.unknown_fields] == [(0, 3, "colour")]
    assert buf.drain().to_pylist() == [{"id": 1, "name": None}]   # type: ignore[union-attr]


# The buffer on its own keeps the product's promise: a value is stored exactly as sent, or its
# record is bad. These fail if the defaults ever drop a field again, or land a near miss as NULL.
CAMEL = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("userId", pa.int64())])


def test_by_default_an_unknown_field_is_a_bad_record_naming_it() -> None:
    buf = _native.JsonBuffer(schema=FLAT)
    result = append(buf, 0, [3, 4], [b'{"id": 1, "colour": "red"}', b'{"id": 2, "name": "kept"}'])
    assert result.rows == 1 and result.unknown_fields == []
    assert [(e.offset, e.field) for e in result.errors] == [(3, "colour")]
    assert "no such column" in result.errors[0].reason
    assert buf.drain().to_pylist() == [{"id": 2, "name": "kept"}]   # type: ignore[union-attr]


def test_by_default_a_field_differing_from_a_column_only_in_case_is_a_bad_record_naming_both() -> None:
    buf = _native.JsonBuffer(schema=CAMEL)
    result = append(buf, 0, [7], [b'{"id": 1, "userid": 42}'])
    assert result.rows == 0 and buf.rows == 0   # never a row with userId NULL
    [error] = result.errors
    assert (error.offset, error.field) == (7, "userid")
    assert "'userId'" in error.reason and "case" in error.reason, error.reason


def test_a_near_miss_is_a_bad_record_when_reporting_too_and_lands_only_with_fold_case() -> None:
    reported = append(_native.JsonBuffer(schema=CAMEL, unknown_fields="report"), 0, [7], [b'{"id": 1, "userid": 42}'])
    assert reported.rows == 0 and [e.field for e in reported.errors] == ["userid"]
    assert "'userId'" in reported.errors[0].reason
    folded = _native.JsonBuffer(schema=CAMEL, fold_case=True)
    assert append(folded, 0, [7], [b'{"id": 1, "userid": 42}']).rows == 1
    assert folded.drain().to_pylist() == [{"id": 1, "userId": 42}]   # type: ignore[union-attr]


def test_appending_to_several_default_buffers_rejects_unknown_fields_in_each() -> None:
    one, two = _native.JsonBuffer(schema=FLAT), _native.JsonBuffer(schema=CAMEL)
    results = _native.append_routed(topic="t", partition=0, offsets=[0, 1], timestamps_ms=[0, 0], keys=[None, None],
                                    values=[b'{"id": 1, "extra": 1}', b'{"id": 2, "userid": 3}'],
                                    targets=[(one, [0, 1]), (two, [0, 1])])
    assert [[(e.offset, e.field) for e in r.errors] for r in results] == [[(0, "extra"), (1, "userid")],
                                                                         [(0, "extra"), (1, "userid")]]
    assert one.rows == two.rows == 0


def test_unknown_fields_is_reject_or_report_and_the_old_switches_are_gone() -> None:
    with pytest.raises(ValueError, match='"reject" or "report"'):
        _native.JsonBuffer(schema=FLAT, unknown_fields="ignore")   # type: ignore[arg-type]
    for old in ("report_unknown_fields", "reject_unknown_fields"):
        with pytest.raises(TypeError):
            _native.JsonBuffer(schema=FLAT, **{old: True})   # type: ignore[arg-type]


NESTED = pa.schema([
    pa.field("id", pa.int64(), nullable=False),
    pa.field("user", pa.struct([pa.field("name", pa.string()), pa.field("age", pa.int32())])),
    pa.field("tags", pa.list_(pa.string())),
    pa.field("items", pa.list_(pa.struct([pa.field("sku", pa.string()), pa.field("qty", pa.int64())]))),
    pa.field("attrs", pa.map_(pa.string(), pa.int64())),
    pa.field("price", pa.decimal128(12, 2)),
    pa.field("at", pa.timestamp("us", tz="UTC")),
])

texts = st.text(max_size=8)
nested_records = st.lists(
    st.fixed_dictionaries(
        {"id": st.integers(-(2**63), 2**63 - 1)},
        optional={
            "user": st.one_of(st.none(), st.fixed_dictionaries({}, optional={"name": texts,
                                                                             "age": st.integers(-(2**31), 2**31 - 1)})),
            "tags": st.one_of(st.none(), st.lists(st.one_of(st.none(), texts), max_size=4)),
            "items": st.one_of(st.none(), st.lists(st.fixed_dictionaries({"sku": texts, "qty": st.integers(0, 10**6)}),
                                                   max_size=3)),
            "attrs": st.one_of(st.none(), st.dictionaries(texts, st.integers(-100, 100), max_size=3)),
            "price": st.one_of(st.none(), st.decimals(min_value=-10**9, max_value=10**9, places=2, allow_nan=False)),
            "at": st.one_of(st.none(),
                            st.datetimes(min_value=dt.datetime(1970, 1, 2), max_value=dt.datetime(2200, 1, 1),
                                         timezones=st.sampled_from([dt.UTC,
                                                                    dt.timezone(dt.timedelta(hours=5, minutes=30)),
                                                                    dt.timezone(dt.timedelta(hours=-8))]))),
        },
    ),
    max_size=25,
)


def _to_json(r: dict) -> bytes:
    def enc(v: object) -> object:
        if isinstance(v, decimal.Decimal):
            return str(v)
        if isinstance(v, dt.datetime):
            return v.isoformat()
        return v
    return json.dumps({k: enc(v) for k, v in r.items()}).encode()


def _reference(r: dict) -> dict:
    """What the row must hold, computed in pure Python."""
    out = {name: r.get(name) for name in NESTED.names}
    if out["attrs"] is not None:
        out["attrs"] = list(out["attrs"].items())
    if out["at"] is not None:
        out["at"] = out["at"].astimezone(dt.UTC)
    return out


@settings(max_examples=150, deadline=None)
@given(nested_records)
def test_nested_records_match_the_pure_python_reference(rows: list[dict]) -> None:
    buf = _native.JsonBuffer(schema=NESTED)
    result = append(buf, 0, list(range(len(rows))), [_to_json(r) for r in rows])
    assert result.errors == [] and result.rows == len(rows)
    batch = buf.drain()
    expected = pa.Table.from_pylist([_reference(r) for r in rows], schema=NESTED)
    got = pa.Table.from_batches([batch]) if batch is not None else expected.slice(0, 0)
    assert got.to_pylist() == expected.to_pylist()


def test_a_schema_from_pyiceberg_with_every_primitive_decodes() -> None:
    """UUIDs as text, binary and fixed as base64 (the Kafka Connect convention), dates, times,
    decimals, zoned timestamps: the Arrow schema comes straight from an Iceberg schema."""
    import uuid

    from pyiceberg.io.pyarrow import schema_to_pyarrow
    from pyiceberg.schema import Schema
    from pyiceberg.types import (
        BinaryType,
        BooleanType,
        DateType,
        DecimalType,
        DoubleType,
        FixedType,
        FloatType,
        IntegerType,
        LongType,
        NestedField,
        StringType,
        TimestampType,
        TimestamptzType,
        TimeType,
        UUIDType,
    )

    types = [BooleanType(), IntegerType(), LongType(), FloatType(), DoubleType(), DecimalType(9, 3), DateType(),
             TimeType(), TimestampType(), TimestamptzType(), StringType(), UUIDType(), FixedType(4), BinaryType()]
    schema = schema_to_pyarrow(Schema(*[NestedField(i + 1, f"c{i}", t, required=False) for i, t in enumerate(types)]))
    value = {"c0": True, "c1": -7, "c2": 2**40, "c3": 1.5, "c4": 2.25, "c5": "123456.789", "c6": "2026-11-21",
             "c7": "12:34:56.789", "c8": "2026-11-21T10:00:00", "c9": "2026-11-21T10:00:00+01:00", "c10": "é",
             "c11": "123e4567-e89b-12d3-a456-426614174000", "c12": "AAECAw==", "c13": "aGVsbG8="}
    buf = _native.JsonBuffer(schema=schema)
    result = append(buf, 0, [0, 1], [json.dumps(value).encode(), b"{}"])
    assert result.errors == [], [(e.field, e.reason) for e in result.errors]
    batch = buf.drain()
    assert batch is not None and batch.schema == schema
    row = batch.to_pylist()[0]
    assert row["c5"] == decimal.Decimal("123456.789") and row["c6"] == dt.date(2026, 11, 21)
    assert row["c7"] == dt.time(12, 34, 56, 789000)
    assert row["c9"] == dt.datetime(2026, 11, 21, 9, tzinfo=dt.UTC)
    assert row["c11"] == uuid.UUID("123e4567-e89b-12d3-a456-426614174000")  # the arrow.uuid type survives
    assert (row["c12"], row["c13"]) == (b"\x00\x01\x02\x03", b"hello")
    assert all(v is None for v in batch.to_pylist()[1].values())


def test_drain_batches_hands_over_each_append_without_a_copy_into_one() -> None:
    buf = _native.JsonBuffer(schema=FLAT)
    for p in range(3):
        append(buf, p, [0, 1], [b'{"id": 1}', b'{"id": 2}'])
    batches = buf.drain_batches()
    assert [b.num_rows for b in batches] == [2, 2, 2] and buf.rows == 0 and buf.bytes == 0
    assert all(b.schema == FLAT for b in batches)
    assert buf.drain_batches() == [] and buf.drain() is None


def test_append_routed_fans_one_batch_out_to_several_buffers_by_index() -> None:
    meta = [pa.field("_kafka_topic", pa.string(), False), pa.field("_kafka_partition", pa.int32(), False),
            pa.field("_kafka_offset", pa.int64(), False),
            pa.field("_kafka_timestamp", pa.timestamp("us", tz="UTC"), False), pa.field("_kafka_key", pa.binary())]
    one = _native.JsonBuffer(schema=pa.schema(list(FLAT) + meta), metadata_columns=True)
    two = _native.JsonBuffer(schema=pa.schema([pa.field("id", pa.int64())]), metadata_columns=False,
                             unknown_fields="report")   # the values' "name" is not a column of this one
    values = [json.dumps({"id": i, "name": f"n{i}"}).encode() for i in range(5)] + [b"{bad"]
    results = _native.append_routed(topic="t", partition=3, offsets=[10, 11, 12, 13, 14, 15], timestamps_ms=[0] * 6,
                                    keys=[b"k", None, None, None, None, None], values=values,
                                    targets=[(one, [0, 2, 4]), (two, [1, 2, 5])])
    assert [r.rows for r in results] == [3, 2]
    assert results[0].errors == [] and [(e.offset, e.index) for e in results[1].errors] == [(15, 2)]
    got = pa.Table.from_batches([one.drain()]).to_pydict()
    assert got["id"] == [0, 2, 4] and got["_kafka_offset"] == [10, 12, 14] and got["_kafka_key"] == [b"k", None, None]
    assert got["_kafka_partition"] == [3, 3, 3]
    assert pa.Table.from_batches([two.drain()]).column("id").to_pylist() == [1, 2]
    with pytest.raises(_native.NativeError, match="index 9 is out of range for 6 records"):
        _native.append_routed(topic="t", partition=3, offsets=[0] * 6, timestamps_ms=[0] * 6, keys=[None] * 6,
                              values=values, targets=[(two, [9])])
