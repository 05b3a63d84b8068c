"""Decode throughput of the native buffer against pyarrow.json and json.loads + from_pylist, and
of the native buffer with the options that used to cost decode time (case_insensitive on names
that all need folding; one bad record in 100 with on_bad_record = "dead_letter", each decoded
alone by arrow-json for its reason), and of the same values in the Confluent wire format
(``native-json-schema``: ``values.format = "json-schema-confluent"``).

The same seeded payloads go through every system, on one and on two threads, in one run:
- ``clickstream``: about 250-byte events (the demo's generator);
- ``wide``: about 1.2 KB records with 40 fields of mixed types and a nested struct.
Each system turns chunks of 10,000 JSON values into Arrow with the same target schema; the
inputs (values, offsets, keys) are built before timing. Median of 3 timed runs after a warm-up.
Writes ``benches/results/native.json`` and prints a table with ratios to ``json.loads``.

Protobuf: the same records as messages of one proto3 message in the Confluent wire format (encoded
by ``frazil_dev.protowire``), read natively (into JSON, then decoded); ratios to the JSON rows.

Avro: the same records encoded by fastavro as plain datums (every field a null union, timestamps
as timestamp-micros), decoded by the native Avro buffer and by fastavro's schemaless_reader +
``pa.Table.from_pylist`` (the Python baseline), on the same chunks; ratios to fastavro.

Changes: the clickstream rows as Debezium change envelopes (creates, updates with the old row,
deletes), into a keyed table's buffer on one thread, as JSON and as Avro datums of one envelope
schema; rows with ``workload = "changes"``, the ratio to JSON.

Contention (``rust/examples/contention.rs``, built and run through cargo): 1 to 16 threads pushing
entries the size of the buffer's into its lock-free shards while one thread drains, against a
``Mutex<Vec<_>>`` per shard, interleaved in one run; rows with ``workload = "contention"``.

    python benches/native.py [--records N] [--no-contention]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import NamedTuple

import pyarrow as pa
import pyarrow.json as pajson

import _datasets
import _dev  # noqa: F401 - dev/ on the path, for frazil_dev
import _results
from frazil import _native
from frazil_dev.workload import sample_events

CHUNK = 10_000
BAD_EVERY = 100

CLICKSTREAM = pa.schema([
    ("event_id", pa.string()), ("user_id", pa.int64()), ("session_id", pa.string()), ("event_type", pa.string()),
    ("page", pa.string()), ("referrer", pa.string()), ("country", pa.string()), ("device", pa.string()),
    ("price", pa.float64()), ("event_time", pa.timestamp("us", tz="UTC")),
])


def wide_schema() -> pa.Schema:
    fields = []
    for i in range(12):
        fields += [(f"s{i}", pa.string()), (f"l{i}", pa.int64()), (f"d{i}", pa.float64())]
    fields += [("flag", pa.bool_()), ("at", pa.timestamp("us", tz="UTC")),
               ("geo", pa.struct([("lat", pa.float64()), ("lon", pa.float64()), ("city", pa.string())])),
               ("tags", pa.list_(pa.string()))]
    return pa.schema(fields)


def wide_records(n: int, seed: int = 11) -> list[bytes]:
    return _datasets.wide_records(n, seed, nested=True)


def chunks(values: list[bytes]) -> list[dict[str, object]]:
    out = []
    for start in range(0, len(values), CHUNK):
        part = values[start:start + CHUNK]
        out.append({"values": part, "offsets": list(range(start, start + len(part))),
                    "timestamps_ms": [0] * len(part), "keys": [None] * len(part),
                    "ndjson": b"\n".join(part)})
    return out


def run_native(schema: pa.Schema, work: list[dict[str, object]], threads: int, *, fold_case: bool = False,
               bad_every: int = 0, framed: bool = False, transforms: str | None = None) -> int:
    """``fold_case``: the table's case_insensitive option, on values whose every column name is
    upper-cased (so each field is renamed to its column); ``bad_every``: one value in that many is
    not a JSON object (on_bad_record = "dead_letter": the rest of its chunk is kept); rows kept are
    counted with the bad ones, so every system reports the same total. Unknown fields are rejected,
    the daemon's default (``unknown_fields = "fail"``); the payloads have none, so this is the work
    the buffer did before rejecting became its own default too. ``framed``: the values in the
    Confluent wire format (``values.format = "json-schema-confluent"``), the frame skipped natively.
    ``transforms``: the table's transforms (a native spec), run on every value before decoding."""
    buf = _native.JsonBuffer(schema=schema, unknown_fields="reject", fold_case=fold_case, confluent=framed,
                             transforms=transforms)
    bad = [0] * len(work)

    def one(i: int) -> None:
        c = work[i]
        values = (c["bad_values"] if bad_every else c["folded_values"] if fold_case
                  else c["framed_values"] if framed else c["values"])
        result = buf.append(topic="bench", partition=i % threads, offsets=c["offsets"],
                            timestamps_ms=c["timestamps_ms"], keys=c["keys"], values=values)
        bad[i] = len(result.errors)
        assert bad[i] == (len(values) + bad_every - 1) // bad_every if bad_every else not result.errors

    _parallel(one, len(work), threads)
    batch = buf.drain()
    return (batch.num_rows if batch is not None else 0) + sum(bad)


def keep_all_transforms(schema: pa.Schema) -> str:
    """Two transforms that change no row: the first integer field cast to long, a filter on the
    first string field that keeps everything. What any table's transforms cost at least: each value
    parsed at its top level and written again."""
    number = next(f.name for f in schema if pa.types.is_integer(f.type))
    text = next(f.name for f in schema if pa.types.is_string(f.type))
    return json.dumps([{"op": "cast", "field": number, "to": "long"}, {"op": "filter", "field": text, "matches": ".*"}])


def with_bad_values(work: list[dict[str, object]], every: int, schema: pa.Schema) -> None:
    """A JSON object whose first integer field holds text: it passes the cheap checks and fails
    in the decoder: the single pass leaves it to arrow-json, which says why."""
    field = next(f.name for f in schema if pa.types.is_integer(f.type))
    bad = json.dumps({field: "not a number"}).encode()
    for c in work:
        c["bad_values"] = [bad if j % every == 0 else v for j, v in enumerate(c["values"])]


def with_framed_values(work: list[dict[str, object]]) -> None:
    """The values in the Confluent wire format, as a JSON Schema serializer writes them (magic
    byte 0, a 4-byte schema id, the JSON)."""
    for c in work:
        c["framed_values"] = [b"\x00\x00\x00\x00\x07" + v for v in c["values"]]   # type: ignore[attr-defined]


def with_folded_values(work: list[dict[str, object]], schema: pa.Schema) -> None:
    """The values with every column's name upper-cased where it is a field's name: what
    ``case_insensitive`` is for (a producer that writes ``UserId`` for the column ``userid``)."""
    names = [(f'"{n}":'.encode(), f'"{n.upper()}":'.encode()) for n in schema.names if n != n.upper()]
    for c in work:
        folded = []
        for v in c["values"]:   # type: ignore[attr-defined]
            for name, upper in names:
                v = v.replace(name, upper)
            folded.append(v)
        c["folded_values"] = folded


def run_pyarrow_json(schema: pa.Schema, work: list[dict[str, object]], threads: int) -> int:
    options = pajson.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")
    read = pajson.ReadOptions(use_threads=False, block_size=1 << 26)
    rows = [0] * len(work)

    def one(i: int) -> None:
        rows[i] = pajson.read_json(io.BytesIO(work[i]["ndjson"]), read_options=read, parse_options=options).num_rows

    _parallel(one, len(work), threads)
    return sum(rows)


def run_json_loads(schema: pa.Schema, work: list[dict[str, object]], threads: int) -> int:
    rows = [0] * len(work)
    names = schema.names
    timestamp_fields = [f.name for f in schema if pa.types.is_timestamp(f.type)]

    def one(i: int) -> None:
        records = [json.loads(v) for v in work[i]["values"]]
        for r in records:  # from_pylist wants datetimes, not ISO strings
            for name in timestamp_fields:
                if r.get(name) is not None:
                    r[name] = _parse_ts(r[name])
        rows[i] = pa.Table.from_pylist([{k: r.get(k) for k in names} for r in records], schema=schema).num_rows

    _parallel(one, len(work), threads)
    return sum(rows)


AVRO_TYPES = {"string": "string", "int64": "long", "double": "double", "bool": "boolean"}


def avro_type(t: pa.DataType, name: str) -> object:
    if pa.types.is_timestamp(t):
        return {"type": "long", "logicalType": "timestamp-micros"}
    if pa.types.is_struct(t):
        return {"type": "record", "name": name, "fields": [
            {"name": f.name, "type": ["null", avro_type(f.type, f"{name}_{f.name}")], "default": None} for f in t]}
    if pa.types.is_list(t):
        return {"type": "array", "items": ["null", avro_type(t.value_type, f"{name}_item")]}
    return AVRO_TYPES[str(t)]


def avro_schema(schema: pa.Schema) -> dict[str, object]:
    return {"type": "record", "name": "Bench", "fields": [
        {"name": f.name, "type": ["null", avro_type(f.type, f.name)], "default": None} for f in schema]}


def avro_work(schema: pa.Schema, work: list[dict[str, object]]) -> tuple[dict[str, object], list[dict[str, object]]]:
    """The chunks' records as plain Avro datums (encoded before timing)."""
    import fastavro

    writer = avro_schema(schema)
    parsed = fastavro.parse_schema(writer)
    times = [f.name for f in schema if pa.types.is_timestamp(f.type)]
    out = []
    for c in work:
        values = []
        for v in c["values"]:
            r = json.loads(v)
            for name in times:
                if r.get(name) is not None:
                    r[name] = _parse_ts(r[name])
            buf = io.BytesIO()
            fastavro.schemaless_writer(buf, parsed, {f.name: r.get(f.name) for f in schema})
            values.append(buf.getvalue())
        out.append({**c, "values": values})
    return writer, out


def run_native_avro(schema: pa.Schema, writer: dict[str, object], work: list[dict[str, object]], threads: int) -> int:
    buf = _native.AvroBuffer(schema=schema, confluent=False)
    buf.register(0, json.dumps(writer), json.dumps(writer))

    def one(i: int) -> None:
        c = work[i]
        result = buf.append(topic="bench", partition=i % threads, offsets=c["offsets"],
                            timestamps_ms=c["timestamps_ms"], keys=c["keys"], values=c["values"])
        assert not result.errors, result.errors[:1]

    _parallel(one, len(work), threads)
    return sum(b.num_rows for b in buf.drain_batches())


def run_fastavro(schema: pa.Schema, writer: dict[str, object], work: list[dict[str, object]], threads: int) -> int:
    import fastavro

    parsed = fastavro.parse_schema(writer)
    rows = [0] * len(work)

    def one(i: int) -> None:
        records = [fastavro.schemaless_reader(io.BytesIO(v), parsed, None) for v in work[i]["values"]]
        rows[i] = pa.Table.from_pylist(records, schema=schema).num_rows

    _parallel(one, len(work), threads)
    return sum(rows)


AVRO_SYSTEMS = {"fastavro": run_fastavro, "frazil-native-avro": run_native_avro}


def protobuf_work(schema: pa.Schema, work: list[dict[str, object]]) -> tuple[str, list[dict[str, object]]]:
    """The same records as Protobuf messages of one proto3 message in the Confluent wire format
    (schema id 1, message indexes [0]), encoded by ``frazil_dev.protowire`` before timing."""
    from frazil_dev import protowire

    encode = protowire.encoder(schema)
    out = []
    for c in work:
        values = [b"\x00\x00\x00\x00\x01\x00" + encode(json.loads(v))
                  for v in c["values"]]   # type: ignore[attr-defined]
        out.append({**c, "values": values})
    return protowire.proto_of(schema), out


def run_native_protobuf(schema: pa.Schema, proto: str, work: list[dict[str, object]], threads: int) -> int:
    """``values.format = "protobuf-confluent"``: each message read into JSON natively, then decoded."""
    schemas = _native.ProtoSchemas()
    schemas.register(1, proto)
    buf = _native.JsonBuffer(schema=schema, unknown_fields="reject", protobuf=schemas)

    def one(i: int) -> None:
        c = work[i]
        result = buf.append(topic="bench", partition=i % threads, offsets=c["offsets"],
                            timestamps_ms=c["timestamps_ms"], keys=c["keys"], values=c["values"])
        assert not result.errors, result.errors[0].reason

    _parallel(one, len(work), threads)
    batch = buf.drain()
    return batch.num_rows if batch is not None else 0


class _Change(NamedTuple):
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None


def change_work(values: list[bytes]) -> tuple[pa.Schema, dict[str, object], list[list[_Change]], list[list[_Change]]]:
    """The clickstream rows as Debezium change envelopes (a create, three updates with the old row
    in ``before``, a delete, in turn), as JSON and as Avro datums of one envelope schema (the row
    record defined in ``before``, referred to by ``after``): the keyed table's Arrow schema, the
    Avro writer schema, and the JSON and Avro chunks, built before timing."""
    import fastavro
    from pyiceberg.io.pyarrow import schema_to_pyarrow
    from pyiceberg.schema import Schema
    from pyiceberg.types import DoubleType, LongType, NestedField, StringType, TimestamptzType

    from frazil.iceberg.catalog import META_COLUMNS

    kinds = {"string": StringType(), "int64": LongType(), "double": DoubleType()}
    fields = [NestedField(i + 1, f.name, TimestamptzType() if pa.types.is_timestamp(f.type) else kinds[str(f.type)],
                          required=f.name == "event_id") for i, f in enumerate(CLICKSTREAM)]
    fields += [NestedField(len(fields) + i + 1, n, t, required=r) for i, (n, t, r) in enumerate(META_COLUMNS)]
    table = schema_to_pyarrow(Schema(*fields, identifier_field_ids=[1]))
    row = {**avro_schema(CLICKSTREAM), "name": "Value",
           "fields": [{"name": "event_id", "type": "string"}, *avro_schema(CLICKSTREAM)["fields"][1:]]}   # type: ignore[misc]
    writer = {"type": "record", "name": "Envelope", "fields": [
        {"name": "before", "type": ["null", row], "default": None},
        {"name": "after", "type": ["null", "Value"], "default": None}, {"name": "op", "type": "string"},
        {"name": "ts_ms", "type": ["null", "long"], "default": None}]}
    parsed = fastavro.parse_schema(writer)
    as_json: list[list[_Change]] = []
    as_avro: list[list[_Change]] = []
    for start in range(0, len(values), CHUNK):
        js, av = [], []
        for i, v in enumerate(values[start:start + CHUNK], start):
            r = json.loads(v)
            op = "cuuud"[i % 5]
            change = {"before": None if op == "c" else r, "after": None if op == "d" else r, "op": op, "ts_ms": i}
            js.append(_Change(i, i, None, json.dumps(change).encode()))
            typed = {k: (_parse_ts(x) if k == "event_time" and x else x) for k, x in r.items()}
            out = io.BytesIO()
            fastavro.schemaless_writer(out, parsed, {**change, "before": change["before"] and typed,
                                                     "after": change["after"] and typed})
            av.append(_Change(i, i, None, out.getvalue()))
        as_json.append(js)
        as_avro.append(av)
    return table, writer, as_json, as_avro


def changes_rows(values: list[bytes], repeats: int) -> list[dict[str, object]]:
    """Debezium change envelopes into a keyed table's buffer, one thread: JSON (the change split
    natively, its row decoded) beside Avro (the envelope decoded natively, split with Arrow); rows
    with ``workload = "changes"``, ratios to JSON."""
    from pyiceberg.io.pyarrow import pyarrow_to_schema, schema_to_pyarrow

    from frazil.buffers.avro_changes import AvroChangeBuffer, envelope_schema
    from frazil.buffers.changes import ChangeBuffer
    from frazil.config import DEBEZIUM, ChangesConfig
    from frazil.ingest import avro

    table, writer, as_json, as_avro = change_work(values)
    spec = ChangesConfig(mode="cdc", **DEBEZIUM)
    iceberg = pyarrow_to_schema(table)
    envelope = envelope_schema(iceberg, spec, ["event_id"])
    reader = avro.resolve(writer, envelope, exclude=tuple(f.name for f in table if f.name.startswith("_kafka_")),
                          lenient=frozenset({"", "before."}))
    assert isinstance(reader, avro.Readable), reader

    def json_buffer() -> ChangeBuffer:
        return ChangeBuffer(table, spec, ["event_id"])

    def avro_buffer() -> ChangeBuffer:
        buf = AvroChangeBuffer(table, schema_to_pyarrow(envelope), spec, ["event_id"], confluent=False)
        buf.register(0, reader.writer, reader.reader)
        return buf

    rows = []
    base = None
    for system, make, work in (("frazil-json-changes", json_buffer, as_json),
                               ("frazil-avro-changes", avro_buffer, as_avro)):
        nbytes = sum(len(c.value or b"") for chunk in work for c in chunk)
        times = []
        for _ in range(repeats + 1):   # the first a warm-up
            buf = make()
            started = time.perf_counter()
            for chunk in work:
                assert not buf.append("bench", 0, chunk)
            taken = buf.rows
            times.append(time.perf_counter() - started)
            assert taken == len(values), (system, taken)
        seconds = statistics.median(times[1:])
        row = {"workload": "changes", "system": system, "threads": 1, "records_per_s": round(len(values) / seconds),
               "mb_per_s": round(nbytes / seconds / 1e6, 1), "seconds": round(seconds, 3),
               "avg_record_bytes": round(nbytes / len(values))}
        rows.append(row)
        base = base or row["records_per_s"]
        print(f"{'changes':<12}{system:<22}{1:>4}{row['records_per_s']:>14,}{row['mb_per_s']:>9.1f}"
              f"{row['records_per_s'] / base:>14.1f}x vs JSON", flush=True)
    return rows


def envelope_rows(values: list[bytes], repeats: int) -> list[dict[str, object]]:
    """The clickstream rows into an append table's buffer, one thread: plain JSON beside the same
    rows in Kafka Connect's JSON envelope (``connect_envelope = true``: split natively, record by
    record, then the row decoded); rows with ``workload = "connect-envelope"``, ratios to plain."""
    from frazil.buffers.envelope import EnvelopeBuffer
    from frazil.buffers.record_buffer import RecordBuffer

    kinds = {"string": "string", "int64": "int64", "double": "double"}
    schema = {"type": "struct", "optional": False, "name": "bench.Click", "fields": [
        {"field": f.name, "optional": True, "type": kinds.get(str(f.type), "string")} for f in CLICKSTREAM]}
    plain = [[_Change(i, 0, None, v) for i, v in enumerate(values[start:start + CHUNK], start)]
             for start in range(0, len(values), CHUNK)]
    wrapped = [[c._replace(value=b'{"schema":%s,"payload":%s}' % (json.dumps(schema).encode(), c.value))
                for c in chunk] for chunk in plain]
    rows = []
    base = None
    for system, kind, work in (("frazil-json", RecordBuffer, plain), ("frazil-connect-envelope", EnvelopeBuffer,
                                                                       wrapped)):
        nbytes = sum(len(c.value or b"") for chunk in work for c in chunk)
        times = []
        for _ in range(repeats + 1):   # the first a warm-up
            buf = kind(CLICKSTREAM, metadata_columns=False)
            started = time.perf_counter()
            for chunk in work:
                assert not buf.append("bench", 0, chunk)
            times.append(time.perf_counter() - started)
            assert buf.rows == len(values), (system, buf.rows)
        seconds = statistics.median(times[1:])
        row = {"workload": "connect-envelope", "system": system, "threads": 1,
               "records_per_s": round(len(values) / seconds), "mb_per_s": round(nbytes / seconds / 1e6, 1),
               "seconds": round(seconds, 3), "avg_record_bytes": round(nbytes / len(values))}
        rows.append(row)
        base = base or row["records_per_s"]
        print(f"{'envelope':<12}{system:<24}{1:>4}{row['records_per_s']:>14,}{row['mb_per_s']:>9.1f}"
              f"{row['records_per_s'] / base:>14.2f}x vs plain JSON", flush=True)
    return rows


def _parse_ts(text: str) -> object:
    import datetime as dt

    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


def _parallel(fn: Callable[[int], None], n: int, threads: int) -> None:
    if threads == 1:
        for i in range(n):
            fn(i)
        return
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(fn, range(n)))


SYSTEMS: dict[str, Callable[[pa.Schema, list[dict[str, object]], int], int]] = {
    "frazil-native": run_native,
    # the table options that cost decode time, against the plain native rate in the same run
    "native-fold-case": lambda schema, work, threads: run_native(schema, work, threads, fold_case=True),
    "native-1pct-bad": lambda schema, work, threads: run_native(schema, work, threads, bad_every=BAD_EVERY),
    "native-json-schema": lambda schema, work, threads: run_native(schema, work, threads, framed=True),
    "native-transforms": lambda schema, work, threads: run_native(schema, work, threads,
                                                                  transforms=keep_all_transforms(schema)),
    "pyarrow-json": run_pyarrow_json,
    "json-loads": run_json_loads,
}


def measure(system: str, schema: pa.Schema, work: list[dict[str, object]], threads: int, total: int, nbytes: int,
            repeats: int) -> dict[str, object]:
    fn = SYSTEMS[system]
    assert fn(schema, work[:2], threads) > 0  # warm-up
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        rows = fn(schema, work, threads)
        times.append(time.perf_counter() - started)
        assert rows == total, (system, rows, total)
    seconds = statistics.median(times)
    return {"system": system, "threads": threads, "records_per_s": round(total / seconds),
            "mb_per_s": round(nbytes / seconds / 1e6, 1), "seconds": round(seconds, 3),
            "spread": round((max(times) - min(times)) / seconds, 3)}


def contention() -> list[dict[str, object]]:
    """The contention example's rows (lock-free shards vs a mutex per shard), printed as a table."""
    command = ["cargo", "run", "--release", "-q", "-p", "frazil-native", "--no-default-features",
               "--example", "contention", "--", "--json"]
    out = subprocess.run(command, cwd=Path(__file__).resolve().parent.parent, check=True, capture_output=True,
                         text=True).stdout
    rows: list[dict[str, object]] = [{"workload": "contention", **row} for row in json.loads(out)]
    print(f"\n{'contention':<12}{'shards':>7}{'threads':>8}{'lock-free op/s':>16}{'mutex op/s':>14}{'ratio':>8}")
    for row in rows:
        print(f"{'':<12}{row['shards']:>7}{row['threads']:>8}{row['lock_free_ops_per_s']:>16,}"
              f"{row['mutex_ops_per_s']:>14,}{row['ratio']:>7.2f}x", flush=True)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000, help="clickstream records (wide: a quarter)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-contention", action="store_true", help="skip the shard contention bench (cargo)")
    args = parser.parse_args()
    workloads = {
        "clickstream": (CLICKSTREAM, sample_events(args.records)),
        "wide": (wide_schema(), wide_records(args.records // 4)),
    }
    rows: list[dict[str, object]] = []
    print(f"{'workload':<12}{'system':<18}{'threads':>8}{'records/s':>14}{'MB/s':>9}{'vs json-loads':>15}", flush=True)
    for workload, (schema, values) in workloads.items():
        work = chunks(values)
        with_bad_values(work, BAD_EVERY, schema)
        with_folded_values(work, schema)
        with_framed_values(work)
        nbytes = sum(len(v) for v in values)
        for threads in (1, 2):
            base = None
            for system in ("json-loads", "pyarrow-json", "frazil-native", "native-fold-case", "native-1pct-bad",
                           "native-json-schema", "native-transforms"):
                row = {"workload": workload, "avg_record_bytes": round(nbytes / len(values)),
                       **measure(system, schema, work, threads, len(values), nbytes, args.repeats)}
                rows.append(row)
                base = base or row["records_per_s"]
                print(f"{workload:<12}{system:<18}{threads:>8}{row['records_per_s']:>14,}{row['mb_per_s']:>9.1f}"
                      f"{row['records_per_s'] / base:>14.1f}x", flush=True)
    for workload, (schema, values) in workloads.items():
        writer, work = avro_work(schema, chunks(values))
        nbytes = sum(len(v) for c in work for v in c["values"])   # type: ignore[attr-defined]
        for threads in (1, 2):
            base = None
            for system, fn in AVRO_SYSTEMS.items():
                SYSTEMS[system] = lambda s, w, t, fn=fn, writer=writer: fn(s, writer, w, t)   # type: ignore[misc]
                row = {"workload": f"{workload}-avro", "avg_record_bytes": round(nbytes / len(values)),
                       **measure(system, schema, work, threads, len(values), nbytes, args.repeats)}
                rows.append(row)
                base = base or row["records_per_s"]
                print(f"{workload + '-avro':<17}{system:<19}{threads:>8}{row['records_per_s']:>14,}"
                      f"{row['mb_per_s']:>9.1f}{row['records_per_s'] / base:>14.1f}x vs fastavro", flush=True)
    for workload, (schema, values) in workloads.items():
        proto, work = protobuf_work(schema, chunks(values))
        nbytes = sum(len(v) for c in work for v in c["values"])   # type: ignore[attr-defined]
        for threads in (1, 2):
            SYSTEMS["frazil-native-protobuf"] = lambda s, w, t, proto=proto: run_native_protobuf(s, proto, w, t)
            row = {"workload": f"{workload}-protobuf", "avg_record_bytes": round(nbytes / len(values)),
                   **measure("frazil-native-protobuf", schema, work, threads, len(values), nbytes, args.repeats)}
            rows.append(row)
            json_rate = next(r["records_per_s"] for r in rows if r["workload"] == workload
                             and r["system"] == "frazil-native" and r["threads"] == threads)
            print(f"{workload + '-protobuf':<17}{'frazil-native-protobuf':<23}{threads:>4}{row['records_per_s']:>14,}"
                  f"{row['mb_per_s']:>9.1f}{row['records_per_s'] / json_rate:>14.2f}x vs JSON", flush=True)
    rows += changes_rows(workloads["clickstream"][1], args.repeats)
    rows += envelope_rows(workloads["clickstream"][1], args.repeats)
    if not args.no_contention:
        rows += contention()
    _results.write("native", rows, machine={"cpus": os.cpu_count(), "python": platform.python_version(),
                                            "pyarrow": pa.__version__})
    return 0


if __name__ == "__main__":
    sys.exit(main())
