"""Keyed tables (mode upsert and cdc) end to end against the real broker and catalog: the final
table equals a reference computed from the topic itself (the latest change per key by offset),
read by pyiceberg with frazil's position deletes applied, across restarts (the key index rebuilt
from the table) and SIGKILLs at every point of a commit. Spark SQL reads the same tables in
tests/spark/test_mutations_spark.py."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import test_manifest_lists

import changes
import support
from frazil_dev.kafka_broker import KafkaBroker

pytestmark = [pytest.mark.integration]

PARTITIONS = 3


def test_an_upsert_stream_with_tombstones_lands_the_latest_row_of_every_key(kafka: KafkaBroker, tmp_path: Path) -> None:
    topic = "upserts"
    asyncio.run(support.create_topic(kafka.bootstrap, topic, PARTITIONS))
    cfg = support.load(changes.config(tmp_path, kafka.bootstrap, topic, "ups", mode="upsert",
                                      extra_table='tombstones = "delete"'))
    catalog = support.catalog_of(cfg)
    # two runs: the second starts with a table full of rows, so its index is rebuilt from the table
    for seed in (1, 2):
        ends = asyncio.run(changes.produce(kafka.bootstrap, topic, changes.upsert_stream(300, 4000, seed), PARTITIONS))
        asyncio.run(support.run_until_committed(cfg, ends))
    expected = asyncio.run(changes.reference(kafka.bootstrap, topic, PARTITIONS, mode="upsert"))
    changes.assert_same(changes.table_rows(catalog, cfg.table.name), expected, "pyiceberg")
    table = catalog.load_table(cfg.table.name)
    deletes = int(table.current_snapshot().summary.additional_properties.get("total-position-deletes", "0"))
    assert deletes > 0, "updates must be position deletes, not rewrites"
    # the manifest lists this process kept (delete manifests among them) are what their files hold
    assert test_manifest_lists.assert_kept_lists_match(table) > 0


def test_a_column_added_at_the_source_mid_stream_evolves_a_keyed_table_and_keeps_every_change(
        kafka: KafkaBroker, tmp_path: Path) -> None:
    """Debezium's JSON changes of a source table that gains a column (`ALTER TABLE ... ADD COLUMN
    note`) halfway: with unknown_fields = "evolve" the keyed table gains the column without a
    restart, the changes before it keep their rows (NULL in note), and every delete buffered
    when the schema changed is still applied: the table is the latest row of every key."""
    topic = "cdc-evolve"
    asyncio.run(support.create_topic(kafka.bootstrap, topic, PARTITIONS))
    expected: dict[int, tuple[object, ...]] = {}

    def stream() -> Iterator[tuple[int, bytes, bytes | None]]:
        for n, (key, kafka_key, value) in enumerate(changes.debezium_stream(300, 4000, 7, envelope_every=1000)):
            if value is None:
                yield key, kafka_key, None
                continue
            change = json.loads(value)
            changes.note_added(change.get("payload", change), key, n, 2000, expected)
            yield key, kafka_key, json.dumps(change).encode()

    cfg = support.load(changes.config(tmp_path, kafka.bootstrap, topic, "cdc-evolve", mode="cdc",
                                      extra_table='unknown_fields = "evolve"', interval=2.0))
    ends = asyncio.run(changes.produce(kafka.bootstrap, topic, stream(), PARTITIONS))
    asyncio.run(support.run_until_committed(cfg, ends))
    table = support.catalog_of(cfg).load_table(cfg.table.name)
    assert not table.schema().find_field("note").required
    found = changes.table_rows(support.catalog_of(cfg), cfg.table.name, ("name", "version", "note"))
    changes.assert_same(found, expected, "pyiceberg")
