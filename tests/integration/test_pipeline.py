"""The pipeline end to end against the real broker and catalog (rules 1 and 2, bad input, drain)."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import logging
import re
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.structs import OffsetAndMetadata

import support
from frazil import daemon, faults
from frazil.config import Config
from frazil.errors import OutageTimeout, RecordDecodeError
from frazil.iceberg import offsets
from frazil_dev.kafka_broker import KafkaBroker

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]
_ids = itertools.count()


@pytest.fixture(autouse=True)
def _disarm() -> None:
    yield
    faults.disarm()


async def new_topics(kafka: KafkaBroker, n: int, partitions: int) -> list[str]:
    names = [f"t{next(_ids)}-{i}" for i in range(n)]
    for name in names:
        await support.create_topic(kafka.bootstrap, name, partitions)
    return names


async def group_offsets(cfg: Config, tps: list[tuple[str, int]]) -> dict[tuple[str, int], int | None]:
    consumer = AIOKafkaConsumer(bootstrap_servers=cfg.kafka.bootstrap_servers, group_id=cfg.kafka.group_id,
                                enable_auto_commit=False)
    await consumer.start()
    try:
        return {tp: await consumer.committed(TopicPartition(*tp)) for tp in tps}
    finally:
        await consumer.stop()


async def set_group_offsets(cfg: Config, values: dict[tuple[str, int], int]) -> None:
    consumer = AIOKafkaConsumer(bootstrap_servers=cfg.kafka.bootstrap_servers, group_id=cfg.kafka.group_id,
                                enable_auto_commit=False)
    await consumer.start()
    try:
        consumer.assign([TopicPartition(*tp) for tp in values])
        await consumer.commit({TopicPartition(*tp): OffsetAndMetadata(o, "") for tp, o in values.items()})
    finally:
        await consumer.stop()


async def test_every_record_lands_once_with_its_offsets_in_the_same_commit(kafka: KafkaBroker, tmp_path: Path) -> None:
    topics = await new_topics(kafka, 2, 3)
    for t in topics:
        await support.produce(kafka.bootstrap, t, (support.record(i) for i in range(3000)), 3)
    cfg = support.load(support.write_config(tmp_path, kafka.bootstrap, topics))
    ends = await support.end_offsets(kafka.bootstrap, topics)
    await support.run_until_committed(cfg, ends)

    catalog = support.catalog_of(cfg)
    support.assert_exactly_once(support.count_offsets(catalog, cfg.table.name), ends)
    table = catalog.load_table(cfg.table.name)
    assert offsets.stored_offsets(table.properties, cfg.pipeline) == ends
    # every data snapshot carries the offsets it committed, and they only grow (rule 1)
    previous: dict[tuple[str, int], int] = {}
    for snap in table.snapshots():
        extra = snap.summary.additional_properties
        assert extra[offsets.PIPELINE_KEY] == cfg.pipeline and extra[offsets.COMMIT_ID_KEY].startswith("p-")
        now = offsets.decode(extra[offsets.property_key(cfg.pipeline)])
        assert all(now[tp] >= o for tp, o in previous.items())
        previous = now
    assert previous == ends
    # the consumer group is a low watermark: it may lag the table, never lead it
    committed = await group_offsets(cfg, list(ends))
    assert all(o is None or o <= ends[tp] for tp, o in committed.items())


@pytest.mark.parametrize("group_position", ["behind", "between", "ahead"])
async def test_resumes_from_the_table_not_from_kafka(kafka: KafkaBroker, tmp_path: Path, group_position: str) -> None:
    """Rule 2. Move the consumer group's offsets behind the table (a restart from Kafka would
    duplicate), between the table and the end, or to the end (a restart from Kafka would lose
    records); either way the second run must give every record exactly once. Records fetched from
    the group's position before the table's position is set must never be taken."""
    (topic,) = await new_topics(kafka, 1, 2)
    await support.produce(kafka.bootstrap, topic, (support.record(i) for i in range(1000)), 2)
    cfg = support.load(support.write_config(tmp_path, kafka.bootstrap, [topic]))
    first = await support.end_offsets(kafka.bootstrap, [topic])
    await support.run_until_committed(cfg, first)

    await support.produce(kafka.bootstrap, topic, (support.record(i) for i in range(1000, 1600)), 2)
    ends = await support.end_offsets(kafka.bootstrap, [topic])
    moved = {"behind": lambda tp: 0, "between": lambda tp: (first[tp] + ends[tp]) // 2, "ahead": lambda tp: ends[tp]}
    await set_group_offsets(cfg, {tp: moved[group_position](tp) for tp in ends})
    await support.run_until_committed(cfg, ends)
    support.assert_exactly_once(support.count_offsets(support.catalog_of(cfg), cfg.table.name), ends)


async def test_metrics_count_what_happened(kafka: KafkaBroker, tmp_path: Path) -> None:
    from frazil_dev.kafka_broker import free_port
    from harness.outage import scrape

    (topic,) = await new_topics(kafka, 1, 3)
    await support.produce(kafka.bootstrap, topic, (support.record(i) for i in range(1500)), 3)
    port = free_port()
    cfg = support.load(support.write_config(tmp_path, kafka.bootstrap, [topic], metrics_port=port))
    stop = asyncio.Event()
    task = asyncio.create_task(daemon.serve(cfg, stop))
    want = {"frazil_records_consumed_total": 1500.0, "frazil_rows_committed_total": 1500.0,
            "frazil_partition_assignments_total": 1.0, "frazil_paused": 0.0}
    got: dict[str, float] = {}
    try:
        for _ in range(300):
            assert not task.done(), task
            try:
                got = await asyncio.to_thread(scrape, port)
            except OSError:
                got = {}
            # the lag gauges are set every couple of seconds, so the first commit can come before them
            lags = {k: v for k, v in got.items() if k.startswith("frazil_partition_lag_records")}
            if all(got.get(k) == v for k, v in want.items()) and len(lags) == 3:
                break
            await asyncio.sleep(0.2)
    finally:
        stop.set()
        await asyncio.wait_for(task, 60)
    assert {k: got.get(k) for k in want} == want
    assert got["frazil_commits_total{result=committed}"] >= 1 and got["frazil_commit_seconds_count"] >= 1
    assert got["frazil_memory_budget_bytes"] == cfg.memory_budget_bytes
    # per table (scrape drops the pipeline and table labels): records and bytes in, rows and file
    # bytes landed; file sizes and flush times; lag per partition
    table = cfg.table.name
    value_bytes = sum(len(support.record(i)) for i in range(1500))
    assert got["frazil_table_records_in_total"] == 1500
    assert got["frazil_table_value_bytes_in_total"] == value_bytes
    assert got["frazil_table_rows_landed_total"] == 1500
    files = support.catalog_of(cfg).load_table(table).inspect.files()
    assert got["frazil_table_file_bytes_landed_total"] == sum(files.column("file_size_in_bytes").to_pylist())
    assert got["frazil_data_file_bytes_count"] == files.num_rows
    assert got["frazil_flush_seconds_count"] >= 1
    lags = {k: v for k, v in got.items() if k.startswith("frazil_partition_lag_records")}
    assert len(lags) == 3 and all(v == 0 for v in lags.values()), lags


async def test_bad_json_stops_the_pipeline_and_names_the_record(kafka: KafkaBroker, tmp_path: Path) -> None:
    (topic,) = await new_topics(kafka, 1, 1)
    values = ([support.record(i) for i in range(50)] + [b'{"id": 50, "name": ']
              + [support.record(i) for i in range(51, 60)])
    await support.produce(kafka.bootstrap, topic, values, 1)
    cfg = support.load(support.write_config(tmp_path, kafka.bootstrap, [topic]))
    with pytest.raises(RecordDecodeError) as exc:
        await asyncio.wait_for(daemon.serve(cfg, asyncio.Event()), 60)
    assert (exc.value.topic, exc.value.partition, exc.value.offset) == (topic, 0, 50)
    assert f"topic={topic} partition=0 offset=50" in str(exc.value) and "not valid JSON" in str(exc.value)
    # nothing at or past the bad record is marked as committed: it has not vanished
    assert support.stored(support.catalog_of(cfg), cfg).get((topic, 0), 0) <= 50


async def test_a_failing_commit_moves_no_offset_anywhere(kafka: KafkaBroker, tmp_path: Path) -> None:
    """Rule 1 and rule 8: when every commit attempt fails, the pipeline keeps retrying only until
    outage_timeout_s, then stops loudly, and neither the table nor the consumer group has moved;
    a restart then lands everything once."""
    (topic,) = await new_topics(kafka, 1, 2)
    await support.produce(kafka.bootstrap, topic, (support.record(i) for i in range(500)), 2)
    cfg = support.load(support.write_config(tmp_path, kafka.bootstrap, [topic], outage_timeout=3))
    faults.arm("commit.before_catalog", "raise")
    with pytest.raises(OutageTimeout, match="have failed for"):
        await asyncio.wait_for(daemon.serve(cfg, asyncio.Event()), 120)
    ends = await support.end_offsets(kafka.bootstrap, [topic])
    assert support.stored(support.catalog_of(cfg), cfg) == {}
    assert set((await group_offsets(cfg, list(ends))).values()) == {None}
    faults.disarm()
    await support.run_until_committed(cfg, ends)
    support.assert_exactly_once(support.count_offsets(support.catalog_of(cfg), cfg.table.name), ends)


async def test_stop_commits_what_is_buffered(kafka: KafkaBroker, tmp_path: Path) -> None:
    """A graceful stop (SIGTERM) drains: buffered records are committed before exit, even when
    the commit interval has not come round."""
    (topic,) = await new_topics(kafka, 1, 1)
    await support.produce(kafka.bootstrap, topic, (support.record(i) for i in range(300)), 1)
    cfg = support.load(support.write_config(tmp_path, kafka.bootstrap, [topic], interval=3600))
    stop = asyncio.Event()
    task = asyncio.create_task(daemon.serve(cfg, stop))
    catalog = support.catalog_of(cfg)
    await asyncio.sleep(6)  # long enough to join the group and fetch; far short of the interval
    assert support.stored(catalog, cfg) == {}
    stop.set()
    await asyncio.wait_for(task, 60)
    assert support.stored(catalog, cfg) == {(topic, 0): 300}


async def recreate(kafka: KafkaBroker, topic: str, records: int) -> None:
    """Delete ``topic`` and create it again (one partition) with ``records`` records."""
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(bootstrap_servers=kafka.bootstrap)
    await admin.start()
    try:
        await admin.delete_topics([topic])
        for _ in range(50):  # deletion is asynchronous
            if topic not in await admin.list_topics():
                break
            await asyncio.sleep(0.2)
    finally:
        await admin.close()
    await support.create_topic(kafka.bootstrap, topic, 1)
    await support.produce(kafka.bootstrap, topic, (support.record(i) for i in range(records)), 1)


async def test_a_recreated_topic_is_told_by_its_id_and_nothing_of_it_is_read(kafka: KafkaBroker,
                                                                              tmp_path: Path) -> None:
    """The table keeps offsets up to 200 and the topic's id; the topic is deleted and created again
    with 300 records, so its log's bounds alone cannot tell (200 is inside them). Reading on would
    skip its first 200 records and land the rest under the old topic's offsets: frazil must stop,
    naming both ids, and leave the table as it was."""
    from frazil.errors import TopicMismatchError
    from frazil.iceberg import offsets

    (topic,) = await new_topics(kafka, 1, 1)
    await support.produce(kafka.bootstrap, topic, (support.record(i) for i in range(200)), 1)
    cfg = support.load(support.write_config(tmp_path, kafka.bootstrap, [topic]))
    await support.run_until_committed(cfg, {(topic, 0): 200})
    catalog = support.catalog_of(cfg)
    old = offsets.stored_topic_ids(catalog.load_table(cfg.table.name).properties, cfg.pipeline)
    assert set(old) == {topic} and len(old[topic]) == 22, old   # Kafka's text form of a topic id
    await recreate(kafka, topic, 300)
    with pytest.raises(TopicMismatchError, match=rf"read from topic {topic} when its id was {re.escape(old[topic])}, "
                                                 rf"and {topic} has id (?!{re.escape(old[topic])})\S+ now"):
        await asyncio.wait_for(daemon.serve(cfg, asyncio.Event()), 60)
    table = catalog.load_table(cfg.table.name)
    assert support.stored(catalog, cfg) == {(topic, 0): 200}
    assert offsets.stored_topic_ids(table.properties, cfg.pipeline) == old
    support.assert_exactly_once(support.count_offsets(catalog, cfg.table.name), {(topic, 0): 200})


async def test_a_recreated_topic_is_reported_not_skipped(kafka: KafkaBroker, tmp_path: Path) -> None:
    """The table remembers offsets up to 200 but no topic id (written before ids were kept); the
    topic is deleted and recreated with 20 records. Reading on would silently skip them (they sit
    below the stored offset): frazil must stop with an error that says what happened and what to do."""
    from frazil.errors import TopicMismatchError
    from frazil.iceberg import offsets

    (topic,) = await new_topics(kafka, 1, 1)
    await support.produce(kafka.bootstrap, topic, (support.record(i) for i in range(200)), 1)
    cfg = support.load(support.write_config(tmp_path, kafka.bootstrap, [topic]))
    await support.run_until_committed(cfg, {(topic, 0): 200})
    catalog = support.catalog_of(cfg)
    with catalog.load_table(cfg.table.name).transaction() as tx:
        tx.remove_properties(offsets.topic_ids_key(cfg.pipeline))
    await recreate(kafka, topic, 20)
    with pytest.raises(TopicMismatchError, match=rf"{topic}\[0\] table=200 log end=20"):
        await asyncio.wait_for(daemon.serve(cfg, asyncio.Event()), 60)
    assert support.stored(catalog, cfg) == {(topic, 0): 200}


async def delete_below(kafka: KafkaBroker, topic: str, offset: int) -> None:
    """What retention does: partition 0 of ``topic`` starts at ``offset`` from now on."""
    from aiokafka.admin import AIOKafkaAdminClient, RecordsToDelete

    admin = AIOKafkaAdminClient(bootstrap_servers=kafka.bootstrap)
    await admin.start()
    try:
        await admin.delete_records({TopicPartition(topic, 0): RecordsToDelete(offset)})
    finally:
        await admin.close()


async def test_records_deleted_by_retention_before_they_were_read_stop_the_pipeline_or_are_skipped_loudly(
        kafka: KafkaBroker, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The table has offsets 0-199; while frazil is stopped, 100 more records arrive and the
    topic's retention deletes 200-249 before frazil reads them. A restart must not jump to the
    log's start without a word: by default it stops naming the range, having read nothing; with
    ``on_retention_gap = "skip"`` it lands 250-299, logs the range at ERROR and counts it."""
    from frazil.errors import RetentionGapError

    (topic,) = await new_topics(kafka, 1, 1)
    await support.produce(kafka.bootstrap, topic, (support.record(i) for i in range(200)), 1)
    cfg = support.load(support.write_config(tmp_path, kafka.bootstrap, [topic]))
    await support.run_until_committed(cfg, {(topic, 0): 200})
    assert support.stored(support.catalog_of(cfg), cfg) == {(topic, 0): 200}
    await support.produce(kafka.bootstrap, topic, (support.record(i) for i in range(200, 300)), 1)
    await delete_below(kafka, topic, 250)
    with pytest.raises(RetentionGapError, match=rf"{topic}\[0\] offsets 200 to 249 \(50 record\(s\)\)"):
        await asyncio.wait_for(daemon.serve(cfg, asyncio.Event()), 60)
    assert support.stored(support.catalog_of(cfg), cfg) == {(topic, 0): 200}
    skipping = dataclasses.replace(cfg, kafka=dataclasses.replace(cfg.kafka, on_retention_gap="skip"))
    with caplog.at_level(logging.ERROR):
        await support.run_until_committed(skipping, {(topic, 0): 300})
    assert "SKIPPING records deleted by the topic's retention before frazil read them" in caplog.text
    assert f"{topic}[0] offsets 200 to 249 (50 record(s))" in caplog.text
    found = support.count_offsets(support.catalog_of(cfg), cfg.table.name)
    assert sorted(o for (_, _, o), n in found.items() if n == 1) == [*range(200), *range(250, 300)]
    assert all(n == 1 for n in found.values())


@pytest.mark.parametrize("policy", ["stop", "skip"])
async def test_a_position_retention_deletes_while_running_is_reported_not_reset(
        kafka: KafkaBroker, tmp_path: Path, policy: str) -> None:
    """Retention overtakes a running consumer (paused by backpressure, say): the broker refuses
    its next fetch. aiokafka would reset to the log's start silently; the source stops, or skips
    with the count, as configured."""
    from frazil.errors import RetentionGapError
    from frazil.ingest.source import KafkaSource

    (topic,) = await new_topics(kafka, 1, 1)
    await support.produce(kafka.bootstrap, topic, (support.record(i) for i in range(100)), 1)
    cfg = support.load(support.write_config(tmp_path, kafka.bootstrap, [topic]))
    lost: list[int] = []
    source = KafkaSource(dataclasses.replace(cfg.kafka, on_retention_gap=policy), on_lost=lost.append)
    positioned = asyncio.Event()

    async def assigned(tps: set[tuple[str, int]]) -> dict[tuple[str, int], int]:
        return {tp: 10 for tp in tps}

    async def revoked(tps: set[tuple[str, int]]) -> None:
        return None

    def on_positioned(tps: set[tuple[str, int]], stored: object) -> None:
        source.pause()   # nothing fetched from 10 until the log has moved on
        positioned.set()

    source.listen(on_assigned=assigned, on_positioned=on_positioned, on_revoked=revoked)
    await source.start()
    try:
        while not positioned.is_set():
            assert await source.poll(100) == {}
        await delete_below(kafka, topic, 60)
        source.resume()
        offsets: list[int] = []
        if policy == "stop":
            with pytest.raises(RetentionGapError, match=rf"{topic}\[0\] offsets 10 to 59 \(50 record\(s\)\)"):
                for _ in range(100):
                    await source.poll(200)
            return
        for _ in range(100):
            for chunks in (await source.poll(200)).values():
                offsets += [r.offset for chunk in chunks for r in chunk.records()]
            if len(offsets) >= 40:
                break
        assert offsets == list(range(60, 100)) and lost == [50]
    finally:
        await source.stop()


async def test_a_backlog_lands_once_caught_up_not_at_the_next_interval(kafka: KafkaBroker, tmp_path: Path,
                                                                       caplog: pytest.LogCaptureFixture) -> None:
    topics = await new_topics(kafka, 1, 3)
    await support.produce(kafka.bootstrap, topics[0], (support.record(i) for i in range(60_000)), 3)
    # a 10-minute interval, and a buffer far from its record and byte limits: only catching up can start a cycle
    cfg = support.load(support.write_config(tmp_path, kafka.bootstrap, topics, interval=600))
    ends = await support.end_offsets(kafka.bootstrap, topics)
    with caplog.at_level(logging.INFO):
        await support.run_until_committed(cfg, ends, timeout=120)
    assert "caught up with a backlog" in caplog.text
    support.assert_exactly_once(support.count_offsets(support.catalog_of(cfg), cfg.table.name), ends)
