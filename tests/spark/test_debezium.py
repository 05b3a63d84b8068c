"""Change data capture end to end with the real parts: a SQL workload over 20 PostgreSQL tables
(a snapshot, then inserts, updates and deletes in small transactions, one transaction touching
thousands of rows, an ``ALTER TABLE ... ADD COLUMN`` and a timestamp column made coarser
mid-stream), read by Debezium's PostgreSQL connector in a real Kafka Connect worker, written as
Avro through the schema registry or as JSON in Kafka Connect's schema envelope; frazil makes one
keyed table per topic from the schemas the records carry (``[dynamic]``, no declared columns),
SIGKILLed at its commit fault points on the way. At the end every Iceberg table, read by Spark SQL
and by pyiceberg, equals its PostgreSQL table: every row, every column, every value."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
import os
import random
import signal
import struct
import subprocess
import sys
import time
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

import support
from frazil.config import CatalogConfig
from frazil.errors import NotFound
from frazil_dev.kafka_broker import KafkaBroker
from frazil_dev.kafka_connect import KafkaConnect, avro_converter, debezium_postgres, json_converter
from frazil_dev.postgres import PostgresServer
from frazil_dev.schema_registry import SchemaRegistry

pytestmark = [pytest.mark.spark, pytest.mark.integration]

TABLES = [f"t{i:02d}" for i in range(20)]
COLUMNS = ("id", "name", "amount", "qty", "ts", "day", "flag", "ratio", "r", "at")
EVOLVING = "t05"    # gains a column mid-stream
BIG = "t00"         # one transaction touches thousands of its rows
COARSENED = "t06"   # its timestamp column goes from microseconds to milliseconds mid-stream
Row = dict[str, Any]


class Source:
    """The PostgreSQL side: the schema, and a seeded workload of small transactions."""

    def __init__(self, pg: PostgresServer, schema: str, seed: int) -> None:
        self.pg, self.schema, self.rng, self.next_id = pg, schema, random.Random(seed), 1
        self.conn = pg.connect()

    def create(self, rows_each: int) -> None:
        self.conn.execute(f"CREATE SCHEMA {self.schema}")
        for t in TABLES:
            self.conn.execute(f"""CREATE TABLE {self.schema}.{t} (id bigint PRIMARY KEY, name text,
                amount numeric(12, 2), qty int, ts timestamp, day date, flag boolean, ratio double precision,
                r real, at timestamptz)""")
            for _ in range(rows_each):
                self.insert(t)

    def row(self) -> tuple[object, ...]:
        rng = self.rng
        micros = rng.randrange(-2_000_000_000_000_000, 4_000_000_000_000_000)   # 1906 to 2096
        ts = datetime.datetime(1970, 1, 1) + datetime.timedelta(microseconds=micros)
        return (f"n{rng.randrange(10**6)}" if rng.random() > 0.1 else None,
                Decimal(rng.randrange(-10**11, 10**11)) / 100, rng.randrange(-2**31, 2**31),
                ts, ts.date() if rng.random() > 0.1 else None, rng.random() > 0.5, rng.uniform(-1e9, 1e9),
                rng.uniform(-1e3, 1e3), ts.replace(tzinfo=datetime.UTC) + datetime.timedelta(hours=rng.randrange(48)))

    def insert(self, t: str) -> None:
        self.conn.execute(f"INSERT INTO {self.schema}.{t} ({', '.join(COLUMNS)}) VALUES ({', '.join(['%s'] * 10)})",
                          (self.next_id, *self.row()))
        self.next_id += 1

    def some_id(self, t: str) -> int | None:
        got = self.conn.execute(f"SELECT id FROM {self.schema}.{t} ORDER BY random() LIMIT 1").fetchone()
        return None if got is None else int(got[0])

    def changes(self, n: int) -> None:
        """``n`` changes in transactions of one to five statements over random tables."""
        done = 0
        while done < n:
            with self.conn.transaction():
                for _ in range(self.rng.randint(1, 5)):
                    t, dice = self.rng.choice(TABLES), self.rng.random()
                    key = self.some_id(t)
                    if key is None or dice < 0.4:
                        self.insert(t)
                    elif dice < 0.8:
                        self.conn.execute(f"UPDATE {self.schema}.{t} SET name = %s, amount = %s, qty = %s, ts = %s, "
                                          "day = %s, flag = %s, ratio = %s, r = %s, at = %s WHERE id = %s",
                                          (*self.row(), key))
                    else:
                        self.conn.execute(f"DELETE FROM {self.schema}.{t} WHERE id = %s", (key,))
                    done += 1

    def big_transaction(self, rows: int) -> None:
        for _ in range(rows):
            self.insert(BIG)
        with self.conn.transaction():
            self.conn.execute(f"UPDATE {self.schema}.{BIG} SET qty = qty / 2 + 1, name = coalesce(name, '') || '+'")
            self.conn.execute(f"DELETE FROM {self.schema}.{BIG} WHERE id % 10 = 3")

    def add_columns(self) -> None:
        """Three columns, whose types a schema change must take from the source's schema, not
        guess from values: text, a decimal (its digits would look like a double) and a date
        (Debezium sends days)."""
        self.conn.execute(f"ALTER TABLE {self.schema}.{EVOLVING} ADD COLUMN note text, ADD COLUMN price numeric(8, 3), "
                          "ADD COLUMN born date")
        for key in [r[0] for r in self.conn.execute(f"SELECT id FROM {self.schema}.{EVOLVING} LIMIT 40").fetchall()]:
            self.conn.execute(f"UPDATE {self.schema}.{EVOLVING} SET note = %s, price = %s, born = %s WHERE id = %s",
                              (f"note {key}", Decimal(key) / 1000, datetime.date(1900, 1, 1)
                               + datetime.timedelta(days=key), key))
        self.insert(EVOLVING)

    def coarsen(self) -> None:
        """``ts`` of ``COARSENED`` becomes ``timestamp(3)``: Debezium then sends its numbers as
        milliseconds (``Timestamp``) where they were microseconds (``MicroTimestamp``). Every row is
        touched after, so that each holds PostgreSQL's rounded value at the end."""
        self.conn.execute(f"ALTER TABLE {self.schema}.{COARSENED} ALTER COLUMN ts TYPE timestamp(3)")
        self.conn.execute(f"UPDATE {self.schema}.{COARSENED} SET qty = qty")

    def rows(self, t: str) -> dict[int, Row]:
        cur = self.conn.execute(f"SELECT * FROM {self.schema}.{t}")
        names = [d.name for d in cur.description or ()]
        return {int(r[0]): dict(zip(names, r, strict=True)) for r in cur.fetchall()}


def float32(x: float | None) -> float | None:
    return None if x is None else struct.unpack("<f", struct.pack("<f", x))[0]


def same(found: dict[int, Row], want: dict[int, Row], engine: str, table: str) -> None:
    """Every row of the source in the table, nothing else, every value as the source holds it
    (a timestamptz, as ISO text in a string column, is compared as the instant it names; a ``real``,
    which psycopg gives as the shortest decimal of the float32, compared as that float32)."""
    assert found.keys() == want.keys(), (f"{engine} {table}: {len(found.keys() - want.keys())} rows too many, "
                                         f"{len(want.keys() - found.keys())} missing")
    for key, row in want.items():
        got = {c: found[key].get(c) for c in row}
        if isinstance(got["at"], str):   # Debezium's Avro converter sends it as ISO text
            got["at"] = datetime.datetime.fromisoformat(got["at"])
        elif isinstance(got["at"], datetime.datetime) and got["at"].tzinfo is None:
            got["at"] = got["at"].astimezone(datetime.UTC)   # PySpark gives a timestamptz in local time
        row = {**row, "r": float32(row["r"])}
        got["r"] = float32(got["r"])
        assert got == row, f"{engine} {table} id {key}: {got} != {row}"


def stable_ends(bootstrap: str, topics: list[str], quiet_s: float = 5.0, timeout_s: float = 120.0,
                alive: Callable[[], object] = lambda: None) -> dict[tuple[str, int], int]:
    """The topics' end offsets once Debezium has published everything: unchanged for ``quiet_s``."""
    deadline = time.monotonic() + timeout_s
    last, since = None, time.monotonic()
    while time.monotonic() < deadline:
        alive()
        try:
            ends = asyncio.run(support.end_offsets(bootstrap, topics))
        except NotFound:   # Connect creates each topic with its first change
            ends = {}
        if ends != last:
            last, since = ends, time.monotonic()
        elif time.monotonic() - since >= quiet_s and {t for t, _ in ends} == set(topics):
            return ends
        time.sleep(0.5)
    raise AssertionError(f"the topics did not settle within {timeout_s}s: {last}")


def run(config: Path, log: Path, faults: str = "") -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:
        return subprocess.Popen([sys.executable, "-m", "frazil.cli", "run", "--config", str(config)],
                                stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "FRAZIL_FAULTS": faults})


@pytest.mark.parametrize("converter", ["avro", "json"])
def test_twenty_postgresql_tables_through_debezium_equal_their_iceberg_tables_across_kills(
        kafka: KafkaBroker, postgres: PostgresServer, schema_registry: SchemaRegistry, kafka_connect: KafkaConnect,
        tmp_path: Path, spark: Any, warehouse: CatalogConfig, converter: str) -> None:
    """``avro``: Debezium's Avro converter through the registry; ``json``: Kafka's JSON converter
    with its schema envelope, each table made from the envelope's schema."""
    server, schema = f"dbz{converter[0]}", f"inv_{converter}"
    source = Source(postgres, schema, seed=34)
    with contextlib.closing(source.conn):
        check_pipeline(source, server, schema, converter, kafka, schema_registry, kafka_connect, tmp_path, spark,
                       warehouse)


def check_pipeline(source: Source, server: str, schema: str, converter: str, kafka: KafkaBroker,
                   schema_registry: SchemaRegistry, kafka_connect: KafkaConnect, tmp_path: Path, spark: Any,
                   warehouse: CatalogConfig) -> None:
    postgres = source.pg
    source.create(rows_each=30)                  # read by the connector's snapshot (op r)
    if converter == "avro":
        settings = avro_converter(schema_registry)
        values = f'[values]\nformat = "avro-confluent"\n[schema_registry]\nurl = "{schema_registry.url}"\n'
    else:   # a NULL as NULL, not the column's default (docs/cdc.md); decimals as base64 bytes, the default
        settings = {**json_converter(schemas=True), "value.converter.replace.null.with.default": "false"}
        values = ""
    connector = debezium_postgres(postgres, server, schemas=schema, converter=settings, partitions=2)
    kafka_connect.add(server, connector)
    kafka_connect.wait_running(server)
    topics = [f"{server}.{schema}.{t}" for t in TABLES]
    props = ", ".join(f"{k} = {json.dumps(v)}" for k, v in warehouse.properties.items() if k != "type")
    config = tmp_path / "frazil.toml"
    config.write_text(f"""[pipeline]
name = "{server}"
commit_interval_s = 1
[kafka]
bootstrap_servers = "{kafka.bootstrap}"
topics = {json.dumps(topics)}
session_timeout_ms = 6000
heartbeat_interval_ms = 1000
[catalog]
name = "{warehouse.name}"
properties = {{ {props} }}
{values}[dynamic]
table = "{{topic[1]}}.{{topic[2]}}"
mode = "cdc"
identifier_columns = ["id"]
unknown_fields = "evolve"
[maintenance]
enabled = false
""")
    log = tmp_path / "frazil.log"
    source.changes(300)
    source.big_transaction(3000)
    stable_ends(kafka.bootstrap, topics, quiet_s=2.0)
    first = run(config, log, faults="commit.after_catalog=kill")
    assert first.wait(timeout=180) == -signal.SIGKILL, log.read_text()[-3000:]
    source.add_columns()
    source.coarsen()
    source.changes(300)
    second = run(config, log, faults="commit.after_deletes_written=kill@3")
    source.changes(200)
    assert second.wait(timeout=180) == -signal.SIGKILL, log.read_text()[-3000:]
    source.changes(100)
    ends = stable_ends(kafka.bootstrap, topics, alive=lambda: kafka_connect.tasks(server))
    cfg = support.load(config)
    catalog = support.catalog_of(cfg)
    last = run(config, log)
    try:
        support.wait_until_committed(catalog, cfg, {tp: end for tp, end in ends.items() if end}, timeout=180,
                                     alive=lambda: last.poll() is None, tables=[f"{schema}.{t}" for t in TABLES])
    finally:
        last.send_signal(signal.SIGTERM)
        assert last.wait(timeout=60) == 0, log.read_text()[-3000:]
    kafka_connect.remove(server)

    for t in TABLES:
        want = source.rows(t)
        table = catalog.load_table(f"{schema}.{t}")
        assert table.schema().identifier_field_names() == {"id"}
        types = {f.name: str(f.field_type) for f in table.schema().fields}
        assert {c: types[c] for c in ("amount", "ts", "day", "r", "at")} == {
            "amount": "decimal(12, 2)", "ts": "timestamp", "day": "date", "r": "float",
            "at": "string" if converter == "avro" else "timestamptz"}, t
        same({r["id"]: r for r in table.scan().to_arrow().to_pylist()}, want, "pyiceberg", t)
        spark_rows = [r.asDict() for r in spark.sql(f"SELECT * FROM {warehouse.name}.{schema}.{t}").collect()]
        same({r["id"]: r for r in spark_rows}, want, "Spark SQL", t)
    evolved = {f.name: str(f.field_type) for f in catalog.load_table(f"{schema}.{EVOLVING}").schema().fields}
    assert {c: evolved.get(c) for c in ("note", "price", "born")} == {
        "note": "string", "price": "decimal(8, 3)", "born": "date"}
    text = log.read_text()
    assert "schema evolved" in text and "is refused" not in text and "bad record" not in text.lower()
