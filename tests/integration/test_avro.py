"""Avro values in the Confluent wire format through a real schema registry (Apicurio), the real
broker and catalog: two writer-schema versions (the second adds a nested field and widens an
int to a long) land as one evolved table, with the process SIGKILLed after a commit; records of
a schema id the registry does not have, records not in the wire format, and broken datums go to
the dead-letter topic. Every good record is in the table once with its values as sent (v1 rows
NULL in v2's new columns), every bad one in the dead-letter topic once, saying why."""

from __future__ import annotations

import asyncio
import io
import json
import signal
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import fastavro
import pytest
from aiokafka import AIOKafkaProducer
from pyiceberg.types import IntegerType, LongType, StructType
from test_dead_letters import run

import support
from frazil_dev import protowire as pw
from frazil_dev.kafka_broker import KafkaBroker
from frazil_dev.schema_registry import SchemaRegistry

pytestmark = [pytest.mark.integration]

MODES = {"single": "", "distributed": '[coordination]\nmode = "distributed"\ncommit_timeout_s = 5\n'}
RECORDS = 2000
PARTITIONS = 2
UNKNOWN_ID = 987654

V1 = {"type": "record", "name": "Event", "namespace": "shop", "fields": [
    {"name": "id", "type": "long"},
    {"name": "name", "type": ["null", "string"], "default": None},
    {"name": "amount", "type": "double"},
    {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "count", "type": "int"},
]}
V2 = {**V1, "fields": [*V1["fields"][:4],
                       {"name": "count", "type": "long"},
                       {"name": "geo", "type": ["null", {"type": "record", "name": "Geo", "fields": [
                           {"name": "city", "type": "string"}, {"name": "zone", "type": "int"}]}], "default": None}]}


# record keys: an Avro record and a Protobuf message, each with the shop's id at shop.id
KEY_AVRO = {"type": "record", "name": "Key", "namespace": "shop", "fields": [
    {"name": "shop", "type": {"type": "record", "name": "Shop", "fields": [{"name": "id", "type": "long"}]}},
    {"name": "region", "type": "string"}]}
KEY_PROTO = 'syntax = "proto3";\npackage shop;\nmessage Key { Shop shop = 1; }\nmessage Shop { int64 id = 1; }\n'

def kind(i: int) -> str:
    if i % 11 == 4:
        return ("unknown-id", "not-framed", "broken")[(i // 11) % 3]
    return "v1" if i < RECORDS // 2 else "v2"


def row(i: int) -> dict[str, object]:
    out: dict[str, object] = {"id": i, "name": None if i % 5 == 0 else f"n{i}", "amount": i * 0.25,
                              "at": datetime(2026, 11, 1, tzinfo=UTC) + timedelta(milliseconds=i * 1001)}
    if kind(i) == "v2":
        out["count"] = 3_000_000_000 + i
        out["geo"] = None if i % 3 == 0 else {"city": f"c{i % 7}", "zone": i % 4}
    else:
        out["count"] = i
    return out


def datum(schema: dict[str, object], record: dict[str, object]) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), record)
    return out.getvalue()


def value_of(i: int, ids: dict[str, int]) -> bytes:
    k = kind(i)
    if k == "unknown-id":
        return b"\x00" + UNKNOWN_ID.to_bytes(4, "big") + datum(V1, {**row(i), "count": 1})
    if k == "not-framed":
        return b'{"id": %d}' % i
    if k == "broken":
        return b"\x00" + ids["v1"].to_bytes(4, "big") + b"\x02"   # id 1, then the datum stops
    return b"\x00" + ids[k].to_bytes(4, "big") + datum(V1 if k == "v1" else V2, row(i))


WHY = {"unknown-id": "unknown schema id 987654", "not-framed": "not in the Confluent wire format",
       "broken": "not a valid Avro datum of writer schema id"}


async def produce(bootstrap: str, topic: str, ids: dict[str, int], numbers: range) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True, linger_ms=20)
    await producer.start()
    try:
        futures = [await producer.send(topic, value_of(i, ids), key=f"k{i}".encode(), partition=i % PARTITIONS)
                   for i in numbers]
        await asyncio.gather(*futures)
    finally:
        await producer.stop()


@pytest.mark.parametrize("mode", list(MODES))
def test_two_writer_schemas_land_as_one_evolved_table_and_bad_values_go_to_the_dead_letter_topic(
        kafka: KafkaBroker, schema_registry: SchemaRegistry, tmp_path: Path, mode: str) -> None:
    topic = f"avro-{mode}"
    ids = {"v1": schema_registry.register(f"{topic}-value", V1), "v2": schema_registry.register(f"{topic}-value", V2)}
    assert ids["v1"] != ids["v2"]
    asyncio.run(support.create_topic(kafka.bootstrap, topic, PARTITIONS))
    asyncio.run(produce(kafka.bootstrap, topic, ids, range(RECORDS // 2)))   # v1 (and bad ones)
    extra = (MODES[mode] + '\n[values]\nformat = "avro-confluent"\n\n'
             f'[schema_registry]\nurl = "{schema_registry.url}"\n')
    config = support.write_config(tmp_path, kafka.bootstrap, [topic], pipeline=topic, interval=0.5, extra=extra)
    text = config.read_text().replace("[kafka]", 'on_bad_record = "dead_letter"\n\n[kafka]', 1)
    config.write_text(text.replace('name = "db.events"\n', 'name = "db.events"\nunknown_fields = "evolve"\n', 1))
    cfg = support.load(config)
    assert cfg.values.format == "avro-confluent" and cfg.table.unknown_fields == "evolve"
    log = tmp_path / "frazil.log"

    # killed after its first commit landed, before its bad records went out
    proc = run(config, log, faults="commit.after_catalog=kill")
    assert proc.wait(timeout=120) == -signal.SIGKILL, log.read_text()[-3000:]
    asyncio.run(produce(kafka.bootstrap, topic, ids, range(RECORDS // 2, RECORDS)))   # v2 (and bad ones)
    ends = asyncio.run(support.end_offsets(kafka.bootstrap, [topic]))
    proc = run(config, log)
    bad = {(topic, i % PARTITIONS, i // PARTITIONS): i for i in range(RECORDS) if kind(i) not in ("v1", "v2")}

    def all_sent() -> None:
        sent = len(asyncio.run(support.dead_letters(kafka.bootstrap, cfg.dead_letter_topic)))
        assert sent >= len(bad), f"{sent} of {len(bad)} bad records in the dead-letter topic"

    try:
        support.wait_until_committed(support.catalog_of(cfg), cfg, ends, timeout=120, alive=lambda: proc.poll() is None)
        support.wait_for(all_sent, proc, log, timeout=60)
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0, log.read_text()[-3000:]

    table = support.catalog_of(cfg).load_table(cfg.table.name)
    schema = table.schema()
    assert isinstance(schema.find_field("count").field_type, LongType), schema   # added as int by v1, widened by v2
    geo = schema.find_field("geo").field_type
    assert isinstance(geo, StructType) and isinstance(schema.find_field("geo.zone").field_type, IntegerType), schema
    data = table.scan().to_arrow()
    counts = Counter(zip(data.column("_kafka_topic").to_pylist(), data.column("_kafka_partition").to_pylist(),
                         data.column("_kafka_offset").to_pylist(), strict=True))
    good = {(topic, i % PARTITIONS, i // PARTITIONS) for i in range(RECORDS) if kind(i) in ("v1", "v2")}
    assert {k for k, n in counts.items() if n > 1} == set(), "duplicated in the table"
    assert set(counts) == good, f"lost {sorted(good - set(counts))[:5]}, unexpected {sorted(set(counts) - good)[:5]}"
    for got in data.to_pylist():   # every value as sent; v1 rows NULL in v2's new column
        i = got["id"]
        want = row(i)
        assert (got["name"], got["amount"], got["at"], got["count"]) == (want["name"], want["amount"], want["at"],
                                                                         want["count"]), got
        assert got["geo"] == want.get("geo"), got

    letters = asyncio.run(support.dead_letters(kafka.bootstrap, cfg.dead_letter_topic))
    seen: Counter[tuple[str, int, int]] = Counter()
    for letter in letters:
        where, h = support.source_of(letter)
        seen[where] += 1
        i = bad[where]
        assert (letter.key, letter.value) == (f"k{i}".encode(), value_of(i, ids)), where
        assert WHY[kind(i)] in h["frazil.error"], (kind(i), h["frazil.error"])
    assert {k for k, n in seen.items() if n > 1} == set(), "duplicated in the dead-letter topic"
    assert set(seen) == set(bad), f"missing {sorted(set(bad) - set(seen))[:5]}"
    text = log.read_text()
    assert "schema evolved" in text or "changed by another writer" in text


def test_plain_avro_values_with_a_schema_file_land_as_sent(kafka: KafkaBroker, tmp_path: Path) -> None:
    """``values.format = "avro"``: every value is one datum of the schema file's schema (no
    registry, no framing); a value that is not one is a bad record."""
    topic = "avro-plain"
    n = 300
    asyncio.run(support.create_topic(kafka.bootstrap, topic, PARTITIONS))
    values = [b"\x02" if i % 50 == 7 else datum(V1, row(i)) for i in range(n)]   # \x02: a long, then nothing
    asyncio.run(support.produce(kafka.bootstrap, topic, values, PARTITIONS))
    (tmp_path / "event.avsc").write_text(json.dumps(V1))
    extra = '\n[values]\nformat = "avro"\nschema_file = "event.avsc"\n'
    config = support.write_config(tmp_path, kafka.bootstrap, [topic], pipeline=topic, interval=0.5, extra=extra)
    text = config.read_text().replace("[kafka]", 'on_bad_record = "dead_letter"\n\n[kafka]', 1)
    config.write_text(text.replace('  { name = "at", type = "timestamptz" },\n',
                                   '  { name = "at", type = "timestamptz" },\n  { name = "count", type = "int" },\n'))
    cfg = support.load(config)
    assert cfg.values.format == "avro"
    log = tmp_path / "frazil.log"
    proc = run(config, log)
    bad = {(topic, i % PARTITIONS, i // PARTITIONS) for i in range(n) if i % 50 == 7}

    def all_sent() -> None:
        assert len(asyncio.run(support.dead_letters(kafka.bootstrap, cfg.dead_letter_topic))) >= len(bad)

    try:
        support.wait_for(all_sent, proc, log, timeout=90)
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0, log.read_text()[-3000:]
    data = support.catalog_of(cfg).load_table(cfg.table.name).scan().to_arrow()
    got = {(r["_kafka_partition"], r["_kafka_offset"]): r for r in data.to_pylist()}
    want = {(i % PARTITIONS, i // PARTITIONS): row(i) for i in range(n) if i % 50 != 7}
    assert sorted(got) == sorted(want) and data.num_rows == len(want)
    for key, r in got.items():
        assert (r["id"], r["name"], r["amount"], r["at"], r["count"]) == tuple(want[key][k] for k in (
            "id", "name", "amount", "at", "count")), r
    letters = asyncio.run(support.dead_letters(kafka.bootstrap, cfg.dead_letter_topic))
    sources = {support.source_of(letter)[0] for letter in letters}
    assert sources == bad and len(letters) == len(bad)
    assert all("configured writer schema" in support.source_of(letter)[1]["frazil.error"] for letter in letters)



@pytest.mark.asyncio
async def test_avro_values_fill_a_table_made_from_their_writer_schema_with_header_and_key_columns(
        kafka: KafkaBroker, schema_registry: SchemaRegistry, tmp_path: Path) -> None:
    """A table without declared columns, made from the writer schema, gains the header and key
    columns after the writer's fields; every record lands with its header and key field, whether
    its key is an Avro datum or a Protobuf message through the registry (each key schema fetched
    by its id) or JSON; a key that is not JSON, and one naming a schema id the registry lacks,
    are dead letters naming the key column."""
    topic = "avro-headed"
    n, bad = 200, {13, 170}
    unknown = {101}
    schema_id = schema_registry.register(f"{topic}-value", V1)
    avro_key = schema_registry.register(f"{topic}-key", KEY_AVRO)
    proto_key = schema_registry.register(f"{topic}-pkey", KEY_PROTO, kind="PROTOBUF")

    def key(i: int) -> bytes:
        if i in bad:
            return b"no-json"
        if i in unknown:
            return b"\x00" + (10_000_000).to_bytes(4, "big") + b"\x02"
        if i % 4 == 1:   # Protobuf: message indexes [0] (one byte 0), then shop (field 1) holding id (field 1)
            return b"\x00" + proto_key.to_bytes(4, "big") + b"\x00" + pw.length(1, pw.uint(1, 100 + i))
        if i % 4 == 2:
            return json.dumps({"shop": {"id": 100 + i}}).encode()
        return b"\x00" + avro_key.to_bytes(4, "big") + datum(KEY_AVRO, {"shop": {"id": 100 + i}, "region": "eu"})

    await support.create_topic(kafka.bootstrap, topic, PARTITIONS)
    producer = AIOKafkaProducer(bootstrap_servers=kafka.bootstrap)
    await producer.start()
    try:
        for i in range(n):
            value = b"\x00" + schema_id.to_bytes(4, "big") + datum(V1, row(i))
            await producer.send(topic, value, key=key(i), partition=i % PARTITIONS,
                                headers=[("trace-id", f"t{i}".encode())] if i % 3 else [])
        await producer.flush()
    finally:
        await producer.stop()
    extra = f'\n[values]\nformat = "avro-confluent"\n\n[schema_registry]\nurl = "{schema_registry.url}"\n'
    path = support.write_config(tmp_path, kafka.bootstrap, [topic], pipeline=topic, table="db.avro_headed",
                                extra=extra)
    text = path.read_text()
    start = text.index("columns = [")
    columns = ('header_columns = [{ name = "trace", header = "trace-id" }]\n'
               'key_columns = [{ name = "shop_id", field = "shop.id", type = "long" }]\n')
    text = text[:start] + columns + text[text.index("]\n", start) + 2:]
    path.write_text(text.replace("[kafka]", 'on_bad_record = "dead_letter"\n\n[kafka]', 1))
    cfg = support.load(path)
    await support.run_until_committed(cfg, {(topic, p): n // PARTITIONS for p in range(PARTITIONS)})

    table = support.catalog_of(cfg).load_table(cfg.table.name)
    names = [f.name for f in table.schema().fields]
    assert names[:len(V1["fields"]) + 2] == [*(f["name"] for f in V1["fields"]), "trace", "shop_id"], names
    rows = {r["id"]: r for r in table.scan().to_arrow().to_pylist()}
    assert set(rows) == set(range(n)) - bad - unknown
    for i, r in rows.items():
        assert (r["trace"], r["shop_id"], r["amount"]) == (f"t{i}" if i % 3 else None, 100 + i, row(i)["amount"]), r
    letters = await support.dead_letters(kafka.bootstrap, cfg.dead_letter_topic)
    why = {support.source_of(letter)[0]: support.source_of(letter)[1] for letter in letters}
    assert set(why) == {(topic, i % PARTITIONS, i // PARTITIONS) for i in bad | unknown}
    assert len(letters) == len(bad | unknown)
    assert all(h["frazil.error.field"] == "shop_id" for h in why.values()), why
    reasons = {i: why[(topic, i % PARTITIONS, i // PARTITIONS)]["frazil.error"] for i in bad | unknown}
    assert all("not a JSON object" in reasons[i] for i in bad), reasons
    assert all("schema id 10000000 cannot be read" in reasons[i] and "no such schema" in reasons[i]
               for i in unknown), reasons


# Debezium's envelope as its Avro converter registers it: `before` defines the row record and
# `after` refers to it by name; `source` and `transaction` are records of their own
DEBEZIUM_ROW = {"type": "record", "name": "Value", "fields": [
    {"name": "id", "type": "long"}, {"name": "name", "type": ["null", "string"], "default": None},
    {"name": "at", "type": ["null", {"type": "string", "connect.name": "io.debezium.time.ZonedTimestamp"}],
     "default": None}]}
DEBEZIUM = {"type": "record", "name": "Envelope", "namespace": "pg.public.items",
            "connect.name": "pg.public.items.Envelope", "fields": [
                {"name": "before", "type": ["null", DEBEZIUM_ROW], "default": None},
                {"name": "after", "type": ["null", "Value"], "default": None},
                {"name": "source", "type": {"type": "record", "name": "Source", "namespace": "io.debezium.connector",
                                            "fields": [{"name": "db", "type": "string"},
                                                       {"name": "lsn", "type": ["null", "long"], "default": None}]}},
                {"name": "op", "type": "string"},
                {"name": "ts_ms", "type": ["null", "long"], "default": None},
                {"name": "transaction", "type": ["null", {
                    "type": "record", "name": "block", "namespace": "event", "fields": [
                        {"name": "id", "type": "string"}, {"name": "total_order", "type": "long"}]}],
                 "default": None}]}


def debezium_change(i: int) -> dict[str, object]:
    row = {"id": i // 3, "name": None if i % 4 == 0 else f"n{i}", "at": f"2026-11-0{1 + i % 9}T10:00:00Z"}
    op = "cdu"[i % 3]
    return {"before": None if op == "c" else {**row, "name": "old"}, "after": None if op == "d" else row,
            "source": {"db": "shop", "lsn": 1000 + i}, "op": op, "ts_ms": 1_764_000_000_000 + i,
            "transaction": None if i % 5 else {"id": f"tx{i}", "total_order": i}}


def test_debezium_envelopes_in_avro_land_in_an_append_table_that_grows_their_columns(
        kafka: KafkaBroker, schema_registry: SchemaRegistry, tmp_path: Path) -> None:
    """An append table of one declared column takes Debezium's Avro envelope as sent: the table
    gains `before`, `after` (one writer record type, used twice), `source`, `ts_ms` and
    `transaction`, and every change lands once with every value as sent."""
    topic, n = "pg.public.items", 300
    schema_id = schema_registry.register(f"{topic}-value", DEBEZIUM)
    asyncio.run(support.create_topic(kafka.bootstrap, topic, PARTITIONS))
    values = [b"\x00" + schema_id.to_bytes(4, "big") + datum(DEBEZIUM, debezium_change(i)) for i in range(n)]
    asyncio.run(support.produce(kafka.bootstrap, topic, values, PARTITIONS))
    extra = f'\n[values]\nformat = "avro-confluent"\n\n[schema_registry]\nurl = "{schema_registry.url}"\n'
    config = support.write_config(tmp_path, kafka.bootstrap, [topic], pipeline="debezium", interval=0.5, extra=extra)
    text = config.read_text()
    declared = text[text.index("columns = ["):text.index("]\n", text.index("columns = [")) + 2]
    text = text.replace(declared, 'unknown_fields = "evolve"\ncolumns = [{ name = "op", type = "string" }]\n')
    config.write_text(text.replace("[kafka]", 'on_bad_record = "fail"\n\n[kafka]', 1))
    cfg = support.load(config)
    ends = asyncio.run(support.end_offsets(kafka.bootstrap, [topic]))
    log = tmp_path / "frazil.log"
    proc = run(config, log)
    try:
        support.wait_until_committed(support.catalog_of(cfg), cfg, ends, timeout=120, alive=lambda: proc.poll() is None)
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0, log.read_text()[-3000:]
    table = support.catalog_of(cfg).load_table(cfg.table.name)
    schema = table.schema()
    assert [f.name for f in schema.find_field("before").field_type.fields] == ["id", "name", "at"]   # type: ignore[attr-defined]
    assert [f.name for f in schema.find_field("after").field_type.fields] == ["id", "name", "at"]    # type: ignore[attr-defined]
    data = table.scan().to_arrow()
    assert data.num_rows == n
    for got in data.to_pylist():
        i = next(i for i in range(n) if (i % PARTITIONS, i // PARTITIONS) == (got["_kafka_partition"],
                                                                              got["_kafka_offset"]))
        want = debezium_change(i)
        assert {k: got[k] for k in want} == want, (i, got)


CDC_ROW = {"type": "record", "name": "Value", "fields": [
    {"name": "id", "type": "long"}, {"name": "name", "type": ["null", "string"], "default": None},
    {"name": "amount", "type": ["null", "double"], "default": None},
    {"name": "version", "type": ["null", "long"], "default": None}]}
CDC_ENVELOPE = {"type": "record", "name": "Envelope", "namespace": "shop.public.items", "fields": [
    {"name": "before", "type": ["null", CDC_ROW], "default": None},
    {"name": "after", "type": ["null", "Value"], "default": None},
    {"name": "source", "type": {"type": "record", "name": "Source", "namespace": "io.debezium.connector.postgresql",
                                "fields": [{"name": "db", "type": "string"}, {"name": "lsn", "type": "long"}]}},
    {"name": "op", "type": "string"},
    {"name": "ts_ms", "type": ["null", "long"], "default": None}]}


def test_debezium_changes_in_avro_keep_a_keyed_table_equal_to_its_source_across_kills(
        kafka: KafkaBroker, schema_registry: SchemaRegistry, tmp_path: Path) -> None:
    """A keyed table in cdc mode fed Debezium's Avro envelope through the registry (creates,
    snapshot reads, updates, deletes each followed by Debezium's tombstone), with the process
    SIGKILLed after a catalog commit and a second run whose key index is rebuilt from the table:
    the table, read by pyiceberg, is the latest row of every key as the stream made it."""
    import changes

    topic, partitions = "shop.public.items", 3
    schema_id = schema_registry.register(f"{topic}-value", CDC_ENVELOPE)
    asyncio.run(support.create_topic(kafka.bootstrap, topic, partitions))
    expected: dict[int, tuple[object, ...]] = {}

    def avro_stream(seed: int) -> Iterator[tuple[int, bytes, bytes | None]]:
        for key, kafka_key, value in changes.debezium_stream(200, 1500, seed):
            if value is None:
                yield key, kafka_key, None
                continue
            change = json.loads(value)
            change = change.get("payload", change)
            row = change["after"]
            if change["op"] == "d":
                expected.pop(key, None)
            else:
                expected[key] = (row["name"], row["amount"], row["version"])
            sent = {**change, "source": {"db": "shop", "lsn": change["source"]["lsn"]}}
            yield key, kafka_key, b"\x00" + schema_id.to_bytes(4, "big") + datum(CDC_ENVELOPE, sent)

    extra = f'\n[values]\nformat = "avro-confluent"\n\n[schema_registry]\nurl = "{schema_registry.url}"\n'
    config = changes.config(tmp_path, kafka.bootstrap, topic, "cdc-avro", mode="cdc", extra=extra)
    cfg = support.load(config)
    log = tmp_path / "frazil.log"
    asyncio.run(changes.produce(kafka.bootstrap, topic, avro_stream(1), partitions))
    proc = run(config, log, faults="commit.after_catalog=kill")
    assert proc.wait(timeout=120) == -signal.SIGKILL, log.read_text()[-3000:]
    for seed in (1, 2):   # the second run's changes meet a key index rebuilt from the table
        ends = asyncio.run(changes.produce(kafka.bootstrap, topic, avro_stream(seed + 10), partitions))
        changes.run_until_committed(config, ends, log)
    changes.assert_same(changes.table_rows(support.catalog_of(cfg), cfg.table.name), expected, "pyiceberg")
    assert "is refused" not in log.read_text()


def test_a_new_writer_schema_with_a_column_evolves_a_keyed_table_from_debeziums_avro(
        kafka: KafkaBroker, schema_registry: SchemaRegistry, tmp_path: Path) -> None:
    """The source table gains a column: Debezium registers a second envelope whose row has it.
    With unknown_fields = "evolve" the keyed table gains the column (the envelope's own parts
    change nothing), and every change lands: the rows of the first schema NULL in it."""
    import changes

    topic, partitions = "shop.public.evolving", 2
    row_v2 = {**CDC_ROW, "fields": [*CDC_ROW["fields"], {"name": "note", "type": ["null", "string"], "default": None}]}
    v2 = {**CDC_ENVELOPE, "fields": [{"name": "before", "type": ["null", row_v2], "default": None},
                                     *CDC_ENVELOPE["fields"][1:]]}
    ids = [schema_registry.register(f"{topic}-value", schema) for schema in (CDC_ENVELOPE, v2)]
    asyncio.run(support.create_topic(kafka.bootstrap, topic, partitions))
    expected: dict[int, tuple[object, ...]] = {}

    def avro_stream() -> Iterator[tuple[int, bytes, bytes | None]]:
        for n, (key, kafka_key, value) in enumerate(changes.debezium_stream(150, 1200, 4)):
            if value is None:
                yield key, kafka_key, None
                continue
            change = json.loads(value)
            change = change.get("payload", change)
            changes.note_added(change, key, n, 600, expected)
            version = 1 if n >= 600 else 0
            sent = {**change, "source": {"db": "shop", "lsn": change["source"]["lsn"]}}
            yield key, kafka_key, (b"\x00" + ids[version].to_bytes(4, "big")
                                   + datum((CDC_ENVELOPE, v2)[version], sent))

    extra = f'\n[values]\nformat = "avro-confluent"\n\n[schema_registry]\nurl = "{schema_registry.url}"\n'
    config = changes.config(tmp_path, kafka.bootstrap, topic, "cdc-avro-evolve", mode="cdc", extra=extra,
                            extra_table='unknown_fields = "evolve"', interval=2.0)
    cfg = support.load(config)
    ends = asyncio.run(changes.produce(kafka.bootstrap, topic, avro_stream(), partitions))
    changes.run_until_committed(config, ends, tmp_path / "frazil.log")
    table = support.catalog_of(cfg).load_table(cfg.table.name)
    assert [f.name for f in table.schema().fields if not f.name.startswith("_")] == [
        "id", "name", "amount", "version", "note"]
    found = changes.table_rows(support.catalog_of(cfg), cfg.table.name, ("name", "version", "note"))
    changes.assert_same(found, expected, "pyiceberg")
    assert "schema evolved" in (tmp_path / "frazil.log").read_text()


USER_ROW = {"type": "record", "name": "Value", "fields": [
    {"name": "id", "type": "long"}, {"name": "email", "type": ["null", "string"], "default": None},
    {"name": "joined", "type": ["null", {"type": "int", "logicalType": "date"}], "default": None}]}


def test_one_keyed_table_per_debezium_topic_is_created_from_its_registry_schema(
        kafka: KafkaBroker, schema_registry: SchemaRegistry, tmp_path: Path) -> None:
    """[dynamic] with `table = "{topic[1]}.{topic[2]}"` and no declared columns: each Debezium
    topic (`server.schema.table`) gets a keyed table `schema.table` whose columns are its envelope's
    `after` record (the identifier column required), and each table is the latest row of every
    key of its topic."""
    import datetime

    import changes

    rows = {"inventory.public.items": CDC_ROW, "inventory.public.users": USER_ROW}
    expected: dict[str, dict[int, dict[str, object]]] = {topic: {} for topic in rows}

    def value(topic: str, i: int) -> dict[str, object]:
        if topic.endswith("items"):
            return {"id": i % 40, "name": f"n{i}", "amount": i / 4, "version": i}
        return {"id": i % 30, "email": f"u{i}@x", "joined": datetime.date(2026, 1, 1 + i % 28)}

    for topic, row in rows.items():
        envelope = {**CDC_ENVELOPE, "fields": [{"name": "before", "type": ["null", row], "default": None},
                                               *CDC_ENVELOPE["fields"][1:]]}
        schema_id = schema_registry.register(f"{topic}-value", envelope)
        asyncio.run(support.create_topic(kafka.bootstrap, topic, 1))
        values = []
        for i in range(300):
            after = value(topic, i)
            live = expected[topic]
            op = "d" if i % 7 == 6 and after["id"] in live else ("u" if after["id"] in live else "c")
            change = {"before": live.get(after["id"]) if op != "c" else None, "after": None if op == "d" else after,
                      "op": op, "source": {"db": "shop", "lsn": i}, "ts_ms": i}
            if op == "d":
                del live[after["id"]]
            else:
                live[after["id"]] = after
            values.append(b"\x00" + schema_id.to_bytes(4, "big") + datum(envelope, change))
        asyncio.run(support.produce(kafka.bootstrap, topic, values, 1))
    config = tmp_path / "frazil.toml"
    config.write_text(f"""[pipeline]
name = "debezium-tables"
commit_interval_s = 0.5
[kafka]
bootstrap_servers = "{kafka.bootstrap}"
topics = {json.dumps(sorted(rows))}
[catalog]
properties = {support.SQLITE_CATALOG}
[values]
format = "avro-confluent"
[schema_registry]
url = "{schema_registry.url}"
[dynamic]
table = "{{topic[1]}}.{{topic[2]}}"
mode = "cdc"
identifier_columns = ["id"]
[maintenance]
enabled = false
""")
    ends = asyncio.run(support.end_offsets(kafka.bootstrap, sorted(rows)))
    changes.run_until_committed(config, ends, tmp_path / "frazil.log",
                                tables=[topic.split(".", 1)[1] for topic in rows])
    catalog = support.catalog_of(support.load(config))
    for topic, row in rows.items():
        table = catalog.load_table(topic.split(".", 1)[1])
        schema = table.schema()
        assert [f.name for f in schema.fields if not f.name.startswith("_kafka_")] == [f["name"] for f in row["fields"]]
        assert schema.identifier_field_names() == {"id"} and schema.find_field("id").required
        found = {r["id"]: {k: r[k] for k in expected[topic].get(r["id"], r) if not k.startswith("_kafka_")}
                 for r in table.scan().to_arrow().to_pylist()}
        assert found == expected[topic], topic


def test_an_upsert_topic_with_avro_keys_and_values_deletes_on_its_tombstones(
        kafka: KafkaBroker, schema_registry: SchemaRegistry, tmp_path: Path) -> None:
    """A compacted topic as Confluent's Avro serializers write it, keys and values through the
    registry: each value the row of its key, each tombstone (null value) deleting the row of its
    Avro-encoded key. A key that is not a valid datum is a bad record, named, and nothing else is
    lost: the table is the latest row of every key."""
    import changes

    topic, partitions = "avro-upserts", 2
    key_schema = {"type": "record", "name": "Key", "fields": [{"name": "id", "type": "long"}]}
    key_id = schema_registry.register(f"{topic}-key", key_schema)
    value_id = schema_registry.register(f"{topic}-value", CDC_ROW)
    asyncio.run(support.create_topic(kafka.bootstrap, topic, partitions))
    expected: dict[int, tuple[object, ...]] = {}

    def stream() -> Iterator[tuple[int, bytes, bytes | None]]:
        for key, _, value in changes.upsert_stream(120, 1500, 3):
            kafka_key = b"\x00" + key_id.to_bytes(4, "big") + datum(key_schema, {"id": key})
            if value is None:
                expected.pop(key, None)
                yield key, kafka_key, None
                continue
            row = json.loads(value)
            expected[key] = (row["name"], row["amount"], row["version"])
            yield key, kafka_key, b"\x00" + value_id.to_bytes(4, "big") + datum(CDC_ROW, row)
        yield 7, b"\x00" + key_id.to_bytes(4, "big") + b"\x80", None   # a cut varint: a bad record

    extra = f'\n[values]\nformat = "avro-confluent"\n\n[schema_registry]\nurl = "{schema_registry.url}"\n'
    config = changes.config(tmp_path, kafka.bootstrap, topic, "avro-upserts", mode="upsert", extra=extra,
                            extra_table='tombstones = "delete"')
    config.write_text(config.read_text().replace("[kafka]", 'on_bad_record = "dead_letter"\n\n[kafka]', 1))
    cfg = support.load(config)
    ends = asyncio.run(changes.produce(kafka.bootstrap, topic, stream(), partitions))
    log = tmp_path / "frazil.log"
    proc = run(config, log)

    def sent() -> None:
        assert asyncio.run(support.dead_letters(kafka.bootstrap, cfg.dead_letter_topic)), "no dead letter yet"

    try:
        support.wait_until_committed(support.catalog_of(cfg), cfg, ends, alive=lambda: proc.poll() is None)
        support.wait_for(sent, proc, log, timeout=60)
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0, log.read_text()[-3000:]
    changes.assert_same(changes.table_rows(support.catalog_of(cfg), cfg.table.name), expected, "pyiceberg")
    letters = asyncio.run(support.dead_letters(kafka.bootstrap, cfg.dead_letter_topic))
    assert [support.source_of(letter)[0] for letter in letters] == [(topic, 7 % partitions, ends[(topic, 1)] - 1)]
    assert "the tombstone's Kafka key: not a valid Avro datum" in support.source_of(letters[0])[1]["frazil.error"]
