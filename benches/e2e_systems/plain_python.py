"""The plain Python peer: what a careful engineer writes first, without frazil.

aiokafka ``getmany`` into a list of dicts (``json.loads`` per record), every commit interval
``pa.Table.from_pylist`` and one pyiceberg ``append`` whose snapshot summary carries the next
offset of each partition; on start it seeks to the offsets of the table's current snapshot, so
a restart neither skips nor repeats. One thread, commits inline. Runs until SIGTERM.

    python benches/e2e_systems/plain_python.py --job job.json
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import signal
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from pyiceberg.catalog import load_catalog
from pyiceberg.exceptions import NamespaceAlreadyExistsError, NoSuchTableError
from pyiceberg.transforms import DayTransform

OFFSETS_KEY = "plain.offsets"


def table_for(job: dict[str, Any], schema: pa.Schema) -> Any:
    catalog = load_catalog(job["catalog_name"], **job["catalog_properties"])
    try:
        return catalog.load_table(job["table"])
    except NoSuchTableError:
        pass
    try:
        catalog.create_namespace(job["table"].split(".")[0])
    except NamespaceAlreadyExistsError:
        pass
    table = catalog.create_table(job["table"], schema=schema, properties={"format-version": "2"})
    if job["day_partitions"]:
        with table.update_spec() as spec:
            for column in job["day_partitions"]:
                spec.add_field(column, DayTransform(), f"{column}_day")
    return table


def build(rows: list[dict[str, Any]], schema: pa.Schema) -> pa.Table:
    raw = pa.Table.from_pylist(rows)
    arrays = []
    for field in schema:
        col = raw.column(field.name) if field.name in raw.column_names else pa.nulls(raw.num_rows)
        arrays.append(pc.cast(col, field.type))  # ISO strings to timestamps, ints to doubles
    return pa.Table.from_arrays(arrays, schema=schema)


async def partitions_of(bootstrap: str, topic: str) -> list[int]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        (desc,) = await admin.describe_topics([topic])
        return sorted(p["partition"] for p in desc["partitions"])
    finally:
        await admin.close()


async def run(job: dict[str, Any]) -> None:
    schema = pa.ipc.read_schema(pa.py_buffer(base64.b64decode(job["arrow_schema"])))
    table = table_for(job, schema)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    consumer = AIOKafkaConsumer(bootstrap_servers=job["bootstrap"], enable_auto_commit=False,
                                auto_offset_reset="earliest", max_partition_fetch_bytes=4 << 20)
    await consumer.start()
    try:
        tps = [TopicPartition(job["topic"], p) for p in await partitions_of(job["bootstrap"], job["topic"])]
        if not tps:
            raise SystemExit(f"topic {job['topic']} has no partitions")
        consumer.assign(tps)
        snapshot = table.current_snapshot()
        stored = json.loads(snapshot.summary.additional_properties.get(OFFSETS_KEY, "{}")) if snapshot else {}
        for tp in tps:
            consumer.seek(tp, stored.get(str(tp.partition), 0))
        rows: list[dict[str, Any]] = []
        next_offsets = {int(k): v for k, v in stored.items()}
        deadline = time.monotonic() + job["interval_s"]
        while not stop.is_set():
            batches = await consumer.getmany(timeout_ms=100, max_records=20_000)
            for tp, messages in batches.items():
                for m in messages:
                    record = json.loads(m.value)
                    record.update(_kafka_topic=m.topic, _kafka_partition=m.partition, _kafka_offset=m.offset,
                                  _kafka_timestamp=m.timestamp * 1000, _kafka_key=m.key)
                    rows.append(record)
                if messages:
                    next_offsets[tp.partition] = messages[-1].offset + 1
            if time.monotonic() >= deadline:
                if rows:
                    table.append(build(rows, schema), snapshot_properties={
                        OFFSETS_KEY: json.dumps({str(p): o for p, o in sorted(next_offsets.items())})})
                    rows = []
                deadline = time.monotonic() + job["interval_s"]
    finally:
        await consumer.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--job", type=Path, required=True)
    asyncio.run(run(json.loads(parser.parse_args().job.read_text())))


if __name__ == "__main__":
    main()
