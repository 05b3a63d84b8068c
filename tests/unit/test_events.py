"""The control-topic codec: every event survives the trip, versions resolve, bad bytes are named."""

from __future__ import annotations

import io

import fastavro
import pytest
from hypothesis import given
from hypothesis import strategies as st

from frazil.events import (
    Assignment,
    ColumnStat,
    CommitComplete,
    CommitRequest,
    CommitToTable,
    DataComplete,
    DataFileRef,
    DataWritten,
    DeadLetter,
    Event,
    EventDecodeError,
    OffsetRange,
    StartCommit,
    codec,
    decode,
    encode,
)

longs = st.integers(-(2**63), 2**63 - 1)
ints = st.integers(-(2**31), 2**31 - 1)
text = st.text(max_size=20)
opt_long = st.none() | longs
opt_bytes = st.none() | st.binary(max_size=16)
offsets = st.integers(0, 2**63 - 1)   # a Kafka offset is never negative

columns = st.builds(ColumnStat, field_id=ints, value_count=opt_long, null_count=opt_long, nan_count=opt_long,
                    size_bytes=opt_long, lower=opt_bytes, upper=opt_bytes)
files = st.builds(DataFileRef, path=text, file_format=st.just("PARQUET"), record_count=longs, size_bytes=longs,
                  spec_id=ints, partition=st.lists(opt_bytes, max_size=3).map(tuple),
                  columns=st.lists(columns, max_size=3).map(tuple),
                  split_offsets=st.lists(longs, max_size=3).map(tuple), sort_order_id=st.none() | ints)
ranges = st.builds(OffsetRange, topic=text, partition=ints, start=longs, end=longs, generation=ints, topic_id=text)
payloads = st.one_of(
    st.builds(StartCommit, commit_id=text),
    st.builds(DataWritten, commit_id=text, table=text, files=st.lists(files, max_size=3).map(tuple),
              ranges=st.lists(ranges, max_size=3).map(tuple), table_uuid=text,
              dead_letters=st.lists(st.builds(DeadLetter, topic=st.sampled_from(["a", "b"]), partition=st.just(0),
                                              offset=offsets, field=st.sampled_from(["", "x"]),
                                              reason=st.sampled_from(["r", "s"]), meant_for=st.none() | text),
                                    max_size=8).map(tuple)),
    st.builds(DataComplete, commit_id=text,
              assignments=st.lists(st.builds(Assignment, topic=text, partition=ints, generation=ints),
                                   max_size=4).map(tuple),
              last_record_ms=opt_long),
    st.builds(CommitToTable, commit_id=text, table=text, snapshot_id=opt_long, valid_through_ms=opt_long),
    st.builds(CommitComplete, commit_id=text, valid_through_ms=opt_long,
              failed_tables=st.lists(text, max_size=3).map(tuple)),
    st.builds(CommitRequest, reason=text),
)


@given(st.builds(Event, group=text, sender=text, sent_ms=longs, payload=payloads))
def test_every_event_decodes_to_what_was_encoded(event: Event) -> None:
    assert decode(encode(event)) == event


def test_payloads_that_share_a_shape_keep_their_type() -> None:
    """StartCommit and CommitComplete both fit {commit_id}: the union branch is named, not guessed."""
    for payload in (StartCommit("c1"), CommitComplete("c1"), CommitComplete("c1", 5)):
        assert type(decode(encode(Event("p", "w", 1, payload=payload))).payload) is type(payload)


def test_a_newer_writers_extra_fields_are_ignored_and_missing_ones_take_defaults() -> None:
    """Schema evolution: a newer writer added a field and dropped an optional one."""
    newer = codec.VERSION + 1
    v3 = fastavro.parse_schema({
        "type": "record", "name": "Event", "namespace": codec.NAMESPACE, "fields": [
            {"name": "group", "type": "string"}, {"name": "sender", "type": "string"},
            {"name": "sent_ms", "type": "long"}, {"name": "host", "type": "string"},
            {"name": "payload", "type": [
                {"type": "record", "name": "CommitComplete", "fields": [
                    {"name": "commit_id", "type": "string"}, {"name": "tables", "type": "int"}]}]}]})
    out = io.BytesIO()
    out.write(bytes((codec.MAGIC, newer)))
    fastavro.schemaless_writer(out, v3, {"group": "p", "sender": "w", "sent_ms": 7, "host": "h1",
                                         "payload": {"commit_id": "c9", "tables": 3}})
    codec.writer_schemas()[newer] = v3
    try:
        event = decode(out.getvalue())
    finally:
        del codec.writer_schemas()[newer]
    assert event == Event("p", "w", 7, payload=CommitComplete("c9", None))


def test_a_version_1_reply_still_reads_with_no_table_uuid() -> None:
    """A worker of the previous version may still be answering during a rolling upgrade."""
    out = io.BytesIO()
    out.write(bytes((codec.MAGIC, 1)))
    written = {"commit_id": "c1", "table": "db.t", "files": [], "ranges": [
        {"topic": "t", "partition": 0, "start": 0, "end": 5, "generation": 3}]}
    fastavro.schemaless_writer(out, codec.writer_schemas()[1], {
        "group": "p", "sender": "w", "sent_ms": 1, "payload": ("io.frazil.events.v1.DataWritten", written)})
    assert decode(out.getvalue()).payload == DataWritten("c1", "db.t", (), (OffsetRange("t", 0, 0, 5, 3),), "")


def test_a_version_7_range_reads_with_no_topic_id() -> None:
    """Its commit neither checks nor keeps the topic's id (a worker from before ids were sent)."""
    out = io.BytesIO()
    out.write(bytes((codec.MAGIC, 7)))
    written = {"commit_id": "c1", "table": "db.t", "files": [], "table_uuid": "u", "dead_letters": [],
               "letter_runs": [], "ranges": [{"topic": "t", "partition": 0, "start": 0, "end": 5, "generation": 3}]}
    fastavro.schemaless_writer(out, codec.writer_schemas()[7], {
        "group": "p", "sender": "w", "sent_ms": 1, "payload": ("io.frazil.events.v1.DataWritten", written)})
    assert decode(out.getvalue()).payload.ranges == (OffsetRange("t", 0, 0, 5, 3, ""),)


def test_an_unknown_version_says_to_upgrade_the_readers_first() -> None:
    data = bytearray(encode(Event("p", "w", 1, payload=StartCommit("c"))))
    data[1] = 99
    with pytest.raises(EventDecodeError, match="schema version 99.*upgrade every frazil process"):
        decode(bytes(data), where="control[0]@12")


@pytest.mark.parametrize("data, message", [
    (b'{"json": true}', "not a frazil event"),
    (b"", "not a frazil event"),
    (encode(Event("p", "w", 1, payload=DataWritten("c", "db.t", (), ())))[:-3], "corrupt"),
])
def test_bytes_that_are_not_an_event_are_named(data: bytes, message: str) -> None:
    with pytest.raises(EventDecodeError, match=f"control\\[2\\]@5.*{message}|{message}.*"):
        decode(data, where="control[2]@5")


def test_a_version_2_completion_reads_with_no_progress_and_progress_survives_the_trip() -> None:
    """Version 3 added the workers' watermark per partition; a version-2 worker reports none."""
    out = io.BytesIO()
    out.write(bytes((codec.MAGIC, 2)))
    complete = {"commit_id": "c1", "assignments": [{"topic": "t", "partition": 0, "generation": 3}],
                "last_record_ms": None}
    fastavro.schemaless_writer(out, codec.writer_schemas()[2], {
        "group": "p", "sender": "w", "sent_ms": 1, "payload": ("io.frazil.events.v1.DataComplete", complete)})
    assert decode(out.getvalue()).payload == DataComplete("c1", (Assignment("t", 0, 3),))
    now = DataComplete("c1", (Assignment("t", 0, 3, progress=120), Assignment("t", 1, 3)), 5)
    assert decode(encode(Event("p", "w", 1, payload=now))).payload == now


def test_a_flood_of_bad_records_with_one_cause_costs_a_few_bytes_each_and_keeps_its_order() -> None:
    """Version 7 sends bad records as runs: 50,000 with one reason fit in a small reply."""
    reason = '"n/a" is not a number; the column is a long (64-bit)'
    letters = tuple(DeadLetter("clicks", 0, o, "user_id", reason) for o in range(1_000_000, 6_000_000, 100))
    letters += (DeadLetter("clicks", 1, 7, "", "x", ""), DeadLetter("clicks", 0, 5, "user_id", reason))
    reply = DataWritten("c1", "db.t", (), (), "uuid", letters)
    data = encode(Event("p", "w", 1, payload=reply))
    assert len(data) < 3 * len(letters)
    assert decode(data).payload == reply


def test_a_version_6_reply_still_reads_its_bad_records_one_by_one() -> None:
    out = io.BytesIO()
    out.write(bytes((codec.MAGIC, 6)))
    letter = {"topic": "t", "partition": 2, "offset": 9, "field": "f", "reason": "r", "meant_for": None}
    written = {"commit_id": "c1", "table": "db.t", "files": [], "ranges": [], "table_uuid": "u",
               "dead_letters": [letter]}
    fastavro.schemaless_writer(out, codec.writer_schemas()[6], {
        "group": "p", "sender": "w", "sent_ms": 1, "payload": ("io.frazil.events.v1.DataWritten", written)})
    assert decode(out.getvalue()).payload == DataWritten("c1", "db.t", (), (), "u", (DeadLetter("t", 2, 9, "f", "r"),))
