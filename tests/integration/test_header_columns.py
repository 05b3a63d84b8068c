"""Kafka record headers and keys as columns (``header_columns``, ``headers_column``, ``key_columns``):
named headers land typed (the last of a repeated name), a record without them has NULLs, every
header lands in a map, the whole key and fields of a JSON key (plain, or after a JSON Schema
serializer's frame) land typed, and a header or key that does not fit its column is a dead letter
naming the column and why. Records are read straight from the fetch, and the ones a schema change
appends again go record by record: both read headers and keys."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer

import support
from frazil_dev.kafka_broker import KafkaBroker

pytestmark = pytest.mark.integration

RECORDS = 400
BAD = {33, 277}   # "attempt" is not a number
BAD_KEY = {101, 350}   # the key is not JSON, so it has no user.id


def key(i: int) -> bytes | None:
    if i % 9 == 0:
        return None
    if i in BAD_KEY:
        return b"user-%d" % i
    text = json.dumps({"user": {"id": 3 * i} if i % 5 else None, "region": f"r{i % 4}"}).encode()
    return b"\x00\x00\x00\x00\x05" + text if i % 13 == 6 else text   # some as a JSON Schema serializer writes them


def key_json(i: int) -> object:
    sent = key(i)
    return json.loads(sent[5:] if sent and sent[0] == 0 else sent or b"null")   # after the frame, if any


def headers(i: int) -> list[tuple[str, bytes]]:
    if i % 7 == 0:
        return []
    out = [("trace-id", f"t{i}".encode()), ("attempt", b"x" if i in BAD else str(i % 5).encode())]
    if i % 10 == 3 and i not in BAD:
        out.append(("attempt", b"9"))   # sent twice: the last one is the header
    if i % 4 == 1:
        out.append(("raw", bytes([0xff, i % 256])))
    return out


def value(i: int) -> dict[str, object]:
    """The second half has a field the table lacks: its records are appended again, one by one
    (with their headers), once the table has evolved to take it."""
    return {"id": i, **({"color": f"c{i % 3}"} if i >= RECORDS // 2 else {})}


async def produce(bootstrap: str, topic: str, records: range) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        for i in records:
            await producer.send(topic, json.dumps(value(i)).encode(), key=key(i), partition=i % 2,
                                headers=headers(i))
        await producer.flush()
    finally:
        await producer.stop()


@pytest.mark.asyncio
async def test_headers_and_keys_land_in_their_columns_and_one_that_does_not_fit_is_a_dead_letter(
        kafka: KafkaBroker, tmp_path: Path) -> None:
    topic = "header-columns"
    await support.create_topic(kafka.bootstrap, topic, 2)
    await produce(kafka.bootstrap, topic, range(RECORDS // 2))
    path = support.write_config(tmp_path, kafka.bootstrap, [topic], pipeline=topic, table="db.headed")
    text = path.read_text()
    start = text.index("columns = [")
    table = ('header_columns = [{ name = "trace", header = "trace-id" },\n'
             '                  { name = "attempt", header = "attempt", type = "int" }]\n'
             'headers_column = "headers"\nunknown_fields = "evolve"\n'
             'key_columns = [{ name = "raw_key" }, { name = "user_id", field = "user.id", type = "long" },\n'
             '               { name = "region", field = "region" }]\n')
    text = text[:start] + table + text[text.index("]\n", start) + 2:]
    path.write_text(text.replace("[kafka]", 'on_bad_record = "dead_letter"\n\n[kafka]', 1))
    cfg = support.load(path)
    # the first half makes the table; the second, read by a restarted pipeline, evolves it
    await support.run_until_committed(cfg, {(topic, 0): RECORDS // 4, (topic, 1): RECORDS // 4})
    await produce(kafka.bootstrap, topic, range(RECORDS // 2, RECORDS))
    await support.run_until_committed(cfg, {(topic, 0): RECORDS // 2, (topic, 1): RECORDS // 2})

    table = support.catalog_of(cfg).load_table(cfg.table.name)
    assert [(f.name, str(f.field_type).split("<")[0]) for f in table.schema().fields][:7] == [
        ("id", "long"), ("trace", "string"), ("attempt", "int"), ("headers", "map"), ("raw_key", "string"),
        ("user_id", "long"), ("region", "string")]
    rows = {r["id"]: r for r in table.scan().to_arrow().to_pylist()}
    assert set(rows) == set(range(RECORDS)) - BAD - BAD_KEY
    for i, row in rows.items():
        sent = headers(i)
        last = dict(sent)   # the last value of each name
        assert row["trace"] == (f"t{i}" if sent else None), row
        assert row["attempt"] == (int(last["attempt"]) if sent else None), row
        assert dict(row["headers"]) == last, row
        assert (row["_kafka_partition"], row["_kafka_offset"]) == (i % 2, i // 2)
        assert row.get("color") == value(i).get("color"), row
        sent_key = key_json(i)
        assert row["raw_key"] == (key(i).decode() if key(i) is not None else None), row
        want = ((sent_key["user"] or {}).get("id"), sent_key["region"]) if sent_key else (None, None)
        assert (row["user_id"], row["region"]) == want, row

    letters = await support.dead_letters(kafka.bootstrap, cfg.dead_letter_topic)
    why = {}
    for letter in letters:
        (_, partition, offset), h = support.source_of(letter)
        why[partition + 2 * offset] = (h["frazil.error.field"], h["frazil.error"])
    assert set(why) == BAD | BAD_KEY and len(letters) == len(BAD | BAD_KEY), why
    assert all(why[i] == ("attempt", 'header "attempt" is "x": not an int (32-bit) written in digits')
               for i in BAD), why
    assert all(why[i] == ("user_id", f'the key is "user-{i}", not a JSON object, so it has no field user.id')
               for i in BAD_KEY), why
