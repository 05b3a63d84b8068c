"""The demo: the whole path on this machine, from an empty folder to a queried table.

Starts a local Kafka broker, creates a topic, produces sample clickstream events, runs
``frazil run`` as its own process until the table holds every event, prints what landed and a
sample query, and stops everything. Each run starts from a fresh broker and warehouse.

    python -m frazil_dev.demo [--records 200000] [--workdir .run/demo]   # make demo
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.compute as pc

from frazil_dev.kafka_broker import KafkaBroker
from frazil_dev.workload import CLICKSTREAM_COLUMNS, create_topic, produce, progress, sample_events

TOPIC = "clickstream"
PARTITIONS = 6
TABLE = "demo.clickstream"

CONFIG = """\
[pipeline]
name = "demo"
commit_interval_s = 2.0
max_buffer_records = 25000   # small commits, so step 5 has small files to compact

[maintenance]
min_input_files = 2

[kafka]
bootstrap_servers = "{bootstrap}"
topics = ["{topic}"]

[catalog]
name = "frazil"
properties = {{ uri = "sqlite:///warehouse/catalog.db", warehouse = "file://warehouse" }}

[table]
name = "{table}"
metadata_columns = true
partition_by = ["day(event_time)"]
{columns}"""


def main(*, records: int, workdir: Path) -> int:
    from frazil import config as config_mod
    from frazil.iceberg import catalog as iceberg_catalog
    from frazil.iceberg import offsets
    from frazil.status import end_offsets

    # SIGTERM (a CI timeout, systemd) must unwind like Ctrl-C, so the broker is stopped too.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    workdir = workdir.resolve()
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    print(f"frazil demo in {workdir}")
    print("1. starting a local Kafka broker (KRaft, jars from Maven Central, cached)")
    with KafkaBroker.start(workdir / "kafka") as broker:
        print(f"   broker at {broker.bootstrap}")
        config_path = workdir / "frazil.toml"
        config_path.write_text(CONFIG.format(bootstrap=broker.bootstrap, topic=TOPIC, table=TABLE,
                                             columns=CLICKSTREAM_COLUMNS))
        print(f"2. topic {TOPIC} with {PARTITIONS} partitions; producing {records:,} sample events")
        asyncio.run(create_topic(broker.bootstrap, TOPIC, PARTITIONS))
        values = sample_events(records)
        asyncio.run(produce(broker.bootstrap, TOPIC, values, partitions=PARTITIONS))
        ends = asyncio.run(end_offsets(broker.bootstrap, [TOPIC]))
        produced_bytes = sum(len(v) for v in values)

        print(f"3. frazil run --config {config_path.name} (its log: {workdir / 'frazil.log'})")
        cfg = config_mod.load(config_path)
        started = time.monotonic()
        with open(workdir / "frazil.log", "wb") as log_file:
            proc = subprocess.Popen([sys.executable, "-m", "frazil.cli", "run", "--config", str(config_path)],
                                    stdout=log_file, stderr=subprocess.STDOUT)
            try:
                catalog = iceberg_catalog.load(cfg.catalog)
                done = 0
                while done < records:
                    if proc.poll() is not None:
                        print(f"\nfrazil run exited early with status {proc.returncode}; see {workdir / 'frazil.log'}")
                        return 1
                    time.sleep(0.5)
                    try:
                        table = catalog.load_table(TABLE)
                    except Exception:  # noqa: BLE001 - not created yet
                        continue
                    stored = offsets.stored_offsets(table.properties, cfg.pipeline)
                    done = sum(stored.get(tp, 0) for tp in ends)
                    progress("committed", done, records, started)
                elapsed = time.monotonic() - started
                print("4. frazil status, while it runs (last commit, offsets, lag, the group, the coordinator)")
                status = subprocess.run([sys.executable, "-m", "frazil.cli", "status", "--config", str(config_path)],
                                        capture_output=True, text=True)
                for line in (status.stdout + status.stderr).splitlines():
                    print(f"   {line}")
                ok_status = status.returncode == 0
            finally:
                proc.send_signal(signal.SIGTERM)
                proc.wait(timeout=60)

        table = catalog.load_table(TABLE)
        data = table.scan().to_arrow()
        files = list(table.inspect.files().column("file_path"))
        rows = data.num_rows
        distinct = len(set(zip(data.column("_kafka_partition").to_pylist(), data.column("_kafka_offset").to_pylist(),
                               strict=True)))
        print("5. result")
        print(f"   events produced     {records:,}")
        print(f"   rows in {TABLE}  {rows:,}  ({distinct:,} distinct (partition, offset))")
        print(f"   snapshots           {len(table.snapshots())}")
        print(f"   data files          {len(files)}")
        print(f"   throughput          {records / elapsed:,.0f} records/s, {produced_bytes / elapsed / 1e6:.1f} MB/s "
              f"({elapsed:.1f}s from start to all committed, including start-up)")
        stored_after_run = table.properties.get(offsets.property_key(cfg.pipeline))
        print(f"   stored offsets      {stored_after_run}")
        print("6. frazil compact: Spark rewrites the small files while the offsets stay (starting Spark, ~10 s)")
        compact = subprocess.run([sys.executable, "-m", "frazil.cli", "compact", "--config", str(config_path)],
                                 capture_output=True, text=True)
        with open(workdir / "frazil.log", "a") as log_file:
            log_file.write(compact.stdout + compact.stderr)
        table = catalog.load_table(TABLE)
        after = table.inspect.files().num_rows
        same = (table.scan(selected_fields=("_kafka_offset",)).to_arrow().num_rows == rows
                and table.properties.get(offsets.property_key(cfg.pipeline)) == stored_after_run)
        print(f"   data files          {len(files)} -> {after}"
              + ("" if compact.returncode == 0 else f"  (compaction FAILED, see {workdir / 'frazil.log'})"))
        print(f"   rows and offsets    {'unchanged' if same else 'CHANGED'}")
        ok_compact = compact.returncode == 0 and same
        print("7. sample query: purchases and revenue by country, from the Iceberg table")
        purchases = table.scan(row_filter="event_type == 'purchase'", selected_fields=("country", "price")).to_arrow()
        by_country = purchases.group_by("country").aggregate([("price", "count"), ("price", "sum")]).sort_by(
            [("price_sum", "descending")])
        for row in by_country.slice(0, 5).to_pylist():
            print(f"   {row['country']}  {row['price_count']:>6,} purchases  {row['price_sum']:>12,.2f}")
        by_day = pc.value_counts(pc.strftime(data.column("event_time"), format="%Y-%m-%d")).to_pylist()
        print("   events per day: " + ", ".join(f"{d['values']} {d['counts']:,}"
                                                for d in sorted(by_day, key=lambda d: d["values"])))
        ok = rows == records == distinct and ok_compact and ok_status
        print("8. stopping the broker")
    print(f"demo {'OK' if ok else 'FAILED'}: {rows:,} rows for {records:,} events")
    return 0 if ok else 1


def cli(argv: list[str] | None = None) -> int:
    from frazil import logs

    parser = argparse.ArgumentParser(prog="python -m frazil_dev.demo", description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--workdir", type=Path, default=Path(".run/demo"))
    args = parser.parse_args(argv)
    logs.setup("WARNING")
    return main(records=args.records, workdir=args.workdir)


if __name__ == "__main__":
    sys.exit(cli())
