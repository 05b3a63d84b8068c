"""Values land exactly as sent, or the record is bad: with the real broker and catalog, numbers,
timestamps, dates and times in every accepted form land as the instant or amount the producer
meant; a value that would land changed (a fraction into a long, digits past a decimal's scale,
epoch numbers for a timestamp without a declared unit, a count past a day for a time, a UTC offset
for a local timestamp, a missing required field) stops the pipeline naming the record and the
field; tombstones are counted, not a stop."""

from __future__ import annotations

import asyncio
import json
import logging
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from pathlib import Path

import pytest

import support
from frazil import daemon
from frazil.errors import RecordDecodeError
from frazil_dev.kafka_broker import KafkaBroker

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]

COLUMNS = """
[table]
name = "db.values"
columns = [
  { name = "id", type = "long", required = true },
  { name = "amount", type = "decimal(10, 2)" },
  { name = "at", type = "timestamptz" },
  { name = "sent_ms", type = "timestamptz", unit = "ms" },
  { name = "local", type = "timestamp" },
  { name = "day", type = "date", unit = "d" },
  { name = "clock", type = "time", unit = "ms" },
]
"""


def config(tmp_path: Path, bootstrap: str, topic: str) -> Path:
    path = support.write_config(tmp_path, bootstrap, [topic], pipeline=topic, table="db.unused")
    text = path.read_text()
    start = text.index("[table]")
    path.write_text(text[:start] + COLUMNS.strip() + "\n\n" + text[text.index("[maintenance]"):])
    return path


def good(i: int) -> bytes:
    """The same instant and amount, written the ways producers write them."""
    at = ["2026-11-23T12:00:00+02:00", "2026-11-23T10:00:00Z", "2026-11-23T05:00:00-05:00"][i % 3]
    amount = [f"{i}.5", i + 0.5, f"{i}.50"][i % 3]
    return json.dumps({"id": i, "amount": amount, "at": at, "sent_ms": 1_795_428_000_123 + i,
                       "local": "2026-11-23T10:00:00.25", "day": 20511 + i, "clock": 45296789}).encode()


async def test_values_land_as_sent_and_tombstones_are_counted_not_a_stop(kafka: KafkaBroker, tmp_path: Path,
                                                                        caplog: pytest.LogCaptureFixture) -> None:
    topic = "values-good"
    await support.create_topic(kafka.bootstrap, topic, 2)
    values = [None if i % 10 == 9 else good(i) for i in range(300)]   # a tombstone every tenth record
    await support.produce(kafka.bootstrap, topic, values, 2)
    cfg = support.load(config(tmp_path, kafka.bootstrap, topic))
    ends = await support.end_offsets(kafka.bootstrap, [topic])
    with caplog.at_level(logging.INFO, logger="frazil.ingest.loop"):
        await support.run_until_committed(cfg, ends)
    rows = support.catalog_of(cfg).load_table("db.values").scan().to_arrow().sort_by("id").to_pylist()
    assert [r["id"] for r in rows] == [i for i in range(300) if i % 10 != 9]
    utc = UTC
    for r in rows:
        i = r["id"]
        assert r["amount"] == Decimal(f"{i}.50"), r
        assert r["at"] == datetime(2026, 11, 23, 10, 0, tzinfo=utc), r
        assert r["sent_ms"] == datetime.fromtimestamp(0, tz=utc) + timedelta(milliseconds=1_795_428_000_123 + i), r
        assert r["local"] == datetime(2026, 11, 23, 10, 0, 0, 250_000), r   # local time, as written
        assert r["day"] == date(2026, 2, 27) + timedelta(days=i), r      # days since 1970-01-01
        assert r["clock"] == time(12, 34, 56, 789_000), r                 # milliseconds since midnight
    stopped = "(0 taken by no table, 0 filtered out by transforms, 30 tombstones, 0 bad)"
    assert stopped in caplog.text, caplog.text[-2000:]


@pytest.mark.parametrize(("field", "value", "message"), [
    ("id", 7.9, "7.9 has a fractional part; the column is a long (64-bit)"),
    ("amount", 1.239, "1.239 has more than 2 digit(s) after the decimal point; the column is decimal(10, 2)"),
    ("at", 1_795_428_000_123, "is a number, and the column declares no unit for numbers: set unit = \"ms\""),
    ("local", "2026-11-23T10:00:00Z", "has a UTC offset; the column is a timestamp without zone"),
    ("at", "2026-11-23T10:00:00", "has no UTC offset; the column is a timestamp with zone"),
    ("id", None, "is required, and the record has no value for it (missing or null)"),
    ("clock", 86_400_000, "86400000 milliseconds is not a time of day"),
])
async def test_a_value_that_would_land_changed_stops_the_pipeline_naming_record_and_field(
        kafka: KafkaBroker, tmp_path: Path, field: str, value: object, message: str) -> None:
    topic = f"values-bad-{field}-{abs(hash(str(value))) % 10_000}"
    await support.create_topic(kafka.bootstrap, topic, 1)
    bad = {**json.loads(good(5)), field: value}
    await support.produce(kafka.bootstrap, topic, [good(0), good(1), json.dumps(bad).encode(), good(3)], 1)
    cfg = support.load(config(tmp_path, kafka.bootstrap, topic))
    with pytest.raises(RecordDecodeError) as exc:
        await asyncio.wait_for(daemon.serve(cfg, asyncio.Event()), 60)
    assert (exc.value.topic, exc.value.partition, exc.value.offset, exc.value.field) == (topic, 0, 2, field), exc.value
    assert message in str(exc.value), str(exc.value)
    assert support.stored(support.catalog_of(cfg), cfg).get((topic, 0), 0) <= 2   # the bad record has not vanished


async def test_rounding_lands_half_to_even_only_where_the_config_allows_it(kafka: KafkaBroker, tmp_path: Path) -> None:
    """``rounding = "half_even"`` on a column: a fraction into an integer, or digits past a
    decimal's scale, land rounded half to even there; the column without it still refuses them."""
    topic = "values-rounding"
    await support.create_topic(kafka.bootstrap, topic, 1)
    path = config(tmp_path, kafka.bootstrap, topic)
    path.write_text(path.read_text().replace(
        '{ name = "amount", type = "decimal(10, 2)" },',
        '{ name = "amount", type = "decimal(10, 2)", rounding = "half_even" },\n'
        '  { name = "qty", type = "long", rounding = "half_even" },\n  { name = "exact", type = "long" },'))
    sent = [("1.235", 2.5), ("1.245", 3.5), ("-1.005", -2.5), ("7", 7.49)]
    values = [json.dumps({"id": i, "amount": a, "qty": q}).encode() for i, (a, q) in enumerate(sent)]
    values.append(json.dumps({"id": 9, "exact": 1.5}).encode())
    await support.produce(kafka.bootstrap, topic, values, 1)
    cfg = support.load(path)
    with pytest.raises(RecordDecodeError) as exc:   # the column without rounding still refuses
        await asyncio.wait_for(daemon.serve(cfg, asyncio.Event()), 60)
    assert (exc.value.offset, exc.value.field) == (4, "exact") and "fractional part" in str(exc.value)
    path.write_text(path.read_text().replace('[pipeline]', '[pipeline]\non_bad_record = "dead_letter"'))
    await support.run_until_committed(support.load(path), {(topic, 0): 5})
    rows = support.catalog_of(cfg).load_table("db.values").scan().to_arrow().sort_by("id").to_pylist()
    assert [(r["amount"], r["qty"]) for r in rows] == [
        (Decimal("1.24"), 2), (Decimal("1.24"), 4), (Decimal("-1.00"), -2), (Decimal("7.00"), 7)]
