"""Scale of one coordinator: CPU per commit cycle by source partitions and tables.

One real ``Coordinator`` runs its cycles over the in-process channel (``LocalTopic``, single
mode's control topic) against simulated workers, for every (partitions, tables) cell:

- the partitions are spread evenly over one topic per table (a table takes its topic's records);
- ``--per-worker`` partitions per worker (100: 10, 100 and 1,000 workers), assigned round-robin
  over the sorted topic-partitions as aiokafka's default assignor does, so a worker holds
  partitions of many tables;
- on each StartCommit each worker answers, in one transaction of its own, with one
  ``DataWritten`` per table it holds partitions of (one data file, one range per partition) and a
  ``DataComplete`` naming its partitions with their watermarks; the workers yield between
  replies, so the coordinator polls the replies as they come (a real control topic delivers
  them one transaction at a time, or a few).

What is measured, per cycle (``coordinator.cycle()``, StartCommit to CommitComplete):

- ``coord_cpu_s``: the coordinator's own CPU: the event-loop thread's CPU time
  (``time.thread_time``) over the cycle, less the simulated workers' share of it, which they
  measure around each reply (building and sending it) and each read of the channel, the only
  places they run; the table commits run in threads and are not in it;
- ``commit_cpu_s`` / ``commit_wall_s``: the table commits (``commit_table``, each in a worker
  thread): CPU time of those threads and wall time. In the first pass they are a stub that lands
  nothing (the coordinator alone); in the catalog pass they are frazil's real committer
  (``table_committer``) on a pyiceberg ``SqlCatalog`` (SQLite) in a temporary directory;
- ``cycle_wall_s``: the cycle end to end, and ``process_cpu_s``: every thread's CPU over it,
  simulated workers included;
- ``decode_s`` (first pass): what decoding the cycle's events would cost the coordinator on the
  Kafka control topic (``codec.decode`` of every event of one cycle, encoded beforehand).

Each cell runs ``--warmup`` cycles, then ``--cycles`` measured ones (median and max reported);
the catalog pass runs fewer (``--catalog-warmup``, ``--catalog-cycles``) on the cells of
``--catalog-cells``. The daemon's garbage-collector settings (``tune_gc``) are applied, as
``frazil run`` does. Writes ``benches/results/coordinator_scale.json``.

    python benches/coordinator_scale.py [--partitions 1000,10000,100000] [--tables 10,100,1000]
        [--cycles 5] [--catalog-cells 1000x10,10000x1000,100000x1000:1] [--no-catalog]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import platform
import shutil
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyiceberg
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField

import _results
from frazil.coordination.commit_state import TableCommit, TopicPartition
from frazil.coordination.coordinator import CommitTable, Coordinator, table_committer
from frazil.coordination.local import LocalChannel, LocalTopic
from frazil.daemon import tune_gc
from frazil.events import codec
from frazil.events.payloads import (
    Assignment,
    DataComplete,
    DataFileRef,
    DataWritten,
    Event,
    OffsetRange,
    Payload,
    StartCommit,
)
from frazil.iceberg.committer import CommitResult

PIPELINE = "bench"
NAMESPACE = "bench"
RECORDS = 1000   # per partition per cycle


def table_name(k: int) -> str:
    return f"{NAMESPACE}.t{k:04d}"


def topic_name(k: int) -> str:
    return f"topic{k:04d}"


@dataclass(frozen=True)
class Layout:
    partitions: int
    tables: int
    per_worker: int

    @property
    def workers(self) -> int:
        return max(1, self.partitions // self.per_worker)

    def topic_partitions(self) -> list[TopicPartition]:
        per_topic = self.partitions // self.tables
        return sorted((topic_name(k), p) for k in range(self.tables) for p in range(per_topic))

    def assignment(self) -> list[dict[str, list[TopicPartition]]]:
        """Per worker: its partitions by table (round-robin over the sorted topic-partitions)."""
        out: list[dict[str, list[TopicPartition]]] = [{} for _ in range(self.workers)]
        for i, tp in enumerate(self.topic_partitions()):
            out[i % self.workers].setdefault(table_name(int(tp[0].removeprefix("topic"))), []).append(tp)
        return out


class Workers:
    """The simulated workers: one reader of the channel, one sender each; answer every StartCommit."""

    def __init__(self, topic: LocalTopic, layout: Layout, warehouse: str) -> None:
        self._topic, self._warehouse = topic, warehouse
        self._reader = LocalChannel(topic, group=PIPELINE, member="workers-reader")
        self._senders = [LocalChannel(topic, group=PIPELINE, member=f"worker-{i}") for i in range(layout.workers)]
        self._plan = layout.assignment()
        self.cpu = 0.0        # event-loop CPU spent by the workers (building, sending, reading)
        self.cycles = 0
        self.keep = False    # set: the next cycle's replies are kept in ``kept``
        self.kept: list[Event] = []

    async def run(self) -> None:
        await self._reader.start()
        while True:
            await self._topic.wait(self._reader.position, 3600)
            began = time.thread_time()
            received = self._topic.read(self._reader.position)
            self._reader.position = self._topic.end
            starts = [r.event.payload for r in received if isinstance(r.event.payload, StartCommit)]
            self.cpu += time.thread_time() - began
            for start in starts:
                await self._answer(start.commit_id)

    async def _answer(self, commit_id: str) -> None:
        start, end = self.cycles * RECORDS, (self.cycles + 1) * RECORDS
        self.cycles += 1
        keep, self.keep = self.keep, False
        for i, (sender, tables) in enumerate(zip(self._senders, self._plan, strict=True)):
            began = time.thread_time()
            payloads: list[Payload] = []
            for name, tps in sorted(tables.items()):
                path = f"{self._warehouse}/{name}/data/{commit_id}-{i}.parquet"
                ref = DataFileRef(path, "PARQUET", RECORDS * len(tps), 4096 * len(tps), 0)
                payloads.append(DataWritten(commit_id, name, (ref,),
                                            tuple(OffsetRange(t, p, start, end, 1) for t, p in tps)))
            owned = tuple(Assignment(t, p, 1, end, end) for tps in tables.values() for t, p in sorted(tps))
            payloads.append(DataComplete(commit_id, tuple(sorted(owned, key=lambda a: (a.topic, a.partition))),
                                         int(time.time() * 1000)))
            await sender.send(payloads)
            if keep:
                self.kept += [Event(PIPELINE, f"worker-{i}", 0, payload=p) for p in payloads]
            self.cpu += time.thread_time() - began
            await asyncio.sleep(0)   # the next worker's reply comes in a later poll


@dataclass
class Commits:
    """Wraps ``commit_table``: the CPU and wall time of the table commits, in their threads."""

    inner: CommitTable
    cpu: float = 0.0
    wall: float = 0.0
    calls: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, table: TableCommit, commit_id: str, vtts: int | None) -> CommitResult:
        began, cpu = time.perf_counter(), time.thread_time()
        try:
            return self.inner(table, commit_id, vtts)
        finally:
            with self.lock:
                self.cpu += time.thread_time() - cpu
                self.wall += time.perf_counter() - began
                self.calls += 1


def stub_commit(table: TableCommit, commit_id: str, vtts: int | None) -> CommitResult:
    """Lands nothing: what a table commit returns, from what it was given."""
    return CommitResult(commit_id, 1, sum(f.record_count for f in table.files),
                        {(r.topic, r.partition): r.end for r in table.ranges}, 1, 0.0, table=table.table)


def real_catalog(directory: Path, tables: int) -> SqlCatalog:
    catalog = SqlCatalog(PIPELINE, uri=f"sqlite:///{directory}/catalog.db", warehouse=f"file://{directory}/warehouse")
    catalog.create_namespace(NAMESPACE)
    schema = Schema(NestedField(1, "v", LongType(), required=False))
    for k in range(tables):
        catalog.create_table(table_name(k), schema)
    return catalog


@dataclass
class Cycle:
    coord_cpu_s: float
    commit_cpu_s: float
    commit_wall_s: float
    cycle_wall_s: float
    process_cpu_s: float


async def run_cell(layout: Layout, commit: CommitTable, *, warmup: int, cycles: int, warehouse: str,
                   decode: bool = False) -> tuple[list[Cycle], dict[str, Any]]:
    topic = LocalTopic()
    channel = LocalChannel(topic, group=PIPELINE, member="coordinator", coordinator=True)
    await channel.start()
    workers = Workers(topic, layout, warehouse)
    runner = asyncio.create_task(workers.run())
    await asyncio.sleep(0)
    commits = Commits(commit)
    partitions = frozenset(layout.topic_partitions())
    coordinator = Coordinator(channel, PIPELINE, partitions, commits, timeout_s=3600)
    measured: list[Cycle] = []
    extra: dict[str, Any] = {}
    try:
        for n in range(warmup + cycles):
            workers.keep = decode and n == warmup
            worker_cpu, commit_cpu, commit_wall = workers.cpu, commits.cpu, commits.wall
            wall, cpu, process = time.perf_counter(), time.thread_time(), time.process_time()
            results = await coordinator.cycle()
            cycle = Cycle(coord_cpu_s=time.thread_time() - cpu - (workers.cpu - worker_cpu),
                          commit_cpu_s=commits.cpu - commit_cpu, commit_wall_s=commits.wall - commit_wall,
                          cycle_wall_s=time.perf_counter() - wall, process_cpu_s=time.process_time() - process)
            if len(results) != layout.tables:
                raise SystemExit(f"cycle {n}: {len(results)} table commits, expected {layout.tables}")
            for _ in range(3):
                await asyncio.sleep(0)   # the workers read CommitComplete outside the next cycle
            if n >= warmup:
                measured.append(cycle)
        if decode:
            extra.update(decode_cost(workers.kept))
    finally:
        runner.cancel()
    return measured, extra


def decode_cost(events: list[Event]) -> dict[str, Any]:
    """What decoding one cycle's replies costs a coordinator reading the Kafka control topic."""
    encoded = [codec.encode(e) for e in events]
    began = time.thread_time()
    for i, data in enumerate(encoded):
        codec.decode(data, where=f"control[0]@{i}")
    return {"events": len(encoded), "event_bytes": sum(map(len, encoded)),
            "decode_s": round(time.thread_time() - began, 4)}


def summary(cycles: list[Cycle]) -> dict[str, float]:
    out: dict[str, float] = {}
    for name in Cycle.__dataclass_fields__:
        values = [getattr(c, name) for c in cycles]
        out[name.replace("_s", "_median_s") if name.endswith("_s") else name] = round(statistics.median(values), 4)
        out[name.replace("_s", "_max_s")] = round(max(values), 4)
    return out


def cells(text: str, cycles: int) -> Iterator[tuple[int, int, int]]:
    """``PARTITIONSxTABLES[:CYCLES]`` cells, comma-separated: (partitions, tables, measured cycles)."""
    for cell in text.split(","):
        if cell.strip():
            size, _, n = cell.partition(":")
            p, t = size.lower().split("x")
            yield int(p), int(t), int(n) if n else cycles


def ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=ints, default=[1000, 10_000, 100_000])
    parser.add_argument("--tables", type=ints, default=[10, 100, 1000])
    parser.add_argument("--per-worker", type=int, default=100, help="partitions per simulated worker")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--cycles", type=int, default=5)
    parser.add_argument("--catalog-cells", default="1000x10,1000x100,1000x1000,10000x10,10000x100,10000x1000,"
                        "100000x10,100000x100,100000x1000:1",
                        help="PARTITIONSxTABLES[:CYCLES] cells for the real-catalog pass, comma-separated ('' for "
                             "none); CYCLES: measured cycles, else --catalog-cycles")
    parser.add_argument("--catalog-warmup", type=int, default=1)
    parser.add_argument("--catalog-cycles", type=int, default=3)
    parser.add_argument("--no-catalog", action="store_true", help="skip the real-catalog pass")
    parser.add_argument("--out", default="coordinator_scale")
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    tune_gc()

    rows: list[dict[str, Any]] = []
    print(f"{'pass':<8}{'partitions':>11}{'tables':>7}{'workers':>8}{'coord cpu med/max s':>22}"
          f"{'commit cpu/wall s':>19}{'cycle wall s':>13}{'decode s':>10}", flush=True)

    def show(row: dict[str, Any]) -> None:
        print(f"{row['pass']:<8}{row['partitions']:>11,}{row['tables']:>7,}{row['workers']:>8,}"
              f"{row['coord_cpu_median_s']:>12.3f}/{row['coord_cpu_max_s']:<9.3f}"
              f"{row['commit_cpu_median_s']:>9.3f}/{row['commit_wall_median_s']:<9.3f}"
              f"{row['cycle_wall_median_s']:>13.3f}{row.get('decode_s', float('nan')):>10.3f}", flush=True)

    for p in args.partitions:
        for t in args.tables:
            layout = Layout(p, t, args.per_worker)
            measured, extra = asyncio.run(run_cell(layout, stub_commit, warmup=args.warmup, cycles=args.cycles,
                                                   warehouse="file:///nowhere", decode=True))
            row = {"pass": "stub", "partitions": p, "tables": t, "workers": layout.workers,
                   "warmup": args.warmup, "cycles": len(measured), **summary(measured), **extra}
            rows.append(row)
            show(row)
    if not args.no_catalog:
        for p, t, n in cells(args.catalog_cells, args.catalog_cycles):
            layout = Layout(p, t, args.per_worker)
            directory = Path(tempfile.mkdtemp(prefix="frazil-coordinator-bench-"))
            try:
                began = time.perf_counter()
                catalog = real_catalog(directory, t)
                created = time.perf_counter() - began
                commit = table_committer(catalog, PIPELINE, max_attempts=3)
                measured, extra = asyncio.run(run_cell(layout, commit, warmup=args.catalog_warmup,
                                                       cycles=n, warehouse=f"file://{directory}"))
            finally:
                shutil.rmtree(directory, ignore_errors=True)
            row = {"pass": "catalog", "partitions": p, "tables": t, "workers": layout.workers,
                   "warmup": args.catalog_warmup, "cycles": len(measured), "create_tables_s": round(created, 1),
                   **summary(measured), **extra}
            rows.append(row)
            show(row)
    machine = {"cpus": os.cpu_count(), "python": platform.python_version(), "pyiceberg": pyiceberg.__version__,
               "sqlite": sqlite3.sqlite_version, "per_worker": args.per_worker, "records_per_partition": RECORDS}
    _results.write(args.out, rows, machine=machine)
    return 0


if __name__ == "__main__":
    sys.exit(main())
