"""A table's layout follows the config: a changed ``partition_by`` or ``sort_order`` evolves an
existing table's partition spec and sort order at start (files already written keep theirs), a
config that leaves them out leaves the table's own, and one that cannot apply is a config error
naming it. Real broker, real SQLite catalog, the daemon in process; read back by pyiceberg."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import json
import subprocess
import sys
from pathlib import Path

import pytest
from pyiceberg.expressions import EqualTo
from pyiceberg.table.sorting import SortDirection

import support
from frazil import daemon
from frazil.config import Config, PartitionField
from frazil.errors import ConfigError, RecordDecodeError
from frazil_dev.kafka_broker import KafkaBroker

pytestmark = pytest.mark.integration


def laid_out(cfg: Config, partition_by: tuple[str, ...], sort_order: str = "") -> Config:
    table = dataclasses.replace(cfg.table, partition_by=tuple(PartitionField(p) for p in partition_by),
                                sort_order=sort_order)
    return dataclasses.replace(cfg, tables=(table,))


@pytest.mark.asyncio
async def test_a_changed_partition_by_and_sort_order_evolve_the_table_and_every_row_reads_once(
        kafka: KafkaBroker, tmp_path: Path) -> None:
    topic = "layout"
    await support.create_topic(kafka.bootstrap, topic, 1)
    await support.produce(kafka.bootstrap, topic, (support.record(i) for i in range(100)), 1)
    base = support.load(support.write_config(tmp_path, kafka.bootstrap, [topic]))
    first = laid_out(base, ("day(at)",))
    await support.run_until_committed(first, {(topic, 0): 100})
    catalog = support.catalog_of(first)
    before = catalog.load_table(first.table.name)
    assert [str(f.transform) for f in before.spec().fields] == ["day"]

    # the config now buckets by id and sorts by id descending: the table follows at start
    await support.produce(kafka.bootstrap, topic, (support.record(i) for i in range(100, 200)), 1)
    second = laid_out(base, ("bucket[4](id)",), "id DESC")
    await support.run_until_committed(second, {(topic, 0): 200})
    table = catalog.load_table(first.table.name)
    assert [(str(f.transform), table.schema().find_column_name(f.source_id)) for f in table.spec().fields] == [
        ("bucket[4]", "id")]
    assert [(table.schema().find_column_name(f.source_id), f.direction) for f in table.sort_order().fields] == [
        ("id", SortDirection.DESC)]
    specs = {task.file.spec_id for task in table.scan().plan_files()}
    assert specs == {before.spec().spec_id, table.spec().spec_id}   # old files keep theirs, new ones take the new
    support.assert_exactly_once(support.count_offsets(catalog, first.table.name), {(topic, 0): 200})
    for key in (7, 150):   # a filter prunes by both specs and still finds its row
        found = table.scan(row_filter=EqualTo("id", key), selected_fields=("id",)).to_arrow().column("id")
        assert found.to_pylist() == [key]

    # a config without partition_by or sort_order leaves the table's own: never dropped by omission
    await support.produce(kafka.bootstrap, topic, (support.record(i) for i in range(200, 210)), 1)
    await support.run_until_committed(laid_out(base, ()), {(topic, 0): 210})
    again = catalog.load_table(first.table.name)
    assert again.spec().spec_id == table.spec().spec_id and again.sort_order().order_id == table.sort_order().order_id

    # a transform that does not fit its column is refused before anything is read
    with pytest.raises(ConfigError, match=r"day\(\) does not apply to 'name', a string column"):
        await asyncio.wait_for(daemon.serve(laid_out(base, ("day(name)",)), asyncio.Event()), 60)
    assert catalog.load_table(first.table.name).spec().spec_id == table.spec().spec_id

    # config check --connect says what a start would change, and changes nothing itself
    path = tmp_path / "frazil.toml"
    path.write_text(path.read_text().replace('name = "db.events"\n', 'name = "db.events"\npartition_by = ["name"]\n'))
    # (run as the command: importing frazil.cli would tune this test process's gc and malloc)
    checked = await asyncio.to_thread(subprocess.run, [sys.executable, "-m", "frazil.cli", "config", "check",
                                                       "--config", str(path), "--connect"],
                                      capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=120)
    assert checked.returncode == 0, checked.stderr[-3000:]
    assert ("layout     db.events: changed at start to the config's: partition spec [bucket[4](id)] -> [name]"
            in checked.stdout)
    assert catalog.load_table(first.table.name).spec().spec_id == table.spec().spec_id


@pytest.mark.asyncio
async def test_a_field_nested_in_a_struct_partitions_a_table_made_from_its_records(
        kafka: KafkaBroker, tmp_path: Path) -> None:
    """``partition_by = ["bucket[3](meta.day)", "meta.region"]`` on a table whose schema is inferred:
    each data file holds one bucket and region of the nested fields, and a filter on them finds its
    rows. A transform the inferred field's type does not take stops before anything lands."""
    topic = "nested-layout"
    await support.create_topic(kafka.bootstrap, topic, 1)
    values = [json.dumps({"id": i, "meta": {"day": i % 3, "region": f"r{i % 2}"}}).encode() for i in range(60)]
    await support.produce(kafka.bootstrap, topic, values, 1)
    path = support.write_config(tmp_path, kafka.bootstrap, [topic])
    text = path.read_text()
    columns = text[text.index("columns = ["):text.index("]\n", text.index("columns = [")) + 2]
    path.write_text(text.replace(columns, 'partition_by = ["day(meta.region)"]\n'))
    with pytest.raises(RecordDecodeError, match=r"day\(\) does not apply to 'meta.region', a string column"):
        await asyncio.wait_for(daemon.serve(support.load(path), asyncio.Event()), 60)
    path.write_text(text.replace(columns, 'partition_by = ["bucket[3](meta.day)", "meta.region"]\n'))
    cfg = support.load(path)
    await support.run_until_committed(cfg, {(topic, 0): 60})
    table = support.catalog_of(cfg).load_table(cfg.table.name)
    assert [(f.name, str(f.transform)) for f in table.spec().fields] == [("meta_day_bucket", "bucket[3]"),
                                                                         ("meta_region", "identity")]
    files = [task.file for task in table.scan().plan_files()]
    assert len({tuple(f.partition) for f in files}) == len(files) and sum(f.record_count for f in files) == 60
    assert {f.partition[1] for f in files} == {"r0", "r1"}
    found = table.scan(row_filter=EqualTo("meta.region", "r1"), selected_fields=("id",)).to_arrow()
    assert sorted(found.column("id").to_pylist()) == list(range(1, 60, 2))
    support.assert_exactly_once(support.count_offsets(support.catalog_of(cfg), cfg.table.name), {(topic, 0): 60})


def test_files_written_before_a_spec_change_and_committed_after_it_keep_their_spec(tmp_path: Path) -> None:
    """A process writes its files under ``day(at)``; another process's start changes the spec to
    ``month(at)`` before the first commits them (a rolling deploy, or files kept in a transaction
    log). Each file must be listed under the spec it was written with: under the new one, its day
    would be read as a month and a filter would prune it away."""
    import pyarrow as pa
    from pyiceberg.expressions import GreaterThanOrEqual, LessThan

    from frazil.iceberg import catalog as iceberg_catalog
    from frazil.iceberg.committer import Committer
    from frazil.iceberg.offsets import Range

    base = support.load(support.write_config(tmp_path, "127.0.0.1:1", ["events"]))
    catalog = iceberg_catalog.load(base.catalog)
    day = laid_out(base, ("day(at)",))
    iceberg_catalog.ensure_table(catalog, day.table)
    committer = Committer(catalog, day.table.name, day.pipeline, sleep=lambda s: None)
    table = catalog.load_table(day.table.name)
    at = [datetime.datetime(2024, 3, 5, tzinfo=datetime.UTC), datetime.datetime(2024, 4, 9, tzinfo=datetime.UTC)]
    data = pa.Table.from_pydict({
        "id": [1, 2], "name": ["a", "b"], "amount": [1.0, 2.0], "at": at, "_kafka_topic": ["events"] * 2,
        "_kafka_partition": [0, 0], "_kafka_offset": [0, 1], "_kafka_timestamp": [0, 0], "_kafka_key": [None, None]},
        schema=iceberg_catalog.arrow_schema(table))
    files = committer.write_files(data, table)
    assert {f.spec_id for f in files} == {table.spec().spec_id}

    iceberg_catalog.ensure_table(catalog, laid_out(base, ("month(at)",)).table)   # another process's start
    committer.commit_files(files, {("events", 0): Range(0, 2)}, "c1")
    table = catalog.load_table(day.table.name)
    assert [str(f.transform) for f in table.spec().fields] == ["month"]
    assert {task.file.spec_id for task in table.scan().plan_files()} == {0}
    march = table.scan(row_filter=GreaterThanOrEqual("at", "2024-03-01T00:00:00+00:00")
                       & LessThan("at", "2024-04-01T00:00:00+00:00"), selected_fields=("id",)).to_arrow()
    assert march.column("id").to_pylist() == [1]
    support.assert_exactly_once(support.count_offsets(catalog, day.table.name), {("events", 0): 2})
