"""A table's transforms against the real broker: each value renamed, dropped, flattened, cast and
filtered before it is decoded. Every record of the topic is accounted once: a row as the
transforms left it, a record the filter left out (counted), or a bad record in the dead-letter
topic (as sent, naming the field a transform could not apply to)."""

from __future__ import annotations

import asyncio
import datetime
import json
from pathlib import Path

import pytest

import changes
import support
from frazil_dev.kafka_broker import KafkaBroker

pytestmark = pytest.mark.integration

TOPIC = "transformed"
RECORDS = 400
TRANSFORMS = """transforms = [
  { rename = "usr.name", to = "user_name" },
  { drop = "usr" },
  { drop = "debug" },
  { flatten = "meta" },
  { cast = "amount", to = "double" },
  { cast = "code", to = "string" },
  { filter = "kind", matches = "click|view" },
  { drop = "kind" },
]"""
COLUMNS = ("id", "user_name", "meta_at", "meta_n", "amount", "code")


def case(i: int) -> str:
    """What record ``i`` is: a plain one, or one each transform leaves out or refuses."""
    return {7: "filtered", 11: "bad-cast", 13: "bad-flatten", 17: "bad-rename", 19: "bad-filter"}.get(i % 20, "row")


def value(i: int) -> bytes:
    kind = "debug" if case(i) == "filtered" else ("click", "view")[i % 2]
    record: dict[str, object] = {"id": i, "usr": {"name": f"u{i}", "tier": i % 3}, "debug": [i, {"x": i}],
                                 "meta": {"at": f"2026-11-{1 + i % 28:02d}", "n": i * 3},
                                 "amount": f"{i}.25", "code": i * 7, "kind": kind}
    bad = case(i)
    if bad == "bad-cast":
        record["amount"] = f"{i}.25 EUR"
    elif bad == "bad-flatten":
        record["meta"] = "none"
    elif bad == "bad-rename":
        record["user_name"] = "there already"
    elif bad == "bad-filter":
        record["kind"] = {"name": "click"}
    return json.dumps(record).encode()


REASONS = {"bad-cast": ("amount", '.25 EUR" is not a number'),
           "bad-flatten": ("meta", "is a string, not an object"),
           "bad-rename": ("user_name", "is there already, and usr.name would be renamed to it"),
           "bad-filter": ("kind", "is an object: a filter compares text, numbers and booleans")}


def test_rename_drop_flatten_cast_and_filter_land_every_record_once_as_a_row_a_filtered_one_or_a_dead_letter(
        kafka: KafkaBroker, tmp_path: Path) -> None:
    asyncio.run(support.create_topic(kafka.bootstrap, TOPIC, 2))
    asyncio.run(support.produce(kafka.bootstrap, TOPIC, [value(i) for i in range(RECORDS)], 2))
    path = support.write_config(tmp_path, kafka.bootstrap, [TOPIC], pipeline="transforms", table="db.transformed")
    text = path.read_text()
    start = text.index("columns = [")
    columns = ", ".join(f'{{ name = "{n}", type = "{t}" }}' for n, t in zip(
        COLUMNS, ("long", "string", "date", "long", "double", "string"), strict=True))
    text = text[:start] + f"columns = [{columns}]\n{TRANSFORMS}\n" + text[text.index("]\n", start) + 2:]
    path.write_text(text.replace("[kafka]", 'on_bad_record = "dead_letter"\n\n[kafka]', 1))
    cfg = support.load(path)
    assert [t.op for t in cfg.table.transforms] == ["rename", "drop", "drop", "flatten", "cast", "cast", "filter",
                                                    "drop"]
    ends = asyncio.run(support.end_offsets(kafka.bootstrap, [TOPIC]))
    log = tmp_path / "frazil.log"
    changes.run_until_committed(path, ends, log)

    def index(partition: int, offset: int) -> int:   # produced round-robin: record i at (i % 2, i // 2)
        return partition + 2 * offset

    rows = support.catalog_of(cfg).load_table("db.transformed").scan().to_arrow().to_pylist()
    landed = {index(r["_kafka_partition"], r["_kafka_offset"]): r for r in rows}
    assert len(landed) == len(rows)   # no record twice
    assert sorted(landed) == [i for i in range(RECORDS) if case(i) == "row"]
    for i, row in landed.items():
        assert {k: v for k, v in row.items() if not k.startswith("_kafka")} == {
            "id": i, "user_name": f"u{i}", "meta_at": datetime.date(2026, 11, 1 + i % 28),
            "meta_n": i * 3, "amount": i + 0.25, "code": str(i * 7)}
    letters = asyncio.run(support.dead_letters(kafka.bootstrap, cfg.dead_letter_topic))
    found: dict[int, tuple[str, str]] = {}
    for letter in letters:
        (_, partition, offset), headers = support.source_of(letter)
        i = index(partition, offset)
        assert i not in found and letter.value == value(i)   # once each, as sent
        found[i] = (headers["frazil.error.field"], headers["frazil.error"])
    assert sorted(found) == [i for i in range(RECORDS) if case(i).startswith("bad-")]
    for i, (field, reason) in found.items():
        want_field, want = REASONS[case(i)]
        assert field == want_field and want in reason and reason.endswith("(a transform of the table)"), (i, reason)
    filtered = sum(case(i) == "filtered" for i in range(RECORDS))
    assert f"{RECORDS} records in (0 taken by no table, {filtered} filtered out by transforms, 0 tombstones, " \
           f"{len(found)} bad)" in log.read_text()
