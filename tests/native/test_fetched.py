"""Fetched record sets into the native buffer: batches built by aiokafka's own batch builder (every
codec), read by ``_native.read_fetch`` and appended from their bytes, give the same rows, errors
and counts as the same records appended as lists; a start index skips what a table holds."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from frazil import _native
from frazil.buffers.record_buffer import RecordBuffer
from frazil.kafka.fetch import Chunk
from frazil_dev.batches import record_batch

SCHEMA = pa.schema([
    pa.field("id", pa.int64(), nullable=False),
    pa.field("name", pa.string()),
    pa.field("_kafka_topic", pa.string(), nullable=False),
    pa.field("_kafka_partition", pa.int32(), nullable=False),
    pa.field("_kafka_offset", pa.int64(), nullable=False),
    pa.field("_kafka_timestamp", pa.timestamp("us", tz="UTC"), nullable=False),
    pa.field("_kafka_key", pa.binary()),
])
CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
Record = tuple[int, int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]


def batches(records: list[Record], codec: int, per_batch: int) -> bytes:
    """``records`` (offset, timestamp, key, value, headers) as v2 batches of ``per_batch``."""
    return b"".join(record_batch(records[i:i + per_batch], codec) for i in range(0, len(records), per_batch))


def value(i: int) -> bytes | None:
    if i % 13 == 5:
        return None                       # a tombstone
    if i % 17 == 3:
        return b'{"id": "not a number"}'  # a bad record
    return json.dumps({"id": i, "name": f"n{i}"}).encode()


def records(n: int, first: int = 100) -> list[Record]:
    return [(first + i, 1_700_000_000_000 + i, None if i % 3 else f"k{i}".encode(), value(i),
             [("h", str(i).encode())] if i % 2 else []) for i in range(n)]


@pytest.mark.parametrize("codec", list(CODECS))
def test_a_fetch_appends_as_its_records_would(codec: str) -> None:
    recs = records(300)
    fetched = _native.read_fetch(batches(recs, CODECS[codec], 64), fetch_offset=100, read_committed=True, aborted=[])
    assert len(fetched) == 300 and fetched.next_offset == 400
    chunk = Chunk("t", 2, fetched)
    assert [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in chunk.records()] == recs
    raw, listed = RecordBuffer(SCHEMA, metadata_columns=True), RecordBuffer(SCHEMA, metadata_columns=True)
    raw_errors = raw.append_fetched("t", 2, fetched)
    with_values = [r for r in chunk.records() if r.value is not None]
    list_errors = listed.append("t", 2, with_values)
    assert raw_errors == list_errors and raw_errors   # the bad records, named by offset, field and reason
    assert raw.drain() == listed.drain()
    summary = fetched.summary()
    assert (summary.records, summary.first_offset, summary.last_offset) == (300, 100, 399)
    assert summary.tombstones == sum(1 for r in recs if r[3] is None)
    assert summary.value_bytes == sum(len(r[3]) for r in recs if r[3] is not None)
    assert summary.max_timestamp_ms == 1_700_000_000_299


def test_a_start_index_skips_what_the_table_holds() -> None:
    fetched = _native.read_fetch(batches(records(100), 4, 30), fetch_offset=100, read_committed=True, aborted=[])
    start = fetched.index_of(170)
    assert start == 70
    buf = RecordBuffer(SCHEMA, metadata_columns=True)
    buf.append_fetched("t", 0, fetched, start)
    rows = buf.drain()
    assert rows is not None and rows.column("_kafka_offset").to_pylist() == [
        o for o in range(170, 200) if value(o - 100) is not None and (o - 100) % 17 != 3]
    assert fetched.index_of(1000) == len(fetched)
    assert fetched.summary(len(fetched)).records == 0


def test_records_at_offsets_become_objects_alone() -> None:
    chunk = Chunk("t", 0, _native.read_fetch(batches(records(50), 1, 50), fetch_offset=100, read_committed=True,
                                             aborted=[]))
    assert [r.offset for r in chunk.records(offsets=[101, 120, 149, 500])] == [101, 120, 149]
    assert [r.offset for r in chunk.records(10)] == list(range(110, 150))


def test_a_fetch_starting_inside_a_batch_skips_the_records_before_it() -> None:
    fetched = _native.read_fetch(batches(records(40), 3, 40), fetch_offset=125, read_committed=True, aborted=[])
    assert fetched.summary().first_offset == 125 and len(fetched) == 15


def test_a_damaged_fetch_names_the_batch_and_takes_nothing() -> None:
    data = bytearray(batches(records(40), 0, 20))
    data[-5] ^= 0x40
    with pytest.raises(_native.CorruptBatchError) as raised:
        _native.read_fetch(bytes(data), fetch_offset=100, read_committed=True, aborted=[])
    assert raised.value.args[1] == 120 and "CRC-32C" in raised.value.args[0]


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 200), per_batch=st.integers(1, 50), codec=st.sampled_from(list(CODECS.values())),
       floor=st.integers(0, 250))
def test_any_split_into_batches_and_any_floor_gives_the_list_paths_rows(n: int, per_batch: int, codec: int,
                                                                       floor: int) -> None:
    recs = records(n, first=0)
    fetched = _native.read_fetch(batches(recs, codec, per_batch), fetch_offset=0, read_committed=False, aborted=[])
    chunk = Chunk("t", 1, fetched)
    raw, listed = RecordBuffer(SCHEMA, metadata_columns=True), RecordBuffer(SCHEMA, metadata_columns=True)
    start = fetched.index_of(floor)
    assert raw.append_fetched("t", 1, fetched, start) == listed.append(
        "t", 1, [r for r in chunk.records() if r.value is not None and r.offset >= floor])
    assert raw.drain() == listed.drain()


def test_a_routed_share_of_a_fetch_appends_as_its_records_would() -> None:
    """Grouped by a route field straight from the fetch: indices are the fetch's (tombstones in no
    group), each group carries its value bytes, and a share appends as a list of its records."""
    recs = [(100 + i, 1_700_000_000_000 + i, None,
             None if i % 11 == 4 else b"{not json" if i == 7 else json.dumps({"id": i, "name": "ab"[i % 2]}).encode(),
             []) for i in range(60)]
    fetched = _native.read_fetch(batches(recs, 1, 16), fetch_offset=100, read_committed=True, aborted=[])
    chunk = Chunk("t", 3, fetched)
    groups, malformed = _native.route_fetched(fetched, 2, [["name"]])
    assert [i for i, _ in malformed] == [7] and "not valid JSON" in malformed[0][1]
    by_key = {keys[0]: (indices, value_bytes) for keys, indices, value_bytes in groups}
    for key, (indices, value_bytes) in by_key.items():
        want = [i for i in range(2, 60) if i != 7 and recs[i][3] is not None and i % 2 == "ab".index(key or "")]
        assert indices == want
        assert value_bytes == sum(len(recs[i][3] or b"") for i in want)
        raw, listed = RecordBuffer(SCHEMA, metadata_columns=True), RecordBuffer(SCHEMA, metadata_columns=True)
        assert raw.append_fetched("t", 3, fetched, at=indices) == listed.append(
            "t", 3, [r for r in chunk.records() if r.offset - 100 in set(indices)])
        assert raw.drain() == listed.drain()


@pytest.mark.parametrize(("at", "says"), [([3, 2], "must ascend"), ([4], "no value"), ([600], "out of range")])
def test_a_share_that_is_not_ascending_rows_is_refused(at: list[int], says: str) -> None:
    recs = [(100 + i, 0, None, None if i == 4 else b'{"id": 1}', []) for i in range(10)]
    fetched = _native.read_fetch(batches(recs, 0, 10), fetch_offset=100, read_committed=True, aborted=[])
    buf = _native.JsonBuffer(schema=pa.schema([pa.field("id", pa.int64())]))
    with pytest.raises(Exception, match=says):
        buf.append_fetched(topic="t", partition=0, fetched=fetched, at=at)
    with pytest.raises(_native.NativeError, match="start or at"):
        buf.append_fetched(topic="t", partition=0, fetched=fetched, start=1, at=[2])
    assert buf.rows == 0
