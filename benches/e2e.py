"""End to end: frazil against its peers on the same data, broker, catalog and commit interval.

One run, one real Kafka broker, one SQLite Iceberg catalog. For each workload a 12-partition
topic is pre-filled with a seeded dataset; then each system lands every record in its own
table, started as its own process, while this harness polls the catalog:

- ``frazil``: ``frazil run`` with a config naming the topic and table;
- ``spark-ss``: Spark Structured Streaming, Kafka source to the Iceberg sink, checkpointed,
  ``local[2]`` (benches/e2e_systems/spark_ss.py);
- ``plain-python``: aiokafka ``getmany``, ``json.loads``, pyarrow, pyiceberg ``append`` with
  offsets in the snapshot summary (benches/e2e_systems/plain_python.py);
- ``kafka-connect``: the Apache Iceberg Kafka Connect sink in a standalone Connect worker, from
  Maven Central jars (benches/e2e_systems/kafka_connect.py);
- ``ceiling-fetch`` / ``ceiling-consume`` / ``ceiling-parquet``: what this machine does at best
  for the two halves of the job: fetch the topic with Kafka's own consumer performance tool (the
  broker's fetch ceiling), consume it with the same client as frazil, and write the same Arrow
  data to Parquet.

Each pre-filled topic is flushed to disk (``sync``) before the first system is timed. Throughput
is counted from process launch until the catalog shows every record (start-up included, as a
user waiting for a backfill sees it), then the table is read back and every (partition, offset)
must be there exactly once. The keyed workload (``upsert``: changes to a tenth as many keys, one
in ten a tombstone, landed as frazil's upsert table) is timed until the table's committed
offsets reach the topic's end, and its table must equal the latest change of each key; Spark's
MERGE INTO on the same kind of stream is benches/upsert.py's. A run shorter than 20 s is noisy
on a 2-core machine shared with the broker (the same code measured 396k and 524k rec/s an hour
apart), so any system's run that short is repeated, each time into a new table with a new
consumer group, and the median of ``--repeat`` runs (3) is reported, every run's rate beside it
and the highest peak RSS of them; longer runs are measured once. Memory is the peak RSS of the
process tree, CPU the user + system seconds of the tree. A second phase produces at a steady
rate into a fresh topic while each system runs and measures produce-to-queryable latency per
record: the commit time of the snapshot that added the record's file minus the record's Kafka
timestamp.

Writes ``benches/results/e2e.json`` and ``benches/results/e2e.png`` (``--out`` names them otherwise).

    python benches/e2e.py [--records N] [--wide-records N] [--systems ...] [--workloads ...]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

import _datasets
import _dev  # noqa: F401 - dev/ on the path, for frazil_dev
import _profile
import _results
from _procmon import TreeMonitor
from frazil.status import end_offsets
from frazil_dev.kafka_broker import KafkaBroker
from frazil_dev.schema_registry import SchemaRegistry
from frazil_dev.workload import create_topic, produce

HERE = Path(__file__).resolve().parent
PARTITIONS = 12
CATALOG = "frazil"
SYSTEMS = ("frazil", "spark-ss", "plain-python", "kafka-connect")
CEILINGS = ("ceiling-fetch", "ceiling-consume", "ceiling-parquet")
FLOOR = "floor"   # the same work as frazil's, CPU only: fetch tool + native decode + Parquet write
FETCH_FLOOR_RUNS = 3
FLOOR_RUNS = 3   # of the floor's decode and write, the median of each
SHORT_RUN_S = 20.0   # runs shorter than this are repeated (--repeat) and their median reported
FRAZIL_CONFIG = """\
[pipeline]
name = "{name}"
commit_interval_s = {interval}
{pipeline}[kafka]
bootstrap_servers = "{bootstrap}"
{source}
[catalog]
name = "{catalog}"
properties = {{ uri = "{uri}", warehouse = "{warehouse}" }}
{tables}
"""
DYNAMIC = """[dynamic]
table = "{table}_{{topic}}"
partition_by = {partition_by}
{columns}
"""
TOPIC_PARTITIONS = 2   # of each topic of a many-topic dataset
# a keyed dataset's table: each change replaces its key's row, a tombstone deletes it
KEYED = """mode = "upsert"
identifier_columns = ["id"]
tombstones = "delete"
"""
TABLE = """[{section}]
name = "{table}"
partition_by = {partition_by}
{route}{columns}
"""


def topic_names(base: str, dataset: _datasets.Dataset) -> list[str]:
    """The topics of a many-topic dataset (``base`` alone for one)."""
    return [f"{base}-{i:03d}" for i in range(dataset.topics)] if dataset.topics > 1 else [base]


def dynamic_table(base: str, topic: str) -> str:
    """The table frazil's ``[dynamic] table = "<base>_{topic}"`` names for ``topic``."""
    return f"{base}_{re.sub(r'[^a-z0-9_]', '_', topic.lower())}"


def routed_tables(base: str, workload: _datasets.Workload) -> list[tuple[str, str]]:
    """(table, route value) per table of a routed workload."""
    assert workload.routes is not None
    return [(f"{base}_{value.lower()}", value) for value in workload.routes[1]]


class Bench:
    def __init__(self, workdir: Path, bootstrap: str, interval: float, *, profile: bool = False,
                 baseline: str | None = None) -> None:
        self.profile = profile
        self.baseline = baseline   # the interpreter of another frazil install ("frazil-baseline")
        self.registry: SchemaRegistry | None = None   # a real schema registry, when a workload needs one
        self.changes: dict[str, Any] = {}   # topic: what a keyed dataset produced there (upsert.Changes)
        self._seen: dict[str, tuple[str, int]] = {}   # table: (metadata location, records) at the last look
        self._fetch_cpu: dict[str, float] = {}   # topic: the fetch tool's CPU s per million records
        self.workdir = workdir
        self.bootstrap = bootstrap
        self.interval = interval
        self.props = {"type": "sql", "uri": f"sqlite:///{workdir}/warehouse/catalog.db",
                      "warehouse": f"file://{workdir}/warehouse"}
        (workdir / "warehouse").mkdir(parents=True, exist_ok=True)
        from pyiceberg.catalog import load_catalog

        self.catalog = load_catalog(CATALOG, **self.props)

    # -- one system, one table ------------------------------------------------------------------

    def job(self, system: str, workload: _datasets.Workload, topic: str, records: int, run: int = 0) -> dict[str, Any]:
        """A system's job on ``topic``; a repeated ``run`` gets its own table, group and checkpoint."""
        name = f"{system}_{workload.name}_{topic}".replace("-", "_") + (f"_r{run}" if run else "")
        return {"system": system, "workload": workload.name, "name": name, "bootstrap": self.bootstrap,
                "topic": topic, "records": records, "interval_s": self.interval, "catalog_name": CATALOG,
                "catalog_properties": self.props, "table": f"bench.{name}",
                "partition_by": list(workload.partition_by), "day_partitions": workload.day_columns(),
                "spark_ddl": workload.dataset.spark_ddl(),
                "arrow_schema": base64.b64encode(workload.dataset.arrow_schema().serialize().to_pybytes()).decode(),
                "checkpoint": str(self.workdir / "checkpoints" / name), "workdir": str(self.workdir),
                "keyed": workload.dataset.changes is not None,
                "tables": ([t for t, _ in routed_tables(f"bench.{name}", workload)] if workload.routes
                           else [dynamic_table(f"bench.{name}", t) for t in topic_names(topic, workload.dataset)]
                           if workload.dataset.topics > 1 else None)}

    def write_job(self, job: dict[str, Any]) -> Path:
        path = self.workdir / f"{job['name']}.json"
        path.write_text(json.dumps(job))
        return path

    @staticmethod
    def env() -> dict[str, str]:
        """The environment of a system's process: benches/ importable (for _datasets)."""
        return {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}

    def env_of(self, system: str) -> dict[str, str]:
        """A baseline frazil runs from its own install: nothing of this checkout on its path."""
        if system == "frazil-baseline":
            return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        return self.env()

    def command(self, job: dict[str, Any], workload: _datasets.Workload) -> list[str]:
        path = self.write_job(job)
        system = job["system"]
        if system in ("frazil", "frazil-baseline"):
            config = self.workdir / f"{job['name']}.toml"
            common = {"partition_by": json.dumps(job["partition_by"]), "columns": workload.dataset.columns_toml()}
            source = f'topics = ["{job["topic"]}"]'
            if workload.dataset.topics > 1:
                source = f'topic_pattern = "{job["topic"]}-[0-9]+"'
                tables = DYNAMIC.format(table=job["table"], **common)
            elif workload.routes is None:
                tables = TABLE.format(section="table", table=job["table"], route=KEYED if job["keyed"] else "",
                                      **common)
            else:
                tables = "".join(TABLE.format(section="[tables]", table=table,
                                              route=f'route_field = "{workload.routes[0]}"\nroute = "{value}"\n',
                                              **common)
                                 for table, value in routed_tables(job["table"], workload))
            if workload.dataset.registry:
                assert self.registry is not None
                tables = (f'[values]\nformat = "avro-confluent"\n[schema_registry]\nurl = "{self.registry.url}"\n'
                          + tables)
            elif workload.dataset.avro is not None:
                schema_file = self.workdir / f"{workload.dataset.name}.avsc"
                schema_file.write_text(json.dumps(workload.dataset.avro))
                tables = f'[values]\nformat = "avro"\nschema_file = "{schema_file}"\n' + tables
            # bad records to the dead-letter topic: the pipeline goes on
            pipeline = 'on_bad_record = "dead_letter"\n' if workload.dataset.bad_every else ""
            config.write_text(FRAZIL_CONFIG.format(
                name=job["name"], interval=self.interval, bootstrap=self.bootstrap, source=source,
                pipeline=pipeline, catalog=CATALOG, uri=self.props["uri"], warehouse=self.props["warehouse"],
                tables=tables))
            python = self.baseline if system == "frazil-baseline" and self.baseline else sys.executable
            return [python, "-m", "frazil.cli", "run", "--config", str(config)]
        script = {"spark-ss": "spark_ss.py", "plain-python": "plain_python.py",
                  "kafka-connect": "kafka_connect.py"}[system]
        return [sys.executable, str(HERE / "e2e_systems" / script), "--job", str(path)]

    def launch(self, job: dict[str, Any], workload: _datasets.Workload) -> tuple[subprocess.Popen[bytes], float]:
        log = open(self.workdir / f"{job['name']}.log", "wb")
        started = time.time()
        proc = subprocess.Popen(self.command(job, workload), stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True, env=self.env_of(job["system"]))
        log.close()
        return proc, started

    def total_records(self, table: str | list[str]) -> int:
        if isinstance(table, list):
            self.look(table)
            return sum(self._seen.get(t, ("", 0))[1] for t in table)
        try:
            snapshot = self.catalog.load_table(table).current_snapshot()
        except Exception:  # noqa: BLE001 - not created yet, or the catalog is busy for a moment
            return 0
        return int(snapshot.summary.get("total-records") or 0) if snapshot else 0

    def committed(self, job: dict[str, Any]) -> int:
        """The records a keyed table's committed offsets cover (its rows are fewer: one per live key)."""
        from frazil.iceberg import offsets

        try:
            table = self.catalog.load_table(job["table"])
        except Exception:  # noqa: BLE001 - not created yet, or the catalog is busy for a moment
            return 0
        return sum(offsets.stored_offsets(table.properties, job["name"]).values())

    def look(self, tables: list[str]) -> None:
        """The record count of each of ``tables`` whose metadata changed since the last look: one
        catalog query a poll, and a load only of what changed, so many tables do not load the machine."""
        import sqlite3

        with sqlite3.connect(f"file:{self.workdir}/warehouse/catalog.db?mode=ro", uri=True) as db:
            where = dict(((ns + "." + name), loc) for ns, name, loc in db.execute(
                "SELECT table_namespace, table_name, metadata_location FROM iceberg_tables"))
        for t in tables:
            if t in where and self._seen.get(t, ("", 0))[0] != where[t]:
                self._seen[t] = (where[t], self.total_records(t))

    def wait_landed(self, proc: subprocess.Popen[bytes], job: dict[str, Any], expect: int, timeout: float) -> float:
        """Poll the catalog until the table holds ``expect`` records; the time it was seen."""
        deadline = time.monotonic() + timeout
        last_print = 0.0
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"{job['system']} exited with {proc.returncode}; see "
                                   f"{self.workdir / job['name']}.log")
            landed = self.committed(job) if job["keyed"] else self.total_records(job.get("tables") or job["table"])
            now = time.time()
            if landed >= expect:
                return now
            if time.monotonic() > deadline:
                raise RuntimeError(f"{job['system']}: {landed:,} of {expect:,} records after {timeout:.0f} s")
            if now - last_print >= 5:
                print(f"    {job['system']}: {landed:,}/{expect:,} landed", flush=True)
                last_print = now
            time.sleep(0.1)

    @staticmethod
    def stop(proc: subprocess.Popen[bytes]) -> None:
        try:
            proc.send_signal(signal.SIGTERM)  # the root only: it stops its own children (a JVM) in order
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        except ProcessLookupError:
            pass
        try:  # anything the process left behind in its session (a JVM)
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def verify(self, table_name: str | list[str], ends: dict[Any, int], bad: int = 0) -> dict[str, Any]:
        """Read the table (or every table of a routed workload, together) back: every (partition,
        offset) below the log end, exactly once, but the ``bad`` records (in the dead-letter topic)."""
        tables = [self.catalog.load_table(t) for t in (table_name if isinstance(table_name, list) else [table_name])]
        got = pa.concat_tables(t.scan(selected_fields=("_kafka_topic", "_kafka_partition", "_kafka_offset")).to_arrow()
                               for t in tables)
        topic = pc.cast(pc.dictionary_encode(got.column("_kafka_topic")).combine_chunks().indices, pa.int64())
        key = pc.add(pc.add(pc.multiply(topic, 1 << 52),
                            pc.multiply(pc.cast(got.column("_kafka_partition"), pa.int64()), 1 << 40)),
                     got.column("_kafka_offset"))
        distinct = pc.count_distinct(key).as_py()
        expect = sum(ends.values()) - bad
        snapshots = sum(1 for t in tables for _ in t.snapshots())
        return {"rows": got.num_rows, "distinct_offsets": distinct, "snapshots": snapshots,
                "exactly_once": got.num_rows == distinct == expect}

    def verify_keyed(self, table_name: str, changes: Any, ends: dict[Any, int]) -> dict[str, Any]:
        """A keyed table read back against the latest change of each key below ``ends`` (computed
        from what the broker acknowledged): every missing, extra, doubled or wrong key counted."""
        import upsert

        found = upsert.verify(self.catalog, table_name, changes.expected(PARTITIONS, ends))
        return {"rows": found["rows"], "expected_rows": found["expected_rows"], "mismatches": found["mismatches"],
                "snapshots": sum(1 for _ in self.catalog.load_table(table_name).snapshots()),
                "exactly_once": found["mismatches"] == 0}

    # -- the two phases --------------------------------------------------------------------------

    def throughput(self, system: str, workload: _datasets.Workload, topic: str, ends: dict[Any, int],
                   nbytes: int, run: int = 0) -> dict[str, Any]:
        records = sum(ends.values())
        bad = workload.dataset.bad(records)
        job = self.job(system, workload, topic, records, run)
        proc, started = self.launch(job, workload)
        monitor = TreeMonitor(proc.pid)
        spy = _profile.record(proc.pid, self.workdir / f"{job['name']}.profile") if self.profile else None
        try:
            landed_at = self.wait_landed(proc, job, records - bad, timeout=1800)
            usage = monitor.stop()
        finally:
            self.stop(proc)
        profile = {}
        if spy is not None:
            spy.wait(timeout=60)
            profile = {"profile": _profile.summarise(self.workdir / f"{job['name']}.profile")}
        seconds = landed_at - started
        check = (self.verify_keyed(job["table"], self.changes[topic], ends) if job["keyed"]
                 else self.verify(job.get("tables") or job["table"], ends, bad))
        if not check["exactly_once"]:
            raise RuntimeError(f"{system} on {workload.name}: not exactly once: {check}")
        return {"system": system, "workload": workload.name, **rates(records, nbytes, seconds),
                **usage, "cpu_s_per_million": round(usage["cpu_s"] * 1e6 / records, 1), **check, **profile}

    def ceiling(self, kind: str, workload: _datasets.Workload, topic: str, records: int,
                run: int = 0) -> dict[str, Any]:
        usage, result = self._ceilings(kind.split("-")[1], self.job(kind, workload, topic, records, run))
        return {"system": kind, "workload": workload.name,
                **rates(result["records"], result["bytes"], result["seconds"]), "rss_peak_mb": usage["rss_peak_mb"]}

    def _ceilings(self, kind: str, job: dict[str, Any]) -> tuple[dict[str, float], dict[str, Any]]:
        """Run ``ceilings.py kind`` on ``job``: the usage of its process tree (with any JVM it
        starts), and what it printed."""
        proc = subprocess.Popen([sys.executable, str(HERE / "e2e_systems" / "ceilings.py"), kind,
                                 "--job", str(self.write_job(job))], stdout=subprocess.PIPE, env=self.env())
        monitor = TreeMonitor(proc.pid)
        out, _ = proc.communicate()
        usage = monitor.stop()
        if proc.returncode != 0:
            raise RuntimeError(f"ceilings.py {kind} failed with {proc.returncode}")
        return usage, json.loads(out.decode().strip().splitlines()[-1])

    def _ceiling_cpu(self, kind: str, workload: _datasets.Workload, topic: str, records: int,
                     name: str) -> tuple[float, dict[str, Any]]:
        """The CPU seconds of a ceilings.py run (a job of its own, ``name``), and what it printed."""
        usage, result = self._ceilings(kind, {**self.job(kind, workload, topic, records), "name": name})
        return usage["cpu_s"], result

    def fetch_cpu_per_million(self, workload: _datasets.Workload, topic: str, records: int) -> float:
        """Kafka's fetch tool's CPU per million records of ``topic``: a run over every record less a
        run over a thousand, so the JVM's start and the group join are left out (cached by topic)."""
        if topic not in self._fetch_cpu:
            runs = []
            for i in range(FETCH_FLOOR_RUNS):   # a JVM's start varies by a second of CPU: pairs, the median
                at = f"{len(self._fetch_cpu)}_{i}"
                full, _ = self._ceiling_cpu("fetch", workload, topic, records, f"floor_fetch_{at}")
                start, _ = self._ceiling_cpu("fetch", workload, topic, 1000, f"floor_start_{at}")
                runs.append((full - start) * 1e6 / (records - 1000))
            self._fetch_cpu[topic] = max(0.0, statistics.median(runs))
        return self._fetch_cpu[topic]

    def floor(self, workload: _datasets.Workload, topic: str, records: int,
              fetched: tuple[str, int] | None) -> dict[str, Any]:
        """The same-work floor of a workload, CPU seconds per million records: Kafka's fetch tool
        reading the records (of ``fetched``, a one-topic dataset of the same records, when the
        workload's own records are in many topics), frazil's native decode alone and the Parquet
        write alone, summed."""
        # each part the median of FLOOR_RUNS runs, after a sync and a quiet second: right after a
        # system's runs, one floor run measured the same records' decode at 1.1-1.3 s per million
        # where it takes 0.66 alone (after the routed, dirty and 200-topic runs)
        settle("the systems' writes")
        runs = [self._ceiling_cpu("floor", workload, topic, records, f"floor_{workload.name}_{i}")[1]
                for i in range(FLOOR_RUNS)]
        per_million = lambda s: round(s * 1e6 / records, 2)  # noqa: E731
        row = {"system": "floor", "workload": workload.name, "records": records,
               "decode_cpu_s_per_million": per_million(statistics.median(r["decode_cpu_s"] for r in runs)),
               "write_cpu_s_per_million": per_million(statistics.median(r["write_cpu_s"] for r in runs))}
        fetch_topic, fetch_records = fetched or (topic, records)
        row["fetch_cpu_s_per_million"] = round(self.fetch_cpu_per_million(workload, fetch_topic, fetch_records), 2)
        if fetched is not None:
            row["fetch_measured_on"] = fetch_topic
        row["cpu_s_per_million"] = round(row["fetch_cpu_s_per_million"] + row["decode_cpu_s_per_million"]
                                         + row["write_cpu_s_per_million"], 2)
        return row

    def latency(self, system: str, workload: _datasets.Workload, rate: int, warmup_s: float,
                measure_s: float) -> dict[str, Any]:
        topic = f"steady-{system}"
        asyncio.run(create_topic(self.bootstrap, topic, PARTITIONS))
        values = workload.dataset.generate(int(rate * (warmup_s + measure_s)))
        job = self.job(system, workload, topic, len(values))
        proc, _ = self.launch(job, workload)
        monitor = TreeMonitor(proc.pid)
        try:
            produce_started = time.time()
            asyncio.run(paced_produce(self.bootstrap, topic, values, rate))
            produce_s = time.time() - produce_started
            self.wait_landed(proc, job, len(values), timeout=600)
            usage = monitor.stop()
        finally:
            self.stop(proc)
        check = self.verify(job["table"], asyncio.run(end_offsets(self.bootstrap, [topic])))
        lat = produce_to_queryable_ms(self.catalog.load_table(job["table"]),
                                      since_ms=(produce_started + warmup_s) * 1000)
        lat.sort()
        pick = lambda q: lat[min(len(lat) - 1, int(q * len(lat)))]  # noqa: E731
        return {"system": system, "workload": f"{workload.name}-steady", "rate_per_s": rate,
                "achieved_rate_per_s": round(len(values) / produce_s), "measured_records": len(lat),
                "latency_p50_ms": pick(0.50), "latency_p99_ms": pick(0.99), "latency_max_ms": lat[-1],
                "rss_peak_mb": usage["rss_peak_mb"], "cpu_s": usage["cpu_s"], **check}


def repeated(measure: Callable[[int], dict[str, Any]], repeat: int) -> dict[str, Any]:
    """One system on one workload: ``measure(run)`` once, or ``repeat`` times when the first run
    was shorter than ``SHORT_RUN_S``; then the median run's row, with every run's rate and the
    highest peak RSS of them (the memory bound holds for every run, not the median one)."""
    rows = [measure(0)]
    if rows[0]["seconds"] < SHORT_RUN_S:
        rows += [measure(run) for run in range(1, repeat)]
    if len(rows) == 1:
        return rows[0]
    row = dict(sorted(rows, key=lambda r: r["records_per_s"])[(len(rows) - 1) // 2])
    row["runs_records_per_s"] = [r["records_per_s"] for r in rows]
    row["rss_peak_mb"] = max(r["rss_peak_mb"] for r in rows)
    return row


def interleaved(measure: Callable[[str, int], dict[str, Any]], systems: tuple[str, ...],
                repeat: int) -> list[dict[str, Any]]:
    """Each of ``systems`` ``repeat`` times, alternating run by run, and each pair in the other
    order the next time (the first run after a pre-fill reads a colder page cache); per system the
    median run's row with every run's rate (as :func:`repeated`)."""
    runs: dict[str, list[dict[str, Any]]] = {s: [] for s in systems}
    for run in range(repeat):
        for system in (systems if run % 2 == 0 else tuple(reversed(systems))):
            row = measure(system, run)
            print(f"    {system} run {run + 1}: {row['records_per_s']:,} rec/s in {row['seconds']} s", flush=True)
            runs[system].append(row)
    out = []
    for rows in runs.values():
        row = dict(sorted(rows, key=lambda r: r["records_per_s"])[(len(rows) - 1) // 2])
        row["runs_records_per_s"] = [r["records_per_s"] for r in rows]
        row["rss_peak_mb"] = max(r["rss_peak_mb"] for r in rows)
        out.append(row)
    return out


def rates(records: int, nbytes: int, seconds: float) -> dict[str, Any]:
    """The throughput fields of a row."""
    return {"records": records, "avg_record_bytes": round(nbytes / records), "seconds": round(seconds, 2),
            "records_per_s": round(records / seconds), "mb_per_s": round(nbytes / seconds / 1e6, 1)}


async def paced_produce(bootstrap: str, topic: str, values: list[bytes], rate: int) -> None:
    """Send ``values`` at ``rate`` per second, in 20 ms ticks on an absolute schedule."""
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, acks="all", enable_idempotence=True)
    await producer.start()
    try:
        per_tick = max(1, rate // 50)
        started = time.monotonic()
        futures = []
        for tick, i in enumerate(range(0, len(values), per_tick)):
            await asyncio.sleep(max(0.0, started + tick * 0.02 - time.monotonic()))
            for j, v in enumerate(values[i:i + per_tick]):
                futures.append(await producer.send(topic, v, key=str(i + j).encode(), partition=(i + j) % PARTITIONS))
        await asyncio.gather(*futures)
    finally:
        await producer.stop()


def produce_to_queryable_ms(table: Any, *, since_ms: float) -> list[int]:
    """Per record produced at or after ``since_ms``: the commit time of the snapshot that added
    its data file minus its Kafka timestamp, in ms."""
    committed_at = {s.snapshot_id: s.timestamp_ms for s in table.snapshots()}
    entries = table.inspect.entries()
    out: list[int] = []
    for snapshot_id, data_file in zip(entries.column("snapshot_id").to_pylist(),
                                      entries.column("data_file").to_pylist(), strict=True):
        if data_file["content"] != 0:
            continue
        path = data_file["file_path"].removeprefix("file://")
        stamps = pq.read_table(path, columns=["_kafka_timestamp"]).column(0).cast(pa.int64()).to_pylist()
        at = committed_at[snapshot_id]
        out += [at - us // 1000 for us in stamps if us // 1000 >= since_ms]
    return out


def prefill(bench: Bench, dataset: _datasets.Dataset, records: int) -> tuple[str, dict[Any, int], int]:
    """The dataset's topic (the prefix of its topics, when several) filled with ``records`` values;
    its end offsets and the values' bytes."""
    topic = f"prefill-{dataset.name}"
    if dataset.changes is not None:
        ids, rows = dataset.changes(records)
        values = _datasets.upsert_values(ids, rows)
    else:
        values = dataset.generate(records)
    if dataset.registry:   # the Confluent wire format: magic byte 0, the schema's id, the datum
        assert bench.registry is not None and dataset.avro is not None
        header = b"\0" + bench.registry.register(f"{topic}-value", dataset.avro).to_bytes(4, "big")
        values = [header + v for v in values]
    topics = topic_names(topic, dataset)
    if dataset.changes is not None:   # each change to partition id % partitions, keyed by its id
        import upsert

        produced = bench.changes[topic] = upsert.Changes()
        asyncio.run(create_topic(bench.bootstrap, topic, PARTITIONS))
        asyncio.run(upsert.produce(bench.bootstrap, topic, PARTITIONS, produced, ids, rows, label=f"pre-fill {topic}"))
    elif len(topics) == 1:
        asyncio.run(create_topic(bench.bootstrap, topic, PARTITIONS))
        asyncio.run(produce(bench.bootstrap, topic, values, partitions=PARTITIONS, label=f"pre-fill {topic}"))
    else:
        asyncio.run(create_topics(bench.bootstrap, topics, TOPIC_PARTITIONS))
        for i, name in enumerate(topics):   # a contiguous share each
            asyncio.run(produce(bench.bootstrap, name, values[i::len(topics)], partitions=TOPIC_PARTITIONS,
                                label=None))
            if (i + 1) % 20 == 0:
                print(f"  pre-fill {topic}-*: {i + 1}/{len(topics)} topics", flush=True)
    settle()
    return topic, asyncio.run(end_offsets(bench.bootstrap, topics)), sum(len(v) for v in values)


async def create_topics(bootstrap: str, topics: list[str], partitions: int) -> None:
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(t, partitions, 1) for t in topics])
    finally:
        await admin.close()


def settle(what: str = "pre-fill", quiet_s: float = 1.0) -> None:
    """``what`` was written flushed to disk, and a quiet second, before anything is timed. The
    broker's new segments stay dirty in the page cache for up to half a minute, and their writeback
    took I/O and CPU from whichever system ran first (wide, 2026-11-26: frazil's first run read 200k
    records in its first 2 s, its next two runs 240-320k in 1.2 s; the same showed in the first
    clickstream run)."""
    began = time.monotonic()
    os.sync()
    time.sleep(quiet_s)
    print(f"  {what} flushed to disk in {time.monotonic() - began - quiet_s:.1f} s", flush=True)


def print_row(row: dict[str, Any]) -> None:
    if row["system"] == FLOOR:
        print(f"  {FLOOR:<16}{row['workload']:<22}cpu {row['cpu_s_per_million']:>6.2f} s/M = fetch "
              f"{row['fetch_cpu_s_per_million']:.2f} + decode {row['decode_cpu_s_per_million']:.2f} + write "
              f"{row['write_cpu_s_per_million']:.2f}", flush=True)
    elif "latency_p50_ms" in row:
        print(f"  {row['system']:<16}{row['workload']:<22} p50 {row['latency_p50_ms']:>6,} ms  p99 "
              f"{row['latency_p99_ms']:>6,} ms  rss {row['rss_peak_mb']:>7,.0f} MiB", flush=True)
    else:
        print(f"  {row['system']:<16}{row['workload']:<22}{row['records_per_s']:>10,} rec/s "
              f"{row['mb_per_s']:>7,.1f} MB/s  rss {row['rss_peak_mb']:>7,.0f} MiB"
              + (f"  cpu {row['cpu_s_per_million']:>6.1f} s/M" if "cpu_s" in row else ""),
              flush=True)
    if "runs_records_per_s" in row:
        print(f"  {'':<16}{'':<22}the median of {len(row['runs_records_per_s'])} runs: "
              + ", ".join(f"{r:,}" for r in row["runs_records_per_s"]) + " rec/s", flush=True)


def ratios(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """frazil's records/s over each other system's, per workload; for latency, the peer's p50
    and p99 over frazil's (above 1 means frazil is faster either way)."""
    out = []
    frazil = {r["workload"]: r for r in rows if r["system"] == "frazil"}
    # the previous code, measured in the same run (--baseline): frazil now over frazil then
    for r in rows:
        f = frazil.get(r["workload"])
        if f is None or r["system"] == "frazil":
            continue
        if r["system"] == FLOOR:   # frazil's CPU per million records over the same work's
            out.append({"workload": r["workload"], "versus": "floor (same work, CPU)",
                        "cpu_over_floor": round(f["cpu_s_per_million"] / r["cpu_s_per_million"], 2)})
        elif "latency_p50_ms" in r:
            out.append({"workload": r["workload"], "versus": r["system"],
                        "p50_ratio": round(r["latency_p50_ms"] / max(f["latency_p50_ms"], 1), 2),
                        "p99_ratio": round(r["latency_p99_ms"] / max(f["latency_p99_ms"], 1), 2)})
        else:
            out.append({"workload": r["workload"], "versus": r["system"],
                        "frazil_over": round(f["records_per_s"] / r["records_per_s"], 2)})
    # routing's cost: frazil into several tables over frazil into one, on the same records
    for name, workload in _datasets.WORKLOADS.items():
        one = next((k for k, w in _datasets.WORKLOADS.items() if w.dataset is workload.dataset and not w.routes
                    and not w.partition_by), None)
        if workload.routes and name in frazil and one in frazil:
            out.append({"workload": name, "versus": f"frazil {one} (one table)",
                        "frazil_over": round(frazil[name]["records_per_s"] / frazil[one]["records_per_s"], 2)})
        # the cost of Avro, bad records, many tables and upserts: over the clean JSON's records/s
        # (an upsert's record is a change: changes/s)
        if workload.dataset.frazil_only and name in frazil and name != "clickstream" and "clickstream" in frazil:
            out.append({"workload": name, "versus": "frazil clickstream (clean JSON)",
                        "frazil_over": round(frazil[name]["records_per_s"] / frazil["clickstream"]["records_per_s"],
                                             2)})
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=2_000_000, help="clickstream records per topic")
    parser.add_argument("--wide-records", type=int, default=500_000)
    parser.add_argument("--interval", type=float, default=2.0, help="commit interval of every system, s")
    parser.add_argument("--systems", nargs="+", default=[*SYSTEMS, *CEILINGS, FLOOR])
    parser.add_argument("--workloads", nargs="+", default=list(_datasets.WORKLOADS))
    parser.add_argument("--rate", type=int, default=5000, help="steady produce rate of the latency phase, /s")
    parser.add_argument("--warmup-s", type=float, default=20.0)
    parser.add_argument("--measure-s", type=float, default=30.0)
    parser.add_argument("--no-latency", action="store_true")
    parser.add_argument("--repeat", type=int, default=3,
                        help=f"runs of a system on a workload when its first is shorter than {SHORT_RUN_S:.0f} s; "
                             "the median is reported")
    parser.add_argument("--out", default="e2e", help="results name: benches/results/<out>.json and .png (a partial "
                                                     "run, e.g. --systems frazil, should not overwrite e2e)")
    parser.add_argument("--baseline", metavar="PYTHON",
                        help="the interpreter of another frazil install (e.g. the previous commit's): measured as "
                             "frazil-baseline on every workload, alternating run by run with this checkout's frazil")
    parser.add_argument("--profile", action="store_true",
                        help="profile frazil with py-spy while it lands each workload; writes e2e_profile.json "
                             "instead of e2e.json (sampling slows the profiled runs)")
    args = parser.parse_args()
    workdir = Path(".run/bench-e2e").resolve()
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    rows: list[dict[str, Any]] = []
    began = time.monotonic()
    if "kafka-connect" in args.systems:  # fetch its jars before anything is timed
        subprocess.run([sys.executable, str(HERE / "e2e_systems" / "kafka_connect.py"), "--fetch"], check=True,
                       stdout=subprocess.DEVNULL)
    with contextlib.ExitStack() as servers:
        broker = servers.enter_context(KafkaBroker.start(workdir / "kafka", heap="1g"))
        bench = Bench(workdir, broker.bootstrap, args.interval, profile=args.profile, baseline=args.baseline)
        if any(_datasets.WORKLOADS[name].dataset.registry for name in args.workloads):
            bench.registry = servers.enter_context(SchemaRegistry.start(workdir / "registry"))
        topics: dict[str, tuple[str, dict[Any, int], int]] = {}
        for name in args.workloads:
            workload = _datasets.WORKLOADS[name]
            dataset = workload.dataset
            if dataset.name not in topics:
                count = args.wide_records if dataset.name == "wide" else args.records
                topics[dataset.name] = prefill(bench, dataset, count)
            topic, ends, nbytes = topics[dataset.name]
            print(f"workload {name}: {sum(ends.values()):,} records, {nbytes / 1e6:,.0f} MB", flush=True)
            if args.baseline:
                # frazil and the baseline alternate run by run, so a slow minute of the machine falls on both
                def alternate(system: str, run: int, workload: _datasets.Workload = workload, topic: str = topic,
                              ends: dict[Any, int] = ends, nbytes: int = nbytes) -> dict[str, Any]:
                    return bench.throughput(system, workload, topic, ends, nbytes, run)

                for row in interleaved(alternate, ("frazil", "frazil-baseline"), args.repeat):
                    rows.append(row)
                    print_row(row)
            for system in args.systems:
                if args.baseline and system == "frazil":
                    continue   # measured above, beside the baseline
                if system == FLOOR:
                    fetched = None
                    if dataset.topics > 1:   # the fetch tool reads one topic: the same records in one
                        if _datasets.CLICKSTREAM.name not in topics:
                            topics[_datasets.CLICKSTREAM.name] = prefill(bench, _datasets.CLICKSTREAM, args.records)
                        one, one_ends, _ = topics[_datasets.CLICKSTREAM.name]
                        fetched = (one, sum(one_ends.values()))
                    row = bench.floor(workload, topic, sum(ends.values()), fetched)
                    rows.append(row)
                    print_row(row)
                    continue
                if workload.frazil_only and system != "frazil":
                    continue
                if system in CEILINGS and (workload.partition_by or workload.dataset.changes):
                    continue  # the same bytes as the unpartitioned workload; tombstones have no value to count

                def measure(run: int, system: str = system, workload: _datasets.Workload = workload,
                            topic: str = topic, ends: dict[Any, int] = ends, nbytes: int = nbytes) -> dict[str, Any]:
                    row = (bench.ceiling(system, workload, topic, sum(ends.values()), run) if system in CEILINGS
                           else bench.throughput(system, workload, topic, ends, nbytes, run))
                    print(f"    {system} run {run + 1}: {row['records_per_s']:,} rec/s in {row['seconds']} s",
                          flush=True)
                    return row

                row = repeated(measure, 1 if args.profile else args.repeat)
                rows.append(row)
                print_row(row)
        if not args.no_latency:
            print(f"steady {args.rate:,} records/s for {args.warmup_s + args.measure_s:.0f} s "
                  f"(latency of the last {args.measure_s:.0f} s)", flush=True)
            for system in (s for s in args.systems if s in SYSTEMS):
                row = bench.latency(system, _datasets.WORKLOADS["clickstream"], args.rate, args.warmup_s,
                                    args.measure_s)
                rows.append(row)
                print_row(row)
    versus = ratios(rows)
    for r in versus:
        print(f"  frazil vs {r['versus']:<16}{r['workload']:<22}" + (
            f"{r['frazil_over']:.2f}x records/s" if "frazil_over" in r
            else f"{r['cpu_over_floor']:.2f}x the CPU" if "cpu_over_floor" in r
            else f"p50 {r['p50_ratio']:.2f}x  p99 {r['p99_ratio']:.2f}x"))
    machine = {"cpus": os.cpu_count(), "python": platform.python_version(), "commit_interval_s": args.interval,
               "partitions": PARTITIONS, "wall_s": round(time.monotonic() - began)}
    if args.profile:
        for row in rows:
            for thread, steps in row.get("profile", {}).items():
                print(f"  {row['system']} {row['workload']} [{thread}]: "
                      + ", ".join(f"{k} {v}s" for k, v in steps.items()))
        _results.write("e2e_profile", rows, machine=machine)
        return 0
    path = _results.write(args.out, rows, ratios=versus, machine=machine)
    import _chart

    _chart.draw(rows, path.with_suffix(".png"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
