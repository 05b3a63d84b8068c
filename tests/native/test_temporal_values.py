"""Dates, times and timestamps as the Iceberg types pyiceberg maps them to Arrow: a value is stored
as sent or its record is bad, and the reason says what is wrong with it: text that is no date,
time or timestamp at all says so with the form expected, before anything about an offset; a
number without a declared unit is refused, never read in a guessed unit; nothing is cut."""

from __future__ import annotations

import datetime as dt
import json

import pyarrow as pa
import pytest

from frazil import _native

TYPES = {
    "date": pa.date32(),
    "time": pa.time64("us"),
    "timestamp": pa.timestamp("us"),
    "timestamptz": pa.timestamp("us", tz="UTC"),
}
EXPECTED = {
    "date": "is not an ISO-8601 date; expected one like 2026-11-27",
    "time": "is not an ISO-8601 time of day; expected one like 10:00:00 or 10:00:00.123456",
    "timestamp": "is not an ISO-8601 timestamp; expected one like 2026-11-27T10:00:00",
    "timestamptz": "is not an ISO-8601 timestamp; expected one like 2026-11-27T10:00:00Z",
}
PATHS = {"single pass": True, "arrow-json": False}


def decode(column: pa.DataType, values: list[object], single_pass: bool = True) -> list[object]:
    """Per value, what the column holds, or the reason its record is bad."""
    buf = _native.JsonBuffer(schema=pa.schema([pa.field("v", column)]), single_pass=single_pass)
    result = buf.append(topic="t", partition=0, offsets=list(range(len(values))), timestamps_ms=[0] * len(values),
                        keys=[None] * len(values), values=[json.dumps({"v": v}).encode() for v in values])
    batch = buf.drain()
    stored = iter([] if batch is None else batch.column(0).to_pylist())
    reasons = {e.index: e.reason for e in result.errors}
    assert all(e.field == "v" for e in result.errors)
    return [reasons[i] if i in reasons else next(stored) for i in range(len(values))]


@pytest.mark.parametrize("single_pass", PATHS.values(), ids=PATHS.keys())
@pytest.mark.parametrize("kind", TYPES)
def test_text_that_is_no_date_or_time_at_all_says_so_with_the_form_expected(kind: str, single_pass: bool) -> None:
    texts = ["not a date", "", "12345", "garbage-with-dash", "2026-13-01T00:00:00Z", "2026-11-27T25:00:00"]
    for text, got in zip(texts, decode(TYPES[kind], texts, single_pass), strict=True):
        assert got == f"{json.dumps(text)} {EXPECTED[kind]}"


@pytest.mark.parametrize("single_pass", PATHS.values(), ids=PATHS.keys())
def test_only_a_timestamp_lacking_its_offset_is_refused_for_having_none(single_pass: bool) -> None:
    got = decode(TYPES["timestamptz"], ["2026-11-27T10:00:00", "not a date", "2026-11-27T10:00:00+01:00"], single_pass)
    assert got[0].startswith('"2026-11-27T10:00:00" has no UTC offset; the column is a timestamp with zone: send one')
    assert got[1] == f'"not a date" {EXPECTED["timestamptz"]}'
    assert got[2] == dt.datetime(2026, 11, 27, 9, tzinfo=dt.UTC)
    got = decode(TYPES["timestamp"], ["2026-11-27T10:00:00Z", "2026-11-27T10:00:00"], single_pass)
    assert got[0].startswith('"2026-11-27T10:00:00Z" has a UTC offset; the column is a timestamp without zone')
    assert got[1] == dt.datetime(2026, 11, 27, 10)


@pytest.mark.parametrize("kind", TYPES)
def test_a_number_without_a_declared_unit_is_refused_never_read_in_a_guessed_unit(kind: str) -> None:
    fixes = {"date": "a date column takes ISO-8601 text only (a count of days would be a guess)",
             "time": "a time column takes ISO-8601 text only (a count of microseconds would be a guess)",
             "timestamp": "the column declares no unit for numbers",
             "timestamptz": "the column declares no unit for numbers"}
    for got, number in zip(decode(TYPES[kind], [20000, 1.5]), ["20000", "1.5"], strict=True):
        assert isinstance(got, str) and got.startswith(f"{number} is a number, and {fixes[kind]}"), got


def test_dates_and_times_keep_what_was_sent_or_refuse_what_they_would_cut() -> None:
    assert decode(TYPES["date"], ["2026-11-27", "2026-11-27T00:00:00Z"]) == [dt.date(2026, 11, 27)] * 2
    for got in decode(TYPES["date"], ["2026-11-27T10:00:00Z", "2026-11-27T00:00:00+05:00"]):
        assert "has a time of day, which a date column does not keep" in got
    assert decode(TYPES["time"], ["10:00:00.123456", "10:00 PM"]) == [dt.time(10, 0, 0, 123456), dt.time(22)]
    assert decode(TYPES["time"], ["10:00:00.1234567", "23:59:60"]) == [
        '"10:00:00.1234567" has digits below microsecond, which the column does not keep',
        f'"23:59:60" {EXPECTED["time"]}']
