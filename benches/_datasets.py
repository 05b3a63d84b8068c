"""The seeded datasets and workloads of the end-to-end benchmark, described once for every system.

A dataset is a generator of JSON values plus its columns; a workload is a dataset with a
partitioning. From the columns come frazil's TOML, the Arrow schema and Spark's DDL, so every
system lands the same table shape: the columns plus Kafka's topic, partition, offset, timestamp
and key.
"""

from __future__ import annotations

import itertools
import json
import random
import re
import tomllib
from collections.abc import Callable
from dataclasses import dataclass

import pyarrow as pa

import _dev  # noqa: F401 - dev/ on the path, for frazil_dev
from frazil_dev.workload import CLICKSTREAM_COLUMNS, COUNTRIES, sample_events

# (name, frazil type, required)
Column = tuple[str, str, bool]

_ARROW = {"string": pa.string(), "long": pa.int64(), "double": pa.float64(), "boolean": pa.bool_(),
          "timestamptz": pa.timestamp("us", tz="UTC")}
_SPARK = {"string": "STRING", "long": "BIGINT", "double": "DOUBLE", "boolean": "BOOLEAN", "timestamptz": "TIMESTAMP"}
META_ARROW = [("_kafka_topic", pa.string()), ("_kafka_partition", pa.int32()), ("_kafka_offset", pa.int64()),
              ("_kafka_timestamp", pa.timestamp("us", tz="UTC")), ("_kafka_key", pa.binary())]
_WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet"]


def _clickstream_columns() -> list[Column]:
    return [(c["name"], c["type"], c.get("required", False)) for c in tomllib.loads(CLICKSTREAM_COLUMNS)["columns"]]


def _wide_columns() -> list[Column]:
    cols: list[Column] = []
    for i in range(12):
        cols += [(f"s{i}", "string", False), (f"l{i}", "long", False), (f"d{i}", "double", False)]
    return cols + [("flag", "boolean", False), ("at", "timestamptz", False), ("lat", "double", False),
                   ("lon", "double", False), ("city", "string", False), ("tags", "string", False)]


def wide_records(n: int, seed: int = 11, *, nested: bool = False) -> list[bytes]:
    """``n`` flat records of about 1.2 KB: 42 fields of text, integers, doubles, a flag, a time.

    ``nested=True`` gives the decode benchmark's variant (about 1.04 KB): shorter texts, the
    place as a struct ``geo`` and ``tags`` as a list."""
    rng = random.Random(seed)
    words = (2, 6) if nested else (4, 9)
    out = []
    for i in range(n):
        r: dict[str, object] = {}
        for j in range(12):
            r[f"s{j}"] = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(*words)))
            r[f"l{j}"] = rng.randrange(-10**12, 10**12)
            r[f"d{j}"] = rng.uniform(-1e6, 1e6)
        r["flag"] = rng.random() < 0.5
        r["at"] = (f"2026-11-{1 + i % 28:02d}T{rng.randrange(24):02d}:{rng.randrange(60):02d}:00."
                   f"{rng.randrange(1000):03d}Z")
        lat, lon, city = rng.uniform(-90, 90), rng.uniform(-180, 180), rng.choice(_WORDS).title()
        tags = [rng.choice(_WORDS) for _ in range(rng.randint(0, 4))]
        if nested:
            r["geo"], r["tags"] = {"lat": lat, "lon": lon, "city": city}, tags
        else:
            r["lat"], r["lon"], r["city"], r["tags"] = lat, lon, city, ",".join(tags)
        out.append(json.dumps(r, separators=(",", ":")).encode())
    return out


# the keyed dataset: changes to a fixed set of keys, each key always in partition ``id % partitions``
UPSERT_COLUMNS: list[Column] = [("id", "long", True), ("name", "string", False), ("amount", "double", False),
                                ("version", "long", False)]
Row = tuple[str, float, int]          # name, amount, version


def changes(n: int, keys: int, tombstones: float = 0.10, seed: int = 17) -> tuple[list[int], list[Row | None]]:
    """``n`` changes to random keys of ``range(keys)`` (about ``tombstones`` of them a delete,
    None); version ``i + 1`` for the i-th."""
    rng = random.Random(seed)
    ids: list[int] = []
    rows: list[Row | None] = []
    for i in range(n):
        key = rng.randrange(keys)
        ids.append(key)
        rows.append(None if rng.random() < tombstones
                    else (f"customer {key} rev {i + 1}", round(rng.uniform(0, 10_000), 2), i + 1))
    return ids, rows


def encode_change(key: int, row: Row | None) -> bytes | None:
    """A change's JSON value; None (a tombstone) for a delete."""
    if row is None:
        return None
    return json.dumps({"id": key, "name": row[0], "amount": row[1], "version": row[2]}, separators=(",", ":")).encode()


def _upsert_changes(n: int) -> tuple[list[int], list[Row | None]]:
    return changes(n, max(1, n // 10))   # each key changed ten times on average


def _upsert_values(n: int) -> list[bytes]:
    """The values of the upserts among ``n`` changes (the tombstones have none)."""
    return upsert_values(*_upsert_changes(n))


def upsert_values(ids: list[int], rows: list[Row | None]) -> list[bytes]:
    """The values of the upserts among changes (the tombstones have none)."""
    return [v for v in itertools.starmap(encode_change, zip(ids, rows, strict=True)) if v is not None]


@dataclass(frozen=True)
class Dataset:
    name: str
    columns: list[Column]
    generate: Callable[[int], list[bytes]]
    # the writer schema of plain Avro values (frazil's values.format = "avro"); None: JSON values
    avro: dict[str, object] | None = None
    # one value in this many is a bad record (a text where a number goes), from the first on
    bad_every: int = 0
    # the Avro values in the Confluent wire format: the schema registered in a real registry at
    # pre-fill, each value its id then the datum (frazil's values.format = "avro-confluent")
    registry: bool = False
    # the records spread over this many topics, one table each (frazil's [dynamic] by topic)
    topics: int = 1
    # a keyed dataset: the changes of n records (key ids; rows, None for a tombstone), produced with
    # the id as Kafka key to partition ``id % partitions`` and landed as an upsert table (frazil's
    # mode = "upsert"); ``generate`` gives its upserts' values
    changes: Callable[[int], tuple[list[int], list[Row | None]]] | None = None

    @property
    def frazil_only(self) -> bool:
        """Whether only frazil lands this dataset in the end-to-end run (Avro values, dead letters,
        many tables, upserts; upsert.py runs Spark's MERGE INTO on a keyed stream)."""
        return self.avro is not None or bool(self.bad_every) or self.topics > 1 or self.changes is not None

    def bad(self, records: int) -> int:
        """How many of ``records`` generated values are bad records."""
        return -(-records // self.bad_every) if self.bad_every else 0

    def columns_toml(self) -> str:
        items = ",\n".join(f'  {{ name = "{n}", type = "{t}"{", required = true" if r else ""} }}'
                           for n, t, r in self.columns)
        return f"columns = [\n{items},\n]"

    def arrow_schema(self) -> pa.Schema:
        return pa.schema([pa.field(n, _ARROW[t], nullable=not r) for n, t, r in self.columns] + META_ARROW)

    def spark_ddl(self) -> str:
        """The JSON value's schema for ``from_json`` (columns only, all nullable)."""
        return ", ".join(f"{n} {_SPARK[t]}" for n, t, _ in self.columns)


@dataclass(frozen=True)
class Workload:
    name: str
    dataset: Dataset
    partition_by: tuple[str, ...] = ()  # frazil's spelling, e.g. "day(event_time)"
    # (field, values): one table per value, taking the records whose field holds it (frazil's
    # [[tables]] routing; the peers have no routing and do not run these workloads)
    routes: tuple[str, tuple[str, ...]] | None = None

    @property
    def frazil_only(self) -> bool:
        """Whether only frazil runs this workload (the peers have no routing either)."""
        return self.routes is not None or self.dataset.frazil_only

    def day_columns(self) -> list[str]:
        """The columns partitioned by day, for the peers' own table set-up (the only transform
        the workloads use)."""
        out = []
        for spec in self.partition_by:
            m = re.fullmatch(r"day\((\w+)\)", spec)
            if m is None:
                raise ValueError(f"workload {self.name}: the peers know only day(col) partitions, not {spec}")
            out.append(m.group(1))
        return out


def avro_schema(name: str, columns: list[Column]) -> dict[str, object]:
    """The writer schema of a dataset's values as plain Avro: optional columns as null unions,
    timestamps as microseconds."""
    types = {"string": "string", "long": "long", "double": "double", "boolean": "boolean",
             "timestamptz": {"type": "long", "logicalType": "timestamp-micros"}}
    return {"type": "record", "name": name.replace("-", "_"), "namespace": "bench", "fields": [
        {"name": n, "type": types[t]} if r else {"name": n, "type": ["null", types[t]], "default": None}
        for n, t, r in columns]}


def as_avro(values: list[bytes], schema: dict[str, object], columns: list[Column]) -> list[bytes]:
    """JSON ``values`` as plain Avro datums of ``schema`` (fastavro, an independent encoder)."""
    import datetime
    import io

    import fastavro

    parsed = fastavro.parse_schema(schema)
    stamps = [n for n, t, _ in columns if t == "timestamptz"]
    out = []
    for v in values:
        record = json.loads(v)
        for n in stamps:
            if record.get(n) is not None:
                record[n] = datetime.datetime.fromisoformat(record[n])
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, parsed, record)
        out.append(buf.getvalue())
    return out


CLICKSTREAM = Dataset("clickstream", _clickstream_columns(), sample_events)
_CLICKSTREAM_AVRO = avro_schema("clickstream", CLICKSTREAM.columns)
def with_bad(values: list[bytes], every: int) -> list[bytes]:
    """One value in ``every`` replaced by a bad record: ``user_id`` (a long) holding text."""
    bad = [b'{"event_id":"bad-%d","user_id":"not a number"}' % i for i in range(0, len(values), every)]
    out = list(values)
    out[::every] = bad
    return out


CLICKSTREAM_DIRTY = Dataset("clickstream-dirty", CLICKSTREAM.columns, lambda n: with_bad(sample_events(n), 100),
                            bad_every=100)
CLICKSTREAM_AVRO = Dataset("clickstream-avro", CLICKSTREAM.columns,
                           lambda n: as_avro(sample_events(n), _CLICKSTREAM_AVRO, CLICKSTREAM.columns),
                           _CLICKSTREAM_AVRO)
CLICKSTREAM_REGISTRY = Dataset("clickstream-registry", CLICKSTREAM.columns, CLICKSTREAM_AVRO.generate,
                               _CLICKSTREAM_AVRO, registry=True)
CLICKSTREAM_200 = Dataset("clickstream-200", CLICKSTREAM.columns, sample_events, topics=200)
WIDE = Dataset("wide", _wide_columns(), wide_records)
UPSERTS = Dataset("upserts", UPSERT_COLUMNS, _upsert_values, changes=_upsert_changes)
WORKLOADS = {w.name: w for w in (
    Workload("clickstream", CLICKSTREAM),
    Workload("clickstream-by-day", CLICKSTREAM, ("day(event_time)",)),
    Workload("wide", WIDE),
    Workload("clickstream-routed", CLICKSTREAM, routes=("country", tuple(COUNTRIES))),
    Workload("clickstream-avro", CLICKSTREAM_AVRO),
    Workload("clickstream-dirty", CLICKSTREAM_DIRTY),
    Workload("clickstream-avro-registry", CLICKSTREAM_REGISTRY),
    Workload("topics-200", CLICKSTREAM_200),
    Workload("upsert", UPSERTS),
)}
