"""An append table reading Kafka Connect's JSON envelope (``connect_envelope = true``): values as the
``JsonConverter`` writes them with ``schemas.enable=true``. The table is made from the first
record's schema, a second schema version's new field is added by evolution with the type its
schema names, numbers land in the unit the schema says (a ``Timestamp``'s milliseconds, a
``Decimal``'s base64 bytes), and a value that is not in the envelope is a dead letter that says so."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

import support
from frazil.buffers.envelope import NOT_ENVELOPE
from frazil_dev.kafka_broker import KafkaBroker

pytestmark = pytest.mark.integration

RECORDS = 300
PLAIN = {41, 142, 243}   # plain JSON, not in the envelope: bad records
NEW = 150                # records from here on carry the second schema version (field "color")
DECIMAL = "org.apache.kafka.connect.data.Decimal"


def field(name: str, kind: str, *, optional: bool = True, semantic: str = "", **more: object) -> dict[str, object]:
    return {"type": kind, "optional": optional, "field": name, **({"name": semantic} if semantic else {}), **more}


V1 = [field("id", "int64", optional=False), field("name", "string"),
      field("amount", "bytes", semantic=DECIMAL, parameters={"scale": "2", "connect.decimal.precision": "10"}),
      field("at", "int64", semantic="org.apache.kafka.connect.data.Timestamp"),
      field("day", "int32", semantic="org.apache.kafka.connect.data.Date")]
V2 = [*V1, field("color", "string")]
AT0 = datetime(2026, 11, 20, 8, 30, tzinfo=UTC)


def row(i: int) -> dict[str, Any]:
    cents = i * 37 - 500   # negatives too: two's complement bytes
    return {"id": i, "name": f"n{i}", "amount": Decimal(cents) / 100, "at": AT0 + timedelta(milliseconds=i * 1001),
            "day": date(2026, 1, 1) + timedelta(days=i), **({"color": f"c{i % 4}"} if i >= NEW else {})}


def value(i: int) -> bytes:
    r = row(i)
    cents = int(r["amount"] * 100)
    payload = {**r, "amount": _base64(cents), "at": int(r["at"].timestamp() * 1000),
               "day": (r["day"] - date(1970, 1, 1)).days}
    if i in PLAIN:
        return json.dumps(payload).encode()
    schema = {"type": "struct", "optional": False, "name": "shop.Event", "fields": V2 if i >= NEW else V1}
    return json.dumps({"schema": schema, "payload": payload}).encode()


def _base64(unscaled: int) -> str:
    import base64
    size = max(1, (unscaled.bit_length() + 8) // 8)
    return base64.b64encode(unscaled.to_bytes(size, "big", signed=True)).decode()


@pytest.mark.asyncio
async def test_an_enveloped_topic_lands_typed_as_its_schema_says_and_evolves_with_it(
        kafka: KafkaBroker, tmp_path: Path) -> None:
    topic = "connect-envelope"
    await support.create_topic(kafka.bootstrap, topic, 2)
    await support.produce(kafka.bootstrap, topic, [value(i) for i in range(RECORDS)], 2)
    path = support.write_config(tmp_path, kafka.bootstrap, [topic], pipeline=topic, table="db.enveloped")
    text = path.read_text()
    start = text.index("columns = [")
    text = text[:start] + 'connect_envelope = true\nunknown_fields = "evolve"\n' + \
        text[text.index("]\n", start) + 2:]
    path.write_text(text.replace("[kafka]", 'on_bad_record = "dead_letter"\n\n[kafka]', 1))
    cfg = support.load(path)
    ends = {(topic, 0): RECORDS // 2, (topic, 1): RECORDS // 2}
    await support.run_until_committed(cfg, ends)

    table = support.catalog_of(cfg).load_table(cfg.table.name)
    assert [(f.name, str(f.field_type), f.required) for f in table.schema().fields if not f.name.startswith("_")] == [
        ("id", "long", False), ("name", "string", False), ("amount", "decimal(10, 2)", False),
        ("at", "timestamptz", False), ("day", "date", False), ("color", "string", False)]
    data = table.scan().to_arrow().to_pylist()
    where = [(r["_kafka_partition"], r["_kafka_offset"]) for r in data]
    assert len(where) == len(set(where)) == RECORDS - len(PLAIN)
    for got in data:   # support.produce sends record i to partition i % 2 at offset i // 2
        i = got["_kafka_partition"] + 2 * got["_kafka_offset"]
        want = row(i)
        assert {k: got[k] for k in want} == want and got.get("color") == want.get("color"), (i, got)

    letters = await support.dead_letters(kafka.bootstrap, cfg.dead_letter_topic)
    sources = {}
    for letter in letters:
        (_, partition, offset), headers = support.source_of(letter)
        sources[partition + 2 * offset] = headers["frazil.error"]
    assert set(sources) == PLAIN and len(letters) == len(PLAIN)
    assert all(why == NOT_ENVELOPE for why in sources.values()), sources
