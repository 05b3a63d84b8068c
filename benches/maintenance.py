"""Table maintenance and Spark bulk writes, measured. Writes ``benches/results/maintenance.json``.

1. Commit latency and metadata size over 1,000 commit cycles, maintenance off and on, one table
   each, on the same small batches. Each cycle commits one batch of clickstream rows with
   frazil's committer (data files, offsets, commit id: the daemon's commit path without Kafka, with
   the daemon's garbage-collector settings). With
   maintenance on, the daemon's own ``Maintainer`` runs beside the commits, as in ``frazil run``:
   expiry whenever a commit reports more than ``max_snapshots``, the full run every
   ``interval_s``. Before each run the disk is settled (``settle``): the "off" run leaves about
   400 MB of files the kernel has not written yet, and its writeback 30 s later fell in the
   second half of the "on" run and slowed those commits alone (last 10 at 1.3-1.5x the first 10,
   against 0.9-1.1x settled; docs/benchmarks.md, "Commit cost").
2. Small files: the table of the "off" run (one file per cycle) before and after one compaction.
3. Bulk writes: the same Arrow batches written as data files in process (pyiceberg) and through
   Spark (``SparkWriter``), unpartitioned and by day; the session is started beforehand.

    python benches/maintenance.py [--cycles 1000] [--bulk-rows 2000000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).parent))

import _results
from _datasets import CLICKSTREAM
from frazil.buffers.record_buffer import RecordBuffer
from frazil.config import CatalogConfig, Column, MaintenanceConfig, TableConfig
from frazil.daemon import tune_gc
from frazil.iceberg import catalog as iceberg_catalog
from frazil.iceberg.committer import Committer
from frazil.iceberg.offsets import Range
from frazil.metrics import Metrics
from frazil.spark import jars, session
from frazil.spark.bulk import SparkWriter
from frazil.spark.jobs import TableJobs
from frazil.spark.maintainer import Maintainer
from frazil.spark.schedule import Job

CATALOG = "bench"
TP = ("clickstream", 0)


def table_config(name: str, partition_by: tuple[str, ...] = ()) -> TableConfig:
    return TableConfig(f"bench.{name}", tuple(Column(n, t, r) for n, t, r in CLICKSTREAM.columns),
                       partition_by=partition_by)


def arrow_rows(table: Any, n: int) -> pa.Table:
    """``n`` clickstream rows decoded by frazil's own buffer, Kafka columns filled."""
    buffer = RecordBuffer(iceberg_catalog.arrow_schema(table), metadata_columns=True)

    class R:
        __slots__ = ("offset", "timestamp", "key", "value")

        def __init__(self, offset: int, value: bytes) -> None:
            self.offset, self.timestamp, self.key, self.value = offset, 1_790_000_000_000, None, value

    values = CLICKSTREAM.generate(n)
    step = 100_000
    for start in range(0, n, step):
        errors = buffer.append(TP[0], TP[1], [R(start + i, v) for i, v in enumerate(values[start:start + step])])
        assert not errors, errors[0]
    data = buffer.drain()
    assert data is not None
    return data


def metadata_size(table: Any) -> dict[str, int]:
    location = urlparse(table.metadata_location).path   # file:///x or, after a Spark commit, file:/x
    folder = Path(location).parent
    files = [p for p in folder.iterdir() if p.is_file() and not p.name.startswith(".")]
    return {"metadata_json_bytes": Path(location).stat().st_size, "metadata_files": len(files),
            "metadata_folder_bytes": sum(p.stat().st_size for p in files), "snapshots": len(table.metadata.snapshots),
            "data_files": table.inspect.files().num_rows}


def dirty_mb() -> float | None:
    """The page cache's data not yet written to disk (Linux), in MiB."""
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("Dirty:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def settle() -> None:
    """Write the page cache's dirty data out now, so an earlier run's writeback does not fall inside the next
    run's timings."""
    before = dirty_mb()
    started = time.monotonic()
    os.sync()
    print(f"    disk settled: {before if before is not None else float('nan'):.0f} MiB written out in "
          f"{time.monotonic() - started:.1f}s", flush=True)


async def commit_cycles(catalog: Any, cfg: TableConfig, batch: pa.Table, cycles: int,
                        maintenance: MaintenanceConfig | None, spark_settings: dict[str, str]) -> dict[str, Any]:
    table = iceberg_catalog.ensure_table(catalog, cfg, iceberg_catalog.maintenance_properties(maintenance)
                                         if maintenance else None)
    committer = Committer(catalog, cfg.name, "bench")
    maintainer: Maintainer | None = None
    stop = asyncio.Event()
    task = None
    if maintenance is not None:   # the daemon's own service, as `frazil run` builds it
        maintainer = Maintainer.for_table(catalog, cfg.name, maintenance, spark_settings, CATALOG,
                                          Metrics("bench", cfg.name))
        task = asyncio.create_task(maintainer.run(stop))
    commit_ms: list[float] = []
    most_snapshots = 0
    rows = batch.num_rows
    started = time.monotonic()
    for i in range(cycles):
        data = batch.set_column(batch.schema.get_field_index("_kafka_offset"), "_kafka_offset",
                                pa.array(range(i * rows, (i + 1) * rows), pa.int64()))
        files = await asyncio.to_thread(committer.write_files, data)
        result = await asyncio.to_thread(committer.commit_files, files, {TP: Range(i * rows, (i + 1) * rows)},
                                         f"{cfg.name}-{i}")
        commit_ms.append(result.seconds * 1000)
        most_snapshots = max(most_snapshots, result.snapshots)
        if maintainer is not None:
            maintainer.committed(result)
        if (i + 1) % 100 == 0:
            print(f"  {cfg.name}: {i + 1}/{cycles} cycles, last commit {commit_ms[-1]:.0f} ms, "
                  f"{result.snapshots} snapshots", flush=True)
    elapsed = time.monotonic() - started
    stop.set()
    runs: list[Any] = []
    if task is not None and maintainer is not None:
        await task
        runs = [[{"job": r.job.value, "seconds": round(r.seconds, 2), **r.counts} for r in run]
                for run in maintainer.runs]
    table = catalog.load_table(cfg.name)
    assert table.scan(selected_fields=("_kafka_offset",)).to_arrow().num_rows == cycles * rows, "rows lost"
    return {
        "maintenance": maintenance is not None, "cycles": cycles, "rows_per_cycle": rows, "seconds": round(elapsed, 1),
        "commit_ms_first10": round(statistics.mean(commit_ms[:10]), 1),
        "commit_ms_last10": round(statistics.mean(commit_ms[-10:]), 1),
        "commit_ms_p50": round(statistics.median(commit_ms), 1),
        "commit_ms_p95": round(sorted(commit_ms)[int(0.95 * len(commit_ms))], 1),
        "commit_ms_max": round(max(commit_ms), 1),
        "commit_ms_by_100": [round(statistics.mean(commit_ms[i:i + 100]), 1) for i in range(0, len(commit_ms), 100)],
        **metadata_size(table), "snapshots_max": most_snapshots,
        "maintenance_runs": len(runs), "maintenance_jobs": sum(len(r) for r in runs),
    }


def bulk_writes(catalog: Any, spark_settings: dict[str, str], rows: int) -> list[dict[str, Any]]:
    out = []
    writer = SparkWriter(spark_settings, CATALOG)
    for name, partition_by in (("bulk_flat", ()), ("bulk_by_day", ("day(event_time)",))):
        table = iceberg_catalog.ensure_table(catalog, table_config(name, partition_by))
        data = arrow_rows(table, rows)
        committer = Committer(catalog, f"bench.{name}", "bench")
        writer.write(table, data.slice(0, 1000), f"warm-{name}")  # Spark's first job pays class loading
        for label, write in (("in-process", lambda committer=committer, data=data: committer.write_files(data)),
                             ("spark", lambda table=table, data=data, name=name:
                              writer.write(table, data, f"{name}-{time.monotonic_ns()}"))):
            started = time.monotonic()
            files = write()
            seconds = time.monotonic() - started
            assert sum(f.record_count for f in files) == rows
            out.append({"table": name, "writer": label, "rows": rows, "seconds": round(seconds, 2),
                        "rows_per_s": round(rows / seconds), "files": len(files),
                        "bytes": sum(f.file_size_in_bytes for f in files)})
            print(f"  bulk {name} {label}: {rows / seconds:,.0f} rows/s ({len(files)} files)", flush=True)
    return out


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="frazil-maint-"))
    try:
        props = CatalogConfig(CATALOG, {"type": "sql", "uri": f"sqlite:///{root}/catalog.db", "warehouse": f"file://{root}"})
        catalog = iceberg_catalog.load(props)
        catalog.create_namespace("bench")
        spark_settings = session.conf(CATALOG, props.properties, jars=jars.jars(), master=args.master)
        first = iceberg_catalog.ensure_table(catalog, table_config("sample"))
        batch = arrow_rows(first, args.rows_per_cycle)
        tune_gc()   # as `frazil run` does once started: full collections then skip what start-up built
        maintenance = MaintenanceConfig(interval_s=args.interval_s, max_snapshots=args.max_snapshots, min_input_files=5)
        print(f"1/3 {args.cycles} commit cycles of {args.rows_per_cycle} rows, maintenance off", flush=True)
        settle()
        off = await commit_cycles(catalog, table_config("off"), batch, args.cycles, None, spark_settings)
        print(f"    commit ms first10 {off['commit_ms_first10']}, last10 {off['commit_ms_last10']}", flush=True)
        print(f"1/3 {args.cycles} commit cycles, maintenance on (max_snapshots={args.max_snapshots}, "
              f"interval_s={args.interval_s:g}, Spark {args.master})", flush=True)
        settle()
        on = await commit_cycles(catalog, table_config("on"), batch, args.cycles, maintenance, spark_settings)
        print(f"    commit ms first10 {on['commit_ms_first10']}, last10 {on['commit_ms_last10']}", flush=True)

        print("2/3 compaction of the maintenance-off table", flush=True)
        jobs = TableJobs(session.get(spark_settings), CATALOG, "bench.off", MaintenanceConfig(min_input_files=5))
        before = catalog.load_table("bench.off").inspect.files().num_rows
        compact = jobs.one(Job.COMPACT)
        after = catalog.load_table("bench.off").inspect.files().num_rows
        compaction = {"files_before": before, "files_after": after, "seconds": round(compact.seconds, 1),
                      **compact.counts}
        print(f"    {before} -> {after} data files in {compact.seconds:.1f}s", flush=True)

        print(f"3/3 bulk writes of {args.bulk_rows:,} rows, in process and through Spark", flush=True)
        bulk = bulk_writes(catalog, spark_settings, args.bulk_rows)
    finally:
        session.stop()
        shutil.rmtree(root, ignore_errors=True)
    return {"commit_ms_first10": on["commit_ms_first10"], "commit_ms_last10": on["commit_ms_last10"],
            "maintenance_on": on, "maintenance_off": off, "compaction": compaction, "bulk_write": bulk,
            "machine": {"cpus": os.cpu_count(), "spark_master": args.master}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=1000)
    parser.add_argument("--rows-per-cycle", type=int, default=1000)
    parser.add_argument("--max-snapshots", type=int, default=100)
    parser.add_argument("--interval-s", type=float, default=60.0)
    parser.add_argument("--bulk-rows", type=int, default=2_000_000)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--out", default="maintenance")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("frazil.spark").setLevel(logging.INFO)
    result = asyncio.run(main_async(args))
    rows = [{"run": "maintenance off",
             **{k: v for k, v in result["maintenance_off"].items() if k != "commit_ms_by_100"}},
            {"run": "maintenance on",
             **{k: v for k, v in result["maintenance_on"].items() if k != "commit_ms_by_100"}}]
    _results.write(args.out, rows, **result)
    print(json.dumps({k: result[k] for k in ("commit_ms_first10", "commit_ms_last10", "compaction")}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
