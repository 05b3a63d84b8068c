"""Schema evolution is not held up by a bad record in the same batch (found by the chaos run):
records with a new field and a record whose id is not a number arrive together. The table gains
the new column, every good record lands once with its value, and only the bad record goes to the
dead-letter topic. Before the fix the whole batch's inference failed on the bad record, nothing
evolved, and the good records with the new field went to the dead-letter topic too."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

import support
from frazil_dev.kafka_broker import KafkaBroker

pytestmark = [pytest.mark.integration]

OLD, NEW = 200, 300
BAD_AT = OLD + 150   # in the middle of the new-field records


def value_of(i: int) -> bytes:
    if i == BAD_AT:
        return json.dumps({"id": "seven", "name": "x", "color": "red"}).encode()
    if i < OLD:
        return support.record(i)
    return json.dumps({"id": i, "name": f"n{i}", "color": f"c{i % 5}"}).encode()


def test_a_bad_record_among_new_field_records_does_not_stop_the_evolution(kafka: KafkaBroker, tmp_path: Path) -> None:
    topic = "evolve-bad"
    asyncio.run(support.create_topic(kafka.bootstrap, topic, 1))
    asyncio.run(support.produce(kafka.bootstrap, topic, (value_of(i) for i in range(OLD + NEW)), 1))
    path = support.write_config(tmp_path, kafka.bootstrap, [topic], pipeline="evolve-bad")
    text = path.read_text().replace("[kafka]", 'on_bad_record = "dead_letter"\n\n[kafka]', 1)
    path.write_text(text.replace('name = "db.events"\n', 'name = "db.events"\nunknown_fields = "evolve"\n', 1))
    cfg = support.load(path)
    assert cfg.table.unknown_fields == "evolve" and cfg.on_bad_record == "dead_letter"
    ends = asyncio.run(support.end_offsets(kafka.bootstrap, [topic]))
    asyncio.run(support.run_until_committed(cfg, ends, timeout=120))

    catalog = support.catalog_of(cfg)
    table = catalog.load_table(cfg.table.name)
    assert str(table.schema().find_field("color").field_type) == "string"
    landed = table.scan(selected_fields=("id", "color", "_kafka_offset")).to_arrow().to_pylist()
    good = [i for i in range(OLD + NEW) if i != BAD_AT]
    assert sorted(r["_kafka_offset"] for r in landed) == good   # each once (offset i holds record i: one partition)
    rows = {r["_kafka_offset"]: r for r in landed}
    assert all(rows[i]["id"] == i and rows[i]["color"] is None for i in range(OLD))
    assert all(rows[i]["color"] == f"c{i % 5}" for i in good if i >= OLD)
    sent = asyncio.run(support.dead_letters(kafka.bootstrap, cfg.dead_letter_topic))
    letters = [support.source_of(letter) for letter in sent]
    assert [(src, h["frazil.error.field"]) for src, h in letters] == [((topic, 0, BAD_AT), "id")]


PARTITIONS = 4


def test_new_fields_in_every_partition_of_one_poll_evolve_the_table_once_and_stop_nothing(
        kafka: KafkaBroker, tmp_path: Path) -> None:
    """A poll's partition fetches are decoded at once, each under the schema of that moment: when
    one partition's records have changed the schema, the other partitions' records with the same
    new field are tried again under the new schema, not taken for bad records (found by CI: the
    default on_bad_record = "fail" stopped the pipeline with "no such column" for partition 3)."""
    topic = "evolve-poll"
    asyncio.run(support.create_topic(kafka.bootstrap, topic, PARTITIONS))
    values = [value_of(i) if i != BAD_AT else support.record(i) for i in range(OLD + NEW)]
    asyncio.run(support.produce(kafka.bootstrap, topic, values, PARTITIONS))
    path = support.write_config(tmp_path, kafka.bootstrap, [topic], pipeline="evolve-poll")
    path.write_text(path.read_text().replace('name = "db.events"\n',
                                             'name = "db.events"\nunknown_fields = "evolve"\n', 1))
    cfg = support.load(path)
    assert cfg.table.unknown_fields == "evolve" and cfg.on_bad_record == "fail"
    ends = asyncio.run(support.end_offsets(kafka.bootstrap, [topic]))
    assert all(end == (OLD + NEW) // PARTITIONS for end in ends.values())   # every partition has new-field records
    asyncio.run(support.run_until_committed(cfg, ends, timeout=120))

    table = support.catalog_of(cfg).load_table(cfg.table.name)
    landed = table.scan(selected_fields=("id", "color")).to_arrow().to_pylist()
    assert sorted(r["id"] for r in landed) == list(range(OLD + NEW))   # each once
    assert all(r["color"] == (f"c{r['id'] % 5}" if r["id"] >= OLD and r["id"] != BAD_AT else None) for r in landed)
    changes = [s for s in table.metadata.schemas if "color" in {f.name for f in s.fields}]
    assert len(table.metadata.schemas) == 2 and len(changes) == 1   # one change, made once
