"""Change streams for the keyed-table tests: a Debezium-shaped CDC stream (and an upsert stream
with tombstones) of inserts, updates and deletes of the same keys, each key always in one
partition; a reference computed independently from the topic itself (read back with a plain
consumer: the latest change per key by offset); and readers of the table by pyiceberg."""

from __future__ import annotations

import asyncio
import json
import random
import signal
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from pyiceberg.catalog import Catalog

import support

COLUMNS = """[
  { name = "id", type = "long", required = true },
  { name = "name", type = "string" },
  { name = "amount", type = "double" },
  { name = "version", type = "long" },
]"""

Row = tuple[str | None, float | None, int | None]   # name, amount, version


def config(tmp_path: Path, bootstrap: str, topic: str, pipeline: str, *, mode: str, extra_table: str = "",
           extra: str = "", interval: float = 0.5, catalog: tuple[str, dict[str, str]] | None = None) -> Path:
    """A pipeline writing ``db.<pipeline>`` keyed by ``id`` in ``mode``; ``extra_table``: more keys of
    ``[table]``; ``extra``: more sections; ``catalog``: its name and properties (default: SQLite in
    ``tmp_path``)."""
    if catalog is None:
        section = f"properties = {support.SQLITE_CATALOG}"
    else:
        props = ", ".join(f"{json.dumps(k)} = {json.dumps(v)}" for k, v in catalog[1].items())
        section = f'name = "{catalog[0]}"\nproperties = {{ {props} }}'

    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "frazil.toml"
    path.write_text(f"""\
[pipeline]
name = "{pipeline}"
commit_interval_s = {interval}

[kafka]
bootstrap_servers = "{bootstrap}"
topics = ["{topic}"]
session_timeout_ms = 2000
heartbeat_interval_ms = 500

[catalog]
{section}

[table]
name = "db.{pipeline.replace('-', '_')}"
mode = "{mode}"
identifier_columns = ["id"]
columns = {COLUMNS}
{extra_table}

[maintenance]
enabled = false
{extra}""")
    return path


def run_until_committed(path: Path, ends: dict[tuple[str, int], int], log: Path, tables: Sequence[str] = ()) -> None:
    """``frazil run`` as its own process (it stops its Spark session, if any, on exit) until the
    table's (or ``tables``') offsets reach ``ends``, then a clean stop."""
    cfg = support.load(path)
    catalog = support.catalog_of(cfg)
    with open(log, "ab") as out:
        proc = subprocess.Popen([sys.executable, "-m", "frazil.cli", "run", "--config", str(path)], stdout=out,
                                stderr=subprocess.STDOUT)
    try:
        support.wait_until_committed(catalog, cfg, ends, timeout=120, alive=lambda: proc.poll() is None,
                                     tables=tables)
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0, log.read_text()[-3000:]


def row(key: int, version: int, rng: random.Random) -> dict[str, object]:
    return {"id": key, "name": f"k{key}v{version}", "amount": round(rng.random() * 1000, 2), "version": version}


def debezium_stream(keys: int, changes: int, seed: int, *,
                    envelope_every: int = 7) -> Iterator[tuple[int, bytes, bytes | None]]:
    """(key, Kafka key, value) of a Debezium-shaped stream: per key a create (``c``, some ``r`` as a
    snapshot read), updates (``u``, ``before`` the old row), deletes (``d``, the key in ``before``)
    each followed by Debezium's tombstone, and creates again after a delete. Every
    ``envelope_every``-th value is wrapped in the JSON converter's schema envelope."""
    rng = random.Random(seed)
    live: dict[int, dict[str, object]] = {}
    version = 0
    for n in range(changes):
        key = rng.randrange(keys)
        version += 1
        kafka_key = json.dumps({"id": key}).encode()
        old = live.get(key)
        if old is None:
            op, before, after = ("r" if n < keys // 4 else "c"), None, row(key, version, rng)
        elif rng.random() < 0.2:
            op, before, after = "d", old, None
        else:
            op, before, after = "u", old, row(key, version, rng)
        if after is None:
            live.pop(key)
        else:
            live[key] = after
        value: dict[str, object] = {"before": before, "after": after, "op": op, "ts_ms": 1_700_000_000_000 + n,
                                    "source": {"connector": "postgresql", "db": "shop", "table": "items", "lsn": n}}
        if n % envelope_every == 0:
            value = {"schema": {"type": "struct", "name": "shop.items.Envelope"}, "payload": value}
        yield key, kafka_key, json.dumps(value).encode()
        if op == "d":
            yield key, kafka_key, None   # Debezium's tombstone, for log compaction


def note_added(change: dict[str, Any], key: int, n: int, since: int,
               expected: dict[int, tuple[object, ...]]) -> None:
    """Change ``n`` (a Debezium envelope's body) of a source table that gains column ``note`` at
    change ``since`` (`ALTER TABLE ... ADD COLUMN`): its rows get the column from then on, and
    ``expected`` (id: name, version, note) follows it."""
    if n >= since:
        for part in ("before", "after"):
            if change[part] is not None:
                change[part]["note"] = f"note{n}"
    if change["op"] == "d":
        expected.pop(key, None)
    else:
        row = change["after"]
        expected[key] = (row["name"], row["version"], row.get("note"))


def upsert_stream(keys: int, changes: int, seed: int) -> Iterator[tuple[int, bytes, bytes | None]]:
    """(key, Kafka key, value) of an upsert stream: every value the whole new row; a tombstone (the
    key as plain text, the value null) deletes the key."""
    rng = random.Random(seed)
    for n in range(changes):
        key = rng.randrange(keys)
        if rng.random() < 0.15:
            yield key, str(key).encode(), None
        else:
            yield key, str(key).encode(), json.dumps(row(key, n + 1, rng)).encode()


async def produce(bootstrap: str, topic: str, stream: Iterator[tuple[int, bytes, bytes | None]],
                  partitions: int) -> dict[tuple[str, int], int]:
    """Each change to partition ``key % partitions`` (one partition per key); the end offsets."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=20, acks="all", enable_idempotence=True)
    await producer.start()
    try:
        futures = [await producer.send(topic, value, key=kafka_key, partition=key % partitions)
                   for key, kafka_key, value in stream]
        await asyncio.gather(*futures)
    finally:
        await producer.stop()
    return await support.end_offsets(bootstrap, [topic])


async def reference(bootstrap: str, topic: str, partitions: int, *, mode: str) -> dict[int, Row]:
    """The table the topic should give, computed from the topic itself, independently of frazil:
    every record read back, the latest change per key by offset (each key is in one partition)."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset="earliest")
    await consumer.start()
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    consumer.assign(tps)
    ends = await consumer.end_offsets(tps)
    latest: dict[int, tuple[tuple[int, int], Row | None]] = {}
    try:
        await consumer.seek_to_beginning(*tps)
        while [tp for tp in tps if await consumer.position(tp) < ends[tp]]:
            for tp, records in (await consumer.getmany(timeout_ms=1000)).items():
                for r in records:
                    change = _change(r.key, r.value, mode)
                    if change is None:
                        continue
                    key, new = change
                    at = (tp.partition, r.offset)
                    if key not in latest or latest[key][0] < at:
                        latest[key] = (at, new)
    finally:
        await consumer.stop()
    return {k: v for k, (_, v) in latest.items() if v is not None}


def _change(key: bytes, value: bytes | None, mode: str) -> tuple[int, Row | None] | None:
    """(key, new row or None for a delete) of one record; None when it changes nothing."""
    if mode == "upsert":
        if value is None:
            return int(key), None
        v = json.loads(value)
        return v["id"], (v["name"], v["amount"], v["version"])
    if value is None:
        return None   # cdc: Debezium's tombstone follows its delete, skipped
    v = json.loads(value)
    v = v.get("payload", v)
    if v["op"] == "d":
        return v["before"]["id"], None
    a = v["after"]
    return a["id"], (a["name"], a["amount"], a["version"])


def table_rows(catalog: Catalog, name: str,
               columns: tuple[str, ...] = ("name", "amount", "version")) -> dict[int, tuple[object, ...]]:
    """The table as pyiceberg reads it (position deletes applied), by id: each row's ``columns``;
    fails on a key found twice."""
    data = catalog.load_table(name).scan(selected_fields=("id", *columns)).to_arrow()
    ids = data.column("id").to_pylist()
    dup = {i for i in ids if ids.count(i) > 1} if len(set(ids)) < len(ids) else set()
    assert not dup, f"{len(dup)} key(s) twice in {name}, e.g. {sorted(dup)[:5]}"
    return dict(zip(ids, zip(*(data.column(c).to_pylist() for c in columns), strict=True), strict=True))


def assert_same(found: dict[int, tuple[object, ...]], expected: dict[int, tuple[object, ...]], engine: str) -> None:
    missing = sorted(set(expected) - set(found))
    extra = sorted(set(found) - set(expected))
    wrong = sorted(k for k in set(found) & set(expected) if found[k] != expected[k])
    assert not missing and not extra and not wrong, (
        f"{engine}: {len(missing)} key(s) missing (e.g. {missing[:5]}), {len(extra)} deleted key(s) present "
        f"(e.g. {extra[:5]}), {len(wrong)} stale (e.g. {[(k, found[k], expected[k]) for k in wrong[:3]]})")
