"""Raw fetches against the real broker: the native reader of record batches gives exactly what
aiokafka's own reader gives (offsets, timestamps, keys, values, headers) for every codec from
two real producers, transactions committed and aborted, compacted topics, fetches that start
inside a batch or end inside one, and refuses a damaged batch; the hook stays on the aiokafka it
was written for, and seeks and pauses with a fetch waiting are honoured."""

from __future__ import annotations

import asyncio
import itertools
import json
import time
import tomllib
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

import support
from frazil.errors import CorruptBatchError
from frazil.kafka import fetch
from frazil.kafka.clients import stop_client
from frazil_dev import kafka_tools
from frazil_dev.kafka_broker import KafkaBroker

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]
_ids = itertools.count()
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
Row = tuple[int, int, int, bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...]]
_partitions: dict[str, int] = {}   # by topic made here


async def new_topic(kafka: KafkaBroker, partitions: int = 1, configs: dict[str, str] | None = None) -> str:
    name = f"raw{next(_ids)}"
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka.bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(name, partitions, 1, topic_configs=configs or {})])
    finally:
        await admin.close()
    _partitions[name] = partitions
    return name


def consumer(kafka: KafkaBroker, *, raw: bool, **kw: Any) -> AIOKafkaConsumer:
    if raw:
        fetch.install()
        kw["key_deserializer"] = fetch.RAW
    return AIOKafkaConsumer(bootstrap_servers=kafka.bootstrap, enable_auto_commit=False, auto_offset_reset="earliest",
                            isolation_level=kw.pop("isolation_level", "read_committed"), **kw)


def rows_of(item: Any) -> list[Row]:
    """(partition, offset, timestamp, key, value, headers) of a chunk's or a ConsumerRecord's records."""
    if isinstance(item, fetch.Chunk):
        return [(r.partition, r.offset, r.timestamp, r.key, r.value, r.headers) for r in item.records()]
    return [(item.partition, item.offset, item.timestamp, item.key, item.value, tuple(item.headers))]


async def read_all(kafka: KafkaBroker, topic: str, *, raw: bool, ends: dict[int, int] | None = None,
                   positions: dict[int, int] | None = None, **kw: Any) -> list[Row]:
    """Every record of ``topic`` up to its end offsets, by a raw or a plain aiokafka consumer;
    ``positions`` gets where each partition's position ended."""
    c = consumer(kafka, raw=raw, **kw)
    await c.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(_partitions[topic])]
        c.assign(tps)
        stop = ends if ends is not None else {tp.partition: o for tp, o in (await c.end_offsets(tps)).items()}
        out: list[Row] = []
        deadline = time.monotonic() + 60
        while [tp for tp in tps if await c.position(tp) < stop[tp.partition]]:
            assert time.monotonic() < deadline, f"stuck at {[await c.position(tp) for tp in tps]} of {stop}"
            for items in (await c.getmany(timeout_ms=500)).values():
                for item in items:
                    out += rows_of(item)
        if positions is not None:
            positions.update({tp.partition: await c.position(tp) for tp in tps})
        return sorted(out)
    finally:
        await stop_client(c)


def payload_file(tmp_path: Path, n: int = 400) -> Path:
    """JSON lines of several sizes (compressible, and some large enough to span blocks)."""
    path = tmp_path / "payload.txt"
    path.write_text("\n".join(json.dumps({"id": i, "pad": "x" * (i * 37 % 900), "n": i * 0.25}) for i in range(n)))
    return path


async def test_the_hook_is_pinned_to_its_aiokafka_and_only_raw_consumers_get_chunks(kafka: KafkaBroker) -> None:
    fetch.check()   # the installed aiokafka is the one the hook reads
    pinned = tomllib.loads(Path(__file__).parents[2].joinpath("pyproject.toml").read_text())["project"]["dependencies"]
    assert f"aiokafka=={fetch.AIOKAFKA_VERSION}" in pinned
    topic = await new_topic(kafka)
    await support.produce(kafka.bootstrap, topic, (support.record(i) for i in range(50)), 1)
    fetch.install()
    assert fetch.installed()
    raw, plain = consumer(kafka, raw=True), consumer(kafka, raw=False)
    await raw.start()
    await plain.start()
    try:
        for c in (raw, plain):
            c.assign([TopicPartition(topic, 0)])
        got_raw = await raw.getmany(timeout_ms=5000)
        got_plain = await plain.getmany(timeout_ms=5000)
        items = got_raw[TopicPartition(topic, 0)]
        assert all(isinstance(i, fetch.Chunk) for i in items)   # the hook is active
        # and only for raw consumers
        assert not any(isinstance(i, fetch.Chunk) for i in got_plain[TopicPartition(topic, 0)])
        assert [r for i in items for r in rows_of(i)] == [r for i in got_plain[TopicPartition(topic, 0)]
                                                          for r in rows_of(i)]
        assert await raw.position(TopicPartition(topic, 0)) == 50
    finally:
        await stop_client(raw)
        await stop_client(plain)


@pytest.mark.parametrize("codec", CODECS)
async def test_every_codec_from_the_java_producer_reads_back_as_aiokafka_reads_it(kafka: KafkaBroker, tmp_path: Path,
                                                                                  codec: str) -> None:
    topic = await new_topic(kafka, partitions=2)
    await asyncio.to_thread(kafka_tools.produce, kafka.bootstrap, topic, payload_file(tmp_path), 3000,
                            props={"compression.type": codec, "linger.ms": "20", "batch.size": "65536"})
    raw = await read_all(kafka, topic, raw=True)
    assert len(raw) == 3000
    assert raw == await read_all(kafka, topic, raw=False)


@pytest.mark.parametrize("codec", CODECS)
async def test_every_codec_from_aiokafka_with_keys_nulls_and_headers_reads_back_as_aiokafka_reads_it(
        kafka: KafkaBroker, codec: str) -> None:
    topic = await new_topic(kafka, partitions=2)
    producer = AIOKafkaProducer(bootstrap_servers=kafka.bootstrap, compression_type=None if codec == "none" else codec,
                                linger_ms=20)
    await producer.start()
    try:
        for i in range(2000):
            key = None if i % 5 == 0 and i % 11 else f"k{i % 37}".encode()   # (aiokafka sends no record without both)
            value = None if i % 11 == 0 else json.dumps({"id": i, "text": "é✓" * (i % 9)}).encode()
            headers = [("trace", f"t{i}".encode()), ("empty", b""), ("null", None)][: i % 4]
            await producer.send(topic, value, key=key, headers=headers, partition=i % 2)
        await producer.flush()
    finally:
        await producer.stop()
    raw = await read_all(kafka, topic, raw=True)
    assert len(raw) == 2000
    assert sum(1 for r in raw if r[4] is None) == len(range(0, 2000, 11))
    assert raw == await read_all(kafka, topic, raw=False)


async def test_read_committed_skips_aborted_transactions_and_control_batches(kafka: KafkaBroker) -> None:
    topic = await new_topic(kafka)
    tp = TopicPartition(topic, 0)
    producer = AIOKafkaProducer(bootstrap_servers=kafka.bootstrap, transactional_id=f"{topic}-txn")
    plain = AIOKafkaProducer(bootstrap_servers=kafka.bootstrap)
    await producer.start()
    await plain.start()
    try:
        for n, outcome in enumerate(["commit", "abort", "commit", "abort"]):
            await producer.begin_transaction()
            for i in range(100):
                await producer.send(topic, json.dumps({"txn": n, "i": i, "outcome": outcome}).encode(), partition=0)
                if i % 25 == 0:   # a non-transactional producer interleaves with the open transaction
                    await plain.send_and_wait(topic, json.dumps({"plain": n, "i": i}).encode(), partition=0)
            await (producer.commit_transaction() if outcome == "commit" else producer.abort_transaction())
    finally:
        await producer.stop()
        await stop_client(plain)
    positions: dict[int, int] = {}
    raw = await read_all(kafka, topic, raw=True, positions=positions)
    values = [json.loads(r[4]) for r in raw if r[4] is not None]
    assert sum(1 for v in values if "txn" in v) == 200 and all(v.get("outcome", "commit") == "commit" for v in values)
    assert sum(1 for v in values if "plain" in v) == 16
    assert raw == await read_all(kafka, topic, raw=False)
    # the position passed the last abort marker: the whole log was read, nothing returned for it
    c = consumer(kafka, raw=False)
    await c.start()
    try:
        assert positions[0] == (await c.end_offsets([tp]))[tp]
    finally:
        await stop_client(c)
    # read_uncommitted sees the aborted ones too, as aiokafka does
    uncommitted = await read_all(kafka, topic, raw=True, isolation_level="read_uncommitted")
    assert len(uncommitted) == 416
    assert uncommitted == await read_all(kafka, topic, raw=False, isolation_level="read_uncommitted")


async def test_a_fetch_of_an_aborted_transaction_only_moves_the_position_and_returns_nothing(
        kafka: KafkaBroker) -> None:
    topic = await new_topic(kafka)
    tp = TopicPartition(topic, 0)
    producer = AIOKafkaProducer(bootstrap_servers=kafka.bootstrap, transactional_id=f"{topic}-txn")
    await producer.start()
    try:
        await producer.begin_transaction()
        for _ in range(50):
            await producer.send(topic, b'{"aborted": true}', partition=0)
        await producer.abort_transaction()
    finally:
        await producer.stop()
    c = consumer(kafka, raw=True)
    await c.start()
    try:
        c.assign([tp])
        end = (await c.end_offsets([tp]))[tp]
        assert end == 51   # 50 records and the abort marker
        got: list[Any] = []
        deadline = time.monotonic() + 30
        while await c.position(tp) < end:
            assert time.monotonic() < deadline
            got += [i for items in (await c.getmany(timeout_ms=500)).values() for i in items]
        assert got == []
    finally:
        await stop_client(c)


async def test_a_compacted_topic_with_offset_gaps_and_tombstones_reads_back_as_aiokafka_reads_it(
        kafka: KafkaBroker) -> None:
    topic = await new_topic(kafka, configs={"cleanup.policy": "compact", "segment.ms": "100",
                                            "min.cleanable.dirty.ratio": "0.001", "min.compaction.lag.ms": "0",
                                            "delete.retention.ms": "3600000"})
    producer = AIOKafkaProducer(bootstrap_servers=kafka.bootstrap, compression_type="lz4", linger_ms=5)
    await producer.start()
    try:
        for round_ in range(6):
            for k in range(40) if round_ == 0 else range(0, 40, 2):   # odd keys keep their first value: gaps
                value = None if (k % 7 == 0 and round_ == 5) else json.dumps({"k": k, "round": round_}).encode()
                await producer.send(topic, value, key=f"key{k}".encode(), partition=0)
            await producer.flush()
            await asyncio.sleep(0.3)   # the active segment rolls (segment.ms) on the next record
    finally:
        await producer.stop()
    # wait for the log cleaner (every 15 s) to remove overwritten records: offsets with gaps
    deadline = time.monotonic() + 90
    while True:
        plain = await read_all(kafka, topic, raw=False)
        if len(plain) < 140:
            break
        assert time.monotonic() < deadline, "the log cleaner did not compact the topic"
        await asyncio.sleep(3)
    offsets = [r[1] for r in plain]
    # gaps; neighbours, so the second is one shorter
    assert any(b - a > 1 for a, b in zip(offsets, offsets[1:], strict=False))
    raw = await read_all(kafka, topic, raw=True)
    assert raw == plain
    assert any(r[4] is None for r in raw)   # tombstones are kept as null values


async def test_a_damaged_batch_is_a_clear_error_and_never_data(kafka: KafkaBroker) -> None:
    topic = await new_topic(kafka)
    tp = TopicPartition(topic, 0)
    await support.produce(kafka.bootstrap, topic, (support.record(i) for i in range(20)), 1)
    segment = next(kafka.workdir.rglob(f"{topic}-0/*.log"))
    data = bytearray(segment.read_bytes())
    at = data.find(b'"name": "n7"')
    assert at > 0
    with segment.open("r+b") as f:   # one flipped bit in a value, on the broker's disk
        f.seek(at + 10)
        f.write(bytes([data[at + 10] ^ 0x01]))
    c = consumer(kafka, raw=True)
    await c.start()
    try:
        c.assign([tp])
        with pytest.raises(CorruptBatchError) as raised:
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                assert not await c.getmany(timeout_ms=500)
        err = raised.value
        assert (err.topic, err.partition) == (topic, 0) and err.offset <= 7
        assert "CRC-32C" in str(err) and f"{topic}[0]" in str(err)
        assert await c.position(tp) == err.offset   # nothing of it was taken
    finally:
        await stop_client(c)


async def test_fetches_that_start_or_end_inside_a_batch_give_every_record_once(kafka: KafkaBroker) -> None:
    topic = await new_topic(kafka)
    tp = TopicPartition(topic, 0)
    producer = AIOKafkaProducer(bootstrap_servers=kafka.bootstrap, compression_type="zstd", linger_ms=50,
                                max_batch_size=16384)
    await producer.start()
    try:
        for i in range(1500):
            await producer.send(topic, json.dumps({"id": i, "pad": "y" * (i % 300)}).encode(), partition=0)
        await producer.flush()
    finally:
        await producer.stop()
    # a fetch size smaller than a batch: every fetch ends inside one (the broker still returns the
    # first whole batch), and the cut batch comes whole in the next fetch
    small = await read_all(kafka, topic, raw=True, max_partition_fetch_bytes=3000)
    assert [r[1] for r in small] == list(range(1500))
    assert small == await read_all(kafka, topic, raw=False)
    # a seek into the middle of a compressed batch: the records before it are not returned
    c = consumer(kafka, raw=True)
    await c.start()
    try:
        c.assign([tp])
        c.seek(tp, 737)
        first = await c.getmany(timeout_ms=5000)
        assert rows_of(first[tp][0])[0][1] == 737
    finally:
        await stop_client(c)


async def wait_fetched(c: AIOKafkaConsumer, tp: TopicPartition) -> None:
    """Until the consumer's fetcher holds records of ``tp`` that getmany has not returned yet."""
    deadline = time.monotonic() + 20
    while tp not in c._fetcher._records:
        assert time.monotonic() < deadline
        await asyncio.sleep(0.05)


async def test_a_seek_or_a_pause_while_a_fetch_waits_is_honoured(kafka: KafkaBroker) -> None:
    topic = await new_topic(kafka)
    tp = TopicPartition(topic, 0)
    await support.produce(kafka.bootstrap, topic, (support.record(i) for i in range(300)), 1)
    c = consumer(kafka, raw=True)
    await c.start()
    try:
        c.assign([tp])
        c.seek(tp, 0)
        await wait_fetched(c, tp)      # records from offset 0 are waiting
        c.seek(tp, 200)
        got = await c.getmany(timeout_ms=5000)
        assert rows_of(got[tp][0])[0][1] == 200   # the waiting fetch from 0 was dropped
        c.seek(tp, 10)
        await wait_fetched(c, tp)
        c.pause(tp)
        assert await c.getmany(timeout_ms=300) == {}   # paused: nothing, and the position stays
        assert await c.position(tp) == 10
        c.resume(tp)
        rows: list[Row] = []
        while await c.position(tp) < 300:
            rows += [r for items in (await c.getmany(timeout_ms=500)).values() for i in items for r in rows_of(i)]
        assert [r[1] for r in rows] == list(range(10, 300))
    finally:
        await stop_client(c)


async def test_the_pipeline_reads_a_java_producers_transactional_zstd_topic_exactly_once(kafka: KafkaBroker,
                                                                                      tmp_path: Path) -> None:
    topic = await new_topic(kafka, partitions=3)
    records = tmp_path / "records.txt"
    records.write_text("\n".join(support.record(i).decode() for i in range(500)))
    await asyncio.to_thread(kafka_tools.produce, kafka.bootstrap, topic, records, 6000,
                            transactional_id=f"{topic}-java", props={"compression.type": "zstd", "linger.ms": "10"})
    cfg = support.load(support.write_config(tmp_path, kafka.bootstrap, [topic]))
    ends = await support.end_offsets(kafka.bootstrap, [topic])
    # the last transaction's marker is the last offset of each partition: a fetch that carries the
    # last records carries it too (read_committed sees them only once it is written), and the
    # table's offsets pass it
    await support.run_until_committed(cfg, ends)
    catalog = support.catalog_of(cfg)
    counts = support.count_offsets(catalog, cfg.table.name)
    # every record once; transaction markers take offsets but are no records
    assert sum(counts.values()) == 6000 and max(counts.values()) == 1
    assert support.stored(catalog, cfg) == ends
