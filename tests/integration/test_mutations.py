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
from frazil import daemon
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


async def _committed(catalog: object, cfg: object, ends: dict[tuple[str, int], int], task: asyncio.Task[None]) -> None:
    for _ in range(450):
        if task.done():
            task.result()
            raise AssertionError("the pipeline stopped on its own")
        have = await asyncio.to_thread(support.stored, catalog, cfg)   # type: ignore[arg-type]
        if all(have.get(tp, 0) >= end for tp, end in ends.items()):
            return
        await asyncio.sleep(0.2)
    raise AssertionError(f"not committed within 90s: {ends}")


def test_another_writers_commits_move_the_key_index_by_the_files_they_changed_alone(
        kafka: KafkaBroker, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """While frazil runs a keyed table, another writer deletes two keys (pyiceberg's copy-on-write:
    their file rewritten) and appends rows (a new key, and a second row of an existing key). The
    key index follows by reading only the files those commits added, not the table again; the
    next changes replace and delete the right rows: the table is the latest row of every key,
    with the other writer's changes where no later change came."""
    import logging
    import warnings

    import pyarrow as pa

    topic = "upserts-foreign"
    asyncio.run(support.create_topic(kafka.bootstrap, topic, PARTITIONS))
    cfg = support.load(changes.config(tmp_path, kafka.bootstrap, topic, "ups-foreign", mode="upsert",
                                      extra_table='tombstones = "delete"', interval=0.3))
    catalog = support.catalog_of(cfg)

    def values(ids: list[int], version: int) -> Iterator[tuple[int, bytes, bytes | None]]:
        for i in ids:
            yield i, str(i).encode(), json.dumps({"id": i, "name": f"v{version}", "amount": i / 2,
                                                   "version": version}).encode()

    def foreign_writes() -> None:
        table = catalog.load_table(cfg.table.name)
        with warnings.catch_warnings():   # what pyiceberg does, said: the rewrite is the point here
            warnings.filterwarnings("ignore", "Merge on read is not yet supported", UserWarning)
            table.delete("id in (5, 6)")   # a rewrite of the file(s) holding them
        arrow = table.schema().as_arrow()
        rows = [{"id": i, "name": "other", "amount": 0.0, "version": -1, "_kafka_topic": "elsewhere",
                 "_kafka_partition": 0, "_kafka_offset": n, "_kafka_timestamp": 0, "_kafka_key": None}
                for n, i in enumerate((200, 201, 7))]
        table.append(pa.Table.from_pylist(rows, schema=arrow))

    async def scenario() -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(daemon.serve(cfg, stop))
        try:
            for n in range(3):   # three commits: several data files, one of them holding 5 and 6
                ends = await changes.produce(kafka.bootstrap, topic, values(list(range(n * 40, n * 40 + 40)), 1),
                                             PARTITIONS)
                await _committed(catalog, cfg, ends, task)
            await asyncio.to_thread(foreign_writes)
            ends = await changes.produce(kafka.bootstrap, topic, values([5, 7, 50, 200], 2), PARTITIONS)
            await _committed(catalog, cfg, ends, task)
        finally:
            stop.set()
            await asyncio.wait_for(task, 60)

    with caplog.at_level(logging.INFO, logger="frazil.iceberg.committer"):
        asyncio.run(scenario())
    expected: dict[int, tuple[object, ...]] = {i: ("v1", i / 2, 1) for i in range(120) if i != 6}
    expected.update({i: ("v2", i / 2, 2) for i in (5, 7, 50, 200)})
    expected[201] = ("other", 0.0, -1)
    changes.assert_same(changes.table_rows(catalog, cfg.table.name), expected, "pyiceberg")
    moved = [r.getMessage() for r in caplog.records if "key index brought from snapshot" in r.getMessage()]
    assert moved, caplog.text[-3000:]
    assert "2 data file(s) read, 1 gone" in moved[0], moved   # the rewritten file and the appended one
    rebuilt = [r.getMessage() for r in caplog.records if "key index built from snapshot" in r.getMessage()]
    assert len(rebuilt) == 1 and "from snapshot None" in rebuilt[0], rebuilt   # built once, when the table was new


def test_a_restart_reads_the_key_index_from_its_checkpoint_not_from_every_data_file(
        kafka: KafkaBroker, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Each stop checkpoints the key index beside the transaction log; the next start reads it back
    (the table unchanged since, or changed by another writer: then only that writer's files are
    read) instead of reading every key of the table. A checkpoint of another table (the table
    dropped and made again under its name) is not used."""
    import logging

    import pyarrow as pa

    topic = "upserts-checkpoint"
    asyncio.run(support.create_topic(kafka.bootstrap, topic, PARTITIONS))
    cfg = support.load(changes.config(tmp_path, kafka.bootstrap, topic, "ups-ckpt", mode="upsert",
                                      extra_table='tombstones = "delete"'))
    catalog = support.catalog_of(cfg)
    checkpoint = cfg.txlog_dir / "key-index" / f"{cfg.table.name}.arrows"

    def run(seed: int) -> list[str]:
        caplog.clear()
        ends = asyncio.run(changes.produce(kafka.bootstrap, topic, changes.upsert_stream(300, 1500, seed), PARTITIONS))
        with caplog.at_level(logging.INFO):
            asyncio.run(support.run_until_committed(cfg, ends))
        return [r.getMessage() for r in caplog.records if "key index" in r.getMessage()]

    said = run(1)
    assert any("built from snapshot None" in m for m in said) and checkpoint.exists(), said
    said = run(2)
    assert any("read from its checkpoint" in m for m in said), said
    assert not any("key index built" in m or "brought" in m for m in said), said
    table = catalog.load_table(cfg.table.name)   # another writer appends a row of a new key
    row = {"id": 1000, "name": "other", "amount": 0.0, "version": -1, "_kafka_topic": "elsewhere",
           "_kafka_partition": 0, "_kafka_offset": 0, "_kafka_timestamp": 0, "_kafka_key": None}
    table.append(pa.Table.from_pylist([row], schema=table.schema().as_arrow()))
    said = run(3)
    assert any("read from its checkpoint" in m for m in said), said
    assert any("brought from snapshot" in m and "1 data file(s) read" in m for m in said), said
    assert not any("key index built" in m for m in said), said
    expected = asyncio.run(changes.reference(kafka.bootstrap, topic, PARTITIONS, mode="upsert"))
    expected[1000] = ("other", 0.0, -1)
    changes.assert_same(changes.table_rows(catalog, cfg.table.name), expected, "pyiceberg")

    catalog.drop_table(cfg.table.name)   # the same name, another table: its checkpoint is not this one's
    said = run(4)
    assert any("checkpoint" in m and "not used" in m and "table UUID" in m for m in said), said
    assert any("built from snapshot None" in m for m in said), said
