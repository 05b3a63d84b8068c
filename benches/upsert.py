"""Upserts end to end: frazil's keyed tables, native and merged by Spark, against Spark SS with MERGE INTO.

One run, one real Kafka broker, one SQLite Iceberg catalog, one topic. The workload is a seeded
stream of changes to a fixed set of keys: JSON rows ``{"id", "name", "amount", "version"}`` with
the id as text as the Kafka key, each key always in partition ``id % partitions``, and about one
change in ten a tombstone (a null value: delete the key). The expected final table is the
latest change of each key by offset, computed here from what was produced (the offsets the
broker acknowledged), never from a system's output.

Each system lands the topic in its own table, as its own process, with the same commit
interval, one after the other on the same machine:

- ``frazil``: ``frazil run`` with ``mode = "upsert"``, ``identifier_columns = ["id"]`` and
  ``tombstones = "delete"`` (new rows plus position deletes of the rows they replace, one
  snapshot per cycle); maintenance off, so that nothing compacts the table during the run;
- ``frazil-spark-merge``: the same config plus ``merge = "spark"``, ``merge_interval_s`` the commit
  interval and ``merge_min_changes = 0``: frazil commits each cycle's changes (with the offsets) to
  the staging table ``<table>__changes``, and MERGEs what waits there into ``<table>`` on Spark
  (``local[2]``, started by frazil at its first merge) every interval; the table's merged mark is
  ``frazil.merged.<pipeline>`` (``frazil.spark.merge.merged_mark``). Everything measured below is
  measured on ``<table>``, the target, never on the staging table;
- ``spark-ss-merge``: Spark Structured Streaming, ``local[2]``, ``foreachBatch`` reducing each
  micro-batch to the latest change per key and running ``MERGE INTO`` a format-v2 merge-on-read
  table (benches/e2e_systems/spark_ss_merge.py).

Per system:
1. Throughput: the topic holds the whole backlog before the system starts. ``changes_per_s`` is
   counted from when the system began reading (frazil: its log's "positioned" line; Spark: the
   trigger start of its first batch with input) until the table's committed offsets (frazil's
   ``frazil.offsets.<pipeline>`` table property; with the merge flush, the target's merged mark, so
   the Spark session's start at the first merge is inside it; Spark's checkpoint commit log) reach
   the topic's end offsets, as polled every 0.1 s; ``changes_per_s_from_launch`` counts start-up
   too. With the merge flush, ``staged_s`` is when the staging table's offsets reached them, and
   ``merges`` each merge frazil logged ("N staged change(s) merged in X s").
2. Produce-to-queryable latency, after catch-up: one marker change every ``--marker-every``
   seconds, each an update of an existing key with a version never used before; latency is from
   just before the send until a pyiceberg scan filtered on the markers' ids returns that version
   (the catalog is polled every 0.1 s and scanned when it has a new snapshot). Also the commit
   time of the snapshot that scan read, against the same send time.
3. After a clean stop (SIGTERM): the table scanned by pyiceberg against the expected table
   (missing, extra, duplicated keys, wrong values: counted and reported, never hidden), its read
   cost (live data files, delete files, position deletes; a full pyiceberg scan timed), then the
   same after a Spark compaction of that table (``rewrite_data_files`` with ``min-input-files``
   1, then ``rewrite_position_delete_files`` with ``rewrite-all``), checked again. Spark writes
   the compacted files with the table's ``write.parquet.compression-codec``; a table without it
   gets Iceberg Java's fallback, gzip, where Spark's own new tables get zstd (the codecs of the
   live data files are in ``data_file_codecs``).

Writes ``benches/results/upsert.json`` (``--out`` names it otherwise).

    python benches/upsert.py [--changes N] [--keys N] [--systems frazil frazil-spark-merge spark-ss-merge]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

import _dev  # noqa: F401 - dev/ on the path, for frazil_dev
import _results
from _datasets import UPSERT_COLUMNS, Row
from _datasets import changes as generate
from _datasets import encode_change as encode
from _procmon import TreeMonitor
from e2e_systems.spark_ss_merge import committed_offsets
from frazil.config import STAGING_SUFFIX
from frazil.iceberg import offsets as frazil_offsets
from frazil.spark.merge import merged_key, merged_mark
from frazil.status import end_offsets
from frazil_dev.kafka_broker import KafkaBroker
from frazil_dev.workload import create_topic

HERE = Path(__file__).resolve().parent
CATALOG = "frazil"
SYSTEMS = ("frazil", "frazil-spark-merge", "spark-ss-merge")
FRAZIL_SYSTEMS = ("frazil", "frazil-spark-merge")
COLUMNS = UPSERT_COLUMNS
FRAZIL_CONFIG = """\
[pipeline]
name = "{name}"
commit_interval_s = {interval}
[kafka]
bootstrap_servers = "{bootstrap}"
topics = ["{topic}"]
[catalog]
name = "{catalog}"
properties = {{ uri = "{uri}", warehouse = "{warehouse}" }}
[table]
name = "{table}"
mode = "upsert"
identifier_columns = ["id"]
tombstones = "delete"
{merge}columns = [
{columns}
]
[maintenance]
enabled = false
{spark}"""
# frazil-spark-merge: the merge flush on the interval alone, on a Spark session like the peer's
SPARK_MERGE_TABLE = """\
merge = "spark"
merge_interval_s = {interval}
merge_min_changes = 0
"""
SPARK_MERGE_SPARK = """\
[spark]
master = "local[2]"
conf = { "spark.driver.memory" = "3g", "spark.ui.showConsoleProgress" = "false" }
"""

TopicPartition = tuple[str, int]


# -- the workload ---------------------------------------------------------------------------------

class Changes:
    """Every change produced to the topic, in order, with where the broker put it."""

    def __init__(self) -> None:
        self.keys: list[int] = []
        self.rows: list[Row | None] = []          # None: a tombstone
        self.offsets: list[int] = []              # the broker's offset of each (its partition is key % P)

    def expected(self, partitions: int, ends: dict[TopicPartition, int]) -> dict[int, Row]:
        """The table the changes below ``ends`` give: the latest change of each key by offset
        (each key is in one partition), deletes removed."""
        ends_by_partition = {p: e for (_, p), e in ends.items()}
        latest: dict[int, tuple[int, Row | None]] = {}
        for key, row, offset in zip(self.keys, self.rows, self.offsets, strict=True):
            if offset >= ends_by_partition.get(key % partitions, 0):
                continue
            seen = latest.get(key)
            if seen is None or seen[0] < offset:
                latest[key] = (offset, row)
        return {k: row for k, (_, row) in latest.items() if row is not None}


def progress_line(label: str, done: int, total: int, started: float) -> None:
    rate = done / max(time.monotonic() - started, 1e-9)
    print(f"  {label}: {done:>10,}/{total:,} ({100 * done / max(total, 1):5.1f}%) {rate:>9,.0f}/s", flush=True)


async def produce(bootstrap: str, topic: str, partitions: int, changes: Changes, ids: list[int],
                  rows: list[Row | None], *, label: str | None = None) -> None:
    """Each change to partition ``id % partitions`` with the id as text as its key, waiting for
    every acknowledgement; the broker's offsets go into ``changes``."""
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=20, max_batch_size=512 * 1024,
                                acks="all", enable_idempotence=True)
    await producer.start()
    started = last = time.monotonic()
    try:
        chunk = 5000
        for i in range(0, len(ids), chunk):
            futures = [await producer.send(topic, encode(k, r), key=str(k).encode(), partition=k % partitions)
                       for k, r in zip(ids[i:i + chunk], rows[i:i + chunk], strict=True)]
            metas = await asyncio.gather(*futures)
            changes.keys += ids[i:i + chunk]
            changes.rows += rows[i:i + chunk]
            changes.offsets += [m.offset for m in metas]
            done = min(i + chunk, len(ids))
            if label and (time.monotonic() - last >= 5 or done == len(ids)):
                last = time.monotonic()
                progress_line(label, done, len(ids), started)
    finally:
        await producer.stop()


# -- one system -----------------------------------------------------------------------------------

class Bench:
    def __init__(self, workdir: Path, bootstrap: str, topic: str, partitions: int, interval: float) -> None:
        self.workdir, self.bootstrap, self.topic = workdir, bootstrap, topic
        self.partitions, self.interval = partitions, interval
        self.props = {"type": "sql", "uri": f"sqlite:///{workdir}/warehouse/catalog.db",
                      "warehouse": f"file://{workdir}/warehouse"}
        (workdir / "warehouse").mkdir(parents=True, exist_ok=True)
        from pyiceberg.catalog import load_catalog

        self.catalog = load_catalog(CATALOG, **self.props)
        self.finals: dict[str, dict[TopicPartition, int]] = {}   # per system: the end offsets it landed

    def ends(self) -> dict[TopicPartition, int]:
        return asyncio.run(end_offsets(self.bootstrap, [self.topic]))

    def job(self, system: str, max_offsets_per_trigger: int) -> dict[str, Any]:
        name = f"{system}_upsert".replace("-", "_")
        return {"system": system, "name": name, "bootstrap": self.bootstrap, "topic": self.topic,
                "interval_s": self.interval, "catalog_name": CATALOG, "catalog_properties": self.props,
                "table": f"bench.{name}", "checkpoint": str(self.workdir / "checkpoints" / name),
                "progress": str(self.workdir / f"{name}.progress.jsonl"), "log": str(self.workdir / f"{name}.log"),
                "max_offsets_per_trigger": max_offsets_per_trigger}

    def command(self, job: dict[str, Any]) -> list[str]:
        if job["system"] in FRAZIL_SYSTEMS:
            config = self.workdir / f"{job['name']}.toml"
            columns = ",\n".join(f'  {{ name = "{n}", type = "{t}"{", required = true" if r else ""} }}'
                                 for n, t, r in COLUMNS)
            merging = job["system"] == "frazil-spark-merge"
            config.write_text(FRAZIL_CONFIG.format(
                name=job["name"], interval=self.interval, bootstrap=self.bootstrap, topic=self.topic, catalog=CATALOG,
                uri=self.props["uri"], warehouse=self.props["warehouse"], table=job["table"], columns=columns,
                merge=SPARK_MERGE_TABLE.format(interval=self.interval) if merging else "",
                spark=SPARK_MERGE_SPARK if merging else ""))
            return [sys.executable, "-m", "frazil.cli", "run", "--config", str(config)]
        path = self.workdir / f"{job['name']}.json"
        path.write_text(json.dumps(job))
        return [sys.executable, str(HERE / "e2e_systems" / "spark_ss_merge.py"), "--job", str(path)]

    def launch(self, job: dict[str, Any]) -> tuple[subprocess.Popen[bytes], float]:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
        with open(job["log"], "ab") as log:
            started = time.time()
            proc = subprocess.Popen(self.command(job), stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                    env=env)
        return proc, started

    def committed(self, job: dict[str, Any]) -> dict[TopicPartition, int]:
        """The offsets the system has committed with its table: frazil's table property (with the
        merge flush: the target's merged mark), Spark's checkpoint."""
        if job["system"] == "spark-ss-merge":
            try:
                return committed_offsets(Path(job["checkpoint"]))
            except (OSError, IndexError, ValueError):   # a log entry being written
                return {}
        try:
            table = self.catalog.load_table(job["table"])
        except Exception:  # noqa: BLE001 - not created yet, or the catalog is busy for a moment
            return {}
        if job["system"] == "frazil-spark-merge":
            return merged_mark(table, job["name"])
        return frazil_offsets.stored_offsets(table.properties, job["name"])

    def staged(self, job: dict[str, Any]) -> dict[TopicPartition, int]:
        """With the merge flush: the offsets frazil has committed with the staging table."""
        try:
            table = self.catalog.load_table(job["table"] + STAGING_SUFFIX)
        except Exception:  # noqa: BLE001 - not created yet, or the catalog is busy for a moment
            return {}
        return frazil_offsets.stored_offsets(table.properties, job["name"])

    def wait_committed(self, proc: subprocess.Popen[bytes], job: dict[str, Any], ends: dict[TopicPartition, int],
                       timeout: float) -> tuple[float, tuple[float, int] | None, float | None]:
        """Poll until the committed offsets reach ``ends``: the time seen, (time, changes) of the
        first commit seen, and with the merge flush the time the staging table's offsets were
        seen reaching ``ends`` (else None)."""
        total = sum(ends.values())
        deadline = time.monotonic() + timeout
        first: tuple[float, int] | None = None
        staged_at: float | None = None
        merging = job["system"] == "frazil-spark-merge"
        verb = "merged" if merging else "committed"
        last_print = time.time()
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"{job['system']} exited with {proc.returncode}; see {job['log']}")
            have = self.committed(job)
            now = time.time()
            done = sum(min(have.get(tp, 0), end) for tp, end in ends.items())
            if first is None and done > 0:
                first = (now, done)
            if merging and staged_at is None:
                in_staging = self.staged(job)
                if all(in_staging.get(tp, 0) >= end for tp, end in ends.items()):
                    staged_at = time.time()
            if all(have.get(tp, 0) >= end for tp, end in ends.items()):
                return now, first, staged_at if merging else None
            if time.monotonic() > deadline:
                raise RuntimeError(f"{job['system']}: {done:,} of {total:,} changes {verb} after {timeout:.0f} s")
            if now - last_print >= 5:
                print(f"    {job['system']}: {done:,}/{total:,} changes {verb} "
                      f"({timeout - (deadline - time.monotonic()):.0f} s)", flush=True)
                last_print = now
            time.sleep(0.1)

    @staticmethod
    def stop(proc: subprocess.Popen[bytes]) -> int | None:
        """SIGTERM to the root (frazil drains and commits; Spark stops its query), then whatever
        is left of its session. The exit status, or None if it had to be killed."""
        status: int | None = None
        try:
            proc.send_signal(signal.SIGTERM)
            status = proc.wait(timeout=90)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        except ProcessLookupError:
            pass
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        return status

    def began_reading(self, job: dict[str, Any]) -> float | None:
        """When the system started reading the backlog: frazil's first "positioned N
        partition(s)" log line, Spark's first batch with input (its trigger start)."""
        if job["system"] in FRAZIL_SYSTEMS:
            for line in Path(job["log"]).read_text(errors="replace").splitlines():
                m = re.match(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) \w+ \S+: positioned ", line)
                if m:
                    return datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
            return None
        path = Path(job["progress"])
        for line in (path.read_text().splitlines() if path.exists() else []):
            p = json.loads(line)
            if p.get("numInputRows", 0) > 0:
                return datetime.fromisoformat(p["timestamp"].replace("Z", "+00:00")).timestamp()
        return None

    def markers(self, proc: subprocess.Popen[bytes], job: dict[str, Any], changes: Changes,
                marks: list[tuple[int, Row]], every_s: float, timeout: float) -> dict[str, Any]:
        """Produce ``marks`` (key, row) one every ``every_s``; poll the table until a scan returns
        each one's version. Latencies in ms."""
        from pyiceberg.expressions import In

        sent: dict[int, float] = {}      # version -> wall time just before its send
        failure: list[BaseException] = []

        def send() -> None:
            async def go() -> None:
                from aiokafka import AIOKafkaProducer

                producer = AIOKafkaProducer(bootstrap_servers=self.bootstrap, linger_ms=0, acks="all",
                                            enable_idempotence=True)
                await producer.start()
                try:
                    began = time.monotonic()
                    for i, (key, row) in enumerate(marks):
                        await asyncio.sleep(max(0.0, began + i * every_s - time.monotonic()))
                        sent[row[2]] = time.time()
                        meta = await producer.send_and_wait(self.topic, encode(key, row), key=str(key).encode(),
                                                            partition=key % self.partitions)
                        changes.keys.append(key)
                        changes.rows.append(row)
                        changes.offsets.append(meta.offset)
                finally:
                    await producer.stop()
            try:
                asyncio.run(go())
            except BaseException as exc:  # noqa: BLE001 - raised again in the polling thread
                failure.append(exc)

        sender = threading.Thread(target=send, daemon=True)
        pending = {row[2]: key for key, row in marks}
        seen: dict[int, tuple[float, float]] = {}     # version -> (scan latency, commit latency), ms
        scans: list[float] = []
        last_snapshot: int | None = None
        sender.start()
        deadline = time.monotonic() + len(marks) * every_s + timeout
        last_print = time.time()
        while pending and time.monotonic() < deadline:
            if failure:
                raise RuntimeError(f"producing the markers failed: {failure[0]!r}")
            if proc.poll() is not None:
                raise RuntimeError(f"{job['system']} exited with {proc.returncode}; see {job['log']}")
            time.sleep(0.1)
            try:
                table = self.catalog.load_table(job["table"])
            except Exception:  # noqa: BLE001 - the catalog is busy for a moment
                continue
            snapshot = table.current_snapshot()
            if snapshot is None or snapshot.snapshot_id == last_snapshot:
                continue
            wanted = {v: k for v, k in pending.items() if v in sent}
            if not wanted:
                continue
            last_snapshot = snapshot.snapshot_id
            began = time.time()
            data = table.scan(row_filter=In("id", set(wanted.values())), selected_fields=("id", "version"),
                              snapshot_id=snapshot.snapshot_id).to_arrow()
            now = time.time()
            scans.append(now - began)
            found = dict(zip(data.column("id").to_pylist(), data.column("version").to_pylist(), strict=True))
            for version, key in wanted.items():
                if (found.get(key) or -1) >= version:
                    seen[version] = (1000 * (now - sent[version]), snapshot.timestamp_ms - 1000 * sent[version])
                    del pending[version]
            if now - last_print >= 5:
                print(f"    {job['system']}: {len(seen)}/{len(marks)} markers queryable", flush=True)
                last_print = now
        sender.join(timeout=30)
        scan_ms = [round(v[0]) for v in seen.values()]
        commit_ms = [round(v[1]) for v in seen.values()]
        return {"markers": len(marks), "markers_seen": len(seen), "markers_not_seen": len(pending),
                **summary("latency", scan_ms), **summary("commit_latency", commit_ms),
                "marker_scan_ms_mean": round(1000 * statistics.mean(scans)) if scans else None,
                "latencies_ms": sorted(scan_ms)}


def summary(name: str, values: list[int]) -> dict[str, Any]:
    if not values:
        return {f"{name}_p50_ms": None, f"{name}_p95_ms": None, f"{name}_max_ms": None}
    ordered = sorted(values)
    pick = lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))]  # noqa: E731
    return {f"{name}_p50_ms": pick(0.50), f"{name}_p95_ms": pick(0.95), f"{name}_max_ms": ordered[-1]}


# -- the table afterwards -------------------------------------------------------------------------

def verify(catalog: Any, table_name: str, expected: dict[int, Row]) -> dict[str, Any]:
    """The table as pyiceberg reads it against ``expected``: every difference counted."""
    data = catalog.load_table(table_name).scan(selected_fields=("id", "name", "amount", "version")).to_arrow()
    ids = data.column("id").to_pylist()
    got = dict(zip(ids, zip(data.column("name").to_pylist(), data.column("amount").to_pylist(),
                            data.column("version").to_pylist(), strict=True), strict=True))
    duplicated = sorted(k for k, n in Counter(ids).items() if n > 1)
    missing = sorted(set(expected) - set(got))
    extra = sorted(set(got) - set(expected))
    wrong = sorted(k for k in set(got) & set(expected) if got[k] != expected[k])
    return {"rows": len(ids), "expected_rows": len(expected),
            "mismatches": len(duplicated) + len(missing) + len(extra) + len(wrong),
            "duplicated_keys": len(duplicated), "missing_keys": len(missing), "extra_keys": len(extra),
            "wrong_rows": len(wrong),
            "examples": {"duplicated": duplicated[:5], "missing": missing[:5], "extra": extra[:5],
                         "wrong": [(k, got[k], expected[k]) for k in wrong[:5]]}}


def read_cost(catalog: Any, table_name: str, scans: int) -> dict[str, Any]:
    """Live data and delete files (the table's file inspection and its snapshot summary) and the
    time of a full pyiceberg scan (load + scan of every column), median of ``scans``."""
    table = catalog.load_table(table_name)
    files = table.inspect.files()
    content = Counter(files.column("content").to_pylist())
    summary_ = table.current_snapshot().summary if table.current_snapshot() else {}
    import pyarrow.parquet as pq

    codecs = Counter(pq.ParquetFile(path.removeprefix("file://")).metadata.row_group(0).column(0).compression
                     for path, kind in zip(files.column("file_path").to_pylist(), files.column("content").to_pylist(),
                                           strict=True)
                     if kind == 0)
    times = []
    for _ in range(scans):
        began = time.perf_counter()
        rows = catalog.load_table(table_name).scan().to_arrow().num_rows
        times.append(time.perf_counter() - began)
    return {"data_files": content.get(0, 0), "position_delete_files": content.get(1, 0),
            "equality_delete_files": content.get(2, 0),
            "summary_total_data_files": int(summary_.get("total-data-files", 0)),
            "summary_total_delete_files": int(summary_.get("total-delete-files", 0)),
            "summary_total_position_deletes": int(summary_.get("total-position-deletes", 0)),
            "summary_total_records": int(summary_.get("total-records", 0)),
            "snapshots": len(table.metadata.snapshots), "data_file_codecs": dict(codecs), "scan_rows": rows,
            "scan_s": round(statistics.median(times), 3), "scan_s_each": [round(t, 3) for t in times]}


def compact(spark: Any, table_name: str) -> dict[str, Any]:
    """Spark's compaction of the table: data files (every group, ``min-input-files`` 1), then the
    position-delete files (dangling ones dropped). Each procedure's result row and time."""
    out: dict[str, Any] = {}
    for procedure, options in (("rewrite_data_files", "map('min-input-files', '1')"),
                               ("rewrite_position_delete_files", "map('rewrite-all', 'true')")):
        began = time.monotonic()
        rows = spark.sql(f"CALL {CATALOG}.system.{procedure}(table => '{CATALOG}.{table_name}', "
                         f"options => {options})").collect()
        took = round(time.monotonic() - began, 1)
        after = spark.sql(f"SELECT content, count(*) AS n FROM {CATALOG}.{table_name}.files GROUP BY content").collect()
        files = {int(r["content"]): int(r["n"]) for r in after}
        out[procedure] = {**(rows[0].asDict() if rows else {}), "seconds": took,
                          "data_files_after": files.get(0, 0), "delete_files_after": files.get(1, 0) + files.get(2, 0)}
    return out


def frazil_log(path: Path) -> dict[str, Any]:
    """What frazil's log says about its commits and key index: commit times, rows replaced,
    index builds, warnings and errors."""
    text = path.read_text(errors="replace")
    commits = [(int(m.group(1)), int(m.group(2) or 0), int(m.group(3)), int(m.group(4))) for m in re.finditer(
        r"commit \S+ table=\S+ snapshot=\S+ rows=(\d+)(?: replaced=(\d+))? attempts=(\d+) took=(\d+)ms", text)]
    builds = [{"snapshot": m.group(1), "keys": int(m.group(2)), "data_files": int(m.group(3)),
               "mib": float(m.group(4)) if m.group(4) else None, "ms": int(m.group(5))}
              for m in re.finditer(r"key index built from snapshot (\S+): (\d+) keys in (\d+) data file\(s\),"
                                   r"(?: ([\d.]+) MiB,)? (\d+) ms", text)]
    # the worker's side of each cycle: rows (changes) replied, files, and where its time went
    replies = [{"changes": int(m.group(1)), "files": int(m.group(2)), "ms": int(m.group(3)),
                "drain": int(m.group(4)), "load": int(m.group(5)), "write": int(m.group(6))}
               for m in re.finditer(r"replied to commit \S+: (\d+) rows in (\d+) file\(s\).*?; (\d+) ms after "
                                    r"StartCommit \(drain (\d+), load (\d+), write (\d+)", text)]
    took = sorted(c[3] for c in commits)
    # the merge flush: each merge's staged changes and time, and when its line was logged (epoch s)
    merges = [{"at": _log_time(m.group(1)), "changes": int(m.group(3)), "seconds": float(m.group(4))}
              for m in re.finditer(r"^(\S+ \S+) \w+ \S+: merge table=(\S+) from \S+: (\d+) staged change\(s\) "
                                   r"merged in ([\d.]+)s", text, re.MULTILINE)]
    failed = [{"at": _log_time(m.group(1)), "error": m.group(2)[:300]}
              for m in re.finditer(r"^(\S+ \S+) ERROR \S+: merge of \S+ into \S+ failed: (.*)$", text, re.MULTILINE)]
    problems = [line for line in text.splitlines()
                if re.search(r" (WARNING|ERROR|CRITICAL) ", line) or "Traceback" in line]
    return {"commits": len(commits), "rows": sum(c[0] for c in commits), "replaced": sum(c[1] for c in commits),
            "commit_attempts_over_1": sum(1 for c in commits if c[2] > 1),
            "commit_ms_p50": took[len(took) // 2] if took else None, "commit_ms_max": took[-1] if took else None,
            "commit_ms_by_cycle": [c[3] for c in commits], "replaced_by_cycle": [c[1] for c in commits],
            "key_index_builds": builds, "worker_cycles": replies, "merges": merges, "merges_failed": failed,
            "warnings_and_errors": len(problems), "problem_lines": problems[:20]}


def _log_time(stamp: str) -> float:
    return datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp()


def merge_figures(log: dict[str, Any], target: Any, pipeline: str, launched: float) -> dict[str, Any]:
    """The merge flush's merges: from frazil's log, each merge that finished (its staged changes
    and seconds, logged once the merged staging rows are deleted) and each failed one; from the
    target table's history, each MERGE that committed (a merge whose cleanup of the staging table
    failed committed its MERGE but logs no time). Times in s from launch."""
    merges = log.get("merges", [])
    took = sorted(m["seconds"] for m in merges)
    key = merged_key(pipeline)
    commits = [{"at_s": round(s.timestamp_ms / 1000 - launched, 1),
                "added_records": int(s.summary.additional_properties.get("added-records", 0)),
                "added_position_deletes": int(s.summary.additional_properties.get("added-position-deletes", 0))}
               for s in sorted(target.metadata.snapshots, key=lambda s: s.timestamp_ms)
               if s.summary is not None and key in s.summary.additional_properties]
    return {"merges": len(merges), "merges_failed": len(log.get("merges_failed", [])),
            "merge_s_p50": took[len(took) // 2] if took else None, "merge_s_max": took[-1] if took else None,
            "merge_s_each": [m["seconds"] for m in merges], "merge_changes_each": [m["changes"] for m in merges],
            "merge_logged_s_each": [round(m["at"] - launched, 1) for m in merges],
            "merge_failed_s_each": [round(m["at"] - launched, 1) for m in log.get("merges_failed", [])],
            "merge_commits": len(commits), "merge_commits_each": commits}


def spark_batches(path: Path) -> dict[str, Any]:
    """Spark's batches with input: rows and trigger time (ms) of each."""
    batches = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    return {"batches": len(batches), "batch_rows": [b.get("numInputRows") for b in batches],
            "batch_ms": [b.get("durationMs", {}).get("triggerExecution") for b in batches]}


# -- the run --------------------------------------------------------------------------------------

def run_system(bench: Bench, system: str, changes: Changes, args: argparse.Namespace,
               next_marker: list[int]) -> dict[str, Any]:
    job = bench.job(system, args.spark_max_offsets_per_trigger)
    ends = bench.ends()
    total = sum(ends.values())
    print(f"{system}: landing {total:,} changes", flush=True)
    state = source_state()   # the code the system runs: frazil imports its modules at start
    proc, launched = bench.launch(job)
    monitor = TreeMonitor(proc.pid)
    row: dict[str, Any] = {"system": system, "table": job["table"], "changes": total,
                           "load_average_at_launch": [round(x, 2) for x in os.getloadavg()]}
    if system in FRAZIL_SYSTEMS:
        row["source"] = state
    try:
        done_at, first, staged_at = bench.wait_committed(proc, job, ends, timeout=args.timeout)
        usage = monitor.stop()
        began = None
        for _ in range(50):   # Spark's progress line of the batch is written just after its commit
            began = bench.began_reading(job)
            if began is not None:
                break
            time.sleep(0.1)
        row.update({
            "seconds": round(done_at - began, 2) if began else None,
            "changes_per_s": round(total / (done_at - began)) if began else None,
            "startup_s": round(began - launched, 2) if began else None,
            "seconds_from_launch": round(done_at - launched, 2),
            "changes_per_s_from_launch": round(total / (done_at - launched)),
            "first_commit_s_from_launch": round(first[0] - launched, 2) if first else None,
            "first_commit_changes": first[1] if first else None, **usage,
            "cpu_s_per_million": round(usage["cpu_s"] * 1e6 / total, 1)})
        staged = ""
        if staged_at is not None:   # the merge flush: when the staging table held every change
            row["staged_s"] = round(staged_at - began, 2) if began else None
            row["staged_s_from_launch"] = round(staged_at - launched, 2)
            staged = f"; all staged at {row['staged_s']} s"
        print(f"  {system}: {total:,} changes {'merged' if staged_at is not None else 'committed'} "
              f"in {row['seconds']} s from the first read ({row['changes_per_s'] or 0:,} changes/s; "
              f"{row['seconds_from_launch']} s from launch, {row['changes_per_s_from_launch']:,} changes/s{staged}), "
              f"rss {usage['rss_peak_mb']:,.0f} MiB, cpu {usage['cpu_s']:,.0f} s", flush=True)
        # latency: marker updates of existing keys, after catch-up
        marks = []
        for _ in range(args.markers):
            i = next_marker[0]
            next_marker[0] += 1
            key = (i * 7919 + 13) % args.keys
            marks.append((key, (f"marker {i}", float(i), args.changes + 1 + i)))
        print(f"  {system}: {len(marks)} marker changes, one every {args.marker_every} s", flush=True)
        row.update(bench.markers(proc, job, changes, marks, args.marker_every, timeout=120))
        print(f"  {system}: produce-to-queryable p50 {row['latency_p50_ms']} ms, p95 {row['latency_p95_ms']} ms, "
              f"max {row['latency_max_ms']} ms ({row['markers_seen']}/{row['markers']} seen)", flush=True)
        final = bench.ends()
        bench.wait_committed(proc, job, final, timeout=300)
    finally:
        row["exit_status"] = bench.stop(proc)
    bench.finals[system] = final
    row["final_offsets"] = {f"{t}[{p}]": o for (t, p), o in sorted(final.items())}
    if system in FRAZIL_SYSTEMS:
        row["frazil_log"] = frazil_log(Path(job["log"]))
        if system == "frazil-spark-merge":
            row.update(merge_figures(row["frazil_log"], bench.catalog.load_table(job["table"]), job["name"], launched))
            staging = bench.catalog.load_table(job["table"] + STAGING_SUFFIX)
            row["staging_table"] = {"name": job["table"] + STAGING_SUFFIX,
                                    "rows_left": staging.scan().to_arrow().num_rows,
                                    "snapshots": len(staging.metadata.snapshots)}
            print(f"  {system}: {row['merge_commits']} MERGE commits at "
                  f"{[c['at_s'] for c in row['merge_commits_each']]} s from launch; {row['merges']} merges logged "
                  f"done, p50 {row['merge_s_p50']} s, max {row['merge_s_max']} s: {row['merge_s_each']}; "
                  f"{row['merges_failed']} logged failed, at {row['merge_failed_s_each']} s; "
                  f"{row['staging_table']['rows_left']} rows left in the staging table", flush=True)
    else:
        row["spark"] = spark_batches(Path(job["progress"]))
    expected = changes.expected(bench.partitions, final)
    print(f"  {system}: checking the table against the expected {len(expected):,} rows", flush=True)
    row["check"] = verify(bench.catalog, job["table"], expected)
    row["read_cost"] = read_cost(bench.catalog, job["table"], args.scans)
    c, r = row["check"], row["read_cost"]
    print(f"  {system}: {c['mismatches']} mismatches ({c['missing_keys']} missing, {c['extra_keys']} extra, "
          f"{c['duplicated_keys']} duplicated, {c['wrong_rows']} wrong); {r['data_files']} data files "
          f"{r['data_file_codecs']}, {r['position_delete_files']} delete files "
          f"({r['summary_total_position_deletes']:,} position deletes), full scan {r['scan_s']} s", flush=True)
    return row


def after_compaction(bench: Bench, rows: list[dict[str, Any]], changes: Changes, scans: int) -> None:
    from frazil.spark import jars, session

    print("compaction on Spark (local[2]) of every table", flush=True)
    spark = session.get(session.conf(CATALOG, bench.props, jars=jars.jars(), master="local[2]",
                                     app_name="bench-upsert-compact",
                                     extra={"spark.driver.memory": "3g", "spark.ui.showConsoleProgress": "false"}))
    try:
        # the first procedure call of a session loads and compiles what the rest reuse: warm up on a
        # scratch table, so that no system's compaction time carries it
        began = time.monotonic()
        scratch = f"{CATALOG}.bench.compaction_warmup"
        spark.sql(f"CREATE TABLE {scratch} (id BIGINT, v STRING) USING iceberg TBLPROPERTIES ('format-version' = '2', "
                  "'write.delete.mode' = 'merge-on-read')")
        for i in range(3):
            spark.sql(f"INSERT INTO {scratch} VALUES ({i}, 'x'), ({i + 10}, 'y')")
        spark.sql(f"DELETE FROM {scratch} WHERE id = 1")
        compact(spark, "bench.compaction_warmup")
        print(f"  Spark warmed up on a scratch table in {time.monotonic() - began:.0f} s", flush=True)
        for row in rows:
            row["compaction"] = compact(spark, row["table"])
            expected = changes.expected(bench.partitions, bench.finals[row["system"]])
            row["check_after_compaction"] = verify(bench.catalog, row["table"], expected)
            row["read_cost_after_compaction"] = read_cost(bench.catalog, row["table"], scans)
            c, r = row["check_after_compaction"], row["read_cost_after_compaction"]
            took = ", ".join(f"{k} {v['seconds']} s" for k, v in row["compaction"].items())
            print(f"  {row['system']}: compacted ({took}); {c['mismatches']} mismatches; {r['data_files']} data files "
                  f"{r['data_file_codecs']}, {r['position_delete_files']} delete files, full scan {r['scan_s']} s",
                  flush=True)
    finally:
        session.stop()


PAIRS = (("frazil", "spark-ss-merge"), ("frazil-spark-merge", "spark-ss-merge"), ("frazil", "frazil-spark-merge"))


def ratios(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per pair "a vs b" of the systems run: a over b for changes/s; b over a for latency and
    scan time (above 1: a ahead)."""
    by = {r["system"]: r for r in rows}

    def over(a: Any, b: Any) -> float | None:
        return round(a / b, 2) if a is not None and b else None

    out: dict[str, Any] = {}
    for first, second in PAIRS:
        f, s = by.get(first), by.get(second)
        if f is None or s is None:
            continue
        pair = {"changes_per_s": over(f["changes_per_s"], s["changes_per_s"]),
                "changes_per_s_from_launch": over(f["changes_per_s_from_launch"], s["changes_per_s_from_launch"]),
                "latency_p50": over(s["latency_p50_ms"], f["latency_p50_ms"]),
                "latency_p95": over(s["latency_p95_ms"], f["latency_p95_ms"]),
                "scan_before_compaction": over(s["read_cost"]["scan_s"], f["read_cost"]["scan_s"])}
        if "read_cost_after_compaction" in f and "read_cost_after_compaction" in s:
            pair["scan_after_compaction"] = over(s["read_cost_after_compaction"]["scan_s"],
                                                 f["read_cost_after_compaction"]["scan_s"])
        out[f"{first} vs {second}"] = pair
    return out


def print_summary(rows: list[dict[str, Any]], versus: dict[str, Any]) -> None:
    print("\nsummary")
    print(f"  {'system':<20}{'changes/s':>11}{'(launch)':>10}{'p50 ms':>8}{'p95 ms':>8}{'max ms':>8}{'mism.':>7}"
          f"{'files':>7}{'dels':>6}{'scan s':>8}{'| files':>8}{'dels':>6}{'scan s':>8}{'mism.':>7}")
    for r in rows:
        c, a = r["read_cost"], r.get("read_cost_after_compaction", {})
        after = (f"{a.get('data_files', ''):>8}{a.get('position_delete_files', ''):>6}{a.get('scan_s', ''):>8}"
                 f"{r.get('check_after_compaction', {}).get('mismatches', ''):>7}")
        print(f"  {r['system']:<20}{r['changes_per_s'] or 0:>11,}{r['changes_per_s_from_launch']:>10,}"
              f"{r['latency_p50_ms'] or 0:>8,}{r['latency_p95_ms'] or 0:>8,}{r['latency_max_ms'] or 0:>8,}"
              f"{r['check']['mismatches']:>7}{c['data_files']:>7}{c['position_delete_files']:>6}{c['scan_s']:>8}{after}")
    print("  (left of '|': before compaction; right: after)")
    for r in rows:
        if "merges" in r:
            print(f"  {r['system']}: {r['merge_commits']} MERGE commits; {r['merges']} merges logged done (p50 "
                  f"{r['merge_s_p50']} s, max {r['merge_s_max']} s), {r['merges_failed']} failed; every change staged "
                  f"at {r.get('staged_s')} s, merged at {r['seconds']} s from the first read")
    for pair, figures in versus.items():
        print(f"  {pair}: " + ", ".join(f"{k.replace('_', ' ')} {v:.2f}x" for k, v in figures.items() if v is not None)
              + f"  (above 1: {pair.split(' vs ')[0]} ahead)")


def source_state() -> dict[str, Any]:
    """The commit frazil runs from and its files changed in the work tree (uncommitted changes
    are measured too)."""
    def git(*argv: str) -> str:
        try:
            return subprocess.run(["git", *argv], cwd=HERE.parent, capture_output=True, text=True, check=True).stdout
        except (OSError, subprocess.CalledProcessError):
            return ""
    import frazil

    changed = [line[3:] for line in git("status", "--porcelain", "--", "python", "rust").splitlines()]
    # the systems' processes import frazil as this one does (the same sys.path, PYTHONPATH included)
    return {"frazil_imported_from": str(Path(frazil.__file__).parent),
            "git_head": git("rev-parse", "--short", "HEAD").strip(),
            "uncommitted_files_in_checkout": changed}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--changes", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--tombstones", type=float, default=0.10, help="share of changes that are tombstones")
    parser.add_argument("--seed", type=int, default=17)
    parser.add_argument("--interval", type=float, default=2.0, help="commit interval / trigger of every system, s")
    parser.add_argument("--systems", nargs="+", default=list(SYSTEMS), choices=SYSTEMS)
    parser.add_argument("--markers", type=int, default=40, help="marker changes of the latency phase")
    parser.add_argument("--marker-every", type=float, default=0.5, help="seconds between marker changes")
    parser.add_argument("--scans", type=int, default=3, help="full scans timed per table (median)")
    parser.add_argument("--no-compaction", action="store_true")
    parser.add_argument("--spark-max-offsets-per-trigger", type=int, default=0,
                        help="Spark's maxOffsetsPerTrigger (0: Spark's default, the whole backlog in one batch)")
    parser.add_argument("--timeout", type=float, default=1800, help="longest wait for a system to catch up, s")
    parser.add_argument("--out", default="upsert", help="results name: benches/results/<out>.json")
    args = parser.parse_args()
    load_at_start = [round(x, 2) for x in os.getloadavg()]
    workdir = Path(".run/bench-upsert").resolve()
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    began = time.monotonic()
    topic = "upserts"
    print(f"generating {args.changes:,} changes over {args.keys:,} keys ({args.tombstones:.0%} tombstones)", flush=True)
    ids, rows_ = generate(args.changes, args.keys, args.tombstones, args.seed)
    changes = Changes()
    rows: list[dict[str, Any]] = []
    with KafkaBroker.start(workdir / "kafka", heap="1g") as broker:
        bench = Bench(workdir, broker.bootstrap, topic, args.partitions, args.interval)
        asyncio.run(create_topic(broker.bootstrap, topic, args.partitions))
        asyncio.run(produce(broker.bootstrap, topic, args.partitions, changes, ids, rows_, label=f"pre-fill {topic}"))
        del ids, rows_
        nbytes = sum(len(encode(k, r) or b"") for k, r in zip(changes.keys, changes.rows, strict=True))
        print(f"topic {topic}: {len(changes.keys):,} changes, {nbytes / 1e6:,.0f} MB of values, "
              f"{len(changes.expected(args.partitions, bench.ends())):,} live keys at the end", flush=True)
        next_marker = [0]
        for system in args.systems:
            rows.append(run_system(bench, system, changes, args, next_marker))
        if not args.no_compaction:
            after_compaction(bench, rows, changes, args.scans)
    versus = ratios(rows)
    print_summary(rows, versus)
    machine = {"cpus": os.cpu_count(), "python": platform.python_version(), "commit_interval_s": args.interval,
               "partitions": args.partitions, "wall_s": round(time.monotonic() - began),
               "load_average_at_start": load_at_start, "load_average_at_end": [round(x, 2) for x in os.getloadavg()]}
    workload = {"changes": args.changes, "keys": args.keys, "tombstones": args.tombstones, "seed": args.seed,
                "markers_per_system": args.markers, "marker_every_s": args.marker_every,
                "spark_max_offsets_per_trigger": args.spark_max_offsets_per_trigger or None}
    _results.write(args.out, rows, ratios=versus, workload=workload, machine=machine)
    return 0


if __name__ == "__main__":
    sys.exit(main())
