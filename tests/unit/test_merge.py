"""The Spark merge flush's decisions, on real pyiceberg tables (SQLite catalog, no Spark): what
waits in the staging table above the merged mark, and where the mark is read from (the last
MERGE's snapshot summary, or the property kept after it: the higher per partition)."""

from __future__ import annotations

from pathlib import Path

from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.types import LongType, NestedField

from frazil.iceberg import offsets
from frazil.spark import merge


def tables(tmp_path: Path) -> tuple[SqlCatalog, Table, Table]:
    catalog = SqlCatalog("t", uri=f"sqlite:///{tmp_path}/c.db", warehouse=f"file://{tmp_path}")
    catalog.create_namespace("db")
    schema = Schema(NestedField(1, "id", LongType(), required=True))
    return catalog, catalog.create_table("db.t__changes", schema), catalog.create_table("db.t", schema)


def commit(table: Table, *, summary: dict[str, str] | None = None, properties: dict[str, str] | None = None) -> Table:
    with table.transaction() as tx:
        if summary is not None:
            with tx.update_snapshot(snapshot_properties=summary).fast_append():
                pass
        if properties:
            tx.set_properties(properties)
    return table


def test_what_waits_is_every_staged_offset_above_the_merged_mark(tmp_path: Path) -> None:
    catalog, staging, target = tables(tmp_path)
    assert merge.waiting(staging, target, "p") is None   # nothing staged yet
    staged = offsets.encode({("a", 0): 100, ("a", 1): 40, ("b", 0): 7})
    commit(staging, summary={}, properties={offsets.property_key("p"): staged})
    found = merge.waiting(catalog.load_table("db.t__changes"), target, "p")
    assert found is not None and found.ranges == {("a", 0): (0, 100), ("a", 1): (0, 40), ("b", 0): (0, 7)}
    assert found.changes == 147
    # a MERGE landed through a[0]=60, a[1]=40; the property kept after an older one says b[0]=7
    commit(target, summary={merge.merged_key("p"): offsets.encode({("a", 0): 60, ("a", 1): 40})},
           properties={merge.merged_key("p"): offsets.encode({("a", 0): 50, ("b", 0): 7})})
    target = catalog.load_table("db.t")
    assert merge.merged_mark(target, "p") == {("a", 0): 60, ("a", 1): 40, ("b", 0): 7}
    found = merge.waiting(catalog.load_table("db.t__changes"), target, "p")
    assert found is not None and found.ranges == {("a", 0): (60, 100)}
    # another pipeline's mark is not ours
    assert merge.merged_mark(target, "q") == {}


def test_the_staged_range_condition_quotes_topic_names() -> None:
    text = merge._condition({("it's", 2): (5, 9)})
    assert text == "(_kafka_topic = 'it\\'s' AND _kafka_partition = 2 AND _kafka_offset >= 5 AND _kafka_offset < 9)"


def test_spark_starts_for_a_merge_off_the_event_loop(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Spark's first start takes seconds: on the event loop it stalled the Kafka heartbeats (the
    group rebalanced and the buffer was read again, found by the upsert bench)."""
    import asyncio
    import time as time_mod

    from frazil.config import ChangesConfig, Column, TableConfig
    from frazil.metrics import Metrics

    calls: list[str] = []
    monkeypatch.setattr(merge, "merge", lambda spark, *rest: calls.append(spark))

    def slow_spark() -> str:
        time_mod.sleep(0.5)   # a JVM starting
        return "session"

    staged = TableConfig("db.t__changes", (Column("id", "long", required=True),), identifier_columns=("id",),
                         changes=ChangesConfig("upsert", merge="spark", merge_interval_s=0.001, target="db.t"))
    merger = merge.Merger([staged], slow_spark, catalog=None, catalog_name="c", pipeline="p",  # type: ignore[arg-type]
                          metrics=Metrics("p", "db.t"), leading=lambda: True)

    async def scenario() -> int:
        ticks = 0

        async def tick() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        ticker = asyncio.create_task(tick())
        await asyncio.sleep(0.01)
        await merger._maybe_merge(staged)
        ticker.cancel()
        return ticks

    ticks = asyncio.run(scenario())
    assert calls == ["session"]
    assert ticks >= 20, f"the event loop stood still while Spark started ({ticks} ticks in 0.5 s)"
