"""The raw ceilings of this machine for one dataset, each in its own process.

- ``consume``: aiokafka reads every record of the topic and does nothing with it (the bytes are
  counted). frazil consumes with the same client, so this bounds it.
- ``fetch``: Kafka's own consumer performance tool (``org.apache.kafka.tools.ConsumerPerformance``
  from Maven Central's ``kafka-tools`` jar, on the broker's classpath; ``frazil_dev.kafka_tools``)
  reads the topic read_committed with frazil's 4 MiB partition fetch size: the fetch ceiling of a
  Java client on this machine and broker. Its own fetch time is reported (start-up and group join
  left out); bytes are keys plus values.
- ``parquet``: the dataset's Arrow data (built before timing by frazil's native buffer, with the
  Kafka columns) written to Parquet with zstd, the codec pyiceberg and Spark use by default, and
  frazil's own dictionary page limit; median of three writes.

- ``floor``: the same work as frazil's minus the fetch, each part alone in one thread, as CPU
  seconds: the workload's values, as Kafka record batches read natively, decoded straight from
  the fetched bytes by frazil's native buffer (the JSON buffer, or the Avro one with the writer
  schema resolved by frazil), then the Arrow data written to Parquet as ``parquet`` writes it,
  once. With the fetch tool's CPU it is the floor frazil's CPU is held against.

Each prints one JSON line: ``{"seconds": ..., "records": ..., "bytes": ...}`` (``floor`` adds
``decode_cpu_s`` and ``write_cpu_s``).

    python benches/e2e_systems/ceilings.py consume --job job.json
    python benches/e2e_systems/ceilings.py fetch --job job.json
    python benches/e2e_systems/ceilings.py parquet --job job.json
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq


def parquet_options() -> dict[str, Any]:
    """How frazil writes its data files' Parquet: zstd and its own dictionary page limit."""
    from frazil.iceberg.writes import DICTIONARY_PAGE_BYTES

    return {"compression": "zstd", "dictionary_pagesize_limit": DICTIONARY_PAGE_BYTES}


async def consume(job: dict[str, Any]) -> dict[str, Any]:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    from frazil.status import partitions

    consumer = AIOKafkaConsumer(bootstrap_servers=job["bootstrap"], enable_auto_commit=False,
                                auto_offset_reset="earliest", max_partition_fetch_bytes=4 << 20)
    await consumer.start()
    try:
        tps = [TopicPartition(t, p) for t, p in await partitions(job["bootstrap"], [job["topic"]])]
        if not tps:
            raise SystemExit(f"topic {job['topic']} has no partitions")
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        records = nbytes = 0
        started = time.perf_counter()
        while records < job["records"]:
            for messages in (await consumer.getmany(timeout_ms=500, max_records=50_000)).values():
                records += len(messages)
                nbytes += sum(len(m.value) for m in messages)
        return {"seconds": time.perf_counter() - started, "records": records, "bytes": nbytes}
    finally:
        await consumer.stop()


def fetch(job: dict[str, Any]) -> dict[str, Any]:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import _dev  # noqa: F401 - dev/ on the path, for frazil_dev
    from frazil_dev import kafka_tools

    rate = kafka_tools.consume_rate(job["bootstrap"], job["topic"], job["records"], group=job["name"],
                                    workdir=Path(job["workdir"]), timeout_s=600)
    return {"seconds": rate.fetch_s, "records": rate.records, "bytes": int(rate.mb * (1 << 20))}


def parquet(job: dict[str, Any]) -> dict[str, Any]:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import _datasets
    from frazil import _native

    values = _datasets.WORKLOADS[job["workload"]].dataset.generate(job["records"])
    schema = pa.ipc.read_schema(pa.py_buffer(base64.b64decode(job["arrow_schema"])))
    buffer = _native.JsonBuffer(schema=schema, metadata_columns=True, max_bytes=1 << 34)
    chunk = 50_000
    for i in range(0, len(values), chunk):
        part = values[i:i + chunk]
        buffer.append(topic=job["topic"], partition=i % 12, offsets=list(range(i, i + len(part))),
                      timestamps_ms=[0] * len(part), keys=[None] * len(part), values=part)
    table = pa.Table.from_batches(buffer.drain_batches())
    options = parquet_options()
    times = []
    with tempfile.TemporaryDirectory(dir=job["workdir"]) as tmp:
        for i in range(3):
            started = time.perf_counter()
            pq.write_table(table, f"{tmp}/{i}.parquet", **options)
            times.append(time.perf_counter() - started)
    return {"seconds": statistics.median(times), "records": table.num_rows, "bytes": sum(len(v) for v in values)}


def floor(job: dict[str, Any]) -> dict[str, Any]:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import _datasets
    from frazil import _native

    dataset = _datasets.WORKLOADS[job["workload"]].dataset
    values = dataset.generate(job["records"])
    schema = pa.ipc.read_schema(pa.py_buffer(base64.b64decode(job["arrow_schema"])))
    buffer: Any
    if dataset.avro is None:
        buffer = _native.JsonBuffer(schema=schema, metadata_columns=True, max_bytes=1 << 34)
    else:   # as frazil decides it: the reader schema resolved against the table's columns
        from pyiceberg.catalog import Catalog

        from frazil.ingest import avro

        readable = avro.resolve(dataset.avro, Catalog._convert_schema_if_needed(schema),
                                exclude=tuple(n for n, _ in _datasets.META_ARROW))
        assert isinstance(readable, avro.Readable), readable
        buffer = _native.AvroBuffer(schema=schema, confluent=dataset.registry, metadata_columns=True,
                                    max_bytes=1 << 34)
        buffer.register(1 if dataset.registry else 0, readable.writer, readable.reader)
        if dataset.registry:
            values = [b"\0\0\0\0\1" + v for v in values]
    # the values as Kafka record batches read natively, as frazil's fetches are (built before timing)
    from frazil_dev.batches import record_batch

    chunk = 5_000   # about what one partition's fetch holds
    fetches = [(i, _native.read_fetch(record_batch([(i + j, 1_700_000_000_000, None, v, ())
                                                    for j, v in enumerate(values[i:i + chunk])]),
                                      fetch_offset=i, read_committed=True, aborted=[]))
               for i in range(0, len(values), chunk)]
    bad = 0
    started = time.process_time()
    for i, fetched in fetches:   # decoded straight from the fetched bytes, as frazil does
        bad += len(buffer.append_fetched(topic=job["topic"], partition=(i // chunk) % 12, fetched=fetched).errors)
    table = pa.Table.from_batches(buffer.drain_batches())
    decode_cpu = time.process_time() - started
    assert table.num_rows + bad == len(values), (table.num_rows, bad, len(values))
    options = parquet_options()
    with tempfile.TemporaryDirectory(dir=job["workdir"]) as tmp:
        started = time.process_time()
        pq.write_table(table, f"{tmp}/floor.parquet", **options)
        write_cpu = time.process_time() - started
    return {"seconds": decode_cpu + write_cpu, "records": len(values), "bytes": sum(len(v) for v in values),
            "decode_cpu_s": decode_cpu, "write_cpu_s": write_cpu}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kind", choices=["consume", "fetch", "parquet", "floor"])
    parser.add_argument("--job", type=Path, required=True)
    args = parser.parse_args()
    job = json.loads(args.job.read_text())
    kinds = {"consume": lambda job: asyncio.run(consume(job)), "fetch": fetch, "parquet": parquet, "floor": floor}
    result = kinds[args.kind](job)
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
